//! Users and memberships over HTTP: the handlers parse, build the caller's scope and call the
//! `users` domain module; a tenant admin's new user becomes an invitation (`invitations`).

use std::sync::Arc;

use axum::extract::{FromRef, State};
use axum::http::StatusCode;
use axum::response::IntoResponse as _;
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::api::extract::{Json, Path};
use crate::api::openapi::ErrorResponse;
use crate::auth::{AuthContext, Caller, Role};
use crate::error::ApiResult;
use crate::users::{self, CreateUser, MembershipView, UpdateUser, UserView};

pub fn routes<S>() -> OpenApiRouter<S>
where
    Arc<AuthContext>: FromRef<S>,
    S: Clone + Send + Sync + 'static,
{
    OpenApiRouter::new()
        .routes(routes!(list_users, create_user))
        .routes(routes!(get_user, update_user))
        .routes(routes!(list_members))
        .routes(routes!(set_member, remove_member))
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
    Ok(axum::Json(users::list(&auth.db, &caller.scope()).await?))
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
    Ok(axum::Json(users::get(&auth.db, &caller.scope(), id).await?))
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
        (status = 202, description = "Invited (tenant admins): the same answer whether or not the login name has an account", body = crate::invitations::Invited),
        (status = 409, description = "The login name is taken (platform admins)", body = ErrorResponse),
        (status = 422, description = "Invalid", body = ErrorResponse)
    )
)]
async fn create_user(
    State(auth): State<Arc<AuthContext>>,
    caller: Caller,
    Json(req): Json<CreateUser>,
) -> ApiResult<axum::response::Response> {
    let scope = caller.scope();
    let admission = users::admit(&auth.db, &scope, &req).await?;
    // A tenant admin never learns whether a login name has an account elsewhere: they invite it,
    // and the answer is the same either way (see the invitations module).
    if let (true, Some(tenant)) = (admission.by_invitation, admission.tenant) {
        let invited =
            crate::invitations::invite(&auth.db, &scope, tenant, &admission.email, req.password, admission.role)
                .await?;
        return Ok((StatusCode::ACCEPTED, axum::Json(invited)).into_response());
    }
    let user = users::create(&auth.db, &scope, &admission, req.password).await?;
    Ok((StatusCode::CREATED, axum::Json(user)).into_response())
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
    Ok(axum::Json(users::update(&auth.db, &caller.scope(), id, &req).await?))
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
    Ok(axum::Json(users::members(&auth.db, &caller.scope(), tenant_id).await?))
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
    Ok(axum::Json(users::set_member(&auth.db, &caller.scope(), tenant_id, user_id, req.role).await?))
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
    users::remove_member(&auth.db, &caller.scope(), tenant_id, user_id).await?;
    Ok(StatusCode::NO_CONTENT)
}
