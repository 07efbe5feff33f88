//! The REST API under `/api/v1`: one error shape, JSON everywhere, thin handlers over the domain
//! modules.

pub mod agent;
pub mod auth;
pub mod decisions;
pub mod extract;
pub mod fleet;
pub mod health;
pub mod policies;
pub mod tenants;
pub mod workloads;

use axum::Router;

use crate::config::Config;
use crate::error::ApiError;
use crate::server::AppState;

pub fn routes(config: &Config) -> Router<AppState> {
    Router::new()
        .merge(fleet::routes())
        .merge(workloads::routes())
        .merge(policies::routes(config))
        .merge(decisions::routes())
        .merge(tenants::routes())
        .nest("/agent", agent::routes())
}

/// Unknown routes get the same JSON error shape as everything else.
pub async fn not_found() -> ApiError {
    ApiError::NotFound("route")
}
