//! A policy's lifecycle: activate (parameters checked by the policy), deactivate, roll back,
//! delete, shadow and limits, each audited in the transaction of its change.

use airtime_policy_host::{ParamsVerdict, PolicyLimits};
use sqlx::PgPool;
use uuid::Uuid;

use crate::auth::audit::{self, AuditActor, Change};
use crate::domain;
use crate::model::PLATFORM_SCOPE;

use super::catalog::PolicyCatalog;
use super::store::{PolicyView, get, scope_of, tenant_of_scope, version_id};

/// Largest magnitude of a number in policy parameters. PostgreSQL's JSONB keeps numbers as exact
/// decimals, and one near `f64::MAX` (1.8e308) comes back as a 309-digit integer that does not
/// parse as a double: refused here, where parameters enter, so what is stored can be read back.
const MAX_PARAM_NUMBER: f64 = 1e300;

fn check_params(params: &serde_json::Value) -> domain::Result<()> {
    if !params.is_object() {
        return Err(domain::Error::invalid("invalid_params", "params must be a JSON object"));
    }
    if params.to_string().len() > 64 * 1024 {
        return Err(domain::Error::invalid("invalid_params", "params must be at most 64 KiB of JSON"));
    }
    fn numbers_in_range(v: &serde_json::Value) -> bool {
        match v {
            serde_json::Value::Number(n) => n.as_f64().is_some_and(|x| x.abs() <= MAX_PARAM_NUMBER),
            serde_json::Value::Array(items) => items.iter().all(numbers_in_range),
            serde_json::Value::Object(map) => map.values().all(numbers_in_range),
            _ => true,
        }
    }
    if !numbers_in_range(params) {
        return Err(domain::Error::invalid(
            "invalid_params",
            format!("numbers in params must be at most {MAX_PARAM_NUMBER:e} in magnitude"),
        ));
    }
    Ok(())
}

/// Makes a version (the latest when none is named) the one that decides for its policy's scope,
/// with these parameters. Clears a suspension and the failure count.
pub async fn activate(
    db: &PgPool,
    catalog: &PolicyCatalog,
    policy_id: Uuid,
    version: Option<i32>,
    params: serde_json::Value,
    actor: &AuditActor,
) -> domain::Result<PolicyView> {
    check_params(&params)?;
    let mut tx = db.begin().await?;
    let scope = scope_of(&mut tx, policy_id).await?;
    let version_id = version_id(&mut tx, policy_id, version).await?;
    // The policy's own word on its parameters, before anything is written: a bad value is refused
    // now with the policy's message, not three failed cycles later with a suspension.
    match catalog.validate_params(db, version_id, &params).await? {
        Ok(ParamsVerdict::Accepted | ParamsVerdict::NotChecked) => {}
        Ok(ParamsVerdict::Refused(message)) => {
            return Err(domain::Error::invalid(
                "invalid_params",
                format!("the policy refused its parameters: {message}"),
            ));
        }
        Err(error) => {
            return Err(domain::Error::invalid(
                "invalid_params",
                format!("the policy failed checking its parameters ({}): {error}", error.kind()),
            ));
        }
    }
    // Concurrent activations of one scope queue here.
    sqlx::query("SELECT 1 FROM policy_activations WHERE scope = $1 FOR UPDATE").bind(&scope).execute(&mut *tx).await?;
    sqlx::query(
        "INSERT INTO policy_activations (scope, policy_version_id, params) VALUES ($1, $2, $3) \
         ON CONFLICT (scope) DO UPDATE SET policy_version_id = EXCLUDED.policy_version_id, \
             params = EXCLUDED.params, activated_at = now(), suspended_at = NULL, suspended_reason = NULL",
    )
    .bind(&scope)
    .bind(version_id)
    .bind(&params)
    .execute(&mut *tx)
    .await?;
    // A new version starts with a clean record; re-activating the version that was failing keeps
    // its history — whether it was suspended, replaced or deactivated meanwhile — so a policy that
    // is re-activated is suspended at its next failure rather than given another full run of failed
    // cycles. The version failing is the one of the policy's latest failure.
    sqlx::query(
        "UPDATE policies SET consecutive_failures = 0 WHERE id = $1 AND consecutive_failures <> 0 \
         AND (SELECT f.policy_version_id FROM policy_failures f JOIN policy_versions v ON v.id = f.policy_version_id \
              WHERE v.policy_id = $1 ORDER BY f.id DESC LIMIT 1) IS DISTINCT FROM $2",
    )
    .bind(policy_id)
    .bind(version_id)
    .execute(&mut *tx)
    .await?;
    audit::record(
        &mut tx,
        actor,
        Change::new("policy.activate", "policy", policy_id)
            .tenant(tenant_of_scope(&scope))
            .detail(serde_json::json!({"scope": scope, "version_id": version_id, "params": params})),
    )
    .await?;
    tx.commit().await?;
    get(db, policy_id).await?.ok_or(domain::Error::NotFound("policy"))
}

/// Ends a tenant policy's activation: its scope's work is placed by the platform policy again. The
/// platform scope always has a policy (activate another instead).
pub async fn deactivate(db: &PgPool, policy_id: Uuid, actor: &AuditActor) -> domain::Result<PolicyView> {
    let mut tx = db.begin().await?;
    let scope = scope_of(&mut tx, policy_id).await?;
    if scope == PLATFORM_SCOPE {
        return Err(domain::Error::conflict(
            "platform_scope",
            "the platform scope always has a policy; activate another one instead",
        ));
    }
    let removed = sqlx::query(
        "DELETE FROM policy_activations a USING policy_versions v \
         WHERE a.scope = $1 AND v.id = a.policy_version_id AND v.policy_id = $2",
    )
    .bind(&scope)
    .bind(policy_id)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if removed == 0 {
        return Err(domain::Error::conflict("not_active", "this policy is not active"));
    }
    audit::record(
        &mut tx,
        actor,
        Change::new("policy.deactivate", "policy", policy_id)
            .tenant(tenant_of_scope(&scope))
            .detail(serde_json::json!({"scope": scope})),
    )
    .await?;
    tx.commit().await?;
    get(db, policy_id).await?.ok_or(domain::Error::NotFound("policy"))
}

/// Activates the version before the active one of this policy (its parameters kept).
pub async fn rollback(
    db: &PgPool,
    catalog: &PolicyCatalog,
    policy_id: Uuid,
    actor: &AuditActor,
) -> domain::Result<PolicyView> {
    let mut conn = db.acquire().await?;
    let scope = scope_of(&mut conn, policy_id).await?;
    let current: Option<(i32, serde_json::Value)> = sqlx::query_as(
        "SELECT v.version, a.params FROM policy_activations a JOIN policy_versions v ON v.id = a.policy_version_id \
         WHERE a.scope = $1 AND v.policy_id = $2",
    )
    .bind(&scope)
    .bind(policy_id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some((current, params)) = current else {
        return Err(domain::Error::conflict("not_active", "this policy is not active; nothing to roll back"));
    };
    let previous: Option<(i32,)> = sqlx::query_as(
        "SELECT version FROM policy_versions WHERE policy_id = $1 AND version < $2 AND deleted_at IS NULL \
         ORDER BY version DESC LIMIT 1",
    )
    .bind(policy_id)
    .bind(current)
    .fetch_optional(&mut *conn)
    .await?;
    drop(conn);
    let Some((previous,)) = previous else {
        return Err(domain::Error::conflict("no_previous_version", format!("version {current} is the oldest version")));
    };
    activate(db, catalog, policy_id, Some(previous), params, actor).await
}

/// Deletes one version (or, with `version` None, the whole policy). An active or shadowed version
/// cannot be deleted; the bytes stay for the decisions that name them, hidden from listings.
pub async fn delete(db: &PgPool, policy_id: Uuid, version: Option<i32>, actor: &AuditActor) -> domain::Result<()> {
    let mut tx = db.begin().await?;
    let (builtin, tenant_id): (bool, Option<Uuid>) =
        sqlx::query_as("SELECT builtin, tenant_id FROM policies WHERE id = $1 AND deleted_at IS NULL")
            .bind(policy_id)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(domain::Error::NotFound("policy"))?;
    if builtin {
        return Err(domain::Error::conflict("builtin_policy", "built-in policies cannot be deleted"));
    }
    let in_use: Option<(i32,)> = sqlx::query_as(
        "SELECT v.version FROM policy_versions v WHERE v.policy_id = $1 AND ($2::int IS NULL OR v.version = $2) \
         AND (EXISTS (SELECT 1 FROM policy_activations a WHERE a.policy_version_id = v.id) \
              OR EXISTS (SELECT 1 FROM policy_shadows s WHERE s.policy_version_id = v.id)) LIMIT 1",
    )
    .bind(policy_id)
    .bind(version)
    .fetch_optional(&mut *tx)
    .await?;
    if let Some((v,)) = in_use {
        return Err(domain::Error::conflict(
            "version_in_use",
            format!("version {v} is active or in shadow; activate another or stop the shadow first"),
        ));
    }
    match version {
        Some(v) => {
            let n = sqlx::query(
                "UPDATE policy_versions SET deleted_at = now() WHERE policy_id = $1 AND version = $2 AND deleted_at IS NULL",
            )
            .bind(policy_id)
            .bind(v)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if n == 0 {
                return Err(domain::Error::NotFound("policy version"));
            }
        }
        None => {
            sqlx::query("UPDATE policy_versions SET deleted_at = now() WHERE policy_id = $1 AND deleted_at IS NULL")
                .bind(policy_id)
                .execute(&mut *tx)
                .await?;
            sqlx::query("UPDATE policies SET deleted_at = now() WHERE id = $1")
                .bind(policy_id)
                .execute(&mut *tx)
                .await?;
        }
    }
    audit::record(
        &mut tx,
        actor,
        Change::new(if version.is_some() { "policy.delete_version" } else { "policy.delete" }, "policy", policy_id)
            .tenant(tenant_id)
            .detail(serde_json::json!({"version": version})),
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Starts evaluating a version in shadow beside its scope's active policy.
pub async fn start_shadow(
    db: &PgPool,
    policy_id: Uuid,
    version: Option<i32>,
    params: serde_json::Value,
    actor: &AuditActor,
) -> domain::Result<PolicyView> {
    check_params(&params)?;
    let mut tx = db.begin().await?;
    let scope = scope_of(&mut tx, policy_id).await?;
    let version_id = version_id(&mut tx, policy_id, version).await?;
    sqlx::query(
        "INSERT INTO policy_shadows (scope, policy_version_id, params) VALUES ($1, $2, $3) \
         ON CONFLICT (scope) DO UPDATE SET policy_version_id = EXCLUDED.policy_version_id, params = EXCLUDED.params, \
             started_at = now()",
    )
    .bind(&scope)
    .bind(version_id)
    .bind(&params)
    .execute(&mut *tx)
    .await?;
    audit::record(
        &mut tx,
        actor,
        Change::new("policy.shadow_start", "policy", policy_id)
            .tenant(tenant_of_scope(&scope))
            .detail(serde_json::json!({"scope": scope, "version_id": version_id, "params": params})),
    )
    .await?;
    tx.commit().await?;
    get(db, policy_id).await?.ok_or(domain::Error::NotFound("policy"))
}

pub async fn stop_shadow(db: &PgPool, policy_id: Uuid, actor: &AuditActor) -> domain::Result<()> {
    let mut conn = db.begin().await?;
    let scope = scope_of(&mut conn, policy_id).await?;
    sqlx::query(
        "DELETE FROM policy_shadows s USING policy_versions v WHERE s.scope = $1 AND v.id = s.policy_version_id \
         AND v.policy_id = $2",
    )
    .bind(&scope)
    .bind(policy_id)
    .execute(&mut *conn)
    .await?;
    audit::record(
        &mut conn,
        actor,
        Change::new("policy.shadow_stop", "policy", policy_id).tenant(tenant_of_scope(&scope)),
    )
    .await?;
    conn.commit().await?;
    Ok(())
}

/// Sets the per-evaluation limits of a policy (every version), checked against the host's bounds.
pub async fn set_limits(
    db: &PgPool,
    policy_id: Uuid,
    limits: &PolicyLimits,
    actor: &AuditActor,
) -> domain::Result<PolicyView> {
    limits.validate().map_err(|e| domain::Error::invalid("invalid_limits", e.to_string()))?;
    let value = serde_json::to_value(limits).map_err(anyhow::Error::from)?;
    let mut tx = db.begin().await?;
    let updated: Option<(Option<Uuid>,)> =
        sqlx::query_as("UPDATE policies SET limits = $2 WHERE id = $1 AND deleted_at IS NULL RETURNING tenant_id")
            .bind(policy_id)
            .bind(&value)
            .fetch_optional(&mut *tx)
            .await?;
    let Some((tenant_id,)) = updated else {
        return Err(domain::Error::NotFound("policy"));
    };
    audit::record(
        &mut tx,
        actor,
        Change::new("policy.limits", "policy", policy_id)
            .tenant(tenant_id)
            .detail(serde_json::json!({"limits": value})),
    )
    .await?;
    tx.commit().await?;
    get(db, policy_id).await?.ok_or(domain::Error::NotFound("policy"))
}
