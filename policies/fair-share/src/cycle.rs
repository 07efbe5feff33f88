//! One cycle: decides each pending workload in the order the ledger serves tenants — placed, kept
//! pending with its reason, or reclaimed for — and the reclaim search.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use airtime_policy_sdk::prelude::*;

use crate::Config;
use crate::fleet::{Fleet, NoFit, gpu_list, node_name};
use crate::ledger::Ledger;

/// What a workload asks of a node: GPU count, MiB per GPU, allowed models, host mCPU and MiB, a
/// container engine. A cycle only ever takes resources, so a shape that found no room finds none
/// later in the cycle.
type Shape<'s> = (u32, u32, &'s str, u32, u32, bool);

fn shape<'s>(w: &Workload<'s>) -> Shape<'s> {
    (w.gpu_count, w.gpu_memory_mb, w.gpu_models, w.cpu_millis, w.memory_mb, w.container)
}

enum Reclaim {
    /// These victims, on this node, of this tenant, make room.
    Victims {
        tenant: u32,
        node: u32,
        victims: Vec<u32>,
    },
    /// The only possible victims are too young to preempt: the one that frees first, and when.
    Protected {
        victim: u32,
        remaining_s: u64,
    },
    Impossible,
}

/// One cycle's state.
pub(crate) struct Cycle<'p, 's> {
    snapshot: &'p Snapshot<'s>,
    settings: Settings,
    config: Config,
    pub(crate) fleet: Fleet<'p, 's>,
    pub(crate) ledger: Ledger<'s>,
    no_fit: BTreeMap<Shape<'s>, NoFit>,
    /// Reclaim searches that found no victims (`None`) or only protected ones: the victims only
    /// dwindle during a cycle, so the answer stands.
    no_victims: BTreeMap<Shape<'s>, Option<(u32, u64)>>,
    /// Running work a reclaim may stop, by (tenant, node), cheapest to stop first.
    candidates: BTreeMap<(u32, u32), Vec<u32>>,
    preempted: Vec<bool>,
    /// Per node, the GPUs of stopping work, and whether a waiting workload already counts on each.
    vacating: BTreeMap<u32, Vec<(u32, bool)>>,
    /// Tenants whose standing changed by a preemption, to be ranked again.
    pub(crate) changed: BTreeSet<u32>,
    /// CPU-only work that found no CPU node, to try on GPU nodes' spare host CPU at the end.
    on_host_cpu: Vec<u32>,
    pub(crate) placed: u32,
    pub(crate) preempted_count: u32,
    /// Some ready node has a container engine: container work can run somewhere.
    any_engine: bool,
}

impl<'p, 's> Cycle<'p, 's> {
    pub(crate) fn new(
        snapshot: &'p Snapshot<'s>,
        settings: Settings,
        config: Config,
        queues: &[Vec<(u32, &Workload<'s>)>],
    ) -> Self {
        let mut candidates: BTreeMap<(u32, u32), Vec<u32>> = BTreeMap::new();
        for (v, vw) in snapshot.running() {
            let victim_class = !matches!(vw.class, WorkloadClass::RealtimeInference | WorkloadClass::Unknown(_));
            if let Some(node) = vw.node
                && vw.preemptible
                && victim_class
                && vw.needs_gpu()
            {
                candidates.entry((vw.tenant, node)).or_default().push(v);
            }
        }
        for list in candidates.values_mut() {
            list.sort_by_key(|&v| {
                let vw = &snapshot.workloads[v as usize];
                (snapshot.effective_priority(vw), Reverse(vw.started_ms), v)
            });
        }
        let mut vacating: BTreeMap<u32, Vec<(u32, bool)>> = BTreeMap::new();
        for (g, gpu) in snapshot.gpus.iter().enumerate() {
            if gpu.holder.and_then(|h| snapshot.workload(h)).is_some_and(Workload::is_stopping) {
                vacating.entry(gpu.node).or_default().push((g as u32, false));
            }
        }
        Cycle {
            snapshot,
            settings,
            config,
            fleet: Fleet::new(snapshot),
            ledger: Ledger::new(snapshot, config, queues),
            no_fit: BTreeMap::new(),
            no_victims: BTreeMap::new(),
            candidates,
            preempted: vec![false; snapshot.workloads.len()],
            vacating,
            changed: BTreeSet::new(),
            on_host_cpu: Vec::new(),
            placed: 0,
            preempted_count: 0,
            any_engine: snapshot.ready_nodes().any(|(_, n)| n.containers),
        }
    }

    /// Places `w` or says why it waits; may preempt for it.
    pub(crate) fn decide(&mut self, index: u32, w: &Workload<'s>) -> Result<(), Failure> {
        let snapshot = self.snapshot;
        if w.container && !self.any_engine {
            return Ok(self.fleet.plan.keep_pending(index, "no ready node runs containers")?);
        }
        // CPU-only work, and CPU-capable work while a CPU node has room.
        if !w.needs_gpu() || w.cpu_capable {
            if let Some(node) = self.fleet.cpu_node(w) {
                let left = self.fleet.plan.cpu_free(node).saturating_sub(w.cpu_millis);
                let name = node_name(snapshot, node);
                let reason = if w.needs_gpu() {
                    format!(
                        "CPU-capable: placed on CPU node {name} ({left} mCPU left free there), leaving the GPUs to work that needs them"
                    )
                } else {
                    format!("placed on CPU node {name} ({left} mCPU left free there)")
                };
                self.fleet.place_cpu(index, node, reason)?;
                self.placed += 1;
                return Ok(());
            }
            if !w.needs_gpu() {
                // Decided once the GPU work has taken what it needs (see `finish`).
                self.on_host_cpu.push(index);
                return Ok(());
            }
        }

        let need = w.gpu_need();
        let t = w.tenant;
        let tenant = self.ledger.name(t);
        let borrowing = !self.ledger.within_guarantee(t, need.count);
        if borrowing && !self.ledger.may_borrow.get(t as usize).copied().unwrap_or(false) {
            let reason = format!(
                "quota used up: tenant {tenant} holds {} of its {} guaranteed GPUs and may not borrow",
                self.ledger.held(t),
                self.ledger.guaranteed(t)
            );
            return Ok(self.fleet.plan.keep_pending(index, reason)?);
        }
        let reserve = self.settings.burst_reserve_gpus;
        let free = self.fleet.plan.free_gpu_total();
        let may_use_reserve = w.class == WorkloadClass::RealtimeInference || w.preemptible;
        if reserve > 0 && !may_use_reserve && free.saturating_sub(need.count) < reserve {
            let reason = format!(
                "held for the burst reserve: {reserve} GPUs are kept free for real-time inference ({free} free now; preemptible work may use them)"
            );
            return Ok(self.fleet.plan.keep_pending(index, reason)?);
        }

        let key = shape(w);
        let fit = if self.no_fit.contains_key(&key) { None } else { self.fleet.best_fit(w, &need) };
        if let Some(fit) = fit {
            let (share, below) = (self.ledger.share(t), self.ledger.below_guarantee(t));
            let left = self.fleet.plan.free_gpu_count(fit.node).saturating_sub(need.count);
            let model = fit.gpus.first().and_then(|&g| snapshot.gpu(g)).map_or("?", |g| g.model);
            let mut reason = format!(
                "best fit on {}: {} ({model}), {left} left free there; ",
                node_name(snapshot, fit.node),
                gpu_list(snapshot, &fit.gpus)
            );
            if below {
                reason.push_str(&format!(
                    "tenant {tenant} is below its guarantee ({} of {} GPUs) and goes first",
                    self.ledger.held(t),
                    self.ledger.guaranteed(t)
                ));
            } else {
                reason.push_str(&format!(
                    "fair share: tenant {tenant}'s turn at {share:.1} weighted GPU-hours, the least with work waiting"
                ));
            }
            if borrowing && self.ledger.guaranteed(t) > 0 {
                reason.push_str(&format!("; borrowing beyond its guarantee of {} GPUs", self.ledger.guaranteed(t)));
            }
            self.fleet.place_gpus(index, fit, reason)?;
            self.ledger.give(t, need.count);
            self.placed += 1;
            return Ok(());
        }
        if !self.no_fit.contains_key(&key) {
            let why = self.fleet.no_fit(w, &need);
            self.no_fit.insert(key, why);
        }

        let never = matches!(self.no_fit.get(&key), Some(NoFit::Never(_)));
        if self.config.reclaim && !borrowing && !never && self.reclaim(index, w, &need)? {
            return Ok(());
        }

        let reason = match self.no_fit.get(&key) {
            Some(NoFit::Never(why) | NoFit::Busy(why)) => why.clone(),
            Some(NoFit::TakenThisCycle { left: why, now }) => match self.ledger.rival(t) {
                Some(r) => {
                    let rival = self.ledger.name(r);
                    // The guarantee explains the order only if it is the rival's alone.
                    match self.ledger.first_served.get(r as usize).copied().flatten() {
                        Some((_, true)) if !self.ledger.below_guarantee(t) => format!(
                            "fair share: tenant {rival} is below its guarantee of {} GPUs and goes first; waiting behind {rival}'s work ({why})",
                            self.ledger.guaranteed(r)
                        ),
                        first => format!(
                            "fair share: tenant {tenant} has {:.1} weighted GPU-hours vs {:.1} for {rival}; waiting behind {rival}'s work ({why})",
                            self.ledger.share(t),
                            first.map_or_else(|| self.ledger.share(r), |(share, _)| share)
                        ),
                    }
                }
                // The tenant's own work went first: what it lacks now, as the next cycle will say.
                None => now.clone(),
            },
            None => format!("no ready node has {}", need.describe("free")),
        };
        Ok(self.fleet.plan.keep_pending(index, reason)?)
    }

    /// CPU-only work no CPU node had room for, in its turn: the spare host CPU of GPU nodes, now
    /// that the GPU work of the cycle has been placed (each placed GPU gives back the host CPU kept
    /// for it).
    pub(crate) fn finish(&mut self) -> Result<(), Failure> {
        for index in std::mem::take(&mut self.on_host_cpu) {
            let Some(w) = self.snapshot.workload(index) else { continue };
            if let Some(node) = self.fleet.host_cpu_node(w) {
                let left = self.fleet.plan.cpu_free(node).saturating_sub(w.cpu_millis);
                let reason = format!(
                    "no CPU node has {} mCPU and {} MiB free; placed on the spare host CPU of {} ({left} mCPU left free there), using none of its GPUs",
                    w.cpu_millis,
                    w.memory_mb,
                    node_name(self.snapshot, node)
                );
                self.fleet.place_cpu(index, node, reason)?;
                self.placed += 1;
            } else {
                let that_run = if w.container { " that runs containers" } else { "" };
                let reason = format!(
                    "no CPU node{that_run} has {} mCPU and {} MiB of memory free, nor any GPU node beyond the host CPU and memory kept for its free GPUs",
                    w.cpu_millis, w.memory_mb
                );
                self.fleet.plan.keep_pending(index, reason)?;
            }
        }
        Ok(())
    }

    /// For work within its tenant's guarantee that does not fit: waits for GPUs being vacated, or
    /// preempts work of the tenant most over its fair share. Returns whether it decided `w`.
    fn reclaim(&mut self, index: u32, w: &Workload<'s>, need: &GpuNeed<'s>) -> Result<bool, Failure> {
        let snapshot = self.snapshot;
        let t = w.tenant;
        let tenant = self.ledger.name(t);

        // GPUs already being vacated: wait for them, preempt no more.
        if let Some(node) = self.wait_for_vacating(w, need) {
            self.ledger.give(t, need.count);
            let reason = format!(
                "waiting for preempted work on {} to stop (grace period {} s); then placed within tenant {tenant}'s guarantee of {} GPUs",
                node_name(snapshot, node),
                self.settings.grace_period_s,
                self.ledger.guaranteed(t)
            );
            self.fleet.plan.keep_pending(index, reason)?;
            return Ok(true);
        }

        let key = shape(w);
        let found = match self.no_victims.get(&key) {
            Some(None) => Reclaim::Impossible,
            Some(Some((victim, remaining_s))) => Reclaim::Protected { victim: *victim, remaining_s: *remaining_s },
            None => self.find_victims(w, need),
        };
        match found {
            Reclaim::Victims { tenant: vt, node, victims } => {
                let victim_tenant = self.ledger.name(vt);
                let (held_before, fair) = (self.ledger.held(vt), self.ledger.fair_gpus[vt as usize]);
                let share_before = self.ledger.share(vt);
                for &v in &victims {
                    let vw = &snapshot.workloads[v as usize];
                    let resumes = if vw.checkpointable { ", resumes from its checkpoint" } else { "" };
                    let why = format!(
                        "fair-share reclaim: tenant {victim_tenant} holds {held_before} GPUs, over its guarantee of {} and its fair share of {fair:.1} ({share_before:.1} weighted GPU-hours); tenant {tenant} is below its guarantee of {} GPUs and needs them for {}; requeued{resumes}",
                        self.ledger.guaranteed(vt),
                        self.ledger.guaranteed(t),
                        w.name
                    );
                    self.fleet.plan.preempt(v, why)?;
                    self.preempted[v as usize] = true;
                    self.preempted_count += 1;
                    self.ledger.release(vt, vw.gpu_count);
                }
                self.changed.insert(vt);
                self.fleet.reserve(node, need);
                self.ledger.give(t, need.count);
                let names: Vec<&str> = victims.iter().map(|&v| snapshot.workloads[v as usize].name).collect();
                let reason = format!(
                    "reclaiming GPUs within tenant {tenant}'s guarantee of {} GPUs: preempting {} on {} from tenant {victim_tenant}, the most over its fair share; placed once they stop",
                    self.ledger.guaranteed(t),
                    names.join(", "),
                    node_name(snapshot, node)
                );
                self.fleet.plan.keep_pending(index, reason)?;
                Ok(true)
            }
            Reclaim::Protected { victim, remaining_s } => {
                self.no_victims.insert(key, Some((victim, remaining_s)));
                let vw = &snapshot.workloads[victim as usize];
                let reason = format!(
                    "waiting: {} (tenant {}, over its fair share) is protected by its minimum runtime for {remaining_s} more s; then it is reclaimed for tenant {tenant}'s guarantee",
                    vw.name,
                    self.ledger.name(vw.tenant)
                );
                self.fleet.plan.keep_pending(index, reason)?;
                Ok(true)
            }
            Reclaim::Impossible => {
                self.no_victims.insert(key, None);
                Ok(false)
            }
        }
    }

    /// A node where the open GPUs plus GPUs of stopping work no other waiting workload counts on
    /// hold `w`; sets them aside for it.
    fn wait_for_vacating(&mut self, w: &Workload<'s>, need: &GpuNeed<'s>) -> Option<u32> {
        let snapshot = self.snapshot;
        let usable =
            |g: u32| snapshot.gpu(g).is_some_and(|gpu| need.allows_model(gpu.model) && gpu.memory_mb >= need.memory_mb);
        let node = self.vacating.iter().find_map(|(&node, gpus)| {
            let stopping = gpus.iter().filter(|&&(g, counted)| !counted && usable(g)).count() as u32;
            let open = self.fleet.open_fitting(node, need);
            let ready = snapshot.node(node).is_some_and(|n| n.is_ready() && n.can_run(w));
            (ready && stopping > 0 && open + stopping >= need.count).then_some((node, open))
        });
        let (node, open) = node?;
        let mut wanted = need.count.saturating_sub(open);
        if let Some(gpus) = self.vacating.get_mut(&node) {
            for (g, counted) in gpus.iter_mut() {
                if wanted == 0 {
                    break;
                }
                if !*counted && usable(*g) {
                    *counted = true;
                    wanted -= 1;
                }
            }
        }
        self.fleet.reserve(node, need);
        Some(node)
    }

    /// Victims for `w` among the work of the tenants most over their fair share, most first.
    fn find_victims(&self, w: &Workload<'s>, need: &GpuNeed<'s>) -> Reclaim {
        let snapshot = self.snapshot;
        let min_runtime_s = u64::from(self.settings.min_runtime_s);
        let mut over: Vec<u32> = (0..snapshot.tenants.len() as u32)
            .filter(|&vt| vt != w.tenant && self.ledger.over_fair_share(vt))
            .collect();
        over.sort_by(|&a, &b| self.ledger.share(b).total_cmp(&self.ledger.share(a)).then(a.cmp(&b)));
        let mut protected: Option<(u32, u64)> = None;
        for vt in over {
            // GPUs it may give back before it would fall to its own guarantee.
            let spare = self.ledger.held(vt).saturating_sub(self.ledger.guaranteed(vt));
            let mut best: Option<(u32, Vec<u32>)> = None;
            for (&(_, node), list) in self.candidates.range((vt, 0)..=(vt, u32::MAX)) {
                if !snapshot.node(node).is_some_and(|n| n.is_ready() && n.can_run(w)) {
                    continue;
                }
                let mut gained = self.fleet.open_fitting(node, need);
                let (mut cpu, mut memory) = (self.fleet.plan.cpu_free(node), self.fleet.plan.memory_free(node));
                let mut taken = 0u32;
                let mut chosen = Vec::new();
                for &v in list {
                    if gained >= need.count {
                        break;
                    }
                    let vw = &snapshot.workloads[v as usize];
                    if self.preempted[v as usize] || !vw.is_running() || taken + vw.gpu_count > spare {
                        continue;
                    }
                    let frees = snapshot
                        .node_gpus(node)
                        .filter(|(_, g)| {
                            g.holder == Some(v) && need.allows_model(g.model) && g.memory_mb >= need.memory_mb
                        })
                        .count() as u32;
                    if frees == 0 {
                        continue;
                    }
                    let ran_s = vw.running_ms(snapshot.now_ms) / 1000;
                    if vw.started_ms != 0 && ran_s < min_runtime_s {
                        let remaining = min_runtime_s - ran_s;
                        if protected.is_none_or(|(_, r)| remaining < r) {
                            protected = Some((v, remaining));
                        }
                        continue;
                    }
                    gained += frees;
                    taken += vw.gpu_count;
                    cpu = cpu.saturating_add(vw.cpu_millis);
                    memory = memory.saturating_add(vw.memory_mb);
                    chosen.push(v);
                }
                let room = gained >= need.count && cpu >= w.cpu_millis && memory >= w.memory_mb;
                if room && !chosen.is_empty() && best.as_ref().is_none_or(|(_, b)| chosen.len() < b.len()) {
                    best = Some((node, chosen));
                }
            }
            if let Some((node, victims)) = best {
                return Reclaim::Victims { tenant: vt, node, victims };
            }
        }
        match protected {
            Some((victim, remaining_s)) => Reclaim::Protected { victim, remaining_s },
            None => Reclaim::Impossible,
        }
    }
}
