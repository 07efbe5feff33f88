//! The platform's priority settings (one row, `migrations/0003_*`), read and written here; the type
//! and its rules are `airtime_protocol::settings::PrioritySettings`.

use sqlx::{PgConnection, PgPool};

pub use airtime_protocol::settings::PrioritySettings;

use crate::auth::audit::{self, Change};
use crate::domain::{self, Scope};

/// The stored settings, or the defaults, on a connection of the pool.
pub async fn current(db: &PgPool) -> domain::Result<PrioritySettings> {
    let mut conn = db.acquire().await?;
    Ok(load(&mut conn).await?)
}

/// Replaces the settings (platform admins), checked by their rules and audited in the same
/// transaction.
pub async fn replace(db: &PgPool, scope: &Scope, settings: &PrioritySettings) -> domain::Result<()> {
    scope.require_platform_admin()?;
    settings.check().map_err(|m| domain::Error::invalid("invalid_settings", m))?;
    let mut tx = db.begin().await?;
    save(settings, &mut tx).await?;
    audit::record(
        &mut tx,
        &scope.actor,
        Change::new("settings.priorities", "settings", "priorities")
            .detail(serde_json::to_value(settings).unwrap_or_default()),
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// The stored settings, or the defaults before any were saved.
pub async fn load(conn: &mut PgConnection) -> sqlx::Result<PrioritySettings> {
    let row: Option<PrioritySettings> = sqlx::query_as(
        "SELECT burst_reserve_gpus, realtime_first, min_runtime_s, grace_period_s, max_preemptions_per_hour, \
                checkpointable_only, night_training_bonus, night_start_hour, night_end_hour \
         FROM priority_settings WHERE id",
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.unwrap_or_default())
}

/// Replaces the stored settings, in the caller's transaction.
async fn save(settings: &PrioritySettings, conn: &mut PgConnection) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE priority_settings SET burst_reserve_gpus = $1, realtime_first = $2, min_runtime_s = $3, \
             grace_period_s = $4, max_preemptions_per_hour = $5, checkpointable_only = $6, \
             night_training_bonus = $7, night_start_hour = $8, night_end_hour = $9, updated_at = now() WHERE id",
    )
    .bind(settings.burst_reserve_gpus)
    .bind(settings.realtime_first)
    .bind(settings.min_runtime_s)
    .bind(settings.grace_period_s)
    .bind(settings.max_preemptions_per_hour)
    .bind(settings.checkpointable_only)
    .bind(settings.night_training_bonus)
    .bind(settings.night_start_hour)
    .bind(settings.night_end_hour)
    .execute(conn)
    .await?;
    Ok(())
}
