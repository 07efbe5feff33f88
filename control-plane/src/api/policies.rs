//! Policy modules: upload a `.wasm` (checked before it is stored), list, inspect, activate.

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::{get, post};
use serde::Deserialize;
use uuid::Uuid;

use crate::api::extract::{Json, Path, Query};
use crate::config::Config;
use crate::error::{ApiError, ApiResult};
use crate::policies::{self, PolicyView};
use crate::server::AppState;

pub fn routes(config: &Config) -> Router<AppState> {
    Router::new()
        .route(
            "/policies",
            post(upload)
                .layer(DefaultBodyLimit::max(config.max_policy_bytes))
                .get(list),
        )
        .route("/policies/{id}", get(get_one))
        .route("/policies/{id}/activate", post(activate))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UploadQuery {
    name: String,
}

/// `POST /api/v1/policies?name=my-policy` with the module as the body (`Content-Type: application/wasm`).
async fn upload(
    State(state): State<AppState>,
    Query(query): Query<UploadQuery>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> ApiResult<(StatusCode, axum::Json<PolicyView>)> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !matches!(
        content_type,
        "application/wasm" | "application/octet-stream"
    ) {
        return Err(ApiError::UnsupportedMediaType(
            "upload the module with Content-Type: application/wasm".into(),
        ));
    }
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge
        } else {
            ApiError::bad_request("unreadable_body", "the request body could not be read")
        }
    })?;
    if body.is_empty() {
        return Err(ApiError::bad_request(
            "empty_module",
            "the request body is empty; send the .wasm file",
        ));
    }
    state.policies.vet(body.to_vec()).await.map_err(|err| {
        ApiError::unprocessable("invalid_policy", format!("policy module refused: {err}"))
    })?;
    let view = policies::store_upload(&state.db, &query.name, &body).await?;
    Ok((StatusCode::CREATED, axum::Json(view)))
}

async fn list(State(state): State<AppState>) -> ApiResult<axum::Json<Vec<PolicyView>>> {
    Ok(axum::Json(policies::list(&state.db).await?))
}

async fn get_one(
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
) -> ApiResult<axum::Json<PolicyView>> {
    policies::get(&state.db, id)
        .await?
        .map(axum::Json)
        .ok_or(ApiError::NotFound("policy"))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActivateRequest {
    /// The version to activate; the latest when absent.
    #[serde(default)]
    version: Option<i32>,
}

async fn activate(
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
    Json(req): Json<ActivateRequest>,
) -> ApiResult<axum::Json<PolicyView>> {
    let view = policies::activate(&state.db, id, req.version).await?;
    state.wake.wake();
    Ok(axum::Json(view))
}
