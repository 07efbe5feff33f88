//! Gangs: a workload of several members, one per node, that runs whole or not at all
//! (`docs/gangs.md`). The scheduling core places every member in one cycle or none; this module
//! keeps the members together afterwards:
//!
//! - **They start together.** A member's assignment carries its rendezvous held
//!   ([`GangRendezvous::hold`]) until every member's node has asked for its desired state since
//!   the member was placed there ([`acknowledge`]): then every member's node is told at once.
//! - **They stop together.** One member requeued (preempted, its node lost or drained, its GPU
//!   faulted) stops the others and requeues them with it; one member failed or cancelled ends the
//!   others ([`follow`]). Who notices first does not matter: the agent's event path calls
//!   [`follow`] at once, and the fleet watch sweeps every gang that is out of step ([`sweep`]).
//! - **A gang that does not start is torn down**, not left half-alive: when not every member
//!   started within `--gang-start-timeout-ms` of its placement, every member is stopped and
//!   requeued.

use std::time::Duration;

use airtime_protocol::agent::GangRendezvous;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::model::WorkloadState;
use crate::workloads::transitions;

/// Most members a gang may have (the schema's CHECK).
pub const MAX_MEMBERS: u32 = 256;

/// The port range `MASTER_PORT` is chosen from, by the gang's id: the same for every member and
/// every attempt of the gang, different for most pairs of gangs on one node.
const MASTER_PORTS: std::ops::Range<u16> = 29_500..39_500;

#[derive(sqlx::FromRow)]
struct Member {
    id: Uuid,
    tenant_id: Uuid,
    state: WorkloadState,
    attempt: i32,
    node_id: Option<Uuid>,
    gang_rank: i32,
}

/// Every member of `gang` by rank, locked for the caller's transaction (always in rank order, so
/// two transactions on one gang never deadlock on its rows).
async fn lock_members(conn: &mut PgConnection, gang: Uuid) -> sqlx::Result<Vec<Member>> {
    sqlx::query_as(
        "SELECT id, tenant_id, state, attempt, node_id, gang_rank FROM workloads WHERE gang_id = $1 \
         ORDER BY gang_rank FOR UPDATE",
    )
    .bind(gang)
    .fetch_all(conn)
    .await
}

/// Keeps the members of each gang in `gangs` together: a member failed or cancelled ends every
/// other member (a pending one at once, one on a node through its agent); else a member pending or
/// being preempted stops the members on nodes, which are requeued as they exit. Returns whether a
/// node's desired state changed.
pub async fn follow(conn: &mut PgConnection, gangs: &[Uuid]) -> sqlx::Result<bool> {
    let mut changed = false;
    for &gang in gangs {
        let members = lock_members(conn, gang).await?;
        let ended = members.iter().find(|m| matches!(m.state, WorkloadState::Failed | WorkloadState::Cancelled));
        if let Some(ended) = ended {
            let detail = format!("its gang ended: member rank {} was {}", ended.gang_rank, ended.state.as_str());
            for m in &members {
                match m.state {
                    WorkloadState::Pending => {
                        transitions::cancel_pending(conn, m.id, m.tenant_id, m.attempt, &detail).await?;
                    }
                    WorkloadState::Scheduled | WorkloadState::Running | WorkloadState::Preempting => {
                        transitions::request_cancel(conn, m.id, m.tenant_id, m.state, m.attempt, m.node_id, &detail)
                            .await?;
                        changed = true;
                    }
                    _ => {}
                }
            }
            continue;
        }
        let requeued = members.iter().find(|m| matches!(m.state, WorkloadState::Pending | WorkloadState::Preempting));
        if let Some(requeued) = requeued {
            let detail = format!(
                "preempted: its gang is requeued whole (member rank {} is {})",
                requeued.gang_rank,
                requeued.state.as_str()
            );
            for m in members.iter().filter(|m| matches!(m.state, WorkloadState::Scheduled | WorkloadState::Running)) {
                changed |= transitions::request_preempt(conn, m.id, m.tenant_id, m.attempt, &detail).await?;
            }
        }
    }
    Ok(changed)
}

/// [`follow`] for the gang of one workload (nothing for a workload that is not a gang's member),
/// in a transaction of its own.
pub async fn follow_member(db: &PgPool, workload_id: Uuid) -> sqlx::Result<bool> {
    let gang: Option<(Option<Uuid>,)> =
        sqlx::query_as("SELECT gang_id FROM workloads WHERE id = $1").bind(workload_id).fetch_optional(db).await?;
    let Some((Some(gang),)) = gang else { return Ok(false) };
    let mut tx = db.begin().await?;
    let changed = follow(&mut tx, &[gang]).await?;
    tx.commit().await?;
    Ok(changed)
}

/// Every gang out of step — some members on nodes while another waits, is being stopped or
/// ended, or some pending while another ended — followed ([`follow`]); and every gang that did
/// not start within `start_timeout` of its placement stopped and requeued. Returns how many gangs
/// changed.
pub async fn sweep(db: &PgPool, start_timeout: Duration) -> sqlx::Result<usize> {
    let out_of_step: Vec<(Uuid,)> = sqlx::query_as(
        "SELECT gang_id FROM workloads \
         WHERE gang_id IN (SELECT gang_id FROM workloads WHERE gang_id IS NOT NULL \
                           AND state IN ('pending', 'scheduled', 'running', 'preempting')) \
         GROUP BY gang_id \
         HAVING (bool_or(state IN ('scheduled', 'running')) \
                 AND bool_or(state IN ('pending', 'preempting', 'failed', 'cancelled'))) \
             OR (bool_or(state = 'pending') AND bool_or(state IN ('failed', 'cancelled')))",
    )
    .fetch_all(db)
    .await?;
    let mut changed = 0;
    if !out_of_step.is_empty() {
        let gangs: Vec<Uuid> = out_of_step.into_iter().map(|(g,)| g).collect();
        let mut tx = db.begin().await?;
        follow(&mut tx, &gangs).await?;
        tx.commit().await?;
        changed += gangs.len();
    }
    // Gangs whose members are all placed, some not started, the earliest placed longer ago than
    // the timeout.
    let stalled: Vec<(Uuid, i64)> = sqlx::query_as(
        "SELECT w.gang_id, count(*) FILTER (WHERE w.state = 'scheduled') FROM workloads w \
         WHERE w.gang_id IN (SELECT gang_id FROM workloads WHERE gang_id IS NOT NULL AND state = 'scheduled') \
         GROUP BY w.gang_id \
         HAVING bool_and(w.state IN ('scheduled', 'running')) \
            AND min((SELECT max(e.at) FROM workload_events e WHERE e.workload_id = w.id \
                     AND e.to_state = 'scheduled' AND e.attempt = w.attempt)) \
                < now() - make_interval(secs => $1::float8 / 1000.0)",
    )
    .bind(start_timeout.as_millis() as f64)
    .fetch_all(db)
    .await?;
    for (gang, waiting) in stalled {
        let mut tx = db.begin().await?;
        let members = lock_members(&mut tx, gang).await?;
        let detail = format!(
            "preempted: its gang did not start within {} s ({waiting} of {} members never started); requeued whole",
            start_timeout.as_secs(),
            members.len()
        );
        for m in members.iter().filter(|m| matches!(m.state, WorkloadState::Scheduled | WorkloadState::Running)) {
            transitions::request_preempt(&mut tx, m.id, m.tenant_id, m.attempt, &detail).await?;
        }
        tx.commit().await?;
        changed += 1;
    }
    Ok(changed)
}

/// The agent of `node_id` asked for its desired state after having seen version `after`: every
/// gang member on the node that was first shown to it at or before that version is acknowledged.
/// Returns the nodes of the gangs this completed (every member acknowledged), whose agents must
/// now be told to start their members.
pub async fn acknowledge(db: &PgPool, node_id: Uuid, after: u64) -> sqlx::Result<Vec<Uuid>> {
    let acked: Vec<(Uuid,)> = sqlx::query_as(
        "UPDATE workloads SET gang_acked_at = now() \
         WHERE node_id = $1 AND gang_id IS NOT NULL AND state = 'scheduled' AND gang_acked_at IS NULL \
           AND gang_shown_version IS NOT NULL AND gang_shown_version <= $2 \
         RETURNING gang_id",
    )
    .bind(node_id)
    .bind(i64::try_from(after).unwrap_or(i64::MAX))
    .fetch_all(db)
    .await?;
    if acked.is_empty() {
        return Ok(Vec::new());
    }
    let gangs: Vec<Uuid> = acked.into_iter().map(|(g,)| g).collect();
    // The gangs now whole: bump every member's node so its agent reads the released rendezvous.
    let nodes: Vec<(Uuid,)> = sqlx::query_as(
        "WITH whole AS (SELECT gang_id FROM workloads WHERE gang_id = ANY($1) GROUP BY gang_id \
                        HAVING bool_and(state IN ('scheduled', 'running') AND gang_acked_at IS NOT NULL)) \
         UPDATE nodes n SET desired_version = desired_version + 1 \
         WHERE n.id IN (SELECT w.node_id FROM workloads w JOIN whole USING (gang_id) WHERE w.node_id IS NOT NULL) \
         RETURNING n.id",
    )
    .bind(&gangs)
    .fetch_all(db)
    .await?;
    Ok(nodes.into_iter().map(|(n,)| n).collect())
}

#[derive(sqlx::FromRow)]
struct RendezvousRow {
    workload_id: Uuid,
    gang_id: Uuid,
    gang_rank: i32,
    gang_size: i32,
    gpu_count: i32,
    /// Every member's node address by rank (a member not placed: empty).
    hosts: Vec<String>,
    /// Members whose node has not acknowledged yet.
    unacked: i64,
}

/// The rendezvous of each gang member placed on `node_id` (workload → rendezvous), noting the
/// desired-state `version` as the one that first shows each of them to the node.
pub async fn rendezvous(
    db: &PgPool,
    node_id: Uuid,
    version: u64,
) -> sqlx::Result<std::collections::HashMap<Uuid, GangRendezvous>> {
    sqlx::query(
        "UPDATE workloads SET gang_shown_version = $2 \
         WHERE node_id = $1 AND gang_id IS NOT NULL AND state = 'scheduled' AND gang_shown_version IS NULL",
    )
    .bind(node_id)
    .bind(i64::try_from(version).unwrap_or(i64::MAX))
    .execute(db)
    .await?;
    let rows: Vec<RendezvousRow> = sqlx::query_as(
        "SELECT w.id AS workload_id, w.gang_id, w.gang_rank, w.gang_size, w.gpu_count, \
                (SELECT array_agg(COALESCE(n.address, n.hostname, '') ORDER BY m.gang_rank) \
                 FROM workloads m LEFT JOIN nodes n ON n.id = m.node_id WHERE m.gang_id = w.gang_id) AS hosts, \
                (SELECT count(*) FROM workloads m WHERE m.gang_id = w.gang_id \
                 AND (m.gang_acked_at IS NULL OR m.state NOT IN ('scheduled', 'running'))) AS unacked \
         FROM workloads w WHERE w.node_id = $1 AND w.gang_id IS NOT NULL",
    )
    .bind(node_id)
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let port = MASTER_PORTS.start + (r.gang_id.as_u128() % u128::from(MASTER_PORTS.len() as u16)) as u16;
            let rendezvous = GangRendezvous {
                gang_id: r.gang_id,
                rank: r.gang_rank.max(0) as u32,
                size: r.gang_size.max(1) as u32,
                master_addr: r.hosts.first().cloned().unwrap_or_default(),
                master_port: port,
                slots: r.gpu_count.max(0) as u32,
                hold: r.unacked > 0,
                hosts: r.hosts,
            };
            (r.workload_id, rendezvous)
        })
        .collect())
}
