//! `slo-first`: Airtime's default platform policy. It answers the 3 a.m. question — when GPUs free
//! up, does the queued batch job get them, or are they kept for the burst of customer traffic? —
//! from the platform's priority settings, every cycle, with a reason for every call.
//!
//! **Order.** Pending work is ranked: real-time (customer-facing) inference first when
//! `realtime_first`; then work its tenant is guaranteed (within its GPU quota) before work that
//! would borrow; then effective priority (the night bonus for training applied by the host); then
//! submission time.
//!
//! **Placement.** CPU-only work, and CPU-capable work when a CPU node has room, goes to a CPU node
//! (GPUs stay for work that needs them). GPU work is a gang on one node, best fit: the node with the
//! fewest free GPUs left over, GPUs that fit its memory by live telemetry and its allowed models. A
//! container workload only goes to (reserves, and preempts on) a node with a container engine (ABI
//! 1.4); with none ready it waits ("no ready node runs containers").
//!
//! **Burst reserve.** Non-preemptible work other than real-time inference may not leave fewer than
//! `burst_reserve_gpus` GPUs free.
//!
//! **Quotas.** A tenant may hold more than its guarantee only if it may borrow.
//!
//! **Backfill with a reservation.** The highest-ranked GPU workload that cannot be placed reserves
//! the free GPUs of the node where it will fit first; lower-ranked work may use other GPUs but not
//! those, so a stream of small jobs cannot starve a big gang.
//!
//! **Preemption** (of preemptible work only; never of real-time inference):
//! - a real-time workload that does not fit preempts the lowest-priority work on the node where the
//!   fewest victims make room (the customer-facing burst);
//! - work a tenant is guaranteed that does not fit reclaims GPUs from tenants borrowing beyond
//!   their guarantee;
//! - work that has not run `min_runtime_s` is protected, and the waiting workload says for how long;
//! - no preemption loses airtime: the preemptor fits once the victims stop, uses all they free
//!   (a burst stops checkpointable work bigger than itself only when nothing its size would do),
//!   and a burst stops only work worth less than itself.
//!
//! Victims are stopped with the checkpoint signal and requeued; while they stop (the policy sees
//! them as `stopping`), the waiting workload does not preempt more.
//!
//! **Consolidation.** The head of the queue — a gang that fits on no node although the fleet has
//! the GPUs — gets a node by moving checkpointable, lower-ranked work that fits elsewhere right now
//! (it resumes from its checkpoint there); its pending reason says which work moves where from.
//!
//! **Built from the SDK's actions** (`airtime_policy_sdk::actions`): the queue is
//! [`queue`] with the settings' [`Ranking`]; placement is the [`Allocator`] (FGD's score by
//! default); the head of the queue keeps a [`Reservation`]; preemption is one [`VictimSearch`]
//! for both causes, which applies the host's rules (minimum runtime, hourly cap, checkpointable
//! only) and the rule that no preemption loses airtime. This file is only the order in which they
//! are tried and the words each decision is explained with.
//!
//! Params (JSON, optional): `placement` — `"fgd_score"` (the default: fragmentation gradient
//! descent for whole GPUs, shares and CPU work on GPU nodes, against the host's record of the
//! week's arrivals, placements compared by FGD's integer score and ties spread over the nodes in a
//! fixed order, as Weng et al.'s simulator does), `"least_fragmenting"` (the exact gradient, ties
//! to the tightest node: on their fill experiment a point below) or `"best_fit"`;
//! `consolidate` (default true) — whether a gang behind fragmentation may move work.

use std::collections::{BTreeMap, BTreeSet};

use airtime_policy_sdk::actions::reserve::usable;
use airtime_policy_sdk::actions::{
    Allocator, Cause, Fit, Holdings, Preemption, Ranking, Reservation, RunningByNode, VictimRules, VictimSearch,
    consolidate, queue,
};
use airtime_policy_sdk::fit::gpu_list;
use airtime_policy_sdk::gang::{GangReadiness, Gangs};
use airtime_policy_sdk::prelude::*;

#[derive(Debug, Clone, Copy, Default)]
pub struct SloFirst;

airtime_policy_sdk::export_policy!(SloFirst);

/// A GPU shape (count, memory per GPU, allowed models, MIG profile, a container engine): workloads
/// of one shape fit the GPUs or fail alike.
type Shape<'a> = (u32, u32, &'a str, &'a str, bool);

/// Everything that decides where a workload fits: GPUs, thousandths and memory of each, models,
/// MIG profile, a container engine, host CPU and memory.
type FullShape<'a> = (u32, u32, u32, &'a str, &'a str, bool, (u32, u32));

/// The parameters: how work is placed, and whether a gang behind fragmentation may move work.
#[derive(Debug, Clone, Copy)]
struct Params {
    fit: Fit,
    consolidate: bool,
}

fn read_params(params: &airtime_policy_sdk::params::Params<'_>) -> Result<Params, Failure> {
    let fit = match params.str("placement")? {
        None | Some("fgd_score") => Fit::FgdScore,
        Some("least_fragmenting") => Fit::LeastFragmenting,
        Some("best_fit") => Fit::BestFit,
        Some(other) => {
            return Err(Failure::from(format!(
                "placement must be \"least_fragmenting\", \"fgd_score\" or \"best_fit\", not {other:?}"
            )));
        }
    };
    Ok(Params { fit, consolidate: params.get_or("consolidate", true)? })
}

impl Policy for SloFirst {
    fn validate_params(&self, params: &airtime_policy_sdk::params::Params<'_>) -> Result<(), Failure> {
        read_params(params).map(|_| ())
    }

    fn evaluate<'s>(&self, snapshot: &Snapshot<'s>, ctx: &mut Context<'s>) -> Result<Vec<Decision<'s>>, Failure> {
        let params = read_params(ctx.params())?;
        let mut cycle = Cycle::new(snapshot, params);
        for (index, w) in queue(snapshot, &cycle.holdings, Ranking::of(snapshot)) {
            cycle.decide(index, w)?;
        }
        Ok(cycle.plan.into_decisions())
    }
}

/// What a cycle learns as it goes. A cycle only takes capacity, so a shape that found no room (or
/// no victims) finds none later in the same cycle: remembered, so 10,000 pending workloads cost one
/// search a shape.
#[derive(Default)]
struct Memo<'a> {
    /// GPU shapes that found no GPUs at all (host CPU and memory vary per workload, so a failure
    /// for want of them is not remembered here).
    no_gpus: BTreeSet<Shape<'a>>,
    unplaceable: BTreeSet<FullShape<'a>>,
    no_victims: BTreeSet<(Shape<'a>, bool)>,
    no_vacating: BTreeSet<Shape<'a>>,
    protected: BTreeMap<(Shape<'a>, bool), (u32, u64)>,
    reserved_only: BTreeMap<Shape<'a>, bool>,
    largest: BTreeMap<Shape<'a>, u32>,
    most_free: BTreeMap<Shape<'a>, Option<(usize, &'a str)>>,
}

/// One evaluation: the plan and the actions' state.
struct Cycle<'p, 's> {
    snapshot: &'p Snapshot<'s>,
    settings: Settings,
    plan: Plan<'p, 's>,
    holdings: Holdings,
    alloc: Allocator<'s>,
    reservation: Reservation<'s>,
    running: RunningByNode,
    rules: VictimRules,
    /// Chosen as victims this cycle.
    victim: Vec<bool>,
    any_stopping: bool,
    any_engine: bool,
    memo: Memo<'s>,
    /// A gang behind fragmentation may move checkpointable work (param `consolidate`).
    consolidate: bool,
    /// The snapshot's gangs across nodes, indexed at the first member met.
    gangs: Option<Gangs<'s>>,
}

impl<'p, 's> Cycle<'p, 's> {
    fn new(snapshot: &'p Snapshot<'s>, params: Params) -> Self {
        let plan = Plan::new(snapshot);
        let alloc = Allocator::new(&plan, params.fit);
        Cycle {
            snapshot,
            settings: snapshot.settings_or_default(),
            holdings: Holdings::of(snapshot),
            alloc,
            reservation: Reservation::new(snapshot),
            running: RunningByNode::of(snapshot),
            rules: VictimRules::of(snapshot),
            victim: vec![false; snapshot.workloads.len()],
            any_stopping: snapshot.workloads.iter().any(|w| w.state == WorkloadState::Stopping),
            any_engine: snapshot.ready_nodes().any(|(_, n)| n.containers),
            memo: Memo::default(),
            consolidate: params.consolidate,
            gangs: None,
            plan,
        }
    }

    fn tenant_name(&self, t: u32) -> &'s str {
        self.snapshot.tenant(t).map_or("?", |t| t.name)
    }

    /// The pipeline for one pending workload: CPU first where it may run there, then the quota
    /// and the burst reserve, then a place on GPUs, and failing that a reason to wait — the
    /// reservation, victims stopping, a preemption, or the head's reservation of its own.
    fn decide(&mut self, index: u32, w: &'p Workload<'s>) -> Result<(), Failure> {
        if w.in_gang() {
            return self.gang(index, w);
        }
        if w.container && !self.any_engine {
            return Ok(self.plan.keep_pending(index, "no ready node runs containers")?);
        }
        if (!w.needs_gpu() || w.cpu_capable) && self.on_cpu(index, w)? {
            return Ok(());
        }
        if let Some(reason) = self.held_back(w) {
            return Ok(self.plan.keep_pending(index, reason)?);
        }
        if self.on_gpus(index, w)? {
            return Ok(());
        }
        self.wait(index, w)
    }

    /// A gang across nodes, decided whole when its first member comes up in the queue: every member
    /// placed (each where it fits best, on a node of its own, outside the head's reservation) or
    /// every member kept pending with what the gang waits for. No member holds GPUs while another
    /// waits. (Gangs neither preempt nor reserve yet: they take what is free.)
    fn gang(&mut self, index: u32, w: &'p Workload<'s>) -> Result<(), Failure> {
        if self.plan.is_decided(index) {
            return Ok(());
        }
        let snapshot = self.snapshot;
        let gangs = self.gangs.get_or_insert_with(|| Gangs::of(snapshot));
        let size = w.gang_size;
        let members = match gangs.readiness(snapshot, w.gang_id, size) {
            GangReadiness::Ready(members) => members,
            GangReadiness::Waiting { pending, .. } => {
                let waiting: Vec<u32> = gangs.members(w.gang_id).to_vec();
                let reason = format!("its gang waits until all {size} members are back in the queue ({pending} are)");
                return self.keep_gang_pending(&waiting, &reason);
            }
        };
        if w.container && !self.any_engine {
            return self.keep_gang_pending(&members, "no ready node runs containers");
        }
        if let Some(reason) = self.held_back(w) {
            return self.keep_gang_pending(&members, &reason);
        }
        let reservation = &self.reservation;
        let words = |member: u32, a: &airtime_policy_sdk::actions::Allocation| {
            format!(
                "gang member rank {} of {size} on {}: {}; {}; {} priority {}",
                snapshot.workloads[member as usize].gang_rank,
                snapshot.nodes[a.node as usize].name,
                gpu_list(snapshot, &a.gpus),
                a.how,
                w.class.as_str(),
                snapshot.effective_priority(w)
            )
        };
        match self.alloc.gang(&mut self.plan, &members, |g| !reservation.is_reserved(g), words)? {
            Some(_) => {
                for _ in &members {
                    self.holdings.take(w.tenant, w.gpu_need().count * WHOLE_GPU_MILLI);
                }
                Ok(())
            }
            None => {
                let room = self.alloc.nodes_with_room(&self.plan, w, |g| !self.reservation.is_reserved(g));
                let reason = format!(
                    "a gang of {size}: needs {size} nodes, each with {}; {room} ready nodes have that now",
                    w.needs_in_words()
                );
                self.keep_gang_pending(&members, &reason)
            }
        }
    }

    /// Keeps every undecided pending member of a gang pending, with one reason.
    fn keep_gang_pending(&mut self, members: &[u32], reason: &str) -> Result<(), Failure> {
        for &m in members {
            if !self.plan.is_decided(m) && self.snapshot.workloads[m as usize].state == WorkloadState::Pending {
                self.plan.keep_pending(m, reason.to_owned())?;
            }
        }
        Ok(())
    }

    /// CPU-only work, and CPU-capable work while a CPU node has room: placed (or, for CPU-only
    /// work that finds no room, kept pending) — `true` when decided.
    fn on_cpu(&mut self, index: u32, w: &Workload<'s>) -> Result<bool, Failure> {
        let Some(node) = self.alloc.cpu(&self.plan, index) else {
            if !w.needs_gpu() {
                let reason = format!("{} has {} mCPU and {} MiB of memory free", no_node(w), w.cpu_millis, w.memory_mb);
                self.plan.keep_pending(index, reason)?;
                return Ok(true);
            }
            return Ok(false);
        };
        let n = &self.snapshot.nodes[node as usize];
        let reason = if w.needs_gpu() {
            format!(
                "CPU-capable: placed on CPU node {} (${:.2}/h), leaving GPUs for work that needs them",
                n.name, n.cost_per_hour
            )
        } else {
            format!("placed on {} ({} mCPU free)", n.name, self.plan.cpu_free(node))
        };
        self.alloc.place(&mut self.plan, index, node, Vec::new(), reason)?;
        Ok(true)
    }

    /// Why GPU work may not take GPUs now whatever is free: its tenant's quota, or the burst
    /// reserve (non-preemptible work other than real-time inference may not leave fewer than
    /// `burst_reserve_gpus` free).
    fn held_back(&self, w: &Workload<'_>) -> Option<String> {
        let t = w.tenant;
        if self.holdings.past_limit(w) {
            return Some(format!(
                "at its limit: tenant {} holds {} of at most {} GPUs",
                self.tenant_name(t),
                gpus_in_words(u64::from(self.holdings.held(t))),
                self.holdings.limit(t).unwrap_or(0) / WHOLE_GPU_MILLI
            ));
        }
        if self.holdings.borrowing(w) && !self.holdings.may_borrow(t) {
            return Some(format!(
                "quota used up: tenant {} holds {} of its {} guaranteed GPUs and may not borrow",
                self.tenant_name(t),
                gpus_in_words(u64::from(self.holdings.held(t))),
                self.holdings.guaranteed(t) / WHOLE_GPU_MILLI
            ));
        }
        let reserve = self.settings.burst_reserve_gpus;
        let exempt = w.class == WorkloadClass::RealtimeInference || w.preemptible;
        let free = self.plan.free_gpu_total();
        let gpus = w.gpu_need().count.saturating_mul(if w.in_gang() { w.gang_size } else { 1 });
        (reserve > 0 && !exempt && free.saturating_sub(gpus) < reserve).then(|| {
            format!(
                "held for the burst reserve: {reserve} GPUs are kept free for real-time inference ({free} free now; preemptible work may use them)"
            )
        })
    }

    /// Places GPU work if it fits now: a share on the shareable GPU where it fragments least (not
    /// on a node reserved for the head's gang), whole GPUs outside the reservation — `true` when
    /// placed.
    fn on_gpus(&mut self, index: u32, w: &Workload<'s>) -> Result<bool, Failure> {
        let need = w.gpu_need();
        let full = (need.count, need.milli, need.memory_mb, w.gpu_models, w.mig_profile, w.container, host_of(w));
        let shape = shape_of(w);
        if self.memo.unplaceable.contains(&full) {
            return Ok(false);
        }
        let (snapshot, reservation) = (self.snapshot, &self.reservation);
        let share = if w.is_share() {
            self.alloc.share(&self.plan, index, |node| !reservation.touches(snapshot, node))
        } else {
            None
        };
        let fit = share.or_else(|| {
            if self.memo.no_gpus.contains(&shape) {
                return None;
            }
            self.alloc.gpus(&self.plan, index, |g| !reservation.is_reserved(g))
        });
        let Some(fit) = fit else {
            self.memo.unplaceable.insert(full);
            if !self.memo.no_gpus.contains(&shape)
                && !self.alloc.fits(&self.plan, w, (0, 0), |g| !reservation.is_reserved(g))
            {
                self.memo.no_gpus.insert(shape);
            }
            return Ok(false);
        };
        let n = &snapshot.nodes[fit.node as usize];
        let reason = if w.is_share() && fit.gpus.iter().all(|&g| snapshot.gpus[g as usize].is_shareable()) {
            let g = &snapshot.gpus[fit.gpus[0] as usize];
            format!(
                "shares {} GPU {} ({}): {}/1000 and {} MiB, leaving {}/1000 free; {}; {} priority {}",
                n.name,
                g.device_index,
                g.sharing,
                w.gpu_milli,
                w.gpu_memory_mb,
                self.plan.free_milli(fit.gpus[0]) - w.gpu_milli,
                fit.how,
                w.class.as_str(),
                snapshot.effective_priority(w)
            )
        } else {
            let left = self.plan.free_gpu_count(fit.node)
                - fit.gpus.iter().filter(|&&g| self.plan.is_gpu_free(g)).count() as u32;
            format!(
                "{} on {}: {} (leaves {left} free there); {} priority {}",
                fit.how,
                n.name,
                gpu_list(snapshot, &fit.gpus),
                w.class.as_str(),
                snapshot.effective_priority(w)
            )
        };
        let reason = self.borrowing_words(w, reason);
        // On a shareable GPU a share takes only its thousandths; anywhere else the GPU.
        let held = if w.is_share() && fit.gpus.iter().all(|&g| snapshot.gpus[g as usize].is_shareable()) {
            w.gpu_demand_milli()
        } else {
            need.count * WHOLE_GPU_MILLI
        };
        self.holdings.take(w.tenant, held);
        self.alloc.place(&mut self.plan, index, fit.node, fit.gpus, reason)?;
        Ok(true)
    }

    /// Says so when the placement borrows idle capacity beyond the tenant's guarantee.
    fn borrowing_words(&self, w: &Workload<'_>, mut reason: String) -> String {
        if self.holdings.borrowing(w) {
            reason.push_str(&format!(
                "; borrowing idle capacity beyond tenant {}'s guarantee of {}",
                self.tenant_name(w.tenant),
                self.holdings.guaranteed(w.tenant) / WHOLE_GPU_MILLI
            ));
        }
        reason
    }

    /// GPU work that does not fit now waits — for the head's reservation, for victims already
    /// stopping, for a preemption it starts, or for the node it reserves as the new head — and
    /// says which.
    fn wait(&mut self, index: u32, w: &'p Workload<'s>) -> Result<(), Failure> {
        let need = w.gpu_need();
        let shape = shape_of(w);
        if let Some(owner) = self.reservation.head()
            && self.only_reserved(w, shape)
        {
            let reason =
                format!("the fitting GPUs are reserved for {owner}, ahead of it in the queue (waiting for its gang)");
            return Ok(self.plan.keep_pending(index, reason)?);
        }
        // GPUs already being vacated for it (victims stopping): wait for them, preempt no more.
        if self.any_stopping && !self.memo.no_vacating.contains(&shape) {
            match self.reservation.vacating_node(&self.plan, w, &need) {
                Some(node) => {
                    self.reservation.keep_node(&self.plan, node, &need);
                    let reason = format!(
                        "waiting for preempted work on {} to stop (grace period {} s)",
                        self.snapshot.nodes[node as usize].name, self.settings.grace_period_s
                    );
                    return Ok(self.plan.keep_pending(index, reason)?);
                }
                None => {
                    self.memo.no_vacating.insert(shape);
                }
            }
        }
        if self.preempt_for(index, w)? || self.consolidate_for(index, w)? {
            return Ok(());
        }
        self.reserve_or_explain(index, w)
    }

    /// The head of the queue, a gang waiting behind fragmentation, gets a node by moving
    /// checkpointable lower-ranked work that fits elsewhere now: `true` when a move is planned.
    fn consolidate_for(&mut self, index: u32, w: &'p Workload<'s>) -> Result<bool, Failure> {
        if !self.consolidate || self.reservation.head().is_some() || w.is_share() {
            return Ok(false);
        }
        let need = w.gpu_need();
        let (reserved, already) = (self.reservation.table(), &self.victim);
        let Some(mv) = consolidate(&self.plan, w, &need, reserved, already, &self.running, self.rules) else {
            return Ok(false);
        };
        let node = self.snapshot.nodes[mv.node as usize].name;
        for &v in &mv.moved {
            let vw = &self.snapshot.workloads[v as usize];
            self.victim[v as usize] = true;
            self.holdings.give_back(vw.tenant, vw.gpu_demand_milli());
            let why = format!(
                "moved off {node} to make room for {} (consolidation); requeued, resumes from its checkpoint on another node",
                w.name
            );
            self.plan.preempt(v, why)?;
        }
        self.reservation.claim_node_for_head(&self.plan, w, mv.node, &need);
        let names: Vec<&str> = mv.moved.iter().map(|&v| self.snapshot.workloads[v as usize].name).collect();
        let reason = format!(
            "consolidating: moving {} off {node} (they fit elsewhere and resume from their checkpoints); placed there once they stop",
            names.join(", ")
        );
        self.plan.keep_pending(index, reason)?;
        Ok(true)
    }

    /// Whether only the head's reservation stops `w`: it would fit if the reserved GPUs were free.
    fn only_reserved(&mut self, w: &Workload<'_>, shape: Shape<'s>) -> bool {
        let (alloc, plan) = (&self.alloc, &self.plan);
        *self.memo.reserved_only.entry(shape).or_insert_with(|| alloc.fits(plan, w, host_of(w), |_| true))
    }

    /// A workload that may preempt (real-time inference when the settings rank it first; work
    /// within its tenant's guarantee, from borrowers) searches for victims: `true` when it
    /// preempted or was told to wait for protected victims.
    fn preempt_for(&mut self, index: u32, w: &Workload<'s>) -> Result<bool, Failure> {
        let burst = self.settings.realtime_first && w.class == WorkloadClass::RealtimeInference;
        let cause = if burst {
            Cause::Outranks
        } else if !self.holdings.borrowing(w) {
            Cause::Reclaims
        } else {
            return Ok(false);
        };
        let key = (shape_of(w), burst);
        if let Some(&(v, remaining_s)) = self.memo.protected.get(&key) {
            self.plan.keep_pending(index, protected_words(self.snapshot, v, remaining_s))?;
            return Ok(true);
        }
        if self.memo.no_victims.contains(&key) {
            return Ok(false);
        }
        let need = w.gpu_need();
        let search = VictimSearch {
            plan: &self.plan,
            workload: w,
            need: &need,
            reserved: self.reservation.table(),
            already: &self.victim,
            running: &self.running,
            rules: self.rules,
        };
        let holdings = &self.holdings;
        let found = search.run(cause, |vw| cause == Cause::Outranks || holdings.borrows(vw.tenant));
        match found {
            Preemption::Victims { node, victims } => {
                for &v in &victims {
                    let vw = &self.snapshot.workloads[v as usize];
                    let why = if burst {
                        format!(
                            "preempted for real-time inference {} (customer-facing burst); requeued, resumes from its checkpoint",
                            w.name
                        )
                    } else {
                        format!(
                            "reclaimed: tenant {} borrows beyond its guarantee of {} and tenant {} needs its guaranteed GPUs back; requeued",
                            self.tenant_name(vw.tenant),
                            self.holdings.guaranteed(vw.tenant) / WHOLE_GPU_MILLI,
                            self.tenant_name(w.tenant)
                        )
                    };
                    self.victim[v as usize] = true;
                    self.holdings.give_back(vw.tenant, vw.gpu_demand_milli());
                    self.plan.preempt(v, why)?;
                }
                self.reservation.keep_node(&self.plan, node, &need);
                let names: Vec<&str> = victims.iter().map(|&v| self.snapshot.workloads[v as usize].name).collect();
                let reason = format!(
                    "preempting {} on {} to make room; placed once they stop",
                    names.join(", "),
                    self.snapshot.nodes[node as usize].name
                );
                self.plan.keep_pending(index, reason)?;
                Ok(true)
            }
            Preemption::Protected { victim, remaining_s } => {
                // Nothing of this shape can preempt this cycle: later ones wait with it.
                self.memo.protected.insert(key, (victim, remaining_s));
                self.plan.keep_pending(index, protected_words(self.snapshot, victim, remaining_s))?;
                Ok(true)
            }
            Preemption::Impossible => {
                self.memo.no_victims.insert(key);
                Ok(false)
            }
        }
    }

    /// The highest-ranked GPU workload that cannot be placed reserves the free GPUs of the node
    /// where it will fit first (a share waits for room on a shared GPU and reserves none); the rest
    /// wait with the reason.
    fn reserve_or_explain(&mut self, index: u32, w: &'p Workload<'s>) -> Result<(), Failure> {
        let need = w.gpu_need();
        let shape = shape_of(w);
        let (snapshot, plan, reservation) = (self.snapshot, &self.plan, &self.reservation);
        let most = *self.memo.most_free.entry(shape).or_insert_with(|| {
            snapshot
                .ready_nodes()
                .filter(|(_, n)| n.can_run(w))
                .map(|(node, n)| {
                    let free = plan.free_gpus(node).filter(|(g, gpu)| need.fits(gpu) && !reservation.is_reserved(*g));
                    (free.count(), n.name)
                })
                .max_by_key(|(free, _)| *free)
        });
        let (most_free, most_name) = most.unwrap_or((0, "no node"));
        let largest = *self.memo.largest.entry(shape).or_insert_with(|| {
            snapshot
                .ready_nodes()
                .filter(|(_, n)| n.can_run(w))
                .map(|(node, _)| snapshot.node_gpus(node).filter(|(_, g)| usable(&need, g)).count() as u32)
                .max()
                .unwrap_or(0)
        });
        if largest < need.count {
            let reason = format!("{} has {} at all (the most on one node is {largest})", no_node(w), need.describe(""));
            return Ok(self.plan.keep_pending(index, reason)?);
        }
        if let Some(node) = self.reservation.claim_for_head(&self.plan, w, &need) {
            let reason = format!(
                "waiting for its gang: needs {} on one node; the most free on one node is {most_free} ({most_name}); the free GPUs of {} are reserved for it",
                need.describe("free"),
                snapshot.nodes[node as usize].name
            );
            return Ok(self.plan.keep_pending(index, reason)?);
        }
        let reason = format!(
            "{} has {}; the most free on one node is {most_free} ({most_name})",
            no_node(w),
            need.describe("free")
        );
        Ok(self.plan.keep_pending(index, reason)?)
    }
}

fn protected_words(snapshot: &Snapshot<'_>, victim: u32, remaining_s: u64) -> String {
    format!(
        "waiting: {} is protected by its minimum runtime for {remaining_s} more s",
        snapshot.workloads[victim as usize].name
    )
}

fn shape_of<'a>(w: &Workload<'a>) -> Shape<'a> {
    let need = w.gpu_need();
    (need.count, need.memory_mb, w.gpu_models, w.mig_profile, w.container)
}

/// The host CPU and memory a workload asks for.
fn host_of(w: &Workload<'_>) -> (u32, u32) {
    (w.cpu_millis, w.memory_mb)
}

/// "no ready node", or for a container workload (which looks only at the nodes with a container
/// engine) "no ready node that runs containers".
fn no_node(w: &Workload<'_>) -> &'static str {
    if w.container { "no ready node that runs containers" } else { "no ready node" }
}

#[cfg(test)]
mod tests;
