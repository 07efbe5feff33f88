//! The scheduling loop. Woken by events (a workload submitted or ended, a node joined or lost) and
//! by a periodic tick, each cycle: reads the fleet and the queue, asks the active platform policy
//! (a Wasm module) for decisions, checks every decision, and applies the sound ones in one
//! transaction with their reasons. A failing policy never stalls the loop: the cycle falls back to
//! the built-in policy and the failure is recorded.

pub mod check;
pub mod fleet_view;
pub mod leader;
pub mod record;
pub mod shadow;
pub mod snapshot;
pub mod usage;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use airtime_policy_sdk::abi;
use anyhow::Context as _;

use crate::model::PLATFORM_SCOPE;
use crate::policies::{Lane, Selected};
use crate::scheduler::check::{Proposal, Scope};
use crate::scheduler::fleet_view::{FleetView, TenantView};
use crate::scheduler::record::{CycleOutcome, CycleRecord, Decider};
use crate::server::AppState;
use crate::signals::Shutdown;
use uuid::Uuid;

/// Runs the loop while this replica leads (see [`leader`]); stands by otherwise, taking over when
/// the leader's lease lapses.
pub async fn run_loop(state: AppState, shutdown: Shutdown) {
    let mut ticker = tokio::time::interval(state.config.tick());
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let standby_poll = (state.config.leader_lease() / 4).clamp(Duration::from_millis(100), Duration::from_secs(2));
    let mut standing_by = false;
    loop {
        if state.leadership.epoch().is_none() {
            match state.leadership.try_acquire(&state.db).await {
                Ok(true) => {
                    standing_by = false;
                    tracing::info!(
                        epoch = state.leadership.epoch(),
                        tick_ms = state.config.tick_ms,
                        "leading the scheduling loop"
                    );
                }
                Ok(false) => {
                    if !standing_by {
                        tracing::info!("another control plane leads the scheduling loop; standing by");
                        standing_by = true;
                    }
                }
                Err(err) => tracing::warn!(error = %err, "cannot reach the database to lead the scheduling loop"),
            }
            if state.leadership.epoch().is_none() {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(standby_poll) => continue,
                }
            }
        }
        let trigger = tokio::select! {
            _ = shutdown.cancelled() => {
                state.leadership.release(&state.db).await;
                return;
            }
            _ = ticker.tick() => "tick",
            _ = state.wake.woken() => "event",
        };
        if trigger == "tick" {
            match state.leadership.renew(&state.db).await {
                Ok(()) => {}
                Err(leader::LeaseError::Deposed) => {
                    tracing::warn!("lost the scheduling lease to another control plane; standing by");
                    continue;
                }
                Err(leader::LeaseError::Database(err)) => {
                    tracing::warn!(error = %err, "cannot renew the scheduling lease");
                }
            }
        }
        match run_cycle(&state, trigger).await {
            Ok(Some(outcome)) if outcome.nodes_changed => state.desired.announce(),
            Ok(_) => {}
            Err(err)
                if err
                    .downcast_ref::<leader::LeaseError>()
                    .is_some_and(|e| matches!(e, leader::LeaseError::Deposed)) =>
            {
                tracing::warn!("a cycle found the scheduling lease lost and rolled back; standing by");
            }
            Err(err) => {
                let error = format!("{err:#}");
                state.metrics.cycle_failed(&error);
                tracing::error!(error, "scheduling cycle failed; retrying next tick");
            }
        }
    }
}

/// One tenant's own policy in a cycle: what it decided within its grant (checked in its view), or
/// why it did not.
struct TenantRun {
    tenant: usize,
    selected: Selected,
    view: fleet_view::TenantView,
    result: Result<check::Checked, Failure>,
}

/// The platform level of a cycle: its policy's checked decisions.
struct PlatformRun {
    selected: Selected,
    decider: Arc<Decider>,
    checked: check::Checked,
}

/// A cycle's decisions as applied: accepted and refused, each with the policy that made it.
struct Composed {
    accepted: Vec<(Proposal, Arc<Decider>)>,
    refused: Vec<(check::Refusal, Arc<Decider>)>,
}

/// One cycle. Returns None when there was nothing to decide.
pub async fn run_cycle(state: &AppState, trigger: &str) -> anyhow::Result<Option<CycleOutcome>> {
    if state.leadership.epoch().is_none() {
        return Ok(None); // a standby decides nothing
    }
    let started_at = chrono::Utc::now();
    let clock = Instant::now();
    usage::accrue(&state.db, state.config.usage_half_life_hours).await.context("accruing tenant usage")?;
    let fleet = {
        let mut conn = state.db.acquire().await?;
        FleetView::load(&mut conn).await.context("reading the fleet and the queue")?
    };
    state.metrics.set_queue_depth(fleet.pending_count());
    if fleet.pending_count() == 0 {
        state.metrics.cycle_succeeded();
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
    let (proposals, platform_decider, platform_selected) = decide(state, &fleet, &platform, &mut notes).await?;
    let platform_run = PlatformRun {
        selected: platform_selected,
        decider: Arc::new(platform_decider),
        checked: check::check(&fleet, Scope::Platform, proposals),
    };

    // Level 2: each tenant's own policy orders and places its work within what it was granted,
    // all side by side, within the cycle budget.
    let tenant_runs = evaluate_tenant_scopes(state, &fleet, &platform_run.checked.accepted, &mut notes).await?;

    // Shadow: a candidate for the platform scope, evaluated on the same snapshot, never applied.
    let shadow = match state.policies.shadow(&state.db, PLATFORM_SCOPE).await {
        Ok(Some(candidate)) => {
            Some((candidate.clone(), evaluate(state, &fleet, &candidate, None, Lane::Platform).await))
        }
        Ok(None) => None,
        Err(err) => {
            tracing::warn!(error = format!("{err:#}"), "loading the shadow policy");
            None
        }
    };

    let error = notes.failures.first().map(|(s, f)| format!("{} failed ({}): {}", s.label(), f.kind, f.message));
    let shadow_baseline = shadow.as_ref().map(|_| platform_run.checked.accepted.clone());
    let mut platform_run = platform_run;
    let composed = compose(&fleet, &platform_run, &tenant_runs, &HashSet::new());
    let first = {
        let cycle = CycleRecord {
            leadership: &state.leadership,
            started_at,
            trigger,
            decider: &platform_run.decider,
            error: error.clone(),
        };
        composed.apply(state, &fleet, cycle, record::Mode::Commit).await
    };
    let outcome = match first {
        Ok(outcome) => outcome,
        Err(leader::LeaseError::Deposed) => return Err(leader::LeaseError::Deposed.into()),
        Err(leader::LeaseError::Database(err)) => {
            // The database refused what some policy decided. No single scope may stall the loop:
            // find the scopes whose decisions cannot be applied, give them the built-in's place
            // this cycle (recorded as their failure), and apply the rest.
            let err = format!("{err:#}");
            tracing::error!(error = %err, "applying the cycle's decisions failed; isolating the scope responsible");
            let culprits = isolate_culprits(state, &fleet, &platform_run, &tenant_runs, started_at, trigger).await;
            let mut excluded = HashSet::new();
            for selected in &culprits {
                excluded.insert(selected.policy.version_id);
                notes.successes.retain(|s| s.policy.version_id != selected.policy.version_id);
                let failure = Failure {
                    kind: "apply_failed",
                    message: format!("the database refused its decisions: {err}"),
                    logs: Vec::new(),
                };
                notes.failures.push((selected.clone(), failure));
            }
            if excluded.contains(&platform_run.selected.policy.version_id) {
                platform_run = fallback_platform(state, &fleet, &mut notes).await?;
            }
            let composed = compose(&fleet, &platform_run, &tenant_runs, &excluded);
            let names: Vec<String> = culprits.iter().map(Selected::label).collect();
            let error = Some(format!("the database refused the decisions of [{}]: {err}", names.join(", ")));
            let cycle = CycleRecord {
                leadership: &state.leadership,
                started_at,
                trigger,
                decider: &platform_run.decider,
                error,
            };
            composed
                .apply(state, &fleet, cycle, record::Mode::Commit)
                .await
                .context("applying the cycle's decisions without the scopes the database refused")?
        }
    };

    notes.record(state, outcome.cycle_id).await;
    if let (Some((candidate, result)), Some(baseline)) = (shadow, shadow_baseline) {
        let compared = shadow::compare(&fleet, &baseline, result);
        if let Err(err) =
            shadow::record(&state.db, outcome.cycle_id, &candidate, &platform_run.decider, &compared).await
        {
            tracing::warn!(error = %err, "recording the shadow comparison");
        }
    }

    let elapsed = clock.elapsed();
    state.metrics.cycle_finished(elapsed);
    state.metrics.cycle_succeeded();
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

impl Composed {
    /// Applies these decisions in one transaction (see [`record::apply`]).
    async fn apply(
        &self,
        state: &AppState,
        fleet: &FleetView,
        cycle: CycleRecord<'_>,
        mode: record::Mode,
    ) -> Result<CycleOutcome, leader::LeaseError> {
        record::apply(&state.db, fleet, &self.accepted_refs(), &self.refused_refs(), cycle, mode).await
    }

    fn accepted_refs(&self) -> Vec<(Proposal, &Decider)> {
        self.accepted.iter().map(|(p, d)| (p.clone(), d.as_ref())).collect()
    }

    fn refused_refs(&self) -> Vec<(check::Refusal, &Decider)> {
        self.refused.iter().map(|(r, d)| (r.clone(), d.as_ref())).collect()
    }
}

/// Evaluates every tenant scope that has pending work and a policy of its own, side by side, each
/// on the view of its grant. A scope still evaluating at the cycle budget (or still busy with an
/// earlier cycle's evaluation) fails this cycle with a timeout: its tenant gets the platform's
/// decisions, and the others are not delayed.
async fn evaluate_tenant_scopes(
    state: &AppState,
    fleet: &FleetView,
    platform_accepted: &[Proposal],
    notes: &mut Notes,
) -> anyhow::Result<Vec<TenantRun>> {
    let mut prepared = Vec::new();
    for tenant in 0..fleet.tenants.len() {
        let has_pending =
            fleet.workloads.iter().any(|w| w.tenant == tenant && w.state == crate::model::WorkloadState::Pending);
        if !has_pending {
            continue;
        }
        let scope = fleet.tenants[tenant].id.to_string();
        let Some(own) = state.policies.active(&state.db, &scope).await? else { continue };
        let mut granted_gpus = Vec::new();
        let mut granted_nodes = Vec::new();
        for p in platform_accepted.iter().filter(|p| fleet.workloads[p.workload()].tenant == tenant) {
            if let Proposal::Place { node, gpus, .. } = p {
                granted_gpus.extend(gpus.iter().copied());
                granted_nodes.push(*node);
            }
        }
        let view = fleet.tenant_view(tenant, &granted_gpus, &granted_nodes);
        prepared.push((tenant, scope, own, view));
    }
    if prepared.is_empty() {
        return Ok(Vec::new());
    }
    let budget = Duration::from_millis(state.config.cycle_budget_ms);
    let deadline = tokio::time::Instant::now() + budget;
    let evaluations = prepared.iter().map(|(_, scope, own, view)| async move {
        if state.policies.scope_busy(scope) {
            let message = format!(
                "its evaluation in an earlier cycle is still running, past the {} ms cycle budget",
                budget.as_millis()
            );
            return (Err(Failure { kind: "timeout", message, logs: Vec::new() }), Vec::new());
        }
        let run = evaluate_with_logs(state, &view.view, own, Some(TenantView::SCOPE_TENANT), Lane::Tenant, Some(scope));
        match tokio::time::timeout_at(deadline, run).await {
            Ok(done) => done,
            Err(_) => {
                let message = format!("it was still running at the {} ms cycle budget", budget.as_millis());
                (Err(Failure { kind: "timeout", message, logs: Vec::new() }), Vec::new())
            }
        }
    });
    let results = futures::future::join_all(evaluations).await;
    let mut runs = Vec::with_capacity(prepared.len());
    for ((tenant, _, selected, view), (result, logs)) in prepared.into_iter().zip(results) {
        let result = match result {
            Ok(proposals) => {
                if !logs.is_empty() {
                    notes.logs.push((selected.clone(), logs));
                }
                notes.successes.push(selected.clone());
                Ok(check::check(&view.view, Scope::Tenant(TenantView::SCOPE_TENANT), proposals))
            }
            Err(failure) => {
                notes.failures.push((selected.clone(), failure.clone()));
                Err(failure) // the platform's decisions for this tenant stand
            }
        };
        runs.push(TenantRun { tenant, selected, view, result });
    }
    Ok(runs)
}

/// Composes the two levels: the platform's decisions, with each tenant's own policy's decisions
/// in place of the platform's placements for that tenant (the platform's preemptions stand).
/// Scopes whose policy version is in `excluded` keep the platform's decisions. The composed set
/// is checked once more as a whole: no GPU given twice across levels.
fn compose(fleet: &FleetView, platform: &PlatformRun, tenants: &[TenantRun], excluded: &HashSet<Uuid>) -> Composed {
    let mut accepted: Vec<(Proposal, Arc<Decider>)> =
        platform.checked.accepted.iter().cloned().map(|p| (p, platform.decider.clone())).collect();
    let mut refused: Vec<(check::Refusal, Arc<Decider>)> =
        platform.checked.refused.iter().cloned().map(|r| (r, platform.decider.clone())).collect();
    for run in tenants {
        let Ok(checked) = &run.result else { continue };
        if excluded.contains(&run.selected.policy.version_id) {
            continue;
        }
        let tenant = run.tenant;
        let view = &run.view;
        let own = &run.selected;
        let tenant_decider = Arc::new(decider(own));
        let mine = |p: &Proposal| fleet.workloads[p.workload()].tenant == tenant;
        // The platform's preemptions of this tenant's work stand (reclaim, bursts); its placements
        // and reasons give way to the tenant's own, within the grant.
        accepted.retain(|(p, _)| !mine(p) || matches!(p, Proposal::Preempt { .. }));
        let platform_preempted: HashSet<usize> = accepted.iter().map(|(p, _)| p.workload()).collect();
        for p in checked.accepted.iter().cloned() {
            let p = remap(p, view);
            if !platform_preempted.contains(&p.workload()) {
                accepted.push((p, tenant_decider.clone()));
            }
        }
        // The tenant's pending work its policy left undecided waits, and says why.
        let decided: HashSet<usize> = accepted.iter().map(|(p, _)| p.workload()).collect();
        for &w in &view.workloads {
            if fleet.workloads[w].state == crate::model::WorkloadState::Pending && !decided.contains(&w) {
                let reason = format!("{} did not place it within the tenant's grant this cycle", own.label());
                accepted.push((Proposal::KeepPending { workload: w, reason }, tenant_decider.clone()));
            }
        }
        for r in &checked.refused {
            let r = check::Refusal { workload: r.workload.map(|w| view.workloads[w]), reason: r.reason.clone() };
            refused.push((r, tenant_decider.clone()));
        }
    }

    let deciders: HashMap<usize, Arc<Decider>> = accepted.iter().map(|(p, d)| (p.workload(), d.clone())).collect();
    let final_check = check::check(fleet, Scope::Platform, accepted.into_iter().map(|(p, _)| p).collect());
    let accepted: Vec<(Proposal, Arc<Decider>)> = final_check
        .accepted
        .into_iter()
        .map(|p| {
            let d = deciders.get(&p.workload()).cloned().unwrap_or_else(|| platform.decider.clone());
            (p, d)
        })
        .collect();
    refused.extend(final_check.refused.into_iter().map(|r| (r, platform.decider.clone())));
    for (refusal, d) in &refused {
        tracing::warn!(policy = %d.policy_name, reason = %refusal.reason, "refused a policy decision");
    }
    Composed { accepted, refused }
}

/// Which uploaded policies' decisions the database refuses: each is tried alone beside the
/// built-ins in a transaction that is rolled back, so a hostile scope is named precisely and no
/// innocent scope is charged for it. Built-in policies are never culprits: if their decisions
/// cannot be applied, the fault is not a policy's and the cycle fails.
async fn isolate_culprits(
    state: &AppState,
    fleet: &FleetView,
    platform: &PlatformRun,
    tenants: &[TenantRun],
    started_at: chrono::DateTime<chrono::Utc>,
    trigger: &str,
) -> Vec<Selected> {
    let mut uploaded: Vec<&Selected> = Vec::new();
    if !platform.selected.policy.builtin {
        uploaded.push(&platform.selected);
    }
    uploaded.extend(tenants.iter().filter(|r| r.result.is_ok() && !r.selected.policy.builtin).map(|r| &r.selected));
    let mut culprits = Vec::new();
    for suspect in &uploaded {
        // Everyone else's uploaded policy set aside: only the suspect's decisions beside the built-ins'.
        let others: HashSet<Uuid> = uploaded
            .iter()
            .filter(|s| s.policy.version_id != suspect.policy.version_id)
            .map(|s| s.policy.version_id)
            .collect();
        let composed = compose(fleet, platform, tenants, &others);
        let cycle =
            CycleRecord { leadership: &state.leadership, started_at, trigger, decider: &platform.decider, error: None };
        let trial = composed.apply(state, fleet, cycle, record::Mode::Trial).await;
        if matches!(trial, Err(leader::LeaseError::Database(_))) {
            culprits.push((*suspect).clone());
        }
    }
    culprits
}

/// The platform level decided by the built-in fallback, when the platform's own policy's decisions
/// could not be applied.
async fn fallback_platform(state: &AppState, fleet: &FleetView, notes: &mut Notes) -> anyhow::Result<PlatformRun> {
    let fallback = state.policies.fallback(&state.db).await?;
    match evaluate_logged(state, fleet, &fallback, None, notes).await {
        Ok(proposals) => Ok(PlatformRun {
            decider: Arc::new(decider(&fallback)),
            selected: fallback,
            checked: check::check(fleet, Scope::Platform, proposals),
        }),
        Err(failure) => anyhow::bail!("the built-in policy failed too ({}): {}", failure.kind, failure.message),
    }
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

/// Evaluates the platform scope's policy; when it fails, notes why and decides with the built-in
/// instead. Returns the decisions, who made them, and the policy that did.
async fn decide(
    state: &AppState,
    fleet: &FleetView,
    selected: &Selected,
    notes: &mut Notes,
) -> anyhow::Result<(Vec<Proposal>, Decider, Selected)> {
    match evaluate_logged(state, fleet, selected, None, notes).await {
        Ok(proposals) => {
            notes.successes.push(selected.clone());
            Ok((proposals, decider(selected), selected.clone()))
        }
        Err(failure) => {
            tracing::warn!(policy = %selected.label(), kind = failure.kind, message = %failure.message,
                "policy failed; this cycle uses the built-in");
            notes.failures.push((selected.clone(), failure));
            let fallback = state.policies.fallback(&state.db).await?;
            if fallback.policy.version_id == selected.policy.version_id {
                return Ok((Vec::new(), decider(selected), selected.clone()));
            }
            match evaluate_logged(state, fleet, &fallback, None, notes).await {
                Ok(proposals) => Ok((proposals, decider(&fallback), fallback)),
                Err(failure) => anyhow::bail!("the built-in policy failed too ({}): {}", failure.kind, failure.message),
            }
        }
    }
}

fn decider(selected: &Selected) -> Decider {
    Decider { policy_version_id: Some(selected.policy.version_id), policy_name: selected.label() }
}

/// Evaluates a platform-scope policy, keeping its logs when it succeeds.
async fn evaluate_logged(
    state: &AppState,
    fleet: &FleetView,
    selected: &Selected,
    scope_tenant: Option<usize>,
    notes: &mut Notes,
) -> Result<Vec<Proposal>, Failure> {
    let (result, logs) = evaluate_with_logs(state, fleet, selected, scope_tenant, Lane::Platform, None).await;
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
    lane: Lane,
) -> Result<Vec<Proposal>, Failure> {
    evaluate_with_logs(state, fleet, selected, scope_tenant, lane, None).await.0
}

/// Runs a policy on the fleet and decodes its decisions into proposals (guest text cleaned and
/// bounded as it is decoded: `airtime_policy_sdk::text`).
pub async fn evaluate_with_logs(
    state: &AppState,
    fleet: &FleetView,
    selected: &Selected,
    scope_tenant: Option<usize>,
    lane: Lane,
    busy_scope: Option<&str>,
) -> (Result<Vec<Proposal>, Failure>, Vec<airtime_policy_host::PolicyLog>) {
    let bytes = abi::encode_snapshot(&snapshot::build(fleet, &selected.params, scope_tenant));
    let record = state.policies.evaluate(selected, bytes, lane, busy_scope).await;
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
    // Dry runs are asked for over the API: they run in the tenants' lane, never the platform's.
    let (result, logs) = evaluate_with_logs(state, &fleet, selected, None, Lane::Tenant, None).await;
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
