//! The config file: the control plane's URL and a token, written by `airtime login` with mode
//! 0600 (it holds a credential), read by every other command. Flags and environment variables
//! override it (clap reads those: `--url`/`AIRTIME_URL`, `--token`/`AIRTIME_TOKEN`).

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::Failure;

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The control plane, e.g. `http://airtime:8080`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A session or API token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// Where the config file is: `explicit` (`--config`, `AIRTIME_CONFIG`), else
/// `$XDG_CONFIG_HOME/airtime/config.toml`, else `~/.config/airtime/config.toml`.
pub fn path(explicit: Option<&Path>) -> Result<PathBuf, Failure> {
    if let Some(path) = explicit {
        return Ok(path.to_owned());
    }
    let nonempty = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    let base = match (nonempty("XDG_CONFIG_HOME"), nonempty("HOME")) {
        (Some(xdg), _) => xdg,
        (None, Some(home)) => home.join(".config"),
        (None, None) => {
            return Err(Failure::Usage(
                "no config file: set AIRTIME_CONFIG (neither XDG_CONFIG_HOME nor HOME is set)".into(),
            ));
        }
    };
    Ok(base.join("airtime").join("config.toml"))
}

/// Reads the config file; a missing one is empty.
pub fn load(path: &Path) -> Result<Config, Failure> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
        Err(err) => return Err(Failure::Usage(format!("cannot read the config file {}: {err}", path.display()))),
    };
    if let Ok(meta) = fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        eprintln!("airtime: warning: {} is readable by others; it holds a token (chmod 600 it)", path.display());
    }
    toml::from_str(&text).map_err(|err| Failure::Usage(format!("the config file {} is invalid: {err}", path.display())))
}

/// Writes the config file with mode 0600 (its directory 0700 when created), replacing it whole.
pub fn save(path: &Path, config: &Config) -> Result<(), Failure> {
    let local = |what: &str, err: std::io::Error| Failure::Local(format!("cannot {what} {}: {err}", path.display()));
    let text = toml::to_string(config).map_err(|err| Failure::Local(format!("cannot encode the config: {err}")))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| local("create the directory of", e))?;
    }
    // A temporary file beside it, renamed over it: a crash never leaves half a file, and the
    // token is never in a file anyone else may read.
    let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "config".into());
    let tmp = path.with_file_name(format!(".{file_name}.{}.tmp", std::process::id()));
    let written = (|| {
        let mut file = fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        file.write_all(b"# Written by `airtime login`: the control plane and a token. Keep it private.\n")?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if let Err(err) = written {
        let _ = fs::remove_file(&tmp);
        return Err(local("write", err));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_config_reads_back_and_only_its_owner_may_read_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/airtime/config.toml");
        assert_eq!(load(&path).unwrap(), Config::default(), "a missing file is empty");
        let config = Config { url: Some("http://cp:8080".into()), token: Some("at_secret".into()) };
        save(&path, &config).unwrap();
        assert_eq!(load(&path).unwrap(), config);
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        // Saved again over a file that was too open: 0600 again.
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        save(&path, &Config { token: None, ..config }).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(load(&path).unwrap().token, None);
    }

    #[test]
    fn an_invalid_config_is_named_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        fs::write(&path, "url = [1, 2]\n").unwrap();
        let Err(Failure::Usage(message)) = load(&path) else { panic!("not refused") };
        assert!(message.contains("is invalid"), "{message}");
    }
}
