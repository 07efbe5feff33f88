//! The decision log as it is read: every placement, preemption, wait and refusal a cycle recorded
//! (`scheduler::record` writes it, in the cycle's transaction), for `GET /decisions` and a
//! workload's own view. Apart from the scheduler so that readers of the log (workloads, the API)
//! do not depend on the scheduling loop.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use uuid::Uuid;

/// One recorded decision.
#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct DecisionView {
    pub id: i64,
    pub cycle_id: i64,
    pub tenant_id: Uuid,
    pub workload_id: Uuid,
    pub workload_name: String,
    /// place, preempt, keep_pending, or rejected (the control plane refused the policy's decision).
    pub kind: String,
    pub node_id: Option<Uuid>,
    pub node_name: Option<String>,
    pub gpu_ids: Vec<Uuid>,
    pub reason: String,
    pub policy_version_id: Option<Uuid>,
    pub policy_name: String,
    pub decided_at: DateTime<Utc>,
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DecisionFilter {
    pub workload_id: Option<Uuid>,
    pub tenant: Option<String>,
    pub kind: Option<String>,
    /// Only decisions with a smaller id (paging backwards).
    pub before: Option<i64>,
    /// Most recent first; at most 1000, 100 by default.
    pub limit: Option<u32>,
    /// The caller's tenant scope (set by the handler, never from the query): `None` for all.
    #[serde(skip)]
    pub tenant_id: Option<Uuid>,
}

pub async fn list_decisions(db: &PgPool, f: &DecisionFilter) -> sqlx::Result<Vec<DecisionView>> {
    sqlx::query_as(
        "SELECT d.id, d.cycle_id, d.tenant_id, d.workload_id, w.name AS workload_name, d.kind, d.node_id, \
                n.name AS node_name, d.gpu_ids, d.reason, d.policy_version_id, d.policy_name, d.decided_at \
         FROM decisions d JOIN workloads w ON w.id = d.workload_id LEFT JOIN nodes n ON n.id = d.node_id \
         JOIN tenants t ON t.id = d.tenant_id \
         WHERE ($1::uuid IS NULL OR d.workload_id = $1) AND ($2::text IS NULL OR t.name = $2) \
           AND ($3::text IS NULL OR d.kind = $3) AND ($4::bigint IS NULL OR d.id < $4) \
           AND ($6::uuid IS NULL OR d.tenant_id = $6) \
         ORDER BY d.id DESC LIMIT $5",
    )
    .bind(f.workload_id)
    .bind(&f.tenant)
    .bind(&f.kind)
    .bind(f.before)
    .bind(i64::from(f.limit.unwrap_or(100).clamp(1, 1000)))
    .bind(f.tenant_id)
    .fetch_all(db)
    .await
}
