//! Every decision a policy made (and every one the control plane refused), newest first: the
//! caller's tenant's only, every tenant's for platform admins.

use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::extract::Query;
use crate::auth::Caller;
use crate::decisions::{self, DecisionFilter, DecisionView};
use crate::error::ApiResult;
use crate::state::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list))
}

/// Decisions, newest first, with the policy version that made each and its reason.
#[utoipa::path(
    operation_id = "decisions_list",
    get,
    path = "/decisions",
    tag = "decisions",
    params(DecisionFilter),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 200, description = "Decisions", body = [DecisionView]))
)]
async fn list(
    caller: Caller,
    State(state): State<AppState>,
    Query(mut filter): Query<DecisionFilter>,
) -> ApiResult<axum::Json<Vec<DecisionView>>> {
    filter.tenant_id = caller.tenant_filter();
    Ok(axum::Json(decisions::list_decisions(&state.db, &filter).await?))
}
