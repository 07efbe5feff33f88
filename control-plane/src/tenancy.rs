//! Tenants: the teams that own workloads and policies — listing, creating them and changing their
//! quota; "who is over quota, borrowing, starved": the per-tenant summary of the scheduling model;
//! and which tenant a new resource goes into.
//!
//! A quota change is audited with what it was and what it became, and takes effect at the next
//! scheduling cycle (the scheduler reads the tenants every cycle). Lowering a guarantee below what
//! a tenant holds reclaims nothing by itself: the policy preempts under the platform's normal
//! preemption rules, as it would for any tenant over its guarantee. A limit (`gpu_limit`) caps
//! what a tenant may hold, borrowed or not; the checker refuses any placement past it, and work
//! it already holds past a lowered limit runs on (nothing new is placed until it is below).
//! An archived tenant (`archive`) admits nothing new: [`resolve_for_write`] refuses it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use uuid::Uuid;

use airtime_protocol::model::TenantName;

use crate::auth::audit::{self, Change};
use crate::domain;
use crate::domain::Scope;

#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct TenantView {
    pub id: Uuid,
    pub name: String,
    pub guaranteed_gpus: i32,
    pub weight: i32,
    pub tier: i32,
    pub may_borrow: bool,
    /// The most GPUs its work may hold at once, borrowed or not; none when absent.
    pub gpu_limit: Option<i32>,
    /// When it was archived; absent for a live tenant.
    pub archived_at: Option<DateTime<Utc>>,
    /// Its idle rule: work holding GPUs that all read idle this long (seconds) is warned, then
    /// stopped; none when absent.
    pub idle_reclaim_after_s: Option<i32>,
    pub created_at: DateTime<Utc>,
}

/// A tenant's columns as [`TenantView`] reads them.
macro_rules! tenant_columns {
    () => {
        "id, name, guaranteed_gpus, weight, tier, may_borrow, gpu_limit, archived_at, idle_reclaim_after_s, created_at"
    };
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTenant {
    pub name: String,
    #[serde(default)]
    pub guaranteed_gpus: u32,
    #[serde(default = "one")]
    pub weight: u32,
    #[serde(default)]
    pub tier: i32,
    #[serde(default = "yes")]
    pub may_borrow: bool,
    /// The most GPUs its work may hold at once (1 to 100000); no limit when absent.
    #[serde(default)]
    pub gpu_limit: Option<u32>,
    /// Its idle rule in seconds (1 to 604800); none when absent.
    #[serde(default)]
    pub idle_reclaim_after_s: Option<u32>,
}

fn one() -> u32 {
    1
}
fn yes() -> bool {
    true
}

/// Every tenant for platform admins; the actor's own tenant for everyone else.
pub async fn list(db: &PgPool, scope: &Scope) -> domain::Result<Vec<TenantView>> {
    Ok(sqlx::query_as(concat!(
        "SELECT ",
        tenant_columns!(),
        " FROM tenants WHERE ($1::uuid IS NULL OR id = $1) ORDER BY archived_at IS NOT NULL, name"
    ))
    .bind(scope.tenant_filter())
    .fetch_all(db)
    .await?)
}

/// A change to a tenant's quota: the fields given change, the others keep their values.
#[derive(Debug, Clone, Default, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantQuota {
    /// GPUs the tenant is guaranteed (0 to 100000).
    pub guaranteed_gpus: Option<u32>,
    /// Its share of what is left over, against the other tenants' weights (1 to 10000).
    pub weight: Option<u32>,
    /// Its rank when guarantees cannot all be met: a higher tier's guarantee is honoured first
    /// (-1000 to 1000).
    pub tier: Option<i32>,
    /// Whether it may run on GPUs beyond its guarantee while they are idle.
    pub may_borrow: Option<bool>,
    /// The most GPUs its work may hold at once, borrowed or not (1 to 100000); 0 removes the
    /// limit.
    pub gpu_limit: Option<u32>,
    /// Its idle rule (1 to 604800 seconds): work holding GPUs that all read below the idle
    /// threshold this long is warned, then stopped after the warning period; 0 removes the rule.
    pub idle_reclaim_after_s: Option<u32>,
}

impl TenantQuota {
    /// The quota's numbers within their ranges, and at least one of them given.
    pub fn check(&self) -> domain::Result<()> {
        if self.guaranteed_gpus.is_none()
            && self.weight.is_none()
            && self.tier.is_none()
            && self.may_borrow.is_none()
            && self.gpu_limit.is_none()
            && self.idle_reclaim_after_s.is_none()
        {
            return Err(domain::Error::invalid(
                "invalid_quota",
                "give at least one of guaranteed_gpus, weight, tier, may_borrow, gpu_limit and idle_reclaim_after_s",
            ));
        }
        check_quota(
            "invalid_quota",
            self.guaranteed_gpus.unwrap_or(0),
            self.weight.unwrap_or(1),
            self.tier.unwrap_or(0),
            self.gpu_limit.filter(|&l| l > 0),
            self.idle_reclaim_after_s.filter(|&s| s > 0),
        )
    }
}

/// A quota's numbers within their ranges; `code` is the error's (`invalid_tenant` for a new tenant,
/// `invalid_quota` for a change).
fn check_quota(
    code: &'static str,
    guaranteed_gpus: u32,
    weight: u32,
    tier: i32,
    gpu_limit: Option<u32>,
    idle_reclaim_after_s: Option<u32>,
) -> domain::Result<()> {
    if guaranteed_gpus > 100_000
        || weight == 0
        || weight > 10_000
        || !(-1000..=1000).contains(&tier)
        || gpu_limit.is_some_and(|l| l == 0 || l > 100_000)
        || idle_reclaim_after_s.is_some_and(|s| s == 0 || s > 604_800)
    {
        return Err(domain::Error::invalid(
            code,
            "guaranteed_gpus ≤ 100000, weight 1..=10000, tier -1000..=1000, gpu_limit 1..=100000, \
             idle_reclaim_after_s 1..=604800",
        ));
    }
    Ok(())
}

/// Changes tenant `id`'s quota (platform admins), audited with what it was and what it became, in
/// one transaction; the scheduler applies it at its next cycle. A change that changes nothing is
/// answered with the tenant as it is and not audited.
pub async fn update(db: &PgPool, scope: &Scope, id: Uuid, change: &TenantQuota) -> domain::Result<TenantView> {
    scope.require_platform_admin()?;
    change.check()?;
    let mut tx = db.begin().await?;
    let before = lock(&mut tx, id).await?;
    if before.archived_at.is_some() {
        return Err(domain::Error::conflict("tenant_archived", format!("tenant {} is archived", before.name)));
    }
    let after: TenantView = sqlx::query_as(concat!(
        "UPDATE tenants SET guaranteed_gpus = COALESCE($2, guaranteed_gpus), weight = COALESCE($3, weight), \
             tier = COALESCE($4, tier), may_borrow = COALESCE($5, may_borrow), \
             gpu_limit = CASE WHEN $6::int IS NULL THEN gpu_limit WHEN $6 = 0 THEN NULL ELSE $6 END, \
             idle_reclaim_after_s = CASE WHEN $7::int IS NULL THEN idle_reclaim_after_s WHEN $7 = 0 THEN NULL ELSE $7 END \
         WHERE id = $1 RETURNING ",
        tenant_columns!()
    ))
    .bind(id)
    .bind(change.guaranteed_gpus.map(|g| g as i32))
    .bind(change.weight.map(|w| w as i32))
    .bind(change.tier)
    .bind(change.may_borrow)
    .bind(change.gpu_limit.map(|l| l as i32))
    .bind(change.idle_reclaim_after_s.map(|s| s as i32))
    .fetch_one(&mut *tx)
    .await?;
    let quota = |t: &TenantView| {
        serde_json::json!({"guaranteed_gpus": t.guaranteed_gpus, "weight": t.weight, "tier": t.tier,
                           "may_borrow": t.may_borrow, "gpu_limit": t.gpu_limit,
                           "idle_reclaim_after_s": t.idle_reclaim_after_s})
    };
    if quota(&before) == quota(&after) {
        return Ok(after);
    }
    audit::record(
        &mut tx,
        &scope.actor,
        Change::new("tenant.quota", "tenant", id)
            .tenant(Some(id))
            .detail(serde_json::json!({"name": after.name, "before": quota(&before), "after": quota(&after)})),
    )
    .await?;
    tx.commit().await?;
    Ok(after)
}

/// Creates a tenant with its quota (platform admins), audited in the same transaction.
pub async fn create(db: &PgPool, scope: &Scope, req: &CreateTenant) -> domain::Result<TenantView> {
    scope.require_platform_admin()?;
    let name = TenantName::parse(&req.name).map_err(|m| domain::Error::invalid("invalid_tenant", m))?;
    let idle_rule = req.idle_reclaim_after_s.filter(|&s| s > 0);
    check_quota("invalid_tenant", req.guaranteed_gpus, req.weight, req.tier, req.gpu_limit, idle_rule)?;
    let mut tx = db.begin().await?;
    let created: Option<TenantView> = sqlx::query_as(concat!(
        "INSERT INTO tenants (id, name, guaranteed_gpus, weight, tier, may_borrow, gpu_limit, idle_reclaim_after_s) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (name) DO NOTHING RETURNING ",
        tenant_columns!()
    ))
    .bind(Uuid::now_v7())
    .bind(name.as_str())
    .bind(req.guaranteed_gpus as i32)
    .bind(req.weight as i32)
    .bind(req.tier)
    .bind(req.may_borrow)
    .bind(req.gpu_limit.map(|l| l as i32))
    .bind(idle_rule.map(|s| s as i32))
    .fetch_optional(&mut *tx)
    .await?;
    let Some(created) = created else {
        return Err(domain::Error::conflict("tenant_exists", format!("a tenant named {:?} exists", req.name)));
    };
    audit::record(
        &mut tx,
        &scope.actor,
        Change::new("tenant.create", "tenant", created.id).tenant(Some(created.id)).detail(serde_json::json!({
            "name": created.name, "guaranteed_gpus": created.guaranteed_gpus, "weight": created.weight,
            "tier": created.tier, "may_borrow": created.may_borrow, "gpu_limit": created.gpu_limit,
            "idle_reclaim_after_s": created.idle_reclaim_after_s,
        })),
    )
    .await?;
    tx.commit().await?;
    Ok(created)
}

/// Tenant `id`, locked for the rest of the transaction.
pub async fn lock(tx: &mut sqlx::PgConnection, id: Uuid) -> domain::Result<TenantView> {
    let row: Option<TenantView> =
        sqlx::query_as(concat!("SELECT ", tenant_columns!(), " FROM tenants WHERE id = $1 FOR UPDATE"))
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
    row.ok_or(domain::Error::NotFound("tenant"))
}

/// The tenant every install has (single-team installs and the demo submit into it).
pub const DEFAULT_TENANT: Uuid = Uuid::from_u128(1);

/// Marks tenant `id` archived (the caller holds its lock and has ended its work: `archive`).
pub async fn mark_archived(tx: &mut sqlx::PgConnection, id: Uuid) -> sqlx::Result<TenantView> {
    sqlx::query_as(concat!("UPDATE tenants SET archived_at = now() WHERE id = $1 RETURNING ", tenant_columns!()))
        .bind(id)
        .fetch_one(&mut *tx)
        .await
}

/// The tenant a caller's new workload or service goes into: the caller's own when none is named
/// (the `default` tenant for a platform admin), a named one only if the caller may see it —
/// another tenant's name is refused exactly like a name that does not exist.
pub async fn resolve_for_write(
    conn: &mut sqlx::PgConnection,
    scope: &Scope,
    name: Option<&str>,
) -> domain::Result<Uuid> {
    let tenant_name = name.unwrap_or("default");
    let tenant: Option<(Uuid, String, bool)> = match (name, scope.tenant_filter()) {
        (None, Some(own)) => {
            sqlx::query_as("SELECT id, name, archived_at IS NOT NULL FROM tenants WHERE id = $1")
                .bind(own)
                .fetch_optional(&mut *conn)
                .await?
        }
        (_, scope) => sqlx::query_as(
            "SELECT id, name, archived_at IS NOT NULL FROM tenants WHERE name = $1 AND ($2::uuid IS NULL OR id = $2)",
        )
        .bind(tenant_name)
        .bind(scope)
        .fetch_optional(&mut *conn)
        .await?,
    };
    let Some((tenant_id, name, archived)) = tenant else {
        return Err(domain::Error::invalid("unknown_tenant", format!("no tenant named {tenant_name:?}")));
    };
    if archived {
        return Err(domain::Error::conflict(
            "tenant_archived",
            format!("tenant {name} is archived: it admits no new work"),
        ));
    }
    Ok(tenant_id)
}

#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct TenantStanding {
    pub tenant_id: Uuid,
    pub tenant: String,
    pub guaranteed_gpus: i32,
    pub may_borrow: bool,
    /// GPUs its workloads hold now, in GPUs with fractions (a quarter-GPU share counts 0.25).
    pub running_gpus: f64,
    /// GPUs held beyond its guarantee (reclaimable when their owners need them).
    pub borrowing_gpus: f64,
    pub pending_workloads: i64,
    /// GPUs its pending workloads ask for, with fractions.
    pub pending_gpus: f64,
    /// Seconds the oldest pending workload has waited.
    pub oldest_pending_s: Option<f64>,
    /// GPU-hours used, decayed with a half-life (what fair-share policies weigh).
    pub decayed_gpu_hours: f64,
    /// within_quota, borrowing, starved (below its guarantee with work waiting over a minute) or idle.
    pub standing: String,
    /// The most common reason its pending work gives.
    pub top_pending_reason: Option<String>,
}

pub async fn standings(db: &PgPool, tenant: Option<Uuid>) -> sqlx::Result<Vec<TenantStanding>> {
    sqlx::query_as(
        "WITH running AS (SELECT tenant_id, sum(milli)::float8 / 1000 AS gpus FROM gpu_grants GROUP BY tenant_id), \
              pending AS (SELECT tenant_id, count(*) AS n, \
                                 sum(CASE WHEN gpu_milli < 1000 THEN gpu_milli \
                                          WHEN mig_profile IS NOT NULL \
                                              THEN greatest(least(split_part(mig_profile, 'g', 1)::int, 7) * 1000 / 7, 1) \
                                          ELSE gpu_count * 1000 END)::float8 / 1000 AS gpus, \
                                 extract(epoch FROM now() - min(submitted_at))::float8 AS oldest \
                          FROM workloads WHERE state = 'pending' GROUP BY tenant_id), \
              reasons AS (SELECT DISTINCT ON (tenant_id) tenant_id, pending_reason FROM workloads \
                          WHERE state = 'pending' AND pending_reason IS NOT NULL \
                          GROUP BY tenant_id, pending_reason ORDER BY tenant_id, count(*) DESC) \
         SELECT t.id AS tenant_id, t.name AS tenant, t.guaranteed_gpus, t.may_borrow, \
                COALESCE(r.gpus, 0)::float8 AS running_gpus, \
                GREATEST(COALESCE(r.gpus, 0) - t.guaranteed_gpus, 0)::float8 AS borrowing_gpus, \
                COALESCE(p.n, 0) AS pending_workloads, COALESCE(p.gpus, 0) AS pending_gpus, \
                p.oldest AS oldest_pending_s, COALESCE(u.decayed_gpu_hours, 0) AS decayed_gpu_hours, \
                CASE WHEN COALESCE(r.gpus, 0) > t.guaranteed_gpus THEN 'borrowing' \
                     WHEN COALESCE(p.n, 0) > 0 AND COALESCE(r.gpus, 0) < t.guaranteed_gpus AND p.oldest > 60 THEN 'starved' \
                     WHEN COALESCE(r.gpus, 0) = 0 AND COALESCE(p.n, 0) = 0 THEN 'idle' \
                     ELSE 'within_quota' END AS standing, \
                rs.pending_reason AS top_pending_reason \
         FROM tenants t LEFT JOIN running r ON r.tenant_id = t.id LEFT JOIN pending p ON p.tenant_id = t.id \
         LEFT JOIN tenant_usage u ON u.tenant_id = t.id LEFT JOIN reasons rs ON rs.tenant_id = t.id \
         WHERE ($1::uuid IS NULL OR t.id = $1) ORDER BY t.name",
    )
    .bind(tenant)
    .fetch_all(db)
    .await
}
