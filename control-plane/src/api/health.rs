//! Liveness, readiness (the database answers) and Prometheus metrics.

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use serde_json::json;

use crate::error::{ApiError, ApiResult};
use crate::server::AppState;

pub fn routes() -> Router<AppState> {
    Router::new().route("/healthz", get(healthz)).route("/readyz", get(readyz)).route("/metrics", get(metrics))
}

async fn healthz() -> impl IntoResponse {
    axum::Json(json!({"status": "ok"}))
}

async fn readyz(State(state): State<AppState>) -> ApiResult<impl IntoResponse> {
    sqlx::query("SELECT 1")
        .execute(&state.db)
        .await
        .map_err(|_| ApiError::Unavailable("the database is not reachable".into()))?;
    Ok(axum::Json(json!({"status": "ready"})))
}

async fn metrics(State(state): State<AppState>) -> ApiResult<impl IntoResponse> {
    let body = state.metrics.render(&state.db).await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body))
}
