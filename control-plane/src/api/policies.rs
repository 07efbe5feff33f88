//! Policy modules and their lifecycle: upload a `.wasm` (checked and trial-evaluated before it is
//! stored), list, inspect, activate with parameters, roll back, delete, set limits, dry-run against
//! the live fleet, run in shadow, and read failures, logs and shadow comparisons.

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::{delete, get, post, put};
use serde::Deserialize;
use uuid::Uuid;

use airtime_policy_host::PolicyLimits;

use crate::api::extract::{Json, Path, Query};
use crate::config::Config;
use crate::error::{ApiError, ApiResult};
use crate::policies::{self, FailureView, LogView, PolicyView, ShadowResultView};
use crate::scheduler::{self, DryRun};
use crate::server::AppState;

pub fn routes(config: &Config) -> Router<AppState> {
    let module_limit = DefaultBodyLimit::max(config.max_policy_bytes);
    Router::new()
        .route("/policies", post(upload).layer(module_limit).get(list))
        .route("/policies/dry-run", post(dry_run_module).layer(module_limit))
        .route("/policies/{id}", get(get_one).delete(delete_policy))
        .route("/policies/{id}/activate", post(activate))
        .route("/policies/{id}/rollback", post(rollback))
        .route("/policies/{id}/limits", put(set_limits))
        .route("/policies/{id}/shadow", put(start_shadow).delete(stop_shadow))
        .route("/policies/{id}/dry-run", post(dry_run_version))
        .route("/policies/{id}/versions/{version}", delete(delete_version))
        .route("/policies/{id}/failures", get(failures))
        .route("/policies/{id}/logs", get(logs))
        .route("/policies/{id}/shadow-results", get(shadow_results))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UploadQuery {
    name: String,
}

fn module_body(headers: &HeaderMap, body: Result<Bytes, BytesRejection>) -> ApiResult<Bytes> {
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !matches!(content_type, "application/wasm" | "application/octet-stream") {
        return Err(ApiError::UnsupportedMediaType("send the module with Content-Type: application/wasm".into()));
    }
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge
        } else {
            ApiError::bad_request("unreadable_body", "the request body could not be read")
        }
    })?;
    if body.is_empty() {
        return Err(ApiError::bad_request("empty_module", "the request body is empty; send the .wasm file"));
    }
    Ok(body)
}

/// `POST /api/v1/policies?name=my-policy` with the module as the body (`Content-Type: application/wasm`).
async fn upload(
    State(state): State<AppState>,
    Query(query): Query<UploadQuery>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<(StatusCode, axum::Json<PolicyView>)> {
    let body = module_body(&headers, body)?;
    state.policies.vet(body.to_vec()).await.map_err(|err| {
        ApiError::unprocessable("invalid_policy", format!("policy module refused ({}): {err}", err.kind()))
    })?;
    let view = policies::store_upload(&state.db, &query.name, &body).await?;
    Ok((StatusCode::CREATED, axum::Json(view)))
}

async fn list(State(state): State<AppState>) -> ApiResult<axum::Json<Vec<PolicyView>>> {
    Ok(axum::Json(policies::list(&state.db).await?))
}

async fn get_one(State(state): State<AppState>, Path(id): Path<Uuid>) -> ApiResult<axum::Json<PolicyView>> {
    policies::get(&state.db, id).await?.map(axum::Json).ok_or(ApiError::NotFound("policy"))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct VersionRequest {
    /// The version; the latest when absent.
    #[serde(default)]
    version: Option<i32>,
    /// JSON parameters handed to the policy in every snapshot.
    #[serde(default = "empty_object")]
    params: serde_json::Value,
}

fn empty_object() -> serde_json::Value {
    serde_json::json!({})
}

async fn activate(
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
    Json(req): Json<VersionRequest>,
) -> ApiResult<axum::Json<PolicyView>> {
    let view = policies::activate(&state.db, id, req.version, req.params).await?;
    state.wake.wake();
    Ok(axum::Json(view))
}

async fn rollback(State(state): State<AppState>, Path(id): Path<Uuid>) -> ApiResult<axum::Json<PolicyView>> {
    let view = policies::rollback(&state.db, id).await?;
    state.wake.wake();
    Ok(axum::Json(view))
}

async fn set_limits(
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
    Json(limits): Json<PolicyLimits>,
) -> ApiResult<axum::Json<PolicyView>> {
    Ok(axum::Json(policies::set_limits(&state.db, id, &limits).await?))
}

async fn start_shadow(
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
    Json(req): Json<VersionRequest>,
) -> ApiResult<axum::Json<PolicyView>> {
    Ok(axum::Json(policies::start_shadow(&state.db, id, req.version, req.params).await?))
}

async fn stop_shadow(State(state): State<AppState>, Path(id): Path<Uuid>) -> ApiResult<StatusCode> {
    policies::stop_shadow(&state.db, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn delete_policy(State(state): State<AppState>, Path(id): Path<Uuid>) -> ApiResult<StatusCode> {
    policies::delete(&state.db, id, None).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn delete_version(
    State(state): State<AppState>,
    Path((id, version)): Path<(Uuid, i32)>,
) -> ApiResult<StatusCode> {
    policies::delete(&state.db, id, Some(version)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Dry-runs a stored version against the live fleet and queue.
async fn dry_run_version(
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
    Json(req): Json<VersionRequest>,
) -> ApiResult<axum::Json<DryRun>> {
    let version_id: Option<(Uuid,)> = sqlx::query_as(
        "SELECT v.id FROM policy_versions v JOIN policies p ON p.id = v.policy_id \
         WHERE v.policy_id = $1 AND p.deleted_at IS NULL AND v.deleted_at IS NULL \
         AND ($2::int IS NULL OR v.version = $2) ORDER BY v.version DESC LIMIT 1",
    )
    .bind(id)
    .bind(req.version)
    .fetch_optional(&state.db)
    .await?;
    let (version_id,) = version_id.ok_or(ApiError::NotFound("policy version"))?;
    let selected = state.policies.version(&state.db, version_id, req.params).await?;
    Ok(axum::Json(scheduler::dry_run(&state, &selected).await?))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DryRunQuery {
    /// JSON parameters for the policy, URL-encoded.
    #[serde(default)]
    params: Option<String>,
}

/// Dry-runs a module that is not stored (the body is the `.wasm`).
async fn dry_run_module(
    State(state): State<AppState>,
    Query(query): Query<DryRunQuery>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<axum::Json<DryRun>> {
    let body = module_body(&headers, body)?;
    let params = query.params.unwrap_or_else(|| "{}".into());
    let parsed: serde_json::Value = serde_json::from_str(&params)
        .map_err(|e| ApiError::bad_request("invalid_params", format!("params is not JSON: {e}")))?;
    if !parsed.is_object() {
        return Err(ApiError::bad_request("invalid_params", "params must be a JSON object"));
    }
    let selected = state.policies.compile_unstored(body.to_vec(), parsed.to_string()).await.map_err(|err| {
        ApiError::unprocessable("invalid_policy", format!("policy module refused ({}): {err}", err.kind()))
    })?;
    Ok(axum::Json(scheduler::dry_run(&state, &selected).await?))
}

async fn failures(State(state): State<AppState>, Path(id): Path<Uuid>) -> ApiResult<axum::Json<Vec<FailureView>>> {
    exists(&state, id).await?;
    Ok(axum::Json(policies::failures(&state.db, id).await?))
}

async fn logs(State(state): State<AppState>, Path(id): Path<Uuid>) -> ApiResult<axum::Json<Vec<LogView>>> {
    exists(&state, id).await?;
    Ok(axum::Json(policies::logs(&state.db, id).await?))
}

async fn shadow_results(
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
) -> ApiResult<axum::Json<Vec<ShadowResultView>>> {
    exists(&state, id).await?;
    Ok(axum::Json(policies::shadow_results(&state.db, id).await?))
}

async fn exists(state: &AppState, id: Uuid) -> ApiResult<()> {
    policies::get(&state.db, id).await?.map(|_| ()).ok_or(ApiError::NotFound("policy"))
}
