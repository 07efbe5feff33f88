//! The scheduling loop: the control plane's adapter of the scheduling core (`airtime_scheduler`).
//! Woken by events (a workload submitted or ended, a node joined or lost) and by a periodic tick,
//! each cycle is the core's one cycle (`cycle::run`): it reads the fleet and the queue from
//! PostgreSQL, applies the autoscaler's plans in a transaction, and has the core decide (both policy
//! levels, evaluated in the policy catalogue's lanes, checked and composed); the loop then applies
//! the sound decisions in one transaction with their reasons. A failing policy never stalls the loop: the
//! core falls back to the built-in policy and the failure is recorded.

pub mod fleet_view;
pub mod leader;
pub mod record;
pub mod scale;
pub mod shadow;
pub mod usage;

pub use airtime_scheduler::{check, snapshot};

use std::collections::HashSet;
use std::sync::{Arc, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use airtime_scheduler::cycle::{self, Composed, Decided, Evaluated, Levels, PolicyHandle, Turn};
use airtime_scheduler::services::ScalePlan;
use anyhow::Context as _;

use crate::model::PLATFORM_SCOPE;
use crate::policies::{Lane, Selected};
use crate::scheduler::check::{Proposal, Scope};
use crate::scheduler::fleet_view::FleetView;
use crate::scheduler::record::{CycleOutcome, CycleRecord};
use crate::signals::Shutdown;
use airtime_policy_host::PolicyLog;

pub use airtime_scheduler::cycle::Decider;

/// What the scheduling loop reads of the configuration.
#[derive(Debug, Clone)]
pub struct SchedulerSettings {
    pub tick: Duration,
    /// How long events gather after the first wakes the loop (see [`gather`]).
    pub batch_window: Duration,
    /// How long a leader's lease lasts unrenewed (see [`leader`]).
    pub leader_lease: Duration,
    /// How long tenant scopes' policies may take in one cycle.
    pub cycle_budget: Duration,
    pub usage_half_life_hours: f64,
    /// Failures in a row that suspend a policy.
    pub policy_suspend_after: u32,
}

/// The scheduling loop's handles, and nothing it does not use (no signing keys, no HTTP): what
/// the control plane hands it, and what a benchmark builds.
#[derive(Clone)]
pub struct Scheduler {
    pub db: sqlx::PgPool,
    pub settings: SchedulerSettings,
    pub wake: crate::signals::SchedulerWake,
    pub desired: crate::signals::DesiredStateChanged,
    pub metrics: Arc<crate::metrics::Metrics>,
    pub policies: Arc<crate::policies::PolicyCatalog>,
    pub leadership: Arc<leader::Leadership>,
    /// The active workloads as the loop's last read saw them (`fleet_view::WorkloadCache`).
    pub fleet_cache: Arc<std::sync::Mutex<fleet_view::WorkloadCache>>,
}

impl Scheduler {
    /// A scheduling loop's handles on their own, for a benchmark or a tool: the built-in policies
    /// installed, wake-ups heard in this process only, no API.
    pub async fn standalone(db: sqlx::PgPool, settings: SchedulerSettings) -> anyhow::Result<Scheduler> {
        let policies = crate::policies::PolicyCatalog::new(1, Duration::from_secs(60))?;
        policies.install_builtins(&db).await.context("installing the built-in policies")?;
        let outbox = Arc::new(crate::signals::Outbox::default());
        Ok(Scheduler {
            db,
            wake: crate::signals::SchedulerWake::new(outbox.clone()),
            desired: crate::signals::DesiredStateChanged::new(outbox),
            metrics: Arc::default(),
            policies: Arc::new(policies),
            leadership: Arc::new(leader::Leadership::new(settings.leader_lease)),
            fleet_cache: Arc::default(),
            settings,
        })
    }
}

/// Why an evaluation gave no usable decisions (with what the policy logged).
pub type Failure = cycle::Failure<PolicyLog>;

/// Runs the loop while this replica leads (see [`leader`]); stands by otherwise, taking over when
/// the leader's lease lapses.
pub async fn run_loop(state: Scheduler, shutdown: Shutdown) {
    let mut ticker = tokio::time::interval(state.settings.tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let standby_poll = (state.settings.leader_lease / 4).clamp(Duration::from_millis(100), Duration::from_secs(2));
    let mut standing_by = false;
    let mut last_cycle = Duration::ZERO;
    loop {
        if state.leadership.epoch().is_none() {
            match state.leadership.try_acquire(&state.db).await {
                Ok(true) => {
                    standing_by = false;
                    tracing::info!(
                        epoch = state.leadership.epoch(),
                        tick_ms = state.settings.tick.as_millis() as u64,
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
        if trigger == "event" {
            let wait = gather(state.settings.batch_window, last_cycle, state.settings.tick);
            tokio::select! {
                _ = shutdown.cancelled() => {
                    state.leadership.release(&state.db).await;
                    return;
                }
                _ = tokio::time::sleep(wait) => {}
            }
            // The wakes that came meanwhile are this cycle's.
            state.wake.absorb();
        }
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
        let clock = Instant::now();
        let result = run_cycle(&state, trigger).await;
        last_cycle = clock.elapsed();
        match result {
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

/// How long an event-woken loop waits before its cycle, gathering the events that follow: the
/// batching window, or as long as the last cycle took if that was longer (under a steady stream of
/// events the loop then cycles at most half the time, and the API keeps the rest), never more than
/// the tick.
pub fn gather(window: Duration, last_cycle: Duration, tick: Duration) -> Duration {
    window.max(last_cycle).min(tick)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_waits_the_window_or_the_last_cycle_whichever_is_longer_never_past_the_tick() {
        let ms = Duration::from_millis;
        assert_eq!(gather(ms(20), ms(5), ms(1000)), ms(20), "fast cycles: the window");
        assert_eq!(gather(ms(20), ms(450), ms(1000)), ms(450), "slow cycles: at most half the time cycling");
        assert_eq!(gather(ms(20), ms(3000), ms(1000)), ms(1000), "never longer than the tick");
    }

    #[tokio::test]
    async fn wakes_during_the_window_are_absorbed_into_one_cycle() {
        let wake = crate::signals::SchedulerWake::new(Arc::default());
        assert!(!wake.absorb(), "nothing stored");
        for _ in 0..50 {
            wake.wake_local();
        }
        assert!(wake.absorb(), "fifty wakes are one stored wake");
        assert!(!wake.absorb(), "and it is taken once");
    }
}

impl PolicyHandle for Selected {
    fn version(&self) -> uuid::Uuid {
        self.policy.version_id
    }

    fn label(&self) -> String {
        Selected::label(self)
    }

    fn builtin(&self) -> bool {
        self.policy.builtin
    }

    fn params(&self) -> &str {
        &self.params
    }
}

/// The core's evaluator in the control plane: the policy catalogue's lanes, and the cycle budget
/// for tenant scopes (from when the first of them starts, shared by all).
pub struct CatalogEvaluator<'a> {
    state: &'a Scheduler,
    budget: Duration,
    tenant_deadline: OnceLock<tokio::time::Instant>,
}

impl<'a> CatalogEvaluator<'a> {
    pub fn new(state: &'a Scheduler) -> Self {
        CatalogEvaluator { state, budget: state.settings.cycle_budget, tenant_deadline: OnceLock::new() }
    }
}

impl cycle::Evaluator for CatalogEvaluator<'_> {
    type Policy = Selected;
    type Log = PolicyLog;

    async fn evaluate(
        &self,
        policy: &Selected,
        snapshot: Vec<u8>,
        lane: Lane,
        scope: Option<&str>,
    ) -> Evaluated<PolicyLog> {
        let catalog = &self.state.policies;
        let Some(scope) = scope else {
            return into_evaluated(catalog.evaluate(policy, snapshot, lane, None).await);
        };
        let budget_ms = self.budget.as_millis();
        if catalog.scope_busy(scope) {
            let message =
                format!("its evaluation in an earlier cycle is still running, past the {budget_ms} ms cycle budget");
            return Evaluated { output: Err(("timeout", message)), logs: Vec::new() };
        }
        let deadline = *self.tenant_deadline.get_or_init(|| tokio::time::Instant::now() + self.budget);
        match tokio::time::timeout_at(deadline, catalog.evaluate(policy, snapshot, lane, Some(scope))).await {
            Ok(record) => into_evaluated(record),
            Err(_) => {
                let message = format!("it was still running at the {budget_ms} ms cycle budget");
                Evaluated { output: Err(("timeout", message)), logs: Vec::new() }
            }
        }
    }

    async fn fallback(&self) -> Result<Selected, String> {
        self.state.policies.fallback(&self.state.db).await.map_err(|err| format!("loading the built-in: {err:#}"))
    }
}

fn into_evaluated(record: airtime_policy_host::EvaluationRecord) -> Evaluated<PolicyLog> {
    Evaluated { output: record.result.map_err(|err| (err.kind(), err.to_string())), logs: record.logs }
}

/// One cycle. Returns None when there was nothing to decide.
pub async fn run_cycle(state: &Scheduler, trigger: &str) -> anyhow::Result<Option<CycleOutcome>> {
    if state.leadership.epoch().is_none() {
        return Ok(None); // a standby decides nothing
    }
    let started_at = chrono::Utc::now();
    let clock = Instant::now();
    let mut phases = record::Phases::default();
    let mut lap = Lap(Instant::now());
    usage::accrue(&state.db, state.settings.usage_half_life_hours).await.context("accruing tenant usage")?;
    lap.mark(&mut phases.accrue);
    // Out of its slot for the cycle (the read fills it, the commit's rewrites patch it) and put
    // back however the cycle ends; a read that fails leaves none, and the next one reads every row.
    let mut cache = CacheLease::take(&state.fleet_cache);
    let evaluator = CatalogEvaluator::new(state);
    let mut io = LoopCycle { state, cache: &mut cache.cache, phases, lap, nodes_changed: false };
    let turn = cycle::run(&mut io, &evaluator).await;
    let LoopCycle { mut phases, mut lap, .. } = io;
    let (fleet, mut decided, composed) = match turn? {
        Turn::Idle(_) => {
            state.metrics.cycle_succeeded();
            return Ok(None);
        }
        Turn::Decided { fleet, decided, composed } => (fleet, decided, composed),
    };

    // Shadow: a candidate for the platform scope, evaluated on the same snapshot, never applied.
    let shadow = match state.policies.shadow(&state.db, PLATFORM_SCOPE).await {
        Ok(Some(candidate)) => {
            let (result, _) = cycle::evaluate(&evaluator, &fleet, &candidate, None, Lane::Platform, None).await;
            Some((candidate, result))
        }
        Ok(None) => None,
        Err(err) => {
            tracing::warn!(error = format!("{err:#}"), "loading the shadow policy");
            None
        }
    };
    let shadow_baseline = shadow.as_ref().map(|_| decided.platform_accepted().to_vec());
    lap.mark(&mut phases.decide);
    let seen = Some(&cache.cache);
    let first =
        apply(state, &fleet, &composed, &decided, started_at, trigger, decided.error(), seen, record::Mode::Commit)
            .await;
    let mut outcome = match first {
        Ok(outcome) => outcome,
        Err(leader::LeaseError::Deposed) => return Err(leader::LeaseError::Deposed.into()),
        Err(leader::LeaseError::Database(err)) => {
            // The database refused what some policy decided. No single scope may stall the loop:
            // find the scopes whose decisions cannot be applied, give them the built-in's place
            // this cycle (recorded as their failure), and apply the rest.
            let err = format!("{err:#}");
            tracing::error!(error = %err, "applying the cycle's decisions failed; isolating the scope responsible");
            let culprits = isolate_culprits(state, &fleet, &decided, started_at, trigger).await;
            let composed = decided.exclude(&evaluator, &fleet, &culprits, &err).await?;
            let names: Vec<String> = culprits.iter().map(Selected::label).collect();
            let error = Some(format!("the database refused the decisions of [{}]: {err}", names.join(", ")));
            apply(state, &fleet, &composed, &decided, started_at, trigger, error, seen, record::Mode::Commit)
                .await
                .context("applying the cycle's decisions without the scopes the database refused")?
        }
    };

    lap.mark(&mut phases.apply);
    cache.cache.rewritten(std::mem::take(&mut outcome.rewritten));
    drop(cache);
    let active = decided.platform_decider().clone();
    record_notes(state, decided.notes, outcome.cycle_id).await;
    if let (Some((candidate, result)), Some(baseline)) = (shadow, shadow_baseline) {
        let compared = shadow::compare(&fleet, &baseline, result);
        if let Err(err) = shadow::record(&state.db, outcome.cycle_id, &candidate, &active, &compared).await {
            tracing::warn!(error = %err, "recording the shadow comparison");
        }
    }

    lap.mark(&mut phases.notes);
    outcome.phases = phases;
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
    // Freeing a model of 15,000 workloads and 8,000 GPUs took 5 % of a cycle: done off its path.
    tokio::task::spawn_blocking(move || drop(fleet));
    Ok(Some(outcome))
}

/// Times a cycle's phases: each mark ends one and starts the next.
struct Lap(Instant);

impl Lap {
    fn mark(&mut self, phase: &mut Duration) {
        *phase = self.0.elapsed();
        self.0 = Instant::now();
    }
}

/// The control plane's side of a cycle (`cycle::Adapter`): the fleet read in one repeatable-read
/// snapshot through the loop's workload cache, the scale plans applied in one transaction under
/// the lease, the policies named from the catalogue, each step timed for the cycle's record.
struct LoopCycle<'a> {
    state: &'a Scheduler,
    cache: &'a mut fleet_view::WorkloadCache,
    phases: record::Phases,
    lap: Lap,
    /// A placed replica drains: its node's desired state changed.
    nodes_changed: bool,
}

impl cycle::Adapter for LoopCycle<'_> {
    type Policy = Selected;
    type Error = anyhow::Error;

    async fn read(&mut self) -> anyhow::Result<FleetView> {
        let mut conn = self.state.db.acquire().await?;
        let fleet = match fleet_view::load_with(&mut conn, Some(&mut *self.cache)).await {
            Ok(fleet) => fleet,
            Err(err) => {
                *self.cache = fleet_view::WorkloadCache::default();
                return Err(err).context("reading the fleet and the queue");
            }
        };
        self.lap.mark(&mut self.phases.read);
        Ok(fleet)
    }

    async fn scale(&mut self, fleet: &FleetView, plans: &[ScalePlan]) -> anyhow::Result<Option<FleetView>> {
        let (scaled, again) = scale::step(self.state, fleet, plans).await.context("scaling the services")?;
        self.nodes_changed = scaled.nodes_changed;
        Ok(again)
    }

    fn decides(&mut self, fleet: &FleetView) -> bool {
        self.lap.mark(&mut self.phases.services);
        if self.nodes_changed {
            self.state.desired.announce();
        }
        self.state.metrics.set_queue_depth(fleet.pending_count());
        fleet.pending_count() > 0
    }

    async fn levels(&mut self, fleet: &FleetView) -> anyhow::Result<Levels<Selected>> {
        let levels = levels(self.state, fleet).await?;
        self.lap.mark(&mut self.phases.levels);
        Ok(levels)
    }
}

/// The loop's workload cache, out of its slot for one cycle and put back when the cycle ends,
/// however it ends (an error, an early return): only the loop reads and patches it.
struct CacheLease<'a> {
    slot: &'a std::sync::Mutex<fleet_view::WorkloadCache>,
    cache: fleet_view::WorkloadCache,
}

impl<'a> CacheLease<'a> {
    fn take(slot: &'a std::sync::Mutex<fleet_view::WorkloadCache>) -> Self {
        let cache = std::mem::take(&mut *slot.lock().unwrap_or_else(PoisonError::into_inner));
        CacheLease { slot, cache }
    }
}

impl Drop for CacheLease<'_> {
    fn drop(&mut self) {
        *self.slot.lock().unwrap_or_else(PoisonError::into_inner) = std::mem::take(&mut self.cache);
    }
}

/// The cycle's policies: the platform scope's active one (the built-in when none is, or it cannot
/// be loaded) and the own policy of every tenant with pending work. The built-in fallback is
/// loaded only when a platform policy fails ([`CatalogEvaluator`]'s `fallback`).
async fn levels(state: &Scheduler, fleet: &FleetView) -> anyhow::Result<Levels<Selected>> {
    let platform = match state.policies.active(&state.db, PLATFORM_SCOPE).await {
        Ok(Some(active)) => active,
        Ok(None) => state.policies.fallback(&state.db).await?,
        Err(err) => {
            tracing::error!(error = format!("{err:#}"), "loading the active platform policy; using the built-in");
            state.policies.fallback(&state.db).await?
        }
    };
    let with_pending = fleet.tenants_with_pending();
    let scopes: Vec<String> = with_pending.iter().map(|&t| fleet.tenants[t].id.to_string()).collect();
    let mut own = state.policies.active_of(&state.db, &scopes).await?;
    let tenants =
        with_pending.into_iter().zip(&scopes).filter_map(|(t, scope)| Some((t, own.remove(scope)?))).collect();
    Ok(Levels { platform, tenants })
}

/// Applies composed decisions in one transaction (see [`record::apply`]).
#[allow(clippy::too_many_arguments)]
async fn apply(
    state: &Scheduler,
    fleet: &FleetView,
    composed: &Composed,
    decided: &Decided<Selected, PolicyLog>,
    started_at: chrono::DateTime<chrono::Utc>,
    trigger: &str,
    error: Option<String>,
    seen: Option<&fleet_view::WorkloadCache>,
    mode: record::Mode,
) -> Result<CycleOutcome, leader::LeaseError> {
    if mode == record::Mode::Commit {
        for (refusal, d) in &composed.refused {
            tracing::warn!(policy = %d.policy_name, reason = %refusal.reason, "refused a policy decision");
        }
    }
    let accepted: Vec<(Proposal, &Decider)> = composed.accepted.iter().map(|(p, d)| (p.clone(), d.as_ref())).collect();
    let refused: Vec<(check::Refusal, &Decider)> =
        composed.refused.iter().map(|(r, d)| (r.clone(), d.as_ref())).collect();
    let cycle = CycleRecord {
        leadership: &state.leadership,
        started_at,
        trigger,
        decider: decided.platform_decider(),
        error,
        seen,
    };
    record::apply(&state.db, fleet, &accepted, &refused, cycle, mode).await
}

/// Which uploaded policies' decisions the database refuses: each is tried alone beside the
/// built-ins in a transaction that is rolled back, so a hostile scope is named precisely and no
/// innocent scope is charged for it. Built-in policies are never culprits: if their decisions
/// cannot be applied, the fault is not a policy's and the cycle fails.
async fn isolate_culprits(
    state: &Scheduler,
    fleet: &FleetView,
    decided: &Decided<Selected, PolicyLog>,
    started_at: chrono::DateTime<chrono::Utc>,
    trigger: &str,
) -> Vec<Selected> {
    let uploaded = decided.uploaded();
    let mut culprits = Vec::new();
    for suspect in &uploaded {
        // Everyone else's uploaded policy set aside: only the suspect's decisions beside the built-ins'.
        let others: HashSet<uuid::Uuid> =
            uploaded.iter().map(PolicyHandle::version).filter(|v| *v != suspect.version()).collect();
        let composed = decided.compose(fleet, &others);
        let trial = apply(state, fleet, &composed, decided, started_at, trigger, None, None, record::Mode::Trial).await;
        if matches!(trial, Err(leader::LeaseError::Database(_))) {
            culprits.push(suspect.clone());
        }
    }
    culprits
}

/// Records what happened to each evaluated policy, once the cycle has an id.
async fn record_notes(state: &Scheduler, notes: cycle::Notes<Selected, PolicyLog>, cycle_id: i64) {
    for (selected, failure) in &notes.failures {
        match crate::policies::record_failure(
            &state.db,
            selected,
            Some(cycle_id),
            failure.kind,
            &failure.message,
            state.settings.policy_suspend_after,
        )
        .await
        {
            Ok(true) => tracing::error!(policy = %selected.label(), "policy suspended after repeated failures"),
            Ok(false) => {}
            Err(err) => tracing::error!(error = %err, "recording a policy failure"),
        }
    }
    if let Err(err) = crate::policies::record_successes(&state.db, &notes.successes).await {
        tracing::warn!(error = %err, "resetting the policies' failure counts");
    }
    // Every policy's log lines of the cycle, the failed ones' first, in one statement.
    let logs: Vec<(&Selected, &[airtime_policy_host::PolicyLog])> = notes
        .failures
        .iter()
        .map(|(selected, failure)| (selected, failure.logs.as_slice()))
        .chain(notes.logs.iter().map(|(selected, logs)| (selected, logs.as_slice())))
        .collect();
    if let Err(err) = crate::policies::record_logs(&state.db, Some(cycle_id), &logs).await {
        tracing::warn!(error = %err, "recording policy logs");
    }
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

pub async fn dry_run(state: &Scheduler, selected: &Selected) -> anyhow::Result<DryRun> {
    let fleet = {
        let mut conn = state.db.acquire().await?;
        fleet_view::load(&mut conn).await?
    };
    let clock = Instant::now();
    // Dry runs are asked for over the API: they run in the tenants' lane, never the platform's.
    let evaluator = CatalogEvaluator::new(state);
    let (result, logs) = cycle::evaluate(&evaluator, &fleet, selected, None, Lane::Tenant, None).await;
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

/// What one workload would get, in a preview.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct PreviewOutcome {
    /// `place`, `preempt`, `keep_pending`, or `none` (no decision: a running workload kept).
    pub action: String,
    /// Where it would be placed, or where it runs when preempted.
    pub node: Option<String>,
    pub reason: String,
}

/// A workload whose decision would differ under the candidate settings.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct PreviewChange {
    pub workload_id: uuid::Uuid,
    pub name: String,
    pub tenant: String,
    pub current: PreviewOutcome,
    pub candidate: PreviewOutcome,
}

/// `POST /settings/priorities/preview`: the active platform policy's decisions on the live fleet and
/// queue under the current settings and under the candidate ones, and what would differ. Nothing is
/// applied or stored.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Preview {
    pub policy: String,
    #[schema(value_type = Object)]
    pub current_settings: crate::settings::PrioritySettings,
    #[schema(value_type = Object)]
    pub candidate_settings: crate::settings::PrioritySettings,
    pub changes: Vec<PreviewChange>,
    pub placed_now: usize,
    pub placed_with_candidate: usize,
    pub preempted_now: usize,
    pub preempted_with_candidate: usize,
    /// Why a run could not be compared (the policy failed on one of them).
    pub error: Option<String>,
}

/// Evaluates the active platform policy on the live snapshot twice — with the current settings and
/// with `candidate` — checks both like real decisions (the preemption rules come from the settings
/// each was given), and returns the workloads whose outcome differs. Like dry runs it evaluates in
/// the tenants' lane, never the platform's; tenants' own policies are not re-evaluated.
pub async fn preview(state: &Scheduler, candidate: crate::settings::PrioritySettings) -> anyhow::Result<Preview> {
    let fleet = {
        let mut conn = state.db.acquire().await?;
        fleet_view::load(&mut conn).await?
    };
    let mut with_candidate = fleet.clone();
    with_candidate.settings = candidate.clone();
    let c = compare(state, &fleet, &with_candidate).await?;
    Ok(Preview {
        policy: c.policy,
        current_settings: fleet.settings.clone(),
        candidate_settings: candidate,
        changes: c.changes,
        placed_now: c.placed_now,
        placed_with_candidate: c.placed_with_candidate,
        preempted_now: c.preempted_now,
        preempted_with_candidate: c.preempted_with_candidate,
        error: c.error,
    })
}

/// `POST /tenants/{id}/preview`: a tenant's quota as it is and as the change would make it, and
/// what the next cycle would decide differently.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct QuotaPreview {
    pub tenant: String,
    pub current: crate::tenancy::TenantQuota,
    pub candidate: crate::tenancy::TenantQuota,
    pub comparison: Comparison,
}

/// Evaluates the active platform policy on the live snapshot with tenant `id`'s quota as it is and
/// as `change` would make it (see [`preview`]). `None` when no such tenant exists.
pub async fn preview_quota(
    state: &Scheduler,
    id: uuid::Uuid,
    change: &crate::tenancy::TenantQuota,
) -> anyhow::Result<Option<QuotaPreview>> {
    let fleet = {
        let mut conn = state.db.acquire().await?;
        fleet_view::load(&mut conn).await?
    };
    let Some(index) = fleet.tenants.iter().position(|t| t.id == id) else { return Ok(None) };
    let mut with_candidate = fleet.clone();
    let tenant = &mut with_candidate.tenants[index];
    let quota = |t: &airtime_scheduler::fleet::TenantEntry| crate::tenancy::TenantQuota {
        guaranteed_gpus: Some(t.guaranteed_gpus),
        weight: Some(t.weight),
        tier: Some(t.tier),
        may_borrow: Some(t.may_borrow),
        gpu_limit: Some(t.gpu_limit.unwrap_or(0)),
        idle_reclaim_after_s: None,
    };
    let current = quota(tenant);
    tenant.guaranteed_gpus = change.guaranteed_gpus.unwrap_or(tenant.guaranteed_gpus);
    tenant.weight = change.weight.unwrap_or(tenant.weight);
    tenant.tier = change.tier.unwrap_or(tenant.tier);
    tenant.may_borrow = change.may_borrow.unwrap_or(tenant.may_borrow);
    if let Some(limit) = change.gpu_limit {
        tenant.gpu_limit = (limit > 0).then_some(limit);
    }
    let candidate = quota(tenant);
    let name = tenant.name.clone();
    let comparison = compare(state, &fleet, &with_candidate).await?;
    Ok(Some(QuotaPreview { tenant: name, current, candidate, comparison }))
}

/// What the active platform policy decides on a fleet and on a candidate (the same fleet with one
/// thing changed), and the workloads whose outcome differs.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Comparison {
    pub policy: String,
    pub changes: Vec<PreviewChange>,
    pub placed_now: usize,
    pub placed_with_candidate: usize,
    pub preempted_now: usize,
    pub preempted_with_candidate: usize,
    /// Why the runs could not be compared (the policy failed on one of them).
    pub error: Option<String>,
}

async fn compare(state: &Scheduler, fleet: &FleetView, with_candidate: &FleetView) -> anyhow::Result<Comparison> {
    let policy = match state.policies.active(&state.db, PLATFORM_SCOPE).await? {
        Some(active) => active,
        None => state.policies.fallback(&state.db).await?,
    };
    let evaluator = CatalogEvaluator::new(state);
    let outcomes = |fleet: &FleetView, proposals: Vec<Proposal>| {
        let checked = check::check(fleet, Scope::Platform, proposals);
        let mut by_workload: std::collections::HashMap<usize, PreviewOutcome> = std::collections::HashMap::new();
        for p in &checked.accepted {
            let w = &fleet.workloads[p.workload()];
            let (action, node, reason) = match p {
                Proposal::Place { node, reason, .. } => ("place", Some(fleet.nodes[*node].name.to_string()), reason),
                Proposal::Preempt { reason, .. } => {
                    ("preempt", w.node.map(|n| fleet.nodes[n].name.to_string()), reason)
                }
                Proposal::KeepPending { reason, .. } => ("keep_pending", None, reason),
            };
            by_workload.insert(p.workload(), PreviewOutcome { action: action.into(), node, reason: reason.clone() });
        }
        by_workload
    };
    let (now, _) = cycle::evaluate(&evaluator, fleet, &policy, None, Lane::Tenant, None).await;
    let (then, _) = cycle::evaluate(&evaluator, with_candidate, &policy, None, Lane::Tenant, None).await;
    let mut comparison = Comparison {
        policy: policy.label(),
        changes: Vec::new(),
        placed_now: 0,
        placed_with_candidate: 0,
        preempted_now: 0,
        preempted_with_candidate: 0,
        error: None,
    };
    let (now, then) = match (now, then) {
        (Ok(now), Ok(then)) => (outcomes(fleet, now), outcomes(with_candidate, then)),
        (Err(f), _) | (_, Err(f)) => {
            comparison.error = Some(format!("{}: {}", f.kind, f.message));
            return Ok(comparison);
        }
    };
    let count = |m: &std::collections::HashMap<usize, PreviewOutcome>, action: &str| {
        m.values().filter(|o| o.action == action).count()
    };
    comparison.placed_now = count(&now, "place");
    comparison.placed_with_candidate = count(&then, "place");
    comparison.preempted_now = count(&now, "preempt");
    comparison.preempted_with_candidate = count(&then, "preempt");
    let none = || PreviewOutcome { action: "none".into(), node: None, reason: String::new() };
    for (i, w) in fleet.workloads.iter().enumerate() {
        let (a, b) = (now.get(&i).cloned().unwrap_or_else(none), then.get(&i).cloned().unwrap_or_else(none));
        // The same action on the same node is no change, whatever the words.
        if (a.action.as_str(), &a.node) != (b.action.as_str(), &b.node) {
            comparison.changes.push(PreviewChange {
                workload_id: w.id,
                name: w.name.to_string(),
                tenant: fleet.tenants[w.tenant].name.clone(),
                current: a,
                candidate: b,
            });
        }
    }
    Ok(comparison)
}
