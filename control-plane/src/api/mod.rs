//! The REST API under `/api/v1`: one error shape, JSON everywhere, thin handlers over the domain
//! modules.

pub mod agent;
pub mod auth;
pub mod decisions;
pub mod enrolment;
pub mod extract;
pub mod fleet;
pub mod health;
pub mod invitations;
pub mod openapi;
pub mod policies;
pub mod services;
pub mod settings;
pub mod snapshot;
pub mod stream;
pub mod tenants;
pub mod usage;
pub mod users;
pub mod what_if;
pub mod workloads;

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::config::Config;
use crate::error::ApiError;
use crate::state::AppState;

/// The whole API, documented: `/api/v1/…` and the health routes. `split_for_parts` gives the axum
/// router and the OpenAPI document, which therefore list exactly the same routes.
pub fn router(config: &Config) -> OpenApiRouter<AppState> {
    let v1 = OpenApiRouter::new()
        .merge(fleet::routes())
        .merge(workloads::routes())
        .merge(services::routes())
        .merge(policies::routes(config))
        .merge(decisions::routes())
        .merge(tenants::routes())
        .merge(snapshot::routes())
        .merge(settings::routes())
        .merge(what_if::routes())
        .merge(usage::routes())
        .merge(stream::routes())
        .merge(auth::routes())
        .merge(users::routes())
        .merge(enrolment::routes())
        .merge(invitations::routes())
        .nest("/agent", agent::routes())
        .routes(routes!(openapi::openapi_json));
    OpenApiRouter::with_openapi(openapi::base()).nest("/api/v1", v1).merge(health::routes())
}

/// Unknown routes get the same JSON error shape as everything else.
pub async fn not_found() -> ApiError {
    ApiError::NotFound("route")
}
