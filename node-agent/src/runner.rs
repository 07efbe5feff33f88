//! Workload processes: start, supervise, stop.
//!
//! Each workload runs as a child process in its own process group, so a stop reaches everything
//! the workload started (a shell and its children), and so a Ctrl-C in the agent's terminal does
//! not reach the workloads directly: the agent stops them itself, with their grace period.
//!
//! A supervising task per child owns the process: it waits for the exit, sends SIGTERM to the
//! group on a stop, SIGKILL once the grace period has passed, and reports one [`Exit`] on the
//! runner's channel. When the main process exits, whatever it left behind in its group is killed,
//! so no stray process keeps a GPU busy. A process that leaves its group (`setsid`) escapes this.
//!
//! Workloads live no longer than their agent: a graceful shutdown stops them, and an agent that
//! starts after one that died ends what it left behind (see [`orphans`]).
//!
//! The runner knows nothing of HTTP or of the control plane.

pub mod orphans;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use thiserror::Error;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use uuid::Uuid;

use crate::protocol::{Assignment, EventReport};

/// Longest workload output line logged as one record; longer lines are split.
const MAX_OUTPUT_LINE: u64 = 16 * 1024;

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadSpec {
    pub workload_id: Uuid,
    pub attempt: u32,
    /// Program then arguments; the program is looked up in `PATH`.
    pub command: Vec<String>,
    /// Added to the agent's own environment.
    pub env: BTreeMap<String, String>,
    pub gpu_indices: Vec<u32>,
    /// Used when the workload is stopped without a stop assignment of its own (it disappeared from
    /// the desired state, or the agent shuts down).
    pub grace_period: Duration,
}

impl WorkloadSpec {
    pub fn from_assignment(assignment: &Assignment) -> Self {
        Self {
            workload_id: assignment.workload_id,
            attempt: assignment.attempt,
            command: assignment.command.clone(),
            env: assignment.env.clone(),
            gpu_indices: assignment.gpu_indices.clone(),
            grace_period: Duration::from_millis(assignment.grace_period_ms),
        }
    }
}

/// Where workload stdout and stderr go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputMode {
    /// Into the agent's log, one record per line, tagged with the workload.
    Log,
    /// Straight to the agent's own stdout and stderr.
    Inherit,
}

#[derive(Debug, Error)]
pub enum SpawnError {
    #[error("the command is empty")]
    EmptyCommand,
    #[error("workload {workload_id} is already running (attempt {attempt})")]
    AlreadyRunning { workload_id: Uuid, attempt: u32 },
    #[error("cannot start {program:?}: {source}")]
    Io {
        program: String,
        #[source]
        source: std::io::Error,
    },
}

/// A process that was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    pub pid: u32,
    /// Time spent in the spawn call itself.
    pub spawn_time: Duration,
}

/// How a workload process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    pub workload_id: Uuid,
    pub attempt: u32,
    /// Set when the process exited by itself.
    pub exit_code: Option<i32>,
    /// The signal number that ended it.
    pub signal: Option<i32>,
    /// Why the agent ended it, when it did.
    pub message: Option<String>,
    pub runtime: Duration,
}

impl Exit {
    pub fn to_event(&self) -> EventReport {
        EventReport::exited(self.attempt, self.exit_code, self.signal, self.message.clone())
    }
}

/// A workload the runner supervises, as the caller sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningWorkload {
    pub workload_id: Uuid,
    pub attempt: u32,
    pub pid: u32,
    pub gpu_indices: Vec<u32>,
    pub grace_period: Duration,
    /// A stop was sent; the process is in its grace period.
    pub stopping: bool,
}

enum Control {
    Stop { grace: Duration, reason: String },
    Kill { reason: String },
}

struct Supervised {
    attempt: u32,
    pid: u32,
    gpu_indices: Vec<u32>,
    grace_period: Duration,
    stopping: bool,
    control: mpsc::UnboundedSender<Control>,
}

/// Starts and stops workload processes and reports how each one ended.
pub struct Runner {
    work_dir: PathBuf,
    output: OutputMode,
    node_name: String,
    supervised: HashMap<Uuid, Supervised>,
    exits: mpsc::UnboundedSender<Exit>,
    busy_gpus: watch::Sender<BTreeSet<u32>>,
}

impl Runner {
    /// A runner and the channel on which every started process reports its [`Exit`] exactly once.
    /// Call [`Runner::reap`] with each exit received.
    pub fn new(work_dir: PathBuf, output: OutputMode, node_name: &str) -> (Self, mpsc::UnboundedReceiver<Exit>) {
        let (exits, exits_rx) = mpsc::unbounded_channel();
        let (busy_gpus, _) = watch::channel(BTreeSet::new());
        let runner =
            Self { work_dir, output, node_name: node_name.to_owned(), supervised: HashMap::new(), exits, busy_gpus };
        (runner, exits_rx)
    }

    /// The GPU indices held by workload processes that have not exited yet, kept current.
    pub fn busy_gpus(&self) -> watch::Receiver<BTreeSet<u32>> {
        self.busy_gpus.subscribe()
    }

    pub fn is_empty(&self) -> bool {
        self.supervised.is_empty()
    }

    pub fn get(&self, workload_id: Uuid) -> Option<RunningWorkload> {
        self.supervised.get(&workload_id).map(|s| running_view(workload_id, s))
    }

    pub fn running(&self) -> Vec<RunningWorkload> {
        self.supervised.iter().map(|(id, s)| running_view(*id, s)).collect()
    }

    /// Starts the workload's process. Must be called inside a tokio runtime.
    pub fn start(&mut self, spec: &WorkloadSpec) -> Result<Started, SpawnError> {
        if let Some(existing) = self.supervised.get(&spec.workload_id) {
            return Err(SpawnError::AlreadyRunning { workload_id: spec.workload_id, attempt: existing.attempt });
        }
        let (program, args) = spec.command.split_first().ok_or(SpawnError::EmptyCommand)?;
        let mut command = Command::new(program);
        command
            .args(args)
            .current_dir(&self.work_dir)
            .envs(&spec.env)
            // Set after the assignment's env: the GPUs a workload sees are the agent's to decide.
            .env("CUDA_VISIBLE_DEVICES", join_indices(&spec.gpu_indices))
            // CUDA numbers devices fastest-first by default, NVML by PCI bus; make them agree so
            // index N in CUDA_VISIBLE_DEVICES is the GPU the control plane calls N.
            .env("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
            .env("AIRTIME_WORKLOAD_ID", spec.workload_id.to_string())
            .env("AIRTIME_ATTEMPT", spec.attempt.to_string())
            // These two let a later agent recognise the process if this agent dies first.
            .env("AIRTIME_NODE_NAME", &self.node_name)
            .env("AIRTIME_AGENT_PID", std::process::id().to_string())
            .stdin(Stdio::null())
            .process_group(0)
            // Last resort if the supervising task is dropped (runtime torn down): no orphans.
            .kill_on_drop(true);
        match self.output {
            OutputMode::Log => command.stdout(Stdio::piped()).stderr(Stdio::piped()),
            OutputMode::Inherit => command.stdout(Stdio::inherit()).stderr(Stdio::inherit()),
        };

        let spawn_began = Instant::now();
        let mut child = command.spawn().map_err(|source| SpawnError::Io { program: program.clone(), source })?;
        let spawn_time = spawn_began.elapsed();
        let Some(pid) = child.id() else {
            // Only a child already waited for has no id; a fresh one always has.
            return Err(SpawnError::Io {
                program: program.clone(),
                source: std::io::Error::other("the new process has no pid"),
            });
        };
        if let Some(stdout) = child.stdout.take() {
            tokio::spawn(forward_output(stdout, spec.workload_id, spec.attempt, "stdout"));
        }
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(forward_output(stderr, spec.workload_id, spec.attempt, "stderr"));
        }

        let (control, control_rx) = mpsc::unbounded_channel();
        tokio::spawn(supervise(Supervision {
            child,
            pid,
            workload_id: spec.workload_id,
            attempt: spec.attempt,
            control: control_rx,
            exits: self.exits.clone(),
            started_at: spawn_began,
        }));
        tracing::info!(
            workload_id = %spec.workload_id,
            attempt = spec.attempt,
            pid,
            gpus = %join_indices(&spec.gpu_indices),
            "workload started"
        );
        self.supervised.insert(
            spec.workload_id,
            Supervised {
                attempt: spec.attempt,
                pid,
                gpu_indices: spec.gpu_indices.clone(),
                grace_period: spec.grace_period,
                stopping: false,
                control,
            },
        );
        self.publish_busy_gpus();
        Ok(Started { pid, spawn_time })
    }

    /// Stops a workload: SIGTERM to its process group now, SIGKILL after `grace` (the workload's
    /// own grace period when `None`). A workload already stopping keeps its first deadline.
    /// Returns whether the workload was running.
    pub fn stop(&mut self, workload_id: Uuid, grace: Option<Duration>, reason: &str) -> bool {
        let Some(supervised) = self.supervised.get_mut(&workload_id) else {
            return false;
        };
        if !supervised.stopping {
            supervised.stopping = true;
            let grace = grace.unwrap_or(supervised.grace_period);
            tracing::info!(
                %workload_id,
                attempt = supervised.attempt,
                pid = supervised.pid,
                grace_ms = grace.as_millis(),
                reason,
                "stopping workload"
            );
            // A send fails only when the process has exited already; its Exit is on the way.
            let _ = supervised.control.send(Control::Stop { grace, reason: reason.to_owned() });
        }
        true
    }

    /// Stops every workload with its own grace period.
    pub fn stop_all(&mut self, reason: &str) {
        let ids: Vec<Uuid> = self.supervised.keys().copied().collect();
        for id in ids {
            self.stop(id, None, reason);
        }
    }

    /// SIGKILLs every workload's process group now.
    pub fn kill_all(&mut self, reason: &str) {
        for (id, supervised) in &mut self.supervised {
            supervised.stopping = true;
            tracing::warn!(workload_id = %id, pid = supervised.pid, reason, "killing workload");
            let _ = supervised.control.send(Control::Kill { reason: reason.to_owned() });
        }
    }

    /// Forgets a workload whose [`Exit`] was received.
    pub fn reap(&mut self, exit: &Exit) {
        let matches = self.supervised.get(&exit.workload_id).is_some_and(|s| s.attempt == exit.attempt);
        if matches {
            self.supervised.remove(&exit.workload_id);
            self.publish_busy_gpus();
        }
    }

    fn publish_busy_gpus(&self) {
        let busy: BTreeSet<u32> = self.supervised.values().flat_map(|s| s.gpu_indices.iter().copied()).collect();
        self.busy_gpus.send_if_modified(|current| {
            let changed = *current != busy;
            *current = busy;
            changed
        });
    }
}

fn running_view(workload_id: Uuid, supervised: &Supervised) -> RunningWorkload {
    RunningWorkload {
        workload_id,
        attempt: supervised.attempt,
        pid: supervised.pid,
        gpu_indices: supervised.gpu_indices.clone(),
        grace_period: supervised.grace_period,
        stopping: supervised.stopping,
    }
}

fn join_indices(indices: &[u32]) -> String {
    indices.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

struct Supervision {
    child: Child,
    pid: u32,
    workload_id: Uuid,
    attempt: u32,
    control: mpsc::UnboundedReceiver<Control>,
    exits: mpsc::UnboundedSender<Exit>,
    started_at: Instant,
}

/// Why the agent ends a process, while it does.
struct Ending {
    reason: String,
    grace: Duration,
    /// When SIGKILL follows, until it has been sent.
    kill_at: Option<Instant>,
    killed: Option<KillCause>,
}

enum KillCause {
    GraceExpired,
    Requested,
}

async fn supervise(mut s: Supervision) {
    let group = Pid::from_raw(i32::try_from(s.pid).unwrap_or(i32::MAX));
    let mut ending: Option<Ending> = None;
    let mut control_open = true;
    let status = loop {
        let kill_at = ending.as_ref().and_then(|e| e.kill_at);
        tokio::select! {
            status = s.child.wait() => break status,
            command = s.control.recv(), if control_open => match command {
                Some(Control::Stop { grace, reason }) if ending.is_none() => {
                    signal_group(group, Signal::SIGTERM);
                    ending = Some(Ending {
                        reason,
                        grace,
                        kill_at: Some(Instant::now() + grace),
                        killed: None,
                    });
                }
                Some(Control::Stop { .. }) => {}
                Some(Control::Kill { reason }) => {
                    signal_group(group, Signal::SIGKILL);
                    let ending = ending.get_or_insert(Ending {
                        reason,
                        grace: Duration::ZERO,
                        kill_at: None,
                        killed: None,
                    });
                    ending.kill_at = None;
                    ending.killed = Some(KillCause::Requested);
                }
                // The runner is gone; keep waiting for the exit (kill_on_drop covers teardown).
                None => control_open = false,
            },
            () = sleep_until_some(kill_at), if kill_at.is_some() => {
                signal_group(group, Signal::SIGKILL);
                if let Some(ending) = ending.as_mut() {
                    ending.kill_at = None;
                    ending.killed = Some(KillCause::GraceExpired);
                }
            }
        }
    };
    // Whatever the workload left running in its group goes with it.
    signal_group(group, Signal::SIGKILL);

    let exit = exit_report(&s, status, ending);
    tracing::info!(
        workload_id = %exit.workload_id,
        attempt = exit.attempt,
        exit_code = exit.exit_code,
        signal = exit.signal,
        reason = exit.message.as_deref().unwrap_or(""),
        runtime_ms = exit.runtime.as_millis(),
        "workload exited"
    );
    // The receiver is gone only when the agent is shutting down past caring.
    let _ = s.exits.send(exit);
}

fn exit_report(s: &Supervision, status: std::io::Result<ExitStatus>, ending: Option<Ending>) -> Exit {
    let runtime = s.started_at.elapsed();
    let (exit_code, signal, wait_error) = match status {
        Ok(status) => (status.code(), status.signal(), None),
        Err(error) => (None, None, Some(error)),
    };
    let mut message = ending.map(|ending| match ending.killed {
        None => format!("stopped: {}", ending.reason),
        Some(KillCause::GraceExpired) => format!(
            "stopped: {}; killed with SIGKILL after the {} ms grace period",
            ending.reason,
            ending.grace.as_millis()
        ),
        Some(KillCause::Requested) => format!("killed: {}", ending.reason),
    });
    if let Some(error) = wait_error {
        message = Some(format!("lost track of the process: {error}"));
    }
    Exit { workload_id: s.workload_id, attempt: s.attempt, exit_code, signal, message, runtime }
}

async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn signal_group(group: Pid, signal: Signal) {
    match killpg(group, signal) {
        // ESRCH: the group has no process left, which is the goal.
        Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
        Err(error) => {
            tracing::warn!(pgid = group.as_raw(), %signal, %error, "cannot signal the workload");
        }
    }
}

/// Logs a workload's output line by line until the pipe closes.
async fn forward_output<R: AsyncRead + Unpin>(stream: R, workload_id: Uuid, attempt: u32, name: &'static str) {
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader).take(MAX_OUTPUT_LINE).read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line);
                let text = text.trim_end_matches(['\n', '\r']);
                tracing::info!(target: "workload", %workload_id, attempt, stream = name, "{text}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::timeout;

    fn spec(command: &[&str]) -> WorkloadSpec {
        WorkloadSpec {
            workload_id: Uuid::new_v4(),
            attempt: 1,
            command: command.iter().map(|s| (*s).to_owned()).collect(),
            env: BTreeMap::new(),
            gpu_indices: vec![],
            grace_period: Duration::from_secs(30),
        }
    }

    fn runner() -> (Runner, mpsc::UnboundedReceiver<Exit>) {
        Runner::new(std::env::temp_dir(), OutputMode::Log, "runner-test")
    }

    async fn next_exit(exits: &mut mpsc::UnboundedReceiver<Exit>) -> Exit {
        match timeout(Duration::from_secs(20), exits.recv()).await {
            Ok(Some(exit)) => exit,
            Ok(None) => panic!("exit channel closed"),
            Err(_) => panic!("no exit within 20 s"),
        }
    }

    #[tokio::test]
    async fn reports_the_exit_code() -> Result<(), SpawnError> {
        let (mut runner, mut exits) = runner();
        let spec = spec(&["sh", "-c", "exit 3"]);
        let started = runner.start(&spec)?;
        assert!(started.pid > 0);
        let exit = next_exit(&mut exits).await;
        assert_eq!(
            (exit.workload_id, exit.attempt, exit.exit_code, exit.signal, exit.message.as_deref()),
            (spec.workload_id, 1, Some(3), None, None)
        );
        assert!(runner.get(spec.workload_id).is_some(), "kept until reaped");
        runner.reap(&exit);
        assert!(runner.is_empty());
        assert_eq!(exit.to_event(), EventReport::exited(1, Some(3), None, None));
        Ok(())
    }

    #[tokio::test]
    async fn stop_ends_a_cooperative_process_with_sigterm() -> Result<(), SpawnError> {
        let (mut runner, mut exits) = runner();
        let spec = spec(&["sleep", "30"]);
        runner.start(&spec)?;
        let asked = Instant::now();
        assert!(runner.stop(spec.workload_id, Some(Duration::from_millis(200)), "preempted: test"));
        let exit = next_exit(&mut exits).await;
        assert!(asked.elapsed() < Duration::from_secs(5), "{:?}", asked.elapsed());
        assert_eq!(exit.exit_code, None);
        assert_eq!(exit.signal, Some(Signal::SIGTERM as i32));
        assert_eq!(exit.message.as_deref(), Some("stopped: preempted: test"));
        Ok(())
    }

    #[tokio::test]
    async fn stop_kills_a_process_that_ignores_sigterm_after_the_grace_period() -> Result<(), Box<dyn std::error::Error>>
    {
        let (mut runner, mut exits) = runner();
        let dir = tempfile::tempdir()?;
        let ready = dir.path().join("ready");
        // The marker file says the trap is set; `exec sleep` keeps the ignored TERM disposition.
        let spec = spec(&["sh", "-c", &format!("trap '' TERM; : > {}; exec sleep 30", ready.display())]);
        runner.start(&spec)?;
        wait_for_file(&ready).await;

        let grace = Duration::from_millis(200);
        let asked = Instant::now();
        runner.stop(spec.workload_id, Some(grace), "cancelled");
        let exit = next_exit(&mut exits).await;
        let took = asked.elapsed();
        assert!(took >= grace, "killed before the grace period ended: {took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
        assert_eq!(exit.signal, Some(Signal::SIGKILL as i32));
        assert_eq!(
            exit.message.as_deref(),
            Some("stopped: cancelled; killed with SIGKILL after the 200 ms grace period")
        );
        Ok(())
    }

    #[tokio::test]
    async fn sets_the_gpu_and_workload_environment() -> Result<(), Box<dyn std::error::Error>> {
        let (mut runner, mut exits) = runner();
        let dir = tempfile::tempdir()?;
        let out = dir.path().join("env");
        let mut spec = spec(&[
            "sh",
            "-c",
            "printf '%s|%s|%s|%s|%s\\n' \"$CUDA_VISIBLE_DEVICES\" \"$AIRTIME_WORKLOAD_ID\" \
             \"$AIRTIME_ATTEMPT\" \"$MODEL\" \"$CUDA_DEVICE_ORDER\" > \"$OUT\"",
        ]);
        spec.attempt = 4;
        spec.gpu_indices = vec![0, 2, 5];
        spec.env = BTreeMap::from([
            ("MODEL".into(), "llama".into()),
            ("OUT".into(), out.display().to_string()),
            // The assignment cannot pick other GPUs than the ones it was placed on.
            ("CUDA_VISIBLE_DEVICES".into(), "7".into()),
        ]);
        runner.start(&spec)?;
        let exit = next_exit(&mut exits).await;
        assert_eq!(exit.exit_code, Some(0));
        let written = std::fs::read_to_string(&out)?;
        assert_eq!(written, format!("0,2,5|{}|4|llama|PCI_BUS_ID\n", spec.workload_id));

        // A CPU placement sees an empty CUDA_VISIBLE_DEVICES (no GPU), not the agent's own.
        let mut cpu = spec.clone();
        cpu.workload_id = Uuid::new_v4();
        cpu.gpu_indices = vec![];
        runner.start(&cpu)?;
        next_exit(&mut exits).await;
        let written = std::fs::read_to_string(&out)?;
        assert!(written.starts_with('|'), "{written}");
        Ok(())
    }

    #[tokio::test]
    async fn a_missing_program_fails_to_start() {
        let (mut runner, _exits) = runner();
        let error = runner.start(&spec(&["/nonexistent/airtime-test-binary"])).err().map(|e| e.to_string());
        let message = error.unwrap_or_default();
        assert!(message.contains("No such file or directory"), "{message}");
        assert!(runner.is_empty());
        assert!(matches!(runner.start(&spec(&[])), Err(SpawnError::EmptyCommand)));
    }

    #[tokio::test]
    async fn tracks_busy_gpus_and_refuses_a_second_start() -> Result<(), SpawnError> {
        let (mut runner, mut exits) = runner();
        let busy = runner.busy_gpus();
        let mut spec = spec(&["sleep", "30"]);
        spec.gpu_indices = vec![1, 3];
        runner.start(&spec)?;
        assert_eq!(*busy.borrow(), BTreeSet::from([1, 3]));
        assert!(matches!(runner.start(&spec), Err(SpawnError::AlreadyRunning { .. })));
        runner.stop(spec.workload_id, Some(Duration::ZERO), "test over");
        let exit = next_exit(&mut exits).await;
        runner.reap(&exit);
        assert!(busy.borrow().is_empty());
        Ok(())
    }

    #[tokio::test]
    async fn stop_reaches_the_whole_process_group() -> Result<(), Box<dyn std::error::Error>> {
        let (mut runner, mut exits) = runner();
        let dir = tempfile::tempdir()?;
        let pid_file = dir.path().join("grandchild");
        // The shell waits on a background sleep: SIGTERM to the shell alone would leave it.
        let spec =
            spec(&["sh", "-c", &format!("sleep 30 & echo $! > {0}.tmp && mv {0}.tmp {0}; wait", pid_file.display())]);
        runner.start(&spec)?;
        wait_for_file(&pid_file).await;
        let grandchild: i32 = std::fs::read_to_string(&pid_file)?.trim().parse()?;
        runner.stop(spec.workload_id, Some(Duration::from_secs(5)), "test");
        next_exit(&mut exits).await;
        // The grandchild is gone (or a zombie about to be reaped by init).
        let deadline = Instant::now() + Duration::from_secs(5);
        while process_alive(grandchild) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!process_alive(grandchild), "grandchild {grandchild} survived");
        Ok(())
    }

    fn process_alive(pid: i32) -> bool {
        // A zombie still answers signal 0; read its state instead.
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => !stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z')),
            Err(_) => false,
        }
    }

    async fn wait_for_file(path: &std::path::Path) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !path.exists() {
            assert!(Instant::now() < deadline, "{} never appeared", path.display());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
