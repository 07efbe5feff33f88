//! The live feed behind `GET /api/v1/events/stream`: what changed since a cursor — workload state
//! changes, scheduling decisions, node states and policy failures — read from the tables that
//! record them, in the caller's tenant scope exactly as the REST reads filter them (a tenant's
//! workloads, decisions and own policies' failures; every node, as `GET /nodes` shows every
//! node). Reading the database (not an in-process channel) makes every replica serve the same feed.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use crate::model::{NodeState, WorkloadState};

/// Where a feed stands: the last workload event, decision and policy failure it has passed on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cursor {
    pub event: i64,
    pub decision: i64,
    pub failure: i64,
}

impl Cursor {
    /// `e<id>.d<id>.f<id>`, as the stream's event ids carry it (`Last-Event-ID` on reconnect).
    pub fn parse(text: &str) -> Result<Cursor, String> {
        let mut cursor = Cursor::default();
        let bad = || format!("{text:?} is not a stream cursor (e<n>.d<n>.f<n>, from an event's id)");
        let parts: Vec<&str> = text.split('.').collect();
        if parts.len() != 3 {
            return Err(bad());
        }
        for (part, (prefix, slot)) in
            parts.iter().zip([("e", &mut cursor.event), ("d", &mut cursor.decision), ("f", &mut cursor.failure)])
        {
            *slot = part.strip_prefix(prefix).and_then(|n| n.parse().ok()).filter(|n: &i64| *n >= 0).ok_or_else(bad)?;
        }
        Ok(cursor)
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "e{}.d{}.f{}", self.event, self.decision, self.failure)
    }
}

/// One change, as the stream sends it (`event: <kind>`, `data: <json>`).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Change {
    Workload {
        workload_id: Uuid,
        tenant_id: Uuid,
        at: DateTime<Utc>,
        from_state: Option<WorkloadState>,
        to_state: WorkloadState,
        attempt: i32,
        detail: String,
    },
    Decision {
        workload_id: Uuid,
        tenant_id: Uuid,
        at: DateTime<Utc>,
        decision: String,
        reason: String,
        policy: String,
    },
    Node {
        node_id: Uuid,
        name: String,
        state: NodeState,
    },
    PolicyFailure {
        tenant_id: Option<Uuid>,
        at: DateTime<Utc>,
        failure: String,
        message: String,
    },
}

impl Change {
    pub fn kind(&self) -> &'static str {
        match self {
            Change::Workload { .. } => "workload",
            Change::Decision { .. } => "decision",
            Change::Node { .. } => "node",
            Change::PolicyFailure { .. } => "policy_failure",
        }
    }
}

/// Nodes' states as last sent, to send only changes.
pub type NodeStates = HashMap<Uuid, NodeState>;

/// The newest cursor: a feed that starts without one sends only what happens from now on.
pub async fn now(db: &PgPool) -> sqlx::Result<Cursor> {
    let (event, decision, failure): (i64, i64, i64) = sqlx::query_as(
        "SELECT COALESCE((SELECT max(id) FROM workload_events), 0), COALESCE((SELECT max(id) FROM decisions), 0), \
                COALESCE((SELECT max(id) FROM policy_failures), 0)",
    )
    .fetch_one(db)
    .await?;
    Ok(Cursor { event, decision, failure })
}

/// The most changes of each kind one read returns (the next read continues).
const BATCH: i64 = 500;

/// What changed after `cursor` for a caller scoped to `tenant` (`None`: every tenant), each change
/// with the cursor just after it (a client that resumes from it gets what came next, nothing
/// twice), and the cursor after all of them. Nodes are compared with `nodes` (updated).
pub async fn read(
    db: &PgPool,
    cursor: Cursor,
    tenant: Option<Uuid>,
    nodes: &mut NodeStates,
) -> sqlx::Result<(Vec<(Change, Cursor)>, Cursor)> {
    let mut changes = Vec::new();
    let mut next = cursor;
    #[allow(clippy::type_complexity)]
    let events: Vec<(i64, Uuid, Uuid, DateTime<Utc>, Option<WorkloadState>, WorkloadState, i32, String)> =
        sqlx::query_as(
            "SELECT id, workload_id, tenant_id, at, from_state, to_state, attempt, detail FROM workload_events \
             WHERE id > $1 AND ($2::uuid IS NULL OR tenant_id = $2) ORDER BY id LIMIT $3",
        )
        .bind(cursor.event)
        .bind(tenant)
        .bind(BATCH)
        .fetch_all(db)
        .await?;
    for (id, workload_id, tenant_id, at, from_state, to_state, attempt, detail) in events {
        next.event = id;
        changes.push((Change::Workload { workload_id, tenant_id, at, from_state, to_state, attempt, detail }, next));
    }
    #[allow(clippy::type_complexity)]
    let decisions: Vec<(i64, Uuid, Uuid, DateTime<Utc>, String, String, String)> = sqlx::query_as(
        "SELECT id, workload_id, tenant_id, decided_at, kind, reason, policy_name FROM decisions \
         WHERE id > $1 AND ($2::uuid IS NULL OR tenant_id = $2) ORDER BY id LIMIT $3",
    )
    .bind(cursor.decision)
    .bind(tenant)
    .bind(BATCH)
    .fetch_all(db)
    .await?;
    for (id, workload_id, tenant_id, at, decision, reason, policy) in decisions {
        next.decision = id;
        changes.push((Change::Decision { workload_id, tenant_id, at, decision, reason, policy }, next));
    }
    #[allow(clippy::type_complexity)]
    let failures: Vec<(i64, Option<Uuid>, DateTime<Utc>, String, String)> = sqlx::query_as(
        "SELECT id, tenant_id, at, kind, message FROM policy_failures \
         WHERE id > $1 AND ($2::uuid IS NULL OR tenant_id = $2) ORDER BY id LIMIT $3",
    )
    .bind(cursor.failure)
    .bind(tenant)
    .bind(BATCH)
    .fetch_all(db)
    .await?;
    for (id, tenant_id, at, failure, message) in failures {
        next.failure = id;
        changes.push((Change::PolicyFailure { tenant_id, at, failure, message }, next));
    }
    let states: Vec<(Uuid, String, NodeState)> =
        sqlx::query_as("SELECT id, name, node_shown_state(state, cordon) FROM nodes ORDER BY name")
            .fetch_all(db)
            .await?;
    for (node_id, name, state) in states {
        if nodes.insert(node_id, state) != Some(state) {
            changes.push((Change::Node { node_id, name, state }, next));
        }
    }
    Ok((changes, next))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_what_it_writes() {
        let cursor = Cursor { event: 12, decision: 0, failure: 7 };
        assert_eq!(cursor.to_string(), "e12.d0.f7");
        assert_eq!(Cursor::parse("e12.d0.f7"), Ok(cursor));
        for bad in ["", "e1.d2", "e1.d2.f-3", "x1.d2.f3", "e1.d2.f3.g4", "e.d.f"] {
            assert!(Cursor::parse(bad).is_err(), "{bad:?}");
        }
    }
}
