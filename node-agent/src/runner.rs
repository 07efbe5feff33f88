//! Workloads: start, supervise, stop, whatever runs them.
//!
//! The runner owns each attempt's life once; an [`Executor`] owns what differs between kinds of
//! work ([`executor`]): [`process::Processes`] runs the command itself, [`container::Containers`]
//! the node's container engine. Every attempt's main process leads its own process group, so a
//! stop reaches everything the workload started (a shell and its children), and so a Ctrl-C in
//! the agent's terminal does not reach the workloads directly: the agent stops them itself, with
//! their grace period.
//!
//! A supervising task per attempt owns it: it waits for the exit, asks the executor to stop it on
//! a stop, has it killed once the grace period has passed, has whatever it left cleared when it
//! has ended, and reports one [`Exit`] on the runner's channel.
//!
//! A workload's supervision outlives the agent process: each runs under a tether (the agent's
//! binary, see [`crate::tether`]) that keeps it running while the node's lease lasts, writes its
//! output to spool files ([`spool`]) rather than to pipes the agent reads, and records how it
//! ended. What the runner knows of each attempt is on disk too ([`records`]), so an agent that
//! restarts — stopped for an upgrade, or crashed — adopts its predecessor's running workloads
//! ([`Runner::recover`]) and supervises them as its own. What no record names, left by an older
//! agent, each executor ends ([`Runner::end_leftovers`]; processes: [`orphans`]).
//!
//! A workload's GPUs reach it through its environment, as the node's accelerator names them
//! ([`crate::telemetry::Accelerator`]: for NVIDIA, `CUDA_VISIBLE_DEVICES` and a share's MPS
//! limits), with Airtime's own `AIRTIME_GPU_MILLI` and `AIRTIME_GPU_SHARING` ([`gpu_environment`]).
//! These variables are the agent's: the assignment's own `env` cannot override them, nor can the
//! agent's own environment leak the vendor's settings into a workload.
//!
//! The runner knows nothing of HTTP or of the control plane, nor of a GPU vendor.

pub mod container;
pub mod executor;
pub mod mps;
pub mod orphans;
pub mod process;
pub mod records;
pub mod spool;

use std::collections::{BTreeMap, HashMap};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use thiserror::Error;
use tokio::process::Child;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use uuid::Uuid;

use airtime_protocol::container::ContainerSpec;
use airtime_protocol::sharing::{GpuSharing, WHOLE_GPU_MILLI};

use crate::containers::{Engine, container_name};
use crate::isolation::{ProcessUser, UidPool, WorkloadKinds};
use crate::logs::LogSink;
use crate::protocol::{Assignment, EventReport, LogStream};
use crate::serving::ServingTarget;
use crate::telemetry::{Accelerator, GpuHolders, GpuSlot, Holder, Placement};
use container::Containers;
pub use executor::{Execution, Executor, Leftover, Node};
use process::Processes;

/// Longest workload output line logged as one record; longer lines are split.
pub(crate) const MAX_OUTPUT_LINE: u64 = 16 * 1024;

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
    /// Its share of each GPU, in thousandths (1000: whole GPUs).
    pub gpu_milli: u32,
    /// GPU memory set aside for it on each GPU, MiB (an MPS GPU's pinned memory limit).
    pub gpu_memory_mb: Option<u64>,
    /// Used when the workload is stopped without a stop assignment of its own (it disappeared from
    /// the desired state, or the agent shuts down).
    pub grace_period: Duration,
    /// Run in this OCI image with the node's container engine (then `command` is the image's
    /// arguments); `None`: `command` runs as a process.
    pub container: Option<ContainerSpec>,
    /// Its CPU request, thousandths of a core (a container's `--cpus`).
    pub cpu_millis: Option<u32>,
    /// Its host memory request, MiB (a container's `--memory`).
    pub memory_mb: Option<u64>,
    /// A serving replica: the agent gives it a port and reads these endpoints there.
    pub serving: Option<crate::protocol::ServingEndpoints>,
}

impl WorkloadSpec {
    pub fn from_assignment(assignment: &Assignment) -> Self {
        Self {
            workload_id: assignment.workload_id,
            attempt: assignment.attempt,
            command: assignment.command.clone(),
            env: assignment.env.clone(),
            gpu_indices: assignment.gpu_indices.clone(),
            gpu_milli: assignment.share_milli(),
            gpu_memory_mb: assignment.gpu_memory_mb,
            grace_period: Duration::from_millis(assignment.grace_period_ms),
            container: assignment.container.clone(),
            cpu_millis: assignment.cpu_millis,
            memory_mb: assignment.memory_mb,
            serving: assignment.serving.clone(),
        }
    }
}

/// The node's GPU slots (the numbers assignments name in `gpu_indices`), and the accelerator
/// that gives them to workloads.
#[derive(Debug, Clone)]
pub struct GpuSlots {
    slots: BTreeMap<u32, GpuSlot>,
    accelerator: Arc<dyn Accelerator>,
}

impl GpuSlots {
    pub fn new(slots: impl IntoIterator<Item = (u32, GpuSlot)>, accelerator: Arc<dyn Accelerator>) -> Self {
        Self { slots: slots.into_iter().collect(), accelerator }
    }

    pub fn get(&self, slot: u32) -> Option<&GpuSlot> {
        self.slots.get(&slot)
    }

    fn known(&self) -> String {
        if self.slots.is_empty() {
            return "it has none".into();
        }
        let slots: Vec<String> = self.slots.keys().map(u32::to_string).collect();
        format!("it has {}", slots.join(", "))
    }

    /// The slots `spec` is placed on, in its order; a slot the node does not have is refused.
    fn placed(&self, spec: &WorkloadSpec) -> Result<Vec<&GpuSlot>, SpawnError> {
        spec.gpu_indices
            .iter()
            .map(|&index| self.get(index).ok_or_else(|| SpawnError::UnknownGpu { slot: index, known: self.known() }))
            .collect()
    }
}

/// Airtime's own variables of a workload's GPU environment, which the agent alone sets.
const AIRTIME_GPU_VARIABLES: [&str; 2] = ["AIRTIME_GPU_MILLI", "AIRTIME_GPU_SHARING"];

/// Airtime's GPU environment of a workload on `gpus`: `AIRTIME_GPU_MILLI` (its share, 1000 for
/// whole GPUs) and `AIRTIME_GPU_SHARING` (its GPUs' mode: one name, or one per GPU, comma-joined,
/// when they differ; `none` for a CPU placement). The accelerator adds the vendor's.
pub fn gpu_environment(placement: &Placement<'_>) -> Vec<(String, String)> {
    let modes: Vec<&str> = placement.gpus.iter().map(|slot| slot.sharing.as_str()).collect();
    let sharing = match modes.first() {
        None => GpuSharing::None.as_str().to_owned(),
        Some(first) if modes.iter().all(|m| m == first) => (*first).to_owned(),
        Some(_) => modes.join(","),
    };
    vec![("AIRTIME_GPU_MILLI".to_owned(), placement.milli.to_string()), ("AIRTIME_GPU_SHARING".to_owned(), sharing)]
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
    #[error("GPU {slot} is not one of this node's GPUs ({known})")]
    UnknownGpu { slot: u32, known: String },
    #[error("this node has no container engine, so it cannot run image {image}")]
    NoContainerEngine { image: String },
    /// This node does not run it as asked: a kind of work it does not take, a mount it does not
    /// allow, an environment it cannot pass on.
    #[error("{0}")]
    NotAccepted(String),
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
    /// How it ended is unknown: it ended while no agent watched it and left no record (its
    /// tether was killed with it). Not the workload's doing: it is requeued, not failed.
    pub lost: bool,
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
    gpu_milli: u32,
    gpu_memory_mb: Option<u64>,
    /// `SIMULATED_GPU_UTIL` of its environment, in thousandths: how busy it keeps simulated GPUs.
    simulated_busy_milli: Option<u32>,
    grace_period: Duration,
    stopping: bool,
    control: mpsc::UnboundedSender<Control>,
    /// The uid it runs as, from the process-user range: given back when it is reaped.
    uid: Option<u32>,
    /// A serving replica's port and endpoints.
    serving: Option<records::ServeRecord>,
}

/// What a workload leaves for the agent to clear when it ends: its environment files, its own
/// directory, and the uid it held.
#[derive(Debug, Clone, Default)]
pub struct Cleanup {
    pub files: Vec<PathBuf>,
    pub dir: Option<PathBuf>,
    pub uid: Option<u32>,
    /// The attempt's directory of the agent's state: its record, spool and exit.
    attempt_dir: Option<PathBuf>,
}

impl Cleanup {
    /// Gives its uid back to the pool (a workload that never started).
    fn release(&mut self, uids: &mut UidPool) {
        if let Some(uid) = self.uid.take() {
            uids.give_back(uid);
        }
    }

    async fn run(self) {
        let Cleanup { files, dir, attempt_dir, .. } = self;
        let _ = tokio::task::spawn_blocking(move || {
            for file in &files {
                crate::isolation::remove_quietly(file);
            }
            for dir in dir.into_iter().chain(attempt_dir) {
                if let Err(e) = std::fs::remove_dir_all(&dir)
                    && e.kind() != std::io::ErrorKind::NotFound
                {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a workload's directory");
                }
            }
        })
        .await;
    }
}

/// A container mount's source, resolved on the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedMount {
    pub source: PathBuf,
    pub target: String,
    pub read_only: bool,
}

/// The port a serving replica's server listens on, given by the agent (`PORT` as most servers read
/// it, and Airtime's own name).
pub const SERVE_PORT_VARIABLES: [&str; 2] = ["PORT", "AIRTIME_SERVE_PORT"];

/// The variable of a workload's environment that says how busy it keeps simulated GPUs (0..1): a
/// held-but-idle workload, for demos and tests.
pub const SIMULATED_GPU_UTIL: &str = "SIMULATED_GPU_UTIL";

/// Starts and stops workloads and reports how each one ended.
pub struct Runner {
    output: OutputMode,
    node: Node,
    slots: GpuSlots,
    supervised: HashMap<Uuid, Supervised>,
    exits: mpsc::UnboundedSender<Exit>,
    holders: watch::Sender<GpuHolders>,
    /// The attempts supervised, kept current (what a registration says the node runs).
    attempts: watch::Sender<Vec<(Uuid, u32)>>,
    /// Where captured output lines also go (to the control plane), when set.
    logs: Option<LogSink>,
    executors: Executors,
    /// Where each attempt's record, output spool and exit are kept (`<state>/workloads`).
    attempts_dir: PathBuf,
    /// The uids running process workloads hold.
    uids: UidPool,
    /// The serving replicas supervised and where they answer, kept current.
    serving: watch::Sender<Vec<ServingTarget>>,
}

/// The node's executors, and the kinds of work it takes.
struct Executors {
    processes: Processes,
    /// With the node's container engine; `None`: the node runs no containers.
    containers: Option<Containers>,
    /// The kinds of workload this node takes (`--workloads`).
    kinds: WorkloadKinds,
}

impl Executors {
    /// The executor that runs `spec`, if this node takes it.
    fn for_spec(&self, spec: &WorkloadSpec) -> Result<&dyn Executor, SpawnError> {
        match &spec.container {
            None if !self.kinds.processes() => {
                Err(SpawnError::NotAccepted("this node takes container workloads only (--workloads containers)".into()))
            }
            None => Ok(&self.processes),
            Some(_) if !self.kinds.containers() => {
                Err(SpawnError::NotAccepted("this node takes process workloads only (--workloads processes)".into()))
            }
            Some(image) => match &self.containers {
                Some(containers) => Ok(containers),
                None => Err(SpawnError::NoContainerEngine { image: image.image.clone() }),
            },
        }
    }

    /// The executor of a recorded attempt: its container's engine, or processes (a container's
    /// engine client, when this agent has no engine: it is signalled as a process).
    fn for_record(&self, record: &records::Record) -> &dyn Executor {
        match (&record.container, &self.containers) {
            (Some(_), Some(containers)) => containers,
            _ => &self.processes,
        }
    }

    /// Every executor, containers first: their engine clients are processes.
    fn all(&self) -> impl Iterator<Item = &dyn Executor> {
        self.containers.iter().map(|c| c as &dyn Executor).chain([&self.processes as &dyn Executor])
    }
}

impl Runner {
    /// A runner for a node with GPU `slots`, and the channel on which every started workload
    /// reports its [`Exit`] exactly once. Call [`Runner::reap`] with each exit received.
    pub fn new(
        work_dir: PathBuf,
        output: OutputMode,
        node_name: &str,
        slots: GpuSlots,
    ) -> (Self, mpsc::UnboundedReceiver<Exit>) {
        let (exits, exits_rx) = mpsc::unbounded_channel();
        let (holders, _) = watch::channel(GpuHolders::default());
        let runner = Self {
            output,
            node: Node {
                name: node_name.to_owned(),
                work_dir,
                private_dir: std::env::temp_dir().join(format!("airtime-agent-{}", std::process::id())),
                tether: None,
            },
            slots,
            supervised: HashMap::new(),
            exits,
            holders,
            attempts: watch::channel(Vec::new()).0,
            logs: None,
            executors: Executors { processes: Processes::default(), containers: None, kinds: WorkloadKinds::All },
            attempts_dir: std::env::temp_dir().join(format!("airtime-agent-{}-workloads", std::process::id())),
            uids: UidPool::default(),
            serving: watch::channel(Vec::new()).0,
        };
        (runner, exits_rx)
    }

    /// Workloads' environment files go in `dir` (created 0700; the agent's state directory's
    /// `run/`).
    pub fn with_private_dir(mut self, dir: PathBuf) -> Self {
        self.node.private_dir = dir;
        self
    }

    /// Process workloads run as `user`, launched by the agent's binary at `agent_binary`, each in
    /// a directory of its own under the work directory; only `kinds` are started.
    pub fn with_isolation(mut self, agent_binary: Option<PathBuf>, user: ProcessUser, kinds: WorkloadKinds) -> Self {
        self.executors.processes = Processes { launcher: agent_binary, user };
        self.executors.kinds = kinds;
        self
    }

    /// Captured output (`OutputMode::Log`) goes to `sink` too, line by line, for the control
    /// plane; it never blocks a workload (a full sink counts the line as lost).
    pub fn with_logs(mut self, sink: LogSink) -> Self {
        self.logs = Some(sink);
        self
    }

    /// Container workloads run with `engine`, mounting only under `mount_prefixes` (when given).
    pub fn with_engine(mut self, engine: Arc<Engine>, mount_prefixes: Vec<PathBuf>) -> Self {
        self.executors.containers = Some(Containers::new(engine, mount_prefixes));
        self
    }

    /// Every workload runs under a tether, the agent binary at `agent_binary` (see
    /// [`crate::tether`]), which does as `orphaned` says when this process is gone: keep the
    /// workload running while the node's lease lasts (for the next agent process to adopt),
    /// keep it regardless, or stop it with its grace period.
    pub fn with_tether(mut self, agent_binary: PathBuf, orphaned: crate::tether::Orphaned) -> Self {
        self.node.tether = Some((agent_binary, orphaned));
        self
    }

    /// Attempts' records and output spools go in `dir` (created 0700 when needed; the agent's
    /// state directory's `workloads/`), where [`Runner::recover`] finds them again.
    pub fn with_attempts_dir(mut self, dir: PathBuf) -> Self {
        self.attempts_dir = dir;
        self
    }

    /// The workloads holding GPU slots (processes that have not exited yet), kept current.
    pub fn holders(&self) -> watch::Receiver<GpuHolders> {
        self.holders.subscribe()
    }

    /// The serving replicas supervised and where they answer, kept current.
    pub fn serving_targets(&self) -> watch::Receiver<Vec<ServingTarget>> {
        self.serving.subscribe()
    }

    /// The attempts supervised (workload, attempt), kept current.
    pub fn attempts(&self) -> watch::Receiver<Vec<(Uuid, u32)>> {
        self.attempts.subscribe()
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

    /// Whether `name` is a variable of a workload's environment only the agent sets.
    fn agent_owned(&self, name: &str) -> bool {
        AIRTIME_GPU_VARIABLES.contains(&name) || self.slots.accelerator.owns_variable(name)
    }

    /// A free port on the loopback for a serving replica: bound, read, released (the replica binds
    /// it next; another process taking it meanwhile leaves the replica unread, not wrong).
    fn free_port() -> std::io::Result<u16> {
        Ok(std::net::TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
    }

    /// Starts the workload. Must be called inside a tokio runtime.
    pub fn start(&mut self, spec: &WorkloadSpec) -> Result<Started, SpawnError> {
        if let Some(existing) = self.supervised.get(&spec.workload_id) {
            return Err(SpawnError::AlreadyRunning { workload_id: spec.workload_id, attempt: existing.attempt });
        }
        let placed = self.slots.placed(spec)?;
        let gpus =
            Placement { gpus: &placed, milli: spec.gpu_milli.clamp(1, WHOLE_GPU_MILLI), memory_mb: spec.gpu_memory_mb };
        let ignored: Vec<&str> = spec.env.keys().map(String::as_str).filter(|k| self.agent_owned(k)).collect();
        if !ignored.is_empty() {
            tracing::info!(workload_id = %spec.workload_id, attempt = spec.attempt, ignored = ?ignored,
                "the assignment's env may not set the GPU variables the agent sets; ignoring them");
        }
        let name = container_name(spec.workload_id, spec.attempt);
        let attempt_dir = self.attempts_dir.join(&name);
        let mut cleanup = Cleanup { attempt_dir: Some(attempt_dir.clone()), ..Cleanup::default() };
        let fail = |cleanup: Cleanup, uids: &mut UidPool, error: SpawnError| {
            let mut cleanup = cleanup;
            cleanup.release(uids);
            tokio::spawn(cleanup.run());
            Err(error)
        };
        let executor = match self.executors.for_spec(spec) {
            Ok(executor) => executor,
            Err(error) => return fail(cleanup, &mut self.uids, error),
        };
        if let Err(source) = fresh_dir(&attempt_dir) {
            return fail(
                cleanup,
                &mut self.uids,
                SpawnError::Io { program: attempt_dir.display().to_string(), source },
            );
        }
        // The workload's environment: its own, less what the agent sets, then the agent's.
        let serve_owned = |k: &str| spec.serving.is_some() && SERVE_PORT_VARIABLES.contains(&k);
        let mut env: Vec<(String, String)> = spec
            .env
            .iter()
            .filter(|(k, _)| !self.agent_owned(k) && !serve_owned(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        env.extend(gpu_environment(&gpus));
        let serving = match &spec.serving {
            Some(endpoints) => match Self::free_port() {
                Ok(port) => {
                    env.extend(SERVE_PORT_VARIABLES.iter().map(|k| ((*k).to_owned(), port.to_string())));
                    Some(records::ServeRecord { port, endpoints: endpoints.clone() })
                }
                Err(source) => {
                    return fail(cleanup, &mut self.uids, SpawnError::Io { program: "a serving port".into(), source });
                }
            },
            None => None,
        };
        let mut launch = executor::Launch {
            spec,
            name: &name,
            env,
            gpus,
            accelerator: &*self.slots.accelerator,
            node: &self.node,
            exit_file: records::exit_file(&attempt_dir),
            uids: &mut self.uids,
            cleanup: &mut cleanup,
        };
        let launched = executor.launch(&mut launch);
        let executor::Launched { mut command, program, captures_output, container } = match launched {
            Ok(launched) => launched,
            Err(error) => return fail(cleanup, &mut self.uids, error),
        };
        // A tethered workload outlives this process when its tether is told to: dropping its
        // handle (the runtime torn down at exit) must not kill it then.
        let outlives_agent = self.node.tether.as_ref().is_some_and(|(_, o)| *o != crate::tether::Orphaned::Fence);
        command.stdin(Stdio::null()).process_group(0).kill_on_drop(!outlives_agent);
        let output = if captures_output { OutputMode::Log } else { self.output };
        let spooled = output == OutputMode::Log;
        if spooled {
            match spool::create(&attempt_dir) {
                Ok((stdout, stderr)) => command.stdout(stdout).stderr(stderr),
                Err(source) => {
                    return fail(cleanup, &mut self.uids, SpawnError::Io { program: program.clone(), source });
                }
            };
        } else {
            command.stdout(Stdio::inherit()).stderr(Stdio::inherit());
        }

        let spawn_began = Instant::now();
        let child = match command.spawn() {
            Ok(child) => child,
            Err(source) => return fail(cleanup, &mut self.uids, SpawnError::Io { program: program.clone(), source }),
        };
        let spawn_time = spawn_began.elapsed();
        let Some(pid) = child.id() else {
            // Only a child already waited for has no id; a fresh one always has.
            return fail(
                cleanup,
                &mut self.uids,
                SpawnError::Io {
                    program: program.clone(),
                    source: std::io::Error::other("the new process has no pid"),
                },
            );
        };
        let record = records::Record {
            workload_id: spec.workload_id,
            attempt: spec.attempt,
            pid,
            pid_started: records::process_started(pid).unwrap_or(0),
            started_boot_ms: crate::tether::boottime_ms().saturating_sub(spawn_time.as_millis() as u64),
            gpu_indices: spec.gpu_indices.clone(),
            gpu_milli: spec.gpu_milli,
            gpu_memory_mb: spec.gpu_memory_mb,
            simulated_busy_milli: spec
                .env
                .get(SIMULATED_GPU_UTIL)
                .and_then(|v| v.trim().parse::<f64>().ok())
                .filter(|u| (0.0..=1.0).contains(u))
                .map(|u| (u * 1000.0).round() as u32),
            grace_period_ms: spec.grace_period.as_millis() as u64,
            container,
            uid: cleanup.uid,
            work_dir: cleanup.dir.clone(),
            spooled,
            serving,
        };
        if let Err(error) = records::write(&attempt_dir, &record) {
            // It runs, supervised by this process; only a later agent could not adopt it.
            tracing::warn!(workload_id = %spec.workload_id, %error, "cannot record the workload for a later agent");
        }
        let execution = executor.attach(&record);
        self.supervise(record, Process::Child(child), spawn_began, execution, cleanup);
        tracing::info!(
            workload_id = %spec.workload_id,
            attempt = spec.attempt,
            pid,
            gpus = %join_indices(&spec.gpu_indices),
            "workload started"
        );
        Ok(Started { pid, spawn_time })
    }

    /// Adopts the workloads an earlier agent process left running (their records under the
    /// attempts directory): each is supervised from here on as if this process had started it —
    /// its output tailed from where the control plane's copy ends, its GPUs held, its uid taken.
    /// A recorded workload that ended while no agent ran is reported through the exit channel
    /// as it ended (its tether wrote how). Returns every attempt recovered, with whether it still
    /// runs.
    pub fn recover(&mut self) -> Vec<(RunningWorkload, bool)> {
        let mut adopted = Vec::new();
        for (dir, record) in records::read_all(&self.attempts_dir) {
            if self.supervised.contains_key(&record.workload_id) {
                continue;
            }
            let execution = self.executors.for_record(&record).attach(&record);
            if let Some(uid) = record.uid {
                self.uids.hold(uid);
            }
            let cleanup =
                Cleanup { files: Vec::new(), dir: record.work_dir.clone(), uid: None, attempt_dir: Some(dir.clone()) };
            let ran_for = Duration::from_millis(crate::tether::boottime_ms().saturating_sub(record.started_boot_ms));
            let started_at = Instant::now().checked_sub(ran_for).unwrap_or_else(Instant::now);
            let alive = records::alive(&record);
            tracing::info!(
                workload_id = %record.workload_id,
                attempt = record.attempt,
                pid = record.pid,
                alive,
                "adopting a workload an earlier node agent process started"
            );
            let process =
                Process::Adopted { pid: record.pid, started: record.pid_started, exit_file: records::exit_file(&dir) };
            let id = record.workload_id;
            self.supervise(record, process, started_at, execution, cleanup);
            if let Some(view) = self.get(id) {
                adopted.push((view, alive));
            }
        }
        adopted
    }

    /// Ends what earlier agents of this node left running that `adopted` (what
    /// [`Runner::recover`] found alive) does not account for, and says what each was, once per
    /// attempt. Containers go first: their engine clients are processes, and end with them.
    pub async fn end_leftovers(&self, adopted: &[RunningWorkload]) -> Vec<Leftover> {
        let mut ended: Vec<Leftover> = Vec::new();
        for executor in self.executors.all() {
            for leftover in executor.end_leftovers(&self.node.name, adopted).await {
                if !ended.iter().any(|e| (e.workload_id, e.attempt) == (leftover.workload_id, leftover.attempt)) {
                    ended.push(leftover);
                }
            }
        }
        ended
    }

    /// Supervises a started or adopted attempt: its tails, its task, its entry.
    fn supervise(
        &mut self,
        record: records::Record,
        process: Process,
        started_at: Instant,
        execution: Arc<dyn Execution>,
        cleanup: Cleanup,
    ) {
        let (ended_tx, ended) = watch::channel(false);
        let last_stderr: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
        let mut tails = Vec::new();
        if record.spooled
            && let Some(dir) = cleanup.attempt_dir.clone()
        {
            for which in [LogStream::Stdout, LogStream::Stderr] {
                let out = spool::Output { workload_id: record.workload_id, attempt: record.attempt, which };
                let last = (which == LogStream::Stderr).then(|| Arc::clone(&last_stderr));
                let from = spool::acknowledged(&dir, which);
                tails.push(tokio::spawn(spool::tail(dir.clone(), out, from, self.logs.clone(), last, ended.clone())));
            }
        }
        let (control, control_rx) = mpsc::unbounded_channel();
        tokio::spawn(supervise(Supervision {
            process,
            workload_id: record.workload_id,
            attempt: record.attempt,
            control: control_rx,
            exits: self.exits.clone(),
            started_at,
            execution,
            last_stderr,
            cleanup: Cleanup { uid: None, ..cleanup.clone() },
            ended: ended_tx,
            tails,
        }));
        self.supervised.insert(
            record.workload_id,
            Supervised {
                attempt: record.attempt,
                pid: record.pid,
                gpu_indices: record.gpu_indices,
                gpu_milli: record.gpu_milli,
                gpu_memory_mb: record.gpu_memory_mb,
                simulated_busy_milli: record.simulated_busy_milli,
                grace_period: Duration::from_millis(record.grace_period_ms),
                stopping: false,
                control,
                uid: cleanup.uid.or(record.uid),
                serving: record.serving,
            },
        );
        self.publish_holders();
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
            if let Some(uid) = self.supervised.remove(&exit.workload_id).and_then(|s| s.uid) {
                self.uids.give_back(uid);
            }
            self.publish_holders();
        }
    }

    fn publish_holders(&self) {
        let holders = GpuHolders::new(
            self.supervised
                .iter()
                .filter(|(_, s)| !s.gpu_indices.is_empty())
                .map(|(id, s)| Holder {
                    workload_id: *id,
                    pid: s.pid,
                    slots: s.gpu_indices.clone(),
                    milli: s.gpu_milli,
                    memory_mb: s.gpu_memory_mb,
                    simulated_busy_milli: s.simulated_busy_milli,
                })
                .collect(),
        );
        self.holders.send_if_modified(|current| {
            let changed = *current != holders;
            *current = holders;
            changed
        });
        let mut serving: Vec<ServingTarget> = self
            .supervised
            .iter()
            .filter(|(_, s)| !s.stopping)
            .filter_map(|(id, s)| {
                let serve = s.serving.as_ref()?;
                Some(ServingTarget {
                    workload_id: *id,
                    attempt: s.attempt,
                    port: serve.port,
                    endpoints: serve.endpoints.clone(),
                })
            })
            .collect();
        serving.sort_by_key(|t| t.workload_id);
        self.serving.send_if_modified(|current| {
            let changed = *current != serving;
            *current = serving;
            changed
        });
        let mut attempts: Vec<(Uuid, u32)> = self.supervised.iter().map(|(id, s)| (*id, s.attempt)).collect();
        attempts.sort_unstable();
        self.attempts.send_if_modified(|current| {
            let changed = *current != attempts;
            *current = attempts;
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

/// An empty directory at `dir` (its parents created; one left by an earlier try removed), 0700.
fn fresh_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

fn join_indices(indices: &[u32]) -> String {
    indices.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// The process a supervising task waits for.
enum Process {
    /// Started by this agent process: waited for as its child.
    Child(Child),
    /// Started by an earlier agent process and adopted: watched through `/proc` until it ends,
    /// then its exit read from what its tether wrote.
    Adopted { pid: u32, started: u64, exit_file: PathBuf },
}

/// How often an adopted process is looked at.
const ADOPTED_POLL: Duration = Duration::from_millis(100);

impl Process {
    async fn wait(&mut self, killed: bool) -> std::io::Result<ExitStatus> {
        match self {
            Process::Child(child) => child.wait().await,
            Process::Adopted { pid, started, exit_file } => {
                while records::process_started(*pid) == Some(*started) {
                    tokio::time::sleep(ADOPTED_POLL).await;
                }
                match crate::tether::read_exit_file(exit_file) {
                    Some(status) => Ok(status),
                    // Its tether wrote nothing: SIGKILL ended it, the agent's own or another's.
                    None if killed => Ok(ExitStatus::from_raw(Signal::SIGKILL as i32)),
                    None => Err(std::io::Error::other(
                        "it ended while no node agent ran, and its tether left no record of how",
                    )),
                }
            }
        }
    }
}

struct Supervision {
    process: Process,
    workload_id: Uuid,
    attempt: u32,
    control: mpsc::UnboundedReceiver<Control>,
    exits: mpsc::UnboundedSender<Exit>,
    started_at: Instant,
    execution: Arc<dyn Execution>,
    /// The last line it wrote on stderr, when its output is spooled: why an executor failed it.
    last_stderr: Arc<std::sync::Mutex<Option<String>>>,
    cleanup: Cleanup,
    /// Tells the output tails the process has ended.
    ended: watch::Sender<bool>,
    tails: Vec<tokio::task::JoinHandle<()>>,
}

/// How long the tails get to read a workload's last output after it ended.
const TAIL_DRAIN: Duration = Duration::from_secs(5);

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
    let mut ending: Option<Ending> = None;
    let mut control_open = true;
    let status = loop {
        let kill_at = ending.as_ref().and_then(|e| e.kill_at);
        let killed = ending.as_ref().is_some_and(|e| e.killed.is_some());
        tokio::select! {
            status = s.process.wait(killed) => break status,
            command = s.control.recv(), if control_open => match command {
                Some(Control::Stop { grace, reason }) if ending.is_none() => {
                    let kill_at = Instant::now() + s.execution.stop(grace);
                    ending = Some(Ending { reason, grace, kill_at: Some(kill_at), killed: None });
                }
                Some(Control::Stop { .. }) => {}
                Some(Control::Kill { reason }) => {
                    s.execution.kill();
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
                s.execution.kill();
                if let Some(ending) = ending.as_mut() {
                    ending.kill_at = None;
                    ending.killed = Some(KillCause::GraceExpired);
                }
            }
        }
    };
    s.execution.clear().await;

    // The last output is read before the spool goes with the attempt's directory.
    let _ = s.ended.send(true);
    for tail in std::mem::take(&mut s.tails) {
        if tokio::time::timeout(TAIL_DRAIN, tail).await.is_err() {
            tracing::warn!(workload_id = %s.workload_id, "the workload's last output could not be read in time");
        }
    }
    let exit = exit_report(&s, status, ending);
    std::mem::take(&mut s.cleanup).run().await;
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
    let stopped = ending.is_some();
    let mut message = ending.map(|ending| match ending.killed {
        None => format!("stopped: {}", ending.reason),
        Some(KillCause::GraceExpired) => format!(
            "stopped: {}; killed with SIGKILL after the {} ms grace period",
            ending.reason,
            ending.grace.as_millis()
        ),
        Some(KillCause::Requested) => format!("killed: {}", ending.reason),
    });
    // An attempt its executor could not run (a container whose image is missing): its word.
    if let (false, Some(code)) = (stopped, exit_code) {
        let last = s.last_stderr.lock().ok().and_then(|l| l.clone());
        if let Some(reason) = s.execution.failure(code, last.as_deref()) {
            message = Some(reason);
        }
    }
    let lost = wait_error.is_some();
    if let Some(error) = wait_error {
        message = Some(format!("lost track of the process: {error}"));
    }
    Exit { workload_id: s.workload_id, attempt: s.attempt, exit_code, signal, message, runtime, lost }
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
            gpu_milli: WHOLE_GPU_MILLI,
            gpu_memory_mb: None,
            grace_period: Duration::from_secs(30),
            container: None,
            cpu_millis: None,
            memory_mb: None,
            serving: None,
        }
    }

    fn slot(runtime_id: &str, sharing: GpuSharing) -> GpuSlot {
        GpuSlot { runtime_id: runtime_id.into(), sharing }
    }

    fn nvidia(mps_pipe_directory: Option<PathBuf>) -> Arc<dyn Accelerator> {
        Arc::new(crate::telemetry::nvidia::Nvidia::new(mps_pipe_directory))
    }

    /// Eight whole GPUs, slot = NVML index.
    fn whole_gpus() -> GpuSlots {
        GpuSlots::new((0..8).map(|i| (i, slot(&i.to_string(), GpuSharing::None))), nvidia(None))
    }

    fn runner() -> (Runner, mpsc::UnboundedReceiver<Exit>) {
        runner_with(whole_gpus())
    }

    fn runner_with(slots: GpuSlots) -> (Runner, mpsc::UnboundedReceiver<Exit>) {
        Runner::new(std::env::temp_dir(), OutputMode::Log, "runner-test", slots)
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
    async fn tracks_gpu_holders_and_refuses_a_second_start() -> Result<(), SpawnError> {
        let (mut runner, mut exits) = runner();
        let holders = runner.holders();
        let mut spec = spec(&["sleep", "30"]);
        spec.gpu_indices = vec![1, 3];
        spec.gpu_milli = 500;
        spec.gpu_memory_mb = Some(1024);
        spec.env.insert(SIMULATED_GPU_UTIL.into(), "0.02".into());
        let started = runner.start(&spec)?;
        assert_eq!(holders.borrow().slots(), std::collections::BTreeSet::from([1, 3]));
        assert_eq!(
            holders.borrow().holders(),
            [Holder {
                workload_id: spec.workload_id,
                pid: started.pid,
                slots: vec![1, 3],
                milli: 500,
                memory_mb: Some(1024),
                simulated_busy_milli: Some(20),
            }]
        );
        assert!(matches!(runner.start(&spec), Err(SpawnError::AlreadyRunning { .. })));
        runner.stop(spec.workload_id, Some(Duration::ZERO), "test over");
        let exit = next_exit(&mut exits).await;
        runner.reap(&exit);
        assert!(holders.borrow().holders().is_empty());
        Ok(())
    }

    /// Runs `sh -c 'env > OUT'` as `spec` and returns the environment the child saw.
    async fn child_env(
        runner: &mut Runner,
        exits: &mut mpsc::UnboundedReceiver<Exit>,
        mut spec: WorkloadSpec,
    ) -> Result<BTreeMap<String, String>, Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let out = dir.path().join("env");
        spec.command = vec!["sh".into(), "-c".into(), "env > \"$OUT_FILE\"".into()];
        spec.env.insert("OUT_FILE".into(), out.display().to_string());
        runner.start(&spec)?;
        let exit = next_exit(exits).await;
        runner.reap(&exit);
        assert_eq!(exit.exit_code, Some(0), "{exit:?}");
        let written = std::fs::read_to_string(&out)?;
        Ok(written.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_owned(), v.to_owned())).collect())
    }

    #[tokio::test]
    async fn a_share_of_an_mps_gpu_runs_with_its_share_of_the_sms_and_memory() -> Result<(), Box<dyn std::error::Error>>
    {
        let pipe = PathBuf::from("/run/airtime-test/mps/pipe");
        let slots = GpuSlots::new(
            [(0, slot("0", GpuSharing::Mps)), (1, slot("1", GpuSharing::Mps)), (2, slot("2", GpuSharing::Mps))],
            nvidia(Some(pipe.clone())),
        );
        let (mut runner, mut exits) = runner_with(slots);
        let mut share = spec(&[]);
        share.gpu_indices = vec![2, 0];
        share.gpu_milli = 250;
        share.gpu_memory_mb = Some(20480);
        // The assignment cannot widen its share, nor point the workload at another daemon.
        share.env = BTreeMap::from([
            ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".into(), "100".into()),
            ("CUDA_MPS_PIPE_DIRECTORY".into(), "/tmp/elsewhere".into()),
            ("AIRTIME_GPU_MILLI".into(), "1000".into()),
            ("MODEL".into(), "llama".into()),
        ]);
        let env = child_env(&mut runner, &mut exits, share.clone()).await?;
        let get = |k: &str| env.get(k).map(String::as_str);
        assert_eq!(get("CUDA_VISIBLE_DEVICES"), Some("2,0"));
        assert_eq!(get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), Some("25"));
        assert_eq!(get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), Some("0=20480M,1=20480M"));
        assert_eq!(get("CUDA_MPS_PIPE_DIRECTORY"), Some("/run/airtime-test/mps/pipe"));
        assert_eq!(get("AIRTIME_GPU_MILLI"), Some("250"));
        assert_eq!(get("AIRTIME_GPU_SHARING"), Some("mps"));
        assert_eq!(get("MODEL"), Some("llama"));

        // A share rounds up to a whole percent; a whole GPU on MPS gets no limits, only the daemon.
        let mut sliver = share.clone();
        sliver.workload_id = Uuid::new_v4();
        sliver.gpu_indices = vec![1];
        sliver.gpu_milli = 1;
        sliver.gpu_memory_mb = None;
        let env = child_env(&mut runner, &mut exits, sliver).await?;
        assert_eq!(env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE").map(String::as_str), Some("1"));
        assert_eq!(env.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), None);
        let mut whole = share.clone();
        whole.workload_id = Uuid::new_v4();
        whole.gpu_milli = WHOLE_GPU_MILLI;
        let env = child_env(&mut runner, &mut exits, whole).await?;
        assert_eq!(env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), None, "the assignment's own value is dropped");
        assert_eq!(env.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), None);
        assert_eq!(env.get("CUDA_MPS_PIPE_DIRECTORY").map(String::as_str), Some("/run/airtime-test/mps/pipe"));
        assert_eq!(env.get("AIRTIME_GPU_MILLI").map(String::as_str), Some("1000"));
        Ok(())
    }

    #[tokio::test]
    async fn mig_and_time_sliced_slots_are_named_as_cuda_knows_them() -> Result<(), Box<dyn std::error::Error>> {
        let slots = GpuSlots::new(
            [
                (0, slot("MIG-SIM-n1-0-0", GpuSharing::Mig)),
                (1, slot("MIG-SIM-n1-0-1", GpuSharing::Mig)),
                (2, slot("1", GpuSharing::None)),
                (3, slot("2", GpuSharing::TimeSlicing)),
            ],
            nvidia(Some(PathBuf::from("/unused"))),
        );
        let (mut runner, mut exits) = runner_with(slots);
        let mut mig = spec(&[]);
        mig.gpu_indices = vec![1];
        let env = child_env(&mut runner, &mut exits, mig).await?;
        assert_eq!(env.get("CUDA_VISIBLE_DEVICES").map(String::as_str), Some("MIG-SIM-n1-0-1"));
        assert_eq!(env.get("AIRTIME_GPU_SHARING").map(String::as_str), Some("mig"));

        // Time-slicing isolates nothing: only the share is said.
        let mut sliced = spec(&[]);
        sliced.gpu_indices = vec![3];
        sliced.gpu_milli = 500;
        sliced.gpu_memory_mb = Some(1000);
        let env = child_env(&mut runner, &mut exits, sliced).await?;
        assert_eq!(env.get("CUDA_VISIBLE_DEVICES").map(String::as_str), Some("2"));
        assert_eq!(env.get("AIRTIME_GPU_MILLI").map(String::as_str), Some("500"));
        assert_eq!(env.get("AIRTIME_GPU_SHARING").map(String::as_str), Some("time_slicing"));
        assert!(!env.keys().any(|k| k.starts_with("CUDA_MPS_")), "{env:?}");

        // GPUs of different modes: one mode per GPU. A CPU placement: none.
        let mut mixed = spec(&[]);
        mixed.gpu_indices = vec![2, 0];
        let env = child_env(&mut runner, &mut exits, mixed).await?;
        assert_eq!(env.get("CUDA_VISIBLE_DEVICES").map(String::as_str), Some("1,MIG-SIM-n1-0-0"));
        assert_eq!(env.get("AIRTIME_GPU_SHARING").map(String::as_str), Some("none,mig"));
        let env = child_env(&mut runner, &mut exits, spec(&[])).await?;
        assert_eq!(env.get("CUDA_VISIBLE_DEVICES").map(String::as_str), Some(""));
        assert_eq!(env.get("AIRTIME_GPU_SHARING").map(String::as_str), Some("none"));

        // A slot the node does not have is refused, not guessed.
        let mut unknown = spec(&["true"]);
        unknown.gpu_indices = vec![3, 9];
        let error = runner.start(&unknown).err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(error, "GPU 9 is not one of this node's GPUs (it has 0, 1, 2, 3)");
        assert!(runner.get(unknown.workload_id).is_none());
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
