//! Submit, list, inspect and cancel workloads. Everything is scoped to the caller's tenant
//! (platform admins see every tenant); another tenant's workload is not found.

use axum::extract::State;
use axum::http::StatusCode;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::api::extract::{Json, Path, Query};
use crate::api::openapi::ErrorResponse;
use crate::auth::Caller;
use crate::error::ApiResult;
use crate::server::AppState;
use crate::workloads::{self, SubmitWorkload, WorkloadDetail, WorkloadFilter, WorkloadView};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(submit, list)).routes(routes!(detail)).routes(routes!(cancel))
}

/// Submit a workload into the caller's tenant (platform admins name any tenant in `tenant`).
#[utoipa::path(
    post,
    path = "/workloads",
    tag = "workloads",
    request_body(content = SubmitWorkload, example = json!({
        "name": "eval-nightly", "class": "evaluation", "command": ["sh", "-c", "echo hi"],
        "resources": {"gpu_count": 0, "cpu_millis": 500, "memory_mb": 256}
    })),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_member"))),
    responses(
        (status = 201, description = "Queued", body = WorkloadView),
        (status = 422, description = "Invalid, or an unknown tenant", body = ErrorResponse)
    )
)]
async fn submit(
    caller: Caller,
    State(state): State<AppState>,
    Json(req): Json<SubmitWorkload>,
) -> ApiResult<(StatusCode, axum::Json<WorkloadView>)> {
    let view = workloads::submit(&state.db, &req, &caller).await?;
    state.wake.wake();
    Ok((StatusCode::CREATED, axum::Json(view)))
}

/// The caller's tenant's workloads, most recent first (every tenant's for platform admins).
#[utoipa::path(
    get,
    path = "/workloads",
    tag = "workloads",
    params(WorkloadFilter),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 200, description = "Workloads", body = [WorkloadView]))
)]
async fn list(
    caller: Caller,
    State(state): State<AppState>,
    Query(mut filter): Query<WorkloadFilter>,
) -> ApiResult<axum::Json<Vec<WorkloadView>>> {
    filter.tenant_id = caller.tenant_filter();
    Ok(axum::Json(workloads::list(&state.db, &filter).await?))
}

/// A workload with its state history and the decisions about it.
#[utoipa::path(
    get,
    path = "/workloads/{id}",
    tag = "workloads",
    params(("id" = Uuid, Path, description = "Workload id")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 200, description = "The workload", body = WorkloadDetail), (status = 404, body = ErrorResponse))
)]
async fn detail(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
) -> ApiResult<axum::Json<WorkloadDetail>> {
    Ok(axum::Json(workloads::detail(&state.db, id, &caller).await?))
}

/// Cancel a workload: a pending one at once, a running one through its agent (SIGTERM, then
/// SIGKILL after the grace period).
#[utoipa::path(
    post,
    path = "/workloads/{id}/cancel",
    tag = "workloads",
    params(("id" = Uuid, Path, description = "Workload id")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_member"))),
    responses(
        (status = 202, description = "Cancelled, or stopping on its node", body = WorkloadView),
        (status = 404, body = ErrorResponse),
        (status = 409, description = "Already finished", body = ErrorResponse)
    )
)]
async fn cancel(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
) -> ApiResult<(StatusCode, axum::Json<WorkloadView>)> {
    let (view, node_changed) = workloads::cancel(&state.db, id, &caller).await?;
    if node_changed {
        state.desired.announce();
    }
    state.wake.wake();
    Ok((StatusCode::ACCEPTED, axum::Json(view)))
}
