//! Tenants: the teams that own workloads and policies.

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::api::extract::Json;
use crate::error::{ApiError, ApiResult};
use crate::server::AppState;

pub fn routes() -> Router<AppState> {
    Router::new().route("/tenants", get(list).post(create))
}

#[derive(Debug, Serialize, sqlx::FromRow)]
pub struct TenantView {
    pub id: Uuid,
    pub name: String,
    pub guaranteed_gpus: i32,
    pub weight: i32,
    pub tier: i32,
    pub may_borrow: bool,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Deserialize)]
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

async fn list(State(state): State<AppState>) -> ApiResult<axum::Json<Vec<TenantView>>> {
    let tenants = sqlx::query_as(
        "SELECT id, name, guaranteed_gpus, weight, tier, may_borrow, created_at FROM tenants ORDER BY name",
    )
    .fetch_all(&state.db)
    .await?;
    Ok(axum::Json(tenants))
}

async fn create(
    State(state): State<AppState>,
    Json(req): Json<CreateTenant>,
) -> ApiResult<(StatusCode, axum::Json<TenantView>)> {
    let valid = !req.name.is_empty()
        && req.name.len() <= 63
        && req.name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !req.name.starts_with('-');
    if !valid {
        return Err(ApiError::unprocessable("invalid_tenant", "name must be 1 to 63 lowercase letters, digits or '-'"));
    }
    if req.guaranteed_gpus > 100_000 || req.weight == 0 || req.weight > 10_000 || !(-1000..=1000).contains(&req.tier) {
        return Err(ApiError::unprocessable(
            "invalid_tenant",
            "guaranteed_gpus ≤ 100000, weight 1..=10000, tier -1000..=1000",
        ));
    }
    let created: Option<TenantView> = sqlx::query_as(
        "INSERT INTO tenants (id, name, guaranteed_gpus, weight, tier, may_borrow) VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (name) DO NOTHING \
         RETURNING id, name, guaranteed_gpus, weight, tier, may_borrow, created_at",
    )
    .bind(Uuid::now_v7())
    .bind(&req.name)
    .bind(req.guaranteed_gpus as i32)
    .bind(req.weight as i32)
    .bind(req.tier)
    .bind(req.may_borrow)
    .fetch_optional(&state.db)
    .await?;
    created
        .map(|t| (StatusCode::CREATED, axum::Json(t)))
        .ok_or_else(|| ApiError::conflict("tenant_exists", format!("a tenant named {:?} exists", req.name)))
}
