//! Telemetry ingest by group commit. The handler of `POST /agent/nodes/{id}/telemetry` checks a
//! report, hands it to the [`TelemetryWriter`] and waits for the flush that holds it: a `204` still
//! means the report is durably written (its transaction committed), and an unknown node still gets
//! `404 node_not_found`.
//!
//! A flusher writes everything that arrived since the last flush in **one transaction of a few
//! set-based statements**, whatever the number of reports, then starts the next flush at once with
//! what arrived meanwhile. Batches are natural: an idle control plane writes a lone report at once
//! (one transaction, as before), a loaded one writes hundreds per transaction (one commit, one WAL
//! flush, two statements instead of five per report). [`FLUSHERS`] flushers pipeline: one
//! takes a batch, then the next may take the following batch while the first writes and commits
//! (see [`run`] for how a node's reports keep their order). A batch holds at most
//! [`MAX_BATCH_REPORTS`] reports; the queue holds [`QUEUE_REPORTS`], past which handlers wait.
//!
//! The statements of a flush, in this order:
//! 1. lock the nodes whose heartbeat is due (below) `ORDER BY id` (`FOR NO KEY UPDATE`): every
//!    flush (of every replica) takes node locks in the same order, and every other writer that
//!    touches a node's GPUs or grants takes its node's row first (registration, agent events,
//!    liveness, the latest-values writer below), so no two of them can wait on each other in a
//!    cycle; a scheduling cycle locks the nodes it changes first, in id order too
//!    (`scheduler::record::apply`). A writer that locks several nodes in another order (the
//!    liveness sweep) may still meet a flush in a deadlock, which PostgreSQL breaks by failing one
//!    side: a flush that loses is retried ([`ATTEMPTS`]);
//! 2. one statement (one round trip), its parts CTEs: `UPDATE nodes … FROM UNNEST` — the heartbeat
//!    (`last_seen_at`, `lost` back to `ready`) and the latest host values of the due nodes, one row
//!    per node (of two reports of a node in one batch, the later wins); `INSERT INTO node_telemetry
//!    … FROM UNNEST` — every report's host sample, in arrival order; and `INSERT INTO gpu_telemetry
//!    … FROM UNNEST` — every GPU sample of every report, by the GPU's id: ids are looked up once per
//!    GPU and kept ([`GpuIds`]; a GPU's row is never deleted and its id never changes, the
//!    registration upserts by node and device index).
//!
//! **A node's heartbeat is written at most once per [`heartbeat_every`]** (half the heartbeat
//! interval the agents are told, at most a second): a flush writes the heartbeat of a node this
//! process has not written for that long, and only the history of the others. An agent at the
//! protocol's rate has every heartbeat written; one that reports faster (a shorter `--heartbeat-ms`)
//! has its heartbeat written by a flush once per interval rather than at every report. A flush
//! in which no heartbeat is due is its statement alone: one round trip, no transaction around it, no lock
//! (it only inserts history rows, which no other writer touches). The heartbeat is the node's
//! lease (`fleet::liveness`): `last_seen_at` lags the newest report by at most that interval
//! plus one report's, inside `--node-lost-after-ms` (at least twice the heartbeat interval) and
//! inside the fence margin (`FENCE_MARGIN`, 5 s) before a lost node's work is requeued. A node
//! whose heartbeat this process wrote exists (no node is ever deleted; a tidy test checks it), so
//! its report is answered `204` without looking it up; any other node's existence is what the
//! lock finds. The newest report of a node whose heartbeat was not due goes to the latest-values
//! writer (below), which writes its host values and time onto the node's row (forward only), so
//! a node that stops reporting shows its last report within [`LATEST_EVERY`].
//!
//! The flushers run on a thread of their own, on a single-threaded runtime: on the API's runtime a
//! flush waited behind thousands of ready request tasks after each of its round trips.
//!
//! **The latest GPU and share values are coalesced.** A flush hands each GPU's and each share's
//! newest sample to the latest-values writer ([`write_latest`]), which writes them onto the `gpus`
//! and `gpu_grants` rows at once when it is idle and then at most once per [`LATEST_EVERY`]: a
//! GPU reported ten times in a second is rewritten once, not ten times (updating the row was 2.5×
//! the cost of its history insert). What the rows show is at most [`LATEST_EVERY`] (plus a write)
//! behind the newest committed sample; every sample is in the history at its `204`. Each row
//! remembers its sample's time (`telemetry_at`, the history row's `at`), and a write never replaces
//! a newer sample with an older one — two replicas that both hold values of one GPU write them in
//! either order.
//!
//! A database error fails every report of its batch with that error (the handler answers it as it
//! answers any database error: 503 when the database is unreachable, 500 otherwise); the agents
//! send again at their next heartbeat. Nothing is acknowledged before its commit, and shutting down
//! ([`TelemetryWriter::close`]) writes what is queued before it returns.
//!
//! History lives in hourly partitions (migration 0015): the writer makes sure the coming hours have
//! theirs ([`ensure_partitions`]) at start-up and whenever its cached coverage runs short.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use rustc_hash::{FxHashMap, FxHashSet};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use uuid::Uuid;

pub use airtime_protocol::agent::TelemetryReport;
use airtime_protocol::agent::{GpuSample, GpuThrottle};

/// The most reports one flush writes (at 8 GPUs a report, about 16,000 GPU samples).
pub const MAX_BATCH_REPORTS: usize = 2048;
/// Flushes in flight at once (each on a connection of its own): while one commits, the next writes.
pub const FLUSHERS: usize = 2;
/// Reports waiting for a flush, past which the handlers wait for room (back-pressure).
pub const QUEUE_REPORTS: usize = 8 * MAX_BATCH_REPORTS;
/// How many times a flush is tried when PostgreSQL broke a deadlock by failing it, or when an hour
/// had no partition yet.
pub const ATTEMPTS: usize = 3;
/// The latest-values writer writes at most once per this interval (at once when it was idle).
pub const LATEST_EVERY: Duration = Duration::from_secs(1);
/// How often a node's heartbeat is written when its agent reports faster than `heartbeat_interval`
/// (the interval the agents are told): half of it, at most [`LATEST_EVERY`]. An agent at that
/// interval has every report's heartbeat written.
pub fn heartbeat_every(heartbeat_interval: Duration) -> Duration {
    (heartbeat_interval / 2).min(LATEST_EVERY)
}
/// How far ahead partitions are made, and how little coverage left makes the writer make more.
const PARTITIONS_AHEAD: Duration = Duration::from_secs(3 * 3600);
const PARTITIONS_RENEW_BELOW: Duration = Duration::from_secs(3600);

/// Why a report was not written. Every report of a failed flush gets the same error.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WriteError {
    #[error("writing telemetry: {0}")]
    Database(Arc<sqlx::Error>),
    /// The control plane is shutting down and takes no more reports.
    #[error("the telemetry writer has stopped")]
    Stopped,
}

/// A GPU's throttle reasons as stored (`gpus.throttle`): their names, comma-separated, in a
/// fixed order; `None` for none.
pub fn throttle_text(reasons: &[GpuThrottle]) -> Option<String> {
    let mut names: Vec<&str> = reasons.iter().map(|r| r.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    (!names.is_empty()).then(|| names.join(","))
}

/// Reads [`throttle_text`] back; names this build does not know are left out.
pub fn throttle_of(text: Option<&str>) -> Vec<GpuThrottle> {
    text.into_iter().flat_map(|t| t.split(',')).filter_map(GpuThrottle::parse).collect()
}

/// A flush's error in the domain's words, for each report of its batch: the database's own error
/// when this report is the only one holding it, else its kind (an unreachable database stays one,
/// answered 503); a queue that stopped is the control plane shutting down.
impl From<WriteError> for crate::domain::Error {
    fn from(err: WriteError) -> Self {
        match err {
            WriteError::Database(db) => match Arc::try_unwrap(db) {
                Ok(err) => Self::Database(err),
                Err(shared) => match &*shared {
                    sqlx::Error::PoolTimedOut => Self::Database(sqlx::Error::PoolTimedOut),
                    sqlx::Error::PoolClosed => Self::Database(sqlx::Error::PoolClosed),
                    sqlx::Error::Io(io) => {
                        Self::Database(sqlx::Error::Io(std::io::Error::new(io.kind(), io.to_string())))
                    }
                    _ => Self::Internal(anyhow::anyhow!("writing telemetry: {shared}")),
                },
            },
            WriteError::Stopped => Self::Unavailable("the control plane is shutting down; try again".into()),
        }
    }
}

/// A report waiting for its flush, and where its outcome goes.
struct Pending {
    node_id: Uuid,
    report: TelemetryReport,
    done: oneshot::Sender<Result<bool, WriteError>>,
}

/// One node's report, as a flush writes it.
pub type NodeReport = (Uuid, TelemetryReport);

/// The ids of the GPUs reported, by node and device index: looked up once per GPU. A registration
/// upserts GPUs by (node, device index) and nothing deletes a GPU (a tidy test checks it), so an id
/// once seen stays right; an index never registered is looked up again (and its samples skipped).
pub type GpuIds = FxHashMap<(Uuid, u32), Uuid>;

/// A GPU's newest sample, waiting for the latest-values writer.
#[derive(Debug, Clone)]
struct LatestGpu {
    node_id: Uuid,
    at: DateTime<Utc>,
    sample: GpuSample,
}

/// A node's newest report whose heartbeat its flush did not write, waiting for the latest-values
/// writer: its time and host values.
#[derive(Debug, Clone)]
struct LatestNode {
    at: DateTime<Utc>,
    cpu_util: f32,
    memory_used_mb: u64,
}

/// What a workload's processes use of a GPU, newest, waiting for the latest-values writer.
#[derive(Debug, Clone)]
struct LatestShare {
    node_id: Uuid,
    at: DateTime<Utc>,
    util: Option<f32>,
    memory_used_mb: Option<u64>,
}

/// The newest values of the nodes whose heartbeat was not due, of the GPUs (by id) and of the
/// shares (by GPU and workload) that the rows do not hold yet. The nodes' and GPUs' maps hash with
/// FxHash: a node is the one its credential names and a GPU's id is looked up by the control plane,
/// so no caller chooses those keys. The shares' map keeps SipHash: a share names its workload as
/// the agent reported it (up to 4,096 a report), and a compromised node could choose ids that
/// collide under an unkeyed hash.
#[derive(Debug, Default)]
pub struct Latest {
    nodes: FxHashMap<Uuid, LatestNode>,
    gpus: FxHashMap<Uuid, LatestGpu>,
    shares: HashMap<(Uuid, Uuid), LatestShare>,
}

/// A flush's node, GPU and share samples in arrival order, for [`Latest`] once it committed.
#[derive(Debug, Default)]
pub struct Samples {
    nodes: Vec<(Uuid, LatestNode)>,
    gpus: Vec<(Uuid, LatestGpu)>,
    shares: Vec<((Uuid, Uuid), LatestShare)>,
}

impl Samples {
    fn is_empty(&self) -> bool {
        self.nodes.is_empty() && self.gpus.is_empty() && self.shares.is_empty()
    }
}

impl Latest {
    fn is_empty(&self) -> bool {
        self.nodes.is_empty() && self.gpus.is_empty() && self.shares.is_empty()
    }

    /// Takes a flush's samples where they are at least as new as those held (of one GPU's samples
    /// in one flush, the last).
    fn take(&mut self, samples: Samples) {
        keep_newer(&mut self.nodes, samples.nodes, |n| n.at);
        keep_newer(&mut self.gpus, samples.gpus, |g| g.at);
        keep_newer(&mut self.shares, samples.shares, |s| s.at);
    }

    /// Takes `other`'s values where they are at least as new as those held.
    fn merge(&mut self, other: Latest) {
        keep_newer(&mut self.nodes, other.nodes, |n| n.at);
        keep_newer(&mut self.gpus, other.gpus, |g| g.at);
        keep_newer(&mut self.shares, other.shares, |s| s.at);
    }
}

/// Puts each of `values` into `held` unless `held` has a newer value for its key.
fn keep_newer<K: Eq + std::hash::Hash, V, S: std::hash::BuildHasher>(
    held: &mut HashMap<K, V, S>,
    values: impl IntoIterator<Item = (K, V)>,
    at: impl Fn(&V) -> DateTime<Utc>,
) {
    for (key, value) in values {
        match held.entry(key) {
            std::collections::hash_map::Entry::Occupied(mut kept) => {
                if at(kept.get()) <= at(&value) {
                    kept.insert(value);
                }
            }
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(value);
            }
        }
    }
}

/// What the flushers and the latest-values writer share.
#[derive(Default)]
struct Shared {
    ids: Mutex<GpuIds>,
    latest: Mutex<Latest>,
    /// Told when `latest` got values.
    dirty: Notify,
    /// When this process last committed each node's heartbeat (an instant taken before the
    /// transaction began, so never later than the `last_seen_at` it wrote). A node here exists: no
    /// node is ever deleted (a tidy test checks it).
    beats: Mutex<FxHashMap<Uuid, Instant>>,
    /// A node's heartbeat is written again once its last is this old.
    beat_every: Duration,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The handle handlers write through; cheap to clone.
#[derive(Clone)]
pub struct TelemetryWriter {
    queue: mpsc::Sender<Pending>,
    stop: Arc<watch::Sender<bool>>,
    /// Told when the writer's thread has written everything and ended.
    ended: Arc<tokio::sync::Mutex<Option<oneshot::Receiver<()>>>>,
}

/// What the flushers share: the queue (one of them dequeues at a time) and when the partitions made
/// ahead run out.
struct Intake {
    queue: mpsc::Receiver<Pending>,
    closing: bool,
    covered_until: Instant,
    /// The flushes taken and not yet ended: a batch that holds a node of one of them waits for it.
    in_flight: Vec<InFlight>,
}

/// A flush in flight: its nodes, and a receiver that is told (its sender dropped) when it ended.
struct InFlight {
    nodes: FxHashSet<Uuid>,
    ended: watch::Receiver<()>,
}

impl TelemetryWriter {
    /// Makes the partitions for the retained hours and the coming ones, and starts the flushers
    /// and the latest-values writer on a thread of their own, with connections of their own (with
    /// `db`'s options). Why a thread: under load the API's runtime has thousands of request tasks
    /// ready to run, and a flush — five round trips to PostgreSQL — waited behind them after each
    /// one, holding every report of its batch that much longer; on its own single-threaded runtime
    /// a flusher runs the moment its answer arrives. Why its own connections: hundreds of requests
    /// wait for a pooled one (to check their credential) under the same load.
    ///
    /// A node's heartbeat (its `last_seen_at` and latest host values) is written at most once per
    /// `beat_every` (see [`heartbeat_every`]); every report's samples go to the history.
    pub async fn start(db: PgPool, retention_hours: u32, beat_every: Duration) -> sqlx::Result<Self> {
        let options = (*db.connect_options()).clone();
        let retained = Duration::from_secs(u64::from(retention_hours) * 3600);
        let (queue, rx) = mpsc::channel(QUEUE_REPORTS);
        let (stop, _) = watch::channel(false);
        let stop = Arc::new(stop);
        let stopping = stop.subscribe();
        let (started, started_rx) = oneshot::channel::<sqlx::Result<()>>();
        let (ended, ended_rx) = oneshot::channel::<()>();
        std::thread::Builder::new().name("telemetry-writer".into()).spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(err) => {
                    let _ = started.send(Err(sqlx::Error::Io(err)));
                    return;
                }
            };
            runtime.block_on(async move {
                let db = PgPoolOptions::new()
                    .max_connections(FLUSHERS as u32 + 1)
                    .acquire_timeout(Duration::from_secs(5))
                    .connect_lazy_with(options);
                let covered = match ensure_partitions(&db, retained, PARTITIONS_AHEAD).await {
                    Ok(covered) => covered,
                    Err(err) => {
                        let _ = started.send(Err(err));
                        return;
                    }
                };
                let _ = started.send(Ok(()));
                let shared = Arc::new(Shared { beat_every, ..Shared::default() });
                let intake = Arc::new(tokio::sync::Mutex::new(Intake {
                    queue: rx,
                    closing: false,
                    covered_until: Instant::now() + covered,
                    in_flight: Vec::new(),
                }));
                let flushers: Vec<JoinHandle<()>> = (0..FLUSHERS)
                    .map(|_| tokio::spawn(run(db.clone(), intake.clone(), shared.clone(), stopping.clone())))
                    .collect();
                let (flushed, flushed_rx) = watch::channel(false);
                let latest_writer = tokio::spawn(run_latest(db.clone(), shared, flushed_rx));
                for flusher in flushers {
                    let _ = flusher.await;
                }
                flushed.send_replace(true);
                let _ = latest_writer.await;
                db.close().await;
            });
            let _ = ended.send(());
        })?;
        started_rx.await.unwrap_or_else(|_| Err(sqlx::Error::PoolClosed))?;
        Ok(Self { queue, stop, ended: Arc::new(tokio::sync::Mutex::new(Some(ended_rx))) })
    }

    /// Writes `report` in the next flush and answers once it committed: `true` when written, `false`
    /// when there is no such node (nothing was written).
    pub async fn record(&self, node_id: Uuid, report: TelemetryReport) -> Result<bool, WriteError> {
        let (done, outcome) = oneshot::channel();
        self.queue.send(Pending { node_id, report, done }).await.map_err(|_| WriteError::Stopped)?;
        outcome.await.unwrap_or(Err(WriteError::Stopped))
    }

    /// Takes no more reports, writes those queued, then the latest values they left, and waits for
    /// the writer's thread to end. Called once the HTTP server has answered its last request.
    pub async fn close(&self) {
        self.stop.send_replace(true);
        if let Some(ended) = self.ended.lock().await.take() {
            let _ = ended.await;
        }
    }
}

/// A flusher. [`FLUSHERS`] of them pipeline the flushes: one dequeues a batch while holding the
/// intake, then lets the next dequeue while it writes and commits. A batch that holds a node of a
/// flush still in flight waits for that flush to end before it is written, which keeps a node's
/// reports in arrival order (the later one's transaction, so its samples' `at`, starts later: the
/// newer sample wins on the rows). Flushes whose nodes differ lock different node rows, each in id
/// order, so no two of them wait on each other.
async fn run(
    db: PgPool,
    intake: Arc<tokio::sync::Mutex<Intake>>,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let mut batch: Vec<Pending> = Vec::with_capacity(MAX_BATCH_REPORTS);
    let mut reports: Vec<NodeReport> = Vec::with_capacity(MAX_BATCH_REPORTS);
    let mut waiters = Vec::with_capacity(MAX_BATCH_REPORTS);
    loop {
        let mut held = intake.lock().await;
        let taking = &mut *held;
        tokio::select! {
            biased;
            _ = stop.wait_for(|stop| *stop), if !taking.closing => {
                // No new reports; those already queued are still received and written below.
                taking.queue.close();
                taking.closing = true;
                continue;
            }
            received = taking.queue.recv_many(&mut batch, MAX_BATCH_REPORTS) => {
                if received == 0 {
                    return;
                }
            }
        }
        if taking.covered_until.saturating_duration_since(Instant::now()) < PARTITIONS_RENEW_BELOW {
            match ensure_partitions(&db, Duration::ZERO, PARTITIONS_AHEAD).await {
                Ok(covered) => taking.covered_until = Instant::now() + covered,
                Err(err) => tracing::error!(error = %err, "making the coming hours' telemetry partitions"),
            }
        }
        for Pending { node_id, report, done } in batch.drain(..) {
            reports.push((node_id, report));
            waiters.push((node_id, done));
        }
        let nodes: FxHashSet<Uuid> = reports.iter().map(|(node_id, _)| *node_id).collect();
        // A node's reports commit in arrival order: a batch that holds a node of a flush still in
        // flight waits for that flush to end (rare: an agent has one report in flight).
        for earlier in &mut taking.in_flight {
            if !earlier.nodes.is_disjoint(&nodes) {
                let _ = earlier.ended.changed().await;
            }
        }
        taking.in_flight.retain(|flush| flush.ended.has_changed().is_ok());
        // The nodes whose heartbeat this flush writes: those this process has not written for the
        // interval (or ever).
        let started = Instant::now();
        let mut due: Vec<Uuid> = {
            let beats = locked(&shared.beats);
            nodes
                .iter()
                .filter(|node_id| beats.get(node_id).is_none_or(|at| started.duration_since(*at) >= shared.beat_every))
                .copied()
                .collect()
        };
        due.sort_unstable();
        let (ended, ended_rx) = watch::channel(());
        taking.in_flight.push(InFlight { nodes, ended: ended_rx });
        drop(held);
        let outcome = write_retrying(&db, &reports, &due, &shared.ids).await;
        drop(ended);
        if let Ok((known, _)) = &outcome {
            let mut beats = locked(&shared.beats);
            for node_id in due.iter().filter(|node_id| known.contains(node_id)) {
                beats.insert(*node_id, started);
            }
        }
        let (outcome, samples) = match outcome {
            Ok((known, samples)) => {
                tracing::debug!(reports = reports.len(), elapsed = ?started.elapsed(), "telemetry flushed");
                (Ok(known), samples)
            }
            Err(err) => {
                tracing::error!(error = %err, reports = reports.len(), "writing telemetry failed");
                (Err(err), Samples::default())
            }
        };
        reports.clear();
        for (node_id, done) in waiters.drain(..) {
            let answer = match &outcome {
                Ok(known) => Ok(known.contains(&node_id)),
                Err(err) => Err(err.clone()),
            };
            // A handler that gave up (its request timed out) no longer waits: nothing to tell.
            let _ = done.send(answer);
        }
        // The reports are answered; their newest values go to the latest-values writer.
        if !samples.is_empty() {
            locked(&shared.latest).take(samples);
            shared.dirty.notify_one();
        }
    }
}

/// The latest-values writer: writes what the flushes left in `shared.latest` onto the rows, at
/// once when it was idle, then at most once per [`LATEST_EVERY`]; once `flushed` is told, writes
/// what is left and ends. A write that fails (the database away, a deadlock PostgreSQL broke) puts
/// its values back under any newer ones and is tried again after the interval.
async fn run_latest(db: PgPool, shared: Arc<Shared>, mut flushed: watch::Receiver<bool>) {
    loop {
        let last = tokio::select! {
            biased;
            _ = flushed.wait_for(|done| *done) => true,
            () = shared.dirty.notified() => false,
        };
        let taken = std::mem::take(&mut *locked(&shared.latest));
        if !taken.is_empty()
            && let Err(err) = write_latest(&db, &taken).await
        {
            tracing::warn!(error = %err, gpus = taken.gpus.len(), "writing the latest GPU values failed; trying again");
            let mut held = locked(&shared.latest);
            let newer = std::mem::take(&mut *held);
            *held = taken;
            held.merge(newer);
            drop(held);
            shared.dirty.notify_one();
        }
        if last {
            return;
        }
        tokio::select! {
            _ = flushed.wait_for(|done| *done) => {}
            () = tokio::time::sleep(LATEST_EVERY) => {}
        }
    }
}

/// Makes the hourly partitions of both history tables from `back` ago to `ahead` from now, and
/// returns how long from now every hour is covered.
pub async fn ensure_partitions(db: &PgPool, back: Duration, ahead: Duration) -> sqlx::Result<Duration> {
    let (covered_s,): (f64,) = sqlx::query_as(
        "SELECT extract(epoch FROM airtime_telemetry_partitions(\
             now() - make_interval(secs => $1), now() + make_interval(secs => $2)))::float8",
    )
    .bind(back.as_secs_f64())
    .bind(ahead.as_secs_f64())
    .fetch_one(db)
    .await?;
    Ok(Duration::try_from_secs_f64(covered_s).unwrap_or(Duration::ZERO))
}

/// Drops the history partitions that hold only samples older than `retention`; returns how many.
pub async fn drop_old_partitions(db: &PgPool, retention: Duration) -> sqlx::Result<i32> {
    let mut tx = db.begin().await?;
    // Dropping a partition takes its parent's lock for a moment: never stall ingest behind a long
    // wait for it (the next pass tries again).
    sqlx::query("SET LOCAL lock_timeout = '2s'").execute(&mut *tx).await?;
    let (dropped,): (i32,) =
        sqlx::query_as("SELECT airtime_drop_telemetry_partitions(now() - make_interval(secs => $1))")
            .bind(retention.as_secs_f64())
            .fetch_one(&mut *tx)
            .await?;
    tx.commit().await?;
    Ok(dropped)
}

/// Writes a batch of reports as the writer does, its flush and then its latest values (what one
/// flush and the latest-values writer do when nothing else is waiting), every node's heartbeat
/// included, and returns the nodes that exist: their reports were written, the others' were not. A
/// flush PostgreSQL failed to break a deadlock, or one that met an hour without its partition
/// (made now), is tried again.
pub async fn write_batch(db: &PgPool, batch: &[NodeReport]) -> Result<FxHashSet<Uuid>, WriteError> {
    let ids = Mutex::default();
    let mut due: Vec<Uuid> = batch.iter().map(|(node_id, _)| *node_id).collect();
    due.sort_unstable();
    due.dedup();
    let (known, samples) = write_retrying(db, batch, &due, &ids).await?;
    let mut latest = Latest::default();
    latest.take(samples);
    write_latest(db, &latest).await.map_err(|err| WriteError::Database(Arc::new(err)))?;
    Ok(known)
}

/// A flush with retries. Returns the nodes that exist and the batch's newest GPU and share values.
async fn write_retrying(
    db: &PgPool,
    batch: &[NodeReport],
    due: &[Uuid],
    ids: &Mutex<GpuIds>,
) -> Result<(FxHashSet<Uuid>, Samples), WriteError> {
    let mut attempt = 1;
    loop {
        let err = match write(db, batch, due, ids).await {
            Ok(written) => return Ok(written),
            Err(err) => err,
        };
        let code = err.as_database_error().and_then(|e| e.code()).map(|c| c.into_owned());
        let retry = match code.as_deref() {
            // deadlock_detected, serialization_failure
            Some("40P01" | "40001") => true,
            // check_violation "no partition of relation … found for row"
            Some("23514") if err.to_string().contains("no partition") => {
                ensure_partitions(db, Duration::ZERO, PARTITIONS_AHEAD).await.is_ok()
            }
            _ => false,
        };
        if !retry || attempt >= ATTEMPTS {
            return Err(WriteError::Database(Arc::new(err)));
        }
        tracing::warn!(error = %err, attempt, "telemetry flush failed; trying again");
        attempt += 1;
    }
}

/// One flush. `due` (sorted) are the batch's nodes whose heartbeat it writes; the batch's other
/// nodes had theirs written by this process less than the interval ago, so they exist.
///
/// With heartbeats due: one transaction — the due nodes locked in id order (the lock order of
/// every writer of a node), which also tells which exist, then the flush's statement — four round
/// trips with `BEGIN` and `COMMIT`. With none due: the statement alone, one round trip, no lock
/// (it only inserts history, which no other writer touches). A third statement the first time a
/// GPU is reported, to learn its id.
async fn write(
    db: &PgPool,
    batch: &[NodeReport],
    due: &[Uuid],
    ids: &Mutex<GpuIds>,
) -> sqlx::Result<(FxHashSet<Uuid>, Samples)> {
    let mut known: FxHashSet<Uuid> = FxHashSet::with_capacity_and_hasher(batch.len(), Default::default());
    let mut beating: Vec<Uuid> = Vec::new();
    let mut tx = if due.is_empty() {
        known.extend(batch.iter().map(|(node_id, _)| *node_id));
        None
    } else {
        let mut tx = db.begin().await?;
        beating = sqlx::query_scalar("SELECT id FROM nodes WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE")
            .bind(due)
            .fetch_all(&mut *tx)
            .await?;
        beating.sort_unstable();
        known.extend(batch.iter().map(|(node_id, _)| *node_id).filter(|node_id| due.binary_search(node_id).is_err()));
        known.extend(beating.iter().copied());
        if known.is_empty() {
            tx.rollback().await?;
            return Ok((known, Samples::default()));
        }
        Some(tx)
    };

    // Every report's host sample, in arrival order (equal `at`, ascending ids).
    let written: Vec<(Uuid, &TelemetryReport)> =
        batch.iter().filter(|(node_id, _)| known.contains(node_id)).map(|(n, r)| (*n, r)).collect();
    // The newest report of each node (a later report of a node in the batch replaces an earlier
    // one): the due nodes' go onto their rows in this flush (the heartbeat and the latest host
    // values), the others' through the latest-values writer.
    let mut newest_of: FxHashMap<Uuid, &TelemetryReport> =
        FxHashMap::with_capacity_and_hasher(written.len(), Default::default());
    for (node_id, report) in &written {
        newest_of.insert(*node_id, report);
    }
    let (beats, resting): (Vec<_>, Vec<_>) =
        newest_of.into_iter().partition(|(node_id, _)| beating.binary_search(node_id).is_ok());
    let node: Vec<Uuid> = beats.iter().map(|(id, _)| *id).collect();
    let cpu: Vec<f32> = beats.iter().map(|(_, r)| r.cpu_util).collect();
    let mem: Vec<i64> = beats.iter().map(|(_, r)| r.memory_used_mb as i64).collect();
    let h_node: Vec<Uuid> = written.iter().map(|(node_id, _)| *node_id).collect();
    let h_cpu: Vec<f32> = written.iter().map(|(_, r)| r.cpu_util).collect();
    let h_mem: Vec<i64> = written.iter().map(|(_, r)| r.memory_used_mb as i64).collect();

    // The ids of GPUs this process has not seen yet (once per GPU).
    let unseen: Vec<(Uuid, i32)> = {
        let ids = locked(ids);
        let mut unseen: FxHashSet<(Uuid, u32)> = FxHashSet::default();
        for (node_id, report) in &written {
            for index in report.gpus.iter().map(|g| g.index).chain(report.shares.iter().map(|s| s.gpu_index)) {
                if !ids.contains_key(&(*node_id, index)) {
                    unseen.insert((*node_id, index));
                }
            }
        }
        unseen.into_iter().map(|(node, index)| (node, index as i32)).collect()
    };
    if !unseen.is_empty() {
        let (nodes, indexes): (Vec<Uuid>, Vec<i32>) = unseen.into_iter().unzip();
        let lookup = sqlx::query_as::<_, (Uuid, Uuid, i32)>(
            "SELECT g.id, g.node_id, g.device_index FROM gpus g \
             JOIN UNNEST($1::uuid[], $2::int[]) AS k(node_id, idx) ON g.node_id = k.node_id AND g.device_index = k.idx",
        )
        .bind(&nodes)
        .bind(&indexes);
        let found = match tx.as_mut() {
            Some(tx) => lookup.fetch_all(&mut **tx).await?,
            None => lookup.fetch_all(db).await?,
        };
        let mut ids = locked(ids);
        for (id, node_id, index) in found {
            ids.insert((node_id, index as u32), id);
        }
    }

    // Every GPU sample of every report (of a GPU the node registered), in arrival order; and the
    // newest of each GPU and share, for the latest-values writer. One INSERT of arrays rather than
    // COPY: sqlx ends a COPY with a separate 5-byte write, which Nagle's algorithm holds back until
    // the server acknowledges the data (PostgreSQL delays its ACK): measured, flushes waited on
    // `ClientRead` inside their COPY for tens of milliseconds.
    let samples: usize = written.iter().map(|(_, r)| r.gpus.len()).sum();
    let mut h_gpu: Vec<Uuid> = Vec::with_capacity(samples);
    let mut h_util: Vec<Option<f32>> = Vec::with_capacity(samples);
    let mut h_mem_gpu: Vec<Option<i64>> = Vec::with_capacity(samples);
    let mut h_temp: Vec<Option<f32>> = Vec::with_capacity(samples);
    let mut h_power: Vec<Option<f32>> = Vec::with_capacity(samples);
    let mut h_ecc: Vec<Option<i64>> = Vec::with_capacity(samples);
    let mut gpu_samples: Vec<(Uuid, Uuid, &GpuSample)> = Vec::with_capacity(samples);
    let mut share_samples = Vec::new();
    {
        let ids = locked(ids);
        for (node_id, report) in &written {
            for g in &report.gpus {
                let Some(&id) = ids.get(&(*node_id, g.index)) else { continue };
                h_gpu.push(id);
                h_util.push(g.util);
                h_mem_gpu.push(g.memory_used_mb.map(|m| m as i64));
                h_temp.push(g.temperature_c);
                h_power.push(g.power_w);
                h_ecc.push(g.ecc_errors.map(|e| e as i64));
                gpu_samples.push((id, *node_id, g));
            }
            for s in &report.shares {
                let Some(&gpu) = ids.get(&(*node_id, s.gpu_index)) else { continue };
                share_samples.push(((gpu, s.workload_id), *node_id, s));
            }
        }
    }
    // One statement, one round trip: the heartbeat (`last_seen_at`, `lost` back to `ready`) and
    // latest host values of the due nodes, the host samples, the GPU samples; it answers `now()`,
    // the time of every sample it wrote (the transaction's start).
    let statement = sqlx::query_scalar::<_, DateTime<Utc>>(
        "WITH beat AS (UPDATE nodes n SET last_seen_at = now(), cpu_util = s.cpu, memory_used_mb = s.mem, \
                           state = CASE WHEN n.state = 'lost' THEN 'ready' ELSE n.state END \
                       FROM UNNEST($1::uuid[], $2::real[], $3::bigint[]) AS s(id, cpu, mem) \
                       WHERE n.id = s.id), \
              host AS (INSERT INTO node_telemetry (node_id, cpu_util, memory_used_mb) \
                       SELECT * FROM UNNEST($4::uuid[], $5::real[], $6::bigint[])), \
              gpu AS (INSERT INTO gpu_telemetry (gpu_id, util, memory_used_mb, temperature_c, power_w, ecc_errors) \
                      SELECT * FROM UNNEST($7::uuid[], $8::real[], $9::bigint[], $10::real[], $11::real[], $12::bigint[])) \
         SELECT now()",
    )
    .bind(&node)
    .bind(&cpu)
    .bind(&mem)
    .bind(&h_node)
    .bind(&h_cpu)
    .bind(&h_mem)
    .bind(&h_gpu)
    .bind(&h_util)
    .bind(&h_mem_gpu)
    .bind(&h_temp)
    .bind(&h_power)
    .bind(&h_ecc);
    let at = match tx {
        Some(mut tx) => {
            let at = statement.fetch_one(&mut *tx).await?;
            tx.commit().await?;
            at
        }
        None => statement.fetch_one(db).await?,
    };
    let newest = Samples {
        nodes: resting
            .into_iter()
            .map(|(node_id, r)| (node_id, LatestNode { at, cpu_util: r.cpu_util, memory_used_mb: r.memory_used_mb }))
            .collect(),
        gpus: gpu_samples
            .into_iter()
            .map(|(id, node_id, sample)| (id, LatestGpu { node_id, at, sample: sample.clone() }))
            .collect(),
        shares: share_samples
            .into_iter()
            .map(|(key, node_id, s)| (key, LatestShare { node_id, at, util: s.util, memory_used_mb: s.memory_used_mb }))
            .collect(),
    };
    Ok((known, newest))
}

/// Writes the newest node, GPU and share values onto the `nodes`, `gpus` and `gpu_grants` rows in
/// one transaction: their nodes locked first in id order (the lock order every writer of a node's
/// GPUs keeps), then one `UPDATE … FROM UNNEST` each. A row that holds a newer sample (a flush or
/// another replica wrote it) keeps it; a share whose grant ended meanwhile is skipped.
pub async fn write_latest(db: &PgPool, latest: &Latest) -> sqlx::Result<()> {
    if latest.is_empty() {
        return Ok(());
    }
    let mut nodes: Vec<Uuid> = latest
        .nodes
        .keys()
        .copied()
        .chain(latest.gpus.values().map(|g| g.node_id))
        .chain(latest.shares.values().map(|s| s.node_id))
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    let mut tx = db.begin().await?;
    sqlx::query("SELECT id FROM nodes WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE")
        .bind(&nodes)
        .execute(&mut *tx)
        .await?;
    if !latest.nodes.is_empty() {
        // The heartbeat goes forward only: a row that holds a newer one (a flush wrote it) keeps it.
        let mut rows: Vec<(&Uuid, &LatestNode)> = latest.nodes.iter().collect();
        rows.sort_unstable_by_key(|(id, _)| **id);
        let id: Vec<Uuid> = rows.iter().map(|(id, _)| **id).collect();
        let at: Vec<DateTime<Utc>> = rows.iter().map(|(_, n)| n.at).collect();
        let cpu: Vec<f32> = rows.iter().map(|(_, n)| n.cpu_util).collect();
        let mem: Vec<i64> = rows.iter().map(|(_, n)| n.memory_used_mb as i64).collect();
        sqlx::query(
            "UPDATE nodes n SET last_seen_at = s.at, cpu_util = s.cpu, memory_used_mb = s.mem, \
                 state = CASE WHEN n.state = 'lost' THEN 'ready' ELSE n.state END \
             FROM UNNEST($1::uuid[], $2::timestamptz[], $3::real[], $4::bigint[]) AS s(id, at, cpu, mem) \
             WHERE n.id = s.id AND n.last_seen_at <= s.at",
        )
        .bind(&id)
        .bind(&at)
        .bind(&cpu)
        .bind(&mem)
        .execute(&mut *tx)
        .await?;
    }
    if !latest.gpus.is_empty() {
        let mut rows: Vec<(&Uuid, &LatestGpu)> = latest.gpus.iter().collect();
        rows.sort_unstable_by_key(|(id, _)| **id);
        let id: Vec<Uuid> = rows.iter().map(|(id, _)| **id).collect();
        let at: Vec<DateTime<Utc>> = rows.iter().map(|(_, g)| g.at).collect();
        let util: Vec<Option<f32>> = rows.iter().map(|(_, g)| g.sample.util).collect();
        let mem: Vec<Option<i64>> = rows.iter().map(|(_, g)| g.sample.memory_used_mb.map(|m| m as i64)).collect();
        let temp: Vec<Option<f32>> = rows.iter().map(|(_, g)| g.sample.temperature_c).collect();
        let power: Vec<Option<f32>> = rows.iter().map(|(_, g)| g.sample.power_w).collect();
        let ecc: Vec<Option<i64>> = rows.iter().map(|(_, g)| g.sample.ecc_errors.map(|e| e as i64)).collect();
        let throttle: Vec<Option<String>> = rows.iter().map(|(_, g)| throttle_text(&g.sample.throttle)).collect();
        sqlx::query(
            "UPDATE gpus g SET util = s.util, memory_used_mb = s.mem, temperature_c = s.temp, power_w = s.power, \
                 ecc_errors = s.ecc, throttle = s.throttle, telemetry_at = s.at \
             FROM UNNEST($1::uuid[], $2::timestamptz[], $3::real[], $4::bigint[], $5::real[], $6::real[], $7::bigint[], \
                         $8::text[]) \
                  AS s(id, at, util, mem, temp, power, ecc, throttle) \
             WHERE g.id = s.id AND (g.telemetry_at IS NULL OR g.telemetry_at <= s.at)",
        )
        .bind(&id)
        .bind(&at)
        .bind(&util)
        .bind(&mem)
        .bind(&temp)
        .bind(&power)
        .bind(&ecc)
        .bind(&throttle)
        .execute(&mut *tx)
        .await?;
    }
    if !latest.shares.is_empty() {
        let mut rows: Vec<(&(Uuid, Uuid), &LatestShare)> = latest.shares.iter().collect();
        rows.sort_unstable_by_key(|(key, _)| **key);
        let gpu: Vec<Uuid> = rows.iter().map(|((gpu, _), _)| *gpu).collect();
        let workload: Vec<Uuid> = rows.iter().map(|((_, workload), _)| *workload).collect();
        let at: Vec<DateTime<Utc>> = rows.iter().map(|(_, s)| s.at).collect();
        let util: Vec<Option<f32>> = rows.iter().map(|(_, s)| s.util).collect();
        let mem: Vec<Option<i64>> = rows.iter().map(|(_, s)| s.memory_used_mb.map(|m| m as i64)).collect();
        sqlx::query(
            "UPDATE gpu_grants gr SET util = s.util, memory_used_mb = s.mem, telemetry_at = s.at \
             FROM UNNEST($1::uuid[], $2::uuid[], $3::timestamptz[], $4::real[], $5::bigint[]) \
                  AS s(gpu_id, workload_id, at, util, mem) \
             WHERE gr.gpu_id = s.gpu_id AND gr.workload_id = s.workload_id \
               AND (gr.telemetry_at IS NULL OR gr.telemetry_at <= s.at)",
        )
        .bind(&gpu)
        .bind(&workload)
        .bind(&at)
        .bind(&util)
        .bind(&mem)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await
}
