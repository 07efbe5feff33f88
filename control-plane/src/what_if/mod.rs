//! What-if in the product: a policy version replayed against the active one on the recorded
//! history of the last hours, through the simulator's engine — the scheduling core's second
//! adapter, so the replay decides as the control plane would — as a background run with progress
//! (`runner`), both score sets side by side.
//!
//! Who may ask: whoever may manage the policy (platform admins for platform policies, the tenant's
//! admins for a tenant's own). A platform policy replaces the platform level; a tenant's policy
//! replaces that tenant's level, under the active platform policy. The replay needs everyone's
//! work (that is what contends), so a tenant's caller gets the fleet's totals and its own
//! tenant's scores only; the inputs (every tenant's workloads) are for platform admins.

pub mod history;
pub mod runner;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use uuid::Uuid;

use crate::auth::audit::{self, Change};
use crate::domain;
use crate::domain::Scope;

/// Ask for a what-if replay.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WhatIfRequest {
    /// Hours of history to replay, 1 to 168 (a week).
    #[serde(default = "default_hours")]
    pub hours: u32,
    /// The version to replay; the newest when absent.
    #[serde(default)]
    pub version: Option<i32>,
    /// The policy's parameters for the replay (`{}` when absent).
    #[serde(default)]
    pub params: Option<serde_json::Value>,
}

fn default_hours() -> u32 {
    24
}

/// A what-if run: its state and progress, and when it succeeded both score sets.
#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct WhatIfView {
    pub id: Uuid,
    pub policy_id: Uuid,
    pub policy_version_id: Uuid,
    /// The tenant whose level the candidate replaces; none for a platform policy.
    pub scope_tenant_id: Option<Uuid>,
    pub hours: i32,
    /// `queued`, `running`, `succeeded` or `failed`.
    pub state: String,
    /// 0 to 1.
    pub progress: f64,
    pub error: Option<String>,
    /// `{candidate, active, workloads, window_s, from}`: the simulator's scores of each replay.
    #[schema(value_type = Option<Object>)]
    pub result: Option<serde_json::Value>,
    pub requested_by: String,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
}

const VIEW_COLUMNS: &str = "id, policy_id, policy_version_id, scope_tenant_id, hours, state, progress, error, result, \
     requested_by, created_at, started_at, finished_at";

/// Queues a replay of `policy` (owned by `owner`: `None` for a platform policy) for the caller,
/// audited. The caller has been authorised to manage the policy. A tenant may have at most
/// `per_tenant` runs queued or running.
pub async fn create(
    db: &PgPool,
    policy: Uuid,
    owner: Option<Uuid>,
    req: &WhatIfRequest,
    scope: &Scope,
    per_tenant: u32,
) -> domain::Result<WhatIfView> {
    if !(1..=168).contains(&req.hours) {
        return Err(domain::Error::invalid("invalid_what_if", "hours must be between 1 and 168"));
    }
    let params = req.params.clone().unwrap_or_else(|| serde_json::json!({}));
    if !params.is_object() {
        return Err(domain::Error::invalid("invalid_params", "params must be a JSON object"));
    }
    let mut tx = db.begin().await?;
    let version: Option<(Uuid,)> = sqlx::query_as(
        "SELECT v.id FROM policy_versions v JOIN policies p ON p.id = v.policy_id \
         WHERE v.policy_id = $1 AND p.deleted_at IS NULL AND v.deleted_at IS NULL \
         AND ($2::int IS NULL OR v.version = $2) ORDER BY v.version DESC LIMIT 1",
    )
    .bind(policy)
    .bind(req.version)
    .fetch_optional(&mut *tx)
    .await?;
    let (version,) = version.ok_or(domain::Error::NotFound("policy version"))?;
    let id = Uuid::now_v7();
    let viewer = if scope.is_platform_admin() { None } else { scope.tenant };
    if let Some(tenant) = viewer {
        // One tenant's runs are counted under a lock of its row, so concurrent requests queue.
        sqlx::query("SELECT 1 FROM tenants WHERE id = $1 FOR UPDATE").bind(tenant).execute(&mut *tx).await?;
        let (open,): (i64,) = sqlx::query_as(
            "SELECT count(*) FROM what_if_runs WHERE viewer_tenant_id = $1 AND state IN ('queued', 'running')",
        )
        .bind(tenant)
        .fetch_one(&mut *tx)
        .await?;
        if open >= i64::from(per_tenant) {
            return Err(domain::Error::conflict(
                "what_if_limit",
                format!(
                    "this tenant has {open} what-if runs queued or running, its most (--what-if-runs-per-tenant \
                     {per_tenant}); wait for one to finish"
                ),
            ));
        }
    }
    let view: WhatIfView = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "INSERT INTO what_if_runs (id, requested_by, viewer_tenant_id, policy_id, policy_version_id, scope_tenant_id, \
             params, hours) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING {VIEW_COLUMNS}"
    )))
    .bind(id)
    .bind(&scope.actor.name)
    .bind(viewer)
    .bind(policy)
    .bind(version)
    .bind(owner)
    .bind(&params)
    .bind(req.hours as i32)
    .fetch_one(&mut *tx)
    .await?;
    let change = Change::new("policy.what_if", "policy", policy)
        .tenant(owner)
        .detail(serde_json::json!({"what_if": id, "hours": req.hours, "version": version}));
    audit::record(&mut tx, &scope.actor, change).await?;
    tx.commit().await?;
    Ok(view)
}

/// A run, if the caller may see it: platform admins see every run, anyone else the runs asked for
/// in their own tenant's view.
pub async fn get(db: &PgPool, id: Uuid, scope: &Scope) -> domain::Result<WhatIfView> {
    let row: Option<(Option<Uuid>,)> =
        sqlx::query_as("SELECT viewer_tenant_id FROM what_if_runs WHERE id = $1").bind(id).fetch_optional(db).await?;
    let Some((viewer,)) = row else { return Err(domain::Error::NotFound("what-if run")) };
    match viewer {
        None => scope.require_platform_admin().map_err(|_| domain::Error::NotFound("what-if run"))?,
        Some(tenant) => scope.ensure_visible(tenant, "what-if run")?,
    }
    let view: WhatIfView =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT {VIEW_COLUMNS} FROM what_if_runs WHERE id = $1")))
            .bind(id)
            .fetch_one(db)
            .await?;
    Ok(view)
}

/// What a run replayed: the fleet file, the trace (JSON Lines) and the replay's settings, so
/// `airtime-sim run` reproduces it. Platform admins only (the trace holds every tenant's work).
pub async fn inputs(db: &PgPool, id: Uuid, scope: &Scope) -> domain::Result<serde_json::Value> {
    scope.require_platform_admin()?;
    let row: Option<(Option<serde_json::Value>,)> =
        sqlx::query_as("SELECT inputs FROM what_if_runs WHERE id = $1").bind(id).fetch_optional(db).await?;
    match row {
        None => Err(domain::Error::NotFound("what-if run")),
        Some((None,)) => Err(domain::Error::conflict("not_ready", "the run has not read its history yet")),
        Some((Some(inputs),)) => Ok(inputs),
    }
}
