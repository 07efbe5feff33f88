//! Tenants over HTTP: the handlers parse, call the `tenancy` domain module and map its answer.

use axum::extract::State;
use axum::http::StatusCode;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::api::extract::{Json, Path};
use crate::api::openapi::ErrorResponse;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::scheduler::QuotaPreview;
use crate::state::AppState;
use crate::tenancy::{CreateTenant, TenantQuota, TenantView};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(summary))
        .routes(routes!(update))
        .routes(routes!(preview))
}

/// Change a tenant's quota — guaranteed GPUs, weight, tier, borrowing; the fields given change
/// (platform admins). Audited with what it was and what it became; the scheduler applies it at its
/// next cycle. Lowering a guarantee below what the tenant holds reclaims nothing by itself: the
/// policy preempts under the normal preemption rules.
#[utoipa::path(
    operation_id = "tenants_update",
    patch,
    path = "/tenants/{id}",
    tag = "tenants",
    params(("id" = Uuid, Path, description = "Tenant id")),
    request_body(content = TenantQuota, example = json!({"guaranteed_gpus": 16, "weight": 2})),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses(
        (status = 200, description = "The tenant, changed", body = TenantView),
        (status = 403, body = ErrorResponse),
        (status = 404, body = ErrorResponse),
        (status = 422, body = ErrorResponse)
    )
)]
async fn update(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
    Json(change): Json<TenantQuota>,
) -> ApiResult<axum::Json<TenantView>> {
    let updated = crate::tenancy::update(&state.db, &caller.scope(), id, &change).await?;
    state.wake.wake();
    Ok(axum::Json(updated))
}

/// What the next scheduling cycle would do if the tenant's quota changed as the body says, against
/// what it would do now: the active platform policy evaluated on the live fleet and queue twice,
/// checked like real decisions (platform admins). Nothing is applied or stored.
#[utoipa::path(
    operation_id = "tenants_preview",
    post,
    path = "/tenants/{id}/preview",
    tag = "tenants",
    params(("id" = Uuid, Path, description = "Tenant id")),
    request_body(content = TenantQuota, example = json!({"guaranteed_gpus": 16})),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses(
        (status = 200, description = "The decisions that would differ", body = QuotaPreview),
        (status = 403, body = ErrorResponse),
        (status = 404, body = ErrorResponse),
        (status = 422, body = ErrorResponse)
    )
)]
async fn preview(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
    Json(change): Json<TenantQuota>,
) -> ApiResult<axum::Json<QuotaPreview>> {
    caller.require_platform_admin()?;
    change.check()?;
    let preview = crate::scheduler::preview_quota(&state.scheduler(), id, &change).await?;
    Ok(axum::Json(preview.ok_or(ApiError::NotFound("tenant"))?))
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
