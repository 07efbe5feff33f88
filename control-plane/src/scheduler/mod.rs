//! The scheduling loop. Woken by events (a workload submitted or ended, a node joined or lost) and
//! by a periodic tick, each cycle: reads the fleet and the queue, asks the active platform policy
//! (a Wasm module) for decisions, checks every decision, and applies the sound ones in one
//! transaction with their reasons. A failing policy never stalls the loop: the cycle falls back to
//! the built-in policy and the failure is recorded.

pub mod check;
pub mod fleet_view;
pub mod record;
pub mod snapshot;

use std::sync::Arc;
use std::time::{Duration, Instant};

use airtime_policy_sdk::abi;
use anyhow::Context as _;

use crate::model::PLATFORM_SCOPE;
use crate::policies::LoadedPolicy;
use crate::scheduler::check::{Proposal, Scope};
use crate::scheduler::fleet_view::FleetView;
use crate::scheduler::record::{CycleOutcome, CycleRecord, Decider};
use crate::server::AppState;
use crate::signals::Shutdown;

/// Only one control plane at a time runs the loop; others wait on this advisory lock (standby).
const LEADER_LOCK: i64 = 0x4149_5254_494d_45; // "AIRTIME"

pub async fn run_loop(state: AppState, shutdown: Shutdown) {
    let _leader = loop {
        match become_leader(&state).await {
            Ok(conn) => break conn,
            Err(err) => tracing::warn!(error = %err, "waiting to lead the scheduling loop"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
        }
    };
    tracing::info!(tick_ms = state.config.tick_ms, "scheduling loop started");
    let mut ticker = tokio::time::interval(state.config.tick());
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        let trigger = tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => "tick",
            _ = state.wake.woken() => "event",
        };
        match run_cycle(&state, trigger).await {
            Ok(Some(outcome)) if outcome.nodes_changed => state.desired.announce(),
            Ok(_) => {}
            Err(err) => {
                state.metrics.cycle_failed();
                tracing::error!(
                    error = format!("{err:#}"),
                    "scheduling cycle failed; retrying next tick"
                );
            }
        }
    }
}

async fn become_leader(
    state: &AppState,
) -> anyhow::Result<sqlx::pool::PoolConnection<sqlx::Postgres>> {
    let mut conn = state.db.acquire().await?;
    let (got,): (bool,) = sqlx::query_as("SELECT pg_try_advisory_lock($1)")
        .bind(LEADER_LOCK)
        .fetch_one(&mut *conn)
        .await?;
    anyhow::ensure!(got, "another control plane leads the scheduling loop");
    // Held as long as this connection lives: dropping it (or a crash) hands leadership on.
    Ok(conn)
}

/// One cycle. Returns None when there was nothing to decide.
pub async fn run_cycle(state: &AppState, trigger: &str) -> anyhow::Result<Option<CycleOutcome>> {
    let started_at = chrono::Utc::now();
    let clock = Instant::now();
    let fleet = {
        let mut conn = state.db.acquire().await?;
        FleetView::load(&mut conn)
            .await
            .context("reading the fleet and the queue")?
    };
    state.metrics.set_queue_depth(fleet.pending_count());
    if fleet.pending_count() == 0 {
        return Ok(None);
    }

    let active = match state.policies.active(&state.db, PLATFORM_SCOPE).await {
        Ok(Some(active)) => active,
        Ok(None) => state.policies.fallback(&state.db).await?,
        Err(err) => {
            tracing::error!(
                error = format!("{err:#}"),
                "loading the active platform policy; using the built-in"
            );
            state.policies.fallback(&state.db).await?
        }
    };
    let (proposals, decider, error) = decide(state, &fleet, &active).await?;
    let checked = check::check(&fleet, Scope::Platform, proposals);
    for refusal in &checked.refused {
        tracing::warn!(policy = %decider.policy_name, reason = %refusal.reason, "refused a policy decision");
    }
    let outcome = record::apply(
        &state.db,
        &fleet,
        &checked.accepted,
        &checked.refused,
        CycleRecord {
            started_at,
            trigger,
            decider: &decider,
            error,
        },
    )
    .await
    .context("applying the cycle's decisions")?;
    let elapsed = clock.elapsed();
    state.metrics.cycle_finished(elapsed);
    tracing::debug!(
        cycle = outcome.cycle_id,
        placed = outcome.placed,
        preempted = outcome.preempted,
        pending = outcome.pending,
        refused = outcome.refused,
        elapsed_us = elapsed.as_micros() as u64,
        "cycle"
    );
    Ok(Some(outcome))
}

/// Evaluates the active policy; when it fails, records why and decides with the built-in instead.
async fn decide(
    state: &AppState,
    fleet: &FleetView,
    active: &Arc<LoadedPolicy>,
) -> anyhow::Result<(Vec<Proposal>, Decider, Option<String>)> {
    match evaluate(state, fleet, active).await {
        Ok(proposals) => Ok((proposals, decider(active), None)),
        Err((kind, message)) => {
            tracing::warn!(policy = %active.name, version = active.version, kind, %message, "policy failed; using the built-in");
            crate::policies::record_failure(&state.db, active.version_id, kind, &message).await?;
            let fallback = state.policies.fallback(&state.db).await?;
            let error = Some(format!(
                "{} v{} failed ({kind}): {message}",
                active.name, active.version
            ));
            if fallback.version_id == active.version_id {
                return Ok((Vec::new(), decider(active), error));
            }
            match evaluate(state, fleet, &fallback).await {
                Ok(proposals) => Ok((proposals, decider(&fallback), error)),
                Err((kind, message)) => {
                    anyhow::bail!("the built-in policy failed too ({kind}): {message}")
                }
            }
        }
    }
}

fn decider(policy: &LoadedPolicy) -> Decider {
    Decider {
        policy_version_id: Some(policy.version_id),
        policy_name: format!("{} v{}", policy.name, policy.version),
    }
}

async fn evaluate(
    state: &AppState,
    fleet: &FleetView,
    policy: &Arc<LoadedPolicy>,
) -> Result<Vec<Proposal>, (&'static str, String)> {
    let bytes = abi::encode_snapshot(&snapshot::build(fleet, &policy.params, None));
    let evaluation = state
        .policies
        .evaluate(policy, bytes)
        .await
        .map_err(|e| (e.kind(), e.to_string()))?;
    for line in &evaluation.logs {
        tracing::info!(policy = %policy.name, level = ?line.level, "policy log: {}", line.message);
    }
    let decisions = abi::decode_decisions(&evaluation.output)
        .map_err(|e| ("malformed_output", e.to_string()))?;
    Ok(snapshot::proposals(decisions))
}
