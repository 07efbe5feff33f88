//! Typed configuration from flags and environment. Parsing never touches the process environment
//! directly (clap reads it), so tests build a `Config` from an argument list.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// The longest an agent's assignments long-poll waits before answering with the unchanged state
/// (`api::agent`); every request's timeout must outlast it.
pub const MAX_LONG_POLL_MS: u64 = 30_000;

#[derive(Debug, Clone, Parser)]
#[command(name = "airtime-control-plane", version, about = "Airtime control plane")]
pub struct Config {
    /// Address to listen on. Port 0 picks a free port; the bound address is printed on stdout.
    #[arg(long, env = "AIRTIME_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// PostgreSQL connection URL. Migrations are applied at start-up.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: String,

    /// Maximum connections in the database pool.
    #[arg(long, env = "AIRTIME_DB_MAX_CONNECTIONS", default_value_t = 16)]
    pub db_max_connections: u32,

    /// Period of the scheduling tick in milliseconds; events (submit, end, node join/loss) wake the
    /// loop sooner.
    #[arg(long, env = "AIRTIME_TICK_MS", default_value_t = 1000)]
    pub tick_ms: u64,

    /// How long the loop gathers events after the first wakes it, in milliseconds, so a burst of
    /// submissions is decided in one cycle, not one cycle each. The loop also waits as long as its
    /// last cycle took, so under a steady stream it cycles at most half the time (see
    /// ARCHITECTURE.md, "Wake-ups").
    #[arg(long, env = "AIRTIME_CYCLE_BATCH_MS", default_value_t = 20)]
    pub cycle_batch_ms: u64,

    /// How often node agents send telemetry (the heartbeat), in milliseconds.
    #[arg(long, env = "AIRTIME_HEARTBEAT_INTERVAL_MS", default_value_t = 2000)]
    pub heartbeat_interval_ms: u64,

    /// A node silent for this long is marked lost: it takes no new work.
    #[arg(long, env = "AIRTIME_NODE_LOST_AFTER_MS", default_value_t = 15000)]
    pub node_lost_after_ms: u64,

    /// A node's lease, in milliseconds: its agent stops (fences) its work once it has not reached
    /// the control plane for this long, and a lost node's work is requeued only after this, the
    /// grace period and a margin, so a partitioned node's work never runs twice. At least
    /// --node-lost-after-ms; a control plane outage shorter than it stops no work.
    #[arg(long, env = "AIRTIME_NODE_FENCE_AFTER_MS", default_value_t = 60000)]
    pub node_fence_after_ms: u64,

    /// How long a gang's members have to start, in milliseconds, from their placement: a gang not
    /// every member of which started by then is stopped and requeued whole, not left half-alive.
    #[arg(long, env = "AIRTIME_GANG_START_TIMEOUT_MS", default_value_t = 120000)]
    pub gang_start_timeout_ms: u64,

    /// Largest JSON request body accepted, in bytes.
    #[arg(long, env = "AIRTIME_MAX_BODY_BYTES", default_value_t = 1024 * 1024)]
    pub max_body_bytes: usize,

    /// Largest policy module accepted at upload, in bytes.
    #[arg(long, env = "AIRTIME_MAX_POLICY_BYTES", default_value_t = 8 * 1024 * 1024)]
    pub max_policy_bytes: usize,

    /// The most policy versions a tenant may keep stored (all its policies together); uploads past
    /// it are refused before compiling. An upload of bytes its policy already has stores nothing.
    #[arg(long, env = "AIRTIME_POLICY_VERSIONS_PER_TENANT", default_value_t = 100)]
    pub policy_versions_per_tenant: u32,

    /// The most bytes of policy modules a tenant may keep stored (all its versions together).
    #[arg(long, env = "AIRTIME_POLICY_BYTES_PER_TENANT", default_value_t = 64 * 1024 * 1024)]
    pub policy_bytes_per_tenant: u64,

    /// Requests running longer than this are answered 408. Agent long-polls stay below it.
    #[arg(long, env = "AIRTIME_REQUEST_TIMEOUT_MS", default_value_t = 60000)]
    pub request_timeout_ms: u64,

    /// A policy that fails this many scheduling cycles in a row is suspended; its scope runs the
    /// built-in policy until it is activated again.
    #[arg(long, env = "AIRTIME_POLICY_SUSPEND_AFTER", default_value_t = 3)]
    pub policy_suspend_after: u32,

    /// How long the scheduling loop's lease lasts without renewal, in milliseconds. The leader
    /// renews it every tick and proves it in every cycle's transaction; a standby takes over once
    /// the leader has not renewed it for this long (a leader that shuts down cleanly hands it over
    /// at once). Must be more than twice --tick-ms.
    #[arg(long, env = "AIRTIME_LEADER_LEASE_MS", default_value_t = 10000)]
    pub leader_lease_ms: u64,

    /// How long a cycle waits for the tenants' own policies, in milliseconds, evaluated side by
    /// side. A tenant policy still running then falls back to the platform's decisions for that
    /// tenant (a failure, counted towards suspension), so a slow tenant never delays the others.
    #[arg(long, env = "AIRTIME_CYCLE_BUDGET_MS", default_value_t = 1000)]
    pub cycle_budget_ms: u64,

    /// Longest an upload's compilation may take, in milliseconds; past it the upload is refused
    /// and the compilation stopped (it runs first in a process of its own, killed at the deadline,
    /// which frees its core and its compile slot). The trial evaluation that follows is bounded by
    /// the policy's own deadline.
    #[arg(long, env = "AIRTIME_POLICY_COMPILE_TIMEOUT_MS", default_value_t = 20000)]
    pub policy_compile_timeout_ms: u64,

    /// Uploads compiled at once across the control plane (a tenant may have one at a time); more
    /// are answered 429 with Retry-After.
    #[arg(long, env = "AIRTIME_POLICY_COMPILES", default_value_t = 2)]
    pub policy_compiles: u32,

    /// Half-life of the decayed GPU usage that fair-share policies weigh, in hours.
    #[arg(long, env = "AIRTIME_USAGE_HALF_LIFE_HOURS", default_value_t = 24.0)]
    pub usage_half_life_hours: f64,

    /// How long telemetry history is kept, in hours.
    #[arg(long, env = "AIRTIME_TELEMETRY_RETENTION_HOURS", default_value_t = 24)]
    pub telemetry_retention_hours: u32,

    /// Bytes of output kept per workload (all its attempts); the oldest goes first.
    #[arg(long, env = "AIRTIME_LOG_BYTES_PER_WORKLOAD", default_value_t = 16 * 1024 * 1024, value_parser = clap::value_parser!(i64).range(65_536..))]
    pub log_bytes_per_workload: i64,

    /// Bytes of output kept per tenant (all its workloads); the oldest goes first.
    #[arg(long, env = "AIRTIME_LOG_BYTES_PER_TENANT", default_value_t = 2 * 1024 * 1024 * 1024, value_parser = clap::value_parser!(i64).range(65_536..))]
    pub log_bytes_per_tenant: i64,

    /// How long `GET /workloads/{id}/logs?follow=true` stays open when the request names no
    /// `wait_s`, in seconds (below a proxy's idle timeout; clients follow on with the cursor).
    #[arg(long, env = "AIRTIME_LOG_FOLLOW_DEFAULT_S", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub log_follow_default_s: u32,

    /// The longest a follow stays open whatever the request's `wait_s` asks, in seconds.
    #[arg(long, env = "AIRTIME_LOG_FOLLOW_MAX_S", default_value_t = 3600, value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub log_follow_max_s: u32,

    /// A GPU reading below this utilisation (0..1) counts as idle for the held-but-idle list.
    #[arg(long, env = "AIRTIME_IDLE_UTIL_THRESHOLD", default_value_t = 0.05, value_parser = parse_unit)]
    pub idle_util_threshold: f32,

    /// How long work a tenant's idle rule caught is warned before it is stopped, seconds.
    #[arg(long, env = "AIRTIME_IDLE_RECLAIM_WARNING_S", default_value_t = 60, value_parser = clap::value_parser!(u32).range(0..=86_400))]
    pub idle_reclaim_warning_s: u32,

    /// How long a held GPU must read idle before its workload is listed as held but idle, seconds.
    #[arg(long, env = "AIRTIME_IDLE_AFTER_S", default_value_t = 300, value_parser = clap::value_parser!(u32).range(1..=86_400))]
    pub idle_after_s: u32,

    /// A host directory container workloads may mount (it and everything under it); repeat for
    /// several, or separate them with commas in the environment variable. None: no host mounts.
    #[arg(long = "container-mount-prefix", env = "AIRTIME_CONTAINER_MOUNT_PREFIXES", value_delimiter = ',', value_parser = parse_mount_prefix)]
    pub container_mount_prefixes: Vec<String>,

    /// The bearer token that shows `/metrics` with tenant and service names (per-tenant GPU-seconds,
    /// services' replicas, demand and load). Without it `/metrics` holds fleet-wide figures only.
    #[arg(long, env = "AIRTIME_METRICS_TOKEN", hide_env_values = true)]
    pub metrics_token: Option<crate::auth::SecretString>,

    /// What-if runs one tenant may have queued or running at once; more are refused. Runs are
    /// taken in turns across tenants (each tenant's oldest first), so one tenant's queue never
    /// makes another's run wait behind all of it.
    #[arg(long, env = "AIRTIME_WHAT_IF_RUNS_PER_TENANT", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub what_if_runs_per_tenant: u32,

    /// The control plane's own binary, which compiles uploads in a process killed at the compile
    /// deadline (set by `main`; not a flag).
    #[arg(skip)]
    pub compile_probe: Option<PathBuf>,

    /// The longest a what-if replay (both of its replays together) may take, in seconds.
    #[arg(long, env = "AIRTIME_WHAT_IF_TIMEOUT_S", default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub what_if_timeout_s: u64,

    /// Log format.
    #[arg(long, env = "AIRTIME_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Secret that signs session tokens (HS256), at least 32 bytes. Required unless
    /// --jwt-secret-file is given. Every replica of the control plane needs the same one.
    #[arg(long, env = "AIRTIME_JWT_SECRET", hide_env_values = true, conflicts_with = "jwt_secret_file")]
    pub jwt_secret: Option<crate::auth::SecretString>,

    /// File holding the session signing secret; created with a random secret (mode 0600) when it
    /// does not exist.
    #[arg(long, env = "AIRTIME_JWT_SECRET_FILE", value_name = "PATH")]
    pub jwt_secret_file: Option<PathBuf>,

    /// Lifetime of a session token from POST /auth/login, in seconds.
    #[arg(long, env = "AIRTIME_SESSION_TTL_SECS", default_value_t = 3600)]
    pub session_ttl_secs: u64,

    /// Mutating requests (POST, PUT, PATCH, DELETE) per minute per token or session, on average;
    /// 0 disables the limit.
    #[arg(long, env = "AIRTIME_MUTATIONS_PER_MINUTE", default_value_t = 600)]
    pub mutations_per_minute: u32,

    /// Mutating requests a token or session may send at once before the per-minute rate applies.
    #[arg(long, env = "AIRTIME_MUTATION_BURST", default_value_t = 120)]
    pub mutation_burst: u32,

    /// Failed logins allowed per user name and address before each further attempt must wait
    /// (1 s, doubling up to 15 minutes).
    #[arg(long, env = "AIRTIME_LOGIN_MAX_FAILURES", default_value_t = 5)]
    pub login_max_failures: u32,

    /// Create the first platform admin with this login name and exit. The password is read from
    /// AIRTIME_BOOTSTRAP_PASSWORD or the first line of standard input. Refused when a platform
    /// admin exists already.
    #[arg(long, value_name = "EMAIL")]
    pub bootstrap_admin: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{0}")]
    Parse(#[from] clap::Error),
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl Config {
    /// Parses and validates an argument list (the first item is the program name).
    pub fn try_from_args<I, T>(args: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let config = Self::try_parse_from(args)?;
        config.validate()?;
        Ok(config)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |m: &str| Err(ConfigError::Invalid(m.to_owned()));
        if self.tick_ms == 0 {
            return invalid("--tick-ms must be at least 1");
        }
        if self.heartbeat_interval_ms == 0 {
            return invalid("--heartbeat-interval-ms must be at least 1");
        }
        if self.node_lost_after_ms < 2 * self.heartbeat_interval_ms {
            return invalid("--node-lost-after-ms must be at least twice --heartbeat-interval-ms");
        }
        if self.node_fence_after_ms < self.node_lost_after_ms {
            return invalid("--node-fence-after-ms must be at least --node-lost-after-ms");
        }
        if !(self.usage_half_life_hours.is_finite() && self.usage_half_life_hours > 0.0) {
            return invalid("--usage-half-life-hours must be a positive number");
        }
        if self.cycle_batch_ms >= self.tick_ms {
            return invalid("--cycle-batch-ms must be less than --tick-ms");
        }
        if self.leader_lease_ms <= 2 * self.tick_ms {
            return invalid("--leader-lease-ms must be more than twice --tick-ms");
        }
        if self.cycle_budget_ms == 0 || self.policy_compile_timeout_ms == 0 || self.policy_compiles == 0 {
            return invalid(
                "--cycle-budget-ms, --policy-compile-timeout-ms and --policy-compiles must be more than zero",
            );
        }
        if self.policy_suspend_after == 0 {
            return invalid("--policy-suspend-after must be at least 1");
        }
        if self.db_max_connections < 2 {
            return invalid("--db-max-connections must be at least 2 (the loop and the API each need one)");
        }
        if self.max_body_bytes < 1024 {
            return invalid("--max-body-bytes must be at least 1024");
        }
        if self.request_timeout_ms <= MAX_LONG_POLL_MS + 5000 {
            return invalid("--request-timeout-ms must exceed the agents' 30 s long-poll by 5 s");
        }
        if self.bootstrap_admin.is_none() && self.jwt_secret.is_none() && self.jwt_secret_file.is_none() {
            return invalid(
                "set --jwt-secret (AIRTIME_JWT_SECRET, at least 32 bytes) or --jwt-secret-file: it signs session tokens",
            );
        }
        if let Some(secret) = &self.jwt_secret
            && secret.expose().len() < crate::auth::jwt::MIN_SECRET_LEN
        {
            return invalid("--jwt-secret (AIRTIME_JWT_SECRET) must be at least 32 bytes");
        }
        if !(60..=86_400).contains(&self.session_ttl_secs) {
            return invalid("--session-ttl-secs must be between 60 and 86400");
        }
        if self.mutation_burst == 0 {
            return invalid("--mutation-burst must be at least 1");
        }
        if self.login_max_failures == 0 {
            return invalid("--login-max-failures must be at least 1");
        }
        Ok(())
    }

    pub fn leader_lease(&self) -> Duration {
        Duration::from_millis(self.leader_lease_ms)
    }

    pub fn tick(&self) -> Duration {
        Duration::from_millis(self.tick_ms)
    }
    pub fn node_lost_after(&self) -> Duration {
        Duration::from_millis(self.node_lost_after_ms)
    }

    /// What the scheduling loop reads of the configuration.
    pub fn scheduler_settings(&self) -> crate::scheduler::SchedulerSettings {
        crate::scheduler::SchedulerSettings {
            tick: self.tick(),
            batch_window: Duration::from_millis(self.cycle_batch_ms),
            leader_lease: self.leader_lease(),
            cycle_budget: Duration::from_millis(self.cycle_budget_ms),
            usage_half_life_hours: self.usage_half_life_hours,
            policy_suspend_after: self.policy_suspend_after,
        }
    }

    /// How long one telemetry sample stands for its GPU in the usage accounting: the silence after
    /// which a node is lost.
    pub fn telemetry_hold(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.node_lost_after_ms)
    }

    /// How much workload output is kept.
    pub fn log_limits(&self) -> crate::workloads::logs::LogLimits {
        crate::workloads::logs::LogLimits {
            per_workload: self.log_bytes_per_workload,
            per_tenant: self.log_bytes_per_tenant,
        }
    }

    /// What the fleet watch reads of the configuration.
    pub fn liveness_settings(&self) -> crate::fleet::liveness::LivenessSettings {
        crate::fleet::liveness::LivenessSettings {
            node_lost_after: self.node_lost_after(),
            node_fence_after: std::time::Duration::from_millis(self.node_fence_after_ms),
            gang_start_timeout: std::time::Duration::from_millis(self.gang_start_timeout_ms.max(1)),
            idle_util_threshold: self.idle_util_threshold,
            idle_reclaim_warning: std::time::Duration::from_secs(u64::from(self.idle_reclaim_warning_s)),
            telemetry_retention_hours: self.telemetry_retention_hours,
        }
    }

    /// The access-control settings.
    pub fn auth_settings(&self) -> crate::auth::AuthSettings {
        crate::auth::AuthSettings {
            session_ttl: Duration::from_secs(self.session_ttl_secs),
            mutations_per_minute: self.mutations_per_minute,
            mutation_burst: self.mutation_burst,
            login_max_failures: self.login_max_failures,
        }
    }

    /// The session signing secret: `--jwt-secret`, or the content of `--jwt-secret-file` (created
    /// with a random secret when missing).
    pub fn signing_secret(&self) -> anyhow::Result<Vec<u8>> {
        if let Some(secret) = &self.jwt_secret {
            return Ok(secret.expose().as_bytes().to_vec());
        }
        match &self.jwt_secret_file {
            Some(path) => crate::auth::jwt::load_or_create_secret(path),
            None => anyhow::bail!("set --jwt-secret (AIRTIME_JWT_SECRET) or --jwt-secret-file"),
        }
    }
}

/// A fraction between 0 and 1.
fn parse_unit(text: &str) -> Result<f32, String> {
    match text.parse::<f32>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("{text:?} is not a number between 0 and 1")),
    }
}

/// A mount prefix: an absolute directory, kept without a trailing slash (`/` stays `/`).
fn parse_mount_prefix(text: &str) -> Result<String, String> {
    let valid =
        text.starts_with('/') && !text.chars().any(char::is_control) && text.split('/').all(|c| c != "." && c != "..");
    if !valid {
        return Err(format!("{text:?} is not an absolute directory (no . or .. components)"));
    }
    let trimmed = text.trim_end_matches('/');
    Ok(if trimmed.is_empty() { "/".to_owned() } else { trimmed.to_owned() })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEST_SECRET: &str = "a-test-secret-of-at-least-32-bytes!";

    fn parse(extra: &[&str]) -> Result<Config, ConfigError> {
        let mut args = vec!["airtime-control-plane", "--database-url", "postgres://x/y"];
        if !extra.iter().any(|a| a.starts_with("--jwt-secret")) {
            args.extend_from_slice(&["--jwt-secret", TEST_SECRET]);
        }
        args.extend_from_slice(extra);
        Config::try_from_args(args)
    }

    #[test]
    fn a_signing_secret_is_required_except_to_bootstrap() {
        let bare = ["airtime-control-plane", "--database-url", "postgres://x/y"];
        let err = Config::try_from_args(bare).expect_err("no secret");
        assert!(err.to_string().contains("--jwt-secret"), "{err}");
        let mut bootstrap = bare.to_vec();
        bootstrap.extend_from_slice(&["--bootstrap-admin", "root@example.com"]);
        assert!(Config::try_from_args(bootstrap).is_ok());
    }

    #[test]
    fn defaults_are_valid() {
        let config = parse(&[]).expect("defaults parse");
        assert_eq!(config.tick(), Duration::from_secs(1));
        assert_eq!(config.listen.port(), 8080);
    }

    #[test]
    fn a_zero_tick_is_refused_with_the_flag_named() {
        let err = parse(&["--tick-ms", "0"]).expect_err("zero tick");
        assert!(err.to_string().contains("--tick-ms"), "{err}");
    }

    #[test]
    fn node_loss_must_allow_a_missed_heartbeat() {
        let err = parse(&["--heartbeat-interval-ms", "5000", "--node-lost-after-ms", "6000"]).expect_err("too tight");
        assert!(err.to_string().contains("--node-lost-after-ms"), "{err}");
    }

    #[test]
    fn a_short_jwt_secret_is_refused_without_being_echoed() {
        let err = parse(&["--jwt-secret", "tooshort-secret"]).expect_err("short");
        assert!(err.to_string().contains("--jwt-secret"), "{err}");
        assert!(!err.to_string().contains("tooshort-secret"), "{err}");
        let config = parse(&["--jwt-secret", "0123456789abcdef0123456789abcdef"]).expect("long enough");
        assert!(!format!("{config:?}").contains("0123456789abcdef"), "Debug must not show the secret");
        assert_eq!(config.signing_secret().expect("secret"), b"0123456789abcdef0123456789abcdef");
    }

    #[test]
    fn a_secret_file_is_created_once_and_reused() {
        let dir = std::env::temp_dir().join(format!("airtime-config-test-{}", uuid::Uuid::new_v4()));
        let path = dir.join("jwt.key");
        let path_arg = path.to_string_lossy().into_owned();
        let config = parse(&["--jwt-secret-file", &path_arg]).expect("file");
        let first = config.signing_secret().expect("created");
        assert!(first.len() >= 32);
        assert_eq!(config.signing_secret().expect("read"), first, "the same secret on the next start");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).expect("metadata").permissions().mode();
            assert_eq!(mode & 0o077, 0, "only the owner may read the key file");
        }
        let _ = std::fs::remove_dir_all(dir);
        assert!(parse(&["--jwt-secret-file", &path_arg, "--jwt-secret", &"x".repeat(40)]).is_err());
    }

    #[test]
    fn an_unknown_flag_is_an_error() {
        assert!(parse(&["--no-such-flag"]).is_err());
    }
}
