//! The platform's priority settings (one row, `migrations/0003_*`), read and written here; the type
//! and its rules are `airtime_protocol::settings::PrioritySettings`.

use sqlx::PgConnection;

pub use airtime_protocol::settings::PrioritySettings;

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

/// Replaces the stored settings.
pub async fn save(settings: &PrioritySettings, conn: &mut PgConnection) -> sqlx::Result<()> {
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
