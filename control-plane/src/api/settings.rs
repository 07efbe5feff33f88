//! The platform's priority settings: the ordering between customer-facing services and internal
//! training, the burst reserve, the night window and the preemption rules. Policies read them in
//! every snapshot; the host enforces the preemption rules whatever a policy says.

use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::extract::Json;
use crate::api::openapi::ErrorResponse;
use crate::auth::Caller;
use crate::auth::audit::{self, AuditActor, Change};
use crate::error::{ApiError, ApiResult};
use crate::server::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(read, write))
}

#[derive(Debug, Serialize, Deserialize, sqlx::FromRow, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Priorities {
    /// GPUs kept free for real-time (customer-facing) inference bursts; other work may use them
    /// only if it is preemptible.
    pub burst_reserve_gpus: i32,
    /// Customer-facing inference outranks internal training.
    pub realtime_first: bool,
    /// Seconds a workload runs before it may be preempted.
    pub min_runtime_s: i32,
    /// Seconds between the checkpoint signal (SIGTERM) and SIGKILL.
    pub grace_period_s: i32,
    /// Most preemptions of one workload in an hour.
    pub max_preemptions_per_hour: i32,
    /// Only checkpointable work may be preempted.
    pub checkpointable_only: bool,
    /// Priority added to training and fine-tuning in the night window.
    pub night_training_bonus: i32,
    /// The night window, UTC hours (it may wrap midnight: 22 → 6).
    pub night_start_hour: i32,
    pub night_end_hour: i32,
}

const SELECT: &str = "SELECT burst_reserve_gpus, realtime_first, min_runtime_s, grace_period_s, \
     max_preemptions_per_hour, checkpointable_only, night_training_bonus, night_start_hour, night_end_hour \
     FROM priority_settings WHERE id";

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
    Ok(axum::Json(sqlx::query_as(SELECT).fetch_one(&state.db).await?))
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
    caller.require_platform_admin()?;
    let bad = |m: &str| Err(ApiError::unprocessable("invalid_settings", m));
    if !(0..=100_000).contains(&p.burst_reserve_gpus) {
        return bad("burst_reserve_gpus must be between 0 and 100000");
    }
    if !(0..=7 * 86_400).contains(&p.min_runtime_s) {
        return bad("min_runtime_s must be between 0 and 604800 (a week)");
    }
    if !(0..=3600).contains(&p.grace_period_s) {
        return bad("grace_period_s must be between 0 and 3600");
    }
    if !(0..=1000).contains(&p.max_preemptions_per_hour) {
        return bad("max_preemptions_per_hour must be between 0 and 1000");
    }
    if !(-1000..=1000).contains(&p.night_training_bonus) {
        return bad("night_training_bonus must be between -1000 and 1000");
    }
    if !(0..24).contains(&p.night_start_hour) || !(0..24).contains(&p.night_end_hour) {
        return bad("night_start_hour and night_end_hour are UTC hours, 0 to 23");
    }
    let mut tx = state.db.begin().await?;
    sqlx::query(
        "UPDATE priority_settings SET burst_reserve_gpus = $1, realtime_first = $2, min_runtime_s = $3, \
             grace_period_s = $4, max_preemptions_per_hour = $5, checkpointable_only = $6, \
             night_training_bonus = $7, night_start_hour = $8, night_end_hour = $9, updated_at = now() WHERE id",
    )
    .bind(p.burst_reserve_gpus)
    .bind(p.realtime_first)
    .bind(p.min_runtime_s)
    .bind(p.grace_period_s)
    .bind(p.max_preemptions_per_hour)
    .bind(p.checkpointable_only)
    .bind(p.night_training_bonus)
    .bind(p.night_start_hour)
    .bind(p.night_end_hour)
    .execute(&mut *tx)
    .await?;
    audit::record(
        &mut tx,
        &AuditActor::from(&caller),
        Change::new("settings.priorities", "settings", "priorities")
            .detail(serde_json::to_value(&p).unwrap_or_default()),
    )
    .await?;
    tx.commit().await?;
    state.wake.wake();
    current(&state).await
}
