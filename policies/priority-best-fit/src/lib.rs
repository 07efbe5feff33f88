//! Priority, then best fit: the example Airtime policy, built with the SDK.
//!
//! Pending workloads are taken highest priority first (then earliest submitted). With
//! `realtime_first` in the platform settings, real-time inference goes before everything else, and
//! the settings' night bonus raises training and fine-tuning between 22:00 and 06:00 UTC.
//!
//! Each GPU workload goes to the ready node whose free GPUs fit it (free memory now ≥ what it needs
//! on each GPU, an allowed model, all its GPUs on that one node) and which has the **fewest free
//! GPUs left over** afterwards, then the least memory left over on the chosen GPUs: best fit, so
//! big gang jobs still find whole nodes later. On a node, the GPUs with the least free memory that
//! still fit are taken, from a single NVLink domain when one has enough.
//!
//! A workload with no GPUs goes to the ready node with enough free CPU and memory, preferring
//! CPU-only nodes and then the tightest fit. A CPU-capable GPU workload that finds no GPU runs on
//! CPU instead. The GPUs kept in the settings' burst reserve are left to real-time inference.
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

/// The GPU shape a workload asks for; workloads of one shape that fail share the reason, since a
/// cycle only ever takes resources and a shape that failed cannot fit later in the same cycle.
type Shape<'a> = (u32, u32, &'a str);

impl Policy for PriorityBestFit {
    fn evaluate<'s>(&self, snapshot: &Snapshot<'s>, ctx: &mut Context<'s>) -> Result<Vec<Decision<'s>>, Failure> {
        let max_placements: u32 = ctx.param_or("max_placements", u32::MAX)?;
        let prefer_nvlink: bool = ctx.param_or("prefer_nvlink", true)?;
        let settings = snapshot.settings_or_default();

        let mut order = snapshot.pending_by_priority();
        order.sort_by_key(|(index, w)| {
            let realtime_first = settings.realtime_first && w.class == WorkloadClass::RealtimeInference;
            // Stable sort: within equal keys, the SDK's order (priority, submission, index) stays.
            (!realtime_first, std::cmp::Reverse(snapshot.effective_priority(w)), w.submitted_ms, *index)
        });

        let mut plan = Plan::new(snapshot);
        let mut by_free = FreeGpuIndex::new(snapshot, &plan);
        let mut failed_shapes: BTreeMap<Shape<'s>, String> = BTreeMap::new();
        let mut placed = 0u32;

        for (index, workload) in order {
            if placed >= max_placements {
                plan.keep_pending(index, format!("placement budget of this cycle ({max_placements}) is used up"))?;
                continue;
            }
            if !workload.needs_gpu() {
                match best_cpu_node(snapshot, &plan, workload) {
                    Some(node) => {
                        let reason = cpu_reason(snapshot, &plan, workload, node, None);
                        plan.place(index, node, Vec::new(), reason)?;
                        placed += 1;
                    }
                    None => plan.keep_pending(index, no_cpu_reason(workload))?,
                }
                continue;
            }

            let need = workload.gpu_need();
            let reserve = settings.burst_reserve_gpus;
            if reserve > 0
                && workload.class != WorkloadClass::RealtimeInference
                && plan.free_gpu_total().saturating_sub(need.count) < reserve
            {
                let reason = format!(
                    "{} GPUs are free and {reserve} are held back for real-time inference (burst reserve)",
                    plan.free_gpu_total()
                );
                place_on_cpu_or_wait(snapshot, &mut plan, index, workload, reason, &mut placed)?;
                continue;
            }

            let shape = (need.count, need.memory_mb, workload.gpu_models);
            let found = if failed_shapes.contains_key(&shape) {
                None
            } else {
                best_gpu_fit(snapshot, &plan, &by_free, &need, prefer_nvlink)
            };
            match found {
                Some(mut fit) => {
                    fit.gpus.sort_unstable();
                    let node = snapshot.nodes.get(fit.node as usize).map_or("?", |n| n.name);
                    let left = plan.free_gpu_count(fit.node) - need.count;
                    let nvlink = if fit.one_nvlink_domain && need.count > 1 { ", one NVLink domain" } else { "" };
                    let reason = format!(
                        "best fit on {node}: {} ({}{nvlink}), {left} {} left free there",
                        gpu_list(snapshot, &fit.gpus),
                        fit.model,
                        if left == 1 { "GPU" } else { "GPUs" },
                    );
                    let free_before = plan.free_gpu_count(fit.node);
                    plan.place(index, fit.node, fit.gpus, reason)?;
                    placed += 1;
                    by_free.moved(fit.node, free_before, plan.free_gpu_count(fit.node));
                }
                None => {
                    let reason = failed_shapes
                        .entry(shape)
                        .or_insert_with(|| no_gpu_reason(snapshot, &plan, &by_free, &need))
                        .clone();
                    place_on_cpu_or_wait(snapshot, &mut plan, index, workload, reason, &mut placed)?;
                }
            }
        }

        let free_left = plan.free_gpu_total();
        let decisions = plan.into_decisions();
        ctx.info(format_args!(
            "placed {placed} of {} pending workloads; {free_left} GPUs left free",
            decisions.len()
        ));
        Ok(decisions)
    }
}

/// Where a GPU workload goes.
struct GpuFit<'a> {
    node: u32,
    gpus: Vec<u32>,
    model: &'a str,
    one_nvlink_domain: bool,
}

/// Ready nodes grouped by how many GPUs they have free in the plan, each group in node order, so
/// the best fit is found by looking at the tightest nodes first instead of at the whole fleet.
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

    /// `(free GPUs, nodes)` for every group with at least `count` free, tightest first.
    fn at_least(&self, count: u32) -> impl Iterator<Item = (u32, &[u32])> {
        self.by_free.iter().enumerate().skip(count as usize).map(|(free, nodes)| (free as u32, nodes.as_slice()))
    }
}

/// The best node for `need`: the fewest free GPUs left over on the node, then the least memory left
/// over on the chosen GPUs, then the lowest node index. `None` when no node has enough free GPUs
/// that fit.
fn best_gpu_fit<'a>(
    snapshot: &Snapshot<'a>,
    plan: &Plan<'_, 'a>,
    by_free: &FreeGpuIndex,
    need: &GpuNeed<'_>,
    prefer_nvlink: bool,
) -> Option<GpuFit<'a>> {
    let mut candidates: Vec<(u32, &Gpu<'a>)> = Vec::new();
    // Groups are visited tightest first; the first group with a fitting node holds the best fit,
    // and within it the least memory left over wins (the first such node, as they are in order).
    for (_, nodes) in by_free.at_least(need.count) {
        let mut best: Option<(u64, GpuFit<'a>)> = None;
        for &node in nodes {
            candidates.clear();
            candidates.extend(plan.free_gpus(node).filter(|(_, g)| need.fits(g)));
            if candidates.len() < need.count as usize {
                continue;
            }
            // Tightest GPUs first: least free memory, then device order.
            candidates.sort_by_key(|(i, g)| (g.memory_free_mb(), g.device_index, *i));
            let (chosen, one_domain) = choose_gpus(&candidates, need.count as usize, prefer_nvlink);
            let waste: u64 = chosen
                .iter()
                .filter_map(|&i| snapshot.gpu(i))
                .map(|g| u64::from(g.memory_free_mb() - need.memory_mb))
                .sum();
            if best.as_ref().is_none_or(|(least, _)| waste < *least) {
                let model = chosen.first().and_then(|&i| snapshot.gpu(i)).map_or("", |g| g.model);
                best = Some((waste, GpuFit { node, gpus: chosen, model, one_nvlink_domain: one_domain }));
                if waste == 0 {
                    break;
                }
            }
        }
        if let Some((_, fit)) = best {
            return Some(fit);
        }
    }
    None
}

/// `count` GPUs from `candidates` (sorted tightest first), from one NVLink domain if one has enough
/// (the domain with the fewest candidates that still has enough, to keep big domains whole), else
/// the tightest ones. Returns the GPU indexes and whether they share a domain.
fn choose_gpus(candidates: &[(u32, &Gpu<'_>)], count: usize, prefer_nvlink: bool) -> (Vec<u32>, bool) {
    let tightest = || candidates.iter().take(count).map(|(i, _)| *i).collect::<Vec<u32>>();
    let first_group = candidates.first().and_then(|(_, g)| g.nvlink_group);
    let same_domain = |gpus: &[(u32, &Gpu<'_>)]| first_group.is_some() && gpus.iter().all(|(_, g)| g.nvlink_group == first_group);
    if !prefer_nvlink || count <= 1 {
        let chosen = candidates.get(..count).unwrap_or(candidates);
        return (tightest(), same_domain(chosen));
    }
    let mut groups: Vec<(u32, usize)> = Vec::new();
    for (_, gpu) in candidates {
        if let Some(group) = gpu.nvlink_group {
            match groups.iter_mut().find(|(g, _)| *g == group) {
                Some((_, n)) => *n += 1,
                None => groups.push((group, 1)),
            }
        }
    }
    let group = groups.iter().filter(|(_, n)| *n >= count).min_by_key(|(g, n)| (*n, *g)).map(|(g, _)| *g);
    match group {
        Some(group) => {
            let chosen = candidates
                .iter()
                .filter(|(_, g)| g.nvlink_group == Some(group))
                .take(count)
                .map(|(i, _)| *i)
                .collect();
            (chosen, true)
        }
        None => (tightest(), false),
    }
}

/// "no ready node has 4 free GPUs with ≥ 40960 MiB (H100); the most on one node is 2 (n7)", or, if
/// the fleet could not fit it even with every GPU free, says so: it will wait until the fleet changes.
fn no_gpu_reason(snapshot: &Snapshot<'_>, plan: &Plan<'_, '_>, by_free: &FreeGpuIndex, need: &GpuNeed<'_>) -> String {
    let fits_when_idle = snapshot
        .ready_nodes()
        .any(|(n, _)| snapshot.node_gpus(n).filter(|(_, g)| need.fits(g)).count() >= need.count as usize);
    if !fits_when_idle {
        return format!("no ready node has {}, even with all its GPUs free", need.describe(""));
    }
    let best = by_free
        .at_least(1)
        .flat_map(|(_, nodes)| nodes)
        .map(|&n| (plan.free_gpus(n).filter(|(_, g)| need.fits(g)).count(), n))
        .max_by_key(|&(count, n)| (count, std::cmp::Reverse(n)));
    let most = match best {
        Some((count, node)) if count > 0 => {
            let name = snapshot.node(node).map_or("?", |n| n.name);
            format!("; the most on one node is {count} ({name})")
        }
        _ => "; all that fit are taken".to_owned(),
    };
    format!("no ready node has {}{most}", need.describe("free"))
}

/// Places a CPU-capable workload on CPU with `gpu_reason` as the explanation, or keeps any workload
/// pending with it.
fn place_on_cpu_or_wait<'a>(
    snapshot: &Snapshot<'a>,
    plan: &mut Plan<'_, 'a>,
    index: u32,
    workload: &Workload<'a>,
    gpu_reason: String,
    placed: &mut u32,
) -> Result<(), Failure> {
    if workload.cpu_capable {
        if let Some(node) = best_cpu_node(snapshot, plan, workload) {
            let reason = cpu_reason(snapshot, plan, workload, node, Some(&gpu_reason));
            plan.place(index, node, Vec::new(), reason)?;
            *placed += 1;
            return Ok(());
        }
        plan.keep_pending(index, format!("{gpu_reason}; and on CPU: {}", no_cpu_reason(workload)))?;
        return Ok(());
    }
    plan.keep_pending(index, gpu_reason)?;
    Ok(())
}

/// The ready node with room for the workload's CPU and memory: CPU-only nodes first (GPU nodes keep
/// their CPU for GPU work), then the least CPU left over, then the least memory left over.
fn best_cpu_node(snapshot: &Snapshot<'_>, plan: &Plan<'_, '_>, workload: &Workload<'_>) -> Option<u32> {
    snapshot
        .ready_nodes()
        .filter(|(n, _)| plan.cpu_free(*n) >= workload.cpu_millis && plan.memory_free(*n) >= workload.memory_mb)
        .min_by_key(|(n, node)| {
            (
                node.has_gpus(),
                plan.cpu_free(*n) - workload.cpu_millis,
                plan.memory_free(*n) - workload.memory_mb,
                *n,
            )
        })
        .map(|(n, _)| n)
}

fn cpu_reason(
    snapshot: &Snapshot<'_>,
    plan: &Plan<'_, '_>,
    workload: &Workload<'_>,
    node: u32,
    gpu_reason: Option<&str>,
) -> String {
    let name = snapshot.node(node).map_or("?", |n| n.name);
    let left = plan.cpu_free(node) - workload.cpu_millis;
    let fit = format!(
        "on CPU on {name}: {} mCPU and {} MiB, {left} mCPU left free there",
        workload.cpu_millis, workload.memory_mb
    );
    match gpu_reason {
        Some(why) => format!("{why}; runs {fit}"),
        None => format!("best fit {fit}"),
    }
}

fn no_cpu_reason(workload: &Workload<'_>) -> String {
    format!("no ready node has {} mCPU and {} MiB free", workload.cpu_millis, workload.memory_mb)
}

/// "GPUs 0,1,2,3" by device index on their node.
fn gpu_list(snapshot: &Snapshot<'_>, gpus: &[u32]) -> String {
    let devices: Vec<String> =
        gpus.iter().filter_map(|&i| snapshot.gpu(i)).map(|g| g.device_index.to_string()).collect();
    let noun = if devices.len() == 1 { "GPU" } else { "GPUs" };
    format!("{noun} {}", devices.join(","))
}

#[cfg(test)]
mod tests;
