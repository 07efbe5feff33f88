//! Elastic inference services: create, list, inspect, change, delete (with drain), report load,
//! and the tokens a service's replicas report with. Scoped to the caller's tenant like workloads;
//! another tenant's service is not found.

use axum::extract::State;
use axum::http::StatusCode;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::api::extract::{Json, Path};
use crate::api::openapi::ErrorResponse;
use crate::auth::{Caller, LoadReporter};
use crate::error::ApiResult;
use crate::services::{
    self, CreateService, CreateServiceToken, LoadAccepted, LoadReport, ServiceDetail, ServiceTokenView, ServiceView,
    UpdateService,
};
use crate::state::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create, list))
        .routes(routes!(detail, update, delete))
        .routes(routes!(report_load))
        .routes(routes!(create_token))
        .routes(routes!(revoke_token))
}

/// Create a service in the caller's tenant (platform admins name any tenant in `tenant`). Its
/// first `min_replicas` replicas start at the next scheduling cycle; load reports scale it.
#[utoipa::path(
    operation_id = "services_create",
    post,
    path = "/services",
    tag = "services",
    request_body(content = CreateService, example = json!({
        "name": "chat", "class": "realtime_inference", "capacity": 15.0, "min_replicas": 1, "max_replicas": 8,
        "replica": {"command": ["sh", "-c", "exec sleep 3600"], "resources": {"gpu_count": 1, "cpu_millis": 1000, "memory_mb": 1024}},
        "cpu_variant": {"command": ["sh", "-c", "exec sleep 3600"], "cpu_millis": 2000, "memory_mb": 1024, "capacity": 4.0},
        "behavior": {"scale_up_window_s": 0, "scale_down_window_s": 300, "stale_after_s": 60}
    })),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_member"))),
    responses(
        (status = 201, description = "Created", body = ServiceView),
        (status = 409, description = "The tenant has a live service of that name", body = ErrorResponse),
        (status = 422, description = "Invalid, or an unknown tenant", body = ErrorResponse)
    )
)]
async fn create(
    caller: Caller,
    State(state): State<AppState>,
    Json(req): Json<CreateService>,
) -> ApiResult<(StatusCode, axum::Json<ServiceView>)> {
    let view = services::create(&state.db, &req, &caller.scope(), &state.config.container_mount_prefixes).await?;
    state.wake.wake();
    Ok((StatusCode::CREATED, axum::Json(view)))
}

/// The caller's tenant's live services with their replicas and demand (every tenant's for
/// platform admins).
#[utoipa::path(
    operation_id = "services_list",
    get,
    path = "/services",
    tag = "services",
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 200, description = "Services", body = [ServiceView]))
)]
async fn list(caller: Caller, State(state): State<AppState>) -> ApiResult<axum::Json<Vec<ServiceView>>> {
    Ok(axum::Json(services::list(&state.db, &caller.scope()).await?))
}

/// A service with its replicas, demand and latest scale decisions.
#[utoipa::path(
    operation_id = "services_detail",
    get,
    path = "/services/{id}",
    tag = "services",
    params(("id" = Uuid, Path, description = "Service id")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 200, description = "The service", body = ServiceDetail), (status = 404, body = ErrorResponse))
)]
async fn detail(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
) -> ApiResult<axum::Json<ServiceDetail>> {
    Ok(axum::Json(services::detail(&state.db, id, &caller.scope()).await?))
}

/// Change a service's scale bounds, capacity, behaviour or templates. New replicas run a new
/// template; running ones keep theirs until they drain.
#[utoipa::path(
    patch,
    path = "/services/{id}",
    tag = "services",
    params(("id" = Uuid, Path, description = "Service id")),
    request_body(content = UpdateService, example = json!({"min_replicas": 2, "max_replicas": 12})),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_member"))),
    responses(
        (status = 200, description = "Changed", body = ServiceView),
        (status = 404, body = ErrorResponse),
        (status = 409, description = "The service was deleted", body = ErrorResponse),
        (status = 422, description = "Invalid", body = ErrorResponse)
    )
)]
async fn update(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
    Json(req): Json<UpdateService>,
) -> ApiResult<axum::Json<ServiceView>> {
    let view = services::update(&state.db, id, &req, &caller.scope(), &state.config.container_mount_prefixes).await?;
    state.wake.wake();
    Ok(axum::Json(view))
}

/// Delete a service: its replicas drain (SIGTERM, then SIGKILL after the grace period), its tokens
/// stop working at once, and it is gone when the last replica has stopped.
#[utoipa::path(
    delete,
    path = "/services/{id}",
    tag = "services",
    params(("id" = Uuid, Path, description = "Service id")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_member"))),
    responses(
        (status = 202, description = "Draining", body = ServiceView),
        (status = 404, body = ErrorResponse),
        (status = 409, description = "Already deleted", body = ErrorResponse)
    )
)]
async fn delete(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
) -> ApiResult<(StatusCode, axum::Json<ServiceView>)> {
    let view = services::delete(&state.db, id, &caller.scope()).await?;
    state.wake.wake();
    Ok((StatusCode::ACCEPTED, axum::Json(view)))
}

/// Report a service's load: requests/s (or concurrent requests, as the service scales on), queue
/// depth, p95 latency. With the service's own token (`st_…`, what its replicas hold) or as a
/// member of its tenant. Without reports for `stale_after_s`, the replicas are held as they are.
#[utoipa::path(
    post,
    path = "/services/{id}/load",
    tag = "services",
    params(("id" = Uuid, Path, description = "Service id")),
    request_body(content = LoadReport, example = json!({"requests_per_s": 42.0, "queue_depth": 3, "p95_latency_ms": 180.0})),
    security(("session" = []), ("api_token" = []), ("service_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_member"))),
    responses(
        (status = 202, description = "Recorded", body = LoadAccepted),
        (status = 404, body = ErrorResponse),
        (status = 422, description = "Not the service's metric, or out of range", body = ErrorResponse)
    )
)]
async fn report_load(
    reporter: LoadReporter,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
    Json(report): Json<LoadReport>,
) -> ApiResult<(StatusCode, axum::Json<LoadAccepted>)> {
    let accepted = services::report_load(&state.db, id, &report, &reporter.reporter()).await?;
    Ok((StatusCode::ACCEPTED, axum::Json(accepted)))
}

/// Mint a token that may report this service's load and nothing else (shown once).
#[utoipa::path(
    operation_id = "services_create_token",
    post,
    path = "/services/{id}/tokens",
    tag = "services",
    params(("id" = Uuid, Path, description = "Service id")),
    request_body(content = CreateServiceToken, example = json!({"name": "chat-gateway"})),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_member"))),
    responses(
        (status = 201, description = "Created; `token` is shown only now", body = ServiceTokenView),
        (status = 404, body = ErrorResponse),
        (status = 422, description = "Invalid name", body = ErrorResponse)
    )
)]
async fn create_token(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
    Json(req): Json<CreateServiceToken>,
) -> ApiResult<(StatusCode, axum::Json<ServiceTokenView>)> {
    Ok((StatusCode::CREATED, axum::Json(services::create_token(&state.db, id, &req, &caller.scope()).await?)))
}

/// Revoke one of a service's tokens.
#[utoipa::path(
    operation_id = "services_revoke_token",
    delete,
    path = "/services/{id}/tokens/{token_id}",
    tag = "services",
    params(("id" = Uuid, Path, description = "Service id"), ("token_id" = Uuid, Path, description = "Token id")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_member"))),
    responses((status = 200, description = "Revoked", body = ServiceTokenView), (status = 404, body = ErrorResponse))
)]
async fn revoke_token(
    caller: Caller,
    State(state): State<AppState>,
    Path((id, token_id)): Path<(Uuid, Uuid)>,
) -> ApiResult<axum::Json<ServiceTokenView>> {
    Ok(axum::Json(services::revoke_token(&state.db, id, token_id, &caller.scope()).await?))
}
