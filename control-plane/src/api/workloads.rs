//! Submit, list, inspect and cancel workloads.

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use uuid::Uuid;

use crate::api::extract::{Json, Path, Query};
use crate::error::ApiResult;
use crate::server::AppState;
use crate::workloads::{self, SubmitWorkload, WorkloadDetail, WorkloadFilter, WorkloadView};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/workloads", post(submit).get(list))
        .route("/workloads/{id}", get(detail))
        .route("/workloads/{id}/cancel", post(cancel))
}

async fn submit(
    State(state): State<AppState>,
    Json(req): Json<SubmitWorkload>,
) -> ApiResult<(StatusCode, axum::Json<WorkloadView>)> {
    let view = workloads::submit(&state.db, &req).await?;
    state.wake.wake();
    Ok((StatusCode::CREATED, axum::Json(view)))
}

async fn list(
    State(state): State<AppState>,
    Query(filter): Query<WorkloadFilter>,
) -> ApiResult<axum::Json<Vec<WorkloadView>>> {
    Ok(axum::Json(workloads::list(&state.db, &filter).await?))
}

async fn detail(State(state): State<AppState>, Path(id): Path<Uuid>) -> ApiResult<axum::Json<WorkloadDetail>> {
    Ok(axum::Json(workloads::detail(&state.db, id).await?))
}

async fn cancel(
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
) -> ApiResult<(StatusCode, axum::Json<WorkloadView>)> {
    let (view, node_changed) = workloads::cancel(&state.db, id).await?;
    if node_changed {
        state.desired.announce();
    }
    state.wake.wake();
    Ok((StatusCode::ACCEPTED, axum::Json(view)))
}
