//! Decayed GPU usage per tenant, the history fair-share policies weigh: every cycle, each tenant's
//! GPU-hours decay with a half-life and the GPUs it holds now accrue for the time since the last
//! update (a quarter-GPU share accrues a quarter GPU-hour an hour).

use sqlx::PgPool;

pub async fn accrue(db: &PgPool, half_life_hours: f64) -> sqlx::Result<()> {
    sqlx::query(
        "WITH held AS (SELECT t.id AS tenant_id, COALESCE(g.milli, 0)::float8 / 1000 AS gpus \
                       FROM tenants t \
                       LEFT JOIN (SELECT tenant_id, sum(milli) AS milli FROM gpu_grants GROUP BY tenant_id) g \
                              ON g.tenant_id = t.id) \
         INSERT INTO tenant_usage (tenant_id, decayed_gpu_hours, updated_at) \
         SELECT tenant_id, 0, now() FROM held \
         ON CONFLICT (tenant_id) DO UPDATE SET \
             decayed_gpu_hours = tenant_usage.decayed_gpu_hours \
                 * power(0.5, extract(epoch FROM now() - tenant_usage.updated_at) / 3600.0 / $1) \
                 + (SELECT gpus FROM held WHERE held.tenant_id = tenant_usage.tenant_id) \
                 * extract(epoch FROM now() - tenant_usage.updated_at) / 3600.0, \
             updated_at = now()",
    )
    .bind(half_life_hours)
    .execute(db)
    .await?;
    Ok(())
}
