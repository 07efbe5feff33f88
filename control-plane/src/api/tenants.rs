//! Tenants over HTTP: the handlers parse, call the `tenancy` domain module and map its answer.

use axum::extract::State;
use axum::http::StatusCode;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::extract::Json;
use crate::api::openapi::ErrorResponse;
use crate::auth::Caller;
use crate::error::ApiResult;
use crate::state::AppState;
use crate::tenancy::{CreateTenant, TenantView};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list, create)).routes(routes!(summary))
}

/// Who is within quota, borrowing or starved: per tenant, the GPUs it holds against its guarantee,
/// its waiting work and the most common reason that work gives. Every tenant for platform admins;
/// the caller's own tenant for everyone else.
#[utoipa::path(
    operation_id = "tenants_summary",
    get,
    path = "/tenants/summary",
    tag = "tenants",
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 200, description = "Standing of each tenant", body = [crate::tenancy::TenantStanding]))
)]
async fn summary(
    caller: Caller,
    State(state): State<AppState>,
) -> ApiResult<axum::Json<Vec<crate::tenancy::TenantStanding>>> {
    Ok(axum::Json(crate::tenancy::standings(&state.db, caller.tenant_filter()).await?))
}

/// Every tenant for platform admins; the caller's own tenant for everyone else.
#[utoipa::path(
    operation_id = "tenants_list",
    get,
    path = "/tenants",
    tag = "tenants",
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 200, description = "Tenants", body = [TenantView]))
)]
async fn list(caller: Caller, State(state): State<AppState>) -> ApiResult<axum::Json<Vec<TenantView>>> {
    Ok(axum::Json(crate::tenancy::list(&state.db, &caller.scope()).await?))
}

/// Create a tenant with its quota (platform admins).
#[utoipa::path(
    operation_id = "tenants_create",
    post,
    path = "/tenants",
    tag = "tenants",
    request_body(content = CreateTenant, example = json!({"name": "research", "guaranteed_gpus": 8, "weight": 2})),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses(
        (status = 201, description = "Created", body = TenantView),
        (status = 409, description = "The name is taken", body = ErrorResponse),
        (status = 422, body = ErrorResponse)
    )
)]
async fn create(
    caller: Caller,
    State(state): State<AppState>,
    Json(req): Json<CreateTenant>,
) -> ApiResult<(StatusCode, axum::Json<TenantView>)> {
    let created = crate::tenancy::create(&state.db, &caller.scope(), &req).await?;
    Ok((StatusCode::CREATED, axum::Json(created)))
}
