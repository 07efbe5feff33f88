//! The audit log: every change, who made it, when, from where, written in the same transaction as
//! the change (so a change without its audit row cannot commit, and a rolled-back change leaves no
//! row). `detail` is for the change's parameters: never put a secret in it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::auth::{Caller, NodeCaller};

pub use crate::domain::AuditActor;

impl From<&Caller> for AuditActor {
    fn from(c: &Caller) -> Self {
        Self { kind: c.actor_kind(), id: Some(c.actor_id()), name: c.actor_name(), source_ip: c.source_ip }
    }
}

impl From<&NodeCaller> for AuditActor {
    fn from(n: &NodeCaller) -> Self {
        Self { kind: "node", id: Some(n.credential_id), name: n.node_name.clone(), source_ip: n.source_ip }
    }
}

/// What changed.
#[derive(Debug, Clone)]
pub struct Change<'a> {
    /// Dotted verb: `token.create`, `workload.cancel`, `policy.activate`, …
    pub action: &'a str,
    /// The tenant whose data changed; `None` for platform-wide changes.
    pub tenant_id: Option<Uuid>,
    /// `workload`, `policy`, `api_token`, `user`, …
    pub target_kind: &'a str,
    pub target_id: Option<String>,
    pub detail: serde_json::Value,
}

impl<'a> Change<'a> {
    pub fn new(action: &'a str, target_kind: &'a str, target_id: impl ToString) -> Self {
        Self {
            action,
            tenant_id: None,
            target_kind,
            target_id: Some(target_id.to_string()),
            detail: serde_json::json!({}),
        }
    }
    pub fn tenant(mut self, tenant_id: Option<Uuid>) -> Self {
        self.tenant_id = tenant_id;
        self
    }
    pub fn detail(mut self, detail: serde_json::Value) -> Self {
        self.detail = detail;
        self
    }
}

/// Appends an audit row in the caller's transaction.
pub async fn record(conn: &mut PgConnection, actor: &AuditActor, change: Change<'_>) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO audit_log (actor_kind, actor_id, actor_name, tenant_id, action, target_kind, target_id, \
             detail, source_ip) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::inet)",
    )
    .bind(actor.kind)
    .bind(actor.id)
    .bind(&actor.name)
    .bind(change.tenant_id)
    .bind(change.action)
    .bind(change.target_kind)
    .bind(change.target_id)
    .bind(change.detail)
    .bind(actor.source_ip.map(|ip| ip.to_string()))
    .execute(conn)
    .await?;
    Ok(())
}

/// An audit row as the API shows it.
#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct AuditEntry {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub actor_kind: String,
    pub actor_id: Option<Uuid>,
    pub actor_name: String,
    pub tenant_id: Option<Uuid>,
    pub tenant: Option<String>,
    pub action: String,
    pub target_kind: String,
    pub target_id: Option<String>,
    #[schema(value_type = Object)]
    pub detail: serde_json::Value,
    pub source_ip: Option<String>,
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditFilter {
    /// Only this action (`token.create`, …).
    pub action: Option<String>,
    /// Only this tenant (platform admins; others always see only their own tenant).
    pub tenant: Option<String>,
    /// Only entries about this target id.
    pub target_id: Option<String>,
    /// Only entries with a smaller id (paging backwards).
    pub before: Option<i64>,
    /// Most recent first; at most 1000, 100 by default.
    pub limit: Option<u32>,
}

/// Audit entries, newest first. `scope` restricts them to one tenant (`None`: everything).
pub async fn list(db: &sqlx::PgPool, scope: Option<Uuid>, f: &AuditFilter) -> sqlx::Result<Vec<AuditEntry>> {
    sqlx::query_as(
        "SELECT a.id, a.at, a.actor_kind, a.actor_id, a.actor_name, a.tenant_id, t.name AS tenant, a.action, \
                a.target_kind, a.target_id, a.detail, host(a.source_ip) AS source_ip \
         FROM audit_log a LEFT JOIN tenants t ON t.id = a.tenant_id \
         WHERE ($1::uuid IS NULL OR a.tenant_id = $1) AND ($2::text IS NULL OR a.action = $2) \
           AND ($3::text IS NULL OR t.name = $3) AND ($4::text IS NULL OR a.target_id = $4) \
           AND ($5::bigint IS NULL OR a.id < $5) \
         ORDER BY a.id DESC LIMIT $6",
    )
    .bind(scope)
    .bind(&f.action)
    .bind(&f.tenant)
    .bind(&f.target_id)
    .bind(f.before)
    .bind(i64::from(f.limit.unwrap_or(100).clamp(1, 1000)))
    .fetch_all(db)
    .await
}
