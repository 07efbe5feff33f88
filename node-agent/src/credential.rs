//! The node's credential: obtained once by exchanging a one-time enrolment token
//! (`POST /api/v1/agent/enrol`), kept in `<state-dir>/node-credential` (mode 0600, in a directory
//! of mode 0700) and sent as `Authorization: Bearer` on every later call. A restarted agent reads it
//! back and needs no new enrolment token.
//!
//! Neither the enrolment token nor the credential is ever logged: both travel in [`Secret`], whose
//! `Debug` is redacted.

use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// The credential's file name in the state directory.
pub const FILE_NAME: &str = "node-credential";

/// A bearer secret (an enrolment token or a node credential). `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(secret: impl Into<String>) -> Self {
        Self(secret.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Self {
        Self(s)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(«redacted»)")
    }
}

#[derive(Debug, Error)]
pub enum CredentialError {
    #[error("state directory {path}: {reason}")]
    StateDir { path: String, reason: String },
    #[error("credential file {path}: {reason}")]
    File { path: String, reason: String },
}

/// Where the credential lives.
pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(FILE_NAME)
}

/// The stored credential, if the agent enrolled before.
pub fn load(state_dir: &Path) -> Result<Option<Secret>, CredentialError> {
    let file = path(state_dir);
    match std::fs::read_to_string(&file) {
        Ok(content) => {
            let credential = content.trim();
            if credential.is_empty() {
                return Err(CredentialError::File {
                    path: file.display().to_string(),
                    reason: "empty; delete it and enrol again".into(),
                });
            }
            Ok(Some(Secret::new(credential)))
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(CredentialError::File { path: file.display().to_string(), reason: error.to_string() }),
    }
}

/// Stores a new credential: written to a temporary file readable by the owner only, then renamed
/// over the old one, so a crash never leaves half a credential.
pub fn store(state_dir: &Path, credential: &Secret) -> Result<(), CredentialError> {
    let dir_error = |reason: String| CredentialError::StateDir { path: state_dir.display().to_string(), reason };
    std::fs::create_dir_all(state_dir).map_err(|e| dir_error(e.to_string()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(state_dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| dir_error(e.to_string()))?;
    }
    let file = path(state_dir);
    let temporary = state_dir.join(format!("{FILE_NAME}.tmp"));
    let file_error = |reason: String| CredentialError::File { path: file.display().to_string(), reason };
    let _ = std::fs::remove_file(&temporary);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut out = options.open(&temporary).map_err(|e| file_error(e.to_string()))?;
    out.write_all(credential.expose().as_bytes())
        .and_then(|()| out.sync_all())
        .map_err(|e| file_error(e.to_string()))?;
    std::fs::rename(&temporary, &file).map_err(|e| file_error(e.to_string()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credential_is_stored_privately_and_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        assert!(load(&state).expect("absent").is_none());
        store(&state, &Secret::new("nc_secret")).expect("stored");
        assert_eq!(load(&state).expect("read"), Some(Secret::new("nc_secret")));
        store(&state, &Secret::new("nc_newer")).expect("replaced");
        assert_eq!(load(&state).expect("read"), Some(Secret::new("nc_newer")));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(path(&state)).expect("metadata").permissions().mode();
            assert_eq!(mode & 0o077, 0, "group and others cannot read it");
        }
    }

    #[test]
    fn a_secret_never_prints() {
        assert!(!format!("{:?}", Secret::new("nc_abc")).contains("abc"));
    }
}
