//! Tenants over HTTP: the handlers parse, call the `tenancy` domain module and map its answer.

use axum::extract::State;
use axum::http::StatusCode;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::api::extract::{Json, Path, Query};
use crate::api::openapi::ErrorResponse;
use crate::archive::Archived;
use crate::auth::Caller;
use crate::budgets::{BudgetView, Period, SetBudget};
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
        .routes(routes!(archive))
        .routes(routes!(budgets))
        .routes(routes!(set_budget, remove_budget))
}

/// Budgets and where each tenant stands this period (used, remaining, exhausted): every tenant's
/// for platform admins (or one tenant's with `tenant`), the caller's own tenant's for everyone else.
#[utoipa::path(
    operation_id = "tenants_budgets",
    get,
    path = "/tenants/budgets",
    tag = "tenants",
    params(BudgetQuery),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses(
        (status = 200, description = "Budgets with this period's use", body = [BudgetView]),
        (status = 404, body = ErrorResponse)
    )
)]
async fn budgets(
    caller: Caller,
    State(state): State<AppState>,
    Query(q): Query<BudgetQuery>,
) -> ApiResult<axum::Json<Vec<BudgetView>>> {
    let hold = state.config.telemetry_hold();
    Ok(axum::Json(crate::budgets::list(&state.db, &caller.scope(), q.tenant, hold).await?))
}

#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct BudgetQuery {
    /// One tenant's budgets (its id).
    tenant: Option<Uuid>,
}

/// Set a tenant's GPU-hour budget for a period (`week` or `month`) and what happens once it is
/// used up (platform admins): `warn`, `best_effort` (new work admitted preemptible at priority 0)
/// or `stop` (new work refused). Audited; applies to the next submission.
#[utoipa::path(
    operation_id = "tenants_set_budget",
    put,
    path = "/tenants/{id}/budgets/{period}",
    tag = "tenants",
    params(("id" = Uuid, Path, description = "Tenant id"), ("period" = String, Path, description = "week or month")),
    request_body(content = SetBudget, example = json!({"gpu_hours": 500, "action": "stop"})),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses(
        (status = 200, description = "The budget and this period's use", body = BudgetView),
        (status = 403, body = ErrorResponse),
        (status = 404, body = ErrorResponse),
        (status = 409, description = "The tenant is archived", body = ErrorResponse),
        (status = 422, body = ErrorResponse)
    )
)]
async fn set_budget(
    caller: Caller,
    State(state): State<AppState>,
    Path((id, period)): Path<(Uuid, String)>,
    Json(req): Json<SetBudget>,
) -> ApiResult<axum::Json<BudgetView>> {
    let period = Period::parse(&period)?;
    let hold = state.config.telemetry_hold();
    Ok(axum::Json(crate::budgets::set(&state.db, &caller.scope(), id, period, &req, hold).await?))
}

/// Remove a tenant's budget for a period (platform admins). Audited.
#[utoipa::path(
    operation_id = "tenants_remove_budget",
    delete,
    path = "/tenants/{id}/budgets/{period}",
    tag = "tenants",
    params(("id" = Uuid, Path, description = "Tenant id"), ("period" = String, Path, description = "week or month")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses(
        (status = 204, description = "Removed"),
        (status = 403, body = ErrorResponse),
        (status = 404, body = ErrorResponse),
        (status = 422, body = ErrorResponse)
    )
)]
async fn remove_budget(
    caller: Caller,
    State(state): State<AppState>,
    Path((id, period)): Path<(Uuid, String)>,
) -> ApiResult<StatusCode> {
    let period = Period::parse(&period)?;
    crate::budgets::remove(&state.db, &caller.scope(), id, period).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Archive a tenant (platform admins): its pending work is cancelled, its running work stopped
/// with its grace period, its services drained; it admits nothing new from then on. Its history,
/// decisions and accounting remain. Audited. The `default` tenant cannot be archived.
#[utoipa::path(
    operation_id = "tenants_archive",
    post,
    path = "/tenants/{id}/archive",
    tag = "tenants",
    params(("id" = Uuid, Path, description = "Tenant id")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses(
        (status = 200, description = "The tenant, archived, and what that ended", body = Archived),
        (status = 403, body = ErrorResponse),
        (status = 404, body = ErrorResponse),
        (status = 409, description = "Already archived", body = ErrorResponse),
        (status = 422, description = "The default tenant", body = ErrorResponse)
    )
)]
async fn archive(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
) -> ApiResult<axum::Json<Archived>> {
    let (archived, nodes_changed) = crate::archive::archive(&state.db, &caller.scope(), id).await?;
    if nodes_changed {
        state.desired.announce();
    }
    state.wake.wake();
    Ok(axum::Json(archived))
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
