//! The scheduling loop. Woken by events (a workload submitted or ended, a node joined or lost) and
//! by a periodic tick, each cycle: reads the fleet and the queue, asks the active platform policy
//! (a Wasm module) for decisions, checks every decision, and applies the sound ones in one
//! transaction with their reasons. A failing policy never stalls the loop: the cycle falls back to
//! the built-in policy and the failure is recorded.

pub mod check;
pub mod fleet_view;
pub mod record;
pub mod shadow;
pub mod snapshot;
pub mod usage;

use std::sync::Arc;
use std::time::{Duration, Instant};

use airtime_policy_sdk::abi;
use anyhow::Context as _;

use crate::model::PLATFORM_SCOPE;
use crate::policies::Selected;
use crate::scheduler::check::{Proposal, Scope};
use crate::scheduler::fleet_view::FleetView;
use crate::scheduler::record::{CycleOutcome, CycleRecord, Decider};
use crate::server::AppState;
use crate::signals::Shutdown;

/// Only one control plane at a time runs the loop; others wait on this advisory lock (standby).
const LEADER_LOCK: i64 = 0x0041_4952_5449_4d45; // "AIRTIME"

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
                tracing::error!(error = format!("{err:#}"), "scheduling cycle failed; retrying next tick");
            }
        }
    }
}

async fn become_leader(state: &AppState) -> anyhow::Result<sqlx::pool::PoolConnection<sqlx::Postgres>> {
    let mut conn = state.db.acquire().await?;
    let (got,): (bool,) =
        sqlx::query_as("SELECT pg_try_advisory_lock($1)").bind(LEADER_LOCK).fetch_one(&mut *conn).await?;
    anyhow::ensure!(got, "another control plane leads the scheduling loop");
    // Held as long as this connection lives: dropping it (or a crash) hands leadership on.
    Ok(conn)
}

/// One cycle. Returns None when there was nothing to decide.
pub async fn run_cycle(state: &AppState, trigger: &str) -> anyhow::Result<Option<CycleOutcome>> {
    let started_at = chrono::Utc::now();
    let clock = Instant::now();
    usage::accrue(&state.db, state.config.usage_half_life_hours).await.context("accruing tenant usage")?;
    let fleet = {
        let mut conn = state.db.acquire().await?;
        FleetView::load(&mut conn).await.context("reading the fleet and the queue")?
    };
    state.metrics.set_queue_depth(fleet.pending_count());
    if fleet.pending_count() == 0 {
        return Ok(None);
    }
    let mut notes = Notes::default();

    // Level 1: the platform policy arbitrates between tenants and classes, for everyone.
    let platform = match state.policies.active(&state.db, PLATFORM_SCOPE).await {
        Ok(Some(active)) => active,
        Ok(None) => state.policies.fallback(&state.db).await?,
        Err(err) => {
            tracing::error!(error = format!("{err:#}"), "loading the active platform policy; using the built-in");
            state.policies.fallback(&state.db).await?
        }
    };
    let (proposals, platform_decider) = decide(state, &fleet, &platform, None, &mut notes).await?;
    let platform_checked = check::check(&fleet, Scope::Platform, proposals.clone());
    let platform_decider = Arc::new(platform_decider);
    let mut accepted: Vec<(Proposal, Arc<Decider>)> =
        platform_checked.accepted.iter().cloned().map(|p| (p, platform_decider.clone())).collect();
    let mut refused: Vec<(check::Refusal, Arc<Decider>)> =
        platform_checked.refused.iter().cloned().map(|r| (r, platform_decider.clone())).collect();

    // Level 2: a tenant's own policy orders and places its work within what it was granted.
    for tenant in 0..fleet.tenants.len() {
        let has_pending =
            fleet.workloads.iter().any(|w| w.tenant == tenant && w.state == crate::model::WorkloadState::Pending);
        if !has_pending {
            continue;
        }
        let scope = fleet.tenants[tenant].id.to_string();
        let Some(own) = state.policies.active(&state.db, &scope).await? else { continue };
        let mine = |p: &Proposal| fleet.workloads[p.workload()].tenant == tenant;
        let mut granted_gpus = Vec::new();
        let mut granted_nodes = Vec::new();
        for (p, _) in accepted.iter().filter(|(p, _)| mine(p)) {
            if let Proposal::Place { node, gpus, .. } = p {
                granted_gpus.extend(gpus.iter().copied());
                granted_nodes.push(*node);
            }
        }
        let view = fleet.tenant_view(tenant, &granted_gpus, &granted_nodes);
        let (tenant_proposals, tenant_decider) =
            match evaluate_logged(state, &view.view, &own, Some(tenant), &mut notes).await {
                Ok(proposals) => (proposals, decider(&own)),
                Err(failure) => {
                    notes.failures.push((own.clone(), failure));
                    continue; // the platform's decisions for this tenant stand
                }
            };
        notes.successes.push(own.clone());
        let tenant_checked = check::check(&view.view, Scope::Tenant(tenant), tenant_proposals);
        let tenant_decider = Arc::new(tenant_decider);
        // The platform's preemptions of this tenant's work stand (reclaim, bursts); its placements
        // and reasons give way to the tenant's own, within the grant.
        accepted.retain(|(p, _)| !mine(p) || matches!(p, Proposal::Preempt { .. }));
        let platform_preempted: Vec<usize> = accepted.iter().map(|(p, _)| p.workload()).collect();
        for p in tenant_checked.accepted {
            let p = remap(p, &view);
            if !platform_preempted.contains(&p.workload()) {
                accepted.push((p, tenant_decider.clone()));
            }
        }
        // The tenant's pending work its policy left undecided waits, and says why.
        let decided: std::collections::HashSet<usize> = accepted.iter().map(|(p, _)| p.workload()).collect();
        for &w in &view.workloads {
            if fleet.workloads[w].state == crate::model::WorkloadState::Pending && !decided.contains(&w) {
                let reason = format!("{} did not place it within the tenant's grant this cycle", own.label());
                accepted.push((Proposal::KeepPending { workload: w, reason }, tenant_decider.clone()));
            }
        }
        for r in tenant_checked.refused {
            let r = check::Refusal { workload: r.workload.map(|w| view.workloads[w]), reason: r.reason };
            refused.push((r, tenant_decider.clone()));
        }
    }

    // The composed decisions are checked once more as a whole: no GPU given twice across levels.
    let deciders: std::collections::HashMap<usize, Arc<Decider>> =
        accepted.iter().map(|(p, d)| (p.workload(), d.clone())).collect();
    let final_check = check::check(&fleet, Scope::Platform, accepted.into_iter().map(|(p, _)| p).collect());
    let accepted: Vec<(Proposal, Arc<Decider>)> = final_check
        .accepted
        .into_iter()
        .map(|p| {
            let d = deciders.get(&p.workload()).cloned().unwrap_or_else(|| platform_decider.clone());
            (p, d)
        })
        .collect();
    refused.extend(final_check.refused.into_iter().map(|r| (r, platform_decider.clone())));
    for (refusal, d) in &refused {
        tracing::warn!(policy = %d.policy_name, reason = %refusal.reason, "refused a policy decision");
    }

    // Shadow: a candidate for the platform scope, evaluated on the same snapshot, never applied.
    let shadow = match state.policies.shadow(&state.db, PLATFORM_SCOPE).await {
        Ok(Some(candidate)) => Some((candidate.clone(), evaluate(state, &fleet, &candidate, None).await)),
        Ok(None) => None,
        Err(err) => {
            tracing::warn!(error = format!("{err:#}"), "loading the shadow policy");
            None
        }
    };

    let accepted_refs: Vec<(Proposal, &Decider)> = accepted.iter().map(|(p, d)| (p.clone(), d.as_ref())).collect();
    let refused_refs: Vec<(check::Refusal, &Decider)> = refused.iter().map(|(r, d)| (r.clone(), d.as_ref())).collect();
    let error = notes.failures.first().map(|(s, f)| format!("{} failed ({}): {}", s.label(), f.kind, f.message));
    let outcome = record::apply(
        &state.db,
        &fleet,
        &accepted_refs,
        &refused_refs,
        CycleRecord { started_at, trigger, decider: &platform_decider, error },
    )
    .await
    .context("applying the cycle's decisions")?;

    notes.record(state, outcome.cycle_id).await;
    if let Some((candidate, result)) = shadow {
        let compared = shadow::compare(&fleet, &platform_checked.accepted, result);
        if let Err(err) = shadow::record(&state.db, outcome.cycle_id, &candidate, &platform_decider, &compared).await {
            tracing::warn!(error = %err, "recording the shadow comparison");
        }
    }

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

fn remap(p: Proposal, view: &fleet_view::TenantView) -> Proposal {
    match p {
        Proposal::Place { workload, node, gpus, reason } => Proposal::Place {
            workload: view.workloads[workload],
            node: view.nodes[node],
            gpus: gpus.into_iter().map(|g| view.gpus[g]).collect(),
            reason,
        },
        Proposal::Preempt { workload, reason } => Proposal::Preempt { workload: view.workloads[workload], reason },
        Proposal::KeepPending { workload, reason } => {
            Proposal::KeepPending { workload: view.workloads[workload], reason }
        }
    }
}

/// What happened to each evaluated policy this cycle, recorded once the cycle has an id.
#[derive(Default)]
struct Notes {
    failures: Vec<(Selected, Failure)>,
    successes: Vec<Selected>,
    logs: Vec<(Selected, Vec<airtime_policy_host::PolicyLog>)>,
}

impl Notes {
    async fn record(self, state: &AppState, cycle_id: i64) {
        for (selected, failure) in &self.failures {
            match crate::policies::record_failure(
                &state.db,
                selected,
                Some(cycle_id),
                failure.kind,
                &failure.message,
                state.config.policy_suspend_after,
            )
            .await
            {
                Ok(true) => tracing::error!(policy = %selected.label(), "policy suspended after repeated failures"),
                Ok(false) => {}
                Err(err) => tracing::error!(error = %err, "recording a policy failure"),
            }
            if let Err(err) = crate::policies::record_logs(&state.db, selected, Some(cycle_id), &failure.logs).await {
                tracing::warn!(error = %err, "recording policy logs");
            }
        }
        for selected in &self.successes {
            if let Err(err) = crate::policies::record_success(&state.db, selected).await {
                tracing::warn!(error = %err, "resetting a policy's failure count");
            }
        }
        for (selected, logs) in &self.logs {
            if let Err(err) = crate::policies::record_logs(&state.db, selected, Some(cycle_id), logs).await {
                tracing::warn!(error = %err, "recording policy logs");
            }
        }
    }
}

/// Why an evaluation gave no usable decisions.
#[derive(Debug, Clone)]
pub struct Failure {
    pub kind: &'static str,
    pub message: String,
    /// What the policy logged before it failed: often what explains it.
    pub logs: Vec<airtime_policy_host::PolicyLog>,
}

/// Evaluates a scope's policy; when it fails, notes why and decides with the built-in instead.
async fn decide(
    state: &AppState,
    fleet: &FleetView,
    selected: &Selected,
    scope_tenant: Option<usize>,
    notes: &mut Notes,
) -> anyhow::Result<(Vec<Proposal>, Decider)> {
    match evaluate_logged(state, fleet, selected, scope_tenant, notes).await {
        Ok(proposals) => {
            notes.successes.push(selected.clone());
            Ok((proposals, decider(selected)))
        }
        Err(failure) => {
            tracing::warn!(policy = %selected.label(), kind = failure.kind, message = %failure.message,
                "policy failed; this cycle uses the built-in");
            notes.failures.push((selected.clone(), failure));
            let fallback = state.policies.fallback(&state.db).await?;
            if fallback.policy.version_id == selected.policy.version_id {
                return Ok((Vec::new(), decider(selected)));
            }
            match evaluate_logged(state, fleet, &fallback, scope_tenant, notes).await {
                Ok(proposals) => Ok((proposals, decider(&fallback))),
                Err(failure) => anyhow::bail!("the built-in policy failed too ({}): {}", failure.kind, failure.message),
            }
        }
    }
}

fn decider(selected: &Selected) -> Decider {
    Decider { policy_version_id: Some(selected.policy.version_id), policy_name: selected.label() }
}

async fn evaluate_logged(
    state: &AppState,
    fleet: &FleetView,
    selected: &Selected,
    scope_tenant: Option<usize>,
    notes: &mut Notes,
) -> Result<Vec<Proposal>, Failure> {
    let (result, logs) = evaluate_with_logs(state, fleet, selected, scope_tenant).await;
    if result.is_ok() && !logs.is_empty() {
        notes.logs.push((selected.clone(), logs));
    }
    result
}

async fn evaluate(
    state: &AppState,
    fleet: &FleetView,
    selected: &Selected,
    scope_tenant: Option<usize>,
) -> Result<Vec<Proposal>, Failure> {
    evaluate_with_logs(state, fleet, selected, scope_tenant).await.0
}

/// Runs a policy on the fleet and decodes its decisions into proposals.
pub async fn evaluate_with_logs(
    state: &AppState,
    fleet: &FleetView,
    selected: &Selected,
    scope_tenant: Option<usize>,
) -> (Result<Vec<Proposal>, Failure>, Vec<airtime_policy_host::PolicyLog>) {
    let bytes = abi::encode_snapshot(&snapshot::build(fleet, &selected.params, scope_tenant));
    let record = state.policies.evaluate(selected, bytes).await;
    let logs = record.logs.clone();
    let result = match record.into_result() {
        Ok(evaluation) => match abi::decode_decisions(&evaluation.output) {
            Ok(decisions) => Ok(snapshot::proposals(decisions)),
            Err(err) => Err(Failure { kind: "malformed_output", message: err.to_string(), logs: logs.clone() }),
        },
        Err(err) => Err(Failure { kind: err.kind(), message: err.to_string(), logs: logs.clone() }),
    };
    (result, logs)
}

/// A dry run: what a policy would decide on the current fleet and queue, checked like real
/// decisions, with its logs. Nothing is applied or recorded.
#[derive(Debug, serde::Serialize)]
pub struct DryRun {
    pub policy: String,
    pub elapsed_ms: f64,
    pub decisions: Vec<serde_json::Value>,
    pub refused: Vec<serde_json::Value>,
    pub logs: Vec<airtime_policy_host::PolicyLog>,
    pub error: Option<String>,
}

pub async fn dry_run(state: &AppState, selected: &Selected) -> anyhow::Result<DryRun> {
    let fleet = {
        let mut conn = state.db.acquire().await?;
        FleetView::load(&mut conn).await?
    };
    let clock = Instant::now();
    let (result, logs) = evaluate_with_logs(state, &fleet, selected, None).await;
    let elapsed_ms = clock.elapsed().as_secs_f64() * 1000.0;
    let describe = |p: &Proposal| {
        let w = &fleet.workloads[p.workload()];
        let (kind, node, gpus, reason) = match p {
            Proposal::Place { node, gpus, reason, .. } => (
                "place",
                Some(fleet.nodes[*node].name.clone()),
                gpus.iter().map(|&g| fleet.gpus[g].device_index).collect::<Vec<_>>(),
                reason,
            ),
            Proposal::Preempt { reason, .. } => {
                ("preempt", w.node.map(|n| fleet.nodes[n].name.clone()), vec![], reason)
            }
            Proposal::KeepPending { reason, .. } => ("keep_pending", None, vec![], reason),
        };
        serde_json::json!({"workload_id": w.id, "workload_name": w.name, "kind": kind, "node": node,
                           "gpu_indices": gpus, "reason": reason})
    };
    Ok(match result {
        Ok(proposals) => {
            let checked = check::check(&fleet, Scope::Platform, proposals);
            DryRun {
                policy: selected.label(),
                elapsed_ms,
                decisions: checked.accepted.iter().map(describe).collect(),
                refused: checked
                    .refused
                    .iter()
                    .map(|r| serde_json::json!({"workload_id": r.workload.map(|w| fleet.workloads[w].id), "reason": r.reason}))
                    .collect(),
                logs,
                error: None,
            }
        }
        Err(failure) => DryRun {
            policy: selected.label(),
            elapsed_ms,
            decisions: vec![],
            refused: vec![],
            logs,
            error: Some(format!("{}: {}", failure.kind, failure.message)),
        },
    })
}
