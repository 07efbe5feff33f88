//! One cycle, from a fleet to what to apply: [`run`], the one orchestration both adapters call.
//! Its steps, in order: read the fleet and the queue; the autoscaler's plans
//! ([`services::plan`]) applied, and the fleet read again when they changed it; the burst reserve
//! derived from the services' demand, the configured one its floor; then, when there is work to
//! decide, both policy levels decided, composed and checked. Level 1: the platform policy arbitrates
//! between tenants and classes for everyone (the built-in stands in when it fails). Level 2: each
//! tenant with a policy of its own orders and places its work within what the platform granted it,
//! all tenants side by side. The two levels are composed — a tenant's decisions replace the
//! platform's placements for that tenant, the platform's preemptions stand — and the whole is
//! checked once more, so no GPU is given twice across levels.
//!
//! What is I/O is the adapter's, through two narrow traits: [`Adapter`] reads the fleet, applies
//! the scale plans and names the cycle's policies (the control plane from and to PostgreSQL, the
//! simulator in its world); [`Evaluator`] runs the policies (the control plane in its policy
//! catalogue's lanes, under the cycle budget; the simulator in virtual time). Nothing here knows a
//! database, a clock or an async runtime.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use airtime_policy_sdk::abi;
use airtime_protocol::workload::WorkloadState;
use uuid::Uuid;

use crate::check::{self, Checked, Proposal, Refusal, Scope};
use crate::fleet::{FleetView, TenantView};
use crate::services::{self, ScalePlan};
use crate::snapshot;

/// Which evaluation lane a policy runs in: the platform scope's (its policy, its fallback, its
/// shadow) or the tenants' (their own policies, and anything a tenant can ask for). An adapter
/// keeps them apart so no tenant can keep the platform's policy from running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    Platform,
    Tenant,
}

/// A policy version the adapter knows how to evaluate.
pub trait PolicyHandle: Clone {
    /// The version's id: decisions are recorded against it.
    fn version(&self) -> Uuid;
    /// `name vN`, as reasons and records name it.
    fn label(&self) -> String;
    /// Built into the control plane (never blamed for what the database refuses).
    fn builtin(&self) -> bool;
    /// The JSON parameters handed to the policy in its snapshot.
    fn params(&self) -> &str;
}

/// What an evaluation produced: the policy's decision buffer or why there is none, and what the
/// policy logged either way.
pub struct Evaluated<L> {
    pub output: Result<Vec<u8>, (&'static str, String)>,
    pub logs: Vec<L>,
}

/// Runs policies. `scope` names a tenant scope evaluated under the cycle budget: the adapter bounds
/// the wait and answers a `timeout` failure past it (or at once when the scope's evaluation in an
/// earlier cycle is still running).
pub trait Evaluator {
    type Policy: PolicyHandle;
    /// One line a policy logged.
    type Log: Clone;
    fn evaluate(
        &self,
        policy: &Self::Policy,
        snapshot: Vec<u8>,
        lane: Lane,
        scope: Option<&str>,
    ) -> impl Future<Output = Evaluated<Self::Log>>;

    /// The built-in that stands in for a failing platform policy. Asked for only when one fails,
    /// so a healthy cycle neither reads nor compiles it.
    fn fallback(&self) -> impl Future<Output = Result<Self::Policy, String>>;
}

/// No policy, for an adapter whose cycles only scale (its [`Adapter::decides`] always says no, so
/// nothing is ever evaluated): the simulator's token week and the autoscaler's stories.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoPolicy;

impl PolicyHandle for NoPolicy {
    fn version(&self) -> Uuid {
        Uuid::nil()
    }
    fn label(&self) -> String {
        "none".into()
    }
    fn builtin(&self) -> bool {
        true
    }
    fn params(&self) -> &str {
        "{}"
    }
}

impl Evaluator for NoPolicy {
    type Policy = NoPolicy;
    type Log = ();

    async fn evaluate(&self, _: &NoPolicy, _: Vec<u8>, _: Lane, _: Option<&str>) -> Evaluated<()> {
        Evaluated { output: Err(("trapped", "no policy: this adapter's cycles only scale".into())), logs: Vec::new() }
    }

    async fn fallback(&self) -> Result<NoPolicy, String> {
        Err("no policy: this adapter's cycles only scale".into())
    }
}

/// A cycle's input and output, as one adapter does them; [`run`] calls them in the cycle's order.
pub trait Adapter {
    type Policy: PolicyHandle;
    type Error: From<BuiltinFailed>;

    /// The fleet and the queue now, the configured burst reserve in its settings.
    fn read(&mut self) -> impl Future<Output = Result<FleetView, Self::Error>>;

    /// Applies the autoscaler's plans for `fleet` (replicas started, drained). Returns the fleet
    /// read again when they changed it, `None` when they changed nothing. Called only when the
    /// fleet has services.
    fn scale(
        &mut self,
        fleet: &FleetView,
        plans: &[ScalePlan],
    ) -> impl Future<Output = Result<Option<FleetView>, Self::Error>>;

    /// Whether the cycle decides on `fleet`, scaled and with its burst reserve: is work pending,
    /// and has the adapter a reason to decide it now. `false` ends the cycle there.
    fn decides(&mut self, fleet: &FleetView) -> bool;

    /// The cycle's policies for `fleet`.
    fn levels(&mut self, fleet: &FleetView) -> impl Future<Output = Result<Levels<Self::Policy>, Self::Error>>;
}

/// What a cycle came to.
pub enum Turn<P, L> {
    /// Nothing decided ([`Adapter::decides`] said no): the fleet as scaled.
    Idle(FleetView),
    /// Both levels decided, composed and checked, on `fleet`.
    Decided { fleet: FleetView, decided: Decided<P, L>, composed: Composed },
}

/// One cycle: read, autoscale, burst-reserve floor, decide both levels, compose and check. The
/// adapter applies what it returns (and, when the database refuses some of it, sets culprits aside
/// with [`Decided::exclude`]).
pub async fn run<A, E>(adapter: &mut A, evaluator: &E) -> Result<Turn<A::Policy, E::Log>, A::Error>
where
    A: Adapter,
    E: Evaluator<Policy = A::Policy>,
{
    let fleet = adapter.read().await?;
    let fleet = autoscale(adapter, fleet).await?;
    if !adapter.decides(&fleet) {
        return Ok(Turn::Idle(fleet));
    }
    let levels = adapter.levels(&fleet).await?;
    let decided = decide(evaluator, &fleet, levels).await?;
    let composed = decided.compose(&fleet, &HashSet::new());
    Ok(Turn::Decided { fleet, decided, composed })
}

/// The autoscaler's turn, before the policies decide: the services' plans applied by the adapter,
/// then the burst reserve derived from the plans of the fleet the policies decide on (read again
/// when the plans changed it), the configured reserve its floor. Services first: their new
/// replicas are placed, and their drained ones' room given, in the same cycle.
async fn autoscale<A: Adapter>(adapter: &mut A, fleet: FleetView) -> Result<FleetView, A::Error> {
    if fleet.services.is_empty() {
        return Ok(fleet);
    }
    let plans = services::plan(&fleet);
    let (mut fleet, plans) = match adapter.scale(&fleet, &plans).await? {
        Some(again) => {
            let plans = services::plan(&again);
            (again, plans)
        }
        None => (fleet, plans),
    };
    let derived = services::burst_reserve(&fleet, &plans);
    let floor = fleet.settings.burst_reserve_gpus.max(0) as u32;
    fleet.settings.burst_reserve_gpus = i32::try_from(floor.max(derived)).unwrap_or(i32::MAX);
    Ok(fleet)
}

/// Why an evaluation gave no usable decisions.
#[derive(Debug, Clone)]
pub struct Failure<L> {
    /// A stable kind (`timeout`, `trapped`, `malformed_output`, `apply_failed`, …).
    pub kind: &'static str,
    pub message: String,
    /// What the policy logged before it failed: often what explains it.
    pub logs: Vec<L>,
}

/// Which policy decided, for the record.
#[derive(Debug, Clone, PartialEq)]
pub struct Decider {
    pub policy_version_id: Option<Uuid>,
    pub policy_name: String,
}

impl Decider {
    pub fn of<P: PolicyHandle>(policy: &P) -> Decider {
        Decider { policy_version_id: Some(policy.version()), policy_name: policy.label() }
    }
}

/// The built-in fallback failed too: the cycle has no decisions to apply.
#[derive(Debug, Clone, PartialEq)]
pub struct BuiltinFailed {
    pub kind: &'static str,
    pub message: String,
}

impl fmt::Display for BuiltinFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the built-in policy failed too ({}): {}", self.kind, self.message)
    }
}

impl std::error::Error for BuiltinFailed {}

/// Runs a policy on a fleet and decodes its decisions into proposals (guest text cleaned and
/// bounded as it is decoded: `airtime_policy_sdk::text`). Returns what it logged either way.
pub async fn evaluate<E: Evaluator>(
    evaluator: &E,
    fleet: &FleetView,
    policy: &E::Policy,
    scope_tenant: Option<usize>,
    lane: Lane,
    scope: Option<&str>,
) -> (Result<Vec<Proposal>, Failure<E::Log>>, Vec<E::Log>) {
    let bytes = abi::encode_snapshot(&snapshot::build(fleet, policy.params(), scope_tenant));
    let Evaluated { output, logs } = evaluator.evaluate(policy, bytes, lane, scope).await;
    let result = match output {
        Ok(output) => match abi::decode_decisions(&output) {
            Ok(decisions) => Ok(snapshot::proposals(decisions)),
            Err(err) => Err(Failure { kind: "malformed_output", message: err.to_string(), logs: logs.clone() }),
        },
        Err((kind, message)) => Err(Failure { kind, message, logs: logs.clone() }),
    };
    (result, logs)
}

/// The policies of one cycle.
pub struct Levels<P> {
    /// The platform scope's active policy (the built-in when none is active).
    pub platform: P,
    /// Tenants (index in the fleet) with pending work and an active policy of their own.
    pub tenants: Vec<(usize, P)>,
}

/// What happened to each evaluated policy this cycle, for the adapter to record.
pub struct Notes<P, L> {
    pub failures: Vec<(P, Failure<L>)>,
    pub successes: Vec<P>,
    pub logs: Vec<(P, Vec<L>)>,
}

impl<P, L> Default for Notes<P, L> {
    fn default() -> Self {
        Notes { failures: Vec::new(), successes: Vec::new(), logs: Vec::new() }
    }
}

/// The platform level of a cycle: its policy's checked decisions.
struct PlatformRun<P> {
    policy: P,
    decider: Arc<Decider>,
    checked: Checked,
}

/// One tenant's own policy in a cycle: what it decided within its grant (checked in its view), or
/// why it did not.
struct TenantRun<P, L> {
    tenant: usize,
    policy: P,
    view: TenantView,
    result: Result<Checked, Failure<L>>,
}

/// A cycle's decisions as applied: accepted and refused, each with the policy that made it.
#[derive(Debug, Clone)]
pub struct Composed {
    pub accepted: Vec<(Proposal, Arc<Decider>)>,
    pub refused: Vec<(Refusal, Arc<Decider>)>,
}

/// Both levels decided, checked, ready to compose.
pub struct Decided<P, L> {
    platform: PlatformRun<P>,
    tenants: Vec<TenantRun<P, L>>,
    pub notes: Notes<P, L>,
}

/// Decides one cycle: the platform level, then every tenant level on the view of its grant.
pub async fn decide<E: Evaluator>(
    evaluator: &E,
    fleet: &FleetView,
    levels: Levels<E::Policy>,
) -> Result<Decided<E::Policy, E::Log>, BuiltinFailed> {
    let mut notes = Notes::default();
    let platform = decide_platform(evaluator, fleet, &levels.platform, &mut notes).await?;
    let tenants = decide_tenants(evaluator, fleet, &platform.checked.accepted, levels.tenants, &mut notes).await;
    Ok(Decided { platform, tenants, notes })
}

/// Evaluates the platform scope's policy; when it fails, notes why and decides with the built-in.
async fn decide_platform<E: Evaluator>(
    evaluator: &E,
    fleet: &FleetView,
    policy: &E::Policy,
    notes: &mut Notes<E::Policy, E::Log>,
) -> Result<PlatformRun<E::Policy>, BuiltinFailed> {
    let run = |policy: &E::Policy, proposals| PlatformRun {
        policy: policy.clone(),
        decider: Arc::new(Decider::of(policy)),
        checked: check::check(fleet, Scope::Platform, proposals),
    };
    let (result, logs) = evaluate(evaluator, fleet, policy, None, Lane::Platform, None).await;
    match result {
        Ok(proposals) => {
            if !logs.is_empty() {
                notes.logs.push((policy.clone(), logs));
            }
            notes.successes.push(policy.clone());
            Ok(run(policy, proposals))
        }
        Err(failure) => {
            notes.failures.push((policy.clone(), failure));
            let fallback = fallback(evaluator).await?;
            if fallback.version() == policy.version() {
                // The built-in itself failed: nothing is decided this cycle, and it is recorded.
                return Ok(run(policy, Vec::new()));
            }
            let proposals = evaluate_fallback(evaluator, fleet, &fallback, notes).await?;
            Ok(run(&fallback, proposals))
        }
    }
}

async fn fallback<E: Evaluator>(evaluator: &E) -> Result<E::Policy, BuiltinFailed> {
    evaluator.fallback().await.map_err(|message| BuiltinFailed { kind: "unavailable", message })
}

async fn evaluate_fallback<E: Evaluator>(
    evaluator: &E,
    fleet: &FleetView,
    fallback: &E::Policy,
    notes: &mut Notes<E::Policy, E::Log>,
) -> Result<Vec<Proposal>, BuiltinFailed> {
    let (result, logs) = evaluate(evaluator, fleet, fallback, None, Lane::Platform, None).await;
    match result {
        Ok(proposals) => {
            if !logs.is_empty() {
                notes.logs.push((fallback.clone(), logs));
            }
            Ok(proposals)
        }
        Err(failure) => Err(BuiltinFailed { kind: failure.kind, message: failure.message }),
    }
}

/// Evaluates every tenant scope with its own policy side by side, each on the view of its grant:
/// the GPUs the platform's accepted placements gave that tenant, plus those its running work
/// holds. A failing tenant policy is noted; its tenant keeps the platform's decisions.
async fn decide_tenants<E: Evaluator>(
    evaluator: &E,
    fleet: &FleetView,
    platform_accepted: &[Proposal],
    tenants: Vec<(usize, E::Policy)>,
    notes: &mut Notes<E::Policy, E::Log>,
) -> Vec<TenantRun<E::Policy, E::Log>> {
    if tenants.is_empty() {
        // No tenant decides on its own (the simulator's usual case): no grants, no views.
        return Vec::new();
    }
    // What the platform's placements gave each tenant, in one pass over them (most of a settled
    // queue's accepted decisions are keep-pending ones, which give nothing).
    let mut granted: Vec<(Vec<usize>, Vec<usize>)> = vec![(Vec::new(), Vec::new()); fleet.tenants.len()];
    for p in platform_accepted {
        if let Proposal::Place { workload, node, gpus, .. } = p
            && let Some((granted_gpus, granted_nodes)) = granted.get_mut(fleet.workloads[*workload].tenant)
        {
            granted_gpus.extend(gpus.iter().copied());
            granted_nodes.push(*node);
        }
    }
    let parts = fleet.tenant_parts();
    let prepared: Vec<(usize, String, E::Policy, TenantView)> = tenants
        .into_iter()
        .filter(|(tenant, _)| *tenant < fleet.tenants.len())
        .map(|(tenant, policy)| {
            let (granted_gpus, granted_nodes) = &granted[tenant];
            let view = fleet.tenant_view_in(&parts, tenant, granted_gpus, granted_nodes);
            (tenant, fleet.tenants[tenant].id.to_string(), policy, view)
        })
        .collect();
    let evaluations = prepared.iter().map(|(_, scope, policy, view)| {
        evaluate(evaluator, &view.view, policy, Some(TenantView::SCOPE_TENANT), Lane::Tenant, Some(scope.as_str()))
    });
    let results = futures::future::join_all(evaluations).await;
    let mut runs = Vec::with_capacity(prepared.len());
    for ((tenant, _, policy, view), (result, logs)) in prepared.into_iter().zip(results) {
        let result = match result {
            Ok(proposals) => {
                if !logs.is_empty() {
                    notes.logs.push((policy.clone(), logs));
                }
                notes.successes.push(policy.clone());
                Ok(check::check(&view.view, Scope::Tenant(TenantView::SCOPE_TENANT), proposals))
            }
            Err(failure) => {
                notes.failures.push((policy.clone(), failure.clone()));
                Err(failure)
            }
        };
        runs.push(TenantRun { tenant, policy, view, result });
    }
    runs
}

impl<P: PolicyHandle, L: Clone> Decided<P, L> {
    /// The policy that decided the platform level (the built-in when the platform's failed).
    pub fn platform_policy(&self) -> &P {
        &self.platform.policy
    }

    pub fn platform_decider(&self) -> &Arc<Decider> {
        &self.platform.decider
    }

    /// The platform level's accepted decisions, before composition (a shadow policy is compared
    /// with these).
    pub fn platform_accepted(&self) -> &[Proposal] {
        &self.platform.checked.accepted
    }

    /// The first failure of the cycle, in words, for the cycle's record.
    pub fn error(&self) -> Option<String> {
        self.notes.failures.first().map(|(p, f)| format!("{} failed ({}): {}", p.label(), f.kind, f.message))
    }

    /// The uploaded (not built-in) policies whose decisions this cycle would apply: the suspects
    /// when the database refuses the cycle.
    pub fn uploaded(&self) -> Vec<P> {
        let mut out = Vec::new();
        if !self.platform.policy.builtin() {
            out.push(self.platform.policy.clone());
        }
        out.extend(self.tenants.iter().filter(|r| r.result.is_ok() && !r.policy.builtin()).map(|r| r.policy.clone()));
        out
    }

    /// Composes the two levels: the platform's decisions, with each tenant's own policy's decisions
    /// in place of the platform's placements for that tenant (the platform's preemptions stand).
    /// Policy versions in `excluded` keep the platform's decisions for their scope. The composed
    /// set is checked once more as a whole: no GPU given twice across levels.
    pub fn compose(&self, fleet: &FleetView, excluded: &HashSet<Uuid>) -> Composed {
        let platform = &self.platform;
        let mut accepted: Vec<(Proposal, Arc<Decider>)> =
            platform.checked.accepted.iter().cloned().map(|p| (p, platform.decider.clone())).collect();
        let mut refused: Vec<(Refusal, Arc<Decider>)> =
            platform.checked.refused.iter().cloned().map(|r| (r, platform.decider.clone())).collect();
        // Which workloads `accepted` holds a decision for, kept current as it changes: twenty
        // tenants each rebuilt two sets of the whole cycle's decisions (10,000) before.
        let mut present = vec![false; fleet.workloads.len()];
        for (p, _) in &accepted {
            if let Some(slot) = present.get_mut(p.workload()) {
                *slot = true;
            }
        }
        let is_present = |present: &[bool], w: usize| present.get(w).copied().unwrap_or(false);
        for run in &self.tenants {
            let Ok(checked) = &run.result else { continue };
            if excluded.contains(&run.policy.version()) {
                continue;
            }
            let tenant = run.tenant;
            let view = &run.view;
            let tenant_decider = Arc::new(Decider::of(&run.policy));
            let mine = |p: &Proposal| fleet.workloads[p.workload()].tenant == tenant;
            // The platform's preemptions of this tenant's work stand (reclaim, bursts); its
            // placements and reasons give way to the tenant's own, within the grant.
            accepted.retain(|(p, _)| {
                let keep = !mine(p) || matches!(p, Proposal::Preempt { .. });
                if !keep && let Some(slot) = present.get_mut(p.workload()) {
                    *slot = false;
                }
                keep
            });
            // The tenant's decisions, but for its work the platform preempted (still in `accepted`).
            let own: Vec<Proposal> = checked
                .accepted
                .iter()
                .cloned()
                .map(|p| remap(p, view))
                .filter(|p| !is_present(&present, p.workload()))
                .collect();
            for p in own {
                if let Some(slot) = present.get_mut(p.workload()) {
                    *slot = true;
                }
                accepted.push((p, tenant_decider.clone()));
            }
            // The tenant's pending work its policy left undecided waits, and says why.
            for &w in &view.workloads {
                if fleet.workloads[w].state == WorkloadState::Pending && !is_present(&present, w) {
                    let reason =
                        format!("{} did not place it within the tenant's grant this cycle", run.policy.label());
                    accepted.push((Proposal::KeepPending { workload: w, reason }, tenant_decider.clone()));
                    present[w] = true;
                }
            }
            for r in &checked.refused {
                let r = Refusal { workload: r.workload.map(|w| view.workloads[w]), reason: r.reason.clone() };
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
        Composed { accepted, refused }
    }

    /// The cycle without `culprits`' decisions (the database refused them): each is noted as
    /// failed (`apply_failed`, with `why`), a culprit platform policy gives way to the built-in, and
    /// the rest is composed again.
    pub async fn exclude<E>(
        &mut self,
        evaluator: &E,
        fleet: &FleetView,
        culprits: &[P],
        why: &str,
    ) -> Result<Composed, BuiltinFailed>
    where
        E: Evaluator<Policy = P, Log = L>,
    {
        let excluded: HashSet<Uuid> = culprits.iter().map(PolicyHandle::version).collect();
        for culprit in culprits {
            self.notes.successes.retain(|s| s.version() != culprit.version());
            let failure = Failure {
                kind: "apply_failed",
                message: format!("the database refused its decisions: {why}"),
                logs: Vec::new(),
            };
            self.notes.failures.push((culprit.clone(), failure));
        }
        if excluded.contains(&self.platform.policy.version()) {
            let fallback = fallback(evaluator).await?;
            let proposals = evaluate_fallback(evaluator, fleet, &fallback, &mut self.notes).await?;
            self.platform = PlatformRun {
                decider: Arc::new(Decider::of(&fallback)),
                checked: check::check(fleet, Scope::Platform, proposals),
                policy: fallback,
            };
        }
        Ok(self.compose(fleet, &excluded))
    }
}

/// A tenant view's proposal in the full fleet's indexes.
fn remap(p: Proposal, view: &TenantView) -> Proposal {
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
