//! The CUDA Multi-Process Service for `--gpu-sharing mps` on real GPUs: the agent joins the MPS
//! control daemon already listening in its pipe directory, or starts one there
//! (`nvidia-cuda-mps-control -d`, with `CUDA_MPS_PIPE_DIRECTORY` and `CUDA_MPS_LOG_DIRECTORY`).
//!
//! The daemon outlives the agent, which does not stop it: workloads are gone with their agent, an
//! idle daemon holds no GPU, and the next agent joins it. Workloads find it through
//! `CUDA_MPS_PIPE_DIRECTORY`, which the runner sets for every workload on an MPS GPU.

use std::io::Write as _;
use std::os::unix::fs::DirBuilderExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::config::MpsConfig;

/// How long one call of the control program may take.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(10);
/// `ETXTBSY`: a program just written can be busy for a moment while another thread's fork holds
/// it open.
const TEXT_FILE_BUSY: i32 = 26;

/// The MPS control daemon this node's MPS GPUs are served by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MpsDaemon {
    /// A daemon was already listening in the pipe directory.
    Joined { pipe_directory: PathBuf },
    /// The agent started it.
    Started { pipe_directory: PathBuf },
}

impl MpsDaemon {
    /// Where it listens (`CUDA_MPS_PIPE_DIRECTORY`), absolute.
    pub fn pipe_directory(&self) -> &Path {
        match self {
            Self::Joined { pipe_directory } | Self::Started { pipe_directory } => pipe_directory,
        }
    }
}

/// Joins the daemon listening in `config.pipe_directory`, or starts one. Blocking: it runs the
/// control program (at most [`CONTROL_TIMEOUT`] a call). The error says why MPS is not available,
/// in words for the node's sharing note.
pub fn start_or_join(config: &MpsConfig) -> Result<MpsDaemon, String> {
    let absolute = |dir: &Path| {
        std::path::absolute(dir).map_err(|e| format!("cannot resolve the MPS directory {}: {e}", dir.display()))
    };
    let pipe_directory = absolute(&config.pipe_directory)?;
    let log_directory = absolute(&config.log_directory)?;
    for dir in [&pipe_directory, &log_directory] {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot create the MPS directory {}: {e}", dir.display()))?;
    }
    let control =
        |args: &[&str], input: Option<&str>| run_control(&config.control, args, input, &pipe_directory, &log_directory);
    // Only a listening daemon answers a query; without one the control program fails.
    if control(&[], Some("get_server_list\n"))?.success() {
        tracing::info!(pipe_directory = %pipe_directory.display(), "joined the MPS control daemon");
        return Ok(MpsDaemon::Joined { pipe_directory });
    }
    let status = control(&["-d"], None)?;
    if !status.success() {
        return Err(format!(
            "`{} -d` {}; its log is in {}",
            config.control.display(),
            describe_status(status),
            log_directory.display()
        ));
    }
    tracing::info!(pipe_directory = %pipe_directory.display(), log_directory = %log_directory.display(),
        "started the MPS control daemon");
    Ok(MpsDaemon::Started { pipe_directory })
}

fn run_control(
    program: &Path,
    args: &[&str],
    input: Option<&str>,
    pipe_directory: &Path,
    log_directory: &Path,
) -> Result<ExitStatus, String> {
    let spawn = || {
        let mut command = Command::new(program);
        // Nothing of the agent's own configuration (its enrolment token above all) reaches the daemon.
        for (name, _) in std::env::vars_os() {
            if name.to_str().is_some_and(|n| n.starts_with("AIRTIME_")) {
                command.env_remove(name);
            }
        }
        command
            .args(args)
            .env("CUDA_MPS_PIPE_DIRECTORY", pipe_directory)
            .env("CUDA_MPS_LOG_DIRECTORY", log_directory)
            .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
            // The daemon keeps what it inherits: no pipe of ours may stay open in it.
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own group: a Ctrl-C in the agent's terminal does not reach the daemon.
            .process_group(0)
            .spawn()
    };
    let mut attempts = 0;
    let mut child = loop {
        attempts += 1;
        match spawn() {
            Ok(child) => break child,
            Err(error) if error.raw_os_error() == Some(TEXT_FILE_BUSY) && attempts < 5 => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Err(format!("the MPS control program {} was not found", program.display()));
            }
            Err(error) => return Err(format!("cannot run the MPS control program {}: {error}", program.display())),
        }
    };
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        // A control program that exits without reading is judged by its exit status below.
        let _ = stdin.write_all(input.as_bytes());
    }
    wait_with_timeout(&mut child, CONTROL_TIMEOUT).map_err(|reason| {
        let shown = if args.is_empty() { String::new() } else { format!(" {}", args.join(" ")) };
        format!("`{}{shown}` {reason}", program.display())
    })
}

fn wait_with_timeout(child: &mut Child, limit: Duration) -> Result<ExitStatus, String> {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("did not finish within {} s", limit.as_secs()));
            }
            Err(error) => return Err(format!("could not be waited for: {error}")),
        }
    }
}

fn describe_status(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was ended by signal {signal}"),
        (None, None) => "failed".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    /// A stand-in for `nvidia-cuda-mps-control` (this machine has no NVIDIA driver): it records
    /// each call, and its answers to a query and to `-d` are the test's.
    fn control_program(dir: &Path, query_status: u8, start_status: u8) -> std::io::Result<PathBuf> {
        let program = dir.join("mps-control");
        let calls = dir.join("calls");
        let script = format!(
            "#!/bin/sh\n\
             if [ \"$1\" = -d ]; then\n\
               echo \"start $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY\" >> {calls}\n\
               exit {start_status}\n\
             fi\n\
             read query\n\
             echo \"query $query $CUDA_MPS_PIPE_DIRECTORY\" >> {calls}\n\
             exit {query_status}\n",
            calls = calls.display()
        );
        std::fs::write(&program, script)?;
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755))?;
        Ok(program)
    }

    fn config(dir: &Path, control: PathBuf) -> MpsConfig {
        MpsConfig { control, pipe_directory: dir.join("state/mps/pipe"), log_directory: dir.join("state/mps/log") }
    }

    fn calls(dir: &Path) -> String {
        std::fs::read_to_string(dir.join("calls")).unwrap_or_default()
    }

    #[test]
    fn starts_a_daemon_when_none_listens() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let config = config(dir.path(), control_program(dir.path(), 1, 0)?);
        let daemon = start_or_join(&config)?;
        let pipe = dir.path().join("state/mps/pipe");
        assert_eq!(daemon, MpsDaemon::Started { pipe_directory: pipe.clone() });
        assert!(pipe.is_dir() && dir.path().join("state/mps/log").is_dir());
        let log = dir.path().join("state/mps/log");
        assert_eq!(
            calls(dir.path()),
            format!("query get_server_list {}\nstart {} {}\n", pipe.display(), pipe.display(), log.display())
        );
        Ok(())
    }

    #[test]
    fn joins_the_daemon_that_answers() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let config = config(dir.path(), control_program(dir.path(), 0, 1)?);
        let daemon = start_or_join(&config)?;
        assert!(matches!(daemon, MpsDaemon::Joined { .. }), "{daemon:?}");
        assert!(!calls(dir.path()).contains("start"), "a second daemon was started");
        Ok(())
    }

    #[test]
    fn says_why_mps_is_not_available() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let missing = config(dir.path(), dir.path().join("no-such-mps-control"));
        let error = start_or_join(&missing).err().unwrap_or_default();
        assert!(error.contains("no-such-mps-control was not found"), "{error}");

        let failing = config(dir.path(), control_program(dir.path(), 1, 3)?);
        let error = start_or_join(&failing).err().unwrap_or_default();
        assert!(error.contains("-d` exited with status 3; its log is in"), "{error}");
        assert!(error.contains("state/mps/log"), "{error}");
        Ok(())
    }
}
