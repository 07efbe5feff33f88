//! What-if runs: a run's progress and scores, and what it replayed (see `crate::what_if`; runs are
//! queued by `POST /policies/{id}/what-if`).

use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::api::extract::Path;
use crate::api::openapi::ErrorResponse;
use crate::auth::Caller;
use crate::error::ApiResult;
use crate::state::AppState;
use crate::what_if::{self, WhatIfView};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_run)).routes(routes!(get_inputs))
}

/// A what-if run: state, progress and, once it succeeded, the active policies' and the
/// candidate's scores side by side. Platform admins see every run; anyone else the runs asked for
/// in their tenant.
#[utoipa::path(
    get,
    path = "/what-if/{id}",
    tag = "policies",
    params(("id" = Uuid, Path, description = "What-if run id")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 200, body = WhatIfView), (status = 404, body = ErrorResponse))
)]
async fn get_run(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
) -> ApiResult<axum::Json<WhatIfView>> {
    Ok(axum::Json(what_if::get(&state.db, id, &caller.scope()).await?))
}

/// What a run replayed — the fleet file, the trace as JSON Lines and the replay's settings — so
/// `airtime-sim run` reproduces its scores (platform admins: the trace holds every tenant's work).
#[utoipa::path(
    get,
    path = "/what-if/{id}/inputs",
    tag = "policies",
    params(("id" = Uuid, Path, description = "What-if run id")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses((status = 200, body = Object), (status = 404, body = ErrorResponse), (status = 409, body = ErrorResponse))
)]
async fn get_inputs(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
) -> ApiResult<axum::Json<serde_json::Value>> {
    Ok(axum::Json(what_if::inputs(&state.db, id, &caller.scope()).await?))
}
