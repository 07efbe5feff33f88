//! Every decision a policy made (and every one the control plane refused), newest first.

use axum::Router;
use axum::extract::State;
use axum::routing::get;

use crate::api::extract::Query;
use crate::error::ApiResult;
use crate::scheduler::record::{self, DecisionFilter, DecisionView};
use crate::server::AppState;

pub fn routes() -> Router<AppState> {
    Router::new().route("/decisions", get(list))
}

async fn list(
    State(state): State<AppState>,
    Query(filter): Query<DecisionFilter>,
) -> ApiResult<axum::Json<Vec<DecisionView>>> {
    Ok(axum::Json(record::list_decisions(&state.db, &filter).await?))
}
