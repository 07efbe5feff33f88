//! Joining a tenant over HTTP: the caller's invitations, accepting and declining them, and a
//! tenant's pending ones. The handlers parse, call the `invitations` domain module (which says why a
//! tenant admin invites rather than adds) and map its answer.

use std::sync::Arc;

use axum::extract::{FromRef, State};
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::api::extract::{Json, Path};
use crate::api::openapi::ErrorResponse;
use crate::auth::{AuthContext, Caller};
use crate::error::ApiResult;
use crate::invitations::{self, InvitationView};

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
    Ok(axum::Json(invitations::mine(&auth.db, &caller.scope()).await?))
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
    Ok(axum::Json(invitations::accept(&auth.db, &caller.scope(), &req.tenant).await?))
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
    invitations::decline(&auth.db, &caller.scope(), &req.tenant).await?;
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
    Ok(axum::Json(invitations::of_tenant(&auth.db, &caller.scope(), tenant_id).await?))
}
