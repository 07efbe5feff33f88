//! The live snapshot a policy sees, as JSON: what a policy author replays locally with
//! `airtime-policy run module.wasm --snapshot snapshot.json` to test against production inputs.
//! Platform admins get the platform scope (every tenant's work); a tenant admin gets only what
//! their tenant's own policy would see (their work and the GPUs it holds).

use airtime_policy_sdk::owned::OwnedSnapshot;
use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::{Caller, Role};
use crate::error::{ApiError, ApiResult};
use crate::model::PLATFORM_SCOPE;
use crate::scheduler::fleet_view::TenantView;
use crate::scheduler::snapshot;
use crate::state::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(current))
}

/// The snapshot the next scheduling cycle would hand the caller's scope's policy, as JSON.
#[utoipa::path(
    get,
    path = "/scheduler/snapshot",
    tag = "policies",
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("tenant_admin"))),
    responses((status = 200, description = "The snapshot, in the JSON form the airtime-policy CLI reads", body = Object))
)]
async fn current(caller: Caller, State(state): State<AppState>) -> ApiResult<axum::Json<serde_json::Value>> {
    caller.require_role(Role::TenantAdmin)?;
    let fleet = {
        let mut conn = state.db.acquire().await?;
        crate::scheduler::fleet_view::load(&mut conn).await?
    };
    let (scope, tenant) = match caller.tenant_filter() {
        None => (PLATFORM_SCOPE.to_owned(), None),
        Some(tenant_id) => {
            let index = fleet.tenants.iter().position(|t| t.id == tenant_id).ok_or(ApiError::NotFound("tenant"))?;
            (tenant_id.to_string(), Some(index))
        }
    };
    let params = match state.policies.active(&state.db, &scope).await? {
        Some(selected) => selected.params,
        None => "{}".to_owned(),
    };
    let owned = match tenant {
        None => OwnedSnapshot::from(&snapshot::build(&fleet, &params, None)),
        Some(index) => {
            let view = fleet.tenant_view(index, &[], &[]);
            OwnedSnapshot::from(&snapshot::build(&view.view, &params, Some(TenantView::SCOPE_TENANT)))
        }
    };
    Ok(axum::Json(serde_json::to_value(&owned).map_err(anyhow::Error::from)?))
}
