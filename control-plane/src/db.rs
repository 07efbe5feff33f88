//! The connection pool and the migrations, applied at start-up from `migrations/`.

use std::time::Duration;

use anyhow::Context as _;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

pub async fn connect(url: &str, max_connections: u32) -> anyhow::Result<PgPool> {
    let pool = PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(5))
        .connect(url)
        .await
        .context("connecting to PostgreSQL (check --database-url / DATABASE_URL)")?;
    MIGRATOR.run(&pool).await.context("applying database migrations")?;
    Ok(pool)
}
