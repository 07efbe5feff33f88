//! Users and their memberships in tenants: who may see which account, adding one, disabling or
//! promoting one, and roles in tenants. Every change is audited in its own transaction. The HTTP
//! handlers are `api/users.rs`; joining a tenant by invitation is `invitations.rs`.
//!
//! Who may do what: platform admins manage every user; a tenant admin sees and manages the
//! members of their tenant only (a user outside it is answered exactly like one that does not
//! exist), and adds people by invitation.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use uuid::Uuid;

use crate::auth::audit::{self, Change};
use crate::auth::bootstrap::valid_login_name;
use crate::auth::{Role, SecretString, password};
use crate::domain::{self, Scope};

#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct MembershipView {
    pub user_id: Uuid,
    pub email: String,
    pub tenant_id: Uuid,
    pub tenant: String,
    pub role: Role,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct UserView {
    pub id: Uuid,
    pub email: String,
    pub platform_admin: bool,
    pub disabled: bool,
    pub created_at: DateTime<Utc>,
    /// The user's roles in tenants (only the caller's tenant for a tenant admin).
    pub memberships: Vec<MembershipView>,
}

#[derive(sqlx::FromRow)]
struct UserRow {
    id: Uuid,
    email: String,
    platform_admin: bool,
    disabled: bool,
    created_at: DateTime<Utc>,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateUser {
    pub email: String,
    #[schema(value_type = String, format = Password)]
    pub password: SecretString,
    /// Platform admins only.
    #[serde(default)]
    pub platform_admin: bool,
    /// The tenant to give the user a role in, by name (a tenant admin's own tenant by default).
    #[serde(default)]
    pub tenant: Option<String>,
    /// The role in that tenant; `tenant_member` by default.
    #[serde(default)]
    pub role: Option<Role>,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateUser {
    #[serde(default)]
    pub disabled: Option<bool>,
    #[serde(default)]
    pub platform_admin: Option<bool>,
    /// A new password (a reset by a platform admin).
    #[serde(default)]
    #[schema(value_type = Option<String>, format = Password)]
    pub password: Option<SecretString>,
}

const MEMBERSHIP_SELECT: &str = "SELECT m.user_id, u.email, m.tenant_id, t.name AS tenant, m.role, m.created_at \
     FROM memberships m JOIN users u ON u.id = m.user_id JOIN tenants t ON t.id = m.tenant_id";

const TENANT_ROLE_ONLY: &str = "a tenant role is viewer, tenant_member or tenant_admin";

/// Users in `tenant`'s membership (every user for `None`), optionally only `only`, with their
/// memberships in that tenant (all of them for `None`).
async fn visible(db: &PgPool, tenant: Option<Uuid>, only: Option<Uuid>) -> domain::Result<Vec<UserView>> {
    let rows: Vec<UserRow> = sqlx::query_as(
        "SELECT u.id, u.email, u.platform_admin, u.disabled, u.created_at FROM users u \
         WHERE ($1::uuid IS NULL OR EXISTS (SELECT 1 FROM memberships m WHERE m.user_id = u.id AND m.tenant_id = $1)) \
           AND ($2::uuid IS NULL OR u.id = $2) ORDER BY lower(u.email)",
    )
    .bind(tenant)
    .bind(only)
    .fetch_all(db)
    .await?;
    let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
    let memberships: Vec<MembershipView> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "{MEMBERSHIP_SELECT} WHERE m.user_id = ANY($1) AND ($2::uuid IS NULL OR m.tenant_id = $2) ORDER BY t.name"
    )))
    .bind(&ids)
    .bind(tenant)
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| UserView {
            memberships: memberships.iter().filter(|m| m.user_id == r.id).cloned().collect(),
            id: r.id,
            email: r.email,
            platform_admin: r.platform_admin,
            disabled: r.disabled,
            created_at: r.created_at,
        })
        .collect())
}

/// Users the actor manages: every user for a platform admin; the members of their tenant for a
/// tenant admin (with only that tenant's membership shown).
pub async fn list(db: &PgPool, scope: &Scope) -> domain::Result<Vec<UserView>> {
    scope.require_role(Role::TenantAdmin)?;
    visible(db, scope.tenant_filter(), None).await
}

/// One user: anyone may read their own account (with all its memberships); admins the users they
/// manage. Anyone else's is not found.
pub async fn get(db: &PgPool, scope: &Scope, id: Uuid) -> domain::Result<UserView> {
    let tenant = if id == scope.user_id {
        None
    } else if scope.role >= Role::TenantAdmin {
        scope.tenant_filter()
    } else {
        return Err(domain::Error::NotFound("user"));
    };
    visible(db, tenant, Some(id)).await?.into_iter().next().ok_or(domain::Error::NotFound("user"))
}

/// What a request to add a user comes to, once checked against the actor's rights.
#[derive(Debug)]
pub struct Admission {
    /// Trimmed.
    pub email: String,
    pub tenant: Option<Uuid>,
    pub role: Role,
    pub platform_admin: bool,
    /// A tenant admin never creates an account directly: they invite the login name (the answer
    /// is the same whether it has an account elsewhere; see `invitations`).
    pub by_invitation: bool,
}

/// Checks a request to add a user: the actor's role, the login name, the password's strength, the
/// role, and the tenant (named, or the actor's own), which the actor must administer.
pub async fn admit(db: &PgPool, scope: &Scope, req: &CreateUser) -> domain::Result<Admission> {
    scope.require_role(Role::TenantAdmin)?;
    if req.platform_admin {
        scope.require_platform_admin()?;
    }
    let email = req.email.trim();
    if !valid_login_name(email) {
        return Err(domain::Error::invalid("invalid_user", "email must be 1 to 254 characters without spaces"));
    }
    password::check_strength(&req.password).map_err(|m| domain::Error::invalid("weak_password", m))?;
    let role = req.role.unwrap_or(Role::TenantMember);
    if role == Role::PlatformAdmin {
        return Err(domain::Error::invalid("invalid_role", TENANT_ROLE_ONLY));
    }
    let tenant = match (&req.tenant, scope.tenant) {
        (Some(name), _) => Some(visible_tenant_by_name(db, scope, name).await?),
        (None, Some(own)) => Some(own),
        (None, None) => None,
    };
    if let Some(t) = tenant {
        scope.ensure_can_admin(t, "tenant")?;
    }
    if tenant.is_none() && !req.platform_admin {
        return Err(domain::Error::invalid("no_tenant", "name the tenant the user belongs to (\"tenant\")"));
    }
    Ok(Admission {
        email: email.to_owned(),
        tenant,
        role,
        platform_admin: req.platform_admin,
        by_invitation: !scope.is_platform_admin() && tenant.is_some(),
    })
}

/// Creates an account directly (platform admins), with its membership, audited.
pub async fn create(db: &PgPool, scope: &Scope, new: &Admission, password: SecretString) -> domain::Result<UserView> {
    scope.require_platform_admin()?;
    let hash = password::hash_blocking(password).await?;
    let id = Uuid::now_v7();
    let mut tx = db.begin().await?;
    let inserted = sqlx::query(
        "INSERT INTO users (id, email, password_hash, platform_admin) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
    )
    .bind(id)
    .bind(&new.email)
    .bind(&hash)
    .bind(new.platform_admin)
    .execute(&mut *tx)
    .await?;
    if inserted.rows_affected() == 0 {
        return Err(domain::Error::conflict("user_exists", "a user with this login name exists"));
    }
    if let Some(t) = new.tenant {
        sqlx::query("INSERT INTO memberships (user_id, tenant_id, role) VALUES ($1, $2, $3)")
            .bind(id)
            .bind(t)
            .bind(new.role)
            .execute(&mut *tx)
            .await?;
    }
    audit::record(
        &mut tx,
        &scope.actor,
        Change::new("user.create", "user", id).tenant(new.tenant).detail(serde_json::json!({
            "email": new.email, "platform_admin": new.platform_admin, "role": new.tenant.map(|_| new.role),
        })),
    )
    .await?;
    tx.commit().await?;
    visible(db, scope.tenant_filter(), Some(id)).await?.into_iter().next().ok_or(domain::Error::NotFound("user"))
}

/// Platform admins: disable or enable a user, grant or withdraw platform admin, reset a password.
/// Any of these ends the user's sessions. The last active platform admin cannot be disabled or
/// demoted.
pub async fn update(db: &PgPool, scope: &Scope, id: Uuid, req: &UpdateUser) -> domain::Result<UserView> {
    scope.require_platform_admin()?;
    if let Some(p) = &req.password {
        password::check_strength(p).map_err(|m| domain::Error::invalid("weak_password", m))?;
    }
    let hash = match req.password.clone() {
        Some(p) => Some(password::hash_blocking(p).await?),
        None => None,
    };
    let mut tx = db.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('airtime.platform_admins'))").execute(&mut *tx).await?;
    let updated = sqlx::query(
        "UPDATE users SET disabled = COALESCE($2, disabled), platform_admin = COALESCE($3, platform_admin), \
             password_hash = COALESCE($4, password_hash), sessions_valid_after = now(), \
             session_generation = session_generation + 1 WHERE id = $1",
    )
    .bind(id)
    .bind(req.disabled)
    .bind(req.platform_admin)
    .bind(&hash)
    .execute(&mut *tx)
    .await?;
    if updated.rows_affected() == 0 {
        return Err(domain::Error::NotFound("user"));
    }
    let (admins,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM users WHERE platform_admin AND NOT disabled").fetch_one(&mut *tx).await?;
    if admins == 0 {
        return Err(domain::Error::conflict("last_platform_admin", "this would leave no active platform admin"));
    }
    audit::record(
        &mut tx,
        &scope.actor,
        Change::new("user.update", "user", id).detail(serde_json::json!({
            "disabled": req.disabled, "platform_admin": req.platform_admin, "password_reset": req.password.is_some(),
        })),
    )
    .await?;
    tx.commit().await?;
    visible(db, scope.tenant_filter(), Some(id)).await?.into_iter().next().ok_or(domain::Error::NotFound("user"))
}

/// A tenant's members, for its admins.
pub async fn members(db: &PgPool, scope: &Scope, tenant: Uuid) -> domain::Result<Vec<MembershipView>> {
    scope.ensure_can_admin(tenant, "tenant")?;
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "{MEMBERSHIP_SELECT} WHERE m.tenant_id = $1 ORDER BY lower(u.email)"
    )))
    .bind(tenant)
    .fetch_all(db)
    .await?)
}

/// Gives a user a role in a tenant (or changes it). Platform admins for any user; tenant admins
/// change the roles of their tenant's members only.
pub async fn set_member(
    db: &PgPool,
    scope: &Scope,
    tenant: Uuid,
    user: Uuid,
    role: Role,
) -> domain::Result<MembershipView> {
    scope.ensure_can_admin(tenant, "tenant")?;
    if role == Role::PlatformAdmin {
        return Err(domain::Error::invalid("invalid_role", TENANT_ROLE_ONLY));
    }
    ensure_tenant_exists(db, tenant).await?;
    let mut tx = db.begin().await?;
    // A platform admin may add any user; a tenant admin only changes the role of someone already
    // in the tenant. A user outside it is answered exactly like one that does not exist: a tenant
    // admin can neither pull another tenant's user (or a platform admin) in, nor learn who exists.
    let visible: Option<(Uuid,)> = sqlx::query_as(
        "SELECT u.id FROM users u WHERE u.id = $1 \
         AND ($2 OR EXISTS (SELECT 1 FROM memberships m WHERE m.user_id = u.id AND m.tenant_id = $3))",
    )
    .bind(user)
    .bind(scope.is_platform_admin())
    .bind(tenant)
    .fetch_optional(&mut *tx)
    .await?;
    if visible.is_none() {
        return Err(domain::Error::NotFound("user"));
    }
    sqlx::query(
        "INSERT INTO memberships (user_id, tenant_id, role) VALUES ($1, $2, $3) \
         ON CONFLICT (user_id, tenant_id) DO UPDATE SET role = EXCLUDED.role",
    )
    .bind(user)
    .bind(tenant)
    .bind(role)
    .execute(&mut *tx)
    .await?;
    audit::record(
        &mut tx,
        &scope.actor,
        Change::new("membership.set", "user", user).tenant(Some(tenant)).detail(serde_json::json!({"role": role})),
    )
    .await?;
    tx.commit().await?;
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!("{MEMBERSHIP_SELECT} WHERE m.tenant_id = $1 AND m.user_id = $2")))
        .bind(tenant)
        .bind(user)
        .fetch_one(db)
        .await?)
}

/// Ends a user's membership in a tenant (their sessions in it end with it).
pub async fn remove_member(db: &PgPool, scope: &Scope, tenant: Uuid, user: Uuid) -> domain::Result<()> {
    scope.ensure_can_admin(tenant, "tenant")?;
    let mut tx = db.begin().await?;
    let removed = sqlx::query("DELETE FROM memberships WHERE tenant_id = $1 AND user_id = $2")
        .bind(tenant)
        .bind(user)
        .execute(&mut *tx)
        .await?;
    if removed.rows_affected() == 0 {
        return Err(domain::Error::NotFound("membership"));
    }
    audit::record(&mut tx, &scope.actor, Change::new("membership.remove", "user", user).tenant(Some(tenant))).await?;
    tx.commit().await?;
    Ok(())
}

/// A tenant's name (`None` for no tenant, or one that no longer exists).
pub async fn tenant_name(db: &PgPool, tenant: Option<Uuid>) -> domain::Result<Option<String>> {
    let Some(id) = tenant else { return Ok(None) };
    let row: Option<(String,)> =
        sqlx::query_as("SELECT name FROM tenants WHERE id = $1").bind(id).fetch_optional(db).await?;
    Ok(row.map(|(n,)| n))
}

/// A tenant by name, as the actor may see it: another tenant is as unknown as a missing one.
pub async fn visible_tenant_by_name(db: &PgPool, scope: &Scope, name: &str) -> domain::Result<Uuid> {
    let row: Option<(Uuid,)> =
        sqlx::query_as("SELECT id FROM tenants WHERE name = $1").bind(name).fetch_optional(db).await?;
    match row {
        Some((id,)) if scope.can_read_tenant(id) => Ok(id),
        _ => Err(domain::Error::NotFound("tenant")),
    }
}

async fn ensure_tenant_exists(db: &PgPool, tenant: Uuid) -> domain::Result<()> {
    let row: Option<(Uuid,)> =
        sqlx::query_as("SELECT id FROM tenants WHERE id = $1").bind(tenant).fetch_optional(db).await?;
    row.map(|_| ()).ok_or(domain::Error::NotFound("tenant"))
}
/// What a login checks of an account, found by its login name (case-insensitive).
#[derive(sqlx::FromRow)]
pub struct LoginUser {
    pub id: Uuid,
    pub email: String,
    pub password_hash: String,
    pub platform_admin: bool,
    pub disabled: bool,
    pub session_generation: i64,
}

pub async fn login_user(db: &PgPool, login_name: &str) -> sqlx::Result<Option<LoginUser>> {
    sqlx::query_as(
        "SELECT id, email, password_hash, platform_admin, disabled, session_generation FROM users \
         WHERE lower(email) = lower($1)",
    )
    .bind(login_name)
    .fetch_optional(db)
    .await
}

/// A user's tenants (id, name) and role in each, by tenant name.
pub async fn login_memberships(db: &PgPool, user: Uuid) -> sqlx::Result<Vec<(Uuid, String, Role)>> {
    sqlx::query_as(
        "SELECT t.id, t.name, m.role FROM memberships m JOIN tenants t ON t.id = m.tenant_id \
         WHERE m.user_id = $1 ORDER BY t.name",
    )
    .bind(user)
    .fetch_all(db)
    .await
}

/// Changes the actor's own password, given the current one; every session of the user ends. Audited
/// in the same transaction.
pub async fn change_password(
    db: &PgPool,
    scope: &Scope,
    current: SecretString,
    new: SecretString,
) -> domain::Result<()> {
    password::check_strength(&new).map_err(|m| domain::Error::invalid("weak_password", m))?;
    let (phc,): (String,) =
        sqlx::query_as("SELECT password_hash FROM users WHERE id = $1").bind(scope.user_id).fetch_one(db).await?;
    if !password::verify_blocking(current, Some(phc)).await {
        return Err(domain::Error::invalid("wrong_password", "the current password is wrong"));
    }
    let hash = password::hash_blocking(new).await?;
    let mut tx = db.begin().await?;
    sqlx::query(
        "UPDATE users SET password_hash = $2, sessions_valid_after = now(), \
         session_generation = session_generation + 1 WHERE id = $1",
    )
    .bind(scope.user_id)
    .bind(&hash)
    .execute(&mut *tx)
    .await?;
    audit::record(&mut tx, &scope.actor, Change::new("user.password_change", "user", scope.user_id)).await?;
    tx.commit().await?;
    Ok(())
}
