//! Cordon and drain: an operator's hold on a node (`nodes.cordon`, apart from its liveness, so a
//! re-registering agent or a node lost and heard again keeps it).
//!
//! - **Cordoned**: no new placements. The scheduler reads the node as `cordoned` (policies see the
//!   ABI's `draining`), the host's check refuses any placement there, and a cycle that read the
//!   fleet before the cordon committed finds it when it locks the node (`scheduler::record`).
//! - **Draining**: cordoned, and its work is moved off. Checkpointable and preemptible work is
//!   preempted (the checkpoint signal, then requeued by its exit); a service's replicas are
//!   replaced elsewhere before they stop (the autoscaler's rule, `airtime_scheduler::services`,
//!   which needs the service's fresh load reports);
//!   the rest is left to finish — until the drain's deadline, when it is preempted too. The fleet
//!   watch advances every drain on each tick ([`advance_drains`]), so work placed on the node
//!   before the drain, and the deadline, are handled without another request.
//!
//! Every change is one transaction with its audit row; only platform admins make them.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::auth::audit::{self, Change};
use crate::domain::{self, Scope};
use crate::model::{NodeState, WorkloadClass, WorkloadState};
use crate::workloads::transitions;

/// The longest drain deadline: a week.
pub const MAX_DEADLINE_S: u32 = 7 * 24 * 3600;
/// The longest reason kept (characters).
pub const MAX_REASON_CHARS: usize = 500;

/// What an operator asks of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// No new work; its work runs on (a drain in progress stops moving work).
    Cordon,
    /// Cordon, and move its work off; with a deadline (seconds from now), what is left then is
    /// stopped and requeued.
    Drain { deadline_s: Option<u32> },
    /// Lift the hold: the node takes work again.
    Uncordon,
}

/// A node's hold as the API shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Maintenance {
    /// `cordoned` or `draining`.
    pub mode: NodeState,
    pub reason: Option<String>,
    pub since: DateTime<Utc>,
    /// Who cordoned or drained it (as the audit log names them).
    pub by: String,
    /// When a drain stops and requeues what is still left to finish.
    pub deadline: Option<DateTime<Utc>>,
    /// Workloads still on the node (placed, running or stopping).
    pub remaining: i64,
    /// A drain with nothing left on the node: it may be taken down.
    pub drained: bool,
}

/// What a drain does with a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DrainAction {
    /// Checkpointable or preemptible: stopped with the checkpoint signal and requeued.
    Requeue,
    /// A service replica: replaced on another node first, then stopped (on the service's fresh
    /// load reports; while they are stale it is held until the deadline).
    Replace,
    /// Left to finish (stopped and requeued at the drain's deadline, if one was given).
    Finish,
    /// Already on its way off the node (being preempted or cancelled).
    Stopping,
}

/// One workload on a node, and what a drain does with it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct NodeWork {
    /// Shown only to its own tenant and platform admins.
    pub workload_id: Option<Uuid>,
    /// Shown only to its own tenant and platform admins.
    pub name: Option<String>,
    pub class: WorkloadClass,
    pub state: WorkloadState,
    pub drain: DrainAction,
    /// For redaction; never serialized.
    #[serde(skip)]
    #[schema(ignore)]
    pub tenant_id: Uuid,
}

impl NodeWork {
    /// Hides whose it is unless `sees(its tenant)`.
    pub fn redact(&mut self, sees: impl Fn(Uuid) -> bool) {
        if !sees(self.tenant_id) {
            self.workload_id = None;
            self.name = None;
        }
    }
}

/// Checks an operator's reason: trimmed, at most [`MAX_REASON_CHARS`]; empty is none.
pub(crate) fn reason(text: Option<&str>) -> domain::Result<Option<String>> {
    let Some(text) = text.map(str::trim).filter(|t| !t.is_empty()) else { return Ok(None) };
    if text.chars().count() > MAX_REASON_CHARS {
        return Err(domain::Error::invalid(
            "invalid_reason",
            format!("reason is at most {MAX_REASON_CHARS} characters"),
        ));
    }
    if text.chars().any(char::is_control) {
        return Err(domain::Error::invalid("invalid_reason", "reason may not hold control characters"));
    }
    Ok(Some(text.to_owned()))
}

/// Cordons, drains or uncordons node `node_id`, with its audit row, in one transaction; a drain
/// preempts at once what it moves off (see [`drain_step`]). Platform admins only. Answers how
/// many workloads the drain told to stop now.
pub async fn set_hold(db: &PgPool, scope: &Scope, node_id: Uuid, hold: Hold, why: Option<&str>) -> domain::Result<u64> {
    scope.require_platform_admin()?;
    let why = reason(why)?;
    if let Hold::Drain { deadline_s: Some(s) } = hold
        && s > MAX_DEADLINE_S
    {
        return Err(domain::Error::invalid(
            "invalid_deadline",
            format!("deadline_s is at most {MAX_DEADLINE_S} (a week); drain without one to let work finish"),
        ));
    }
    let mut tx = db.begin().await?;
    // The node's row lock orders this change against a cycle placing there (see the module doc).
    let Some((name, before)): Option<(String, Option<String>)> =
        sqlx::query_as("SELECT name, cordon FROM nodes WHERE id = $1 FOR NO KEY UPDATE")
            .bind(node_id)
            .fetch_optional(&mut *tx)
            .await?
    else {
        return Err(domain::Error::NotFound("node"));
    };
    let (action, mode, deadline_s) = match hold {
        Hold::Cordon => ("node.cordon", Some("cordoned"), None),
        Hold::Drain { deadline_s } => ("node.drain", Some("draining"), deadline_s),
        Hold::Uncordon => ("node.uncordon", None, None),
    };
    write_hold(&mut tx, node_id, mode, why.as_deref(), &scope.actor.name, deadline_s).await?;
    audit::record(
        &mut tx,
        &scope.actor,
        Change::new(action, "node", node_id).detail(serde_json::json!({
            "node": name, "before": before, "reason": why, "deadline_s": deadline_s,
        })),
    )
    .await?;
    let stopped = if mode == Some("draining") { drain_step(&mut tx, node_id).await? } else { 0 };
    tx.commit().await?;
    Ok(stopped)
}

/// Sets node `node_id`'s hold (`None`: lifts it), held by `by`, on a node the caller has locked.
async fn write_hold(
    conn: &mut PgConnection,
    node_id: Uuid,
    mode: Option<&str>,
    why: Option<&str>,
    by: &str,
    deadline_s: Option<u32>,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE nodes SET cordon = $2, \
             cordon_reason = CASE WHEN $2::text IS NULL THEN NULL ELSE COALESCE($3, cordon_reason) END, \
             cordoned_at = CASE WHEN $2::text IS NULL THEN NULL ELSE COALESCE(cordoned_at, now()) END, \
             cordoned_by = CASE WHEN $2::text IS NULL THEN NULL ELSE $4 END, \
             drain_deadline = CASE WHEN $2::text = 'draining' \
                 THEN now() + make_interval(secs => $5::double precision) END \
         WHERE id = $1",
    )
    .bind(node_id)
    .bind(mode)
    .bind(why)
    .bind(by)
    .bind(deadline_s.map(f64::from))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Drains node `node_id` for repair, as Airtime itself (`fleet::health`: too many faulty GPUs),
/// unless an operator holds it already; the caller holds the node's row lock. Answers how many
/// workloads the drain told to stop now.
pub async fn drain_for_repair(conn: &mut PgConnection, node_id: Uuid, why: &str) -> sqlx::Result<u64> {
    let (held,): (Option<String>,) =
        sqlx::query_as("SELECT cordon FROM nodes WHERE id = $1").bind(node_id).fetch_one(&mut *conn).await?;
    if held.is_some() {
        return Ok(0);
    }
    write_hold(conn, node_id, Some("draining"), Some(why), REPAIR_HOLDER, None).await?;
    drain_step(conn, node_id).await
}

/// Who holds a node Airtime drained for repair.
pub const REPAIR_HOLDER: &str = "airtime (GPU health)";

/// One step of a drain on a locked, draining node: preempts the checkpointable and preemptible
/// work on it that is not a service replica (the autoscaler replaces those), and once its deadline
/// has passed, everything still placed there. Answers how many it told to stop.
async fn drain_step(conn: &mut PgConnection, node_id: Uuid) -> sqlx::Result<u64> {
    let moving: Vec<(Uuid, Uuid, i32, String, bool)> = sqlx::query_as(
        "SELECT w.id, w.tenant_id, w.attempt, n.name, COALESCE(n.drain_deadline <= now(), false) \
         FROM workloads w JOIN nodes n ON n.id = w.node_id \
         WHERE w.node_id = $1 AND n.cordon = 'draining' AND w.state IN ('scheduled', 'running') \
           AND ((w.service_id IS NULL AND (w.checkpointable OR w.preemptible)) \
                OR n.drain_deadline <= now()) \
         ORDER BY w.id",
    )
    .bind(node_id)
    .fetch_all(&mut *conn)
    .await?;
    let mut stopped = 0;
    for (id, tenant_id, attempt, node, past_deadline) in moving {
        let detail = if past_deadline {
            format!("preempted: its node {node} is draining and the drain's deadline has passed")
        } else {
            format!("preempted: its node {node} is draining (checkpoint and requeue)")
        };
        if transitions::request_preempt(&mut *conn, id, tenant_id, attempt, &detail).await? {
            stopped += 1;
        }
    }
    Ok(stopped)
}

/// Advances every drain: each draining node with work to move off gets a [`drain_step`], one
/// transaction per node. The fleet watch calls it on every tick (on every replica: the steps are
/// idempotent). Answers how many workloads were told to stop.
pub async fn advance_drains(db: &PgPool) -> sqlx::Result<u64> {
    let nodes: Vec<(Uuid,)> = sqlx::query_as(
        "SELECT n.id FROM nodes n WHERE n.cordon = 'draining' AND EXISTS \
           (SELECT 1 FROM workloads w WHERE w.node_id = n.id AND w.state IN ('scheduled', 'running') \
              AND ((w.service_id IS NULL AND (w.checkpointable OR w.preemptible)) OR n.drain_deadline <= now()))",
    )
    .fetch_all(db)
    .await?;
    let mut stopped = 0;
    for (node_id,) in nodes {
        let mut tx = db.begin().await?;
        sqlx::query("SELECT 1 FROM nodes WHERE id = $1 FOR NO KEY UPDATE").bind(node_id).execute(&mut *tx).await?;
        stopped += drain_step(&mut tx, node_id).await?;
        tx.commit().await?;
    }
    Ok(stopped)
}

/// What runs on node `node_id` (placed, running or stopping) and what a drain does with each,
/// oldest first.
pub async fn work_on(db: &PgPool, node_id: Uuid) -> sqlx::Result<Vec<NodeWork>> {
    type Row = (Uuid, String, Uuid, WorkloadClass, WorkloadState, bool, bool, bool);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT id, name, tenant_id, class, state, checkpointable, preemptible, service_id IS NOT NULL \
         FROM workloads WHERE node_id = $1 ORDER BY submitted_at, id",
    )
    .bind(node_id)
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(id, name, tenant_id, class, state, checkpointable, preemptible, replica)| NodeWork {
            workload_id: Some(id),
            name: Some(name),
            class,
            state,
            drain: match state {
                WorkloadState::Preempting | WorkloadState::Cancelling => DrainAction::Stopping,
                _ if replica => DrainAction::Replace,
                _ if checkpointable || preemptible => DrainAction::Requeue,
                _ => DrainAction::Finish,
            },
            tenant_id,
        })
        .collect())
}
