//! The connection pool and the migrations, applied at start-up from `migrations/`.

use std::time::Duration;

use anyhow::Context as _;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

/// The migrations this build knows.
///
/// A database migrated further than this build (a replica of the next release started first, in
/// a rolling upgrade) is accepted: the newer migrations only expand the schema — added tables,
/// nullable or defaulted columns — so this build's statements keep working on it, and removals
/// wait for a later release (expand, then contract; docs/operations.md). A migration this build
/// knows whose text differs from what was applied is still refused.
pub fn migrator() -> sqlx::migrate::Migrator {
    let mut migrator = sqlx::migrate!("../migrations");
    migrator.set_ignore_missing(true);
    migrator
}

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
    migrator().run(&pool).await.context("applying database migrations")?;
    Ok(pool)
}

/// How long readiness waits for the database: a probe with a one-second timeout must see "not
/// ready" (503), not its own timeout, while the pool's acquire (5 s) would still be waiting.
pub const PING_WITHIN: Duration = Duration::from_millis(800);

/// Whether the database answers a trivial statement within `within` — a connection acquired and
/// `SELECT 1` answered (readiness). An unreachable database (refused, or silent behind a
/// partition) and an exhausted pool are both a failure at `within`, not at the acquire timeout.
pub async fn ping(db: &PgPool, within: Duration) -> Result<(), PingError> {
    match tokio::time::timeout(within, sqlx::query("SELECT 1").execute(db)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(PingError::Failed(e)),
        Err(_) => Err(PingError::TimedOut(within)),
    }
}

/// Why the database did not answer a ping.
#[derive(Debug, thiserror::Error)]
pub enum PingError {
    #[error("the database refused or failed: {0}")]
    Failed(sqlx::Error),
    #[error("the database did not answer within {0:?}")]
    TimedOut(Duration),
}
