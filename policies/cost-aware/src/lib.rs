//! `cost-aware`: a built-in platform policy for hybrid fleets that pays for GPUs only where work
//! needs them. Inference that can run on CPU goes to CPU nodes while they have room; everything else
//! goes to the cheapest GPUs that fit it. Every placement says what it costs.
//!
//! **Order.** With `realtime_first`, real-time (customer-facing) inference goes first; then
//! effective priority (the host's night bonus for training applied); then submission time.
//!
//! **CPU first for CPU-capable inference.** A CPU-capable workload of an inference class
//! (`realtime_inference`, `batch_inference`, `embeddings`, `evaluation`) goes to a CPU node (one
//! with `gpu_count == 0`) whenever one has room for its CPU and memory: the cheapest `cost_per_hour`
//! first, ties to the tightest CPU fit. Only when no CPU node has room does it take GPUs. CPU-only
//! work goes to CPU nodes the same way, and with no CPU node free it may use the spare host CPU of a
//! GPU node (cheapest node first), taking none of its GPUs: spare is what is free beyond a per-GPU
//! share of the node's CPU and memory kept for each of its free GPUs, so GPUs never sit idle for want
//! of host CPU. That is decided at the end of the cycle, once the GPU work has taken what it needs. CPU-capable work of other classes
//! (training, fine-tuning, quantization) runs on GPUs, and on a CPU node only when no GPU fits it.
//!
//! **Cheapest GPUs.** GPU work is a gang on one node. It goes to the node with the lowest cost per
//! GPU-hour (`cost_per_hour / gpu_count`) among those whose free GPUs fit it (memory by live
//! telemetry, allowed models, all on one node) and that have the host CPU and memory it asks for.
//! Nodes of equal cost per GPU are tied, and the tie goes to the best fit: the fewest free GPUs left
//! over, then the least GPU memory left over, then the node order. A node that reports no cost
//! counts as free (cost 0), so set costs on every node for this policy to mean anything.
//!
//! **Containers.** A container workload only goes to a node with a container engine (ABI 1.4), on
//! CPU or GPUs; with none ready it waits ("no ready node runs containers").
//!
//! **Quotas and the burst reserve.** A tenant may hold more GPUs than its guarantee only if it may
//! borrow (CPU placements take no GPUs and are never held by quota). Non-preemptible GPU work other
//! than real-time inference may not leave fewer than `burst_reserve_gpus` GPUs free; CPU-capable
//! work held by the reserve runs on a CPU node if one has room.
//!
//! **No preemption.** This policy never preempts: it places what fits, cheapest first, and what does
//! not fit waits with its reason (real-time inference included). Use `slo-first` where bursts of
//! customer traffic must be able to stop running work.
//!
//! **Reasons.** "placed on cpu-2 at $0.40/h instead of a $31.50/h GPU node (gpu-a)", "cheapest fit
//! on l4-1 at $0.80/h per GPU ($1.60/h for 2 GPUs): GPUs [0,1] (L4), 0 left free there", "no ready
//! node has 4 free GPUs with ≥ 40960 MiB; the most on one node is 2 (gpu-node-7)".
//!
//! Params: none.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use airtime_policy_sdk::fit::{FitMemo, NodeRoom, NodesByFree, RoomIndex, gpu_list};
use airtime_policy_sdk::prelude::*;

/// The policy. Stateless: everything it needs is in the snapshot.
#[derive(Debug, Clone, Copy, Default)]
pub struct CostAware;

airtime_policy_sdk::export_policy!(CostAware);

impl Policy for CostAware {
    fn evaluate<'s>(&self, snapshot: &Snapshot<'s>, ctx: &mut Context<'s>) -> Result<Vec<Decision<'s>>, Failure> {
        let settings = snapshot.settings_or_default();
        let mut order: Vec<(u32, &Workload<'s>)> = snapshot.pending().collect();
        order.sort_by_cached_key(|(index, w)| {
            let realtime = settings.realtime_first && w.class == WorkloadClass::RealtimeInference;
            (!realtime, Reverse(snapshot.effective_priority(w)), w.submitted_ms, *index)
        });
        let pending = order.len();
        let mut cycle = Cycle::new(snapshot, settings);
        for (index, w) in order {
            cycle.decide(index, w)?;
        }
        cycle.finish()?;
        let free_left = cycle.plan.free_gpu_total();
        ctx.info(format_args!(
            "cost-aware: placed {} of {pending} pending workloads ({} on CPU nodes); new GPU placements cost {} in all; {free_left} GPUs left free",
            cycle.placed,
            cycle.on_cpu_nodes,
            dollars(cycle.gpu_cost_per_hour)
        ));
        Ok(cycle.plan.into_decisions())
    }
}

/// "$0.40/h".
fn dollars(per_hour: f64) -> String {
    format!("${per_hour:.2}/h")
}

/// A node's cost per hour as the policy counts it: unknown (not a positive finite number) is 0.
fn node_cost(n: &Node<'_>) -> f64 {
    let cost = f64::from(n.cost_per_hour);
    if cost.is_finite() && cost > 0.0 { cost } else { 0.0 }
}

/// Cost per GPU-hour of a GPU node.
fn gpu_hour_cost(n: &Node<'_>) -> f64 {
    node_cost(n) / f64::from(n.gpu_count.max(1))
}

/// A cost in hundredths of a cent, for exact ties and ordering.
fn cost_key(per_hour: f64) -> u64 {
    (per_hour * 10_000.0).round() as u64
}

/// Inference classes that may run on CPU nodes first when CPU-capable.
fn cpu_first(w: &Workload<'_>) -> bool {
    w.cpu_capable
        && matches!(
            w.class,
            WorkloadClass::RealtimeInference
                | WorkloadClass::BatchInference
                | WorkloadClass::Embeddings
                | WorkloadClass::Evaluation
        )
}

/// What a GPU workload asks of a node: GPU count, MiB per GPU, allowed models, host mCPU and MiB, a
/// container engine. A cycle only ever takes resources, so a shape that found no room finds none
/// later in the cycle.
type Shape<'s> = (u32, u32, &'s str, u32, u32, bool);

/// Whether `node` can run `w`: a bool test for work not in a container.
fn can_run(snapshot: &Snapshot<'_>, w: &Workload<'_>, node: u32) -> bool {
    !w.container || snapshot.node(node).is_some_and(|n| n.can_run(w))
}

/// Where a GPU workload goes.
struct Fit {
    node: u32,
    gpus: Vec<u32>,
}

/// One cycle's state.
struct Cycle<'p, 's> {
    snapshot: &'p Snapshot<'s>,
    settings: Settings,
    plan: Plan<'p, 's>,
    /// GPUs each tenant holds: by running work, plus this cycle's placements.
    tenant_gpus: Vec<u32>,
    /// Ready GPU nodes by cost per GPU-hour, cheapest first, each tier indexed by free GPUs (with
    /// a version per node), so a workload looks at the cheapest, tightest candidates first instead
    /// of at the whole fleet.
    tiers: Vec<NodesByFree>,
    /// The tier of each node (`usize::MAX`: not a ready GPU node).
    tier_of: Vec<usize>,
    /// Per GPU need, per node: the fit as of the node's version. Nodes that did not change are not
    /// looked at again.
    memo: FitMemo<'s>,
    /// Why a GPU shape found no room, once it failed.
    no_fit: BTreeMap<Shape<'s>, String>,
    /// Ready CPU nodes by cost, then by the CPU and memory they have free.
    cpu_room: RoomIndex,
    /// Some node is in `cpu_room`.
    any_cpu_node: bool,
    /// Ready GPU nodes by cost per hour, then by their spare host CPU and memory (see
    /// [`spare_host`]), for CPU-only work when no CPU node has room.
    host_room: RoomIndex,
    /// Reused by fit searches, so looking at a node allocates nothing.
    scratch: Vec<(u32, u32)>,
    /// CPU-only work that found no CPU node, to try on GPU nodes' spare host CPU at the end.
    on_host_cpu: Vec<u32>,
    placed: u32,
    on_cpu_nodes: u32,
    gpu_cost_per_hour: f64,
    /// Some ready node has a container engine: container work can run somewhere.
    any_engine: bool,
}

impl<'p, 's> Cycle<'p, 's> {
    fn new(snapshot: &'p Snapshot<'s>, settings: Settings) -> Self {
        let plan = Plan::new(snapshot);
        let mut gpu_nodes: Vec<u32> = Vec::new();
        let mut cpu_nodes: Vec<u32> = Vec::new();
        for (node, n) in snapshot.ready_nodes() {
            if n.has_gpus() { gpu_nodes.push(node) } else { cpu_nodes.push(node) }
        }
        let node_of = |node: u32| snapshot.node(node);

        let mut by_gpu_cost = gpu_nodes.clone();
        by_gpu_cost.sort_by_key(|&node| (node_of(node).map_or(0, |n| cost_key(gpu_hour_cost(n))), node));
        let mut tier_nodes: Vec<Vec<(u32, u32)>> = Vec::new();
        let mut tier_of = vec![usize::MAX; snapshot.nodes.len()];
        let mut last_cost = None;
        for node in by_gpu_cost {
            let cost = node_of(node).map_or(0, |n| cost_key(gpu_hour_cost(n)));
            if last_cost != Some(cost) {
                tier_nodes.push(Vec::new());
                last_cost = Some(cost);
            }
            if let Some(tier) = tier_nodes.last_mut() {
                tier.push((node, plan.free_gpu_count(node)));
            }
            tier_of[node as usize] = tier_nodes.len() - 1;
        }
        let tiers = tier_nodes.into_iter().map(|nodes| NodesByFree::new(snapshot.nodes.len(), nodes)).collect();
        // By cost, then free CPU, then free memory.
        let room = |node: u32, (cpu, memory): (u32, u32)| NodeRoom {
            node,
            tier: node_of(node).map_or(0, |n| cost_key(node_cost(n))),
            cpu,
            memory,
            tie: u64::from(memory),
        };
        let cpu_rooms = cpu_nodes.iter().map(|&node| room(node, (plan.cpu_free(node), plan.memory_free(node))));
        let cpu_room = RoomIndex::new(snapshot.nodes.len(), cpu_rooms);
        let host_rooms = gpu_nodes.iter().map(|&node| room(node, spare_host(snapshot, &plan, node)));
        let host_room = RoomIndex::new(snapshot.nodes.len(), host_rooms);

        Cycle {
            snapshot,
            settings,
            plan,
            tenant_gpus: snapshot.tenants.iter().map(|t| t.running_gpus).collect(),
            tiers,
            tier_of,
            memo: FitMemo::new(snapshot.nodes.len()),
            no_fit: BTreeMap::new(),
            any_cpu_node: !cpu_nodes.is_empty(),
            cpu_room,
            host_room,
            scratch: Vec::new(),
            on_host_cpu: Vec::new(),
            placed: 0,
            on_cpu_nodes: 0,
            gpu_cost_per_hour: 0.0,
            any_engine: snapshot.ready_nodes().any(|(_, n)| n.containers),
        }
    }

    /// Files `node` (a ready node) in its room index after a change.
    fn refresh_room(&mut self, node: u32) {
        match self.node(node) {
            Some(n) if n.is_ready() && n.has_gpus() => {
                let (cpu, memory) = spare_host(self.snapshot, &self.plan, node);
                self.host_room.set(node, cpu, memory, u64::from(memory));
            }
            Some(n) if n.is_ready() => {
                let (cpu, memory) = (self.plan.cpu_free(node), self.plan.memory_free(node));
                self.cpu_room.set(node, cpu, memory, u64::from(memory));
            }
            _ => {}
        }
    }

    fn node(&self, node: u32) -> Option<&'p Node<'s>> {
        self.snapshot.node(node)
    }

    fn name(&self, node: u32) -> &'s str {
        self.snapshot.node(node).map_or("?", |n| n.name)
    }

    fn has_host_room(&self, node: u32, w: &Workload<'_>) -> bool {
        self.plan.cpu_free(node) >= w.cpu_millis && self.plan.memory_free(node) >= w.memory_mb
    }

    /// Places `w` or says why it waits.
    fn decide(&mut self, index: u32, w: &Workload<'s>) -> Result<(), Failure> {
        if w.container && !self.any_engine {
            return Ok(self.plan.keep_pending(index, "no ready node runs containers")?);
        }
        if !w.needs_gpu() {
            return self.decide_cpu_only(index, w);
        }
        let need = w.gpu_need();
        let mut prefix = String::new();
        if cpu_first(w) {
            if let Some(node) = self.cpu_node(w) {
                let n_cost = self.node(node).map_or(0.0, node_cost);
                let key: Shape<'s> = (need.count, need.memory_mb, w.gpu_models, w.cpu_millis, w.memory_mb, w.container);
                let alternative = if self.no_fit.contains_key(&key) { None } else { self.cheapest_fit(w, &need) };
                let instead = match alternative {
                    Some(fit) => {
                        let alternative = self.node(fit.node).map_or(0.0, node_cost);
                        format!(" instead of a {} GPU node ({})", dollars(alternative), self.name(fit.node))
                    }
                    None => "; no GPU node has room for it now".to_owned(),
                };
                let reason = format!("placed on {} at {}{instead}", self.name(node), dollars(n_cost));
                return self.place_on_cpu(index, node, reason);
            }
            if self.any_cpu_node {
                prefix = format!("no CPU node has room for {} mCPU and {} MiB; ", w.cpu_millis, w.memory_mb);
            }
        }

        let t = w.tenant;
        let tenant = self.snapshot.tenant(t);
        let held = self.tenant_gpus.get(t as usize).copied().unwrap_or(0);
        let guaranteed = tenant.map_or(0, |t| t.guaranteed_gpus);
        if held.saturating_add(need.count) > guaranteed && !tenant.is_some_and(|t| t.may_borrow) {
            let why = format!(
                "quota used up: tenant {} holds {held} of its {guaranteed} guaranteed GPUs and may not borrow",
                tenant.map_or("?", |t| t.name)
            );
            return self.cpu_fallback_or_wait(index, w, prefix + &why);
        }
        let reserve = self.settings.burst_reserve_gpus;
        let free = self.plan.free_gpu_total();
        let may_use_reserve = w.class == WorkloadClass::RealtimeInference || w.preemptible;
        if reserve > 0 && !may_use_reserve && free.saturating_sub(need.count) < reserve {
            let why = format!(
                "held for the burst reserve: {reserve} GPUs are kept free for real-time inference ({free} free now; preemptible work may use them)"
            );
            return self.cpu_fallback_or_wait(index, w, prefix + &why);
        }

        let key: Shape<'s> = (need.count, need.memory_mb, w.gpu_models, w.cpu_millis, w.memory_mb, w.container);
        let fit = if self.no_fit.contains_key(&key) { None } else { self.cheapest_fit(w, &need) };
        let Some(fit) = fit else {
            let why = match self.no_fit.get(&key) {
                Some(why) => why.clone(),
                None => {
                    let why = self.no_gpu_reason(w, &need);
                    self.no_fit.insert(key, why.clone());
                    why
                }
            };
            return self.cpu_fallback_or_wait(index, w, prefix + &why);
        };

        let n = self.node(fit.node);
        let per_gpu = n.map_or(0.0, gpu_hour_cost);
        let total = per_gpu * f64::from(need.count);
        let left = self.plan.free_gpu_count(fit.node).saturating_sub(need.count);
        let model = fit.gpus.first().and_then(|&g| self.snapshot.gpu(g)).map_or("?", |g| g.model);
        let for_all =
            if need.count == 1 { String::new() } else { format!(" ({} for {} GPUs)", dollars(total), need.count) };
        let reason = format!(
            "{prefix}cheapest fit on {} at {} per GPU{for_all}: {} ({model}), {left} left free there",
            self.name(fit.node),
            dollars(per_gpu),
            gpu_list(self.snapshot, &fit.gpus)
        );
        let before = self.plan.free_gpu_count(fit.node);
        self.plan.place(index, fit.node, fit.gpus, reason)?;
        self.moved(fit.node, before, self.plan.free_gpu_count(fit.node));
        self.refresh_room(fit.node);
        if let Some(held) = self.tenant_gpus.get_mut(t as usize) {
            *held = held.saturating_add(need.count);
        }
        self.placed += 1;
        self.gpu_cost_per_hour += total;
        Ok(())
    }

    fn decide_cpu_only(&mut self, index: u32, w: &Workload<'s>) -> Result<(), Failure> {
        if let Some(node) = self.cpu_node(w) {
            let cost = self.node(node).map_or(0.0, node_cost);
            let reason = format!(
                "placed on CPU node {} at {}, the cheapest with {} mCPU and {} MiB free",
                self.name(node),
                dollars(cost),
                w.cpu_millis,
                w.memory_mb
            );
            return self.place_on_cpu(index, node, reason);
        }
        // Decided once the GPU work has taken what it needs (see `finish`).
        self.on_host_cpu.push(index);
        Ok(())
    }

    /// CPU-only work no CPU node had room for, in its turn: the spare host CPU of GPU nodes, now
    /// that the GPU work of the cycle has been placed (each placed GPU gives back the host CPU kept
    /// for it).
    fn finish(&mut self) -> Result<(), Failure> {
        for index in std::mem::take(&mut self.on_host_cpu) {
            if let Some(w) = self.snapshot.workload(index) {
                self.place_on_host_cpu(index, w)?;
            }
        }
        Ok(())
    }

    fn place_on_host_cpu(&mut self, index: u32, w: &Workload<'s>) -> Result<(), Failure> {
        if let Some(node) = self.host_cpu_node(w) {
            let cost = self.node(node).map_or(0.0, node_cost);
            let reason = format!(
                "no CPU node has {} mCPU and {} MiB free; placed on the spare host CPU of {} (a {} GPU node), using none of its GPUs",
                w.cpu_millis,
                w.memory_mb,
                self.name(node),
                dollars(cost)
            );
            self.plan.place(index, node, Vec::new(), reason)?;
            self.refresh_room(node);
            self.placed += 1;
            return Ok(());
        }
        let that_run = if w.container { " that runs containers" } else { "" };
        let reason = format!(
            "no CPU node{that_run} has {} mCPU and {} MiB of memory free, nor any GPU node beyond the host CPU and memory kept for its free GPUs",
            w.cpu_millis, w.memory_mb
        );
        Ok(self.plan.keep_pending(index, reason)?)
    }

    fn place_on_cpu(&mut self, index: u32, node: u32, reason: String) -> Result<(), Failure> {
        self.plan.place(index, node, Vec::new(), reason)?;
        self.refresh_room(node);
        self.placed += 1;
        self.on_cpu_nodes += 1;
        Ok(())
    }

    /// CPU-capable work that found no GPUs runs on a CPU node if one has room (CPU-first inference
    /// already looked); the rest waits with `why`.
    fn cpu_fallback_or_wait(&mut self, index: u32, w: &Workload<'s>, why: String) -> Result<(), Failure> {
        if w.cpu_capable
            && !cpu_first(w)
            && let Some(node) = self.cpu_node(w)
        {
            let cost = self.node(node).map_or(0.0, node_cost);
            let reason = format!("{why}; runs on CPU node {} at {} instead", self.name(node), dollars(cost));
            return self.place_on_cpu(index, node, reason);
        }
        Ok(self.plan.keep_pending(index, why)?)
    }

    /// The cheapest CPU node with room for `w`; among equally cheap ones, the least CPU left over.
    fn cpu_node(&self, w: &Workload<'_>) -> Option<u32> {
        self.cpu_room.best(w.cpu_millis, w.memory_mb, |node| can_run(self.snapshot, w, node))
    }

    /// The cheapest GPU node whose spare host CPU and memory (see [`spare_host`]) have room
    /// for CPU-only `w`.
    fn host_cpu_node(&self, w: &Workload<'_>) -> Option<u32> {
        self.host_room.best(w.cpu_millis, w.memory_mb, |node| can_run(self.snapshot, w, node))
    }

    /// The cheapest fit for `w`: the cheapest cost tier with a node that fits, and in it the fewest
    /// free GPUs left over, then the least GPU memory left over, then the node order.
    fn cheapest_fit(&mut self, w: &Workload<'s>, need: &GpuNeed<'s>) -> Option<Fit> {
        if need.count == 0 {
            return None;
        }
        let mut memo = std::mem::take(&mut self.memo);
        let id = memo.id(w);
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut best: Option<(u64, u32)> = None;
        let mut seen = memo.need(id);
        'tiers: for tier in &self.tiers {
            for group in tier.at_least(need.count) {
                for &node in group {
                    if !can_run(self.snapshot, w, node) {
                        continue;
                    }
                    // Free GPUs only dwindle in a cycle: a node that did not fit never will.
                    let waste = seen.waste(node, tier.version(node), || self.fitting(node, need, &mut scratch));
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
                    break 'tiers;
                }
            }
        }
        self.memo = memo;
        let fit = best.and_then(|(_, node)| {
            self.fitting(node, need, &mut scratch)?;
            let mut gpus: Vec<u32> = scratch.iter().map(|&(_, g)| g).collect();
            gpus.sort_unstable();
            Some(Fit { node, gpus })
        });
        self.scratch = scratch;
        fit
    }

    /// Leaves in `chosen` the free GPUs of `node` that `need` would take (the tightest free memory
    /// first) as (free MiB, GPU), and returns the memory they leave over; `None` if too few fit.
    fn fitting(&self, node: u32, need: &GpuNeed<'_>, chosen: &mut Vec<(u32, u32)>) -> Option<u64> {
        chosen.clear();
        if self.plan.free_gpu_count(node) < need.count {
            return None;
        }
        chosen.extend(
            self.plan.free_gpus(node).filter(|(_, gpu)| need.fits(gpu)).map(|(g, gpu)| (gpu.memory_free_mb(), g)),
        );
        if chosen.len() < need.count as usize {
            return None;
        }
        chosen.sort_unstable();
        chosen.truncate(need.count as usize);
        Some(chosen.iter().map(|(free, _)| u64::from(free.saturating_sub(need.memory_mb))).sum())
    }

    /// `node` went from `before` to `after` free GPUs.
    fn moved(&mut self, node: u32, before: u32, after: u32) {
        if let Some(tier) = self.tier_of.get(node as usize).and_then(|&t| self.tiers.get_mut(t)) {
            tier.moved(node, before, after);
        }
    }

    /// Why `w`'s shape finds no GPUs now: never on this fleet, short of host CPU, or how close the
    /// best node comes.
    fn no_gpu_reason(&self, w: &Workload<'_>, need: &GpuNeed<'_>) -> String {
        let snapshot = self.snapshot;
        let fits_idle = snapshot.ready_nodes().any(|(node, n)| {
            n.can_run(w)
                && n.cpu_millis >= w.cpu_millis
                && n.memory_mb >= w.memory_mb
                && snapshot
                    .node_gpus(node)
                    .filter(|(_, g)| need.allows_model(g.model) && g.memory_mb >= need.memory_mb)
                    .count() as u32
                    >= need.count
        });
        // A container workload looks only at the nodes with a container engine, and says so.
        let no_node = if w.container { "no ready node that runs containers" } else { "no ready node" };
        if !fits_idle {
            return format!("{no_node} has {}, even with all its GPUs free", need.describe(""));
        }
        let fitting = |node: u32| self.plan.free_gpus(node).filter(|(_, g)| need.fits(g)).count() as u32;
        let nodes = || {
            self.tiers.iter().flat_map(|t| t.at_least(1)).flatten().copied().filter(|&node| can_run(snapshot, w, node))
        };
        if nodes().any(|node| fitting(node) >= need.count) {
            let nodes = if w.container { "the ready nodes that run containers" } else { "the ready nodes" };
            return format!(
                "{nodes} with {} lack {} mCPU and {} MiB of host memory free",
                need.describe("free"),
                w.cpu_millis,
                w.memory_mb
            );
        }
        let most = nodes().map(|node| (fitting(node), node)).max_by_key(|&(count, node)| (count, Reverse(node)));
        let most = match most {
            Some((count, node)) if count > 0 => format!("; the most on one node is {count} ({})", self.name(node)),
            _ => "; every GPU that fits it is taken".to_owned(),
        };
        format!("{no_node} has {}{most}", need.describe("free"))
    }
}

/// A GPU node's free host CPU and memory beyond a per-GPU share of its totals kept for each of its
/// free GPUs, so CPU-only work never leaves GPUs that could be placed without the host resources to
/// run them.
fn spare_host(snapshot: &Snapshot<'_>, plan: &Plan<'_, '_>, node: u32) -> (u32, u32) {
    let Some(n) = snapshot.node(node) else { return (0, 0) };
    let free = u64::from(plan.free_gpu_count(node));
    let gpus = u64::from(n.gpu_count.max(1));
    let keep = |total: u32| (u64::from(total) * free / gpus).min(u64::from(u32::MAX)) as u32;
    (plan.cpu_free(node).saturating_sub(keep(n.cpu_millis)), plan.memory_free(node).saturating_sub(keep(n.memory_mb)))
}

#[cfg(test)]
mod tests;
