//! The background runner of what-if replays. Every control-plane replica runs one: it claims the
//! next queued run in turns across tenants — the run whose tenant has had the fewest runs started
//! since it was asked for (or queued ahead of it), the oldest first among equals, so one tenant's
//! queue never holds another's behind all of it — (`FOR UPDATE SKIP LOCKED`, so two replicas never
//! take the same one), reads
//! the history, and replays it twice — the active policies, then the candidate in its level — on
//! one OS thread of its own, outside the async runtime and the policy catalogue's lanes, so a
//! replay takes at most one core and never delays a scheduling cycle. A replay past
//! `--what-if-timeout-s` is stopped and the run fails with that reason. Progress and a heartbeat
//! are written every second; a run whose heartbeat stops (its replica died) is claimed again
//! after [`STALE_AFTER`], so a restart loses no run.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use airtime_replay::engine::{self, Config};
use airtime_replay::policy::{Catalog, SimPolicy};
use airtime_replay::score::Scores;
use anyhow::Context;
use sqlx::PgPool;
use uuid::Uuid;

use crate::model::PLATFORM_SCOPE;
use crate::signals::Shutdown;
use crate::what_if::history::{self, History};

/// A run whose heartbeat is older than this is taken over.
const STALE_AFTER: &str = "30 seconds";
/// How often an idle runner looks for queued runs.
const POLL: Duration = Duration::from_secs(1);
/// The replay's minimum virtual seconds between cycles (the loop's own pace is about a second).
const MIN_CYCLE_INTERVAL_S: u64 = 1;

/// The runner's handles.
#[derive(Clone)]
pub struct Runner {
    pub db: PgPool,
    /// The longest both replays of one run may take, together.
    pub timeout: Duration,
}

/// A claimed run.
#[derive(sqlx::FromRow)]
struct Claimed {
    id: Uuid,
    policy_version_id: Uuid,
    scope_tenant_id: Option<Uuid>,
    viewer_tenant_id: Option<Uuid>,
    params: serde_json::Value,
    hours: i32,
}

/// A policy version's module, as the replay loads it.
#[derive(Clone)]
struct Module {
    name: String,
    wasm: Vec<u8>,
    params: String,
    builtin: bool,
}

/// The policies of one replay: the platform's (the built-in fallback when none) and the tenants'
/// own, by tenant index.
type Levels = (Option<Module>, Vec<(usize, Module)>);

/// Runs queued what-if replays until shutdown.
pub async fn run(runner: Runner, shutdown: Shutdown) {
    loop {
        if shutdown.is_cancelled() {
            return;
        }
        match claim(&runner.db).await {
            Ok(Some(claimed)) => {
                let id = claimed.id;
                let outcome = execute(&runner, claimed, &shutdown).await;
                if shutdown.is_cancelled() {
                    // Left running with a stopped heartbeat: claimed again after a restart.
                    return;
                }
                if let Err(err) = finish(&runner.db, id, outcome).await {
                    tracing::error!(error = format!("{err:#}"), %id, "recording a what-if run's outcome");
                }
                continue;
            }
            Ok(None) => {}
            Err(err) => tracing::warn!(error = format!("{err:#}"), "looking for what-if runs"),
        }
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

async fn claim(db: &PgPool) -> sqlx::Result<Option<Claimed>> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "UPDATE what_if_runs SET state = 'running', started_at = coalesce(started_at, now()), heartbeat_at = now(), \
             progress = 0 \
         WHERE id = (SELECT w.id FROM what_if_runs w \
                     WHERE w.state = 'queued' OR (w.state = 'running' AND w.heartbeat_at < now() - interval '{STALE_AFTER}') \
                     ORDER BY (SELECT count(*) FROM what_if_runs r \
                               WHERE r.viewer_tenant_id IS NOT DISTINCT FROM w.viewer_tenant_id AND r.id <> w.id \
                                 AND (r.started_at >= w.created_at OR (r.state = 'queued' AND r.created_at < w.created_at))), \
                              w.created_at \
                     LIMIT 1 FOR UPDATE SKIP LOCKED) \
         RETURNING id, policy_version_id, scope_tenant_id, viewer_tenant_id, params, hours"
    )))
    .fetch_optional(db)
    .await
}

async fn finish(db: &PgPool, id: Uuid, outcome: anyhow::Result<serde_json::Value>) -> sqlx::Result<()> {
    let (state, result, error) = match outcome {
        Ok(result) => ("succeeded", Some(result), None),
        Err(err) => ("failed", None, Some(format!("{err:#}"))),
    };
    sqlx::query(
        "UPDATE what_if_runs SET state = $2, result = $3, error = $4, progress = CASE WHEN $2 = 'succeeded' THEN 1 \
             ELSE progress END, finished_at = now() WHERE id = $1",
    )
    .bind(id)
    .bind(state)
    .bind(result)
    .bind(error)
    .execute(db)
    .await?;
    Ok(())
}

/// Reads the run's history and policies, stores them as its inputs, replays both on a thread of
/// its own while writing progress, and answers the result (cut to the viewer's tenant).
async fn execute(runner: &Runner, claimed: Claimed, shutdown: &Shutdown) -> anyhow::Result<serde_json::Value> {
    let mut conn = runner.db.acquire().await?;
    let fleet = crate::scheduler::fleet_view::load(&mut conn).await.context("reading the fleet")?;
    let candidate = version_module(&mut conn, claimed.policy_version_id, &claimed.params.to_string()).await?;
    let actives = active_modules(&mut conn).await?;
    let tenant_names: HashMap<Uuid, String> =
        actives.iter().filter_map(|(scope, m)| Some((scope.parse::<Uuid>().ok()?, m.name.clone()))).collect();
    let history = history::read(&mut conn, &fleet, claimed.hours.max(1) as u32, &tenant_names).await?;
    drop(conn);
    history.fleet.check().map_err(|m| anyhow::anyhow!("the fleet cannot be replayed: {m}"))?;
    for w in &history.trace.workloads {
        w.check().map_err(|m| anyhow::anyhow!("workload {} cannot be replayed: {m}", w.id))?;
    }

    let config = Config {
        min_cycle_interval_s: MIN_CYCLE_INTERVAL_S,
        window_s: history.window_s,
        until_s: history.window_s,
        ..Config::default()
    };
    let platform_active = actives.get(PLATFORM_SCOPE).cloned();
    let tenant_index: HashMap<Uuid, usize> = fleet.tenants.iter().enumerate().map(|(i, t)| (t.id, i)).collect();
    let mut tenant_levels: Vec<(usize, Module)> = actives
        .iter()
        .filter_map(|(scope, m)| Some((*tenant_index.get(&scope.parse::<Uuid>().ok()?)?, m.clone())))
        .collect();
    tenant_levels.sort_by_key(|(t, _)| *t);
    let candidate_levels = match claimed.scope_tenant_id.and_then(|t| tenant_index.get(&t).copied()) {
        Some(tenant) => {
            let mut levels: Vec<(usize, Module)> =
                tenant_levels.iter().filter(|(t, _)| *t != tenant).cloned().collect();
            levels.push((tenant, candidate.clone()));
            (platform_active.clone(), levels)
        }
        None if claimed.scope_tenant_id.is_some() => anyhow::bail!("the policy's tenant is gone"),
        None => (Some(candidate.clone()), tenant_levels.clone()),
    };
    let inputs = serde_json::json!({
        "fleet": history.fleet,
        "trace": trace_lines(&history)?,
        "from": history.from,
        "config": {"min_cycle_interval_s": config.min_cycle_interval_s, "window_s": config.window_s,
                   "until_s": config.until_s, "seed": config.seed},
        "candidate": {"name": candidate.name, "params": candidate.params},
        "active": platform_active.as_ref().map(|m| serde_json::json!({"name": m.name, "params": m.params})),
    });
    sqlx::query("UPDATE what_if_runs SET inputs = $2 WHERE id = $1")
        .bind(claimed.id)
        .bind(&inputs)
        .execute(&runner.db)
        .await?;

    // The replays, on a thread of their own: two halves of the progress.
    let progress = Arc::new(AtomicU32::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + runner.timeout;
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    let replays: [Levels; 2] = [(platform_active, tenant_levels), candidate_levels];
    {
        let progress = progress.clone();
        let stop = stop.clone();
        let History { fleet: spec, trace, .. } = history;
        let config = config.clone();
        std::thread::Builder::new().name("what-if".into()).spawn(move || {
            let result = replay_both(&spec, &trace, &replays, &config, &progress, &stop, deadline);
            let _ = tx.send(result);
        })?;
    }
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let scores = loop {
        tokio::select! {
            result = &mut rx => break result.context("the replay thread ended without an answer")??,
            _ = tick.tick() => {
                let share = f64::from(progress.load(Ordering::Relaxed)) / 1000.0;
                sqlx::query("UPDATE what_if_runs SET progress = $2, heartbeat_at = now() WHERE id = $1")
                    .bind(claimed.id)
                    .bind(share)
                    .execute(&runner.db)
                    .await?;
            }
            () = shutdown.cancelled() => {
                stop.store(true, Ordering::Relaxed);
                anyhow::bail!("the control plane is shutting down");
            }
        }
    };
    let [active, candidate] = scores;
    let viewer =
        claimed.viewer_tenant_id.and_then(|t| fleet.tenants.iter().find(|x| x.id == t)).map(|t| t.name.clone());
    Ok(serde_json::json!({
        "from": inputs["from"],
        "window_s": config.window_s,
        "workloads": inputs["trace"].as_str().map_or(0, |t| t.lines().count()),
        "active": cut(active, viewer.as_deref()),
        "candidate": cut(candidate, viewer.as_deref()),
    }))
}

/// Both replays, in order (the active setup, then the candidate's), each half of the progress.
fn replay_both(
    fleet: &airtime_replay::format::FleetSpec,
    trace: &airtime_replay::format::Trace,
    replays: &[Levels; 2],
    config: &Config,
    progress: &AtomicU32,
    stop: &AtomicBool,
    deadline: Instant,
) -> anyhow::Result<[Scores; 2]> {
    let catalog = Catalog::new()?;
    let load = |m: &Module| -> anyhow::Result<SimPolicy> { catalog.module(&m.name, &m.wasm, &m.params, m.builtin) };
    let mut out = Vec::with_capacity(2);
    for (half, (platform, tenants)) in replays.iter().enumerate() {
        let platform = match platform {
            Some(m) => load(m)?,
            None => catalog.load(airtime_replay::policy::FALLBACK)?,
        };
        let tenants: Vec<(usize, SimPolicy)> =
            tenants.iter().map(|(t, m)| Ok((*t, load(m)?))).collect::<anyhow::Result<_>>()?;
        let mut watch = |p: engine::Progress| {
            progress.store(((half as f64 + p.share()) * 500.0) as u32, Ordering::Relaxed);
            if stop.load(Ordering::Relaxed) {
                ControlFlow::Break("cancelled".to_owned())
            } else if Instant::now() > deadline {
                ControlFlow::Break("past the what-if time limit (--what-if-timeout-s)".to_owned())
            } else {
                ControlFlow::Continue(())
            }
        };
        out.push(engine::run_watched(&catalog, fleet, trace, &platform, &tenants, config, &mut watch)?);
    }
    let [a, b]: [Scores; 2] = out.try_into().map_err(|_| anyhow::anyhow!("two replays"))?;
    Ok([a, b])
}

/// Scores as a caller may see them: a tenant's caller gets the fleet's totals and its own
/// tenant's line only.
fn cut(mut scores: Scores, viewer: Option<&str>) -> serde_json::Value {
    if let Some(name) = viewer {
        scores.tenants.retain(|t| t.name == name);
        scores.services.clear();
    }
    serde_json::to_value(scores).unwrap_or(serde_json::Value::Null)
}

fn trace_lines(history: &History) -> anyhow::Result<String> {
    let mut out = Vec::new();
    history.trace.write(&mut out)?;
    Ok(String::from_utf8(out)?)
}

async fn version_module(conn: &mut sqlx::PgConnection, version: Uuid, params: &str) -> anyhow::Result<Module> {
    let (name, wasm, builtin): (String, Vec<u8>, bool) = sqlx::query_as(
        "SELECT p.name, v.wasm, p.builtin FROM policy_versions v JOIN policies p ON p.id = v.policy_id WHERE v.id = $1",
    )
    .bind(version)
    .fetch_optional(&mut *conn)
    .await?
    .context("the policy version is gone")?;
    Ok(Module { name, wasm, params: params.to_owned(), builtin })
}

/// Every scope's active (not suspended) policy, by scope.
async fn active_modules(conn: &mut sqlx::PgConnection) -> anyhow::Result<HashMap<String, Module>> {
    let rows: Vec<(String, String, Vec<u8>, serde_json::Value, bool)> = sqlx::query_as(
        "SELECT a.scope, p.name, v.wasm, a.params, p.builtin FROM policy_activations a \
         JOIN policy_versions v ON v.id = a.policy_version_id JOIN policies p ON p.id = v.policy_id \
         WHERE a.suspended_at IS NULL",
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(scope, name, wasm, params, builtin)| (scope, Module { name, wasm, params: params.to_string(), builtin }))
        .collect())
}
