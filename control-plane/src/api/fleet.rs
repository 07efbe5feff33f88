//! Nodes and GPUs, with their latest telemetry.

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use uuid::Uuid;

use crate::api::extract::Path;
use crate::error::{ApiError, ApiResult};
use crate::fleet::{self, GpuView, NodeView};
use crate::server::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/nodes", get(list_nodes))
        .route("/nodes/{id}", get(get_node))
        .route("/gpus", get(list_gpus))
        .route("/gpus/{id}", get(get_gpu))
}

async fn list_nodes(State(state): State<AppState>) -> ApiResult<axum::Json<Vec<NodeView>>> {
    Ok(axum::Json(fleet::list_nodes(&state.db).await?))
}

async fn get_node(State(state): State<AppState>, Path(id): Path<Uuid>) -> ApiResult<axum::Json<NodeView>> {
    fleet::get_node(&state.db, id).await?.map(axum::Json).ok_or(ApiError::NotFound("node"))
}

async fn list_gpus(State(state): State<AppState>) -> ApiResult<axum::Json<Vec<GpuView>>> {
    Ok(axum::Json(fleet::list_gpus(&state.db).await?))
}

async fn get_gpu(State(state): State<AppState>, Path(id): Path<Uuid>) -> ApiResult<axum::Json<GpuView>> {
    fleet::get_gpu(&state.db, id).await?.map(axum::Json).ok_or(ApiError::NotFound("gpu"))
}
