//! The agent's loops, tying the client, telemetry and the runner together.
//!
//! Five concurrent parts, each a task:
//! - **registration** registers at start and again whenever any call answers `404 node_not_found`;
//!   the other parts wait for it (they read the current [`Registration`] from the [`Session`]);
//! - **heartbeat** samples telemetry and posts it every heartbeat interval;
//! - **poller** long-polls the desired state and publishes each answer;
//! - **reconciler** (the task that called [`run`]) owns the [`Runner`]: it starts and stops
//!   processes to match the desired state and turns process exits into events;
//! - **event delivery** posts workload events in order, retrying until the control plane answers.
//!
//! The reconciler never waits on the network, so a slow or absent control plane cannot delay a
//! stop, and the time from a desired state arriving to the process spawning is the spawn itself.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use thiserror::Error;
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, sleep, sleep_until, timeout};
use uuid::Uuid;

use crate::backoff::Backoff;
use crate::client::{ClientError, ControlPlaneClient};
use crate::config::{Config, OnLostContact, OnStop, WorkloadOutput};
use crate::containers::Engine;
use crate::credential::{self, CredentialError, Secret};
use crate::logs::{self, LogSink};
use crate::protocol::{self, Assignment, AssignmentAction, DesiredState, EventReport};
use crate::runner::mps;
use crate::runner::{Exit, GpuSlots, Leftover, OutputMode, Runner, RunningWorkload, WorkloadSpec};
use crate::telemetry::{GpuHolders, GpuSettings, GpuSlot, Telemetry, TelemetryError};
use crate::tether::Orphaned;

/// How long each long-poll asks the control plane to hold the request.
pub const LONG_POLL_WAIT: Duration = Duration::from_millis(25_000);
/// Bounds on the heartbeat interval, whatever the control plane answers.
const MIN_HEARTBEAT: Duration = Duration::from_millis(100);
const MAX_HEARTBEAT: Duration = Duration::from_secs(60);
/// A long-poll answered faster than this without a change means the control plane did not hold
/// it; wait the rest of it rather than spin.
const MIN_UNCHANGED_POLL: Duration = Duration::from_secs(1);
/// At shutdown: how long after the longest grace period before SIGKILL, how long to wait for
/// processes after SIGKILL, and how long to keep trying to deliver the last events.
const SHUTDOWN_KILL_MARGIN: Duration = Duration::from_secs(2);
const SHUTDOWN_KILL_WAIT: Duration = Duration::from_secs(5);
const SHUTDOWN_EVENT_FLUSH: Duration = Duration::from_secs(5);

#[derive(Debug, Error)]
pub enum AgentError {
    #[error(transparent)]
    Telemetry(#[from] TelemetryError),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("work directory {path}: {reason}")]
    WorkDir { path: String, reason: String },
    #[error("{0}")]
    Isolation(String),
    #[error("the {0} task stopped unexpectedly: {1}")]
    TaskEnded(&'static str, String),
    #[error(transparent)]
    Credential(#[from] CredentialError),
    #[error(
        "the container engine does not answer: {0} (--container-engine auto finds one or none; none runs no container work)"
    )]
    ContainerEngine(String),
    #[error(
        "this node has no credential in {state_dir}: start the agent once with --enrolment-token \
         (a one-time token from POST /api/v1/enrolment-tokens)"
    )]
    NoCredential { state_dir: String },
}

/// The node as the control plane currently knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registration {
    pub node_id: Uuid,
    pub heartbeat_interval: Duration,
    /// Counts registrations, so a 404 from a call made under an earlier registration does not
    /// undo a newer one (the node id alone may not change).
    pub generation: u64,
    /// After this long without a delivered heartbeat the control plane counts the node lost, and
    /// the agent fences its work.
    pub lease: Duration,
}

/// The current registration, shared by the agent's tasks, and when the control plane last
/// answered (a registration or a delivered heartbeat).
#[derive(Debug)]
pub struct Session {
    state: watch::Sender<Option<Registration>>,
    contact: std::sync::Mutex<Option<Instant>>,
}

impl Default for Session {
    fn default() -> Self {
        Self { state: watch::channel(None).0, contact: std::sync::Mutex::new(None) }
    }
}

impl Session {
    /// The control plane answered just now.
    pub fn touch(&self) {
        *self.contact.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }

    /// How long since the control plane last answered; `None` before it ever did.
    pub fn silent_for(&self) -> Option<Duration> {
        self.contact.lock().unwrap_or_else(PoisonError::into_inner).map(|at| at.elapsed())
    }

    /// The lease of the latest registration, whether or not it is still current.
    pub fn lease(&self) -> Option<Duration> {
        self.state.borrow().map(|r| r.lease)
    }

    /// The current registration, waiting for one if the node is not registered.
    pub async fn current(&self) -> Registration {
        let mut state = self.state.subscribe();
        let registration = match state.wait_for(Option::is_some).await {
            Ok(current) => *current,
            // The sender lives in `self`, so the channel cannot close while we wait.
            Err(_) => None,
        };
        match registration {
            Some(registration) => registration,
            None => std::future::pending().await,
        }
    }

    /// Marks the node unregistered after `registration` was answered `404 node_not_found`.
    pub fn lost(&self, registration: &Registration) {
        let invalidated = self.state.send_if_modified(|state| {
            let same = state.is_some_and(|s| s.generation == registration.generation);
            if same {
                *state = None;
            }
            same
        });
        if invalidated {
            tracing::warn!(node_id = %registration.node_id, "the control plane does not know this node; registering again");
        }
    }

    async fn wait_unregistered(&self) {
        let mut state = self.state.subscribe();
        if state.wait_for(Option::is_none).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    fn set(&self, registration: Registration) {
        self.state.send_replace(Some(registration));
    }
}

/// A desired state and when it arrived (for the spawn latency).
#[derive(Debug)]
pub struct Desired {
    pub state: DesiredState,
    pub received_at: Instant,
}

/// A workload event waiting to be delivered.
#[derive(Debug, Clone, PartialEq)]
pub struct OutgoingEvent {
    pub workload_id: Uuid,
    pub event: EventReport,
}

/// Runs the agent until a stop request arrives on `stop_requests` (or its sender is dropped):
/// then it leaves the workloads running under their tethers for the next agent process to adopt
/// (`--on-stop leave`, the default), or stops them with their grace periods to be requeued
/// (`--on-stop requeue`, and always for work that cannot outlive the agent), delivers their last
/// events, and returns. A second request kills workloads being stopped at once.
pub async fn run(config: Config, mut stop_requests: mpsc::Receiver<()>) -> Result<(), AgentError> {
    check_work_dir(&config.work_dir)?;
    let private_dir = check_isolation(&config)?;
    let telemetry = discover_telemetry(&config).await?;
    let accelerator = telemetry.accelerator();
    let engine = Engine::detect(&config.containers, accelerator.cdi_vendor())
        .await
        .map_err(AgentError::ContainerEngine)?
        .map(Arc::new);
    let request = register_request(&config, &telemetry, engine.as_deref());
    tracing::info!(
        name = %request.name,
        control_plane = %config.control_plane,
        cpu_millis = request.cpu_millis,
        memory_mb = request.memory_mb,
        gpu_source = %serde_json::to_value(request.gpu_source).unwrap_or_default(),
        gpus = request.gpus.len(),
        gpu_sharing = %config.gpu_sharing,
        container_engine = %engine.as_ref().map_or_else(|| "none".to_owned(), |e| format!("{} {}", e.kind.as_str(), e.version)),
        "node agent starting"
    );
    let slots = GpuSlots::new(
        telemetry
            .devices()
            .into_iter()
            .map(|d| (d.inventory.index, GpuSlot { runtime_id: d.runtime_id, sharing: d.inventory.sharing })),
        accelerator,
    );
    let client = ControlPlaneClient::new(&config.control_plane)?;
    // The stored credential when the node enrolled before; else the enrolment token, exchanged by
    // the registration task before it registers.
    let enrolment = match credential::load(&config.state_dir)? {
        Some(stored) => {
            client.set_credential(&stored)?;
            if config.enrolment_token.is_some() {
                tracing::info!(state_dir = %config.state_dir.display(), "using the stored node credential; the enrolment token is not needed");
            }
            None
        }
        None => match &config.enrolment_token {
            Some(token) => Some(Enrolment { token: token.clone(), state_dir: config.state_dir.clone() }),
            None => {
                return Err(AgentError::NoCredential { state_dir: config.state_dir.display().to_string() });
            }
        },
    };
    let session = Arc::new(Session::default());
    let output = match config.workload_output {
        WorkloadOutput::Log => OutputMode::Log,
        WorkloadOutput::Inherit => OutputMode::Inherit,
    };
    let (runner, mut exits) = Runner::new(config.work_dir.clone(), output, &config.name, slots);
    let mount_prefixes = config
        .container_mount_prefixes
        .iter()
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
        .collect();
    let runner = match engine.clone() {
        Some(engine) => runner.with_engine(engine, mount_prefixes),
        None => runner,
    };
    // Captured output goes to the control plane too (inherited output is the agent's own). Chunk
    // numbers start above every earlier agent process's.
    let generation = next_generation(&config.state_dir);
    let (log_sink, log_source) = LogSink::new(logs::first_seq(generation));
    let runner = if output == OutputMode::Log { runner.with_logs(log_sink) } else { runner };
    // Each workload runs under a tether that outlives this process: while the node's lease lasts
    // (for the next agent process to adopt it), or regardless with `--on-lost-contact keep`. An
    // agent run as a library (tests) without its binary cannot tether.
    let lease_file = config.state_dir.join(LEASE_FILE);
    let runner = match (config.on_lost_contact, config.tether_binary.clone()) {
        (OnLostContact::Stop, Some(binary)) => runner.with_tether(binary, Orphaned::WhileLeased(lease_file.clone())),
        (OnLostContact::Keep, Some(binary)) => runner.with_tether(binary, Orphaned::Keep),
        (_, None) => runner,
    };
    let mut runner = runner
        .with_private_dir(private_dir)
        .with_attempts_dir(config.state_dir.join("workloads"))
        .with_isolation(config.tether_binary.clone(), config.process_user.clone(), config.workloads);
    // What an earlier agent process of this node left running is adopted; what it left without a
    // record (an agent before records, a process that escaped its tether) is ended.
    let recovered = runner.recover();
    let adopted: Vec<RunningWorkload> = recovered.iter().filter(|(_, alive)| *alive).map(|(w, _)| w.clone()).collect();
    let leftovers = runner.end_leftovers(&adopted).await;
    // The first registration lists every recovered attempt, those that ended while no agent ran
    // included: the control plane keeps them until their exits, already on their way, arrive.
    let mut request = request;
    request.running = recovered
        .iter()
        .map(|(w, _)| protocol::RunningAttempt { workload_id: w.workload_id, attempt: w.attempt })
        .collect();
    let outlives_agent = config.tether_binary.is_some();
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let (desired_tx, mut desired_rx) = watch::channel(None::<Arc<Desired>>);

    let mut registration = tokio::spawn(keep_registered(
        client.clone(),
        Arc::clone(&session),
        request,
        runner.attempts(),
        enrolment,
        config.lease,
    ));
    let mut heartbeat = tokio::spawn(send_heartbeats(
        client.clone(),
        Arc::clone(&session),
        Arc::new(Mutex::new(telemetry)),
        runner.holders(),
        runner.serving_targets(),
        config.heartbeat_override,
    ));
    let mut poller = tokio::spawn(poll_assignments(client.clone(), Arc::clone(&session), desired_tx));
    let log_session = Arc::clone(&session);
    let mut shipper = tokio::spawn(logs::ship(client.clone(), log_source, move || {
        let session = Arc::clone(&log_session);
        async move { session.current().await.node_id }
    }));
    let mut delivery = tokio::spawn(deliver_events(client, Arc::clone(&session), events_rx, desired_rx.clone()));

    let mut reconciler = Reconciler::new(runner, events_tx);
    reconciler.report_adopted(&recovered);
    reconciler.report_leftovers(leftovers);
    let mut latest: Option<Arc<Desired>> = None;
    let mut failure = None;
    let mut delivery_ended = false;
    let mut fence_check = tokio::time::interval(FENCE_CHECK);
    fence_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut lease_written = 0_u64;
    loop {
        tokio::select! {
            biased;
            _ = stop_requests.recv() => break,
            Some(exit) = exits.recv() => {
                reconciler.on_exit(exit);
                // An exit can free GPUs or make room for a newer attempt of the same workload.
                if let Some(desired) = latest.as_ref().filter(|_| !reconciler.fenced) {
                    reconciler.apply(desired);
                }
            }
            Ok(()) = desired_rx.changed() => {
                latest = desired_rx.borrow_and_update().clone();
                if let Some(desired) = latest.as_ref().filter(|_| !reconciler.fenced) {
                    reconciler.apply(desired);
                }
            }
            _ = fence_check.tick() => {
                if !reconciler.fenced {
                    lease_written = renew_lease_file(&lease_file, &session, lease_written);
                }
                let lease = session.lease().unwrap_or(config.lease);
                match session.silent_for() {
                    Some(silent) if silent > lease && !reconciler.fenced => {
                        reconciler.fence(silent, config.on_lost_contact);
                    }
                    Some(silent) if silent <= lease && reconciler.fenced => {
                        tracing::info!("the control plane answers again; following its desired state");
                        reconciler.fenced = false;
                        if let Some(desired) = &latest {
                            reconciler.apply(desired);
                        }
                    }
                    _ => {}
                }
            }
            ended = &mut registration => { failure = Some(task_ended("registration", ended)); break; }
            ended = &mut heartbeat => { failure = Some(task_ended("heartbeat", ended)); break; }
            ended = &mut poller => { failure = Some(task_ended("assignments poller", ended)); break; }
            ended = &mut delivery => {
                failure = Some(task_ended("event delivery", ended));
                delivery_ended = true;
                break;
            }
        }
    }

    poller.abort();
    let leave = failure.is_none() && outlives_agent && config.on_stop == OnStop::Leave;
    if leave {
        let running = reconciler.runner.running().len();
        tracing::info!(
            workloads = running,
            "stop requested; leaving the workloads running for the next agent process (their tethers keep them \
             while the node's lease lasts)"
        );
    } else {
        tracing::info!("stop requested; stopping workloads to be requeued (a second request kills them)");
        reconciler.requeue_exits = true;
        reconciler.stop_all_and_wait(&mut exits, &mut stop_requests).await;
    }
    // Dropping the reconciler closes the event queue: delivery ends once it is drained.
    drop(reconciler);
    if !delivery_ended && timeout(SHUTDOWN_EVENT_FLUSH, &mut delivery).await.is_err() {
        tracing::warn!("could not deliver every workload event before exiting");
        delivery.abort();
    }
    // The runner is gone and its processes with it: the shipper ends once their last output is
    // delivered (or after the flush time, while the control plane cannot be reached). Left
    // running, their output is shipped by the next agent from where the control plane's copy ends.
    if leave {
        shipper.abort();
    } else if timeout(SHUTDOWN_EVENT_FLUSH, &mut shipper).await.is_err() {
        tracing::warn!("could not ship every workload's last output before exiting");
        shipper.abort();
    }
    heartbeat.abort();
    registration.abort();
    tracing::info!("node agent stopped");
    failure.map_or(Ok(()), Err)
}

/// The file in the state directory that holds the node's lease for the workloads' tethers.
const LEASE_FILE: &str = "lease";

/// Rewrites the lease file when the lease moved (by half a second or more): its deadline is when
/// the control plane will count the node lost, as a `CLOCK_BOOTTIME` instant. Returns the
/// deadline written (or `written`, unchanged).
fn renew_lease_file(file: &Path, session: &Session, written: u64) -> u64 {
    let (Some(silent), Some(lease)) = (session.silent_for(), session.lease()) else {
        return written;
    };
    let deadline = crate::tether::boottime_ms() + lease.saturating_sub(silent).as_millis() as u64;
    if deadline < written + 500 {
        return written;
    }
    let partial = file.with_extension("partial");
    match std::fs::write(&partial, deadline.to_string()).and_then(|()| std::fs::rename(&partial, file)) {
        Ok(()) => deadline,
        Err(error) => {
            tracing::warn!(file = %file.display(), %error, "cannot renew the workloads' lease");
            written
        }
    }
}

/// This agent process's generation: one more than the last start's, kept in the state directory.
fn next_generation(state_dir: &Path) -> u64 {
    let file = state_dir.join("generation");
    let last: u64 = std::fs::read_to_string(&file).ok().and_then(|t| t.trim().parse().ok()).unwrap_or(0);
    let next = last + 1;
    if let Err(error) = std::fs::write(&file, next.to_string()) {
        tracing::warn!(file = %file.display(), %error, "cannot record the agent's generation");
    }
    next
}

/// How often the agent checks whether the control plane has been silent past the lease.
const FENCE_CHECK: Duration = Duration::from_millis(250);

/// Warn about the first failure of an outage and then about once a minute (at the capped backoff),
/// rather than at every retry.
fn worth_a_warning(failures: u32) -> bool {
    failures == 1 || failures.is_multiple_of(12)
}

fn task_ended(name: &'static str, ended: Result<(), tokio::task::JoinError>) -> AgentError {
    let reason = match ended {
        Ok(()) => "returned".to_owned(),
        Err(error) => error.to_string(),
    };
    tracing::error!(task = name, %reason, "an agent task stopped; shutting down");
    AgentError::TaskEnded(name, reason)
}

/// The state directory made the agent's alone (0700: its credential is in it), and in it the
/// private directory of workloads' environment files, emptied of an earlier agent's; a process
/// user checked (one the agent shares, or that it cannot switch to, stops it at start).
fn check_isolation(config: &Config) -> Result<std::path::PathBuf, AgentError> {
    use std::os::unix::fs::PermissionsExt as _;
    let error = |reason: String| AgentError::Isolation(reason);
    config.process_user.check().map_err(error)?;
    if config.process_user != crate::isolation::ProcessUser::Agent && config.tether_binary.is_none() {
        return Err(error("--process-user needs the agent's own binary to launch workloads".into()));
    }
    let state = &config.state_dir;
    std::fs::create_dir_all(state).map_err(|e| error(format!("state directory {}: {e}", state.display())))?;
    std::fs::set_permissions(state, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| error(format!("state directory {}: {e}", state.display())))?;
    let private = state.join("run");
    match std::fs::remove_dir_all(&private) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(error(format!("{}: {e}", private.display()))),
    }
    Ok(private)
}

fn check_work_dir(path: &Path) -> Result<(), AgentError> {
    let error = |reason: String| AgentError::WorkDir { path: path.display().to_string(), reason };
    let metadata = std::fs::metadata(path).map_err(|e| error(e.to_string()))?;
    if !metadata.is_dir() {
        return Err(error("not a directory".into()));
    }
    Ok(())
}

/// Finds the node's GPUs, and in MPS mode with real GPUs joins or starts the MPS daemon they are
/// shared through (`None` when none serves them).
async fn discover_telemetry(config: &Config) -> Result<Telemetry, AgentError> {
    let config = config.clone();
    // Loading NVML, reading /proc and running the MPS control program block; keep them off the
    // async workers.
    tokio::task::spawn_blocking(move || {
        let settings = GpuSettings {
            nvml: &config.nvml,
            simulated: &config.simulated_gpus,
            sharing: config.gpu_sharing,
            mig_layout: config.mig_layout.as_ref(),
            node_name: &config.name,
            simulated_faults: config.simulated_gpu_faults.as_deref(),
        };
        let telemetry = Telemetry::discover(&settings, || {
            mps::start_or_join(&config.mps).map(|daemon| daemon.pipe_directory().to_path_buf())
        })?;
        Ok(telemetry)
    })
    .await
    .map_err(|e| AgentError::TaskEnded("telemetry discovery", e.to_string()))?
}

/// Where a gang member's hostfile is written: a readable temporary file per attempt (the member
/// may run as another user), removed when the attempt exits.
fn hostfile_path(workload_id: Uuid, attempt: u32) -> PathBuf {
    std::env::temp_dir().join("airtime-hostfiles").join(format!("{}-{attempt}", workload_id.simple()))
}

fn register_request(config: &Config, telemetry: &Telemetry, engine: Option<&Engine>) -> protocol::Registration {
    let inventory = telemetry.inventory();
    protocol::Registration {
        name: config.name.clone(),
        hostname: config.hostname.clone(),
        // The protocol carries u32 (4 million cores); a larger count is reported as the most it can say.
        cpu_millis: u32::try_from(inventory.cpu_millis).unwrap_or(u32::MAX),
        memory_mb: inventory.memory_mb,
        labels: config.labels.clone(),
        cost_per_hour: config.cost_per_hour,
        agent_version: env!("CARGO_PKG_VERSION").to_owned(),
        gpu_source: inventory.gpu_source,
        gpus: inventory.gpus,
        container_engine: engine.map(Engine::describe),
        protocol: Some(protocol::protocol_version()),
        running: Vec::new(),
        address: config.advertise_address.clone(),
    }
}

/// An enrolment still to do: the one-time token, and where to keep the credential it buys.
struct Enrolment {
    token: Secret,
    state_dir: std::path::PathBuf,
}

/// Exchanges the enrolment token for the node's credential and stores it. `Ok(false)`: worth
/// retrying (no answer yet); `Err`: the token was refused or the credential cannot be kept.
async fn enrol(client: &ControlPlaneClient, name: &str, enrolment: &Enrolment) -> Result<bool, String> {
    match client.enrol(&enrolment.token, name).await {
        Ok(enrolled) => {
            let credential = Secret::new(enrolled.credential);
            credential::store(&enrolment.state_dir, &credential).map_err(|e| e.to_string())?;
            client.set_credential(&credential).map_err(|e| e.to_string())?;
            tracing::info!(credential_id = %enrolled.credential_id, state_dir = %enrolment.state_dir.display(), "enrolled; the node credential is stored");
            Ok(true)
        }
        Err(error) if error.is_retryable() => {
            tracing::warn!(%error, step = "enrol", "cannot register yet");
            Ok(false)
        }
        Err(error) => Err(error.to_string()),
    }
}

/// Registers whenever the node is not registered, retrying until the control plane accepts.
/// Enrols first when the node has no credential yet; a refused enrolment token ends the task (and
/// the agent), since no retry can make it valid.
async fn keep_registered(
    client: ControlPlaneClient,
    session: Arc<Session>,
    mut request: protocol::Registration,
    running: watch::Receiver<Vec<(Uuid, u32)>>,
    enrolment: Option<Enrolment>,
    default_lease: Duration,
) {
    let initial = std::mem::take(&mut request.running);
    let mut generation = 0;
    loop {
        session.wait_unregistered().await;
        // Capped low: registering is cheap, and a node waiting on it runs nothing.
        let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(5));
        let mut failures = 0_u32;
        if let Some(enrolment) = &enrolment {
            while !client.has_credential() {
                match enrol(&client, &request.name, enrolment).await {
                    Ok(true) => {}
                    Ok(false) => sleep(backoff.next_delay()).await,
                    Err(reason) => {
                        tracing::error!(%reason, "the control plane refused the enrolment token; create a new one (POST /api/v1/enrolment-tokens)");
                        return;
                    }
                }
            }
        }
        let response = loop {
            // What runs now stays on the node; the control plane requeues the rest of its work.
            // The first registration also lists what was recovered at start (an attempt that
            // ended while no agent ran may be reaped already; its exit is still to be delivered).
            let mut listed: Vec<protocol::RunningAttempt> = running
                .borrow()
                .iter()
                .map(|&(workload_id, attempt)| protocol::RunningAttempt { workload_id, attempt })
                .collect();
            if generation == 0 {
                for recovered in &initial {
                    if !listed.contains(recovered) {
                        listed.push(*recovered);
                    }
                }
            }
            request.running = listed;
            match client.register(&request).await {
                Ok(response) => break response,
                Err(error) => {
                    let delay = backoff.next_delay();
                    failures += 1;
                    if error.is_retryable() {
                        if worth_a_warning(failures) {
                            tracing::warn!(%error, failures, retry_in_ms = delay.as_millis(), "cannot register yet");
                        }
                    } else if error.is_unauthorized() {
                        tracing::error!(%error, retry_in_ms = delay.as_millis(), "the control plane refused this node's credential (revoked?); enrol the node again with a token made for its name");
                    } else {
                        // A refusal will not fix itself, but the agent may have workloads running:
                        // keep trying, loudly, rather than exit.
                        tracing::error!(%error, retry_in_ms = delay.as_millis(), "the control plane refused the registration");
                    }
                    sleep(delay).await;
                }
            }
        };
        generation += 1;
        tracing::info!(
            node_id = %response.node_id,
            heartbeat_interval_ms = response.heartbeat_interval_ms,
            "registered"
        );
        session.touch();
        session.set(Registration {
            node_id: response.node_id,
            heartbeat_interval: Duration::from_millis(response.heartbeat_interval_ms),
            generation,
            lease: response.lease_ms.map_or(default_lease, Duration::from_millis),
        });
    }
}

/// Samples and posts telemetry every heartbeat interval while the node is registered.
async fn send_heartbeats(
    client: ControlPlaneClient,
    session: Arc<Session>,
    telemetry: Arc<Mutex<Telemetry>>,
    holders: watch::Receiver<GpuHolders>,
    serving: watch::Receiver<Vec<crate::serving::ServingTarget>>,
    interval_override: Option<Duration>,
) {
    let mut failing = false;
    // Serving replicas are read beside them each heartbeat (`crate::serving`).
    let mut reader = crate::serving::Reader::new();
    loop {
        let registration = session.current().await;
        let tick = Instant::now();
        let holding = holders.borrow().clone();
        let sampler = Arc::clone(&telemetry);
        let sampled = tokio::task::spawn_blocking(move || {
            sampler.lock().unwrap_or_else(PoisonError::into_inner).sample(&holding)
        })
        .await;
        let targets = serving.borrow().clone();
        let replicas = if targets.is_empty() { Vec::new() } else { reader.read(&targets).await };
        match sampled.map(|report| crate::protocol::TelemetryReport { replicas, ..report }) {
            Ok(report) => match client.send_telemetry(registration.node_id, &report).await {
                Ok(()) => {
                    session.touch();
                    if failing {
                        tracing::info!("telemetry delivered again");
                    }
                    failing = false;
                }
                Err(error) if error.is_node_not_found() => {
                    session.lost(&registration);
                    continue;
                }
                Err(error) => {
                    // One warning per outage, not one per heartbeat.
                    if failing {
                        tracing::debug!(%error, "cannot deliver telemetry");
                    } else {
                        tracing::warn!(%error, "cannot deliver telemetry");
                    }
                    failing = true;
                }
            },
            Err(error) => tracing::error!(%error, "telemetry sampling failed"),
        }
        let interval = interval_override.unwrap_or(registration.heartbeat_interval).clamp(MIN_HEARTBEAT, MAX_HEARTBEAT);
        sleep_until(tick + interval).await;
    }
}

/// Long-polls the desired state and publishes every answer.
async fn poll_assignments(
    client: ControlPlaneClient,
    session: Arc<Session>,
    desired: watch::Sender<Option<Arc<Desired>>>,
) {
    let mut after = 0;
    let mut generation = 0;
    let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(5));
    let mut failures = 0_u32;
    loop {
        let registration = session.current().await;
        if registration.generation != generation {
            // A new registration may come with a new desired-state history: ask from the start.
            generation = registration.generation;
            after = 0;
        }
        let asked = Instant::now();
        match client.assignments(registration.node_id, after, LONG_POLL_WAIT).await {
            Ok(state) => {
                let received_at = Instant::now();
                backoff.reset();
                if failures > 0 {
                    tracing::info!(failures, "fetching assignments again");
                    failures = 0;
                }
                let unchanged = after != 0 && state.version <= after;
                tracing::debug!(version = state.version, assignments = state.assignments.len(), "desired state");
                after = state.version;
                desired.send_replace(Some(Arc::new(Desired { state, received_at })));
                if unchanged {
                    sleep_until(asked + MIN_UNCHANGED_POLL).await;
                }
            }
            Err(error) if error.is_node_not_found() => session.lost(&registration),
            Err(error) => {
                let delay = backoff.next_delay();
                failures += 1;
                if worth_a_warning(failures) {
                    tracing::warn!(%error, failures, retry_in_ms = delay.as_millis(), "cannot fetch assignments");
                }
                sleep(delay).await;
            }
        }
    }
}

/// The attempt tokens of the last two desired states: an event carries back its attempt's
/// (an exit is reported after its stop, by then maybe out of the newest state).
#[derive(Default)]
struct AttemptTokens {
    current: HashMap<(Uuid, u32), String>,
    previous: HashMap<(Uuid, u32), String>,
}

impl AttemptTokens {
    fn learn(&mut self, state: &DesiredState) {
        self.previous = std::mem::take(&mut self.current);
        self.current = state
            .assignments
            .iter()
            .filter_map(|a| Some(((a.workload_id, a.attempt), a.attempt_token.clone()?)))
            .collect();
    }

    fn get(&self, key: (Uuid, u32)) -> Option<String> {
        self.current.get(&key).or_else(|| self.previous.get(&key)).cloned()
    }
}

/// Posts events in order, each until the control plane answers (at-least-once), each with its
/// attempt's token from the desired state (the first desired state is waited for: an agent that
/// starts reports what an earlier one left before it has any).
async fn deliver_events(
    client: ControlPlaneClient,
    session: Arc<Session>,
    mut events: mpsc::UnboundedReceiver<OutgoingEvent>,
    mut desired: watch::Receiver<Option<Arc<Desired>>>,
) {
    let mut tokens = AttemptTokens::default();
    let mut learned: Option<Arc<Desired>> = None;
    while let Some(mut outgoing) = events.recv().await {
        let Ok(newest) = desired.wait_for(Option::is_some).await.map(|d| d.clone()) else {
            return;
        };
        if let Some(newest) = newest
            && !learned.as_ref().is_some_and(|l| Arc::ptr_eq(l, &newest))
        {
            tokens.learn(&newest.state);
            learned = Some(newest);
        }
        outgoing.event.attempt_token = tokens.get((outgoing.workload_id, outgoing.event.attempt));
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
        loop {
            let registration = session.current().await;
            let result = client.post_event(registration.node_id, outgoing.workload_id, &outgoing.event).await;
            let log = |error: &ClientError, what: &str| {
                tracing::warn!(
                    workload_id = %outgoing.workload_id,
                    attempt = outgoing.event.attempt,
                    event = outgoing.event.name(),
                    %error,
                    "{what}"
                );
            };
            match result {
                Ok(()) => {
                    tracing::debug!(workload_id = %outgoing.workload_id, event = outgoing.event.name(), "event delivered");
                    break;
                }
                Err(error) if error.is_stale_attempt() => {
                    tracing::info!(workload_id = %outgoing.workload_id, event = outgoing.event.name(), "event for an old attempt dropped");
                    break;
                }
                Err(error) if error.is_node_not_found() => {
                    // Deliver it again once registered anew.
                    session.lost(&registration);
                    sleep(backoff.next_delay()).await;
                }
                Err(error) if error.is_retryable() => {
                    log(&error, "cannot deliver event yet; retrying");
                    sleep(backoff.next_delay()).await;
                }
                Err(error) => {
                    log(&error, "the control plane refused the event; dropping it");
                    break;
                }
            }
        }
    }
}

/// Makes the running processes match the desired state.
struct Reconciler {
    runner: Runner,
    events: mpsc::UnboundedSender<OutgoingEvent>,
    /// Attempts started (or refused to start, or told to stop) since the agent began: a `run`
    /// still listed after its process exited must not start it again.
    launched: HashSet<(Uuid, u32)>,
    /// Runs deferred until a stopping workload releases their GPUs (logged once each).
    deferred: HashSet<(Uuid, u32)>,
    /// The control plane has not answered for longer than the lease: the desired state is not
    /// followed (it may be stale) until it answers again.
    fenced: bool,
    /// Attempts stopped by fencing: their exits ask to be requeued.
    fenced_attempts: HashSet<(Uuid, u32)>,
    /// Every exit asks to be requeued (the agent stops its work for its own sake: `--on-stop
    /// requeue`, or work that cannot outlive it).
    requeue_exits: bool,
}

impl Reconciler {
    fn new(runner: Runner, events: mpsc::UnboundedSender<OutgoingEvent>) -> Self {
        Self {
            runner,
            events,
            launched: HashSet::new(),
            deferred: HashSet::new(),
            fenced: false,
            fenced_attempts: HashSet::new(),
            requeue_exits: false,
        }
    }

    /// Keeps the attempts recovered from an earlier agent process from starting again, and
    /// reports those still running as started (the control plane may not have heard that they
    /// were); the exits of those that ended meanwhile are on their way.
    fn report_adopted(&mut self, recovered: &[(RunningWorkload, bool)]) {
        for (w, alive) in recovered {
            self.launched.insert((w.workload_id, w.attempt));
            if *alive {
                self.send(w.workload_id, EventReport::started(w.attempt, w.pid));
            }
        }
    }

    /// The control plane has been silent past the lease: it counts this node lost and will
    /// requeue its work once the grace period has passed. Stop every workload now (SIGTERM, then
    /// SIGKILL after its grace period) so the requeued copy never runs beside this one — unless the
    /// node is configured to keep its work through an outage (stateless replicas).
    fn fence(&mut self, silent: Duration, mode: OnLostContact) {
        self.fenced = true;
        let running = self.runner.running();
        if running.is_empty() {
            tracing::warn!(silent_ms = silent.as_millis(), "the control plane has not answered past the lease");
            return;
        }
        match mode {
            OnLostContact::Keep => {
                tracing::warn!(
                    silent_ms = silent.as_millis(),
                    workloads = running.len(),
                    "the control plane has not answered past the lease; keeping the workloads running (--on-lost-contact keep)"
                );
            }
            OnLostContact::Stop => {
                tracing::warn!(
                    silent_ms = silent.as_millis(),
                    workloads = running.len(),
                    "the control plane has not answered past the lease; stopping the workloads (fencing): it will requeue them"
                );
                let reason = format!("fenced: no answer from the control plane for {} s", silent.as_secs());
                for w in running.iter().filter(|w| !w.stopping) {
                    self.fenced_attempts.insert((w.workload_id, w.attempt));
                    self.runner.stop(w.workload_id, None, &reason);
                }
            }
        }
    }

    fn apply(&mut self, desired: &Desired) {
        let assignments = &desired.state.assignments;
        let listed: HashSet<Uuid> = assignments.iter().map(|a| a.workload_id).collect();

        // Stops first: they free the GPUs that runs in the same state may be placed on.
        for stop in assignments.iter().filter(|a| a.action == AssignmentAction::Stop) {
            let first = self.launched.insert((stop.workload_id, stop.attempt));
            let reason = stop.reason.as_deref().unwrap_or("stop requested");
            let running = self.runner.stop(stop.workload_id, Some(Duration::from_millis(stop.grace_period_ms)), reason);
            // A gang member held for its gang and stopped before it started: say so, so the
            // control plane requeues (or ends) it rather than wait for an exit that never comes.
            if first && !running && stop.gang.is_some() {
                let message = format!("stopped before its gang started: {reason}");
                self.send(stop.workload_id, EventReport::failed_to_start(stop.attempt, message));
            }
        }
        for running in self.runner.running() {
            if !listed.contains(&running.workload_id) && !running.stopping {
                self.runner.stop(running.workload_id, None, "no longer assigned to this node");
            }
        }
        for run in assignments.iter().filter(|a| a.action == AssignmentAction::Run) {
            self.reconcile_run(run, desired.received_at);
        }
        let runner = &self.runner;
        self.launched.retain(|(id, _)| listed.contains(id) || runner.get(*id).is_some());
        let launched = &self.launched;
        self.deferred.retain(|key| !launched.contains(key));
    }

    fn reconcile_run(&mut self, run: &Assignment, received_at: Instant) {
        let key = (run.workload_id, run.attempt);
        if let Some(current) = self.runner.get(run.workload_id) {
            // Another attempt of the same workload still runs: stop it; this attempt starts once
            // it has exited.
            if current.attempt != run.attempt && !current.stopping {
                let reason = format!("replaced by attempt {}", run.attempt);
                self.runner.stop(run.workload_id, None, &reason);
            }
            return;
        }
        if self.launched.contains(&key) {
            return;
        }
        // A gang member starts only once every member's node has its assignment.
        if run.gang.as_ref().is_some_and(|g| g.hold) {
            if self.deferred.insert(key) {
                tracing::info!(workload_id = %run.workload_id, attempt = run.attempt,
                    "holding a gang member until every member's node has its assignment");
            }
            return;
        }
        // A GPU is not free until the workload being stopped on it has exited (checkpointing
        // in its grace period). GPUs shared with workloads that keep running are not waited for.
        let releasing: BTreeSet<u32> =
            self.runner.running().into_iter().filter(|w| w.stopping).flat_map(|w| w.gpu_indices).collect();
        let blocked: Vec<u32> = run.gpu_indices.iter().copied().filter(|g| releasing.contains(g)).collect();
        if !blocked.is_empty() {
            if self.deferred.insert(key) {
                tracing::info!(workload_id = %run.workload_id, attempt = run.attempt, gpus = ?blocked,
                    "waiting for stopping workloads to release the GPUs");
            }
            return;
        }
        self.launched.insert(key);
        self.start(run, received_at);
    }

    fn start(&mut self, run: &Assignment, received_at: Instant) {
        let mut spec = WorkloadSpec::from_assignment(run);
        if let Some(gang) = &run.gang {
            // The rendezvous, and the hostfile MPI-style launchers read.
            spec.env.extend(gang.env().into_iter().map(|(k, v)| (k.to_owned(), v)));
            spec.env.insert("AIRTIME_HOSTS".into(), gang.hosts.join(","));
            let hostfile = hostfile_path(run.workload_id, run.attempt);
            let written = hostfile
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| std::fs::write(&hostfile, gang.hostfile()));
            match written {
                Ok(()) => {
                    spec.env.insert("AIRTIME_HOSTFILE".into(), hostfile.display().to_string());
                }
                Err(error) => {
                    tracing::warn!(workload_id = %run.workload_id, %error, "writing the gang's hostfile");
                }
            }
        }
        match self.runner.start(&spec) {
            Ok(started) => {
                tracing::debug!(
                    workload_id = %run.workload_id,
                    attempt = run.attempt,
                    latency_us = received_at.elapsed().as_micros(),
                    spawn_us = started.spawn_time.as_micros(),
                    "spawned (latency: from the desired state's arrival)"
                );
                self.send(run.workload_id, EventReport::started(run.attempt, started.pid));
            }
            Err(error) => {
                tracing::warn!(workload_id = %run.workload_id, attempt = run.attempt, %error, "workload failed to start");
                self.send(run.workload_id, EventReport::failed_to_start(run.attempt, error.to_string()));
            }
        }
    }

    /// Reports what earlier agent processes left running, which this one ended, and keeps their
    /// attempts from starting again: the control plane decides what runs next.
    fn report_leftovers(&mut self, leftovers: Vec<Leftover>) {
        for leftover in leftovers {
            if self.launched.insert((leftover.workload_id, leftover.attempt)) {
                self.send(
                    leftover.workload_id,
                    EventReport::exited(leftover.attempt, None, None, Some(leftover.message)),
                );
            }
        }
    }

    fn on_exit(&mut self, exit: Exit) {
        self.runner.reap(&exit);
        // A gang member's hostfile goes with its attempt (most workloads have none).
        let _ = std::fs::remove_file(hostfile_path(exit.workload_id, exit.attempt));
        let mut event = exit.to_event();
        event.requeue =
            self.fenced_attempts.remove(&(exit.workload_id, exit.attempt)) || self.requeue_exits || exit.lost;
        self.send(exit.workload_id, event);
    }

    fn send(&self, workload_id: Uuid, event: EventReport) {
        // The receiver lives until the reconciler is dropped.
        let _ = self.events.send(OutgoingEvent { workload_id, event });
    }

    /// Stops every workload with its grace period and waits for all of them to exit. A further
    /// stop request, or the longest grace period passing, kills them.
    async fn stop_all_and_wait(
        &mut self,
        exits: &mut mpsc::UnboundedReceiver<Exit>,
        stop_requests: &mut mpsc::Receiver<()>,
    ) {
        let longest_grace = self.runner.running().iter().map(|w| w.grace_period).max().unwrap_or_default();
        self.runner.stop_all("the node agent is shutting down; the work is requeued");
        let kill_at = Instant::now() + longest_grace + SHUTDOWN_KILL_MARGIN;
        let mut give_up_at: Option<Instant> = None;
        let mut requests_open = true;
        while !self.runner.is_empty() {
            tokio::select! {
                Some(exit) = exits.recv() => self.on_exit(exit),
                request = stop_requests.recv(), if requests_open && give_up_at.is_none() => match request {
                    Some(()) => {
                        self.runner.kill_all("second stop request during shutdown");
                        give_up_at = Some(Instant::now() + SHUTDOWN_KILL_WAIT);
                    }
                    // No one can ask again; the grace periods run their course.
                    None => requests_open = false,
                },
                () = sleep_until(kill_at), if give_up_at.is_none() => {
                    self.runner.kill_all("still running after its grace period during shutdown");
                    give_up_at = Some(Instant::now() + SHUTDOWN_KILL_WAIT);
                }
                () = sleep_until(give_up_at.unwrap_or(kill_at)), if give_up_at.is_some() => {
                    tracing::error!(left = self.runner.running().len(), "workloads did not exit after SIGKILL; leaving them");
                    break;
                }
            }
        }
    }
}
