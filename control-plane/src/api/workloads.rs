//! Submit, list, inspect and cancel workloads. Everything is scoped to the caller's tenant
//! (platform admins see every tenant); another tenant's workload is not found.

use axum::extract::State;
use axum::http::{StatusCode, header};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::api::extract::{Json, Path, Query};
use crate::api::openapi::ErrorResponse;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::workloads::logs::{self as workload_logs, LogQuery, Logs};
use crate::workloads::{self, IdempotencyKey, SubmitWorkload, WorkloadDetail, WorkloadFilter, WorkloadView};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(submit, list))
        .routes(routes!(detail))
        .routes(routes!(cancel))
        .routes(routes!(logs))
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
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes a retry safe: the same key (per tenant, for a day) with the same request returns the workload the first request created (`Idempotent-Replayed: true`) instead of queueing it twice; with a different request it is refused (422 `idempotency_key_reused`). 1 to 255 visible ASCII characters.")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_member"))),
    responses(
        (status = 201, description = "Queued (or, for a retried key, the workload the first request queued)", body = WorkloadView),
        (status = 422, description = "Invalid, an unknown tenant, or an Idempotency-Key used for another request", body = ErrorResponse)
    )
)]
async fn submit(
    caller: Caller,
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    Json(req): Json<SubmitWorkload>,
) -> ApiResult<(StatusCode, axum::http::HeaderMap, axum::Json<WorkloadView>)> {
    let key = match headers.get("idempotency-key") {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .map_err(|_| "Idempotency-Key must be 1 to 255 visible ASCII characters".to_owned())
                .and_then(IdempotencyKey::parse)
                .map_err(|m| ApiError::bad_request("invalid_idempotency_key", m))?,
        ),
    };
    let (view, replayed) = workloads::submit(
        &state.db,
        &req,
        &caller.scope(),
        key.as_ref(),
        &workloads::SubmitRules {
            allowed_mounts: &state.config.container_mount_prefixes,
            usage_hold: state.config.telemetry_hold(),
        },
    )
    .await?;
    let mut answer_headers = axum::http::HeaderMap::new();
    if replayed {
        answer_headers.insert("idempotent-replayed", axum::http::HeaderValue::from_static("true"));
    } else {
        state.wake.wake();
    }
    Ok((StatusCode::CREATED, answer_headers, axum::Json(view)))
}

/// The caller's tenant's workloads, most recent first (every tenant's for platform admins).
#[utoipa::path(
    operation_id = "workloads_list",
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
    operation_id = "workloads_detail",
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
    Ok(axum::Json(workloads::detail(&state.db, id, &caller.scope()).await?))
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
    let (view, node_changed) = workloads::cancel(&state.db, id, &caller.scope()).await?;
    if node_changed {
        state.desired.announce();
    }
    state.wake.wake();
    Ok((StatusCode::ACCEPTED, axum::Json(view)))
}

/// A workload's output: each attempt's stdout and stderr as its agent shipped it, oldest first
/// (`tail` for the last lines, `after` for what came since an earlier answer's `cursor`). With
/// `follow=true` the answer is JSON Lines — one line object each, as they arrive — and ends when
/// the workload has ended and its output is in, or after `wait_s` (follow on with `after` set to
/// the last line's `cursor`).
#[utoipa::path(
    operation_id = "workloads_logs",
    get,
    path = "/workloads/{id}/logs",
    tag = "workloads",
    params(("id" = Uuid, Path, description = "Workload id"), LogQuery),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses(
        (status = 200, description = "Its output (JSON Lines of `LogLine` when following)", body = Logs),
        (status = 400, body = ErrorResponse),
        (status = 404, body = ErrorResponse)
    )
)]
async fn logs(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
    Query(query): Query<LogQuery>,
) -> ApiResult<axum::response::Response> {
    use axum::response::IntoResponse;
    let (dropped, _) = workload_logs::visible(&state.db, id, &caller.scope()).await?;
    let first = workload_logs::read(&state.db, id, &query, dropped).await?;
    if !query.follow {
        return Ok(axum::Json(first).into_response());
    }
    // Follow: what is there, then every half second what came since, until the workload has
    // ended and a last read found nothing new (its agent ships within a second of the exit).
    let (db, shutdown) = (state.db.clone(), state.shutdown.clone());
    let started = std::time::Instant::now();
    let wait = std::time::Duration::from_secs(u64::from(
        query.wait_s.unwrap_or(state.config.log_follow_default_s).min(state.config.log_follow_max_s),
    ));
    let stream = futures::stream::unfold((Some(first), query, false), move |(mut pending, mut query, mut ended)| {
        let (db, shutdown) = (db.clone(), shutdown.clone());
        async move {
            // Read again until there are lines to send (an empty chunk is never sent).
            let logs = loop {
                if let Some(logs) = pending.take() {
                    query.after = Some(logs.cursor);
                    query.tail = None;
                    if !logs.lines.is_empty() {
                        break logs;
                    }
                }
                // A replica shutting down ends the answer: the client follows on from the cursor.
                if started.elapsed() >= wait || shutdown.is_cancelled() {
                    return None;
                }
                tokio::time::sleep(FOLLOW_POLL).await;
                let (_, dropped, now_ended) = workload_logs::output_state(&db, id).await.ok()??;
                let logs = workload_logs::read(&db, id, &query, dropped).await.ok()?;
                if logs.lines.is_empty() && ended {
                    return None;
                }
                ended = now_ended;
                pending = Some(logs);
            };
            let mut out = String::new();
            for line in &logs.lines {
                if let Ok(json) = serde_json::to_string(line) {
                    out.push_str(&json);
                    out.push('\n');
                }
            }
            Some((Ok::<_, std::convert::Infallible>(axum::body::Bytes::from(out)), (None, query, ended)))
        }
    });
    // `identity`: the compression layer leaves a stream alone (a gzip stream would hold lines back
    // until its buffer filled, and follow is about seeing them now).
    let headers = [(header::CONTENT_TYPE, "application/x-ndjson"), (header::CONTENT_ENCODING, "identity")];
    Ok((headers, axum::body::Body::from_stream(stream)).into_response())
}

/// How often a followed log is read again.
const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(500);
