//! Telemetry ingest by group commit. The handler of `POST /agent/nodes/{id}/telemetry` checks a
//! report, hands it to the [`TelemetryWriter`] and waits for the flush that holds it: a `204` still
//! means the report is durably written (its transaction committed), and an unknown node still gets
//! `404 node_not_found`.
//!
//! A flusher writes everything that arrived since the last flush in **one transaction of a few
//! set-based statements**, whatever the number of reports, then starts the next flush at once with
//! what arrived meanwhile. Batches are natural: an idle control plane writes a lone report at once
//! (one transaction, as before), a loaded one writes hundreds per transaction (one commit, one WAL
//! flush, a handful of statements instead of five per report). [`FLUSHERS`] flushers pipeline: one
//! takes a batch and locks its nodes, then the next may take the following batch while the first
//! writes and commits (see [`run`] for why order is kept). A batch holds at most
//! [`MAX_BATCH_REPORTS`] reports; the queue holds [`QUEUE_REPORTS`], past which handlers wait.
//!
//! The statements of a flush, in this order:
//! 1. lock the batch's nodes `ORDER BY id` (`FOR NO KEY UPDATE`): every flush (of every replica)
//!    takes node locks in the same order, and every other writer that touches a node's GPUs or
//!    grants takes its node's row first (registration, agent events, liveness), so no two of them
//!    can wait on each other in a cycle; a scheduling cycle locks the nodes it changes first, in id
//!    order too (`scheduler::record::apply`). A writer that locks several nodes in another order
//!    (the liveness sweep) may still meet a flush in a deadlock, which
//!    PostgreSQL breaks by failing one side: a flush that loses is retried ([`ATTEMPTS`]);
//! 2. `UPDATE nodes … FROM UNNEST` — the heartbeat (`last_seen_at`, `lost` back to `ready`) and the
//!    latest values, one row per node (of two reports of a node in one batch, the later wins);
//! 3. `INSERT INTO node_telemetry … SELECT FROM UNNEST` — every report's sample, in arrival order;
//! 4. `UPDATE gpus … FROM UNNEST … RETURNING` — each GPU's latest values, and the GPUs' ids;
//! 5. `INSERT INTO gpu_telemetry … SELECT FROM UNNEST` — every GPU sample of every report;
//! 6. `UPDATE gpu_grants … FROM UNNEST` — each share's latest values.
//!
//! The latest values stay on the `nodes`/`gpus`/`gpu_grants` rows, not in this process: with
//! several control-plane replicas (each with its own writer, the agents spread among them) the rows
//! are the one shared truth the scheduler and the API read.
//!
//! A database error fails every report of its batch with that error (the handler answers it as it
//! answers any database error: 503 when the database is unreachable, 500 otherwise); the agents
//! send again at their next heartbeat. Nothing is acknowledged before its commit, and shutting down
//! ([`TelemetryWriter::close`]) writes what is queued before it returns.
//!
//! History lives in hourly partitions (migration 0015): the writer makes sure the coming hours have
//! theirs ([`ensure_partitions`]) at start-up and whenever its cached coverage runs short.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use uuid::Uuid;

pub use airtime_protocol::agent::TelemetryReport;
use airtime_protocol::agent::{GpuSample, ShareSample};

/// The most reports one flush writes (at 8 GPUs a report, about 16,000 GPU samples).
pub const MAX_BATCH_REPORTS: usize = 2048;
/// Flushes in flight at once (each on a connection of its own): while one commits, the next writes.
pub const FLUSHERS: usize = 2;
/// Reports waiting for a flush, past which the handlers wait for room (back-pressure).
pub const QUEUE_REPORTS: usize = 8 * MAX_BATCH_REPORTS;
/// How many times a flush is tried when PostgreSQL broke a deadlock by failing it, or when an hour
/// had no partition yet.
pub const ATTEMPTS: usize = 3;
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

/// A report waiting for its flush, and where its outcome goes.
struct Pending {
    node_id: Uuid,
    report: TelemetryReport,
    done: oneshot::Sender<Result<bool, WriteError>>,
}

/// One node's report, as a flush writes it.
pub type NodeReport = (Uuid, TelemetryReport);

/// The handle handlers write through; cheap to clone.
#[derive(Clone)]
pub struct TelemetryWriter {
    queue: mpsc::Sender<Pending>,
    stop: Arc<watch::Sender<bool>>,
    flushers: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

/// What the flushers share: the queue (one of them dequeues at a time) and when the partitions made
/// ahead run out.
struct Intake {
    queue: mpsc::Receiver<Pending>,
    closing: bool,
    covered_until: Instant,
}

impl TelemetryWriter {
    /// Makes the partitions for the retained hours and the coming ones, and starts the flushers.
    /// They have connections of their own (with `db`'s options): under load, hundreds of requests
    /// wait for a pooled connection (to check their credential), and a flush queued behind them
    /// would hold every one of its reports that much longer.
    pub async fn start(db: PgPool, retention_hours: u32) -> sqlx::Result<Self> {
        let db = PgPoolOptions::new()
            .max_connections(FLUSHERS as u32)
            .acquire_timeout(Duration::from_secs(5))
            .connect_lazy_with((*db.connect_options()).clone());
        let retained = Duration::from_secs(u64::from(retention_hours) * 3600);
        let covered = ensure_partitions(&db, retained, PARTITIONS_AHEAD).await?;
        let (queue, rx) = mpsc::channel(QUEUE_REPORTS);
        let (stop, _) = watch::channel(false);
        let stop = Arc::new(stop);
        let intake = Arc::new(tokio::sync::Mutex::new(Intake {
            queue: rx,
            closing: false,
            covered_until: Instant::now() + covered,
        }));
        let flushers = (0..FLUSHERS).map(|_| tokio::spawn(run(db.clone(), intake.clone(), stop.subscribe()))).collect();
        Ok(Self { queue, stop, flushers: Arc::new(Mutex::new(flushers)) })
    }

    /// Writes `report` in the next flush and answers once it committed: `true` when written, `false`
    /// when there is no such node (nothing was written).
    pub async fn record(&self, node_id: Uuid, report: TelemetryReport) -> Result<bool, WriteError> {
        let (done, outcome) = oneshot::channel();
        self.queue.send(Pending { node_id, report, done }).await.map_err(|_| WriteError::Stopped)?;
        outcome.await.unwrap_or(Err(WriteError::Stopped))
    }

    /// Takes no more reports, writes those queued and waits for the flushers to end. Called once the
    /// HTTP server has answered its last request.
    pub async fn close(&self) {
        self.stop.send_replace(true);
        let flushers = std::mem::take(&mut *self.flushers.lock().unwrap_or_else(PoisonError::into_inner));
        for flusher in flushers {
            let _ = flusher.await;
        }
    }
}

/// A flusher. [`FLUSHERS`] of them pipeline the flushes: one dequeues a batch and locks its nodes
/// while holding the intake, then lets the next dequeue while it writes and commits. Dequeuing and
/// locking in turn keeps arrival order: a node's later report can only be locked after its earlier
/// one's flush holds the node, so it commits after it (the latest values win across flushes too),
/// and no two flushes wait on each other in a cycle (each holds all its nodes before the next locks).
async fn run(db: PgPool, intake: Arc<tokio::sync::Mutex<Intake>>, mut stop: watch::Receiver<bool>) {
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
        let started = Instant::now();
        let outcome = write_in_turn(&db, &reports, Some(held)).await;
        match &outcome {
            Ok(_) => tracing::debug!(reports = reports.len(), elapsed = ?started.elapsed(), "telemetry flushed"),
            Err(err) => tracing::error!(error = %err, reports = reports.len(), "writing telemetry failed"),
        }
        reports.clear();
        for (node_id, done) in waiters.drain(..) {
            let answer = match &outcome {
                Ok(known) => Ok(known.contains(&node_id)),
                Err(err) => Err(err.clone()),
            };
            // A handler that gave up (its request timed out) no longer waits: nothing to tell.
            let _ = done.send(answer);
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

/// Writes a batch of reports in one transaction (what one flush does), and returns the nodes that
/// exist: their reports were written, the others' were not. A flush PostgreSQL failed to break a
/// deadlock, or one that met an hour without its partition (made now), is tried again.
pub async fn write_batch(db: &PgPool, batch: &[NodeReport]) -> Result<HashSet<Uuid>, WriteError> {
    write_in_turn(db, batch, None::<()>).await
}

/// [`write_batch`], dropping `turn` (the intake a flusher holds) once the batch's nodes are locked,
/// or when the first attempt fails.
async fn write_in_turn<T>(db: &PgPool, batch: &[NodeReport], mut turn: Option<T>) -> Result<HashSet<Uuid>, WriteError> {
    let mut attempt = 1;
    loop {
        let err = match write(db, batch, &mut turn).await {
            Ok(known) => return Ok(known),
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
        drop(turn.take());
        if !retry || attempt >= ATTEMPTS {
            return Err(WriteError::Database(Arc::new(err)));
        }
        tracing::warn!(error = %err, attempt, "telemetry flush failed; trying again");
        attempt += 1;
    }
}

/// One flush: one transaction, six statements whatever the batch holds.
async fn write<T>(db: &PgPool, batch: &[NodeReport], turn: &mut Option<T>) -> sqlx::Result<HashSet<Uuid>> {
    // The latest report of each node (a later report of a node replaces an earlier one).
    let mut latest: HashMap<Uuid, &TelemetryReport> = HashMap::with_capacity(batch.len());
    for (node_id, report) in batch {
        latest.insert(*node_id, report);
    }
    let mut ids: Vec<Uuid> = latest.keys().copied().collect();
    ids.sort_unstable();

    let mut tx = db.begin().await?;
    // 1. The lock order: node rows by id.
    let known: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM nodes WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE")
        .bind(&ids)
        .fetch_all(&mut *tx)
        .await?;
    // The next flush may take its batch and lock its nodes now.
    drop(turn.take());
    if known.is_empty() {
        tx.rollback().await?;
        return Ok(HashSet::new());
    }
    let known_set: HashSet<Uuid> = known.iter().copied().collect();

    // 2. The heartbeat and the latest host values.
    let rows: Vec<(Uuid, &TelemetryReport)> =
        known.iter().filter_map(|id| latest.get(id).map(|report| (*id, *report))).collect();
    let node: Vec<Uuid> = rows.iter().map(|(id, _)| *id).collect();
    let cpu: Vec<f32> = rows.iter().map(|(_, r)| r.cpu_util).collect();
    let mem: Vec<i64> = rows.iter().map(|(_, r)| r.memory_used_mb as i64).collect();
    sqlx::query(
        "UPDATE nodes n SET last_seen_at = now(), cpu_util = s.cpu, memory_used_mb = s.mem, \
             state = CASE WHEN n.state = 'lost' THEN 'ready' ELSE n.state END \
         FROM UNNEST($1::uuid[], $2::real[], $3::bigint[]) AS s(id, cpu, mem) \
         WHERE n.id = s.id",
    )
    .bind(&node)
    .bind(&cpu)
    .bind(&mem)
    .execute(&mut *tx)
    .await?;

    // 3. Every report's host sample, in arrival order (equal `at`, ascending ids).
    let written: Vec<(Uuid, &TelemetryReport)> =
        batch.iter().filter(|(node_id, _)| known_set.contains(node_id)).map(|(n, r)| (*n, r)).collect();
    let h_node: Vec<Uuid> = written.iter().map(|(node_id, _)| *node_id).collect();
    let h_cpu: Vec<f32> = written.iter().map(|(_, r)| r.cpu_util).collect();
    let h_mem: Vec<i64> = written.iter().map(|(_, r)| r.memory_used_mb as i64).collect();
    sqlx::query(
        "INSERT INTO node_telemetry (node_id, cpu_util, memory_used_mb) \
         SELECT * FROM UNNEST($1::uuid[], $2::real[], $3::bigint[])",
    )
    .bind(&h_node)
    .bind(&h_cpu)
    .bind(&h_mem)
    .execute(&mut *tx)
    .await?;

    // 4. Each GPU's latest values (the last sample of it in the batch), and the GPUs' ids.
    let mut gpu_latest: HashMap<(Uuid, u32), &GpuSample> = HashMap::new();
    for (node_id, report) in &written {
        for g in &report.gpus {
            gpu_latest.insert((*node_id, g.index), g);
        }
    }
    let mut gpu_ids: HashMap<(Uuid, u32), Uuid> = HashMap::with_capacity(gpu_latest.len());
    if !gpu_latest.is_empty() {
        let mut rows: Vec<((Uuid, u32), &GpuSample)> = gpu_latest.into_iter().collect();
        rows.sort_unstable_by_key(|(key, _)| *key);
        let node: Vec<Uuid> = rows.iter().map(|((node, _), _)| *node).collect();
        let index: Vec<i32> = rows.iter().map(|((_, index), _)| *index as i32).collect();
        let util: Vec<Option<f32>> = rows.iter().map(|(_, g)| g.util).collect();
        let mem: Vec<Option<i64>> = rows.iter().map(|(_, g)| g.memory_used_mb.map(|m| m as i64)).collect();
        let temp: Vec<Option<f32>> = rows.iter().map(|(_, g)| g.temperature_c).collect();
        let power: Vec<Option<f32>> = rows.iter().map(|(_, g)| g.power_w).collect();
        let ecc: Vec<Option<i64>> = rows.iter().map(|(_, g)| g.ecc_errors.map(|e| e as i64)).collect();
        let rows: Vec<(Uuid, Uuid, i32)> = sqlx::query_as(
            "UPDATE gpus g SET util = s.util, memory_used_mb = s.mem, temperature_c = s.temp, power_w = s.power, \
                 ecc_errors = s.ecc \
             FROM UNNEST($1::uuid[], $2::int[], $3::real[], $4::bigint[], $5::real[], $6::real[], $7::bigint[]) \
                  AS s(node_id, idx, util, mem, temp, power, ecc) \
             WHERE g.node_id = s.node_id AND g.device_index = s.idx \
             RETURNING g.id, g.node_id, g.device_index",
        )
        .bind(&node)
        .bind(&index)
        .bind(&util)
        .bind(&mem)
        .bind(&temp)
        .bind(&power)
        .bind(&ecc)
        .fetch_all(&mut *tx)
        .await?;
        for (id, node_id, index) in rows {
            gpu_ids.insert((node_id, index as u32), id);
        }
    }

    // 5. Every GPU sample of every report (of a GPU the node registered), in arrival order. One
    // INSERT of arrays rather than COPY: sqlx ends a COPY with a separate 5-byte write, which
    // Nagle's algorithm holds back until the server acknowledges the data (PostgreSQL delays its
    // ACK): measured, flushes waited on `ClientRead` inside their COPY for tens of milliseconds.
    let mut h_gpu: Vec<Uuid> = Vec::new();
    let mut h_util: Vec<Option<f32>> = Vec::new();
    let mut h_mem: Vec<Option<i64>> = Vec::new();
    let mut h_temp: Vec<Option<f32>> = Vec::new();
    let mut h_power: Vec<Option<f32>> = Vec::new();
    let mut h_ecc: Vec<Option<i64>> = Vec::new();
    for (node_id, report) in &written {
        for g in &report.gpus {
            if let Some(id) = gpu_ids.get(&(*node_id, g.index)) {
                h_gpu.push(*id);
                h_util.push(g.util);
                h_mem.push(g.memory_used_mb.map(|m| m as i64));
                h_temp.push(g.temperature_c);
                h_power.push(g.power_w);
                h_ecc.push(g.ecc_errors.map(|e| e as i64));
            }
        }
    }
    if !h_gpu.is_empty() {
        sqlx::query(
            "INSERT INTO gpu_telemetry (gpu_id, util, memory_used_mb, temperature_c, power_w, ecc_errors) \
             SELECT * FROM UNNEST($1::uuid[], $2::real[], $3::bigint[], $4::real[], $5::real[], $6::bigint[])",
        )
        .bind(&h_gpu)
        .bind(&h_util)
        .bind(&h_mem)
        .bind(&h_temp)
        .bind(&h_power)
        .bind(&h_ecc)
        .execute(&mut *tx)
        .await?;
    }

    // 6. What each workload's processes use of each GPU, on its grant (latest values).
    let mut shares: HashMap<(Uuid, Uuid), &ShareSample> = HashMap::new();
    for (node_id, report) in &written {
        for s in &report.shares {
            if let Some(gpu) = gpu_ids.get(&(*node_id, s.gpu_index)) {
                shares.insert((*gpu, s.workload_id), s);
            }
        }
    }
    if !shares.is_empty() {
        let mut rows: Vec<((Uuid, Uuid), &ShareSample)> = shares.into_iter().collect();
        rows.sort_unstable_by_key(|(key, _)| *key);
        let gpu: Vec<Uuid> = rows.iter().map(|((gpu, _), _)| *gpu).collect();
        let workload: Vec<Uuid> = rows.iter().map(|((_, workload), _)| *workload).collect();
        let util: Vec<Option<f32>> = rows.iter().map(|(_, s)| s.util).collect();
        let mem: Vec<Option<i64>> = rows.iter().map(|(_, s)| s.memory_used_mb.map(|m| m as i64)).collect();
        sqlx::query(
            "UPDATE gpu_grants gr SET util = s.util, memory_used_mb = s.mem \
             FROM UNNEST($1::uuid[], $2::uuid[], $3::real[], $4::bigint[]) AS s(gpu_id, workload_id, util, mem) \
             WHERE gr.gpu_id = s.gpu_id AND gr.workload_id = s.workload_id",
        )
        .bind(&gpu)
        .bind(&workload)
        .bind(&util)
        .bind(&mem)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(known_set)
}
