//! Liveness, readiness (the database answers) and Prometheus metrics.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use serde_json::json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(healthz)).routes(routes!(readyz)).routes(routes!(metrics))
}

/// Liveness: the process answers.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "health",
    security(()),
    extensions(("x-airtime-access" = json!("public"))),
    responses((status = 200, description = "Alive", content_type = "application/json"))
)]
async fn healthz() -> impl IntoResponse {
    axum::Json(json!({"status": "ok"}))
}

/// Readiness: the database answers within `db::PING_WITHIN` (0.8 s, so a probe with a one-second
/// timeout sees 503 rather than its own timeout while the database is unreachable) and the
/// scheduling loop is not stalled (on the replica that leads it: one that failed several cycles in
/// a row says so, with the last error).
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "health",
    security(()),
    extensions(("x-airtime-access" = json!("public"))),
    responses((status = 200, description = "Ready", content_type = "application/json"), (status = 503, body = crate::api::openapi::ErrorResponse))
)]
async fn readyz(State(state): State<AppState>) -> ApiResult<impl IntoResponse> {
    if let Err(e) = crate::db::ping(&state.db, crate::db::PING_WITHIN).await {
        tracing::debug!(error = %e, "readiness: the database does not answer");
        return Err(ApiError::Unavailable("the database is not reachable".into()));
    }
    if let Some(stalled) = state.metrics.stalled() {
        return Err(ApiError::Unavailable(stalled));
    }
    Ok(axum::Json(json!({"status": "ready"})))
}

/// Prometheus metrics: fleet-wide aggregates for anyone; with `Authorization: Bearer <the
/// control plane's --metrics-token>` also the figures that name tenants and services.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "health",
    security(()),
    extensions(("x-airtime-access" = json!("public"))),
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain"))
)]
async fn metrics(State(state): State<AppState>, headers: axum::http::HeaderMap) -> ApiResult<impl IntoResponse> {
    let named = state.config.metrics_token.as_ref().is_some_and(|token| {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        constant_time_eq(given.as_bytes(), token.expose().as_bytes())
    });
    let mut body = state.metrics.render(&state.db, named, state.config.telemetry_hold()).await?;
    body.push_str(&format!(
        "# HELP airtime_policy_modules_compiled Policy modules kept compiled (refused uploads never are).\n\
         # TYPE airtime_policy_modules_compiled gauge\nairtime_policy_modules_compiled {}\n",
        state.policies.cached_modules()
    ));
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body))
}

/// Compares two secrets in time that depends on their lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
