//! Access control over the API: logging in, the caller's own account, API tokens and the audit log.
//! Users and memberships are `api/users.rs` (over the `users` domain module); node enrolment is
//! `api/enrolment.rs`, beside the agent API.
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
use chrono::{DateTime, Duration as ChronoDuration, Utc};
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::api::extract::{Json, Path, Query};
use crate::api::openapi::ErrorResponse;
use crate::auth::audit::{self, AuditEntry, AuditFilter};
use crate::auth::caller::ClientIp;
use crate::auth::tokens::{self, ApiTokenView};
use crate::auth::{AuthContext, Caller, Role, SecretString, password};
use crate::error::{ApiError, ApiResult};

/// Default lifetime of an API token, days.
pub const DEFAULT_TOKEN_DAYS: u32 = 90;
/// Longest lifetime of an API token, days.
pub const MAX_TOKEN_DAYS: u32 = 3650;

const BAD_LOGIN: &str = "invalid login name or password";

pub fn routes<S>() -> OpenApiRouter<S>
where
    Arc<AuthContext>: FromRef<S>,
    S: Clone + Send + Sync + 'static,
{
    OpenApiRouter::new()
        .routes(routes!(login))
        .routes(routes!(me))
        .routes(routes!(change_password))
        .routes(routes!(list_tokens, create_token))
        .routes(routes!(revoke_token))
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
    let user = crate::users::login_user(&auth.db, name).await?;
    let phc = user.as_ref().map(|u| u.password_hash.clone());
    let verified = password::verify_blocking(req.password, phc).await;
    let Some(user) = user.filter(|u| verified && !u.disabled) else {
        auth.logins.record_failure(name, ip, Instant::now());
        tracing::info!(user = %name, ip = ?ip, "login refused");
        return Err(ApiError::Unauthorized(BAD_LOGIN));
    };
    auth.logins.record_success(name, ip);
    crate::invitations::accept_on_first_login(&auth.db, user.id, &user.email).await?;

    let (role, tenant_id, tenant) = if user.platform_admin && req.tenant.is_none() {
        (Role::PlatformAdmin, None, None)
    } else {
        let memberships = crate::users::login_memberships(&auth.db, user.id).await?;
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
    let tenant = crate::users::tenant_name(&auth.db, caller.tenant).await?;
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
    crate::users::change_password(&auth.db, &caller.scope(), req.current_password, req.new_password).await?;
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
    let tokens = tokens::list_api_tokens(
        &auth.db,
        caller.tenant_filter(),
        owner,
        filter.tenant.as_deref(),
        filter.include_revoked,
    )
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
    operation_id = "auth_create_token",
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
            Some(crate::users::visible_tenant_by_name(&auth.db, &caller.scope(), t).await?)
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
    let (view, secret) = tokens::create_api_token(&auth.db, &caller.scope(), tenant, name, role, expires_at).await?;
    Ok((StatusCode::CREATED, axum::Json(CreatedToken { token: secret.expose().to_owned(), view })))
}

#[utoipa::path(
    operation_id = "auth_revoke_token",
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
    Ok(axum::Json(tokens::revoke_api_token(&auth.db, &caller.scope(), id).await?))
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
