//! The tether: a workload's work dies with its agent.
//!
//! The agent does not start a workload's command itself but `airtime-node-agent __tether <agent
//! pid> <grace ms> -- <command…>`: this small process, the leader of the workload's process group,
//! starts the command in its group (before it blocks any signal: a child inherits the mask), asks
//! the kernel for a signal when its parent dies (`PR_SET_PDEATHSIG`, set in this process after it
//! started — no code between fork and exec, so no `unsafe`), checks that the agent is still its
//! parent, and waits. When the agent dies — killed with SIGKILL, crashed, OOM-killed — the
//! tether stops the whole group as the agent would have: SIGTERM (the checkpoint signal), then
//! SIGKILL after the grace period. Before, such a workload ran on, re-parented to init, until an
//! agent of the node started again; and its requeued copy ran elsewhere at the same time.
//!
//! Otherwise the tether is transparent: the agent's SIGTERM and SIGKILL to the group reach the
//! command as before (the tether ignores SIGTERM and dies with SIGKILL), the command's exit code
//! becomes the tether's, and a command killed by a signal makes the tether die by the same signal,
//! so the agent reports exactly what it reported without one.
//!
//! The tether also outlives its agent where the agent asks: with `--lease-file` it is the
//! workload's supervisor across agent restarts, as slurmstepd and conmon are. When the agent is
//! gone it keeps the command running while the node's lease (a `CLOCK_BOOTTIME` deadline in
//! milliseconds that the agent rewrites at every answered heartbeat) is current: a restarted agent
//! renews it and re-adopts the workload; an agent that stays down lets it pass, and the tether
//! fences the work then, before the control plane requeues it. With `--keep` (`--on-lost-contact
//! keep`) it never fences. With `--exit-file` it writes how the command ended there (`code N` or
//! `signal N`), for an agent that adopted it and so cannot wait for it.
//!
//! The parent-death signal fires when the *thread* that forked exits: the agent starts workloads
//! from its async runtime's worker threads, which live as long as the agent.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use nix::sys::signal::{SigSet, SigmaskHow, Signal, killpg, raise, sigprocmask};
use nix::unistd::{Pid, alarm, getpgrp, getppid};

/// The first argument that makes the agent's binary a tether.
pub const TETHER_ARG: &str = "__tether";

/// What a tether does besides waiting: where its command's environment is, and whom it runs as.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Launch {
    /// A file of `NAME=value` entries, each ended by a NUL byte, that the tether reads, removes,
    /// and adds to its command's environment (never to its own: the tether is the agent's binary,
    /// and a tenant's `LD_PRELOAD` must not run in it).
    pub env_file: Option<std::path::PathBuf>,
    /// Run the command as this uid and gid, with no supplementary groups and no new privileges.
    pub user: Option<(u32, u32)>,
    /// What the tether does when its agent is gone (nothing for an untethered launch).
    pub orphaned: Orphaned,
    /// Where the tether writes how its command ended.
    pub exit_file: Option<std::path::PathBuf>,
}

/// What a tether does when its agent process is gone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Orphaned {
    /// Stop the workload at once (SIGTERM, SIGKILL after the grace period).
    #[default]
    Fence,
    /// Keep it running while the lease in this file is current (a restarted agent renews it and
    /// adopts the workload); fence it once the lease has passed or the file cannot be read.
    WhileLeased(std::path::PathBuf),
    /// Keep it running (`--on-lost-contact keep`).
    Keep,
}

/// The arguments that run `command` tethered to the agent `agent_pid` (0: not tethered, only
/// launched as `launch` says).
pub fn arguments(
    agent_pid: u32,
    grace: Duration,
    launch: &Launch,
    command: impl IntoIterator<Item = OsString>,
) -> Vec<OsString> {
    let mut args: Vec<OsString> =
        vec![TETHER_ARG.into(), agent_pid.to_string().into(), grace.as_millis().to_string().into()];
    if let Some(file) = &launch.env_file {
        args.push("--env-file".into());
        args.push(file.clone().into());
    }
    if let Some((uid, gid)) = launch.user {
        args.push("--user".into());
        args.push(format!("{uid}:{gid}").into());
    }
    match &launch.orphaned {
        Orphaned::Fence => {}
        Orphaned::WhileLeased(file) => {
            args.push("--lease-file".into());
            args.push(file.clone().into());
        }
        Orphaned::Keep => args.push("--keep".into()),
    }
    if let Some(file) = &launch.exit_file {
        args.push("--exit-file".into());
        args.push(file.clone().into());
    }
    args.push("--".into());
    args.extend(command);
    args
}

/// Whether `program` would start, as `execvp` would find it: a name with a `/` must be an
/// executable file (relative to `work_dir`, where the command runs), a bare name one in a
/// directory of `search_path`. The runner checks this before it starts a tether, so a command that
/// cannot start still fails to start, with the error exec would give, instead of becoming a tether
/// that exits 127.
pub fn check_program(program: &OsStr, search_path: Option<&OsStr>, work_dir: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt as _;
    use std::os::unix::fs::PermissionsExt as _;
    let executable = |path: &Path| -> std::io::Result<()> {
        let meta = std::fs::metadata(path)?;
        if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
            Ok(())
        } else {
            Err(std::io::Error::from_raw_os_error(nix::errno::Errno::EACCES as i32))
        }
    };
    if program.as_bytes().contains(&b'/') {
        return executable(&work_dir.join(program));
    }
    let not_found = || std::io::Error::from_raw_os_error(nix::errno::Errno::ENOENT as i32);
    let mut denied = None;
    for dir in std::env::split_paths(search_path.ok_or_else(not_found)?) {
        match executable(&work_dir.join(dir).join(program)) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => denied = Some(e),
            Err(_) => {}
        }
    }
    Err(denied.unwrap_or_else(not_found))
}

/// Why a tether could not run its command.
#[derive(Debug, thiserror::Error)]
pub enum TetherError {
    #[error(
        "usage: {TETHER_ARG} <agent pid> <grace ms> [--env-file PATH] [--user UID:GID] [--lease-file PATH | --keep] \
         [--exit-file PATH] -- <command> [args…]"
    )]
    Usage,
    #[error("{what}: {source}")]
    Os { what: &'static str, source: nix::Error },
    #[error("cannot start {program:?}: {source}")]
    Spawn { program: OsString, source: std::io::Error },
}

fn os(what: &'static str) -> impl FnOnce(nix::Error) -> TetherError {
    move |source| TetherError::Os { what, source }
}

/// Runs the tether (`args` after [`TETHER_ARG`]) and never returns: the process ends as its
/// command did. A tether that cannot start its command exits with 127, as a shell does.
pub fn main(args: Vec<OsString>) -> ! {
    match run(args) {
        Ok((status, exit_file)) => {
            if let Some(file) = exit_file {
                write_exit_file(&file, status);
            }
            end_as(status)
        }
        Err(error) => {
            say(&format!("airtime tether: {error}"));
            std::process::exit(127)
        }
    }
}

fn run(args: Vec<OsString>) -> Result<(std::process::ExitStatus, Option<std::path::PathBuf>), TetherError> {
    let mut args = args.into_iter();
    let agent: i32 = args.next().and_then(|a| a.to_str()?.parse().ok()).ok_or(TetherError::Usage)?;
    let grace_ms: u64 = args.next().and_then(|a| a.to_str()?.parse().ok()).ok_or(TetherError::Usage)?;
    let mut launch = Launch::default();
    loop {
        match args.next().as_ref().and_then(|a| a.to_str()) {
            Some("--") => break,
            Some("--env-file") => launch.env_file = Some(args.next().ok_or(TetherError::Usage)?.into()),
            Some("--user") => {
                let user = args.next().ok_or(TetherError::Usage)?;
                let (uid, gid) = user.to_str().and_then(|u| u.split_once(':')).ok_or(TetherError::Usage)?;
                launch.user =
                    Some((uid.parse().map_err(|_| TetherError::Usage)?, gid.parse().map_err(|_| TetherError::Usage)?));
            }
            Some("--lease-file") => {
                launch.orphaned = Orphaned::WhileLeased(args.next().ok_or(TetherError::Usage)?.into())
            }
            Some("--keep") => launch.orphaned = Orphaned::Keep,
            Some("--exit-file") => launch.exit_file = Some(args.next().ok_or(TetherError::Usage)?.into()),
            _ => return Err(TetherError::Usage),
        }
    }
    let program = args.next().ok_or(TetherError::Usage)?;
    let rest: Vec<OsString> = args.collect();

    // The command first, while this process blocks nothing: a child inherits the signal mask, and
    // a command that starts with SIGTERM blocked could only be ended by SIGKILL.
    let mut command = Command::new(&program);
    command.args(&rest);
    if let Some(file) = &launch.env_file {
        let env = crate::isolation::take_tether_env_file(file)
            .map_err(|source| TetherError::Spawn { program: file.clone().into(), source })?;
        command.envs(env);
    }
    if let Some((uid, gid)) = launch.user {
        // No exec from here on gains privileges (set-user-id programs, file capabilities): not
        // this process's, which has what it needs, and not the command's, which inherits it.
        nix::sys::prctl::set_no_new_privs().map_err(os("asking for no new privileges"))?;
        // The standard library drops the supplementary groups, then sets the group, then the user.
        command.uid(uid).gid(gid);
    }
    let mut child = command.spawn().map_err(|source| TetherError::Spawn { program: program.clone(), source })?;
    // Then the signals this process waits for, blocked so they queue for `wait`. (Until here a
    // SIGTERM to the group ends this process by its default action, as it ends the command.)
    let mut waited = SigSet::empty();
    for signal in [Signal::SIGHUP, Signal::SIGTERM, Signal::SIGINT, Signal::SIGCHLD, Signal::SIGALRM] {
        waited.add(signal);
    }
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&waited), None).map_err(os("blocking signals"))?;
    let mut state = State::Attended;
    if agent != 0 {
        nix::sys::prctl::set_pdeathsig(Signal::SIGHUP).map_err(os("asking for the parent-death signal"))?;
    }
    // The agent may have died before the line above: then no signal will come.
    if agent != 0 && getppid() != Pid::from_raw(agent) {
        state = agent_gone(agent, grace_ms, &launch.orphaned)?;
    }
    loop {
        if let Some(status) =
            child.try_wait().map_err(|e| TetherError::Spawn { program: program.clone(), source: e })?
        {
            if state == State::Fencing {
                // The command ended within its grace period; end whatever it left in the group.
                let _ = killpg(getpgrp(), Signal::SIGKILL);
            }
            return Ok((status, launch.exit_file));
        }
        match waited.wait().map_err(os("waiting for signals"))? {
            Signal::SIGHUP if agent != 0 && state == State::Attended && getppid() != Pid::from_raw(agent) => {
                state = agent_gone(agent, grace_ms, &launch.orphaned)?;
            }
            Signal::SIGALRM if state == State::Fencing => {
                // The grace period is over: the group, this process included, ends now.
                killpg(getpgrp(), Signal::SIGKILL).map_err(os("killing the workload's group"))?;
            }
            Signal::SIGALRM if state == State::Leased => {
                if let Orphaned::WhileLeased(file) = &launch.orphaned
                    && !lease_current(file)
                {
                    say("airtime tether: the node's lease has passed and no node agent renewed it");
                    state = fence(agent, grace_ms)?;
                } else {
                    alarm::set(LEASE_CHECK_S);
                }
            }
            // SIGCHLD: look again. SIGTERM/SIGINT: the agent stopping the group (the command got
            // it too). A stray SIGHUP while the agent lives: nothing to do.
            _ => {}
        }
    }
}

/// Where a tether stands with its agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The agent that started it lives.
    Attended,
    /// The agent is gone; the lease keeps the workload running (checked every second).
    Leased,
    /// The agent is gone and so is the lease, or nothing was to outlive the agent: stopping.
    Fencing,
    /// The agent is gone and the workload runs on regardless (`--keep`).
    Kept,
}

/// How often an orphaned tether reads the lease.
const LEASE_CHECK_S: u32 = 1;

/// The agent is gone: fence at once, or watch the lease, or keep running, as `orphaned` says.
fn agent_gone(agent: i32, grace_ms: u64, orphaned: &Orphaned) -> Result<State, TetherError> {
    match orphaned {
        Orphaned::Fence => fence(agent, grace_ms),
        // Quietly: the workload's stderr is its own, and an agent restart is no event of its.
        Orphaned::WhileLeased(file) if lease_current(file) => {
            alarm::set(LEASE_CHECK_S);
            Ok(State::Leased)
        }
        Orphaned::WhileLeased(_) => fence(agent, grace_ms),
        Orphaned::Keep => Ok(State::Kept),
    }
}

/// Now on `CLOCK_BOOTTIME`, in milliseconds: the clock of the lease file, which no wall-clock
/// change moves and which counts a suspended host's sleep.
pub fn boottime_ms() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map(|t| (t.tv_sec() as u64).saturating_mul(1000).saturating_add(t.tv_nsec() as u64 / 1_000_000))
        .unwrap_or(0)
}

/// Whether the lease in `file` (a `CLOCK_BOOTTIME` deadline, ms) is still ahead; an unreadable or
/// malformed file is a lease that passed.
pub fn lease_current(file: &Path) -> bool {
    std::fs::read_to_string(file)
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .is_some_and(|deadline| boottime_ms() < deadline)
}

/// Records how the command ended, for an agent that adopted this tether (written whole, then
/// renamed into place, so a reader never sees half of it).
fn write_exit_file(file: &Path, status: std::process::ExitStatus) {
    let text = match (status.code(), status.signal()) {
        (Some(code), _) => format!("code {code}\n"),
        (None, Some(signal)) => format!("signal {signal}\n"),
        (None, None) => "unknown\n".to_owned(),
    };
    let partial = file.with_extension("partial");
    if std::fs::write(&partial, text).and_then(|()| std::fs::rename(&partial, file)).is_err() {
        say(&format!("airtime tether: cannot record the exit in {}", file.display()));
    }
}

/// Reads what [`write_exit_file`] wrote: the status as `wait` reports it, `None` when the file is
/// missing or malformed.
pub fn read_exit_file(file: &Path) -> Option<std::process::ExitStatus> {
    let text = std::fs::read_to_string(file).ok()?;
    let (kind, number) = text.trim().split_once(' ')?;
    let number: i32 = number.parse().ok()?;
    match kind {
        "code" => Some(std::process::ExitStatus::from_raw((number & 0xff) << 8)),
        "signal" => Some(std::process::ExitStatus::from_raw(number & 0x7f)),
        _ => None,
    }
}

/// One line on stderr, if anyone still reads it: the agent that read the workload's output is
/// usually the one that just died, and a write to its pipe fails (`eprintln!` would panic).
fn say(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// The agent is gone: SIGTERM to the workload's group now, and an alarm for the grace period,
/// after which the loop kills the group.
fn fence(agent: i32, grace_ms: u64) -> Result<State, TetherError> {
    say(&format!(
        "airtime tether: the node agent (pid {agent}) is gone; stopping the workload (SIGTERM, SIGKILL after \
         {grace_ms} ms)"
    ));
    killpg(getpgrp(), Signal::SIGTERM).map_err(os("signalling the workload's group"))?;
    // Whole seconds, rounded up, and at least one.
    alarm::set(grace_ms.div_ceil(1000).max(1) as u32);
    Ok(State::Fencing)
}

/// Ends this process as `status` ended its command: the same exit code, or the same signal.
fn end_as(status: std::process::ExitStatus) -> ! {
    if let Some(code) = status.code() {
        std::process::exit(code);
    }
    if let Some(signal) = status.signal().and_then(|s| Signal::try_from(s).ok()) {
        // Raised while blocked (if it is one of ours) it waits; unblocked, it takes its default
        // action, which for the signals that end a process is to end it.
        let _ = raise(signal);
        let mut only = SigSet::empty();
        only.add(signal);
        let _ = sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&only), None);
        // A signal whose default is not to end a process (none ends a command this way, but the
        // type allows it): exit as a shell reports it.
        std::process::exit(128 + signal as i32);
    }
    std::process::exit(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arguments_name_the_agent_the_grace_and_the_command() {
        let command = || ["sh".into(), "-c".into(), "exit 3".into()];
        let args = arguments(42, Duration::from_millis(1500), &Launch::default(), command());
        let args: Vec<&str> = args.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(args, [TETHER_ARG, "42", "1500", "--", "sh", "-c", "exit 3"]);
        let launch = Launch { env_file: Some("/run/e".into()), user: Some((7, 8)), ..Launch::default() };
        let args = arguments(0, Duration::from_millis(1), &launch, command());
        let args: Vec<&str> = args.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(args, [TETHER_ARG, "0", "1", "--env-file", "/run/e", "--user", "7:8", "--", "sh", "-c", "exit 3"]);
        let launch = Launch {
            orphaned: Orphaned::WhileLeased("/s/lease".into()),
            exit_file: Some("/s/w/exit".into()),
            ..Launch::default()
        };
        let args = arguments(9, Duration::from_millis(1), &launch, command());
        let args: Vec<&str> = args.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(
            args,
            [TETHER_ARG, "9", "1", "--lease-file", "/s/lease", "--exit-file", "/s/w/exit", "--", "sh", "-c", "exit 3"]
        );
    }

    #[test]
    fn an_exit_file_reads_back_as_the_status_the_command_ended_with() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("exit");
        assert_eq!(read_exit_file(&file), None, "no file: no status");
        for status in [
            std::process::ExitStatus::from_raw(0),
            std::process::ExitStatus::from_raw(3 << 8),
            std::process::ExitStatus::from_raw(9),
            std::process::ExitStatus::from_raw(15),
        ] {
            write_exit_file(&file, status);
            assert_eq!(read_exit_file(&file), Some(status));
            assert_eq!(read_exit_file(&file).map(|s| (s.code(), s.signal())), Some((status.code(), status.signal())));
        }
        std::fs::write(&file, "code x").unwrap();
        assert_eq!(read_exit_file(&file), None, "malformed: no status");
    }

    #[test]
    fn a_lease_is_current_until_its_deadline_and_a_missing_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("lease");
        assert!(!lease_current(&file));
        std::fs::write(&file, (boottime_ms() + 60_000).to_string()).unwrap();
        assert!(lease_current(&file));
        std::fs::write(&file, boottime_ms().saturating_sub(1).to_string()).unwrap();
        assert!(!lease_current(&file));
        std::fs::write(&file, "soon").unwrap();
        assert!(!lease_current(&file));
    }

    #[test]
    fn a_program_that_cannot_start_is_found_out_before_the_tether_starts() {
        let dir = tempfile::tempdir().unwrap();
        let path = Some(OsStr::new("/usr/bin:/bin"));
        assert!(check_program(OsStr::new("sh"), path, dir.path()).is_ok());
        assert!(check_program(OsStr::new("/bin/sh"), None, dir.path()).is_ok());
        let missing = check_program(OsStr::new("/no/such/program"), path, dir.path()).unwrap_err();
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
        let missing = check_program(OsStr::new("no-such-program-anywhere"), path, dir.path()).unwrap_err();
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
        std::fs::write(dir.path().join("data.txt"), "not a program").unwrap();
        let denied = check_program(OsStr::new("./data.txt"), path, dir.path()).unwrap_err();
        assert_eq!(denied.kind(), std::io::ErrorKind::PermissionDenied);
    }

    #[test]
    fn bad_arguments_are_a_usage_error() {
        for args in
            [vec![], vec!["x"], vec!["1", "2", "sh"], vec!["1", "2", "--"], vec!["1", "2", "--user", "x", "--", "sh"]]
        {
            let args = args.into_iter().map(OsString::from).collect();
            assert!(matches!(run(args), Err(TetherError::Usage)));
        }
    }
}
