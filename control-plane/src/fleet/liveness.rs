//! Watches the fleet: a node whose agent has been silent past `--node-lost-after-ms` is marked lost
//! and takes no new work; its workloads go back to the queue once its lease
//! (`--node-fence-after-ms`), the grace period and a margin have passed, by when its agent has
//! fenced them (stopped them itself). Closed
//! hours of GPU usage are rolled up; old telemetry history is pruned; node drains advance; gangs
//! are kept whole.
//!
//! Silence is measured only over time this control plane could have heard the agent: since it
//! started, or since the database last came back, whichever is later (`hearing_since`, in the
//! database's clock). A control plane that was down for longer than the timeout, or a database that
//! was, marks no node lost on its return: the agents get a full timeout to heartbeat again, so work
//! that ran through the outage is not restarted (run twice) elsewhere.

use std::time::Duration;

use sqlx::PgPool;

use crate::signals::{DesiredStateChanged, SchedulerWake, Shutdown};
use crate::workloads::transitions;

/// What the fleet watch reads of the configuration.
#[derive(Debug, Clone)]
pub struct LivenessSettings {
    pub node_lost_after: Duration,
    /// The node's lease: its agent fences its work after this long without reaching us.
    pub node_fence_after: Duration,
    pub telemetry_retention_hours: u32,
    /// A gang not every member of which started this long after its placement is requeued whole.
    pub gang_start_timeout: Duration,
    /// Below this a GPU reading is idle (tenants' idle rules).
    pub idle_util_threshold: f32,
    /// How long work caught by an idle rule is warned before it is stopped.
    pub idle_reclaim_warning: Duration,
}

/// The fleet watch's handles: the database, its settings, and the signals it sends when nodes are
/// lost.
#[derive(Clone)]
pub struct Liveness {
    pub db: PgPool,
    pub settings: LivenessSettings,
    pub wake: SchedulerWake,
    pub desired: DesiredStateChanged,
}

pub async fn run(state: Liveness, shutdown: Shutdown) {
    let period = (state.settings.node_lost_after / 4).max(Duration::from_millis(200));
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    // The first pass prunes at once what passed its retention while no control plane ran.
    let mut last_prune: Option<tokio::time::Instant> = None;
    // The first pass rolls up at once what closed while no control plane ran.
    let mut last_rollup: Option<tokio::time::Instant> = None;
    // When this process last began to hear the fleet without a break (the database's clock); None
    // while the database is unreachable or before the first check.
    let mut hearing_since: Option<chrono::DateTime<chrono::Utc>> = None;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let since = match hearing_since {
            Some(since) => since,
            None => match database_now(&state).await {
                Ok(now) => {
                    tracing::info!("hearing the fleet; nodes silent from now on may be marked lost after the timeout");
                    *hearing_since.insert(now)
                }
                Err(err) => {
                    tracing::warn!(error = %err, "the database is unreachable; no node is marked lost meanwhile");
                    continue;
                }
            },
        };
        let checked = match mark_lost_nodes(&state, since).await {
            Ok(lost) => requeue_fenced(&state, since).await.map(|requeued| (lost, requeued)),
            Err(err) => Err(err),
        };
        match checked {
            Ok((0, 0)) => {}
            Ok((lost, requeued)) => {
                if requeued > 0 {
                    tracing::warn!(lost, requeued, "lost nodes' work requeued after its fencing time");
                }
                state.desired.announce();
                state.wake.wake();
            }
            Err(err) => {
                // The database may be gone: silence from now on is not the agents' fault.
                tracing::error!(error = %err, "checking node liveness");
                hearing_since = None;
            }
        }
        // Every later step below may wait out the pool's acquire timeout while the database is
        // down, so a whole outage can pass between two liveness checks: any step that could not
        // reach the database also ends the hearing, or the next check would count the outage as
        // the agents' silence.
        let mut lost_the_database = |err: &sqlx::Error, doing: &str| {
            tracing::error!(error = %err, "{doing}");
            if database_unreachable(err) {
                hearing_since = None;
            }
        };
        // Gangs stay whole: out-of-step members follow the rest, and a gang that did not start in
        // time is requeued (`workloads::gangs`).
        match crate::workloads::gangs::sweep(&state.db, state.settings.gang_start_timeout).await {
            Ok(0) => {}
            Ok(gangs) => {
                tracing::info!(gangs, "gangs out of step were stopped or requeued whole");
                state.desired.announce();
                state.wake.wake();
            }
            Err(err) => lost_the_database(&err, "keeping gangs whole"),
        }
        // Tenants' idle rules: work holding idle GPUs is warned, then stopped (`workloads::idle`).
        match crate::workloads::idle::sweep(
            &state.db,
            state.settings.idle_util_threshold,
            state.settings.idle_reclaim_warning,
        )
        .await
        {
            Ok(crate::workloads::idle::Reclaimed { stopped: 0, .. }) => {}
            Ok(done) => {
                tracing::info!(stopped = done.stopped, "idle work stopped under its tenant's rule");
                state.desired.announce();
                state.wake.wake();
            }
            Err(err) => lost_the_database(&err, "applying tenants' idle rules"),
        }
        // Drains move work off their nodes as it becomes movable, and stop what is left at their
        // deadline (`fleet::maintenance`).
        match crate::fleet::maintenance::advance_drains(&state.db).await {
            Ok(0) => {}
            Ok(stopped) => {
                tracing::info!(stopped, "drains told work on their nodes to stop; it is requeued as it exits");
                state.desired.announce();
                state.wake.wake();
            }
            Err(err) => lost_the_database(&err, "advancing node drains"),
        }
        if last_rollup.is_none_or(|at| at.elapsed() > Duration::from_secs(60)) {
            last_rollup = Some(tokio::time::Instant::now());
            match crate::usage::roll_up(&state.db, state.settings.node_lost_after).await {
                Ok(0) => {}
                Ok(hours) => tracing::info!(hours, "GPU usage rolled up"),
                Err(err) => lost_the_database(&err, "rolling up GPU usage"),
            }
        }
        if last_prune.is_none_or(|at| at.elapsed() > Duration::from_secs(600)) {
            last_prune = Some(tokio::time::Instant::now());
            if let Err(err) = prune_telemetry(&state).await {
                lost_the_database(&err, "pruning telemetry history");
            }
        }
    }
}

/// Whether an error says the database could not be reached (rather than that a statement failed):
/// the pool gave up, the connection broke, or the server is shutting down or refusing connections.
fn database_unreachable(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) | sqlx::Error::Tls(_) => true,
        // SQLSTATE class 08 (connection exception) and 57P (operator intervention: shutdown).
        sqlx::Error::Database(db) => db.code().is_some_and(|code| code.starts_with("08") || code.starts_with("57P")),
        _ => false,
    }
}

async fn database_now(state: &Liveness) -> sqlx::Result<chrono::DateTime<chrono::Utc>> {
    let (now,): (chrono::DateTime<chrono::Utc>,) = sqlx::query_as("SELECT now()").fetch_one(&state.db).await?;
    Ok(now)
}

/// Marks nodes lost that have been silent for the timeout *while this control plane could hear
/// them* (since `hearing_since`): they take no new work. Their workloads stay theirs until
/// [`requeue_fenced`] (the agent stops them itself once its lease runs out).
pub async fn mark_lost_nodes(state: &Liveness, hearing_since: chrono::DateTime<chrono::Utc>) -> sqlx::Result<usize> {
    let lost_after_ms = state.settings.node_lost_after.as_millis() as f64;
    let lost: Vec<(uuid::Uuid, String)> = sqlx::query_as(
        "UPDATE nodes SET state = 'lost', desired_version = desired_version + 1 \
         WHERE state <> 'lost' AND greatest(last_seen_at, $2) < now() - make_interval(secs => $1 / 1000.0) \
         RETURNING id, name",
    )
    .bind(lost_after_ms)
    .bind(hearing_since)
    .fetch_all(&state.db)
    .await?;
    for (_, name) in &lost {
        tracing::warn!(node = %name, "node lost: no heartbeat; its workloads are requeued once its agent has fenced them");
    }
    Ok(lost.len())
}

/// How long past its lease and the grace period a lost node's work waits before it is requeued:
/// the agent's clock and ours may disagree by a heartbeat or two.
pub const FENCE_MARGIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Requeues the work of nodes silent for longer than their lease, the grace period and
/// [`FENCE_MARGIN`]: by then an agent that lost contact has stopped it (it fences itself when its
/// lease runs out, SIGTERM then SIGKILL after the grace period), so the requeued copy never runs
/// beside the old one. One transaction per node, so a failure leaves nothing half-done.
pub async fn requeue_fenced(state: &Liveness, hearing_since: chrono::DateTime<chrono::Utc>) -> sqlx::Result<usize> {
    let grace_ms = {
        let mut conn = state.db.acquire().await?;
        crate::settings::load(&mut conn).await?.grace_period_ms()
    };
    let wait = state.settings.node_fence_after + std::time::Duration::from_millis(grace_ms) + FENCE_MARGIN;
    let wait_ms = wait.as_millis() as f64;
    let fenced: Vec<(uuid::Uuid, String)> = sqlx::query_as(
        "SELECT id, name FROM nodes n WHERE state = 'lost' \
         AND EXISTS (SELECT 1 FROM workloads w WHERE w.node_id = n.id) \
         AND greatest(last_seen_at, $2) < now() - make_interval(secs => $1 / 1000.0)",
    )
    .bind(wait_ms)
    .bind(hearing_since)
    .fetch_all(&state.db)
    .await?;
    for (node_id, name) in &fenced {
        let mut tx = state.db.begin().await?;
        let still_lost = sqlx::query(
            "UPDATE nodes SET desired_version = desired_version + 1 \
             WHERE id = $1 AND state = 'lost' AND greatest(last_seen_at, $3) < now() - make_interval(secs => $2 / 1000.0)",
        )
        .bind(node_id)
        .bind(wait_ms)
        .bind(hearing_since)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if still_lost == 1 {
            let why =
                format!("node {name} was lost (no heartbeat for {} s; its agent fenced its work)", wait.as_secs());
            transitions::requeue_node(&mut tx, *node_id, &[], &why).await?;
        }
        tx.commit().await?;
    }
    Ok(fenced.len())
}

pub async fn prune_telemetry(state: &Liveness) -> sqlx::Result<()> {
    let hours = f64::from(state.settings.telemetry_retention_hours);
    // Whole hours of history past the retention: their partitions are dropped, no row deleted.
    let retention = Duration::from_secs(u64::from(state.settings.telemetry_retention_hours) * 3600);
    let dropped = crate::fleet::telemetry::drop_old_partitions(&state.db, retention).await?;
    if dropped > 0 {
        tracing::info!(partitions = dropped, "telemetry history past its retention dropped");
    }
    // Released grants are kept while the usage of their hours may still be computed from them.
    sqlx::query(
        "DELETE FROM gpu_grant_history WHERE released_at < LEAST(now() - make_interval(hours => $1::int), \
             (SELECT rolled_until FROM gpu_usage_progress) - interval '1 hour')",
    )
    .bind(hours as i32)
    .execute(&state.db)
    .await?;
    // Serving replicas' reads are history like telemetry (a service's cost and capacity read the
    // last hour of them).
    sqlx::query("DELETE FROM replica_samples WHERE at < now() - make_interval(hours => $1::int)")
        .bind(hours.max(2.0) as i32)
        .execute(&state.db)
        .await?;
    Ok(())
}
