//! `fair-share`: a built-in platform policy that shares the fleet between tenants by weight, over
//! time. A tenant that used many GPU-hours lately waits behind one that used few, so a team that
//! submits a thousand jobs cannot crowd out a team that submits ten.
//!
//! **Weighted share.** Each tenant's standing is its *weighted share*, in GPU-hours per unit of
//! weight:
//!
//! ```text
//! share = (usage_weight × decayed_gpu_hours + held_gpu_hours × GPUs held now) / weight
//! ```
//!
//! `decayed_gpu_hours` is the tenant's usage history, decayed with the platform's half-life, as the
//! host puts it in the snapshot; a GPU held now counts as `held_gpu_hours` (one by default) more, so
//! what a tenant runs now weighs on top of what it ran. A weight of 0 counts as 1.
//!
//! **Order.** Pending work is served one workload at a time from the tenant with the smallest share
//! (ties: table order), and the share is recomputed after each GPU placement, so two tenants with
//! equal standing alternate (progressive filling, DRF-style on GPUs). A tenant *below its
//! guarantee* (holding fewer than its `guaranteed_gpus`) goes before every tenant that is not,
//! whatever its history. Within a tenant, its work goes by effective priority (the host's night
//! bonus for training applied), then submission time; with `realtime_first`, its real-time
//! inference goes before the rest of its work.
//!
//! **Placement.** CPU-only work, and CPU-capable work while a CPU node has room, goes to a CPU node
//! (the tightest CPU fit), leaving the GPUs to work that needs them; CPU-only work with no CPU node
//! free may use the spare host CPU of a GPU node (what is free beyond a per-GPU share of its CPU and
//! memory kept for each of its free GPUs, so GPUs never sit idle for want of host CPU); it is decided
//! at the end of the cycle, once the GPU work has taken what it needs. GPU work is a gang on one node, best fit: the node
//! with the fewest free GPUs left over, then the least GPU memory left over, with GPUs that fit its
//! memory by live telemetry and its allowed models, and the host CPU and memory it asks for. A
//! container workload only goes to (and only reclaims on) a node with a container engine (ABI 1.4);
//! with none ready it waits ("no ready node runs containers").
//!
//! **Quotas and the burst reserve.** A tenant may hold more than its guarantee only if it may
//! borrow. Non-preemptible work other than real-time inference may not leave fewer than
//! `burst_reserve_gpus` GPUs free.
//!
//! **Reclaim** (the only preemption; off with `"reclaim": false`). When work a tenant is guaranteed
//! (its GPUs held plus the workload's stay within `guaranteed_gpus`) does not fit, the policy
//! preempts preemptible work of the tenant *most over its fair share*: of the tenants holding more
//! than their guarantee and more than their fair part of the ready GPUs (split by weight among the
//! tenants with GPU work), the one with the largest weighted share that can make room; on the node
//! where the fewest of its workloads do (lowest priority first, then the most recently started). It
//! never preempts real-time inference, never takes a tenant below its own guarantee, and leaves work
//! that has run less than `min_runtime_s` alone (the waiting workload says for how long). The free
//! GPUs of that node are set aside for the waiting workload; while its victims stop (the policy sees
//! them as `stopping`), it waits for them and preempts no more.
//!
//! **Reasons.** Every pending workload gets one: placed ("best fit on gpu-a: GPUs [0,1] (H100), 6 left
//! free there; fair share: tenant product's turn at 3.5 weighted GPU-hours, the least with work
//! waiting"), or why not ("fair share: tenant research has 12.0 weighted GPU-hours vs 3.5 for product;
//! waiting behind product's work (no ready node has 4 free GPUs with ≥ 40960 MiB left)", "no ready
//! node has 16 GPUs with ≥ 1024 MiB, even with all its GPUs free", "quota used up: …", "held for the
//! burst reserve: …").
//!
//! Params (JSON, all optional):
//! - `usage_weight` (number ≥ 0, default 1): how much the decayed history counts; 0 shares by the
//!   GPUs held now only.
//! - `held_gpu_hours` (number ≥ 0, default 1): the GPU-hours each GPU held now counts for; 0 shares by
//!   history only (the share then changes only between cycles).
//! - `reclaim` (bool, default true): preempt for tenants below their guarantee.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use airtime_policy_sdk::prelude::*;

/// The policy. Stateless: everything it needs is in the snapshot.
#[derive(Debug, Clone, Copy, Default)]
pub struct FairShare;

airtime_policy_sdk::export_policy!(FairShare);

impl Policy for FairShare {
    fn validate_params(&self, params: &airtime_policy_sdk::params::Params<'_>) -> Result<(), Failure> {
        Config::read(params).map(|_| ())
    }

    fn evaluate<'s>(&self, snapshot: &Snapshot<'s>, ctx: &mut Context<'s>) -> Result<Vec<Decision<'s>>, Failure> {
        let config = Config::read(ctx.params())?;
        let settings = snapshot.settings_or_default();

        // Each tenant's queue, in its own order; the tenants are then served by share.
        let mut pending: Vec<(u32, &Workload<'s>)> = snapshot.pending().collect();
        pending.sort_by_cached_key(|(index, w)| {
            let realtime = settings.realtime_first && w.class == WorkloadClass::RealtimeInference;
            (!realtime, Reverse(snapshot.effective_priority(w)), w.submitted_ms, *index)
        });
        let pending_count = pending.len();
        let mut queues: Vec<Vec<(u32, &Workload<'s>)>> = vec![Vec::new(); snapshot.tenants.len()];
        for (index, w) in pending {
            if let Some(queue) = queues.get_mut(w.tenant as usize) {
                queue.push((index, w));
            }
        }

        let mut cycle = Cycle::new(snapshot, settings, config, &queues);
        let mut next = vec![0usize; queues.len()];
        let mut version = vec![0u32; queues.len()];
        let mut heap = BinaryHeap::new();
        for (t, queue) in queues.iter().enumerate() {
            if !queue.is_empty() {
                heap.push(Reverse((cycle.ledger.rank(t as u32), t as u32, 0u32)));
            }
        }
        while let Some(Reverse((_, t, entry_version))) = heap.pop() {
            let ti = t as usize;
            if entry_version != version[ti] {
                continue; // re-ranked since: a newer entry stands for it
            }
            let Some(&(index, w)) = queues[ti].get(next[ti]) else { continue };
            next[ti] += 1;
            cycle.decide(index, w)?;
            // The served tenant, and any tenant whose work was preempted, take their new rank.
            let mut changed = std::mem::take(&mut cycle.changed);
            changed.insert(t);
            for c in changed {
                let ci = c as usize;
                if next[ci] < queues[ci].len() {
                    version[ci] += 1;
                    heap.push(Reverse((cycle.ledger.rank(c), c, version[ci])));
                }
            }
        }

        cycle.finish()?;
        let (placed, preempted) = (cycle.placed, cycle.preempted_count);
        let free_left = cycle.fleet.plan.free_gpu_total();
        ctx.info(format_args!(
            "fair share: placed {placed} of {pending_count} pending workloads, preempting {preempted}; {free_left} GPUs left free"
        ));
        let standings = cycle.ledger.standings(20);
        if !standings.is_empty() {
            ctx.debug(format_args!("weighted GPU-hours after this cycle: {standings}"));
        }
        Ok(cycle.fleet.plan.into_decisions())
    }
}

/// The params, checked.
#[derive(Debug, Clone, Copy)]
struct Config {
    usage_weight: f64,
    held_gpu_hours: f64,
    reclaim: bool,
}

impl Config {
    fn read(params: &airtime_policy_sdk::params::Params<'_>) -> Result<Self, Failure> {
        let non_negative = |key: &str| -> Result<f64, Failure> {
            let value: f64 = params.get_or(key, 1.0)?;
            if value.is_finite() && value >= 0.0 {
                Ok(value)
            } else {
                Err(Failure::new(format!("params.{key}: expected a finite number ≥ 0, found {value}")))
            }
        };
        Ok(Config {
            usage_weight: non_negative("usage_weight")?,
            held_gpu_hours: non_negative("held_gpu_hours")?,
            reclaim: params.get_or("reclaim", true)?,
        })
    }
}

/// Every tenant's standing, kept current as the cycle places and preempts.
struct Ledger<'s> {
    names: Vec<&'s str>,
    /// `usage_weight × decayed_gpu_hours`.
    history: Vec<f64>,
    weight: Vec<f64>,
    guaranteed: Vec<u32>,
    may_borrow: Vec<bool>,
    /// GPUs held: by running work, plus what this cycle placed or set aside, less what it preempted.
    held: Vec<u32>,
    /// GPUs this cycle gave each tenant (placed, or set aside for it).
    given: Vec<u32>,
    /// Its share, and whether it was below its guarantee, when this cycle first gave it GPUs.
    first_served: Vec<Option<(f64, bool)>>,
    /// The two tenants given the most GPUs this cycle, most first.
    top: [Option<u32>; 2],
    /// Its part of the ready GPUs by weight, among the tenants with GPU work (held or pending).
    fair_gpus: Vec<f64>,
    held_gpu_hours: f64,
}

impl<'s> Ledger<'s> {
    fn new(snapshot: &Snapshot<'s>, config: Config, queues: &[Vec<(u32, &Workload<'s>)>]) -> Self {
        let tenants = &snapshot.tenants;
        let weight: Vec<f64> = tenants.iter().map(|t| f64::from(t.weight.max(1))).collect();
        let history = tenants
            .iter()
            .map(|t| {
                let hours = f64::from(t.decayed_gpu_hours);
                if hours.is_finite() && hours > 0.0 { config.usage_weight * hours } else { 0.0 }
            })
            .collect();
        let held: Vec<u32> = tenants.iter().map(|t| t.running_gpus).collect();
        let active: Vec<bool> = (0..tenants.len())
            .map(|t| held[t] > 0 || queues.get(t).is_some_and(|q| q.iter().any(|(_, w)| w.needs_gpu())))
            .collect();
        let active_weight: f64 = (0..tenants.len()).filter(|&t| active[t]).map(|t| weight[t]).sum();
        let ready_gpus = f64::from(
            snapshot.gpus.iter().filter(|g| snapshot.node(g.node).is_some_and(Node::is_ready)).count() as u32,
        );
        let fair_gpus = (0..tenants.len())
            .map(|t| if active[t] && active_weight > 0.0 { ready_gpus * weight[t] / active_weight } else { 0.0 })
            .collect();
        Ledger {
            names: tenants.iter().map(|t| t.name).collect(),
            history,
            weight,
            guaranteed: tenants.iter().map(|t| t.guaranteed_gpus).collect(),
            may_borrow: tenants.iter().map(|t| t.may_borrow).collect(),
            held,
            given: vec![0; tenants.len()],
            first_served: vec![None; tenants.len()],
            top: [None, None],
            fair_gpus,
            held_gpu_hours: config.held_gpu_hours,
        }
    }

    fn name(&self, t: u32) -> &'s str {
        self.names.get(t as usize).copied().unwrap_or("?")
    }

    fn held(&self, t: u32) -> u32 {
        self.held.get(t as usize).copied().unwrap_or(0)
    }

    fn guaranteed(&self, t: u32) -> u32 {
        self.guaranteed.get(t as usize).copied().unwrap_or(0)
    }

    /// Weighted GPU-hours: history plus what it holds now, per unit of weight.
    fn share(&self, t: u32) -> f64 {
        let t = t as usize;
        match (self.history.get(t), self.weight.get(t), self.held.get(t)) {
            (Some(history), Some(weight), Some(held)) => (history + self.held_gpu_hours * f64::from(*held)) / weight,
            _ => 0.0,
        }
    }

    fn below_guarantee(&self, t: u32) -> bool {
        self.held(t) < self.guaranteed(t)
    }

    /// `gpus` more would stay within its guarantee.
    fn within_guarantee(&self, t: u32, gpus: u32) -> bool {
        self.held(t).saturating_add(gpus) <= self.guaranteed(t)
    }

    /// Holds more than its guarantee and more than its fair part of the fleet: the work above both
    /// is what a reclaim may take.
    fn over_fair_share(&self, t: u32) -> bool {
        let held = self.held(t);
        held > self.guaranteed(t) && f64::from(held) > self.fair_gpus.get(t as usize).copied().unwrap_or(0.0)
    }

    /// The heap key: below its guarantee first, then the smallest share. A share is finite and
    /// non-negative, so its bits order as the numbers do.
    fn rank(&self, t: u32) -> (bool, u64) {
        (!self.below_guarantee(t), self.share(t).to_bits())
    }

    /// This cycle gives `t` `gpus` GPUs.
    fn give(&mut self, t: u32, gpus: u32) {
        let (share, below) = (self.share(t), self.below_guarantee(t));
        let ti = t as usize;
        if let Some(first) = self.first_served.get_mut(ti) {
            first.get_or_insert((share, below));
        }
        if let (Some(held), Some(given)) = (self.held.get_mut(ti), self.given.get_mut(ti)) {
            *held = held.saturating_add(gpus);
            *given = given.saturating_add(gpus);
        }
        let given = |x: Option<u32>| x.map_or(0, |x| self.given[x as usize]);
        self.top = match self.top {
            [Some(a), b] if a == t => [Some(a), b],
            [a, Some(b)] if b == t => {
                if given(Some(b)) > given(a) {
                    [Some(b), a]
                } else {
                    [a, Some(b)]
                }
            }
            [a, b] => {
                if given(Some(t)) > given(a) {
                    [Some(t), a]
                } else if given(Some(t)) > given(b) {
                    [a, Some(t)]
                } else {
                    [a, b]
                }
            }
        };
    }

    /// `t`'s preempted work gives back `gpus` GPUs.
    fn release(&mut self, t: u32, gpus: u32) {
        if let Some(held) = self.held.get_mut(t as usize) {
            *held = held.saturating_sub(gpus);
        }
    }

    /// The tenant other than `t` this cycle gave the most GPUs to, if any.
    fn rival(&self, t: u32) -> Option<u32> {
        self.top.into_iter().flatten().find(|&r| r != t)
    }

    /// "product 3.5, research 12.0": the first `limit` tenants with GPU work by share.
    fn standings(&self, limit: usize) -> String {
        let mut active: Vec<u32> =
            (0..self.names.len() as u32).filter(|&t| self.fair_gpus[t as usize] > 0.0 || self.held(t) > 0).collect();
        active.sort_by(|&a, &b| self.share(a).total_cmp(&self.share(b)).then(a.cmp(&b)));
        let shown: Vec<String> =
            active.iter().take(limit).map(|&t| format!("{} {:.1}", self.name(t), self.share(t))).collect();
        let mut text = shown.join(", ");
        if active.len() > limit {
            text.push_str(&format!(", and {} more", active.len() - limit));
        }
        text
    }
}

/// What a workload asks of a node: GPU count, MiB per GPU, allowed models, host mCPU and MiB, a
/// container engine. A cycle only ever takes resources, so a shape that found no room finds none
/// later in the cycle.
type Shape<'s> = (u32, u32, &'s str, u32, u32, bool);

fn shape<'s>(w: &Workload<'s>) -> Shape<'s> {
    (w.gpu_count, w.gpu_memory_mb, w.gpu_models, w.cpu_millis, w.memory_mb, w.container)
}

/// Whether `node` can run `w`: a bool test for work not in a container.
fn can_run(snapshot: &Snapshot<'_>, w: &Workload<'_>, node: u32) -> bool {
    !w.container || snapshot.node(node).is_some_and(|n| n.can_run(w))
}

/// Why a shape of GPU work found no room, worked out once per shape.
#[derive(Clone)]
enum NoFit {
    /// Not even on an idle fleet: the whole reason.
    Never(String),
    /// It would have fit the GPUs free when the cycle began: work placed ahead of it took them.
    TakenThisCycle(String),
    /// Running work holds what it needs: the whole reason.
    Busy(String),
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
struct Cycle<'p, 's> {
    snapshot: &'p Snapshot<'s>,
    settings: Settings,
    config: Config,
    fleet: Fleet<'p, 's>,
    ledger: Ledger<'s>,
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
    changed: BTreeSet<u32>,
    /// CPU-only work that found no CPU node, to try on GPU nodes' spare host CPU at the end.
    on_host_cpu: Vec<u32>,
    placed: u32,
    preempted_count: u32,
    /// Some ready node has a container engine: container work can run somewhere.
    any_engine: bool,
}

impl<'p, 's> Cycle<'p, 's> {
    fn new(
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
    fn decide(&mut self, index: u32, w: &Workload<'s>) -> Result<(), Failure> {
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
                devices(snapshot, &fit.gpus)
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
            Some(NoFit::TakenThisCycle(why)) => match self.ledger.rival(t) {
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
                None => format!("{why}: tenant {tenant}'s own higher-ranked work took them this cycle"),
            },
            None => format!("no ready node has {}", need.describe("free")),
        };
        Ok(self.fleet.plan.keep_pending(index, reason)?)
    }

    /// CPU-only work no CPU node had room for, in its turn: the spare host CPU of GPU nodes, now
    /// that the GPU work of the cycle has been placed (each placed GPU gives back the host CPU kept
    /// for it).
    fn finish(&mut self) -> Result<(), Failure> {
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

/// Where a GPU workload goes.
struct Fit {
    node: u32,
    gpus: Vec<u32>,
}

/// What one node's fit for a shape came to, as of a node version.
#[derive(Clone, Copy, Default)]
struct Memo {
    /// 0: never looked at (versions start at 1).
    version: u32,
    /// The GPU memory a fit would leave over; `None`: it does not fit.
    waste: Option<u64>,
}

/// The fleet as the cycle leaves it: the plan, which GPUs are still open (free in the plan, on a
/// ready node, not set aside for a waiting workload), and the ready nodes indexed by how many open
/// GPUs they have, so each workload looks at the tightest candidates first instead of at the whole
/// fleet.
struct Fleet<'p, 's> {
    snapshot: &'p Snapshot<'s>,
    plan: Plan<'p, 's>,
    open: Vec<bool>,
    open_count: Vec<u32>,
    /// `by_open[k]`: the ready GPU nodes with exactly `k` open GPUs, ascending.
    by_open: Vec<Vec<u32>>,
    /// Per node, bumped whenever its open GPUs change.
    version: Vec<u32>,
    /// Per (GPU count, MiB, models), per node: the fit as of a node version. Nodes that did not
    /// change are not looked at again, which keeps 10,000 workloads on 1,000 nodes in milliseconds.
    memo: BTreeMap<(u32, u32, &'s str), Vec<Memo>>,
    /// Ready nodes without GPUs, by the CPU and memory they have free.
    cpu_room: RoomIndex,
    /// Ready nodes with GPUs, by their spare host CPU and memory (see [`Fleet::spare_host`]).
    host_room: RoomIndex,
    /// Reused by fit searches, so looking at a node allocates nothing.
    scratch: Vec<(u32, u32)>,
}

/// Nodes ordered by the host CPU and memory they have room for, so the tightest fit is a range
/// lookup instead of a scan of the fleet.
struct RoomIndex {
    set: BTreeSet<(u32, u32, u32)>,
    /// Per node, its entry in `set`.
    room: Vec<Option<(u32, u32)>>,
}

impl RoomIndex {
    fn new(nodes: usize) -> Self {
        RoomIndex { set: BTreeSet::new(), room: vec![None; nodes] }
    }

    /// `node` has room for `cpu` mCPU and `memory` MiB.
    fn set(&mut self, node: u32, (cpu, memory): (u32, u32)) {
        let Some(slot) = self.room.get_mut(node as usize) else { return };
        if let Some((old_cpu, old_memory)) = slot.replace((cpu, memory)) {
            self.set.remove(&(old_cpu, old_memory, node));
        }
        self.set.insert((cpu, memory, node));
    }

    /// The node with room for `cpu` and `memory` that `can_run` the workload, the least left over
    /// (CPU, then memory, then the node order).
    fn tightest(&self, cpu: u32, memory: u32, can_run: impl Fn(u32) -> bool) -> Option<u32> {
        self.set.range((cpu, 0, 0)..).find(|&&(_, m, node)| m >= memory && can_run(node)).map(|&(.., node)| node)
    }
}

impl<'p, 's> Fleet<'p, 's> {
    fn new(snapshot: &'p Snapshot<'s>) -> Self {
        let ready = |node: u32| snapshot.node(node).is_some_and(Node::is_ready);
        let open: Vec<bool> = snapshot.gpus.iter().map(|g| g.is_free() && ready(g.node)).collect();
        let mut open_count = vec![0u32; snapshot.nodes.len()];
        for (g, gpu) in snapshot.gpus.iter().enumerate() {
            if open[g]
                && let Some(count) = open_count.get_mut(gpu.node as usize)
            {
                *count += 1;
            }
        }
        let mut by_open: Vec<Vec<u32>> = Vec::new();
        for (node, n) in snapshot.ready_nodes() {
            if !n.has_gpus() {
                continue;
            }
            let k = open_count[node as usize] as usize;
            if by_open.len() <= k {
                by_open.resize_with(k + 1, Vec::new);
            }
            by_open[k].push(node);
        }
        let mut fleet = Fleet {
            snapshot,
            plan: Plan::new(snapshot),
            open,
            open_count,
            by_open,
            version: vec![1; snapshot.nodes.len()],
            memo: BTreeMap::new(),
            cpu_room: RoomIndex::new(snapshot.nodes.len()),
            host_room: RoomIndex::new(snapshot.nodes.len()),
            scratch: Vec::new(),
        };
        for (node, _) in snapshot.ready_nodes() {
            fleet.refresh_room(node);
        }
        fleet
    }

    /// Files `node` (a ready node) in its room index after a change.
    fn refresh_room(&mut self, node: u32) {
        match self.snapshot.node(node) {
            Some(n) if n.is_ready() && n.has_gpus() => self.host_room.set(node, self.spare_host(node)),
            Some(n) if n.is_ready() => self.cpu_room.set(node, (self.plan.cpu_free(node), self.plan.memory_free(node))),
            _ => {}
        }
    }

    fn has_host_room(&self, node: u32, w: &Workload<'_>) -> bool {
        self.plan.cpu_free(node) >= w.cpu_millis && self.plan.memory_free(node) >= w.memory_mb
    }

    /// The CPU node with room for `w` and the least CPU left over.
    fn cpu_node(&self, w: &Workload<'_>) -> Option<u32> {
        self.cpu_room.tightest(w.cpu_millis, w.memory_mb, |node| can_run(self.snapshot, w, node))
    }

    /// The GPU node whose spare host CPU and memory (see [`Fleet::spare_host`]) have room for
    /// CPU-only `w`, the least left over.
    fn host_cpu_node(&self, w: &Workload<'_>) -> Option<u32> {
        self.host_room.tightest(w.cpu_millis, w.memory_mb, |node| can_run(self.snapshot, w, node))
    }

    /// A GPU node's free host CPU and memory beyond a per-GPU share of its totals kept for each of
    /// its open GPUs, so CPU-only work never leaves GPUs that could be placed without the host
    /// resources to run them.
    fn spare_host(&self, node: u32) -> (u32, u32) {
        let Some(n) = self.snapshot.node(node) else { return (0, 0) };
        let open = u64::from(self.open_count.get(node as usize).copied().unwrap_or(0));
        let gpus = u64::from(n.gpu_count.max(1));
        let keep = |total: u32| (u64::from(total) * open / gpus).min(u64::from(u32::MAX)) as u32;
        (
            self.plan.cpu_free(node).saturating_sub(keep(n.cpu_millis)),
            self.plan.memory_free(node).saturating_sub(keep(n.memory_mb)),
        )
    }

    /// The best fit for `w`: the fewest open GPUs left over on the node, then the least GPU memory
    /// left over, then the lowest node index. `None` when no ready node has enough open GPUs that
    /// fit and the host CPU and memory.
    fn best_fit(&mut self, w: &Workload<'s>, need: &GpuNeed<'s>) -> Option<Fit> {
        if need.count == 0 {
            return None;
        }
        let key = (need.count, need.memory_mb, w.gpu_models);
        let mut memo = self.memo.remove(&key).unwrap_or_else(|| vec![Memo::default(); self.snapshot.nodes.len()]);
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut best: Option<(u64, u32)> = None;
        // Groups are visited tightest first; the first group with a fitting node holds the best fit.
        for group in self.by_open.iter().skip(need.count as usize) {
            for &node in group {
                if !can_run(self.snapshot, w, node) {
                    continue;
                }
                let version = self.version[node as usize];
                let waste = match memo.get(node as usize) {
                    // Open GPUs only dwindle in a cycle: a node that did not fit never will.
                    Some(seen) if seen.version == version || (seen.version != 0 && seen.waste.is_none()) => seen.waste,
                    _ => {
                        let waste = self.fitting(node, need, &mut scratch);
                        if let Some(seen) = memo.get_mut(node as usize) {
                            *seen = Memo { version, waste };
                        }
                        waste
                    }
                };
                if waste.is_some() && !self.has_host_room(node, w) {
                    continue;
                }
                if let Some(waste) = waste
                    && best.is_none_or(|(least, _)| waste < least)
                {
                    best = Some((waste, node));
                    if waste == 0 {
                        break;
                    }
                }
            }
            if best.is_some() {
                break;
            }
        }
        self.memo.insert(key, memo);
        let fit = best.and_then(|(_, node)| {
            self.fitting(node, need, &mut scratch)?;
            let mut gpus: Vec<u32> = scratch.iter().map(|&(_, g)| g).collect();
            gpus.sort_unstable();
            Some(Fit { node, gpus })
        });
        self.scratch = scratch;
        fit
    }

    /// Leaves in `chosen` the open GPUs of `node` that `need` would take (the tightest free memory
    /// first) as (free MiB, GPU), and returns the memory they leave over; `None` if too few fit.
    fn fitting(&self, node: u32, need: &GpuNeed<'_>, chosen: &mut Vec<(u32, u32)>) -> Option<u64> {
        chosen.clear();
        if self.open_count.get(node as usize).copied().unwrap_or(0) < need.count {
            return None;
        }
        chosen.extend(
            self.snapshot
                .node_gpus(node)
                .filter(|(g, gpu)| self.open[*g as usize] && need.fits(gpu))
                .map(|(g, gpu)| (gpu.memory_free_mb(), g)),
        );
        if chosen.len() < need.count as usize {
            return None;
        }
        chosen.sort_unstable();
        chosen.truncate(need.count as usize);
        Some(chosen.iter().map(|(free, _)| u64::from(free.saturating_sub(need.memory_mb))).sum())
    }

    /// How many open GPUs of `node` fit `need`.
    fn open_fitting(&self, node: u32, need: &GpuNeed<'_>) -> u32 {
        self.snapshot.node_gpus(node).filter(|(g, gpu)| self.open[*g as usize] && need.fits(gpu)).count() as u32
    }

    fn place_gpus(&mut self, index: u32, fit: Fit, reason: String) -> Result<(), Failure> {
        self.plan.place(index, fit.node, fit.gpus.clone(), reason)?;
        self.close(fit.node, &fit.gpus);
        self.refresh_room(fit.node);
        Ok(())
    }

    /// A CPU placement: no GPUs, the node's CPU and memory.
    fn place_cpu(&mut self, index: u32, node: u32, reason: String) -> Result<(), Failure> {
        self.plan.place(index, node, Vec::new(), reason)?;
        self.refresh_room(node);
        Ok(())
    }

    /// Sets the open GPUs of `node` that fit `need` aside for a waiting workload.
    fn reserve(&mut self, node: u32, need: &GpuNeed<'_>) {
        let gpus: Vec<u32> = self
            .snapshot
            .node_gpus(node)
            .filter(|(g, gpu)| self.open[*g as usize] && need.fits(gpu))
            .map(|(g, _)| g)
            .collect();
        self.close(node, &gpus);
        // Fewer open GPUs keep less host CPU back.
        self.refresh_room(node);
    }

    fn close(&mut self, node: u32, gpus: &[u32]) {
        let before = self.open_count.get(node as usize).copied().unwrap_or(0);
        let mut closed = 0;
        for &g in gpus {
            if let Some(open) = self.open.get_mut(g as usize)
                && *open
            {
                *open = false;
                closed += 1;
            }
        }
        if closed == 0 {
            return;
        }
        let after = before - closed;
        self.open_count[node as usize] = after;
        self.version[node as usize] += 1;
        if let Some(group) = self.by_open.get_mut(before as usize)
            && let Ok(at) = group.binary_search(&node)
        {
            group.remove(at);
            if let Some(group) = self.by_open.get_mut(after as usize)
                && let Err(at) = group.binary_search(&node)
            {
                group.insert(at, node);
            }
        }
    }

    /// Why `w`'s shape finds no room now.
    fn no_fit(&self, w: &Workload<'_>, need: &GpuNeed<'_>) -> NoFit {
        let snapshot = self.snapshot;
        let host = |n: &Node<'_>| n.can_run(w) && n.cpu_millis >= w.cpu_millis && n.memory_mb >= w.memory_mb;
        // A container workload looks only at the nodes with a container engine, and says so.
        let no_node = if w.container { "no ready node that runs containers" } else { "no ready node" };
        let fits_idle = snapshot.ready_nodes().any(|(node, n)| {
            host(n)
                && snapshot
                    .node_gpus(node)
                    .filter(|(_, g)| need.allows_model(g.model) && g.memory_mb >= need.memory_mb)
                    .count() as u32
                    >= need.count
        });
        if !fits_idle {
            return NoFit::Never(format!("{no_node} has {}, even with all its GPUs free", need.describe("")));
        }
        let fitted_at_start = snapshot.ready_nodes().any(|(node, n)| {
            n.can_run(w)
                && n.has_room_for(w.cpu_millis, w.memory_mb)
                && snapshot.free_gpus(node).filter(|(_, g)| need.fits(g)).count() as u32 >= need.count
        });
        if fitted_at_start {
            return NoFit::TakenThisCycle(format!("{no_node} has {} left", need.describe("free")));
        }
        let gpus_fit_now = self
            .by_open
            .iter()
            .skip(need.count as usize)
            .flatten()
            .any(|&node| can_run(snapshot, w, node) && self.open_fitting(node, need) >= need.count);
        if gpus_fit_now {
            let nodes = if w.container { "the ready nodes that run containers" } else { "the ready nodes" };
            return NoFit::Busy(format!(
                "{nodes} with {} lack {} mCPU and {} MiB of host memory free",
                need.describe("free"),
                w.cpu_millis,
                w.memory_mb
            ));
        }
        let most = self
            .by_open
            .iter()
            .skip(1)
            .flatten()
            .filter(|&&node| can_run(snapshot, w, node))
            .map(|&node| (self.open_fitting(node, need), node))
            .max_by_key(|&(count, node)| (count, Reverse(node)));
        let most = match most {
            Some((count, node)) if count > 0 => {
                format!("; the most on one node is {count} ({})", node_name(snapshot, node))
            }
            _ => "; every GPU that fits it is taken".to_owned(),
        };
        NoFit::Busy(format!("{no_node} has {}{most}", need.describe("free")))
    }
}

fn node_name<'s>(snapshot: &Snapshot<'s>, node: u32) -> &'s str {
    snapshot.node(node).map_or("?", |n| n.name)
}

/// "GPUs [0,1]": device indexes on their node.
fn devices(snapshot: &Snapshot<'_>, gpus: &[u32]) -> String {
    let list: Vec<String> = gpus.iter().filter_map(|&g| snapshot.gpu(g)).map(|g| g.device_index.to_string()).collect();
    format!("GPU{} [{}]", if gpus.len() == 1 { "" } else { "s" }, list.join(","))
}

#[cfg(test)]
mod tests;
