//! Policy modules and their lifecycle: upload a `.wasm` (checked and trial-evaluated before it is
//! stored), list, inspect, activate with parameters, roll back, delete, set limits, dry-run against
//! the live fleet, run in shadow, and read failures, logs and shadow comparisons.
//!
//! Who may do what: platform policies are managed by platform admins, a tenant's own policies by
//! that tenant's admins (a tenant admin's upload is a policy of their tenant). Anyone may see that
//! platform policies exist; their failures, logs and shadow results (which name other tenants'
//! work) and dry runs against the live fleet are for platform admins; limits are set by platform
//! admins. Another tenant's policy is not found.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use serde::Deserialize;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouterExt as _};
use utoipa_axum::routes;
use uuid::Uuid;

use airtime_policy_host::PolicyLimits;

use crate::api::extract::{Json, Path, Query};
use crate::api::openapi::ErrorResponse;
use crate::auth::Caller;
use crate::auth::audit::AuditActor;
use crate::config::Config;
use crate::error::{ApiError, ApiResult};
use crate::policies::{self, FailureView, LogView, PolicyView, ShadowResultView, VetError};
use crate::scheduler::{self, DryRun};
use crate::state::AppState;

pub fn routes(config: &Config) -> OpenApiRouter<AppState> {
    let module_limit = DefaultBodyLimit::max(config.max_policy_bytes);
    OpenApiRouter::new()
        .routes(routes!(upload).layer(module_limit))
        .routes(routes!(list))
        .routes(routes!(dry_run_module).layer(module_limit))
        .routes(routes!(get_one, delete_policy))
        .routes(routes!(activate))
        .routes(routes!(rollback))
        .routes(routes!(deactivate))
        .routes(routes!(set_limits))
        .routes(routes!(start_shadow, stop_shadow))
        .routes(routes!(dry_run_version))
        .routes(routes!(delete_version))
        .routes(routes!(failures))
        .routes(routes!(logs))
        .routes(routes!(shadow_results))
        .routes(routes!(what_if))
}

/// What the caller wants to do with a policy.
#[derive(Clone, Copy)]
enum Need {
    /// See that it exists and its versions.
    Read,
    /// Read what it did: failures, logs, shadow results (they name the work it decided on).
    Details,
    /// Change it: activate, roll back, shadow, delete.
    Manage,
}

/// Checks the caller's right to a policy and returns its owner (None: a platform policy). Another
/// tenant's policy is not found.
async fn authorize(state: &AppState, caller: &Caller, id: Uuid, need: Need) -> ApiResult<Option<Uuid>> {
    let owner = policies::owner(&state.db, id).await?;
    match (owner, need) {
        (Some(tenant), Need::Read | Need::Details) => caller.ensure_visible(tenant, "policy")?,
        (Some(tenant), Need::Manage) => caller.ensure_can_admin(tenant, "policy")?,
        (None, Need::Read) => {}
        (None, Need::Details | Need::Manage) => caller.require_platform_admin()?,
    }
    Ok(owner)
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct UploadQuery {
    /// The policy's name: 1 to 63 lowercase letters, digits or '-'.
    #[param(example = "my-policy")]
    name: String,
}

/// Why a module was not accepted, as the API says it: the module's fault (422), or come back
/// later because other uploads are compiling (429).
fn refused(err: VetError) -> ApiError {
    match err {
        VetError::Refused(err) => {
            ApiError::unprocessable("invalid_policy", format!("policy module refused ({}): {err}", err.kind()))
        }
        VetError::TooSlow { timeout } => ApiError::unprocessable(
            "invalid_policy",
            format!(
                "policy module refused (compile_timeout): compiling it took longer than {} ms",
                timeout.as_millis()
            ),
        ),
        VetError::Busy { retry_after } => ApiError::too_many_requests(retry_after),
    }
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

/// Upload a policy module as the next version of the named policy: a platform policy for a
/// platform admin, the tenant's own for a tenant admin.
#[utoipa::path(
    post,
    path = "/policies",
    tag = "policies",
    params(UploadQuery),
    request_body(content((Vec<u8> = "application/wasm"), (Vec<u8> = "application/octet-stream")), description = "The `.wasm` module"),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_admin"))),
    responses(
        (status = 200, description = "These bytes are a version of this policy already: nothing stored", body = PolicyView),
        (status = 400, description = "`invalid_name`: checked before the module is compiled", body = ErrorResponse),
        (status = 201, description = "Stored (checked and trial-evaluated first)", body = PolicyView),
        (status = 409, description = "A built-in policy's name; `policy_quota`: the tenant keeps its most versions or bytes", body = ErrorResponse),
        (status = 413, body = ErrorResponse),
        (status = 415, body = ErrorResponse),
        (status = 422, description = "The module was refused", body = ErrorResponse),
        (status = 429, description = "Other uploads are compiling; retry after the given time", body = ErrorResponse)
    )
)]
async fn upload(
    caller: Caller,
    State(state): State<AppState>,
    Query(query): Query<UploadQuery>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<(StatusCode, axum::Json<PolicyView>)> {
    caller.require_role(crate::auth::Role::TenantAdmin)?;
    let body = module_body(&headers, body)?;
    // What costs nothing is checked before what costs a compilation: the name, bytes the policy
    // has already (stored once), and the tenant's room.
    policies::check_name(&query.name)?;
    let tenant = caller.tenant_filter();
    if let Some(view) = policies::same_bytes(&state.db, tenant, &query.name, &policies::sha256_hex(&body)).await? {
        return Ok((StatusCode::OK, axum::Json(view)));
    }
    if let Some(tenant) = tenant {
        let config = &state.config;
        policies::check_tenant_room(
            &state.db,
            tenant,
            body.len(),
            config.policy_versions_per_tenant,
            config.policy_bytes_per_tenant,
        )
        .await?;
    }
    state.policies.vet(tenant, body.to_vec()).await.map_err(refused)?;
    let view =
        policies::store_upload(&state.db, caller.tenant_filter(), &query.name, &body, &AuditActor::from(&caller))
            .await?;
    Ok((StatusCode::CREATED, axum::Json(view)))
}

/// The platform's policies and the caller's tenant's own (every policy for platform admins).
#[utoipa::path(
    operation_id = "policies_list",
    get,
    path = "/policies",
    tag = "policies",
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 200, description = "Policies with their versions", body = [PolicyView]))
)]
async fn list(caller: Caller, State(state): State<AppState>) -> ApiResult<axum::Json<Vec<PolicyView>>> {
    Ok(axum::Json(policies::list(&state.db, caller.tenant_filter()).await?))
}

/// One policy with its versions.
#[utoipa::path(
    get,
    path = "/policies/{id}",
    tag = "policies",
    params(("id" = Uuid, Path, description = "Policy id")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 200, description = "The policy", body = PolicyView), (status = 404, body = ErrorResponse))
)]
async fn get_one(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
) -> ApiResult<axum::Json<PolicyView>> {
    authorize(&state, &caller, id, Need::Read).await?;
    policies::get(&state.db, id).await?.map(axum::Json).ok_or(ApiError::NotFound("policy"))
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct VersionRequest {
    /// The version; the latest when absent.
    #[serde(default)]
    version: Option<i32>,
    /// JSON parameters handed to the policy in every snapshot.
    #[serde(default = "empty_object")]
    #[schema(value_type = Object)]
    params: serde_json::Value,
}

fn empty_object() -> serde_json::Value {
    serde_json::json!({})
}

/// Make a version (the latest by default) the one that decides for the policy's scope.
#[utoipa::path(
    post,
    path = "/policies/{id}/activate",
    tag = "policies",
    params(("id" = Uuid, Path, description = "Policy id")),
    request_body(content = VersionRequest, example = json!({"params": {}})),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_admin"))),
    responses((status = 200, description = "Active", body = PolicyView), (status = 404, body = ErrorResponse), (status = 422, body = ErrorResponse))
)]
async fn activate(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
    Json(req): Json<VersionRequest>,
) -> ApiResult<axum::Json<PolicyView>> {
    authorize(&state, &caller, id, Need::Manage).await?;
    let view =
        policies::activate(&state.db, &state.policies, id, req.version, req.params, &AuditActor::from(&caller)).await?;
    state.wake.wake();
    Ok(axum::Json(view))
}

/// Stop a tenant's own policy deciding for its scope: the tenant's work is placed by the platform
/// policy again. Tenant admins for their own policies, platform admins.
#[utoipa::path(
    post,
    path = "/policies/{id}/deactivate",
    tag = "policies",
    params(("id" = Uuid, Path, description = "Policy id")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_admin"))),
    responses((status = 200, description = "No longer active", body = PolicyView), (status = 404, body = ErrorResponse), (status = 409, description = "Not active, or a platform policy (activate another instead)", body = ErrorResponse))
)]
async fn deactivate(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
) -> ApiResult<axum::Json<PolicyView>> {
    authorize(&state, &caller, id, Need::Manage).await?;
    let view = policies::deactivate(&state.db, id, &AuditActor::from(&caller)).await?;
    state.wake.wake();
    Ok(axum::Json(view))
}

/// Activate the version before the active one.
#[utoipa::path(
    post,
    path = "/policies/{id}/rollback",
    tag = "policies",
    params(("id" = Uuid, Path, description = "Policy id")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_admin"))),
    responses((status = 200, description = "Rolled back", body = PolicyView), (status = 404, body = ErrorResponse), (status = 409, description = "Not active, or no older version", body = ErrorResponse))
)]
async fn rollback(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
) -> ApiResult<axum::Json<PolicyView>> {
    authorize(&state, &caller, id, Need::Manage).await?;
    let view = policies::rollback(&state.db, &state.policies, id, &AuditActor::from(&caller)).await?;
    state.wake.wake();
    Ok(axum::Json(view))
}

/// Set the policy's per-evaluation limits (platform admins).
#[utoipa::path(
    put,
    path = "/policies/{id}/limits",
    tag = "policies",
    params(("id" = Uuid, Path, description = "Policy id")),
    request_body(content = Object, description = "PolicyLimits (see docs/policy-abi.md); absent fields keep the defaults", example = json!({})),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses((status = 200, description = "Set", body = PolicyView), (status = 404, body = ErrorResponse), (status = 422, body = ErrorResponse))
)]
async fn set_limits(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
    Json(limits): Json<PolicyLimits>,
) -> ApiResult<axum::Json<PolicyView>> {
    caller.require_platform_admin()?;
    authorize(&state, &caller, id, Need::Manage).await?;
    Ok(axum::Json(policies::set_limits(&state.db, id, &limits, &AuditActor::from(&caller)).await?))
}

/// Evaluate a version in shadow beside the active policy of its scope (never applied).
#[utoipa::path(
    put,
    path = "/policies/{id}/shadow",
    tag = "policies",
    params(("id" = Uuid, Path, description = "Policy id")),
    request_body(content = VersionRequest, example = json!({"params": {}})),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_admin"))),
    responses((status = 200, description = "In shadow", body = PolicyView), (status = 404, body = ErrorResponse))
)]
async fn start_shadow(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
    Json(req): Json<VersionRequest>,
) -> ApiResult<axum::Json<PolicyView>> {
    authorize(&state, &caller, id, Need::Manage).await?;
    Ok(axum::Json(policies::start_shadow(&state.db, id, req.version, req.params, &AuditActor::from(&caller)).await?))
}

/// Replay the recorded history of the last hours against this policy and against the active one,
/// in the background: answers the queued run (`GET /what-if/{run}` for its progress and, when it
/// succeeds, both score sets). Whoever may manage the policy; a tenant's caller gets the fleet's
/// totals and its own tenant's scores.
#[utoipa::path(
    post,
    path = "/policies/{id}/what-if",
    tag = "policies",
    params(("id" = Uuid, Path, description = "Policy id")),
    request_body(content = crate::what_if::WhatIfRequest, example = json!({"hours": 24})),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_admin"))),
    responses(
        (status = 202, description = "Queued", body = crate::what_if::WhatIfView),
        (status = 404, body = ErrorResponse),
        (status = 409, description = "`what_if_limit`: the tenant has its most runs queued or running", body = ErrorResponse),
        (status = 422, body = ErrorResponse)
    )
)]
async fn what_if(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
    Json(req): Json<crate::what_if::WhatIfRequest>,
) -> ApiResult<(StatusCode, [(header::HeaderName, String); 1], axum::Json<crate::what_if::WhatIfView>)> {
    let owner = authorize(&state, &caller, id, Need::Manage).await?;
    let run = crate::what_if::create(&state.db, id, owner, &req, &caller.scope(), state.config.what_if_runs_per_tenant)
        .await?;
    let location = format!("/api/v1/what-if/{}", run.id);
    Ok((StatusCode::ACCEPTED, [(header::LOCATION, location)], axum::Json(run)))
}

/// Stop the shadow evaluation of this policy.
#[utoipa::path(
    delete,
    path = "/policies/{id}/shadow",
    tag = "policies",
    params(("id" = Uuid, Path, description = "Policy id")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_admin"))),
    responses((status = 204, description = "Stopped"), (status = 404, body = ErrorResponse))
)]
async fn stop_shadow(caller: Caller, State(state): State<AppState>, Path(id): Path<Uuid>) -> ApiResult<StatusCode> {
    authorize(&state, &caller, id, Need::Manage).await?;
    policies::stop_shadow(&state.db, id, &AuditActor::from(&caller)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Delete a policy (not while a version is active or in shadow).
#[utoipa::path(
    delete,
    path = "/policies/{id}",
    tag = "policies",
    params(("id" = Uuid, Path, description = "Policy id")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_admin"))),
    responses((status = 204, description = "Deleted"), (status = 404, body = ErrorResponse), (status = 409, body = ErrorResponse))
)]
async fn delete_policy(caller: Caller, State(state): State<AppState>, Path(id): Path<Uuid>) -> ApiResult<StatusCode> {
    authorize(&state, &caller, id, Need::Manage).await?;
    policies::delete(&state.db, id, None, &AuditActor::from(&caller)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Delete one version (not the active or shadowed one).
#[utoipa::path(
    delete,
    path = "/policies/{id}/versions/{version}",
    tag = "policies",
    params(("id" = Uuid, Path, description = "Policy id"), ("version" = i32, Path, description = "Version number")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_admin"))),
    responses((status = 204, description = "Deleted"), (status = 404, body = ErrorResponse), (status = 409, body = ErrorResponse))
)]
async fn delete_version(
    caller: Caller,
    State(state): State<AppState>,
    Path((id, version)): Path<(Uuid, i32)>,
) -> ApiResult<StatusCode> {
    authorize(&state, &caller, id, Need::Manage).await?;
    policies::delete(&state.db, id, Some(version), &AuditActor::from(&caller)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Dry-run a stored version against the live fleet and queue (platform admins: the snapshot holds
/// every tenant's work).
#[utoipa::path(
    post,
    path = "/policies/{id}/dry-run",
    tag = "policies",
    params(("id" = Uuid, Path, description = "Policy id")),
    request_body(content = VersionRequest, example = json!({"params": {}})),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses((status = 200, description = "What it would decide; nothing applied", body = Object), (status = 404, body = ErrorResponse))
)]
async fn dry_run_version(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
    Json(req): Json<VersionRequest>,
) -> ApiResult<axum::Json<DryRun>> {
    caller.require_platform_admin()?;
    let mut conn = state.db.acquire().await?;
    let version_id = crate::policies::store::version_id(&mut conn, id, req.version).await?;
    drop(conn);
    let selected = state.policies.version(&state.db, version_id, req.params).await?;
    Ok(axum::Json(scheduler::dry_run(&state.scheduler(), &selected).await?))
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct DryRunQuery {
    /// JSON parameters for the policy, URL-encoded.
    #[serde(default)]
    params: Option<String>,
}

/// Dry-run a module that is not stored (the body is the `.wasm`) against the live fleet and queue
/// (platform admins).
#[utoipa::path(
    post,
    path = "/policies/dry-run",
    tag = "policies",
    params(DryRunQuery),
    request_body(content((Vec<u8> = "application/wasm"), (Vec<u8> = "application/octet-stream")), description = "The `.wasm` module"),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses((status = 200, description = "What it would decide; nothing applied or stored", body = Object), (status = 422, body = ErrorResponse))
)]
async fn dry_run_module(
    caller: Caller,
    State(state): State<AppState>,
    Query(query): Query<DryRunQuery>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<axum::Json<DryRun>> {
    caller.require_platform_admin()?;
    let body = module_body(&headers, body)?;
    let params = query.params.unwrap_or_else(|| "{}".into());
    let parsed: serde_json::Value = serde_json::from_str(&params)
        .map_err(|e| ApiError::bad_request("invalid_params", format!("params is not JSON: {e}")))?;
    if !parsed.is_object() {
        return Err(ApiError::bad_request("invalid_params", "params must be a JSON object"));
    }
    let selected = state.policies.compile_unstored(body.to_vec(), parsed.to_string()).await.map_err(refused)?;
    Ok(axum::Json(scheduler::dry_run(&state.scheduler(), &selected).await?))
}

/// The policy's failed evaluations, newest first.
#[utoipa::path(
    get,
    path = "/policies/{id}/failures",
    tag = "policies",
    params(("id" = Uuid, Path, description = "Policy id")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 200, description = "Failures (a platform policy's: platform admins only)", body = [FailureView]), (status = 404, body = ErrorResponse))
)]
async fn failures(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
) -> ApiResult<axum::Json<Vec<FailureView>>> {
    authorize(&state, &caller, id, Need::Details).await?;
    Ok(axum::Json(policies::failures(&state.db, id).await?))
}

/// What the policy logged from inside, newest first.
#[utoipa::path(
    operation_id = "policies_logs",
    get,
    path = "/policies/{id}/logs",
    tag = "policies",
    params(("id" = Uuid, Path, description = "Policy id")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 200, description = "Logs (a platform policy's: platform admins only)", body = [LogView]), (status = 404, body = ErrorResponse))
)]
async fn logs(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
) -> ApiResult<axum::Json<Vec<LogView>>> {
    authorize(&state, &caller, id, Need::Details).await?;
    Ok(axum::Json(policies::logs(&state.db, id).await?))
}

/// How the shadow version's decisions compared with the active policy's, newest first.
#[utoipa::path(
    get,
    path = "/policies/{id}/shadow-results",
    tag = "policies",
    params(("id" = Uuid, Path, description = "Policy id")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 200, description = "Comparisons (a platform policy's: platform admins only)", body = [ShadowResultView]), (status = 404, body = ErrorResponse))
)]
async fn shadow_results(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
) -> ApiResult<axum::Json<Vec<ShadowResultView>>> {
    authorize(&state, &caller, id, Need::Details).await?;
    Ok(axum::Json(policies::shadow_results(&state.db, id).await?))
}
