//! Every change of a workload's state goes through here, inside the caller's transaction, and leaves
//! a row in `workload_events` saying from what, to what and why.

use sqlx::{PgConnection, Postgres, Transaction};
use uuid::Uuid;

use crate::model::WorkloadState;

pub type Tx<'a> = Transaction<'a, Postgres>;

pub async fn record_event(
    conn: &mut PgConnection,
    workload_id: Uuid,
    tenant_id: Uuid,
    from: Option<WorkloadState>,
    to: WorkloadState,
    attempt: i32,
    detail: &str,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO workload_events (workload_id, tenant_id, from_state, to_state, attempt, detail) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(workload_id)
    .bind(tenant_id)
    .bind(from)
    .bind(to)
    .bind(attempt)
    .bind(detail)
    .execute(conn)
    .await?;
    Ok(())
}

/// One event row for [`record_events`].
pub struct EventRow {
    pub workload_id: Uuid,
    pub tenant_id: Uuid,
    pub from: Option<WorkloadState>,
    pub to: WorkloadState,
    pub attempt: i32,
    pub detail: String,
}

/// Many events in one statement (a cycle's placements).
pub async fn record_events(conn: &mut PgConnection, rows: &[EventRow]) -> sqlx::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let state = |s: WorkloadState| s.as_str().to_owned();
    sqlx::query(
        "INSERT INTO workload_events (workload_id, tenant_id, from_state, to_state, attempt, detail) \
         SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::int[], $6::text[])",
    )
    .bind(rows.iter().map(|r| r.workload_id).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.tenant_id).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.from.map(state)).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| state(r.to)).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.attempt).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.detail.as_str()).collect::<Vec<_>>())
    .execute(conn)
    .await?;
    Ok(())
}

/// A pending workload is cancelled: it never ran, so it ends at once. `detail` says why.
pub async fn cancel_pending(
    conn: &mut PgConnection,
    id: Uuid,
    tenant_id: Uuid,
    attempt: i32,
    detail: &str,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE workloads SET state = 'cancelled', pending_reason = NULL, finished_at = now(), \
         updated_at = now() WHERE id = $1",
    )
    .bind(id)
    .execute(&mut *conn)
    .await?;
    record_event(conn, id, tenant_id, Some(WorkloadState::Pending), WorkloadState::Cancelled, attempt, detail).await
}

/// A workload on a node is to be cancelled: its agent stops it (SIGTERM, SIGKILL after the grace
/// period) and the exit ends it. The node's desired state changes. `detail` says why.
pub async fn request_cancel(
    conn: &mut PgConnection,
    id: Uuid,
    tenant_id: Uuid,
    from: WorkloadState,
    attempt: i32,
    node_id: Option<Uuid>,
    detail: &str,
) -> sqlx::Result<()> {
    sqlx::query("UPDATE workloads SET state = 'cancelling', updated_at = now() WHERE id = $1")
        .bind(id)
        .execute(&mut *conn)
        .await?;
    sqlx::query("UPDATE nodes SET desired_version = desired_version + 1 WHERE id = $1")
        .bind(node_id)
        .execute(&mut *conn)
        .await?;
    record_event(conn, id, tenant_id, Some(from), WorkloadState::Cancelling, attempt, detail).await
}

/// A placed workload is to be stopped and requeued (preempted) for a reason other than a policy's
/// decision — its node is drained: its agent sends the checkpoint signal (SIGTERM, SIGKILL after the
/// grace period) and the exit puts it back in the queue. The node's desired state changes.
/// Answers false, changing nothing, when the workload is no longer scheduled or running.
pub async fn request_preempt(
    conn: &mut PgConnection,
    id: Uuid,
    tenant_id: Uuid,
    attempt: i32,
    detail: &str,
) -> sqlx::Result<bool> {
    let moved: Option<(WorkloadState, Option<Uuid>)> = sqlx::query_as(
        "WITH old AS (SELECT id, state FROM workloads WHERE id = $1 AND attempt = $3 \
                        AND state IN ('scheduled', 'running') FOR UPDATE) \
         UPDATE workloads w SET state = 'preempting', preempted_reason = $2, updated_at = now() \
         FROM old WHERE w.id = old.id RETURNING old.state, w.node_id",
    )
    .bind(id)
    .bind(detail)
    .bind(attempt)
    .fetch_optional(&mut *conn)
    .await?;
    let Some((from, node_id)) = moved else { return Ok(false) };
    sqlx::query("UPDATE nodes SET desired_version = desired_version + 1 WHERE id = $1")
        .bind(node_id)
        .execute(&mut *conn)
        .await?;
    record_event(conn, id, tenant_id, Some(from), WorkloadState::Preempting, attempt, detail).await?;
    Ok(true)
}

/// Everything on a node goes back to the queue (the node was lost, or its agent restarted) but
/// the attempts in `kept` (workload, attempt: what a restarted agent adopted and runs): placed,
/// running and preempting work becomes pending again with its GPUs released; work being
/// cancelled is cancelled.
pub async fn requeue_node(tx: &mut Tx<'_>, node_id: Uuid, kept: &[(Uuid, i32)], why: &str) -> sqlx::Result<u64> {
    let (kept_ids, kept_attempts): (Vec<Uuid>, Vec<i32>) = kept.iter().copied().unzip();
    // The workloads of the node whose current attempt is not one the agent runs.
    sqlx::query(
        "DELETE FROM gpu_grants WHERE workload_id IN (SELECT w.id FROM workloads w WHERE w.node_id = $1 \
             AND (w.id, w.attempt) NOT IN (SELECT * FROM unnest($2::uuid[], $3::int[])))",
    )
    .bind(node_id)
    .bind(&kept_ids)
    .bind(&kept_attempts)
    .execute(&mut **tx)
    .await?;
    let moved = sqlx::query(
        "WITH old AS (SELECT id, state FROM workloads WHERE node_id = $1 \
                        AND (id, attempt) NOT IN (SELECT * FROM unnest($2::uuid[], $3::int[])) FOR UPDATE), \
              moved AS (UPDATE workloads w \
                        SET state = CASE WHEN old.state = 'cancelling' THEN 'cancelled' ELSE 'pending' END, \
                            last_node_id = w.node_id, node_id = NULL, started_at = NULL, updated_at = now(), \
                            finished_at = CASE WHEN old.state = 'cancelling' THEN now() END, \
                            pending_reason = CASE WHEN old.state = 'cancelling' THEN NULL ELSE $4 END \
                        FROM old WHERE w.id = old.id \
                        RETURNING w.id, w.tenant_id, old.state AS from_state, w.state AS to_state, w.attempt) \
         INSERT INTO workload_events (workload_id, tenant_id, from_state, to_state, attempt, detail) \
         SELECT id, tenant_id, from_state, to_state, attempt, $4 FROM moved",
    )
    .bind(node_id)
    .bind(&kept_ids)
    .bind(&kept_attempts)
    .bind(format!("requeued: {why}"))
    .execute(&mut **tx)
    .await?
    .rows_affected();
    Ok(moved)
}

/// What an agent reports about one attempt of a workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentEvent {
    Started {
        pid: Option<u32>,
    },
    /// `requeue`: the agent fenced it (lost contact past its lease): back to the queue.
    Exited {
        exit_code: Option<i32>,
        signal: Option<i32>,
        message: Option<String>,
        requeue: bool,
    },
    FailedToStart {
        message: String,
    },
}

#[derive(Debug, PartialEq, Eq)]
pub enum EventOutcome {
    /// The state changed; the loop and the agents should look again.
    Applied,
    /// Already applied (the agent retried), or nothing to do in this state.
    Unchanged,
    /// The event names an attempt that is no longer current.
    StaleAttempt { current: i32 },
    /// No such workload on this node.
    NotFound,
    /// The event's attempt token is not the one its attempt was assigned with: nothing changed.
    TokenMismatch,
}

#[derive(sqlx::FromRow)]
struct Locked {
    tenant_id: Uuid,
    state: WorkloadState,
    attempt: i32,
    node_id: Option<Uuid>,
    attempt_token: Option<Uuid>,
}

/// An agent's event for one attempt, in its own transaction: the node's row locked first (as
/// telemetry, liveness and registration lock it: node, then GPUs and grants — an exit that released
/// its grants before bumping the node's version could deadlock with the same agent's heartbeat),
/// then [`apply_agent_event`], then the node's desired version bumped when the event freed
/// resources. Returns the outcome and whether resources came free.
pub async fn record_agent_event(
    db: &sqlx::PgPool,
    node_id: Uuid,
    workload_id: Uuid,
    attempt: i32,
    token: Option<Uuid>,
    event: &AgentEvent,
) -> sqlx::Result<(EventOutcome, bool)> {
    let mut tx = db.begin().await?;
    sqlx::query("SELECT 1 FROM nodes WHERE id = $1 FOR NO KEY UPDATE").bind(node_id).execute(&mut *tx).await?;
    let outcome = apply_agent_event(&mut tx, node_id, workload_id, attempt, token, event).await?;
    let freed = outcome == EventOutcome::Applied && !matches!(event, AgentEvent::Started { .. });
    if freed {
        sqlx::query("UPDATE nodes SET desired_version = desired_version + 1 WHERE id = $1")
            .bind(node_id)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok((outcome, freed))
}

/// Applies an agent's event exactly once per (workload, attempt, event). `token` is the one the
/// event carries: for the current attempt on this node it must be the one the attempt was
/// assigned with (work placed before tokens were issued has none to match).
pub async fn apply_agent_event(
    tx: &mut Tx<'_>,
    node_id: Uuid,
    workload_id: Uuid,
    attempt: i32,
    token: Option<Uuid>,
    event: &AgentEvent,
) -> sqlx::Result<EventOutcome> {
    let Some(w): Option<Locked> = sqlx::query_as(
        "SELECT tenant_id, state, attempt, node_id, attempt_token FROM workloads WHERE id = $1 FOR UPDATE",
    )
    .bind(workload_id)
    .fetch_optional(&mut **tx)
    .await?
    else {
        return Ok(EventOutcome::NotFound);
    };
    if w.attempt != attempt {
        return Ok(EventOutcome::StaleAttempt { current: w.attempt });
    }
    if w.node_id != Some(node_id) {
        // The attempt is current but no longer on this node: it was requeued while the agent was
        // away, and will get a new attempt when placed again.
        return Ok(if w.state.is_on_node() { EventOutcome::NotFound } else { EventOutcome::Unchanged });
    }
    if w.attempt_token.is_some() && token != w.attempt_token {
        return Ok(EventOutcome::TokenMismatch);
    }
    use WorkloadState as S;
    let (to, detail, exit_code, message) = match (event, w.state) {
        (AgentEvent::Started { pid }, S::Scheduled) => {
            let detail = match pid {
                Some(pid) => format!("started (pid {pid})"),
                None => "started".to_owned(),
            };
            sqlx::query("UPDATE workloads SET state = 'running', started_at = now(), updated_at = now() WHERE id = $1")
                .bind(workload_id)
                .execute(&mut **tx)
                .await?;
            record_event(tx, workload_id, w.tenant_id, Some(w.state), S::Running, attempt, &detail).await?;
            return Ok(EventOutcome::Applied);
        }
        (AgentEvent::Started { .. }, _) => return Ok(EventOutcome::Unchanged),
        (AgentEvent::Exited { exit_code, signal, message, requeue }, state) => {
            let how = match (exit_code, signal) {
                (Some(code), _) => format!("exited with code {code}"),
                (None, Some(sig)) => format!("killed by signal {sig}"),
                (None, None) => "exited".to_owned(),
            };
            let how = match message {
                Some(m) => format!("{how}: {m}"),
                None => how,
            };
            match state {
                S::Scheduled | S::Running if *requeue => (S::Pending, format!("{how}; requeued"), *exit_code, None),
                S::Scheduled | S::Running if *exit_code == Some(0) => (S::Succeeded, how, *exit_code, None),
                S::Scheduled | S::Running => (S::Failed, how.clone(), *exit_code, Some(how)),
                S::Preempting => (S::Pending, format!("preempted, {how}; requeued"), *exit_code, None),
                S::Cancelling => (S::Cancelled, format!("cancelled, {how}"), *exit_code, None),
                _ => return Ok(EventOutcome::Unchanged),
            }
        }
        (AgentEvent::FailedToStart { message }, state) => match state {
            S::Scheduled | S::Running => {
                (S::Failed, format!("failed to start: {message}"), None, Some(message.clone()))
            }
            S::Preempting => (S::Pending, "preempted before it started; requeued".to_owned(), None, None),
            S::Cancelling => (S::Cancelled, "cancelled before it started".to_owned(), None, None),
            _ => return Ok(EventOutcome::Unchanged),
        },
    };
    let requeued_because = match event {
        AgentEvent::Exited { requeue: true, .. } => "requeued: its node's agent lost contact and stopped it",
        _ => "requeued after preemption",
    };
    leave_node(tx, workload_id, to, exit_code, message.as_deref(), requeued_because).await?;
    record_event(tx, workload_id, w.tenant_id, Some(w.state), to, attempt, &detail).await?;
    Ok(EventOutcome::Applied)
}

/// The workload's process is gone: release its GPUs and node, and set its new state.
async fn leave_node(
    tx: &mut Tx<'_>,
    workload_id: Uuid,
    to: WorkloadState,
    exit_code: Option<i32>,
    message: Option<&str>,
    requeued_because: &str,
) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM gpu_grants WHERE workload_id = $1").bind(workload_id).execute(&mut **tx).await?;
    let terminal = to.is_terminal();
    sqlx::query(
        "UPDATE workloads SET state = $2, last_node_id = node_id, node_id = NULL, updated_at = now(), \
             exit_code = CASE WHEN $3 THEN $4 ELSE exit_code END, \
             message = COALESCE($5, message), \
             finished_at = CASE WHEN $3 THEN now() END, \
             started_at = CASE WHEN $3 THEN started_at END, \
             pending_reason = CASE WHEN $3 THEN NULL ELSE $6 END \
         WHERE id = $1",
    )
    .bind(workload_id)
    .bind(to)
    .bind(terminal)
    .bind(exit_code)
    .bind(message)
    .bind(requeued_because)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
