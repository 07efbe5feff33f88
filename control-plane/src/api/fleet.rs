//! Nodes and GPUs, with their latest telemetry. Every authenticated caller sees the whole fleet, but
//! which workload holds a GPU only for their own tenant's work (platform admins see everything):
//! other tenants appear in aggregate, as held GPUs.

use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::api::extract::{Json, Path, Query};
use crate::api::openapi::ErrorResponse;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::fleet::maintenance::{self, Hold};
use crate::fleet::node_history::NodeHistory;
use crate::fleet::{self, GpuHistory, GpuView, HISTORY_RULES, NodeView};
use crate::state::AppState;
use crate::time_range::TimeRange;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_nodes))
        .routes(routes!(get_node))
        .routes(routes!(cordon_node))
        .routes(routes!(drain_node))
        .routes(routes!(uncordon_node))
        .routes(routes!(node_history))
        .routes(routes!(list_gpus))
        .routes(routes!(get_gpu))
        .routes(routes!(clear_gpu_fault))
        .routes(routes!(gpu_history))
        .routes(routes!(summary))
}

/// The fleet at a glance: nodes by state, GPUs held and allocated, mean utilisation, what the fleet
/// and its unheld GPUs cost an hour, workloads by state and the commonest reasons work waits (the
/// caller's tenant's workloads; every tenant's for platform admins). A few hundred bytes whatever
/// the fleet's size.
#[utoipa::path(
    operation_id = "fleet_summary",
    get,
    path = "/fleet/summary",
    tag = "fleet",
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 200, description = "The summary", body = fleet::FleetSummary))
)]
async fn summary(caller: Caller, State(state): State<AppState>) -> ApiResult<axum::Json<fleet::FleetSummary>> {
    let tenant = if caller.is_platform_admin() { None } else { Some(caller.tenant_filter().unwrap_or(Uuid::nil())) };
    Ok(axum::Json(fleet::summary(&state.db, tenant).await?))
}

fn redact_node(caller: &Caller, node: &mut NodeView) {
    for gpu in &mut node.gpus {
        gpu.redact_holder(|t| caller.can_read_tenant(t));
    }
    for work in node.work.iter_mut().flatten() {
        work.redact(|t| caller.can_read_tenant(t));
    }
}

/// A cordon: why (kept on the node and in the audit log).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CordonRequest {
    /// Why, at most 500 characters ("GPU 3 replaced on Tuesday").
    pub reason: Option<String>,
}

/// A drain: why, and how long the work that is left to finish may take.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DrainRequest {
    /// Why, at most 500 characters.
    pub reason: Option<String>,
    /// Seconds from now after which the work still on the node (what is neither checkpointable,
    /// preemptible nor a service replica) is stopped and requeued too; at most a week. Absent:
    /// that work is left to finish.
    pub deadline_s: Option<u32>,
}

/// Applies `hold` to node `id` and answers the node as it is now, with what still runs there.
async fn hold_node(
    caller: &Caller,
    state: &AppState,
    id: Uuid,
    hold: Hold,
    reason: Option<&str>,
) -> ApiResult<axum::Json<NodeView>> {
    let stopped = maintenance::set_hold(&state.db, &caller.scope(), id, hold, reason).await?;
    // Placements elsewhere may follow (and, on uncordon, onto it); stopped work changes the
    // node's desired state.
    if stopped > 0 {
        state.desired.announce();
    }
    state.wake.wake();
    let mut node = fleet::get_node(&state.db, id).await?.ok_or(ApiError::NotFound("node"))?;
    redact_node(caller, &mut node);
    Ok(axum::Json(node))
}

/// Cordons a node: it takes no new work (the scheduler's check refuses any placement there) and
/// its work runs on. The hold survives its agent's restarts and the control plane's; a drain in
/// progress stops moving work. Audited.
#[utoipa::path(
    post,
    path = "/nodes/{id}/cordon",
    tag = "fleet",
    params(("id" = Uuid, Path, description = "Node id")),
    request_body(content = CordonRequest, example = json!({"reason": "fan replacement"})),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses(
        (status = 200, description = "The node, cordoned", body = NodeView),
        (status = 403, body = ErrorResponse),
        (status = 404, body = ErrorResponse),
        (status = 422, body = ErrorResponse)
    )
)]
async fn cordon_node(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
    Json(req): Json<CordonRequest>,
) -> ApiResult<axum::Json<NodeView>> {
    hold_node(&caller, &state, id, Hold::Cordon, req.reason.as_deref()).await
}

/// Drains a node: cordons it and moves its work off — checkpointable and preemptible work is
/// stopped with the checkpoint signal and requeued, service replicas are replaced on other nodes
/// before they stop, other work is left to finish (stopped and requeued at `deadline_s` if given).
/// `GET /nodes/{id}` shows what is left (`work`, `maintenance.remaining`, `maintenance.drained`).
/// Audited.
#[utoipa::path(
    post,
    path = "/nodes/{id}/drain",
    tag = "fleet",
    params(("id" = Uuid, Path, description = "Node id")),
    request_body(content = DrainRequest, example = json!({"reason": "kernel upgrade", "deadline_s": 3600})),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses(
        (status = 200, description = "The node, draining, with what still runs there", body = NodeView),
        (status = 403, body = ErrorResponse),
        (status = 404, body = ErrorResponse),
        (status = 422, body = ErrorResponse)
    )
)]
async fn drain_node(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
    Json(req): Json<DrainRequest>,
) -> ApiResult<axum::Json<NodeView>> {
    hold_node(&caller, &state, id, Hold::Drain { deadline_s: req.deadline_s }, req.reason.as_deref()).await
}

/// Lifts a cordon or drain: the node takes work again (work already stopped stays requeued).
/// Audited.
#[utoipa::path(
    post,
    path = "/nodes/{id}/uncordon",
    tag = "fleet",
    params(("id" = Uuid, Path, description = "Node id")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses(
        (status = 200, description = "The node, taking work", body = NodeView),
        (status = 403, body = ErrorResponse),
        (status = 404, body = ErrorResponse)
    )
)]
async fn uncordon_node(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
) -> ApiResult<axum::Json<NodeView>> {
    hold_node(&caller, &state, id, Hold::Uncordon, None).await
}

/// Every node with its GPUs and latest telemetry.
#[utoipa::path(
    get,
    path = "/nodes",
    tag = "fleet",
    params(fleet::FleetPage),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 200, description = "The fleet", body = [NodeView]))
)]
async fn list_nodes(
    caller: Caller,
    State(state): State<AppState>,
    Query(page): Query<fleet::FleetPage>,
) -> ApiResult<axum::Json<Vec<NodeView>>> {
    let mut nodes = fleet::list_nodes(&state.db, &page).await?;
    nodes.iter_mut().for_each(|n| redact_node(&caller, n));
    Ok(axum::Json(nodes))
}

/// One node with its GPUs and latest telemetry, its operator's hold (cordon or drain) and what
/// runs on it (`work`: each workload and what a drain does with it).
#[utoipa::path(
    get,
    path = "/nodes/{id}",
    tag = "fleet",
    params(("id" = Uuid, Path, description = "Node id")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 200, description = "The node", body = NodeView), (status = 404, body = ErrorResponse))
)]
async fn get_node(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
) -> ApiResult<axum::Json<NodeView>> {
    let mut node = fleet::get_node(&state.db, id).await?.ok_or(ApiError::NotFound("node"))?;
    redact_node(&caller, &mut node);
    Ok(axum::Json(node))
}

/// Every GPU with its latest telemetry and whether it is held.
#[utoipa::path(
    get,
    path = "/gpus",
    tag = "fleet",
    params(fleet::GpuPage),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 200, description = "The GPUs", body = [GpuView]))
)]
async fn list_gpus(
    caller: Caller,
    State(state): State<AppState>,
    Query(page): Query<fleet::GpuPage>,
) -> ApiResult<axum::Json<Vec<GpuView>>> {
    let mut gpus = fleet::list_gpus(&state.db, &page).await?;
    gpus.iter_mut().for_each(|g| g.redact_holder(|t| caller.can_read_tenant(t)));
    Ok(axum::Json(gpus))
}

/// One GPU.
#[utoipa::path(
    get,
    path = "/gpus/{id}",
    tag = "fleet",
    params(("id" = Uuid, Path, description = "GPU id")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 200, description = "The GPU", body = GpuView), (status = 404, body = ErrorResponse))
)]
async fn get_gpu(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
) -> ApiResult<axum::Json<GpuView>> {
    let mut gpu = fleet::get_gpu(&state.db, id).await?.ok_or(ApiError::NotFound("gpu"))?;
    gpu.redact_holder(|t| caller.can_read_tenant(t));
    Ok(axum::Json(gpu))
}

/// Clearing a GPU's quarantine: why (kept in the audit log).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClearFaultRequest {
    /// Why, at most 500 characters ("reseated, passed dcgmi diag -r 3").
    pub reason: Option<String>,
}

/// Lifts a GPU's quarantine after its repair: the scheduler places work on it again from the next
/// cycle (a fault that persists is reported again at the agent's next heartbeat and quarantines
/// it again). A quarantine outlives agent restarts; a GPU replaced at the same index (another
/// UUID) comes back without one. A drain Airtime started for the node's faults stays until the
/// node is uncordoned. Clearing a healthy GPU changes nothing. Audited.
#[utoipa::path(
    post,
    path = "/gpus/{id}/clear-fault",
    tag = "fleet",
    params(("id" = Uuid, Path, description = "GPU id")),
    request_body(content = ClearFaultRequest, example = json!({"reason": "reseated, passed dcgmi diag -r 3"})),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses(
        (status = 200, description = "The GPU, taking work", body = GpuView),
        (status = 403, body = ErrorResponse),
        (status = 404, body = ErrorResponse),
        (status = 422, body = ErrorResponse)
    )
)]
async fn clear_gpu_fault(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
    Json(req): Json<ClearFaultRequest>,
) -> ApiResult<axum::Json<GpuView>> {
    if fleet::health::clear_fault(&state.db, &caller.scope(), id, req.reason.as_deref()).await? {
        state.wake.wake();
    }
    let mut gpu = fleet::get_gpu(&state.db, id).await?.ok_or(ApiError::NotFound("gpu"))?;
    gpu.redact_holder(|t| caller.can_read_tenant(t));
    Ok(axum::Json(gpu))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct HistoryParams {
    /// Start of the range (RFC 3339); an hour before `to` when absent.
    pub from: Option<DateTime<Utc>>,
    /// End of the range (RFC 3339); now when absent (a later time is now).
    pub to: Option<DateTime<Utc>>,
    /// Width of each point, seconds (the range in 300 points by default; at most 1000 points).
    pub step_s: Option<u32>,
}

/// One GPU's utilisation, memory, temperature and power over time, bucketed (mean, most memory),
/// as long as telemetry is kept (`--telemetry-retention-hours`).
#[utoipa::path(
    get,
    path = "/gpus/{id}/history",
    tag = "fleet",
    params(("id" = Uuid, Path, description = "GPU id"), HistoryParams),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses(
        (status = 200, description = "The GPU's telemetry over time", body = GpuHistory),
        (status = 400, description = "A range or step that cannot be answered", body = ErrorResponse),
        (status = 404, body = ErrorResponse)
    )
)]
async fn gpu_history(
    _caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
    Query(p): Query<HistoryParams>,
) -> ApiResult<axum::Json<GpuHistory>> {
    let range = TimeRange::parse(p.from, p.to, p.step_s, HISTORY_RULES, Utc::now())
        .map_err(|m| ApiError::bad_request("invalid_query", m))?;
    let history = fleet::gpu_history(&state.db, id, range).await?.ok_or(ApiError::NotFound("gpu"))?;
    Ok(axum::Json(history))
}

/// One node's CPU utilisation and memory over time, bucketed (mean CPU, most and mean memory), as
/// long as telemetry is kept (`--telemetry-retention-hours`). Its GPUs are `GET /nodes/{id}`'s.
#[utoipa::path(
    get,
    path = "/nodes/{id}/history",
    tag = "fleet",
    params(("id" = Uuid, Path, description = "Node id"), HistoryParams),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses(
        (status = 200, description = "The node's telemetry over time", body = NodeHistory),
        (status = 400, description = "A range or step that cannot be answered", body = ErrorResponse),
        (status = 404, body = ErrorResponse)
    )
)]
async fn node_history(
    _caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
    Query(p): Query<HistoryParams>,
) -> ApiResult<axum::Json<NodeHistory>> {
    let range = TimeRange::parse(p.from, p.to, p.step_s, HISTORY_RULES, Utc::now())
        .map_err(|m| ApiError::bad_request("invalid_query", m))?;
    let history = fleet::node_history::node_history(&state.db, id, range).await?.ok_or(ApiError::NotFound("node"))?;
    Ok(axum::Json(history))
}
