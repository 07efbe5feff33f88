//! Joining a tenant: a tenant admin invites a login name; the person behind it accepts.
//!
//! Login names are global (one account may belong to several tenants), so a tenant admin who could
//! create accounts by name, or add any user id to their tenant, could learn who has an account
//! elsewhere and pull other tenants' users (or a platform admin) into theirs. Instead, a tenant
//! admin's `POST /users` always answers the same `202 invited`, with the same work done (the
//! password is hashed either way, so the time taken says nothing either):
//! - a login name without an account gets one, with the password the tenant admin chose; its first
//!   login accepts the invitation (it is the account they made);
//! - a login name with an account gets an invitation its owner accepts or declines here — unless
//!   the account was made through another tenant's invitation: then its password is that tenant
//!   admin's choice, and the invitation is held (the inviting tenant sees it pending, the account
//!   cannot accept it), so no tenant admin can pre-claim a name and collect other tenants'
//!   invitations to it. A platform admin adds such a person directly.
//!
//! Until then the tenant sees the invitation only. Platform admins add users directly.

use std::sync::Arc;

use axum::extract::{FromRef, State};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::api::extract::{Json, Path};
use crate::api::openapi::ErrorResponse;
use crate::auth::audit::{self, AuditActor, Change};
use crate::auth::{AuthContext, Caller, Role, SecretString, password};
use crate::error::{ApiError, ApiResult};

pub fn routes<S>() -> OpenApiRouter<S>
where
    Arc<AuthContext>: FromRef<S>,
    S: Clone + Send + Sync + 'static,
{
    OpenApiRouter::new()
        .routes(routes!(mine))
        .routes(routes!(accept))
        .routes(routes!(decline))
        .routes(routes!(of_tenant))
}

/// What a tenant admin's `POST /users` answers, whatever the login name.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Invited {
    pub email: String,
    pub tenant: String,
    pub role: Role,
    /// Always `invited`: the person joins when they log in (a new account) or accept.
    pub status: &'static str,
}

/// Invites `email` to `tenant_id` with `role`, creating the account with `password` when the name
/// has none. Uniform in answer and in work, whether the account existed or not.
pub(crate) async fn invite(
    auth: &AuthContext,
    caller: &Caller,
    tenant_id: Uuid,
    email: &str,
    password: SecretString,
    role: Role,
) -> ApiResult<Invited> {
    let hash = password::hash_blocking(password).await?;
    let mut tx = auth.db.begin().await?;
    let (tenant,): (String,) =
        sqlx::query_as("SELECT name FROM tenants WHERE id = $1").bind(tenant_id).fetch_one(&mut *tx).await?;
    let created = sqlx::query(
        "INSERT INTO users (id, email, password_hash, platform_admin, created_by_tenant) \
         VALUES ($1, $2, $3, false, $4) ON CONFLICT DO NOTHING",
    )
    .bind(Uuid::now_v7())
    .bind(email)
    .bind(&hash)
    .bind(tenant_id)
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    // An existing account made through another tenant's invitation: that tenant's admin chose its
    // password, so the invitation waits for a platform admin.
    let (made_through,): (Option<Uuid>,) =
        sqlx::query_as("SELECT created_by_tenant FROM users WHERE lower(email) = lower($1)")
            .bind(email)
            .fetch_optional(&mut *tx)
            .await?
            .unwrap_or((None,));
    let held = made_through.is_some_and(|t| t != tenant_id);
    sqlx::query(
        "INSERT INTO membership_invitations (email, tenant_id, role, created_account, invited_by, held) \
         VALUES (lower($1), $2, $3, $4, $5, $6) \
         ON CONFLICT (email, tenant_id) DO UPDATE SET role = EXCLUDED.role, invited_at = now(), held = EXCLUDED.held",
    )
    .bind(email)
    .bind(tenant_id)
    .bind(role)
    .bind(created)
    .bind(caller.user_id)
    .bind(held)
    .execute(&mut *tx)
    .await?;
    audit::record(
        &mut tx,
        &AuditActor::from(caller),
        Change::new("user.invite", "tenant", tenant_id)
            .tenant(Some(tenant_id))
            .detail(serde_json::json!({"email": email, "role": role})),
    )
    .await?;
    tx.commit().await?;
    Ok(Invited { email: email.to_owned(), tenant, role, status: "invited" })
}

/// At login: the invitations that created this account are accepted (the person knows the
/// password the tenant admin chose for it).
pub(crate) async fn accept_on_first_login(db: &sqlx::PgPool, user_id: Uuid, email: &str) -> sqlx::Result<()> {
    sqlx::query(
        "WITH accepted AS (DELETE FROM membership_invitations WHERE email = lower($2) AND created_account \
                           RETURNING tenant_id, role) \
         INSERT INTO memberships (user_id, tenant_id, role) SELECT $1, tenant_id, role FROM accepted \
         ON CONFLICT (user_id, tenant_id) DO NOTHING",
    )
    .bind(user_id)
    .bind(email)
    .execute(db)
    .await?;
    Ok(())
}

#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct InvitationView {
    pub email: String,
    pub tenant_id: Uuid,
    pub tenant: String,
    pub role: Role,
    pub invited_at: DateTime<Utc>,
}

const SELECT: &str = "SELECT i.email, i.tenant_id, t.name AS tenant, i.role, i.invited_at \
     FROM membership_invitations i JOIN tenants t ON t.id = i.tenant_id";

/// The caller's own invitations, to accept or decline.
#[utoipa::path(
    get,
    path = "/auth/invitations",
    tag = "auth",
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 200, description = "Invitations to the caller's login name", body = [InvitationView]))
)]
async fn mine(State(auth): State<Arc<AuthContext>>, caller: Caller) -> ApiResult<axum::Json<Vec<InvitationView>>> {
    caller.require_role(Role::Viewer)?;
    let email = own_email(&auth, &caller).await?;
    let rows = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "{SELECT} WHERE i.email = lower($1) AND NOT i.held ORDER BY t.name"
    )))
    .bind(&email)
    .fetch_all(&auth.db)
    .await?;
    Ok(axum::Json(rows))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InvitationChoice {
    /// The inviting tenant, by name.
    pub tenant: String,
}

/// Accept an invitation: the caller becomes a member of that tenant with the invited role (log in
/// naming the tenant to act in it).
#[utoipa::path(
    post,
    path = "/auth/invitations/accept",
    tag = "auth",
    request_body(content = InvitationChoice, example = json!({"tenant": "research"})),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 200, description = "Joined", body = InvitationView), (status = 422, description = "No such invitation", body = ErrorResponse))
)]
async fn accept(
    State(auth): State<Arc<AuthContext>>,
    caller: Caller,
    Json(req): Json<InvitationChoice>,
) -> ApiResult<axum::Json<InvitationView>> {
    caller.require_role(Role::Viewer)?;
    let email = own_email(&auth, &caller).await?;
    let mut tx = auth.db.begin().await?;
    let taken: Option<InvitationView> = sqlx::query_as(
        "WITH taken AS (DELETE FROM membership_invitations i USING tenants t \
                        WHERE t.id = i.tenant_id AND t.name = $2 AND i.email = lower($1) AND NOT i.held \
                        RETURNING i.email, i.tenant_id, t.name AS tenant, i.role, i.invited_at) \
         SELECT * FROM taken",
    )
    .bind(&email)
    .bind(&req.tenant)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(invitation) = taken else {
        return Err(no_invitation(&req.tenant));
    };
    sqlx::query(
        "INSERT INTO memberships (user_id, tenant_id, role) VALUES ($1, $2, $3) \
         ON CONFLICT (user_id, tenant_id) DO UPDATE SET role = EXCLUDED.role",
    )
    .bind(caller.user_id)
    .bind(invitation.tenant_id)
    .bind(invitation.role)
    .execute(&mut *tx)
    .await?;
    audit::record(
        &mut tx,
        &AuditActor::from(&caller),
        Change::new("membership.accept", "user", caller.user_id)
            .tenant(Some(invitation.tenant_id))
            .detail(serde_json::json!({"role": invitation.role})),
    )
    .await?;
    tx.commit().await?;
    Ok(axum::Json(invitation))
}

/// Decline an invitation.
#[utoipa::path(
    post,
    path = "/auth/invitations/decline",
    tag = "auth",
    request_body(content = InvitationChoice, example = json!({"tenant": "research"})),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 204, description = "Declined"), (status = 422, description = "No such invitation", body = ErrorResponse))
)]
async fn decline(
    State(auth): State<Arc<AuthContext>>,
    caller: Caller,
    Json(req): Json<InvitationChoice>,
) -> ApiResult<axum::http::StatusCode> {
    caller.require_role(Role::Viewer)?;
    let email = own_email(&auth, &caller).await?;
    let removed = sqlx::query(
        "DELETE FROM membership_invitations i USING tenants t \
         WHERE t.id = i.tenant_id AND t.name = $2 AND i.email = lower($1)",
    )
    .bind(&email)
    .bind(&req.tenant)
    .execute(&auth.db)
    .await?
    .rows_affected();
    if removed == 0 {
        return Err(no_invitation(&req.tenant));
    }
    Ok(axum::http::StatusCode::NO_CONTENT)
}

/// A tenant's pending invitations (tenant admins of it, platform admins).
#[utoipa::path(
    get,
    path = "/tenants/{tenant_id}/invitations",
    tag = "auth",
    params(("tenant_id" = Uuid, Path, description = "Tenant id")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_admin"))),
    responses((status = 200, description = "Pending invitations", body = [InvitationView]), (status = 404, body = ErrorResponse))
)]
async fn of_tenant(
    State(auth): State<Arc<AuthContext>>,
    caller: Caller,
    Path(tenant_id): Path<Uuid>,
) -> ApiResult<axum::Json<Vec<InvitationView>>> {
    caller.ensure_can_admin(tenant_id, "tenant")?;
    let rows = sqlx::query_as(sqlx::AssertSqlSafe(format!("{SELECT} WHERE i.tenant_id = $1 ORDER BY i.invited_at")))
        .bind(tenant_id)
        .fetch_all(&auth.db)
        .await?;
    Ok(axum::Json(rows))
}

fn no_invitation(tenant: &str) -> ApiError {
    ApiError::unprocessable("no_invitation", format!("there is no invitation to {tenant:?} for this account"))
}

async fn own_email(auth: &AuthContext, caller: &Caller) -> ApiResult<String> {
    let row: Option<(String,)> =
        sqlx::query_as("SELECT email FROM users WHERE id = $1").bind(caller.user_id).fetch_optional(&auth.db).await?;
    row.map(|(e,)| e).ok_or(ApiError::NotFound("user"))
}
