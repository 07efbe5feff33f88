//! Tenants: the teams that own workloads and policies.

use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use airtime_protocol::model::TenantName;

use crate::api::extract::Json;
use crate::api::openapi::ErrorResponse;
use crate::auth::Caller;
use crate::auth::audit::{self, AuditActor, Change};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list, create)).routes(routes!(summary))
}

#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct TenantView {
    pub id: Uuid,
    pub name: String,
    pub guaranteed_gpus: i32,
    pub weight: i32,
    pub tier: i32,
    pub may_borrow: bool,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTenant {
    pub name: String,
    #[serde(default)]
    pub guaranteed_gpus: u32,
    #[serde(default = "one")]
    pub weight: u32,
    #[serde(default)]
    pub tier: i32,
    #[serde(default = "yes")]
    pub may_borrow: bool,
}

fn one() -> u32 {
    1
}
fn yes() -> bool {
    true
}

/// Who is within quota, borrowing or starved: per tenant, the GPUs it holds against its guarantee,
/// its waiting work and the most common reason that work gives. Every tenant for platform admins;
/// the caller's own tenant for everyone else.
#[utoipa::path(
    operation_id = "tenants_summary",
    get,
    path = "/tenants/summary",
    tag = "tenants",
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 200, description = "Standing of each tenant", body = [crate::tenancy::TenantStanding]))
)]
async fn summary(
    caller: Caller,
    State(state): State<AppState>,
) -> ApiResult<axum::Json<Vec<crate::tenancy::TenantStanding>>> {
    Ok(axum::Json(crate::tenancy::standings(&state.db, caller.tenant_filter()).await?))
}

/// Every tenant for platform admins; the caller's own tenant for everyone else.
#[utoipa::path(
    operation_id = "tenants_list",
    get,
    path = "/tenants",
    tag = "tenants",
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("viewer"))),
    responses((status = 200, description = "Tenants", body = [TenantView]))
)]
async fn list(caller: Caller, State(state): State<AppState>) -> ApiResult<axum::Json<Vec<TenantView>>> {
    let tenants = sqlx::query_as(
        "SELECT id, name, guaranteed_gpus, weight, tier, may_borrow, created_at FROM tenants \
         WHERE ($1::uuid IS NULL OR id = $1) ORDER BY name",
    )
    .bind(caller.tenant_filter())
    .fetch_all(&state.db)
    .await?;
    Ok(axum::Json(tenants))
}

/// Create a tenant with its quota (platform admins).
#[utoipa::path(
    operation_id = "tenants_create",
    post,
    path = "/tenants",
    tag = "tenants",
    request_body(content = CreateTenant, example = json!({"name": "research", "guaranteed_gpus": 8, "weight": 2})),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses(
        (status = 201, description = "Created", body = TenantView),
        (status = 409, description = "The name is taken", body = ErrorResponse),
        (status = 422, body = ErrorResponse)
    )
)]
async fn create(
    caller: Caller,
    State(state): State<AppState>,
    Json(req): Json<CreateTenant>,
) -> ApiResult<(StatusCode, axum::Json<TenantView>)> {
    caller.require_platform_admin()?;
    let name = TenantName::parse(&req.name).map_err(|m| ApiError::unprocessable("invalid_tenant", m))?;
    if req.guaranteed_gpus > 100_000 || req.weight == 0 || req.weight > 10_000 || !(-1000..=1000).contains(&req.tier) {
        return Err(ApiError::unprocessable(
            "invalid_tenant",
            "guaranteed_gpus ≤ 100000, weight 1..=10000, tier -1000..=1000",
        ));
    }
    let mut tx = state.db.begin().await?;
    let created: Option<TenantView> = sqlx::query_as(
        "INSERT INTO tenants (id, name, guaranteed_gpus, weight, tier, may_borrow) VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (name) DO NOTHING \
         RETURNING id, name, guaranteed_gpus, weight, tier, may_borrow, created_at",
    )
    .bind(Uuid::now_v7())
    .bind(name.as_str())
    .bind(req.guaranteed_gpus as i32)
    .bind(req.weight as i32)
    .bind(req.tier)
    .bind(req.may_borrow)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(created) = created else {
        return Err(ApiError::conflict("tenant_exists", format!("a tenant named {:?} exists", req.name)));
    };
    audit::record(
        &mut tx,
        &AuditActor::from(&caller),
        Change::new("tenant.create", "tenant", created.id).tenant(Some(created.id)).detail(serde_json::json!({
            "name": created.name, "guaranteed_gpus": created.guaranteed_gpus, "weight": created.weight,
            "tier": created.tier, "may_borrow": created.may_borrow,
        })),
    )
    .await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, axum::Json(created)))
}
