//! Access control over the API: logging in, the caller's own account, users and memberships, API
//! tokens, node enrolment (tokens, the agent's exchange, credentials) and the audit log.
//!
//! Who may do what:
//! - `POST /auth/login`, `POST /agent/enrol`: anyone (throttled per name/address and address).
//! - users: platform admins manage every user; a tenant admin creates users in their tenant and
//!   manages their tenant's memberships.
//! - API tokens: everyone creates tokens for themselves, with at most their own role; tenant admins
//!   see and revoke their tenant's tokens, platform admins every token.
//! - enrolment tokens and node credentials: platform admins.
//! - the audit log: platform admins (everything), tenant admins (their tenant's entries).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{FromRef, State};
use axum::http::StatusCode;
use axum::response::IntoResponse as _;
use chrono::{DateTime, Duration as ChronoDuration, Utc};
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::api::extract::{Json, Path, Query};
use crate::api::openapi::ErrorResponse;
use crate::auth::audit::{self, AuditActor, AuditEntry, AuditFilter, Change};
use crate::auth::bootstrap::valid_login_name;
use crate::auth::caller::ClientIp;
use crate::auth::tokens::{
    self, API_TOKEN_SELECT, ApiTokenView, ENROLMENT_SELECT, EnrolmentTokenView, NODE_CREDENTIAL_SELECT,
    NodeCredentialView,
};
use crate::auth::{AuthContext, Caller, Role, SecretString, password};
use crate::error::{ApiError, ApiResult};

/// Default lifetime of an API token, days.
pub const DEFAULT_TOKEN_DAYS: u32 = 90;
/// Longest lifetime of an API token, days.
pub const MAX_TOKEN_DAYS: u32 = 3650;
/// Default lifetime of an enrolment token, minutes.
pub const DEFAULT_ENROLMENT_MINUTES: u32 = 60;
/// Longest lifetime of an enrolment token: a week.
pub const MAX_ENROLMENT_MINUTES: u32 = 7 * 24 * 60;

const BAD_LOGIN: &str = "invalid login name or password";
const BAD_ENROLMENT: &str = "invalid, used or expired enrolment token";

pub fn routes<S>() -> OpenApiRouter<S>
where
    Arc<AuthContext>: FromRef<S>,
    S: Clone + Send + Sync + 'static,
{
    OpenApiRouter::new()
        .routes(routes!(login))
        .routes(routes!(me))
        .routes(routes!(change_password))
        .routes(routes!(list_users, create_user))
        .routes(routes!(get_user, update_user))
        .routes(routes!(list_members))
        .routes(routes!(set_member, remove_member))
        .routes(routes!(list_tokens, create_token))
        .routes(routes!(revoke_token))
        .routes(routes!(list_enrolment_tokens, create_enrolment_token))
        .routes(routes!(revoke_enrolment_token))
        .routes(routes!(list_node_credentials))
        .routes(routes!(revoke_node_credential))
        .routes(routes!(enrol))
        .routes(routes!(list_audit))
}

// ---------------------------------------------------------------------------------------------
// Login and the caller's own account

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    /// The login name (an email address or a user name).
    pub email: String,
    #[schema(value_type = String, format = Password)]
    pub password: SecretString,
    /// The tenant to act in, by name; needed only when the user belongs to several.
    #[serde(default)]
    pub tenant: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Session {
    /// The session token: send it as `Authorization: Bearer <token>`.
    pub token: String,
    pub token_type: &'static str,
    pub expires_at: DateTime<Utc>,
    pub expires_in: u64,
    pub user_id: Uuid,
    pub email: String,
    pub role: Role,
    pub tenant_id: Option<Uuid>,
    pub tenant: Option<String>,
}

#[derive(sqlx::FromRow)]
struct LoginUser {
    id: Uuid,
    email: String,
    password_hash: String,
    platform_admin: bool,
    disabled: bool,
    session_generation: i64,
}

#[utoipa::path(
    post,
    path = "/auth/login",
    tag = "auth",
    request_body(content = LoginRequest, example = json!({"email": "ada@example.com", "password": "correct horse battery staple"})),
    security(()),
    extensions(("x-airtime-access" = json!("public"))),
    responses((status = 200, description = "A session token", body = Session), (status = 401, description = "Wrong login name or password", body = ErrorResponse), (status = 429, description = "Too many failed logins from this address for this name", body = ErrorResponse))
)]
async fn login(
    State(auth): State<Arc<AuthContext>>,
    ClientIp(ip): ClientIp,
    Json(req): Json<LoginRequest>,
) -> ApiResult<axum::Json<Session>> {
    let name = req.email.trim();
    if name.is_empty() || name.len() > 254 {
        return Err(ApiError::Unauthorized(BAD_LOGIN));
    }
    auth.logins.check(name, ip, Instant::now()).map_err(ApiError::too_many_requests)?;
    let user: Option<LoginUser> = sqlx::query_as(
        "SELECT id, email, password_hash, platform_admin, disabled, session_generation FROM users \
         WHERE lower(email) = lower($1)",
    )
    .bind(name)
    .fetch_optional(&auth.db)
    .await?;
    let phc = user.as_ref().map(|u| u.password_hash.clone());
    let verified = password::verify_blocking(req.password, phc).await;
    let Some(user) = user.filter(|u| verified && !u.disabled) else {
        auth.logins.record_failure(name, ip, Instant::now());
        tracing::info!(user = %name, ip = ?ip, "login refused");
        return Err(ApiError::Unauthorized(BAD_LOGIN));
    };
    auth.logins.record_success(name, ip);
    crate::api::invitations::accept_on_first_login(&auth.db, user.id, &user.email).await?;

    let (role, tenant_id, tenant) = if user.platform_admin && req.tenant.is_none() {
        (Role::PlatformAdmin, None, None)
    } else {
        let memberships: Vec<(Uuid, String, Role)> = sqlx::query_as(
            "SELECT t.id, t.name, m.role FROM memberships m JOIN tenants t ON t.id = m.tenant_id \
             WHERE m.user_id = $1 ORDER BY t.name",
        )
        .bind(user.id)
        .fetch_all(&auth.db)
        .await?;
        let chosen = match &req.tenant {
            Some(wanted) => memberships.iter().find(|(_, name, _)| name == wanted),
            None if memberships.len() == 1 => memberships.first(),
            None if memberships.is_empty() => {
                return Err(ApiError::forbidden("this account has no role in any tenant; ask a tenant admin"));
            }
            None => {
                let names: Vec<&str> = memberships.iter().map(|(_, n, _)| n.as_str()).collect();
                return Err(ApiError::unprocessable(
                    "choose_tenant",
                    format!("this account belongs to several tenants; name one in \"tenant\": {}", names.join(", ")),
                ));
            }
        };
        let (id, name, role) = chosen.ok_or_else(|| ApiError::forbidden("this account has no role in that tenant"))?;
        (*role, Some(*id), Some(name.clone()))
    };
    let (token, claims) = auth.keys.issue(user.id, &user.email, role, tenant_id, user.session_generation)?;
    tracing::info!(user = %user.email, %role, "login");
    Ok(axum::Json(Session {
        token,
        token_type: "Bearer",
        expires_at: DateTime::from_timestamp(claims.exp as i64, 0).unwrap_or_else(Utc::now),
        expires_in: auth.keys.ttl().as_secs(),
        user_id: user.id,
        email: user.email,
        role,
        tenant_id,
        tenant,
    }))
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Me {
    pub user_id: Uuid,
    pub email: String,
    pub role: Role,
    pub tenant_id: Option<Uuid>,
    pub tenant: Option<String>,
    /// `session` or `api_token`.
    pub credential: &'static str,
    pub api_token_id: Option<Uuid>,
}

#[utoipa::path(
    get,
    path = "/auth/me",
    tag = "auth",
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 200, description = "Who the caller is", body = Me))
)]
async fn me(State(auth): State<Arc<AuthContext>>, caller: Caller) -> ApiResult<axum::Json<Me>> {
    let tenant = tenant_name(&auth, caller.tenant).await?;
    Ok(axum::Json(Me {
        user_id: caller.user_id,
        email: caller.user_name.clone(),
        role: caller.role,
        tenant_id: caller.tenant,
        tenant,
        credential: if caller.is_session() { "session" } else { "api_token" },
        api_token_id: (!caller.is_session()).then(|| caller.actor_id()),
    }))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangePassword {
    #[schema(value_type = String, format = Password)]
    pub current_password: SecretString,
    #[schema(value_type = String, format = Password)]
    pub new_password: SecretString,
}

/// Changes the caller's own password; every session of the user (this one included) ends.
#[utoipa::path(
    post,
    path = "/auth/password",
    tag = "auth",
    request_body(content = ChangePassword, example = json!({"current_password": "correct horse battery staple", "new_password": "a brand new long passphrase"})),
    security(("session" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 204, description = "Changed; every session of the user ended"), (status = 422, description = "Weak new password or wrong current one", body = ErrorResponse))
)]
async fn change_password(
    State(auth): State<Arc<AuthContext>>,
    caller: Caller,
    Json(req): Json<ChangePassword>,
) -> ApiResult<StatusCode> {
    if !caller.is_session() {
        return Err(ApiError::forbidden("change a password with a session, not an API token"));
    }
    password::check_strength(&req.new_password).map_err(|m| ApiError::unprocessable("weak_password", m))?;
    let (phc,): (String,) = sqlx::query_as("SELECT password_hash FROM users WHERE id = $1")
        .bind(caller.user_id)
        .fetch_one(&auth.db)
        .await?;
    if !password::verify_blocking(req.current_password, Some(phc)).await {
        return Err(ApiError::unprocessable("wrong_password", "the current password is wrong"));
    }
    let hash = password::hash_blocking(req.new_password).await?;
    let mut tx = auth.db.begin().await?;
    sqlx::query(
        "UPDATE users SET password_hash = $2, sessions_valid_after = now(), \
         session_generation = session_generation + 1 WHERE id = $1",
    )
    .bind(caller.user_id)
    .bind(hash)
    .execute(&mut *tx)
    .await?;
    audit::record(&mut tx, &AuditActor::from(&caller), Change::new("user.password_change", "user", caller.user_id))
        .await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---------------------------------------------------------------------------------------------
// Users and memberships

#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
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

const MEMBERSHIP_SELECT: &str = "SELECT m.user_id, u.email, m.tenant_id, t.name AS tenant, m.role, m.created_at \
     FROM memberships m JOIN users u ON u.id = m.user_id JOIN tenants t ON t.id = m.tenant_id";

/// Users the caller may see: every user for a platform admin; the members of their tenant for a
/// tenant admin (with only that tenant's membership shown).
async fn users_visible(auth: &AuthContext, scope: Option<Uuid>, only: Option<Uuid>) -> ApiResult<Vec<UserView>> {
    let rows: Vec<UserRow> = sqlx::query_as(
        "SELECT u.id, u.email, u.platform_admin, u.disabled, u.created_at FROM users u \
         WHERE ($1::uuid IS NULL OR EXISTS (SELECT 1 FROM memberships m WHERE m.user_id = u.id AND m.tenant_id = $1)) \
           AND ($2::uuid IS NULL OR u.id = $2) ORDER BY lower(u.email)",
    )
    .bind(scope)
    .bind(only)
    .fetch_all(&auth.db)
    .await?;
    let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
    let memberships: Vec<MembershipView> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "{MEMBERSHIP_SELECT} WHERE m.user_id = ANY($1) AND ($2::uuid IS NULL OR m.tenant_id = $2) ORDER BY t.name"
    )))
    .bind(&ids)
    .bind(scope)
    .fetch_all(&auth.db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| UserView {
            memberships: memberships.iter().filter(|m| m.user_id == r.id).map(clone_membership).collect(),
            id: r.id,
            email: r.email,
            platform_admin: r.platform_admin,
            disabled: r.disabled,
            created_at: r.created_at,
        })
        .collect())
}

fn clone_membership(m: &MembershipView) -> MembershipView {
    MembershipView {
        user_id: m.user_id,
        email: m.email.clone(),
        tenant_id: m.tenant_id,
        tenant: m.tenant.clone(),
        role: m.role,
        created_at: m.created_at,
    }
}

#[utoipa::path(
    get,
    path = "/users",
    tag = "auth",
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_admin"))),
    responses((status = 200, description = "Users the caller manages", body = [UserView]))
)]
async fn list_users(State(auth): State<Arc<AuthContext>>, caller: Caller) -> ApiResult<axum::Json<Vec<UserView>>> {
    caller.require_role(Role::TenantAdmin)?;
    Ok(axum::Json(users_visible(&auth, caller.tenant_filter(), None).await?))
}

#[utoipa::path(
    get,
    path = "/users/{id}",
    tag = "auth",
    params(("id" = Uuid, Path, description = "User id; anyone may read their own")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_admin"))),
    responses((status = 200, description = "The user", body = UserView), (status = 404, description = "No such user the caller manages", body = ErrorResponse))
)]
async fn get_user(
    State(auth): State<Arc<AuthContext>>,
    caller: Caller,
    Path(id): Path<Uuid>,
) -> ApiResult<axum::Json<UserView>> {
    // Everyone may read their own account (with all its memberships); admins the users they manage.
    let scope = if id == caller.user_id {
        None
    } else if caller.role >= Role::TenantAdmin {
        caller.tenant_filter()
    } else {
        return Err(ApiError::NotFound("user"));
    };
    let users = users_visible(&auth, scope, Some(id)).await?;
    users.into_iter().next().map(axum::Json).ok_or(ApiError::NotFound("user"))
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

#[utoipa::path(
    post,
    path = "/users",
    tag = "auth",
    request_body(content = CreateUser, example = json!({"email": "new-user@example.com", "password": "a long new passphrase", "role": "viewer"})),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_admin"))),
    responses(
        (status = 201, description = "Created (platform admins)", body = UserView),
        (status = 202, description = "Invited (tenant admins): the same answer whether or not the login name has an account", body = crate::api::invitations::Invited),
        (status = 409, description = "The login name is taken (platform admins)", body = ErrorResponse),
        (status = 422, description = "Invalid", body = ErrorResponse)
    )
)]
async fn create_user(
    State(auth): State<Arc<AuthContext>>,
    caller: Caller,
    Json(req): Json<CreateUser>,
) -> ApiResult<axum::response::Response> {
    caller.require_role(Role::TenantAdmin)?;
    if req.platform_admin {
        caller.require_platform_admin()?;
    }
    let email = req.email.trim();
    if !valid_login_name(email) {
        return Err(ApiError::unprocessable("invalid_user", "email must be 1 to 254 characters without spaces"));
    }
    password::check_strength(&req.password).map_err(|m| ApiError::unprocessable("weak_password", m))?;
    let role = req.role.unwrap_or(Role::TenantMember);
    if role == Role::PlatformAdmin {
        return Err(ApiError::unprocessable("invalid_role", "a tenant role is viewer, tenant_member or tenant_admin"));
    }
    // The tenant of the membership: named, or the caller's own.
    let tenant = match (&req.tenant, caller.tenant) {
        (Some(name), _) => Some(visible_tenant_by_name(&auth, &caller, name).await?),
        (None, Some(own)) => Some(own),
        (None, None) => None,
    };
    if let Some(t) = tenant {
        caller.ensure_can_admin(t, "tenant")?;
    }
    if tenant.is_none() && !req.platform_admin {
        return Err(ApiError::unprocessable("no_tenant", "name the tenant the user belongs to (\"tenant\")"));
    }
    // A tenant admin never learns whether a login name has an account elsewhere: they invite it,
    // and the answer is the same either way (see api::invitations).
    if let (false, Some(t)) = (caller.is_platform_admin(), tenant) {
        let invited = crate::api::invitations::invite(&auth, &caller, t, email, req.password, role).await?;
        return Ok((StatusCode::ACCEPTED, axum::Json(invited)).into_response());
    }
    let hash = password::hash_blocking(req.password).await?;
    let id = Uuid::now_v7();
    let mut tx = auth.db.begin().await?;
    let inserted = sqlx::query(
        "INSERT INTO users (id, email, password_hash, platform_admin) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
    )
    .bind(id)
    .bind(email)
    .bind(&hash)
    .bind(req.platform_admin)
    .execute(&mut *tx)
    .await?;
    if inserted.rows_affected() == 0 {
        return Err(ApiError::conflict("user_exists", "a user with this login name exists"));
    }
    if let Some(t) = tenant {
        sqlx::query("INSERT INTO memberships (user_id, tenant_id, role) VALUES ($1, $2, $3)")
            .bind(id)
            .bind(t)
            .bind(role)
            .execute(&mut *tx)
            .await?;
    }
    audit::record(
        &mut tx,
        &AuditActor::from(&caller),
        Change::new("user.create", "user", id).tenant(tenant).detail(serde_json::json!({
            "email": email, "platform_admin": req.platform_admin, "role": tenant.map(|_| role),
        })),
    )
    .await?;
    tx.commit().await?;
    let user = users_visible(&auth, caller.tenant_filter(), Some(id))
        .await?
        .into_iter()
        .next()
        .ok_or(ApiError::NotFound("user"))?;
    Ok((StatusCode::CREATED, axum::Json(user)).into_response())
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

/// Platform admins: disable or enable a user, grant or withdraw platform admin, reset a password.
/// Any of these ends the user's sessions. The last active platform admin cannot be disabled or
/// demoted.
#[utoipa::path(
    patch,
    path = "/users/{id}",
    tag = "auth",
    params(("id" = Uuid, Path, description = "User id")),
    request_body(content = UpdateUser, example = json!({"disabled": false})),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses((status = 200, description = "Updated; the user's sessions ended", body = UserView), (status = 404, body = ErrorResponse), (status = 409, description = "It would leave no active platform admin", body = ErrorResponse))
)]
async fn update_user(
    State(auth): State<Arc<AuthContext>>,
    caller: Caller,
    Path(id): Path<Uuid>,
    Json(req): Json<UpdateUser>,
) -> ApiResult<axum::Json<UserView>> {
    caller.require_platform_admin()?;
    if let Some(p) = &req.password {
        password::check_strength(p).map_err(|m| ApiError::unprocessable("weak_password", m))?;
    }
    let hash = match req.password.clone() {
        Some(p) => Some(password::hash_blocking(p).await?),
        None => None,
    };
    let mut tx = auth.db.begin().await?;
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
        return Err(ApiError::NotFound("user"));
    }
    let (admins,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM users WHERE platform_admin AND NOT disabled").fetch_one(&mut *tx).await?;
    if admins == 0 {
        return Err(ApiError::conflict("last_platform_admin", "this would leave no active platform admin"));
    }
    audit::record(
        &mut tx,
        &AuditActor::from(&caller),
        Change::new("user.update", "user", id).detail(serde_json::json!({
            "disabled": req.disabled, "platform_admin": req.platform_admin, "password_reset": req.password.is_some(),
        })),
    )
    .await?;
    tx.commit().await?;
    let user = users_visible(&auth, caller.tenant_filter(), Some(id))
        .await?
        .into_iter()
        .next()
        .ok_or(ApiError::NotFound("user"))?;
    Ok(axum::Json(user))
}

#[utoipa::path(
    get,
    path = "/tenants/{tenant_id}/members",
    tag = "auth",
    params(("tenant_id" = Uuid, Path, description = "Tenant id")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_admin"))),
    responses((status = 200, description = "The tenant's members", body = [MembershipView]), (status = 404, body = ErrorResponse))
)]
async fn list_members(
    State(auth): State<Arc<AuthContext>>,
    caller: Caller,
    Path(tenant_id): Path<Uuid>,
) -> ApiResult<axum::Json<Vec<MembershipView>>> {
    caller.ensure_can_admin(tenant_id, "tenant")?;
    let members = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "{MEMBERSHIP_SELECT} WHERE m.tenant_id = $1 ORDER BY lower(u.email)"
    )))
    .bind(tenant_id)
    .fetch_all(&auth.db)
    .await?;
    Ok(axum::Json(members))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetMember {
    pub role: Role,
}

/// Gives a user a role in a tenant (or changes it). Platform admins for any user; tenant admins
/// change the roles of their tenant's members (a user outside the tenant is not found).
#[utoipa::path(
    put,
    path = "/tenants/{tenant_id}/members/{user_id}",
    tag = "auth",
    params(("tenant_id" = Uuid, Path, description = "Tenant id"), ("user_id" = Uuid, Path, description = "User id")),
    request_body(content = SetMember, example = json!({"role": "viewer"})),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_admin"))),
    responses((status = 200, description = "The membership", body = MembershipView), (status = 404, body = ErrorResponse))
)]
async fn set_member(
    State(auth): State<Arc<AuthContext>>,
    caller: Caller,
    Path((tenant_id, user_id)): Path<(Uuid, Uuid)>,
    Json(req): Json<SetMember>,
) -> ApiResult<axum::Json<MembershipView>> {
    caller.ensure_can_admin(tenant_id, "tenant")?;
    if req.role == Role::PlatformAdmin {
        return Err(ApiError::unprocessable("invalid_role", "a tenant role is viewer, tenant_member or tenant_admin"));
    }
    ensure_tenant_exists(&auth, tenant_id).await?;
    let mut tx = auth.db.begin().await?;
    // A platform admin may add any user; a tenant admin only changes the role of someone already
    // in the tenant. A user outside it is answered exactly like one that does not exist: a tenant
    // admin can neither pull another tenant's user (or a platform admin) in, nor learn who exists.
    let visible: Option<(Uuid,)> = sqlx::query_as(
        "SELECT u.id FROM users u WHERE u.id = $1 \
         AND ($2 OR EXISTS (SELECT 1 FROM memberships m WHERE m.user_id = u.id AND m.tenant_id = $3))",
    )
    .bind(user_id)
    .bind(caller.is_platform_admin())
    .bind(tenant_id)
    .fetch_optional(&mut *tx)
    .await?;
    if visible.is_none() {
        return Err(ApiError::NotFound("user"));
    }
    sqlx::query(
        "INSERT INTO memberships (user_id, tenant_id, role) VALUES ($1, $2, $3) \
         ON CONFLICT (user_id, tenant_id) DO UPDATE SET role = EXCLUDED.role",
    )
    .bind(user_id)
    .bind(tenant_id)
    .bind(req.role)
    .execute(&mut *tx)
    .await?;
    audit::record(
        &mut tx,
        &AuditActor::from(&caller),
        Change::new("membership.set", "user", user_id)
            .tenant(Some(tenant_id))
            .detail(serde_json::json!({"role": req.role})),
    )
    .await?;
    tx.commit().await?;
    let member =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("{MEMBERSHIP_SELECT} WHERE m.tenant_id = $1 AND m.user_id = $2")))
            .bind(tenant_id)
            .bind(user_id)
            .fetch_one(&auth.db)
            .await?;
    Ok(axum::Json(member))
}

#[utoipa::path(
    delete,
    path = "/tenants/{tenant_id}/members/{user_id}",
    tag = "auth",
    params(("tenant_id" = Uuid, Path, description = "Tenant id"), ("user_id" = Uuid, Path, description = "User id")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_admin"))),
    responses((status = 204, description = "Removed; the user's sessions in this tenant ended"), (status = 404, body = ErrorResponse))
)]
async fn remove_member(
    State(auth): State<Arc<AuthContext>>,
    caller: Caller,
    Path((tenant_id, user_id)): Path<(Uuid, Uuid)>,
) -> ApiResult<StatusCode> {
    caller.ensure_can_admin(tenant_id, "tenant")?;
    let mut tx = auth.db.begin().await?;
    let removed = sqlx::query("DELETE FROM memberships WHERE tenant_id = $1 AND user_id = $2")
        .bind(tenant_id)
        .bind(user_id)
        .execute(&mut *tx)
        .await?;
    if removed.rows_affected() == 0 {
        return Err(ApiError::NotFound("membership"));
    }
    audit::record(
        &mut tx,
        &AuditActor::from(&caller),
        Change::new("membership.remove", "user", user_id).tenant(Some(tenant_id)),
    )
    .await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---------------------------------------------------------------------------------------------
// API tokens

#[derive(Debug, Deserialize, Default, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TokenFilter {
    /// Platform admins: only this tenant's tokens.
    pub tenant: Option<String>,
    /// Include revoked and expired tokens (false by default).
    #[serde(default)]
    pub include_revoked: bool,
}

#[utoipa::path(
    get,
    path = "/tokens",
    tag = "auth",
    params(TokenFilter),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 200, description = "Your tokens; your tenant's for a tenant admin; all for a platform admin. Never the secrets.", body = [ApiTokenView]))
)]
async fn list_tokens(
    State(auth): State<Arc<AuthContext>>,
    caller: Caller,
    Query(filter): Query<TokenFilter>,
) -> ApiResult<axum::Json<Vec<ApiTokenView>>> {
    // Tenant admins see their tenant's tokens, platform admins every token, others their own.
    let owner = if caller.role >= Role::TenantAdmin { None } else { Some(caller.user_id) };
    let tokens = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "{API_TOKEN_SELECT} WHERE ($1::uuid IS NULL OR k.tenant_id = $1) AND ($2::uuid IS NULL OR k.owner_id = $2) \
           AND ($3::text IS NULL OR t.name = $3) \
           AND ($4 OR (k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now()))) \
         ORDER BY k.created_at DESC"
    )))
    .bind(caller.tenant_filter())
    .bind(owner)
    .bind(&filter.tenant)
    .bind(filter.include_revoked)
    .fetch_all(&auth.db)
    .await?;
    Ok(axum::Json(tokens))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    pub name: String,
    /// At most the caller's own role; the caller's role by default.
    #[serde(default)]
    pub role: Option<Role>,
    /// Platform admins: a token acting in this tenant (by name) instead of a platform token.
    #[serde(default)]
    pub tenant: Option<String>,
    /// Days until it expires: 90 by default, at most 3650.
    #[serde(default)]
    pub expires_in_days: Option<u32>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CreatedToken {
    /// The token: shown this once, never again. Send it as `Authorization: Bearer <token>`.
    pub token: String,
    #[serde(flatten)]
    pub view: ApiTokenView,
}

#[utoipa::path(
    post,
    path = "/tokens",
    tag = "auth",
    request_body(content = CreateToken, example = json!({"name": "ci-deploy", "expires_in_days": 30})),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 201, description = "The token, shown this once", body = CreatedToken), (status = 422, body = ErrorResponse))
)]
async fn create_token(
    State(auth): State<Arc<AuthContext>>,
    caller: Caller,
    Json(req): Json<CreateToken>,
) -> ApiResult<(StatusCode, axum::Json<CreatedToken>)> {
    let name = req.name.trim();
    if name.is_empty() || name.len() > 100 || name.chars().any(char::is_control) {
        return Err(ApiError::unprocessable("invalid_token", "name must be 1 to 100 printable characters"));
    }
    let days = req.expires_in_days.unwrap_or(DEFAULT_TOKEN_DAYS);
    if days == 0 || days > MAX_TOKEN_DAYS {
        return Err(ApiError::unprocessable("invalid_token", format!("expires_in_days must be 1 to {MAX_TOKEN_DAYS}")));
    }
    let tenant = match &req.tenant {
        Some(t) => {
            caller.require_platform_admin()?;
            Some(visible_tenant_by_name(&auth, &caller, t).await?)
        }
        None => caller.tenant,
    };
    let ceiling = if tenant.is_some() { caller.role.min(Role::TenantAdmin) } else { caller.role };
    let role = req.role.unwrap_or(ceiling);
    if role > ceiling {
        return Err(ApiError::forbidden(format!("a token may have at most your role ({ceiling})")));
    }
    if (role == Role::PlatformAdmin) != tenant.is_none() {
        return Err(ApiError::unprocessable("invalid_role", "a tenant token has a tenant role"));
    }
    let expires_at = Utc::now() + ChronoDuration::days(i64::from(days));
    let mut tx = auth.db.begin().await?;
    let (view, secret) =
        tokens::create_api_token(&mut tx, caller.user_id, tenant, name, role, Some(expires_at)).await?;
    audit::record(
        &mut tx,
        &AuditActor::from(&caller),
        Change::new("token.create", "api_token", view.id)
            .tenant(tenant)
            .detail(serde_json::json!({"name": name, "role": role, "prefix": view.prefix, "expires_at": expires_at})),
    )
    .await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, axum::Json(CreatedToken { token: secret.expose().to_owned(), view })))
}

#[utoipa::path(
    delete,
    path = "/tokens/{id}",
    tag = "auth",
    params(("id" = Uuid, Path, description = "Token id; its owner may revoke it too")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_admin"))),
    responses((status = 200, description = "Revoked", body = ApiTokenView), (status = 404, body = ErrorResponse))
)]
async fn revoke_token(
    State(auth): State<Arc<AuthContext>>,
    caller: Caller,
    Path(id): Path<Uuid>,
) -> ApiResult<axum::Json<ApiTokenView>> {
    let mut tx = auth.db.begin().await?;
    let row: Option<(Option<Uuid>, Uuid)> =
        sqlx::query_as("SELECT tenant_id, owner_id FROM api_tokens WHERE id = $1 FOR UPDATE")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
    let Some((tenant, owner)) = row else {
        return Err(ApiError::NotFound("token"));
    };
    // Visible: a platform admin; the owner; a tenant admin of the token's tenant.
    let allowed = caller.is_platform_admin()
        || (owner == caller.user_id && tenant == caller.tenant)
        || tenant.is_some_and(|t| caller.can_admin_tenant(t));
    if !allowed {
        return Err(ApiError::NotFound("token"));
    }
    sqlx::query("UPDATE api_tokens SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    audit::record(&mut tx, &AuditActor::from(&caller), Change::new("token.revoke", "api_token", id).tenant(tenant))
        .await?;
    tx.commit().await?;
    let view = sqlx::query_as(sqlx::AssertSqlSafe(format!("{API_TOKEN_SELECT} WHERE k.id = $1")))
        .bind(id)
        .fetch_one(&auth.db)
        .await?;
    Ok(axum::Json(view))
}

// ---------------------------------------------------------------------------------------------
// Node enrolment

#[derive(Debug, Deserialize, Default, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateEnrolmentToken {
    /// Only a node of this name may enrol with it; it then replaces that node's credential.
    #[serde(default)]
    pub node_name: Option<String>,
    /// Minutes until it expires: 60 by default, at most a week.
    #[serde(default)]
    pub expires_in_minutes: Option<u32>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CreatedEnrolmentToken {
    /// The one-time token: shown this once. Give it to the agent (`--enrolment-token`).
    pub token: String,
    #[serde(flatten)]
    pub view: EnrolmentTokenView,
}

#[utoipa::path(
    post,
    path = "/enrolment-tokens",
    tag = "auth",
    request_body(content = CreateEnrolmentToken, example = json!({"expires_in_minutes": 60})),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses((status = 201, description = "The one-time token, shown this once", body = CreatedEnrolmentToken), (status = 422, body = ErrorResponse))
)]
async fn create_enrolment_token(
    State(auth): State<Arc<AuthContext>>,
    caller: Caller,
    Json(req): Json<CreateEnrolmentToken>,
) -> ApiResult<(StatusCode, axum::Json<CreatedEnrolmentToken>)> {
    caller.require_platform_admin()?;
    if let Some(name) = &req.node_name
        && !valid_node_name(name)
    {
        return Err(ApiError::unprocessable("invalid_node_name", "node_name must be 1 to 253 printable characters"));
    }
    let minutes = req.expires_in_minutes.unwrap_or(DEFAULT_ENROLMENT_MINUTES);
    if minutes == 0 || minutes > MAX_ENROLMENT_MINUTES {
        return Err(ApiError::unprocessable(
            "invalid_enrolment_token",
            format!("expires_in_minutes must be 1 to {MAX_ENROLMENT_MINUTES}"),
        ));
    }
    let expires_at = Utc::now() + ChronoDuration::minutes(i64::from(minutes));
    let mut tx = auth.db.begin().await?;
    let (view, secret) =
        tokens::create_enrolment_token(&mut tx, caller.user_id, req.node_name.as_deref(), expires_at).await?;
    audit::record(
        &mut tx,
        &AuditActor::from(&caller),
        Change::new("enrolment_token.create", "enrolment_token", view.id)
            .detail(serde_json::json!({"node_name": view.node_name, "prefix": view.prefix, "expires_at": expires_at})),
    )
    .await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, axum::Json(CreatedEnrolmentToken { token: secret.expose().to_owned(), view })))
}

#[utoipa::path(
    get,
    path = "/enrolment-tokens",
    tag = "auth",
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses((status = 200, description = "Enrolment tokens, never the secrets", body = [EnrolmentTokenView]))
)]
async fn list_enrolment_tokens(
    State(auth): State<Arc<AuthContext>>,
    caller: Caller,
) -> ApiResult<axum::Json<Vec<EnrolmentTokenView>>> {
    caller.require_platform_admin()?;
    let rows = sqlx::query_as(sqlx::AssertSqlSafe(format!("{ENROLMENT_SELECT} ORDER BY created_at DESC LIMIT 1000")))
        .fetch_all(&auth.db)
        .await?;
    Ok(axum::Json(rows))
}

#[utoipa::path(
    delete,
    path = "/enrolment-tokens/{id}",
    tag = "auth",
    params(("id" = Uuid, Path, description = "Enrolment token id")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses((status = 200, description = "Revoked", body = EnrolmentTokenView), (status = 404, body = ErrorResponse))
)]
async fn revoke_enrolment_token(
    State(auth): State<Arc<AuthContext>>,
    caller: Caller,
    Path(id): Path<Uuid>,
) -> ApiResult<axum::Json<EnrolmentTokenView>> {
    caller.require_platform_admin()?;
    let mut tx = auth.db.begin().await?;
    let view: Option<EnrolmentTokenView> = sqlx::query_as(
        "UPDATE enrolment_tokens SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1 \
         RETURNING id, prefix, node_name, created_by, created_at, expires_at, used_at, revoked_at",
    )
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?;
    let view = view.ok_or(ApiError::NotFound("enrolment token"))?;
    audit::record(&mut tx, &AuditActor::from(&caller), Change::new("enrolment_token.revoke", "enrolment_token", id))
        .await?;
    tx.commit().await?;
    Ok(axum::Json(view))
}

#[utoipa::path(
    get,
    path = "/node-credentials",
    tag = "auth",
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses((status = 200, description = "Node credentials, never the secrets", body = [NodeCredentialView]))
)]
async fn list_node_credentials(
    State(auth): State<Arc<AuthContext>>,
    caller: Caller,
) -> ApiResult<axum::Json<Vec<NodeCredentialView>>> {
    caller.require_platform_admin()?;
    let rows =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("{NODE_CREDENTIAL_SELECT} ORDER BY node_name, created_at DESC")))
            .fetch_all(&auth.db)
            .await?;
    Ok(axum::Json(rows))
}

/// Revokes a node's credential: its agent is refused from now on (a compromised or retired host).
#[utoipa::path(
    delete,
    path = "/node-credentials/{id}",
    tag = "auth",
    params(("id" = Uuid, Path, description = "Node credential id")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses((status = 200, description = "Revoked: the node's agent is refused from now on", body = NodeCredentialView), (status = 404, body = ErrorResponse))
)]
async fn revoke_node_credential(
    State(auth): State<Arc<AuthContext>>,
    caller: Caller,
    Path(id): Path<Uuid>,
) -> ApiResult<axum::Json<NodeCredentialView>> {
    caller.require_platform_admin()?;
    let mut tx = auth.db.begin().await?;
    let view: Option<NodeCredentialView> = sqlx::query_as(
        "UPDATE node_credentials SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1 \
         RETURNING id, node_name, node_id, prefix, created_at, last_used_at, revoked_at",
    )
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?;
    let view = view.ok_or(ApiError::NotFound("node credential"))?;
    audit::record(
        &mut tx,
        &AuditActor::from(&caller),
        Change::new("node_credential.revoke", "node_credential", id)
            .detail(serde_json::json!({"node_name": view.node_name})),
    )
    .await?;
    tx.commit().await?;
    Ok(axum::Json(view))
}

pub use airtime_protocol::agent::{EnrolRequest, Enrolled};

/// The agent's exchange: a one-time enrolment token for the node's own credential. Every refusal is
/// the same 401 (the reason is logged); failures are throttled per address.
#[utoipa::path(
    post,
    path = "/agent/enrol",
    tag = "agent",
    request_body(content = EnrolRequest, example = json!({"enrolment_token": "et_0000000000000000000000000000000000000000000000000000000000000000", "name": "gpu-node-7"})),
    security(()),
    extensions(("x-airtime-access" = json!("public"))),
    responses((status = 201, description = "The node credential, shown this once", body = Enrolled), (status = 401, description = "Invalid, used, revoked or expired enrolment token", body = ErrorResponse), (status = 429, body = ErrorResponse))
)]
async fn enrol(
    State(auth): State<Arc<AuthContext>>,
    ClientIp(ip): ClientIp,
    Json(req): Json<EnrolRequest>,
) -> ApiResult<(StatusCode, axum::Json<Enrolled>)> {
    if !valid_node_name(&req.name) {
        return Err(ApiError::unprocessable("invalid_node_name", "name must be 1 to 253 printable characters"));
    }
    // Keyed on the address alone: a guesser cycling node names is throttled all the same.
    auth.logins.check(ENROL_THROTTLE_KEY, ip, Instant::now()).map_err(ApiError::too_many_requests)?;
    let mut tx = auth.db.begin().await?;
    let enrolment_token = SecretString::new(req.enrolment_token.clone());
    let (view, credential, token_id) = match tokens::enrol(&mut tx, &enrolment_token, &req.name).await? {
        Ok(done) => done,
        Err(refusal) => {
            drop(tx);
            auth.logins.record_failure(ENROL_THROTTLE_KEY, ip, Instant::now());
            tracing::warn!(node = %req.name, ip = ?ip, reason = %refusal, "enrolment refused");
            return Err(ApiError::Unauthorized(BAD_ENROLMENT));
        }
    };
    audit::record(
        &mut tx,
        &AuditActor::anonymous("node", &req.name, ip),
        Change::new("node.enrol", "node_credential", view.id)
            .detail(serde_json::json!({"node_name": req.name, "prefix": view.prefix, "enrolment_token_id": token_id})),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(node = %req.name, credential = %view.prefix, "node enrolled");
    Ok((
        StatusCode::CREATED,
        axum::Json(Enrolled {
            credential: credential.expose().to_owned(),
            credential_id: view.id,
            node_name: view.node_name,
        }),
    ))
}

const ENROL_THROTTLE_KEY: &str = "\u{0}enrolment";

fn valid_node_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 253 && !name.chars().any(char::is_control)
}

// ---------------------------------------------------------------------------------------------
// Audit log

#[utoipa::path(
    get,
    path = "/audit",
    tag = "audit",
    params(AuditFilter),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_admin"))),
    responses((status = 200, description = "Audit entries, newest first: every entry for a platform admin, the tenant's for a tenant admin", body = [AuditEntry]))
)]
async fn list_audit(
    State(auth): State<Arc<AuthContext>>,
    caller: Caller,
    Query(filter): Query<AuditFilter>,
) -> ApiResult<axum::Json<Vec<AuditEntry>>> {
    caller.require_role(Role::TenantAdmin)?;
    Ok(axum::Json(audit::list(&auth.db, caller.tenant_filter(), &filter).await?))
}

// ---------------------------------------------------------------------------------------------

async fn tenant_name(auth: &AuthContext, tenant: Option<Uuid>) -> ApiResult<Option<String>> {
    let Some(id) = tenant else { return Ok(None) };
    let row: Option<(String,)> =
        sqlx::query_as("SELECT name FROM tenants WHERE id = $1").bind(id).fetch_optional(&auth.db).await?;
    Ok(row.map(|(n,)| n))
}

/// A tenant by name, as the caller may see it: another tenant is as unknown as a missing one.
async fn visible_tenant_by_name(auth: &AuthContext, caller: &Caller, name: &str) -> ApiResult<Uuid> {
    let row: Option<(Uuid,)> =
        sqlx::query_as("SELECT id FROM tenants WHERE name = $1").bind(name).fetch_optional(&auth.db).await?;
    match row {
        Some((id,)) if caller.can_read_tenant(id) => Ok(id),
        _ => Err(ApiError::NotFound("tenant")),
    }
}

async fn ensure_tenant_exists(auth: &AuthContext, tenant: Uuid) -> ApiResult<()> {
    let row: Option<(Uuid,)> =
        sqlx::query_as("SELECT id FROM tenants WHERE id = $1").bind(tenant).fetch_optional(&auth.db).await?;
    row.map(|_| ()).ok_or(ApiError::NotFound("tenant"))
}
