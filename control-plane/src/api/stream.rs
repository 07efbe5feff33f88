//! `GET /events/stream`: the live feed as Server-Sent Events, in the caller's tenant scope.

use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::IntoResponse;
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::api::extract::Query;
use crate::api::openapi::ErrorResponse;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::live::{self, Cursor, NodeStates};
use crate::state::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(stream))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct StreamParams {
    /// Continue after this cursor (an event's `id`); the `Last-Event-ID` header does the same, and
    /// without either the stream starts from now.
    pub after: Option<String>,
    /// Seconds to stay open (at most `--log-follow-max-s`; `--log-follow-default-s` when absent).
    /// Clients reconnect with the last id, as `EventSource` does by itself.
    pub wait_s: Option<u32>,
}

/// How often the feed is read again.
const POLL: std::time::Duration = std::time::Duration::from_secs(1);
/// A comment line this often keeps proxies from closing a quiet stream.
const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(15);

/// Live changes as Server-Sent Events (`text/event-stream`): `workload` (a state change: from, to,
/// why), `decision` (a scheduling decision with its reason), `node` (a node's state: every node
/// once at the start, then each change) and `policy_failure`. Each event's `id` is a cursor to
/// resume from. Filtered exactly as the REST reads are: a tenant member sees their tenant's
/// workloads, decisions and own policies' failures, and every node; platform admins everything.
#[utoipa::path(
    get,
    path = "/events/stream",
    tag = "live",
    params(StreamParams, ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event id")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses(
        (status = 200, description = "The stream", content_type = "text/event-stream", body = String),
        (status = 400, description = "A cursor that is not one", body = ErrorResponse)
    )
)]
async fn stream(
    caller: Caller,
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(p): Query<StreamParams>,
) -> ApiResult<axum::response::Response> {
    let resume = p.after.or_else(|| headers.get("last-event-id").and_then(|v| v.to_str().ok()).map(str::to_owned));
    let cursor = match resume {
        Some(text) => Cursor::parse(&text).map_err(|m| ApiError::bad_request("invalid_query", m))?,
        None => live::now(&state.db).await?,
    };
    let tenant = if caller.is_platform_admin() { None } else { Some(caller.tenant_filter().unwrap_or(Uuid::nil())) };
    let config = &state.config;
    let wait = std::time::Duration::from_secs(u64::from(
        p.wait_s.unwrap_or(config.log_follow_default_s).min(config.log_follow_max_s),
    ));
    let (db, shutdown) = (state.db.clone(), state.shutdown.clone());
    let started = std::time::Instant::now();
    let initial = (cursor, NodeStates::new(), std::time::Instant::now(), true);
    let body = futures::stream::unfold(initial, move |(mut cursor, mut nodes, mut last_sent, mut first)| {
        let (db, shutdown) = (db.clone(), shutdown.clone());
        async move {
            // Read until there is something to send (a change, or a keep-alive when quiet).
            let out = loop {
                if !first {
                    // A replica shutting down ends the stream: the client reconnects (Last-Event-ID).
                    if started.elapsed() >= wait || shutdown.is_cancelled() {
                        return None;
                    }
                    tokio::time::sleep(POLL).await;
                }
                first = false;
                // A database that cannot be read ends the stream; the client reconnects.
                let (changes, next) = live::read(&db, cursor, tenant, &mut nodes).await.ok()?;
                cursor = next;
                let mut out = String::new();
                for (change, at) in &changes {
                    let data = serde_json::to_string(change).unwrap_or_default();
                    out.push_str(&format!("id: {at}\nevent: {}\ndata: {data}\n\n", change.kind()));
                }
                if out.is_empty() && last_sent.elapsed() >= KEEP_ALIVE {
                    out.push_str(": keep-alive\n\n");
                }
                if !out.is_empty() {
                    break out;
                }
            };
            last_sent = std::time::Instant::now();
            Some((Ok::<_, std::convert::Infallible>(axum::body::Bytes::from(out)), (cursor, nodes, last_sent, false)))
        }
    });
    let headers = [
        (header::CONTENT_TYPE, "text/event-stream"),
        (header::CACHE_CONTROL, "no-cache"),
        // The compression layer leaves a stream alone: events are for now, not when a buffer fills.
        (header::CONTENT_ENCODING, "identity"),
    ];
    Ok((headers, axum::body::Body::from_stream(body)).into_response())
}
