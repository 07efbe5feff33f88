//! The connection pool and the migrations, applied at start-up from `migrations/`.

use std::time::Duration;

use anyhow::Context as _;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// Connects with JIT compilation off: the control plane's statements are short and many, and a
/// plan whose cost crosses `jit_above_cost` (the scheduler's read of 15,000 active workloads does)
/// spends ten times its execution compiling (208 of 267 ms, measured), every cycle.
pub async fn connect(url: &str, max_connections: u32) -> anyhow::Result<PgPool> {
    let options: PgConnectOptions =
        url.parse().context("parsing the database URL (check --database-url / DATABASE_URL)")?;
    let pool = PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(5))
        .connect_with(options.options([("jit", "off")]))
        .await
        .context("connecting to PostgreSQL (check --database-url / DATABASE_URL)")?;
    MIGRATOR.run(&pool).await.context("applying database migrations")?;
    Ok(pool)
}

/// Whether the database answers a trivial statement (readiness).
pub async fn ping(db: &PgPool) -> sqlx::Result<()> {
    sqlx::query("SELECT 1").execute(db).await.map(|_| ())
}
