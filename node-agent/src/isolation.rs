//! What keeps a tenant's workload on its side of the node.
//!
//! - Its environment is data, never the agent's: a container's `env` reaches the engine in an
//!   env file (`--env-file`, mode 0600, in the agent's private directory, removed when the
//!   container ends), and a process's reaches its tether the same way; the engine client runs
//!   with a fixed environment ([`engine_environment`]), so no `LD_PRELOAD`, `PATH` or
//!   `CONTAINERS_CONF` of a tenant's choosing ever applies to a host process the agent starts.
//! - A container's mount source is resolved on the node ([`resolve_mount_source`]): no symbolic
//!   link in any component (`openat2` with `RESOLVE_NO_SYMLINKS`), under the node's own
//!   `--container-mount-prefix` when it has one, and bound with `--mount type=bind` and no
//!   options of the tenant's.
//! - A process workload runs as a user the agent does not share ([`ProcessUsers`]), with no new
//!   privileges, in a directory of its own; the agent's state directory and credential stay the
//!   agent's (0700/0600).

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// The `PATH` the engine client runs with, whatever the agent's or the workload's.
pub const FIXED_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

/// The variables of the agent's *own* environment the engine client keeps: where the engine's
/// configuration, storage, socket and credentials are. A workload's env never reaches the client.
pub const ENGINE_VARIABLES: [&str; 20] = [
    "HOME",
    "USER",
    "LOGNAME",
    "TMPDIR",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "CONTAINERS_CONF",
    "CONTAINERS_STORAGE_CONF",
    "CONTAINERS_REGISTRIES_CONF",
    "REGISTRY_AUTH_FILE",
    "CONTAINER_HOST",
    "DOCKER_HOST",
    "DOCKER_CONFIG",
    "DOCKER_CERT_PATH",
    "DOCKER_TLS_VERIFY",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "LANG",
];

/// The engine client's whole environment: [`FIXED_PATH`] and the [`ENGINE_VARIABLES`] the agent
/// itself was started with.
pub fn engine_environment() -> Vec<(OsString, OsString)> {
    let mut env = vec![(OsString::from("PATH"), OsString::from(FIXED_PATH))];
    env.extend(ENGINE_VARIABLES.iter().filter_map(|name| Some((OsString::from(name), std::env::var_os(name)?))));
    env
}

/// Finds `program` as `execvp` would in [`FIXED_PATH`] (a name with a `/` is taken as given).
pub fn find_program(program: &Path) -> PathBuf {
    if program.as_os_str().as_encoded_bytes().contains(&b'/') {
        return program.to_owned();
    }
    std::env::split_paths(FIXED_PATH)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| program.to_owned())
}

/// Writes `content` to `dir/name`, readable by its owner (the agent) alone, replacing a file left
/// there before; `dir` is created 0700 when missing.
fn write_private(dir: &Path, name: &str, content: &[u8]) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    let path = dir.join(name);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
    file.write_all(content)?;
    file.sync_all()?;
    Ok(path)
}

/// A container's environment as the engine's `--env-file` (one `NAME=value` a line). A value with
/// a line break cannot be written so; it is refused rather than cut.
pub fn write_engine_env_file(dir: &Path, name: &str, vars: &[(String, String)]) -> Result<PathBuf, String> {
    let mut text = String::new();
    for (key, value) in vars {
        if value.contains(['\n', '\r']) {
            return Err(format!("env {key} holds a line break, which a container's environment file cannot carry"));
        }
        text.push_str(key);
        text.push('=');
        text.push_str(value);
        text.push('\n');
    }
    write_private(dir, name, text.as_bytes()).map_err(|e| format!("cannot write the environment file: {e}"))
}

/// A process's environment for its tether: `NAME=value` entries, each ended by a NUL byte.
pub fn write_tether_env_file(dir: &Path, name: &str, vars: &[(String, String)]) -> Result<PathBuf, String> {
    let mut bytes = Vec::new();
    for (key, value) in vars {
        bytes.extend_from_slice(key.as_bytes());
        bytes.push(b'=');
        bytes.extend_from_slice(value.as_bytes());
        bytes.push(0);
    }
    write_private(dir, name, &bytes).map_err(|e| format!("cannot write the environment file: {e}"))
}

/// Reads (and removes) a file [`write_tether_env_file`] wrote.
pub fn take_tether_env_file(path: &Path) -> std::io::Result<Vec<(OsString, OsString)>> {
    use std::os::unix::ffi::OsStrExt as _;
    let bytes = std::fs::read(path)?;
    std::fs::remove_file(path)?;
    Ok(bytes
        .split(|b| *b == 0)
        .filter_map(|entry| {
            let eq = entry.iter().position(|b| *b == b'=')?;
            let name = std::ffi::OsStr::from_bytes(&entry[..eq]).to_owned();
            let value = std::ffi::OsStr::from_bytes(&entry[eq + 1..]).to_owned();
            Some((name, value))
        })
        .collect())
}

/// Removes a file, if it is there.
pub fn remove_quietly(path: &Path) {
    if let Err(e) = std::fs::remove_file(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), error = %e, "cannot remove a workload's environment file");
    }
}

/// Characters a mount path may not hold: the engine's option separators (`src:dst:U`, `a,b`).
const MOUNT_SEPARATORS: [char; 2] = [':', ','];

/// Why a container's mount `target` is refused, if it is.
pub fn check_mount_target(target: &str) -> Result<(), String> {
    if !target.starts_with('/') || target.contains(MOUNT_SEPARATORS) || target.chars().any(char::is_control) {
        return Err(format!(
            "mount target {target:?} must be an absolute path without ':' or ',' (no engine options such as :U or :O)"
        ));
    }
    Ok(())
}

/// Resolves a container's mount `source` on this node: it must exist, hold no symbolic link in any
/// component (a link a tenant's earlier container planted in a writable mount would otherwise
/// carry the mount anywhere on the host), no `.`, `..`, `:` or `,`, and lie under one of
/// `prefixes` (the node's own `--container-mount-prefix`; none: the control plane's check stands
/// alone). Returns the path to bind.
pub fn resolve_mount_source(source: &str, prefixes: &[PathBuf]) -> Result<PathBuf, String> {
    let clean = source.starts_with('/')
        && !source.contains(MOUNT_SEPARATORS)
        && !source.chars().any(char::is_control)
        && (source == "/" || source[1..].split('/').all(|c| !c.is_empty() && c != "." && c != ".."));
    if !clean {
        return Err(format!("mount source {source:?} must be an absolute path without ., .., ':' or ','"));
    }
    let path = PathBuf::from(source);
    no_symlinks(&path).map_err(|why| format!("mount source {source}: {why}"))?;
    if !prefixes.is_empty() && !prefixes.iter().any(|prefix| path.starts_with(prefix)) {
        let allowed: Vec<String> = prefixes.iter().map(|p| p.display().to_string()).collect();
        return Err(format!(
            "mount source {source} is not under a directory this node allows ({})",
            allowed.join(", ")
        ));
    }
    Ok(path)
}

/// Checks that `path` (absolute and clean) names something that exists, reached through no
/// symbolic link.
fn no_symlinks(path: &Path) -> Result<(), String> {
    use nix::errno::Errno;
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};
    let how = OpenHow::new()
        // Not O_NOFOLLOW: with O_PATH it would open a trailing link itself instead of refusing it.
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    match openat2(nix::fcntl::AT_FDCWD, path, how) {
        Ok(_fd) => Ok(()),
        Err(Errno::ELOOP) => {
            Err("a component of the path is a symbolic link; mount sources are resolved without following links".into())
        }
        Err(Errno::ENOENT) => Err("does not exist on this node".into()),
        // A kernel before 5.6: the canonical path must be the path itself.
        Err(Errno::ENOSYS | Errno::E2BIG | Errno::EPERM) => match std::fs::canonicalize(path) {
            Ok(real) if real == path => Ok(()),
            Ok(real) => Err(format!(
                "resolves to {} through a symbolic link; mount sources are resolved without following links",
                real.display()
            )),
            Err(e) => Err(e.to_string()),
        },
        Err(e) => Err(e.desc().to_owned()),
    }
}

/// Who a process workload runs as (`--process-user`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessUser {
    /// The agent's own user (the default: no process user configured).
    Agent,
    /// One unprivileged user for every process workload.
    Fixed { uid: u32, gid: u32 },
    /// A uid of its own per running workload, from this range (the group has the same number).
    Range { first: u32, last: u32 },
}

impl ProcessUser {
    /// Parses `--process-user`: a user name, a uid (`65534`, `65534:65534` with its group), or a
    /// range of uids (`200000-200999`), each workload then running as one no other holds.
    pub fn parse(text: &str) -> Result<ProcessUser, String> {
        let text = text.trim();
        if let Some((first, last)) = text.split_once('-')
            && let (Ok(first), Ok(last)) = (first.parse::<u32>(), last.parse::<u32>())
        {
            if first == 0 || last < first {
                return Err(format!("the uid range {text} must be FIRST-LAST with 0 < FIRST <= LAST"));
            }
            return Ok(ProcessUser::Range { first, last });
        }
        if let Some((uid, gid)) = text.split_once(':')
            && let (Ok(uid), Ok(gid)) = (uid.parse::<u32>(), gid.parse::<u32>())
        {
            return Ok(ProcessUser::Fixed { uid, gid });
        }
        if let Ok(uid) = text.parse::<u32>() {
            let gid = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
                .ok()
                .flatten()
                .map_or(uid, |u| u.gid.as_raw());
            return Ok(ProcessUser::Fixed { uid, gid });
        }
        match nix::unistd::User::from_name(text) {
            Ok(Some(user)) => Ok(ProcessUser::Fixed { uid: user.uid.as_raw(), gid: user.gid.as_raw() }),
            Ok(None) => Err(format!("no user named {text:?} on this node")),
            Err(e) => Err(format!("cannot look up user {text:?}: {e}")),
        }
    }

    /// Why the agent cannot run process workloads as this user, if it cannot: a user it shares
    /// (root, or the agent's own), or an agent that is not root and so cannot switch users.
    pub fn check(&self) -> Result<(), String> {
        let agent = nix::unistd::geteuid().as_raw();
        let (low, high) = match *self {
            ProcessUser::Agent => return Ok(()),
            ProcessUser::Fixed { uid, .. } => (uid, uid),
            ProcessUser::Range { first, last } => (first, last),
        };
        if low == 0 || (low..=high).contains(&agent) {
            return Err("--process-user must name a user the agent does not run as, and not root".into());
        }
        if agent != 0 {
            return Err(
                "--process-user needs the agent to run as root (it switches to that user for each process)".into()
            );
        }
        Ok(())
    }
}

/// The uids process workloads hold while they run.
#[derive(Debug, Default)]
pub struct UidPool {
    held: BTreeSet<u32>,
}

impl UidPool {
    /// The uid and gid for a new process workload: `None` for the agent's own user; an error when
    /// the range has none free.
    pub fn take(&mut self, user: &ProcessUser) -> Result<Option<(u32, u32)>, String> {
        match *user {
            ProcessUser::Agent => Ok(None),
            ProcessUser::Fixed { uid, gid } => Ok(Some((uid, gid))),
            ProcessUser::Range { first, last } => {
                let free = (first..=last).find(|uid| !self.held.contains(uid)).ok_or_else(|| {
                    format!("every uid of the process-user range {first}-{last} is held by a running workload")
                })?;
                self.held.insert(free);
                Ok(Some((free, free)))
            }
        }
    }

    pub fn give_back(&mut self, uid: u32) {
        self.held.remove(&uid);
    }

    /// Marks `uid` held by a workload this agent adopted.
    pub fn hold(&mut self, uid: u32) {
        self.held.insert(uid);
    }
}

/// A process workload's own directory under `work_dir`, owned by `uid:gid`, mode 0700 (one left
/// by an earlier attempt is removed first).
pub fn workload_dir(work_dir: &Path, name: &str, uid: u32, gid: u32) -> std::io::Result<PathBuf> {
    let dir = work_dir.join(name);
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::create_dir(&dir)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
    Ok(dir)
}

/// Which kinds of workload this node takes (`--workloads`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WorkloadKinds {
    /// Container workloads only: no tenant code runs on the host outside a container.
    Containers,
    /// Process workloads only.
    Processes,
    All,
}

impl WorkloadKinds {
    pub fn processes(self) -> bool {
        self != WorkloadKinds::Containers
    }
    pub fn containers(self) -> bool {
        self != WorkloadKinds::Processes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlink_anywhere_in_a_mount_source_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink("/", dir.path().join("rootlink")).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("reallink")).unwrap();
        let base = dir.path().to_str().unwrap();
        assert!(resolve_mount_source(&format!("{base}/real"), &[]).is_ok());
        for linked in [format!("{base}/rootlink"), format!("{base}/rootlink/etc"), format!("{base}/reallink")] {
            let error = resolve_mount_source(&linked, &[]).unwrap_err();
            assert!(error.contains("symbolic link"), "{error}");
        }
        let error = resolve_mount_source(&format!("{base}/real"), &[PathBuf::from("/elsewhere")]).unwrap_err();
        assert!(error.contains("not under a directory this node allows"), "{error}");
        for bad in [format!("{base}/real:U"), format!("{base}/a,b"), format!("{base}/../x"), "rel".to_owned()] {
            assert!(resolve_mount_source(&bad, &[]).is_err(), "{bad}");
        }
        assert!(check_mount_target("/data:O").is_err());
        assert!(check_mount_target("/data").is_ok());
    }

    #[test]
    fn env_files_are_private_and_exact() {
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().join("run");
        let vars = vec![("A".to_owned(), "x=y z".to_owned()), ("B".to_owned(), String::new())];
        let path = write_engine_env_file(&private, "w.env", &vars).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "A=x=y z\nB=\n");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(&private).unwrap().permissions().mode() & 0o777, 0o700);
        let broken = vec![("A".to_owned(), "two\nlines".to_owned())];
        assert!(write_engine_env_file(&private, "w.env", &broken).unwrap_err().contains("line break"));

        let vars = vec![("A".to_owned(), "two\nlines".to_owned()), ("LD_PRELOAD".to_owned(), "/x.so".to_owned())];
        let path = write_tether_env_file(&private, "t.env", &vars).unwrap();
        let read = take_tether_env_file(&path).unwrap();
        assert_eq!(read, vec![("A".into(), "two\nlines".into()), ("LD_PRELOAD".into(), "/x.so".into())]);
        assert!(!path.exists(), "read once, then removed");
    }

    #[test]
    fn process_users_are_parsed_and_never_root() {
        assert_eq!(ProcessUser::parse("200-201"), Ok(ProcessUser::Range { first: 200, last: 201 }));
        assert_eq!(ProcessUser::parse("1234:99"), Ok(ProcessUser::Fixed { uid: 1234, gid: 99 }));
        assert!(ProcessUser::parse("0-10").is_err());
        assert!(ProcessUser::parse("no-such-user-here").is_err());
        assert!(ProcessUser::Fixed { uid: 0, gid: 0 }.check().is_err());
        let mut pool = UidPool::default();
        let range = ProcessUser::Range { first: 200, last: 201 };
        assert_eq!(pool.take(&range), Ok(Some((200, 200))));
        assert_eq!(pool.take(&range), Ok(Some((201, 201))));
        assert!(pool.take(&range).is_err());
        pool.give_back(200);
        assert_eq!(pool.take(&range), Ok(Some((200, 200))));
        assert_eq!(pool.take(&ProcessUser::Agent), Ok(None));
    }
}
