//! GPU-time and what it costs: `GET /usage` (owned, allocated, busy and idle GPU-hours over a time
//! range, by tenant, class, node or GPU model) and `GET /fleet/held-idle` (workloads holding GPUs
//! that measure near zero). Other tenants appear only in aggregate unless the caller is a platform
//! admin.

use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::api::extract::Query;
use crate::api::openapi::ErrorResponse;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::usage::{self, GroupBy, HeldIdle, UsageQuery, UsageReport};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(usage_report)).routes(routes!(held_idle))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct UsageParams {
    /// Start of the range (RFC 3339); a day before `to` when absent.
    pub from: Option<DateTime<Utc>>,
    /// End of the range (RFC 3339); now when absent (a later time is now).
    pub to: Option<DateTime<Utc>>,
    /// Step of the series, seconds (at least 60, 3600 by default; at most 1000 steps).
    pub step_s: Option<u32>,
    /// `none` (default), `tenant`, `class`, `node` or `gpu_model`.
    pub group_by: Option<GroupBy>,
}

/// The tenant a caller sees one by one: `None` for a platform admin (every tenant).
fn own_tenant(caller: &Caller) -> Option<Uuid> {
    if caller.is_platform_admin() { None } else { Some(caller.tenant_filter().unwrap_or(Uuid::nil())) }
}

/// Owned, allocated, busy and idle GPU-hours and their cost over a range, in total, by group and
/// as a series. Owned: GPU-time the fleet's GPUs reported telemetry; allocated: time a grant held
/// them (a share counts its fraction); busy: measured utilisation; idle: owned but not busy.
/// Grouped by tenant, GPU-time nobody held is `(unallocated)`, and a tenant member sees other
/// tenants as one `(other tenants)` group.
#[utoipa::path(
    get,
    path = "/usage",
    tag = "usage",
    params(UsageParams),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses(
        (status = 200, description = "GPU-hours and cost", body = UsageReport),
        (status = 400, description = "A range, step or grouping that cannot be answered", body = ErrorResponse)
    )
)]
async fn usage_report(
    caller: Caller,
    State(state): State<AppState>,
    Query(p): Query<UsageParams>,
) -> ApiResult<axum::Json<UsageReport>> {
    let q = UsageQuery::parse(p.from, p.to, p.step_s, p.group_by.unwrap_or_default(), own_tenant(&caller), Utc::now())
        .map_err(|m| ApiError::bad_request("invalid_query", m))?;
    Ok(axum::Json(usage::report(&state.db, &q, state.config.telemetry_hold()).await?))
}

/// Running workloads whose every GPU has read below the idle threshold (`--idle-util-threshold`,
/// 5 % by default) for at least `--idle-after-s` (300 s): what they hold, for how long idle, and
/// what their grants have cost so far. A tenant member sees their own tenant's.
#[utoipa::path(
    get,
    path = "/fleet/held-idle",
    tag = "usage",
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 200, description = "Held but idle", body = [HeldIdle]))
)]
async fn held_idle(caller: Caller, State(state): State<AppState>) -> ApiResult<axum::Json<Vec<HeldIdle>>> {
    let c = &state.config;
    let after = std::time::Duration::from_secs(u64::from(c.idle_after_s));
    Ok(axum::Json(usage::held_idle(&state.db, c.idle_util_threshold, after, own_tenant(&caller)).await?))
}
