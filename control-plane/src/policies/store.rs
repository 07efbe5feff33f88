//! Policies and their versions in PostgreSQL, and the views the API reads.

use airtime_policy_host::PolicyLimits;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sha2::Digest as _;
use sqlx::PgPool;
use uuid::Uuid;

use crate::auth::audit::{self, AuditActor, Change};
use crate::domain;
use crate::model::PLATFORM_SCOPE;

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

pub(super) async fn ensure_policy(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    tenant_id: Option<Uuid>,
    name: &str,
    builtin: bool,
) -> sqlx::Result<Uuid> {
    let existing: Option<(Uuid,)> =
        sqlx::query_as("SELECT id FROM policies WHERE tenant_id IS NOT DISTINCT FROM $1 AND name = $2 FOR UPDATE")
            .bind(tenant_id)
            .bind(name)
            .fetch_optional(&mut **tx)
            .await?;
    if let Some((id,)) = existing {
        // Uploading under the name of a deleted policy brings it back, with its history.
        sqlx::query("UPDATE policies SET deleted_at = NULL WHERE id = $1 AND deleted_at IS NOT NULL")
            .bind(id)
            .execute(&mut **tx)
            .await?;
        return Ok(id);
    }
    let id = Uuid::now_v7();
    sqlx::query("INSERT INTO policies (id, tenant_id, name, builtin) VALUES ($1, $2, $3, $4)")
        .bind(id)
        .bind(tenant_id)
        .bind(name)
        .bind(builtin)
        .execute(&mut **tx)
        .await?;
    Ok(id)
}

pub(super) async fn insert_version(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    policy_id: Uuid,
    tenant_id: Option<Uuid>,
    wasm: &[u8],
) -> sqlx::Result<(Uuid, i32)> {
    let id = Uuid::now_v7();
    let (version,): (i32,) = sqlx::query_as(
        "INSERT INTO policy_versions (id, policy_id, tenant_id, version, sha256, wasm, size_bytes) \
         VALUES ($1, $2, $3, COALESCE((SELECT max(version) FROM policy_versions WHERE policy_id = $2), 0) + 1, \
                 $4, $5, $6) RETURNING version",
    )
    .bind(id)
    .bind(policy_id)
    .bind(tenant_id)
    .bind(sha256_hex(wasm))
    .bind(wasm)
    .bind(wasm.len() as i32)
    .fetch_one(&mut **tx)
    .await?;
    Ok((id, version))
}

#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct VersionView {
    pub id: Uuid,
    pub version: i32,
    pub sha256: String,
    pub size_bytes: i32,
    #[schema(value_type = Object)]
    pub params: serde_json::Value,
    pub uploaded_at: DateTime<Utc>,
    /// Decides for its scope now.
    pub active: bool,
    /// Evaluated beside the active version every cycle, never applied.
    pub shadow: bool,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PolicyView {
    pub id: Uuid,
    pub name: String,
    /// None for a platform policy.
    pub tenant: Option<String>,
    pub builtin: bool,
    pub created_at: DateTime<Utc>,
    pub active_version: Option<i32>,
    /// The parameters the active version runs with.
    #[schema(value_type = Option<Object>)]
    pub active_params: Option<serde_json::Value>,
    /// Set when the policy failed too many cycles in a row; its scope runs the built-in meanwhile.
    pub suspended_reason: Option<String>,
    pub shadow_version: Option<i32>,
    pub consecutive_failures: i32,
    /// Per-evaluation limits (defaults where absent).
    #[schema(value_type = Object)]
    pub limits: PolicyLimits,
    pub versions: Vec<VersionView>,
}

#[derive(sqlx::FromRow)]
struct PolicyRow {
    id: Uuid,
    name: String,
    tenant: Option<String>,
    builtin: bool,
    created_at: DateTime<Utc>,
    limits: serde_json::Value,
    consecutive_failures: i32,
}

/// Policies visible in `scope`: every one for `None` (platform admins); else the platform's and
/// that tenant's own.
pub async fn list(db: &PgPool, scope: Option<Uuid>) -> sqlx::Result<Vec<PolicyView>> {
    let rows: Vec<PolicyRow> = sqlx::query_as(
        "SELECT p.id, p.name, t.name AS tenant, p.builtin, p.created_at, p.limits, p.consecutive_failures \
         FROM policies p LEFT JOIN tenants t ON t.id = p.tenant_id WHERE p.deleted_at IS NULL \
         AND ($1::uuid IS NULL OR p.tenant_id IS NULL OR p.tenant_id = $1) \
         ORDER BY p.builtin DESC, p.name",
    )
    .bind(scope)
    .fetch_all(db)
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        out.push(view(db, row).await?);
    }
    Ok(out)
}

pub async fn get(db: &PgPool, id: Uuid) -> sqlx::Result<Option<PolicyView>> {
    let row: Option<PolicyRow> = sqlx::query_as(
        "SELECT p.id, p.name, t.name AS tenant, p.builtin, p.created_at, p.limits, p.consecutive_failures \
         FROM policies p LEFT JOIN tenants t ON t.id = p.tenant_id WHERE p.id = $1 AND p.deleted_at IS NULL",
    )
    .bind(id)
    .fetch_optional(db)
    .await?;
    match row {
        Some(row) => Ok(Some(view(db, row).await?)),
        None => Ok(None),
    }
}

async fn view(db: &PgPool, row: PolicyRow) -> sqlx::Result<PolicyView> {
    let versions: Vec<VersionView> = sqlx::query_as(
        "SELECT v.id, v.version, v.sha256, v.size_bytes, v.params, v.uploaded_at, \
                EXISTS (SELECT 1 FROM policy_activations a WHERE a.policy_version_id = v.id) AS active, \
                EXISTS (SELECT 1 FROM policy_shadows s WHERE s.policy_version_id = v.id) AS shadow \
         FROM policy_versions v WHERE v.policy_id = $1 AND v.deleted_at IS NULL ORDER BY v.version DESC",
    )
    .bind(row.id)
    .fetch_all(db)
    .await?;
    let activation: Option<(serde_json::Value, Option<String>)> = sqlx::query_as(
        "SELECT a.params, a.suspended_reason FROM policy_activations a \
         JOIN policy_versions v ON v.id = a.policy_version_id WHERE v.policy_id = $1",
    )
    .bind(row.id)
    .fetch_optional(db)
    .await?;
    let (active_params, suspended_reason) = match activation {
        Some((params, reason)) => (Some(params), reason),
        None => (None, None),
    };
    Ok(PolicyView {
        id: row.id,
        name: row.name,
        tenant: row.tenant,
        builtin: row.builtin,
        created_at: row.created_at,
        active_version: versions.iter().find(|v| v.active).map(|v| v.version),
        active_params,
        suspended_reason,
        shadow_version: versions.iter().find(|v| v.shadow).map(|v| v.version),
        consecutive_failures: row.consecutive_failures,
        limits: serde_json::from_value(row.limits).unwrap_or_default(),
        versions,
    })
}

/// Stores an uploaded module that passed `vet` as the next version of the named policy: a platform
/// policy (`tenant_id` None) or the tenant's own. Audited in the same transaction.
/// Why `name` cannot name a policy, if it cannot: checked before anything is compiled.
pub fn check_name(name: &str) -> domain::Result<()> {
    let valid_name = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-');
    if !valid_name {
        return Err(domain::Error::bad_query(
            "invalid_name",
            "policy name must be 1 to 63 lowercase letters, digits or '-', not starting with '-'",
        ));
    }
    Ok(())
}

/// The tenant's policy named `name` when one of its versions holds exactly these bytes (by
/// sha256): an upload of them again stores nothing.
pub async fn same_bytes(
    db: &PgPool,
    tenant_id: Option<Uuid>,
    name: &str,
    sha256: &str,
) -> domain::Result<Option<PolicyView>> {
    let found: Option<(Uuid,)> = sqlx::query_as(
        "SELECT p.id FROM policies p JOIN policy_versions v ON v.policy_id = p.id \
         WHERE p.tenant_id IS NOT DISTINCT FROM $1 AND p.name = $2 AND p.deleted_at IS NULL AND NOT p.builtin \
           AND v.sha256 = $3 LIMIT 1",
    )
    .bind(tenant_id)
    .bind(name)
    .bind(sha256)
    .fetch_optional(db)
    .await?;
    match found {
        Some((id,)) => Ok(get(db, id).await?),
        None => Ok(None),
    }
}

/// Refuses an upload of `size` more bytes that would take a tenant past its stored versions or
/// bytes (`--policy-versions-per-tenant`, `--policy-bytes-per-tenant`): checked before compiling.
pub async fn check_tenant_room(
    db: &PgPool,
    tenant_id: Uuid,
    size: usize,
    max_versions: u32,
    max_bytes: u64,
) -> domain::Result<()> {
    let (versions, bytes): (i64, i64) = sqlx::query_as(
        "SELECT count(*), COALESCE(sum(octet_length(v.wasm)), 0)::bigint FROM policy_versions v \
         JOIN policies p ON p.id = v.policy_id WHERE p.tenant_id = $1 AND p.deleted_at IS NULL",
    )
    .bind(tenant_id)
    .fetch_one(db)
    .await?;
    if versions >= i64::from(max_versions) {
        return Err(domain::Error::conflict(
            "policy_quota",
            format!(
                "this tenant keeps {versions} policy versions, its most (--policy-versions-per-tenant \
                 {max_versions}); delete a policy first"
            ),
        ));
    }
    if bytes.max(0) as u64 + size as u64 > max_bytes {
        return Err(domain::Error::conflict(
            "policy_quota",
            format!(
                "this tenant keeps {bytes} bytes of policy modules; {size} more would pass its most \
                 (--policy-bytes-per-tenant {max_bytes}); delete a policy first"
            ),
        ));
    }
    Ok(())
}

pub async fn store_upload(
    db: &PgPool,
    tenant_id: Option<Uuid>,
    name: &str,
    wasm: &[u8],
    actor: &AuditActor,
) -> domain::Result<PolicyView> {
    check_name(name)?;
    let mut tx = db.begin().await?;
    let existing: Option<(bool,)> =
        sqlx::query_as("SELECT builtin FROM policies WHERE tenant_id IS NOT DISTINCT FROM $2 AND name = $1")
            .bind(name)
            .bind(tenant_id)
            .fetch_optional(&mut *tx)
            .await?;
    if existing == Some((true,)) {
        return Err(domain::Error::conflict(
            "builtin_policy",
            format!("{name} is a built-in policy; upload under another name"),
        ));
    }
    let policy_id = ensure_policy(&mut tx, tenant_id, name, false).await?;
    let (version_id, version) = insert_version(&mut tx, policy_id, tenant_id, wasm).await?;
    audit::record(
        &mut tx,
        actor,
        Change::new("policy.upload", "policy", policy_id).tenant(tenant_id).detail(serde_json::json!({
            "name": name, "version": version, "version_id": version_id, "sha256": sha256_hex(wasm), "size_bytes": wasm.len(),
        })),
    )
    .await?;
    tx.commit().await?;
    get(db, policy_id).await?.ok_or(domain::Error::NotFound("policy"))
}

/// The tenant of a scope (`None` for the platform scope), for the audit log.
pub(super) fn tenant_of_scope(scope: &str) -> Option<Uuid> {
    Uuid::parse_str(scope).ok()
}

/// The tenant that owns a policy (`None` for a platform policy); not found when deleted or absent.
pub async fn owner(db: &PgPool, policy_id: Uuid) -> domain::Result<Option<Uuid>> {
    let row: Option<(Option<Uuid>,)> =
        sqlx::query_as("SELECT tenant_id FROM policies WHERE id = $1 AND deleted_at IS NULL")
            .bind(policy_id)
            .fetch_optional(db)
            .await?;
    row.map(|(t,)| t).ok_or(domain::Error::NotFound("policy"))
}

/// The scope a policy decides for: `platform`, or the tenant id of a tenant's own policy.
pub(super) async fn scope_of(conn: &mut sqlx::PgConnection, policy_id: Uuid) -> domain::Result<String> {
    let row: Option<(Option<Uuid>,)> =
        sqlx::query_as("SELECT tenant_id FROM policies WHERE id = $1 AND deleted_at IS NULL")
            .bind(policy_id)
            .fetch_optional(&mut *conn)
            .await?;
    let (tenant_id,) = row.ok_or(domain::Error::NotFound("policy"))?;
    Ok(tenant_id.map(|t| t.to_string()).unwrap_or_else(|| PLATFORM_SCOPE.to_owned()))
}

/// The id of a policy's version `version` (its newest when `None`), neither it nor its policy
/// deleted.
pub async fn version_id(conn: &mut sqlx::PgConnection, policy_id: Uuid, version: Option<i32>) -> domain::Result<Uuid> {
    let row: Option<(Uuid,)> = sqlx::query_as(
        "SELECT v.id FROM policy_versions v JOIN policies p ON p.id = v.policy_id \
         WHERE v.policy_id = $1 AND p.deleted_at IS NULL AND v.deleted_at IS NULL \
         AND ($2::int IS NULL OR v.version = $2) ORDER BY v.version DESC LIMIT 1",
    )
    .bind(policy_id)
    .bind(version)
    .fetch_optional(&mut *conn)
    .await?;
    row.map(|(id,)| id).ok_or(domain::Error::NotFound("policy version"))
}
