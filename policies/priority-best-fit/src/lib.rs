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

        let mut order = snapshot.pending_by_priority();
        order.sort_by_key(|(index, w)| {
            let realtime_first = settings.realtime_first && w.class == WorkloadClass::RealtimeInference;
            // Stable sort: within equal keys, the SDK's order (priority, submission, index) stays.
            (!realtime_first, std::cmp::Reverse(snapshot.effective_priority(w)), w.submitted_ms, *index)
        });

        let mut cycle = Cycle::new(snapshot);
        let mut failed_shapes: BTreeMap<Shape<'s>, String> = BTreeMap::new();
        let mut reserve_reason: Option<(u32, String)> = None;
        let mut budget_reason: Option<String> = None;

        for (index, workload) in order {
            if cycle.placed >= max_placements {
                let reason = budget_reason
                    .get_or_insert_with(|| format!("placement budget of this cycle ({max_placements}) is used up"));
                cycle.plan.keep_pending(index, reason.clone())?;
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

/// One cycle's state: the plan, and the ready nodes indexed by what they have free, so each
/// workload looks at the tightest candidates first instead of at the whole fleet.
struct Cycle<'p, 's> {
    snapshot: &'p Snapshot<'s>,
    plan: Plan<'p, 's>,
    gpus: FreeGpuIndex,
    cpus: FreeCpuIndex,
    placed: u32,
    /// Per node, bumped when a placement takes its GPUs.
    versions: Vec<u32>,
    /// Per GPU need, per node: the memory a fit would leave over (or `None`: it does not fit), as
    /// of a node version. Nodes that did not change are not looked at again, which keeps a cycle
    /// of 10,000 workloads on 1,000 nodes in milliseconds. `memo_ids` numbers the needs.
    memo: Vec<NeedMemo>,
    memo_ids: BTreeMap<MemoKey<'s>, usize>,
    /// The fleet's GPU models, trimmed, one entry per model ignoring ASCII case; a candidate
    /// names its model by position here, so a need checks each model once, not each GPU.
    models: Vec<&'s str>,
    /// Every node's GPUs, tightest first (least free memory, then device order), node after node;
    /// `order_at[node]` is where a node's run starts. Sorted once per cycle, since a GPU's free
    /// memory does not change within one; placements only take GPUs out, which [`fit`] skips.
    order: Vec<Candidate>,
    order_at: Vec<usize>,
    /// The fitting GPUs of the node being looked at, reused from node to node.
    scratch: Vec<Candidate>,
    /// Some ready node has a container engine (ABI 1.4): container work can run somewhere.
    any_engine: bool,
}

/// Why a container workload waits when no ready node has a container engine.
const NO_ENGINE: &str = "no ready node runs containers";

/// (GPU count, MiB per GPU, allowed models as the workload wrote them).
type MemoKey<'s> = (u32, u32, &'s str);

/// One GPU need's view of the fleet.
struct NeedMemo {
    /// Per model of [`Cycle::models`], whether the need allows it.
    allowed: Vec<bool>,
    /// Per node.
    nodes: Vec<Memo>,
}

#[derive(Clone, Copy, Default)]
struct Memo {
    /// 0: never looked at (versions start at 1).
    version: u32,
    waste: Option<u64>,
}

impl<'p, 's> Cycle<'p, 's> {
    fn new(snapshot: &'p Snapshot<'s>) -> Self {
        let plan = Plan::new(snapshot);
        let gpus = FreeGpuIndex::new(snapshot, &plan);
        let cpus = FreeCpuIndex::new(snapshot, &plan);
        let versions = vec![1; snapshot.nodes.len()];
        let mut models: Vec<&'s str> = Vec::new();
        let mut model_of = |model: &'s str| {
            let model = model.trim();
            let at = models.iter().position(|m| m.eq_ignore_ascii_case(model)).unwrap_or_else(|| {
                models.push(model);
                models.len() - 1
            });
            at as u32
        };
        let mut order = Vec::with_capacity(snapshot.gpus.len());
        let mut order_at = Vec::with_capacity(snapshot.nodes.len() + 1);
        for (node, _) in snapshot.nodes_indexed() {
            let start = order.len();
            order_at.push(start);
            order.extend(snapshot.node_gpus(node).map(|(gpu, g)| Candidate {
                memory_free_mb: g.memory_free_mb(),
                device_index: g.device_index,
                gpu,
                nvlink_group: g.nvlink_group,
                model: model_of(g.model),
            }));
            // GPU indexes are distinct, so the order is total.
            order[start..].sort_unstable_by_key(|c| (c.memory_free_mb, c.device_index, c.gpu));
        }
        order_at.push(order.len());
        Cycle {
            snapshot,
            plan,
            gpus,
            cpus,
            placed: 0,
            versions,
            memo: Vec::new(),
            memo_ids: BTreeMap::new(),
            models,
            order,
            order_at,
            scratch: Vec::new(),
            any_engine: snapshot.ready_nodes().any(|(_, n)| n.containers),
        }
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
        let host_before = (self.plan.cpu_free(fit.node), self.plan.memory_free(fit.node));
        self.plan.place(index, fit.node, fit.gpus, reason)?;
        self.placed += 1;
        self.gpus.moved(fit.node, free_before, self.plan.free_gpu_count(fit.node));
        let after = (self.plan.cpu_free(fit.node), self.plan.memory_free(fit.node));
        self.cpus.moved(fit.node, true, host_before, after);
        if let Some(version) = self.versions.get_mut(fit.node as usize) {
            *version += 1;
        }
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
        let host_before = (self.plan.cpu_free(node), self.plan.memory_free(node));
        self.plan.place(index, node, vec![gpu], reason)?;
        self.placed += 1;
        self.gpus.moved(node, free_before, self.plan.free_gpu_count(node));
        let after = (self.plan.cpu_free(node), self.plan.memory_free(node));
        self.cpus.moved(node, true, host_before, after);
        if let Some(version) = self.versions.get_mut(node as usize) {
            *version += 1;
        }
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
        let has_gpus = self.snapshot.node(node).is_some_and(Node::has_gpus);
        self.cpus.moved(node, has_gpus, before, (self.plan.cpu_free(node), self.plan.memory_free(node)));
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
        let key = (need.count, need.memory_mb, workload.gpu_models);
        let id = match self.memo_ids.get(&key) {
            Some(&id) => id,
            None => {
                let allowed = self.models.iter().map(|m| need.allows_model(m)).collect();
                self.memo.push(NeedMemo { allowed, nodes: vec![Memo::default(); self.snapshot.nodes.len()] });
                self.memo_ids.insert(key, self.memo.len() - 1);
                self.memo.len() - 1
            }
        };
        let snapshot = self.snapshot;
        let Cycle { plan, gpus, versions, memo, order, order_at, scratch, .. } = self;
        let gpus_of = |node: u32| {
            let node = node as usize;
            order_at.get(node).zip(order_at.get(node + 1)).and_then(|(&a, &b)| order.get(a..b)).unwrap_or(&[])
        };
        let NeedMemo { allowed, nodes: memo } = &mut memo[id];
        let mut best: Option<(u64, u32)> = None;
        // Groups are visited tightest first; the first group with a fitting node holds the best
        // fit, and within it the least memory left over wins (the first such node, as groups are
        // in node order).
        for nodes in gpus.at_least(need.count) {
            for &node in nodes {
                if plan.cpu_free(node) < workload.cpu_millis || plan.memory_free(node) < workload.memory_mb {
                    continue;
                }
                if workload.container && !snapshot.node(node).is_some_and(|n| n.can_run(workload)) {
                    continue;
                }
                let version = versions.get(node as usize).copied().unwrap_or(0);
                let waste = match memo.get_mut(node as usize) {
                    Some(seen) if seen.version == version => seen.waste,
                    Some(seen) => {
                        let waste = fit(plan, gpus_of(node), need, allowed, prefer_nvlink, scratch).map(|(_, w)| w);
                        *seen = Memo { version, waste };
                        waste
                    }
                    None => None,
                };
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
        let (domain, _) = fit(plan, gpus_of(node), need, allowed, prefer_nvlink, scratch)?;
        let chosen = || scratch.iter().filter(|c| domain.is_none_or(|d| c.nvlink_group == Some(d)));
        let gpus: Vec<u32> = chosen().take(need.count as usize).map(|c| c.gpu).collect();
        let first_group = scratch.first().and_then(|c| c.nvlink_group);
        let one_nvlink_domain = domain.is_some()
            || (first_group.is_some() && chosen().take(need.count as usize).all(|c| c.nvlink_group == first_group));
        let model = gpus.first().and_then(|&i| self.snapshot.gpu(i)).map_or("", |g| g.model);
        Some(GpuFit { node, gpus, model, one_nvlink_domain })
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

/// Ready nodes grouped by how many GPUs they have free in the plan, each group in node order.
struct FreeGpuIndex {
    /// `by_free[f]`: the ready nodes with exactly `f` free GPUs, ascending.
    by_free: Vec<Vec<u32>>,
}

impl FreeGpuIndex {
    fn new(snapshot: &Snapshot<'_>, plan: &Plan<'_, '_>) -> Self {
        let mut by_free: Vec<Vec<u32>> = Vec::new();
        for (node, _) in snapshot.ready_nodes() {
            let free = plan.free_gpu_count(node) as usize;
            if by_free.len() <= free {
                by_free.resize_with(free + 1, Vec::new);
            }
            by_free[free].push(node);
        }
        FreeGpuIndex { by_free }
    }

    /// `node` went from `before` to `after` free GPUs.
    fn moved(&mut self, node: u32, before: u32, after: u32) {
        if let Some(group) = self.by_free.get_mut(before as usize)
            && let Ok(at) = group.binary_search(&node)
        {
            group.remove(at);
        }
        if let Some(group) = self.by_free.get_mut(after as usize)
            && let Err(at) = group.binary_search(&node)
        {
            group.insert(at, node);
        }
    }

    /// The groups of nodes with at least `count` free GPUs, tightest first.
    fn at_least(&self, count: u32) -> impl Iterator<Item = &[u32]> {
        self.by_free.iter().skip(count as usize).map(Vec::as_slice)
    }
}

/// Ready nodes in CPU best-fit order: CPU-only nodes first (GPU nodes keep their CPU for GPU work),
/// then the least free CPU, then the least free memory, then the node index. The first node in this
/// order with room is the one with the least left over.
struct FreeCpuIndex {
    /// `(has GPUs, free mCPU, free MiB, node)`, sorted.
    nodes: Vec<(bool, u32, u32, u32)>,
}

impl FreeCpuIndex {
    fn new(snapshot: &Snapshot<'_>, plan: &Plan<'_, '_>) -> Self {
        let mut nodes: Vec<_> = snapshot
            .ready_nodes()
            .map(|(n, node)| (node.has_gpus(), plan.cpu_free(n), plan.memory_free(n), n))
            .collect();
        nodes.sort_unstable();
        FreeCpuIndex { nodes }
    }

    /// The node with room for `cpu` and `memory` that `can_run` the workload, the least left over.
    fn best(&self, cpu: u32, memory: u32, can_run: impl Fn(u32) -> bool) -> Option<u32> {
        [false, true].into_iter().find_map(|has_gpus| {
            let start = self.nodes.partition_point(|&(g, c, _, _)| (g, c) < (has_gpus, cpu));
            self.nodes
                .get(start..)?
                .iter()
                .take_while(|&&(g, ..)| g == has_gpus)
                .find(|&&(_, _, m, node)| m >= memory && can_run(node))
                .map(|&(.., node)| node)
        })
    }

    /// `node` (with GPUs or not) had `before` free (CPU, memory) and has `after` now.
    fn moved(&mut self, node: u32, has_gpus: bool, before: (u32, u32), after: (u32, u32)) {
        let Ok(at) = self.nodes.binary_search(&(has_gpus, before.0, before.1, node)) else { return };
        let entry = (has_gpus, after.0, after.1, node);
        let to = self.nodes.partition_point(|e| *e < entry);
        // Free CPU and memory only go down in a cycle, so the entry moves towards the front.
        if to <= at {
            self.nodes[to..=at].rotate_right(1);
            self.nodes[to] = entry;
        } else {
            self.nodes.remove(at);
            self.nodes.insert(to - 1, entry);
        }
    }
}

/// A free GPU that fits the need, as [`fit`] sorts them.
#[derive(Clone, Copy)]
struct Candidate {
    memory_free_mb: u32,
    device_index: u32,
    gpu: u32,
    nvlink_group: Option<u32>,
    /// Position in [`Cycle::models`].
    model: u32,
}

/// Which GPUs `need` would take from `candidates` (one node's GPUs, tightest first: least free
/// memory, then device order) whose model `allowed` says the need allows, and the memory they would leave over; `None` if too few of its free
/// GPUs fit. Fills `scratch` with the free GPUs that fit, in that order. The GPUs taken are the
/// first `need.count` of them, or with `prefer_nvlink` and more than one GPU, the first
/// `need.count` of one NVLink domain when a domain has enough: the domain with the fewest fitting
/// GPUs that still has enough (keeping big domains whole), then the lowest domain number. Returns
/// that domain (`None`: the tightest GPUs, whatever their domains) and the memory left over.
///
/// No allocation and no sorting: this runs for every node a workload looks at whose GPUs changed.
fn fit(
    plan: &Plan<'_, '_>,
    candidates: &[Candidate],
    need: &GpuNeed<'_>,
    allowed: &[bool],
    prefer_nvlink: bool,
    scratch: &mut Vec<Candidate>,
) -> Option<(Option<u32>, u64)> {
    let count = need.count as usize;
    scratch.clear();
    scratch.extend(candidates.iter().filter(|c| {
        c.memory_free_mb >= need.memory_mb
            && plan.is_gpu_free(c.gpu)
            && allowed.get(c.model as usize).copied().unwrap_or(false)
    }));
    if scratch.len() < count {
        return None;
    }
    let mut domain = None;
    if prefer_nvlink && count > 1 {
        // (fitting GPUs, domain) of the best domain with enough, each domain counted once.
        let mut best: Option<(usize, u32)> = None;
        for (at, candidate) in scratch.iter().enumerate() {
            let Some(group) = candidate.nvlink_group else { continue };
            if scratch[..at].iter().any(|c| c.nvlink_group == Some(group)) {
                continue;
            }
            let size = scratch[at..].iter().filter(|c| c.nvlink_group == Some(group)).count();
            if size >= count && best.is_none_or(|b| (size, group) < b) {
                best = Some((size, group));
            }
        }
        domain = best.map(|(_, group)| group);
    }
    let waste = scratch
        .iter()
        .filter(|c| domain.is_none_or(|d| c.nvlink_group == Some(d)))
        .take(count)
        .map(|c| u64::from(c.memory_free_mb - need.memory_mb))
        .sum();
    Some((domain, waste))
}

fn no_cpu_reason(workload: &Workload<'_>) -> String {
    let no_node = if workload.container { "no ready node that runs containers" } else { "no ready node" };
    format!("{no_node} has {} mCPU and {} MiB free", workload.cpu_millis, workload.memory_mb)
}

/// Appends `n` in decimal. The reasons written for every placement are built with this and
/// `push_str` rather than `format!`, whose dynamic dispatch costs, in Wasm, as much as the rest
/// of a placement.
fn push_number(text: &mut String, mut n: u32) {
    let mut digits = [0u8; 10];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &digit in &digits[at..] {
        text.push(char::from(digit));
    }
}

#[cfg(test)]
mod tests;
