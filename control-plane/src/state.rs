//! What request handlers and background tasks share: `AppState`, built once at start-up, and the
//! narrow handles it hands the scheduling loop (`Scheduler`) and the fleet watch (`Liveness`), so
//! neither needs signing keys or the HTTP surface. Handlers (`api/`) and domain modules depend on
//! this module; `server.rs` depends on them.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::extract::FromRef;
use sqlx::PgPool;

use crate::auth::AuthContext;
use crate::config::Config;
use crate::fleet::liveness::Liveness;
use crate::fleet::telemetry::TelemetryWriter;
use crate::metrics::Metrics;
use crate::policies::PolicyCatalog;
use crate::scheduler::Scheduler;
use crate::scheduler::leader::Leadership;
use crate::signals::{DesiredStateChanged, Outbox, SchedulerWake, Shutdown};

/// Everything a request handler or background task shares: one pointer, so a request's copy of
/// the state (axum clones it for every handler and extractor) is one reference count, not one per
/// handle (`AppState` and its handles' drops were about 2 % of the control plane's CPU in the
/// telemetry bench).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What [`AppState`] points at.
pub struct Shared {
    pub db: PgPool,
    pub config: Arc<Config>,
    pub wake: SchedulerWake,
    pub desired: DesiredStateChanged,
    /// What this replica tells the others (see `signals::relay`).
    pub outbox: Arc<Outbox>,
    pub metrics: Arc<Metrics>,
    pub policies: Arc<PolicyCatalog>,
    /// Authentication: signing keys, rate limits, login throttling.
    pub auth: Arc<AuthContext>,
    /// This replica's claim to lead the scheduling loop.
    pub leadership: Arc<Leadership>,
    /// Agents' telemetry, written in batches (group commit) by one flusher task.
    pub telemetry: TelemetryWriter,
    /// Set on SIGTERM: long polls and streams answer at once, so a replica stopped in a rolling
    /// restart exits within a moment and its clients reconnect to another.
    pub shutdown: Shutdown,
}

impl FromRef<AppState> for Arc<AuthContext> {
    fn from_ref(state: &AppState) -> Self {
        state.auth.clone()
    }
}

impl AppState {
    pub async fn new(db: PgPool, config: Config) -> anyhow::Result<Self> {
        let policies =
            PolicyCatalog::new(config.policy_compiles, Duration::from_millis(config.policy_compile_timeout_ms))
                .context("starting the policy runtime")?
                .with_compile_probe(config.compile_probe.clone());
        policies.install_builtins(&db).await.context("installing the built-in policies")?;
        let secret = config.signing_secret()?;
        let config_lease = config.leader_lease();
        let outbox = Arc::new(Outbox::default());
        let auth = AuthContext::new(db.clone(), &secret, config.auth_settings())?;
        let beat_every = crate::fleet::telemetry::heartbeat_every(Duration::from_millis(config.heartbeat_interval_ms));
        let telemetry = TelemetryWriter::start(db.clone(), config.telemetry_retention_hours, beat_every)
            .await
            .context("making the telemetry history's partitions")?;
        Ok(Self(Arc::new(Shared {
            telemetry,
            auth,
            db,
            config: Arc::new(config),
            wake: SchedulerWake::new(outbox.clone()),
            desired: DesiredStateChanged::new(outbox.clone()),
            outbox,
            metrics: Arc::new(Metrics::default()),
            policies: Arc::new(policies),
            leadership: Arc::new(Leadership::new(config_lease)),
            shutdown: Shutdown::default(),
        })))
    }

    /// The scheduling loop's handles, and nothing else it does not use.
    pub fn scheduler(&self) -> Scheduler {
        Scheduler {
            db: self.db.clone(),
            settings: self.config.scheduler_settings(),
            wake: self.wake.clone(),
            desired: self.desired.clone(),
            metrics: self.metrics.clone(),
            policies: self.policies.clone(),
            leadership: self.leadership.clone(),
            fleet_cache: Arc::default(),
        }
    }

    /// The what-if runner's handles.
    pub fn what_if(&self) -> crate::what_if::runner::Runner {
        crate::what_if::runner::Runner {
            db: self.db.clone(),
            timeout: std::time::Duration::from_secs(self.config.what_if_timeout_s),
        }
    }

    /// The fleet watch's handles.
    pub fn liveness(&self) -> Liveness {
        Liveness {
            db: self.db.clone(),
            settings: self.config.liveness_settings(),
            wake: self.wake.clone(),
            desired: self.desired.clone(),
        }
    }
}
