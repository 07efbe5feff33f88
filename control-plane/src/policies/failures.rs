//! Failure accounting: failed evaluations, suspension after a run of them, a good evaluation
//! ending the run, and what policies logged and decided in shadow.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use super::catalog::Selected;

/// Records a failed evaluation (the cycle went on with the fallback) and suspends the policy's
/// activation once it has failed `suspend_after` cycles in a row. Returns whether it was suspended.
pub async fn record_failure(
    db: &PgPool,
    selected: &Selected,
    cycle_id: Option<i64>,
    kind: &str,
    message: &str,
    suspend_after: u32,
) -> sqlx::Result<bool> {
    let mut tx = db.begin().await?;
    // Trap messages name the guest's functions (its name section): guest text, cleaned here too.
    let message = airtime_policy_sdk::text::clean(message, airtime_policy_sdk::text::MAX_FAILURE_CHARS);
    sqlx::query(
        "INSERT INTO policy_failures (cycle_id, policy_version_id, tenant_id, kind, message) \
         SELECT $1, v.id, v.tenant_id, $3, $4 FROM policy_versions v WHERE v.id = $2",
    )
    .bind(cycle_id)
    .bind(selected.policy.version_id)
    .bind(kind)
    .bind(message.as_ref())
    .execute(&mut *tx)
    .await?;
    let (failures,): (i32,) = sqlx::query_as(
        "UPDATE policies SET consecutive_failures = consecutive_failures + 1 WHERE id = $1 RETURNING consecutive_failures",
    )
    .bind(selected.policy.policy_id)
    .fetch_one(&mut *tx)
    .await?;
    let suspended = failures >= suspend_after as i32
        && sqlx::query(
            "UPDATE policy_activations SET suspended_at = now(), suspended_reason = $2 \
             WHERE policy_version_id = $1 AND suspended_at IS NULL",
        )
        .bind(selected.policy.version_id)
        .bind(format!("failed {failures} cycles in a row; last: {kind}: {message}"))
        .execute(&mut *tx)
        .await?
        .rows_affected()
            > 0;
    tx.commit().await?;
    Ok(suspended)
}

/// A good evaluation ends a run of failures: the cycle's successful policies, at once.
pub async fn record_successes(db: &PgPool, selected: &[Selected]) -> sqlx::Result<()> {
    if selected.is_empty() {
        return Ok(());
    }
    // One statement for the cycle's policies (21 at 20 tenants with their own), not one each.
    let ids: Vec<Uuid> = selected.iter().map(|s| s.policy.policy_id).collect();
    sqlx::query("UPDATE policies SET consecutive_failures = 0 WHERE id = ANY($1) AND consecutive_failures <> 0")
        .bind(&ids)
        .execute(db)
        .await?;
    Ok(())
}

/// Keeps what the policies logged in a cycle.
pub async fn record_logs(
    db: &PgPool,
    cycle_id: Option<i64>,
    logs: &[(&Selected, &[airtime_policy_host::PolicyLog])],
) -> sqlx::Result<()> {
    let (mut versions, mut levels, mut messages) = (Vec::new(), Vec::new(), Vec::new());
    for (selected, logs) in logs {
        for log in *logs {
            versions.push(selected.policy.version_id);
            levels.push(format!("{:?}", log.level).to_lowercase());
            // Cleaned and bounded already, where the host read them from the guest (`airtime.log`).
            messages.push(log.message.as_str());
        }
    }
    if versions.is_empty() {
        return Ok(());
    }
    // One statement for every policy's lines, in the order given.
    sqlx::query(
        "INSERT INTO policy_logs (policy_version_id, tenant_id, cycle_id, level, message) \
         SELECT v.id, v.tenant_id, $1, l.level, l.message \
         FROM UNNEST($2::uuid[], $3::text[], $4::text[]) WITH ORDINALITY AS l(version_id, level, message, n) \
         JOIN policy_versions v ON v.id = l.version_id ORDER BY l.n",
    )
    .bind(cycle_id)
    .bind(&versions)
    .bind(&levels)
    .bind(&messages)
    .execute(db)
    .await?;
    Ok(())
}

#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct FailureView {
    pub id: i64,
    pub cycle_id: Option<i64>,
    pub version: i32,
    pub kind: String,
    pub message: String,
    pub at: DateTime<Utc>,
}

pub async fn failures(db: &PgPool, policy_id: Uuid) -> sqlx::Result<Vec<FailureView>> {
    sqlx::query_as(
        "SELECT f.id, f.cycle_id, v.version, f.kind, f.message, f.at FROM policy_failures f \
         JOIN policy_versions v ON v.id = f.policy_version_id WHERE v.policy_id = $1 ORDER BY f.id DESC LIMIT 200",
    )
    .bind(policy_id)
    .fetch_all(db)
    .await
}

#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct LogView {
    pub id: i64,
    pub cycle_id: Option<i64>,
    pub version: i32,
    pub level: String,
    pub message: String,
    pub at: DateTime<Utc>,
}

pub async fn logs(db: &PgPool, policy_id: Uuid) -> sqlx::Result<Vec<LogView>> {
    sqlx::query_as(
        "SELECT l.id, l.cycle_id, v.version, l.level, l.message, l.at FROM policy_logs l \
         JOIN policy_versions v ON v.id = l.policy_version_id WHERE v.policy_id = $1 ORDER BY l.id DESC LIMIT 500",
    )
    .bind(policy_id)
    .fetch_all(db)
    .await
}

#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct ShadowResultView {
    pub id: i64,
    pub cycle_id: i64,
    pub version: i32,
    pub active_policy_name: String,
    pub agreed: i32,
    pub differed: i32,
    /// The decisions that differed, one object each.
    #[schema(value_type = Vec<Object>)]
    pub diff: serde_json::Value,
    pub error: Option<String>,
    pub at: DateTime<Utc>,
}

pub async fn shadow_results(db: &PgPool, policy_id: Uuid) -> sqlx::Result<Vec<ShadowResultView>> {
    sqlx::query_as(
        "SELECT r.id, r.cycle_id, v.version, r.active_policy_name, r.agreed, r.differed, r.diff, r.error, r.at \
         FROM shadow_results r JOIN policy_versions v ON v.id = r.shadow_version_id \
         WHERE v.policy_id = $1 ORDER BY r.id DESC LIMIT 200",
    )
    .bind(policy_id)
    .fetch_all(db)
    .await
}
