//! The node agents' side of the API (see docs/agent-protocol.md): registration, telemetry (the
//! heartbeat), the long-poll for the node's desired state, and workload events. Every call carries
//! the node's own credential ([`NodeCaller`]): an agent registers only under the name it enrolled
//! with and acts only for its own node (another node id is answered `404 node_not_found`).

use std::time::Duration;

use airtime_protocol::agent::{DesiredState, EventKind, EventReport, LogBatch, Registered};
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::api::extract::{Json, Path, Query};
use crate::api::openapi::ErrorResponse;
use crate::auth::NodeCaller;
use crate::error::{ApiError, ApiResult};
use crate::fleet::registry::{self, Registration, TelemetryReport};
use crate::fleet::{desired, health};
use crate::state::AppState;
use crate::workloads::transitions::{self, AgentEvent, EventOutcome};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(register))
        .routes(routes!(telemetry))
        .routes(routes!(assignments))
        .routes(routes!(event))
        .routes(routes!(logs))
}

/// Register the node (again): idempotent by name; what the node ran before is requeued.
#[utoipa::path(
    post,
    path = "/register",
    tag = "agent",
    request_body(content = Registration, example = json!({
        "name": "gpu-node-7", "hostname": "gpu-node-7.example", "cpu_millis": 64000, "memory_mb": 524288,
        "agent_version": "0.1.0", "gpu_source": "simulated",
        "gpus": [{"index": 0, "model": "H100-SXM", "memory_mb": 81920, "simulated": true}]
    })),
    security(("node_credential" = [])),
    extensions(("x-airtime-access" = json!("agent"))),
    responses(
        (status = 200, description = "Registered", body = Registered),
        (status = 404, description = "`node_not_found`: the credential was enrolled for another name", body = ErrorResponse),
        (status = 422, body = ErrorResponse)
    )
)]
async fn register(
    node: NodeCaller,
    State(state): State<AppState>,
    Json(req): Json<Registration>,
) -> ApiResult<axum::Json<Registered>> {
    registry::check_registration(&req).map_err(|m| ApiError::unprocessable("invalid_registration", m))?;
    node.ensure_node_name(&req.name)?;
    let node_id = registry::register(&state.db, &req).await?;
    // The credential is bound to the node's id from now on (ids are stable per name).
    registry::bind_credential(&state.db, node_id, node.credential_id).await?;
    tracing::info!(node = %req.name, %node_id, gpus = req.gpus.len(), source = ?req.gpu_source, "node registered");
    state.desired.announce();
    state.wake.wake();
    Ok(axum::Json(Registered {
        node_id,
        heartbeat_interval_ms: state.config.heartbeat_interval_ms,
        lease_ms: Some(state.config.node_fence_after_ms),
    }))
}

/// Telemetry, which doubles as the heartbeat.
#[utoipa::path(
    post,
    path = "/nodes/{node_id}/telemetry",
    tag = "agent",
    params(("node_id" = Uuid, Path, description = "The agent's own node")),
    request_body(content = TelemetryReport, example = json!({"cpu_util": 0.25, "memory_used_mb": 4096, "gpus": []})),
    security(("node_credential" = [])),
    extensions(("x-airtime-access" = json!("agent"))),
    responses(
        (status = 204, description = "Recorded"),
        (status = 404, description = "`node_not_found`: register again", body = ErrorResponse),
        (status = 422, body = ErrorResponse)
    )
)]
async fn telemetry(
    _node: NodeCaller,
    State(state): State<AppState>,
    Path(node_id): Path<Uuid>,
    Json(mut report): Json<TelemetryReport>,
) -> ApiResult<StatusCode> {
    registry::check_telemetry(&report).map_err(|m| ApiError::unprocessable("invalid_telemetry", m))?;
    // Serving replicas' reads go to their services apart from the batched write.
    let replicas = std::mem::take(&mut report.replicas);
    // A faulty GPU (rare) is quarantined apart from the batched write.
    let faulty = report.gpus.iter().any(|g| !g.faults.is_empty()).then(|| report.gpus.clone());
    // Written with whatever else arrived meanwhile, in one transaction; answered once committed.
    if !state.telemetry.record(node_id, report).await.map_err(crate::domain::Error::from)? {
        return Err(node_not_found());
    }
    if let Some(gpus) = faulty
        && health::record_faults(&state.db, node_id, &gpus).await? > 0
    {
        // Its stopped work changes the node's desired state; the loop places it elsewhere.
        state.desired.announce();
        state.wake.wake();
    }
    if !replicas.is_empty() {
        crate::services::serving::ingest(&state.db, node_id, &replicas).await?;
    }
    Ok(StatusCode::NO_CONTENT)
}

fn node_not_found() -> ApiError {
    ApiError::NodeNotFound
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct AssignmentsQuery {
    #[serde(default)]
    after: u64,
    #[serde(default)]
    wait_ms: u64,
}

/// Long-poll: answers at once when the node's desired state is newer than `after`, else waits
/// (woken as soon as a decision commits) up to `wait_ms`.
#[utoipa::path(
    get,
    path = "/nodes/{node_id}/assignments",
    tag = "agent",
    params(("node_id" = Uuid, Path, description = "The agent's own node"), AssignmentsQuery),
    security(("node_credential" = [])),
    extensions(("x-airtime-access" = json!("agent"))),
    responses(
        (status = 200, description = "The desired state", body = DesiredState),
        (status = 404, description = "`node_not_found`: register again", body = ErrorResponse)
    )
)]
async fn assignments(
    _node: NodeCaller,
    State(state): State<AppState>,
    Path(node_id): Path<Uuid>,
    Query(q): Query<AssignmentsQuery>,
) -> ApiResult<axum::Json<DesiredState>> {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(q.wait_ms.min(crate::config::MAX_LONG_POLL_MS));
    // Subscribe before reading, so a change between the read and the wait is not missed.
    let mut changes = state.desired.subscribe();
    // Asking for a version newer than `after` says the agent has `after`: the gang members it
    // showed are acknowledged, and a gang whose members all are is released on every node.
    if q.after > 0 && !crate::workloads::gangs::acknowledge(&state.db, node_id, q.after).await?.is_empty() {
        state.desired.announce();
    }
    loop {
        let version = desired::version(&state.db, node_id).await?.ok_or_else(node_not_found)?;
        // A replica shutting down answers at once: the agent asks again, through the balancer,
        // of a replica that stays.
        let now = tokio::time::Instant::now();
        if version > q.after || q.after == 0 || now >= deadline || state.shutdown.is_cancelled() {
            return Ok(axum::Json(desired::state(&state.db, node_id, version).await?));
        }
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => {}
            _ = state.shutdown.cancelled() => {}
            changed = changes.changed() => { if changed.is_err() { tokio::time::sleep_until(deadline).await; } }
        }
    }
}

/// A workload event: started, exited, failed to start.
#[utoipa::path(
    post,
    path = "/nodes/{node_id}/workloads/{workload_id}/events",
    tag = "agent",
    params(
        ("node_id" = Uuid, Path, description = "The agent's own node"),
        ("workload_id" = Uuid, Path, description = "A workload assigned to that node")
    ),
    request_body(content = EventReport, example = json!({"attempt": 1, "event": "started", "pid": 4242})),
    security(("node_credential" = [])),
    extensions(("x-airtime-access" = json!("agent"))),
    responses(
        (status = 204, description = "Applied (or already known)"),
        (status = 404, description = "Not a workload of this node", body = ErrorResponse),
        (status = 409, description = "`stale_attempt`: the attempt is over; `attempt_token_mismatch`: not the token the attempt was assigned with (nothing changed)", body = ErrorResponse)
    )
)]
async fn event(
    _node: NodeCaller,
    State(state): State<AppState>,
    Path((node_id, workload_id)): Path<(Uuid, Uuid)>,
    Json(report): Json<EventReport>,
) -> ApiResult<StatusCode> {
    let message = report.bounded_message();
    let event = match report.event {
        EventKind::Started => AgentEvent::Started { pid: report.pid },
        EventKind::Exited => {
            AgentEvent::Exited { exit_code: report.exit_code, signal: report.signal, message, requeue: report.requeue }
        }
        EventKind::FailedToStart => AgentEvent::FailedToStart { message: message.unwrap_or_default() },
    };
    let attempt = i32::try_from(report.attempt)
        .map_err(|_| ApiError::unprocessable("invalid_event", "attempt is out of range"))?;
    // A token that is not a token matches nothing.
    let token = report.attempt_token.as_deref().map(|t| t.parse::<Uuid>().unwrap_or(Uuid::nil()));
    let (outcome, freed) =
        transitions::record_agent_event(&state.db, node_id, workload_id, attempt, token, &event).await?;
    // A gang member that left its node takes the rest of its gang with it (the fleet watch's sweep
    // does it too, should this fail).
    let gang_moved = freed
        && crate::workloads::gangs::follow_member(&state.db, workload_id).await.unwrap_or_else(|err| {
            tracing::warn!(error = %err, %workload_id, "stopping the rest of a gang; the fleet watch will retry");
            false
        });
    if freed || gang_moved {
        // Resources came free: schedule again now, and tell the agent its state changed.
        state.desired.announce();
        state.wake.wake();
    }
    match outcome {
        EventOutcome::Applied => Ok(StatusCode::NO_CONTENT),
        EventOutcome::Unchanged => Ok(StatusCode::NO_CONTENT),
        EventOutcome::StaleAttempt { current } => Err(ApiError::conflict(
            "stale_attempt",
            format!("attempt {} is over; the current attempt is {current}", report.attempt),
        )),
        EventOutcome::NotFound => Err(ApiError::NotFound("workload on this node")),
        EventOutcome::TokenMismatch => Err(ApiError::conflict(
            "attempt_token_mismatch",
            format!(
                "the event does not carry the token attempt {} was assigned with: only the agent told to run it reports \
                 for it",
                report.attempt
            ),
        )),
    }
}

/// Workloads' output, in bounded chunks: stored once per chunk (a batch sent again is answered
/// the same), within the retention limits per workload and per tenant. Chunks of workloads this
/// node did not run are ignored and counted.
#[utoipa::path(
    operation_id = "agent_logs",
    post,
    path = "/nodes/{node_id}/logs",
    tag = "agent",
    params(("node_id" = Uuid, Path, description = "The agent's own node")),
    request_body(content = LogBatch, example = json!({"chunks": [{"workload_id": "00000000-0000-0000-0000-000000000000",
        "attempt": 1, "stream": "stdout", "seq": 0, "text": "epoch 1: loss 0.42\n"}]})),
    security(("node_credential" = [])),
    extensions(("x-airtime-access" = json!("agent"))),
    responses(
        (status = 200, description = "Stored", body = crate::workloads::logs::Stored),
        (status = 404, body = ErrorResponse),
        (status = 422, body = ErrorResponse)
    )
)]
async fn logs(
    _node: NodeCaller,
    State(state): State<AppState>,
    Path(node_id): Path<Uuid>,
    Json(batch): Json<LogBatch>,
) -> ApiResult<axum::Json<crate::workloads::logs::Stored>> {
    crate::workloads::logs::check(&batch).map_err(|m| ApiError::unprocessable("invalid_logs", m))?;
    let stored = crate::workloads::logs::store(&state.db, node_id, &batch, state.config.log_limits()).await?;
    Ok(axum::Json(stored))
}
