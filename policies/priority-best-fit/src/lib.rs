//! Priority, then best fit: the example Airtime policy, built with the SDK.
//!
//! Pending workloads are taken highest priority first (then earliest submitted). With
//! `realtime_first` in the platform settings, real-time inference goes before everything else, and
//! the settings' night bonus (non-zero only at night; the host resolves the window) raises training
//! and fine-tuning.
//!
//! Each GPU workload goes to the ready node whose free GPUs fit it (free memory now ≥ what it needs
//! on each GPU, an allowed model, all its GPUs on that one node), which has the host CPU and memory
//! it asks for, and which has the **fewest free GPUs left over** afterwards, then the least GPU
//! memory left over on the chosen GPUs: best fit, so big gang jobs still find whole nodes later. On
//! a node, the GPUs with the least free memory that still fit are taken, from a single NVLink domain
//! when one has enough.
//!
//! A workload with no GPUs goes to the ready node with enough free CPU and memory, preferring
//! CPU-only nodes and then the tightest fit. A CPU-capable GPU workload that finds no GPU runs on
//! CPU instead. The GPUs kept in the settings' burst reserve are left to real-time inference and to
//! preemptible work (which a burst can reclaim). A container workload only goes to a node with a
//! container engine (ABI 1.4); with none ready it waits ("no ready node runs containers").
//!
//! What cannot be placed is kept pending with the reason ("no ready node has 4 free GPUs with
//! ≥ 40960 MiB; the most on one node is 2 (gpu-node-7)"). The plan guarantees no GPU is placed
//! twice in a cycle. Running workloads are left alone: this policy never preempts.
//!
//! Params (JSON, all optional):
//! - `max_placements` (integer): place at most this many workloads per cycle; the rest wait with
//!   "placement budget of this cycle (N) is used up".
//! - `prefer_nvlink` (bool, default true): keep multi-GPU workloads inside one NVLink domain when a
//!   node allows it.

use std::collections::BTreeMap;

use airtime_policy_sdk::actions::{Fit, Holdings, Ranking, decide_gang, queue};
use airtime_policy_sdk::fit::{Candidate, FitMemo, NodeRoom, NodesByFree, RoomIndex, TightestGpus, push_number};
use airtime_policy_sdk::gang::Gangs;
use airtime_policy_sdk::prelude::*;

/// The policy. Stateless: everything it needs is in the snapshot.
#[derive(Debug, Clone, Copy, Default)]
pub struct PriorityBestFit;

airtime_policy_sdk::export_policy!(PriorityBestFit);

/// What a GPU workload asks for: GPU count, MiB per GPU, models, host mCPU and MiB, a container
/// engine. Workloads of one shape that fail share the reason, since a cycle only ever takes
/// resources and a shape that failed cannot fit later in the same cycle.
type Shape<'a> = (u32, u32, &'a str, u32, u32, bool);

/// The parameters, read the one way both evaluation and activation's check use:
/// `max_placements` (per cycle, default unlimited) and `prefer_nvlink` (default true).
fn read_params(params: &airtime_policy_sdk::params::Params<'_>) -> Result<(u32, bool), Failure> {
    Ok((params.get_or("max_placements", u32::MAX)?, params.get_or("prefer_nvlink", true)?))
}

impl Policy for PriorityBestFit {
    fn validate_params(&self, params: &airtime_policy_sdk::params::Params<'_>) -> Result<(), Failure> {
        read_params(params).map(|_| ())
    }

    fn evaluate<'s>(&self, snapshot: &Snapshot<'s>, ctx: &mut Context<'s>) -> Result<Vec<Decision<'s>>, Failure> {
        let (max_placements, prefer_nvlink) = read_params(ctx.params())?;
        let settings = snapshot.settings_or_default();

        // The SDK's ordering action: real-time inference first when the settings say so, then
        // effective priority, then submission (guarantees are not this policy's concern).
        let ranking = Ranking { realtime_first: settings.realtime_first, guaranteed_first: false };
        let order = queue(snapshot, &Holdings::of(snapshot), ranking);

        let mut cycle = Cycle::new(snapshot);
        let mut failed_shapes: BTreeMap<Shape<'s>, String> = BTreeMap::new();
        let mut reserve_reason: Option<(u32, String)> = None;
        let mut budget_reason: Option<String> = None;
        let mut gangs: Option<Gangs<'s>> = None;

        for (index, workload) in order {
            if cycle.placed >= max_placements {
                let reason = budget_reason
                    .get_or_insert_with(|| format!("placement budget of this cycle ({max_placements}) is used up"));
                cycle.plan.keep_pending(index, reason.clone())?;
                continue;
            }
            if workload.in_gang() {
                // A gang across nodes: every member by best fit, each on a node of its own, or all wait.
                let gangs = gangs.get_or_insert_with(|| Gangs::of(snapshot));
                let free_before = cycle.plan.free_gpu_total();
                decide_gang(&mut cycle.plan, gangs, workload, Fit::BestFit)?;
                if cycle.plan.free_gpu_total() != free_before {
                    cycle.reindex();
                }
                continue;
            }
            if workload.container && !cycle.any_engine {
                cycle.plan.keep_pending(index, NO_ENGINE)?;
                continue;
            }
            if !workload.needs_gpu() {
                if !cycle.place_on_cpu(index, workload, None)? {
                    cycle.plan.keep_pending(index, no_cpu_reason(workload))?;
                }
                continue;
            }

            let reserve = settings.burst_reserve_gpus;
            let free = cycle.plan.free_gpu_total();
            let may_use_reserve = workload.class == WorkloadClass::RealtimeInference || workload.preemptible;
            if reserve > 0 && !may_use_reserve && free.saturating_sub(workload.gpu_count) < reserve {
                // The reason changes only with the number of free GPUs: built once per number.
                let reason = match &reserve_reason {
                    Some((at, reason)) if *at == free => reason.clone(),
                    _ => {
                        let reason = format!(
                            "{free} GPUs are free and {reserve} are held back for real-time inference (burst reserve)"
                        );
                        reserve_reason = Some((free, reason.clone()));
                        reason
                    }
                };
                cycle.place_on_cpu_or_wait(index, workload, reason)?;
                continue;
            }

            let shape = (
                workload.gpu_count,
                workload.gpu_memory_mb,
                workload.gpu_models,
                workload.cpu_millis,
                workload.memory_mb,
                workload.container,
            );
            if let Some(reason) = failed_shapes.get(&shape) {
                cycle.place_on_cpu_or_wait(index, workload, reason.clone())?;
                continue;
            }
            // A share of one GPU: the shareable GPU it fills tightest (best fit on thousandths;
            // `best_fit_share` skips the nodes that cannot run it).
            if workload.is_share()
                && let Some((node, gpu)) = cycle.plan.best_fit_share(index, snapshot.ready_nodes().map(|(n, _)| n))
            {
                cycle.place_share(index, workload, node, gpu)?;
                continue;
            }
            let need = workload.gpu_need();
            match cycle.best_gpu_fit(workload, &need, prefer_nvlink) {
                Some(fit) => cycle.place_on_gpus(index, &need, fit)?,
                None => {
                    let reason = cycle.no_gpu_reason(workload, &need);
                    failed_shapes.insert(shape, reason.clone());
                    cycle.place_on_cpu_or_wait(index, workload, reason)?;
                }
            }
        }

        let (placed, free_left) = (cycle.placed, cycle.plan.free_gpu_total());
        let decisions = cycle.plan.into_decisions();
        ctx.info(format_args!("placed {placed} of {} pending workloads; {free_left} GPUs left free", decisions.len()));
        Ok(decisions)
    }
}

/// One cycle's state: the plan, and the ready nodes indexed by what they have free (the SDK's
/// placement toolkit, `airtime_policy_sdk::fit`), so each workload looks at the tightest candidates
/// first instead of at the whole fleet.
struct Cycle<'p, 's> {
    snapshot: &'p Snapshot<'s>,
    plan: Plan<'p, 's>,
    /// Ready nodes by free GPUs, with a version per node for the memo.
    gpus: NodesByFree,
    /// Ready nodes in CPU best-fit order: CPU-only nodes first (GPU nodes keep their CPU for GPU
    /// work), then the least free CPU, then the least free memory, then the node index.
    cpus: RoomIndex,
    placed: u32,
    /// Per GPU need, per node: the memory a fit would leave over, as of the node's version. Nodes
    /// that did not change are not looked at again, which keeps a cycle of 10,000 workloads on
    /// 1,000 nodes in milliseconds.
    memo: FitMemo<'s>,
    /// Per need of the memo, which GPU kinds (model, MIG profile) it may run on.
    allowed: Vec<Vec<bool>>,
    /// Every node's GPUs, tightest first, sorted once per cycle.
    tightest: TightestGpus<'s>,
    /// The fitting GPUs of the node being looked at, reused from node to node.
    scratch: Vec<Candidate>,
    /// Some ready node has a container engine (ABI 1.4): container work can run somewhere.
    any_engine: bool,
}

/// Why a container workload waits when no ready node has a container engine.
const NO_ENGINE: &str = "no ready node runs containers";

/// A node's entry in the CPU index: CPU-only nodes in the first tier, ties on free memory.
fn cpu_room(plan: &Plan<'_, '_>, node: u32, has_gpus: bool) -> NodeRoom {
    let (cpu, memory) = (plan.cpu_free(node), plan.memory_free(node));
    NodeRoom { node, tier: u64::from(has_gpus), cpu, memory, tie: u64::from(memory) }
}

impl<'p, 's> Cycle<'p, 's> {
    fn new(snapshot: &'p Snapshot<'s>) -> Self {
        let plan = Plan::new(snapshot);
        let gpus = NodesByFree::of_ready_nodes(snapshot, &plan);
        let rooms = snapshot.ready_nodes().map(|(n, node)| cpu_room(&plan, n, node.has_gpus()));
        let cpus = RoomIndex::new(snapshot.nodes.len(), rooms);
        Cycle {
            snapshot,
            plan,
            gpus,
            cpus,
            placed: 0,
            memo: FitMemo::new(snapshot.nodes.len()),
            allowed: Vec::new(),
            tightest: TightestGpus::new(snapshot),
            scratch: Vec::new(),
            any_engine: snapshot.ready_nodes().any(|(_, n)| n.containers),
        }
    }

    /// Builds the indexes again from the plan, after placements made outside them (a gang's).
    fn reindex(&mut self) {
        let (snapshot, plan) = (self.snapshot, &self.plan);
        self.gpus = NodesByFree::of_ready_nodes(snapshot, plan);
        let rooms = snapshot.ready_nodes().map(|(n, node)| cpu_room(plan, n, node.has_gpus()));
        self.cpus = RoomIndex::new(snapshot.nodes.len(), rooms);
        self.memo = FitMemo::new(snapshot.nodes.len());
        self.tightest = TightestGpus::new(snapshot);
    }

    /// Files `node` in the CPU index again after a placement took its CPU and memory.
    fn refresh_cpu(&mut self, node: u32) {
        let has_gpus = self.snapshot.node(node).is_some_and(Node::has_gpus);
        let room = cpu_room(&self.plan, node, has_gpus);
        self.cpus.set(node, room.cpu, room.memory, room.tie);
    }

    fn place_on_gpus(&mut self, index: u32, need: &GpuNeed<'_>, mut fit: GpuFit<'s>) -> Result<(), Failure> {
        fit.gpus.sort_unstable();
        let node = self.snapshot.node(fit.node).map_or("?", |n| n.name);
        let free_before = self.plan.free_gpu_count(fit.node);
        let left = free_before - need.count;
        let nvlink = if fit.one_nvlink_domain && need.count > 1 { ", one NVLink domain" } else { "" };
        // "best fit on n7: GPUs 0,1 (H100, one NVLink domain), 6 GPUs left free there"
        let mut reason = String::with_capacity(96);
        reason.push_str("best fit on ");
        reason.push_str(node);
        reason.push_str(if fit.gpus.len() == 1 { ": GPU " } else { ": GPUs " });
        for (n, gpu) in fit.gpus.iter().filter_map(|&i| self.snapshot.gpu(i)).enumerate() {
            if n > 0 {
                reason.push(',');
            }
            push_number(&mut reason, gpu.device_index);
        }
        reason.push_str(" (");
        reason.push_str(fit.model);
        reason.push_str(nvlink);
        reason.push_str("), ");
        push_number(&mut reason, left);
        reason.push_str(if left == 1 { " GPU left free there" } else { " GPUs left free there" });
        self.plan.place(index, fit.node, fit.gpus, reason)?;
        self.placed += 1;
        self.gpus.moved(fit.node, free_before, self.plan.free_gpu_count(fit.node));
        self.refresh_cpu(fit.node);
        Ok(())
    }

    fn place_share(&mut self, index: u32, workload: &Workload<'_>, node: u32, gpu: u32) -> Result<(), Failure> {
        let name = self.snapshot.node(node).map_or("?", |n| n.name);
        let device = self.snapshot.gpu(gpu).map_or(0, |g| g.device_index);
        let left = self.plan.free_milli(gpu).saturating_sub(workload.gpu_milli);
        let reason = format!(
            "best fit on {name}: shares GPU {device}, {}/1000 and {} MiB, {left}/1000 left free on it",
            workload.gpu_milli, workload.gpu_memory_mb
        );
        let free_before = self.plan.free_gpu_count(node);
        self.plan.place(index, node, vec![gpu], reason)?;
        self.placed += 1;
        self.gpus.moved(node, free_before, self.plan.free_gpu_count(node));
        self.refresh_cpu(node);
        Ok(())
    }

    /// Places `workload` on CPU on the best node for it, if one has room; `gpu_reason` says why
    /// not on GPUs. Returns whether it was placed.
    fn place_on_cpu(&mut self, index: u32, workload: &Workload<'_>, gpu_reason: Option<&str>) -> Result<bool, Failure> {
        let snapshot = self.snapshot;
        let can_run = |node: u32| !workload.container || snapshot.node(node).is_some_and(|n| n.can_run(workload));
        let Some(node) = self.cpus.best(workload.cpu_millis, workload.memory_mb, can_run) else { return Ok(false) };
        let name = self.snapshot.node(node).map_or("?", |n| n.name);
        let before = (self.plan.cpu_free(node), self.plan.memory_free(node));
        // "{why}; runs on CPU on n7: 4000 mCPU and 16384 MiB, 124000 mCPU left free there", or
        // "best fit on CPU on …" without a GPU reason.
        let mut reason = String::with_capacity(gpu_reason.map_or(0, str::len) + 96);
        match gpu_reason {
            Some(why) => {
                reason.push_str(why);
                reason.push_str("; runs on CPU on ");
            }
            None => reason.push_str("best fit on CPU on "),
        }
        reason.push_str(name);
        reason.push_str(": ");
        push_number(&mut reason, workload.cpu_millis);
        reason.push_str(" mCPU and ");
        push_number(&mut reason, workload.memory_mb);
        reason.push_str(" MiB, ");
        push_number(&mut reason, before.0 - workload.cpu_millis);
        reason.push_str(" mCPU left free there");
        self.plan.place(index, node, Vec::new(), reason)?;
        self.placed += 1;
        self.refresh_cpu(node);
        Ok(true)
    }

    /// A CPU-capable workload runs on CPU with `gpu_reason` as the explanation; any other waits with it.
    fn place_on_cpu_or_wait(&mut self, index: u32, workload: &Workload<'_>, gpu_reason: String) -> Result<(), Failure> {
        if !workload.cpu_capable {
            return Ok(self.plan.keep_pending(index, gpu_reason)?);
        }
        if !self.place_on_cpu(index, workload, Some(&gpu_reason))? {
            self.plan.keep_pending(index, format!("{gpu_reason}; and on CPU: {}", no_cpu_reason(workload)))?;
        }
        Ok(())
    }

    /// The best node for `workload`: the fewest free GPUs left over on the node, then the least
    /// memory left over on the chosen GPUs, then the lowest node index. `None` when no ready node has
    /// enough free GPUs that fit and the host CPU and memory.
    fn best_gpu_fit(&mut self, workload: &Workload<'s>, need: &GpuNeed<'s>, prefer_nvlink: bool) -> Option<GpuFit<'s>> {
        let id = self.memo.id(workload);
        if id == self.allowed.len() {
            self.allowed.push(self.tightest.kinds_allowed(need));
        }
        let snapshot = self.snapshot;
        let Cycle { plan, gpus, memo, allowed, tightest, scratch, .. } = self;
        let allowed = allowed.get(id).map_or(&[][..], Vec::as_slice);
        let mut seen = memo.need(id);
        let mut best: Option<(u64, u32)> = None;
        // Groups are visited tightest first; the first group with a fitting node holds the best
        // fit, and within it the least memory left over wins (the first such node, as groups are
        // in node order).
        for nodes in gpus.at_least(need.count) {
            for &node in nodes {
                // Most nodes a need has seen once and not fitted: skipped with one load.
                if seen.never_fits(node) {
                    continue;
                }
                if plan.cpu_free(node) < workload.cpu_millis || plan.memory_free(node) < workload.memory_mb {
                    continue;
                }
                if workload.container && !snapshot.node(node).is_some_and(|n| n.can_run(workload)) {
                    continue;
                }
                let waste = seen.waste(node, gpus.version(node), || {
                    tightest.fit(plan, node, need, allowed, prefer_nvlink, scratch).map(|fit| fit.waste)
                });
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
        let (_, node) = best?;
        let taken = tightest.take(plan, node, need, allowed, prefer_nvlink, scratch)?;
        let model = taken.gpus.first().and_then(|&i| snapshot.gpu(i)).map_or("", |g| g.model);
        Some(GpuFit { node, gpus: taken.gpus, model, one_nvlink_domain: taken.one_nvlink_domain })
    }

    /// "no ready node has 4 free GPUs with ≥ 40960 MiB (H100); the most on one node is 2 (n7)", or,
    /// if the fleet could not fit it even with every GPU free, says so: it waits for the fleet to
    /// change.
    fn no_gpu_reason(&self, workload: &Workload<'_>, need: &GpuNeed<'_>) -> String {
        let snapshot = self.snapshot;
        let can_run = |n: u32| snapshot.node(n).is_some_and(|node| node.can_run(workload));
        let fits_when_idle = snapshot.ready_nodes().any(|(n, node)| {
            node.can_run(workload) && snapshot.node_gpus(n).filter(|(_, g)| need.fits(g)).count() >= need.count as usize
        });
        // A container workload looks only at the nodes with a container engine, and says so.
        let no_node = if workload.container { "no ready node that runs containers" } else { "no ready node" };
        let nodes = if workload.container { "the ready nodes that run containers" } else { "the ready nodes" };
        if !fits_when_idle {
            return format!("{no_node} has {}, even with all its GPUs free", need.describe(""));
        }
        let gpus_fit_now = self
            .gpus
            .at_least(need.count)
            .flatten()
            .filter(|&&n| can_run(n))
            .any(|&n| self.plan.free_gpus(n).filter(|(_, g)| need.fits(g)).count() >= need.count as usize);
        if gpus_fit_now {
            return format!(
                "{nodes} with {} lack {} mCPU and {} MiB of host memory free",
                need.describe("free"),
                workload.cpu_millis,
                workload.memory_mb
            );
        }
        let best = self
            .gpus
            .at_least(1)
            .flatten()
            .filter(|&&n| can_run(n))
            .map(|&n| (self.plan.free_gpus(n).filter(|(_, g)| need.fits(g)).count(), n))
            .max_by_key(|&(count, n)| (count, std::cmp::Reverse(n)));
        let most = match best {
            Some((count, node)) if count > 0 => {
                let name = snapshot.node(node).map_or("?", |n| n.name);
                format!("; the most on one node is {count} ({name})")
            }
            _ => "; all that fit are taken".to_owned(),
        };
        format!("{no_node} has {}{most}", need.describe("free"))
    }
}

/// Where a GPU workload goes.
struct GpuFit<'a> {
    node: u32,
    gpus: Vec<u32>,
    model: &'a str,
    one_nvlink_domain: bool,
}

fn no_cpu_reason(workload: &Workload<'_>) -> String {
    let no_node = if workload.container { "no ready node that runs containers" } else { "no ready node" };
    format!("{no_node} has {} mCPU and {} MiB free", workload.cpu_millis, workload.memory_mb)
}

#[cfg(test)]
mod tests;
