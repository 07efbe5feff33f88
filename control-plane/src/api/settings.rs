//! The platform's priority settings: the ordering between customer-facing services and internal
//! training, the burst reserve, the night window and the preemption rules. Policies read them in
//! every snapshot; the host enforces the preemption rules whatever a policy says.

use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::extract::Json;
use crate::api::openapi::ErrorResponse;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(read, write)).routes(routes!(preview))
}

pub use crate::settings::PrioritySettings as Priorities;

/// The platform's priority settings (everyone may read them: they decide everyone's work).
#[utoipa::path(
    get,
    path = "/settings/priorities",
    tag = "settings",
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 200, description = "The settings", body = Priorities))
)]
async fn read(_caller: Caller, State(state): State<AppState>) -> ApiResult<axum::Json<Priorities>> {
    current(&state).await
}

async fn current(state: &AppState) -> ApiResult<axum::Json<Priorities>> {
    Ok(axum::Json(crate::settings::current(&state.db).await?))
}

/// Replace the priority settings (platform admins; audited).
#[utoipa::path(
    put,
    path = "/settings/priorities",
    tag = "settings",
    request_body(content = Priorities, example = json!({
        "burst_reserve_gpus": 0, "realtime_first": true, "min_runtime_s": 0, "grace_period_s": 30,
        "max_preemptions_per_hour": 4, "checkpointable_only": false, "night_training_bonus": 0,
        "night_start_hour": 22, "night_end_hour": 6
    })),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses((status = 200, description = "The new settings", body = Priorities), (status = 422, body = ErrorResponse))
)]
async fn write(
    caller: Caller,
    State(state): State<AppState>,
    Json(p): Json<Priorities>,
) -> ApiResult<axum::Json<Priorities>> {
    crate::settings::replace(&state.db, &caller.scope(), &p).await?;
    state.wake.wake();
    current(&state).await
}

/// What candidate settings would change, before they are saved: the active platform policy is
/// evaluated on the live fleet and queue with the current settings and with the candidate, both
/// checked like real decisions, and every workload whose outcome differs (placed, preempted, kept
/// pending — with where and why) is listed. Nothing is applied or stored (platform admins).
#[utoipa::path(
    post,
    path = "/settings/priorities/preview",
    tag = "settings",
    request_body(content = Priorities, example = json!({
        "burst_reserve_gpus": 2, "realtime_first": true, "min_runtime_s": 0, "grace_period_s": 30,
        "max_preemptions_per_hour": 4, "checkpointable_only": false, "night_training_bonus": 0,
        "night_start_hour": 22, "night_end_hour": 6
    })),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses(
        (status = 200, description = "What would differ", body = crate::scheduler::Preview),
        (status = 422, body = ErrorResponse)
    )
)]
async fn preview(
    caller: Caller,
    State(state): State<AppState>,
    Json(p): Json<Priorities>,
) -> ApiResult<axum::Json<crate::scheduler::Preview>> {
    caller.require_platform_admin()?;
    p.check().map_err(|m| ApiError::unprocessable("invalid_settings", m))?;
    let preview = crate::scheduler::preview(&state.scheduler(), p).await?;
    Ok(axum::Json(preview))
}
