//! The fleet as the cycle leaves it: the plan, which GPUs are still open, and the indexes (the SDK's
//! placement toolkit) that find the best fit for a workload without a pass over the whole fleet.

use std::cmp::Reverse;

use airtime_policy_sdk::fit::{FitMemo, NodeRoom, NodesByFree, RoomIndex};
use airtime_policy_sdk::prelude::*;

pub(crate) use airtime_policy_sdk::fit::gpu_list;

/// Where a GPU workload goes.
pub(crate) struct Fit {
    pub(crate) node: u32,
    pub(crate) gpus: Vec<u32>,
}

/// The fleet as the cycle leaves it: the plan, which GPUs are still open (free in the plan, on a
/// ready node, not set aside for a waiting workload), and the ready nodes indexed by how many open
/// GPUs they have, so each workload looks at the tightest candidates first instead of at the whole
/// fleet.
pub(crate) struct Fleet<'p, 's> {
    snapshot: &'p Snapshot<'s>,
    pub(crate) plan: Plan<'p, 's>,
    open: Vec<bool>,
    open_count: Vec<u32>,
    /// The ready GPU nodes by open GPUs, with a version per node that moves when they change.
    by_open: NodesByFree,
    /// Per GPU need, per node: the fit as of the node's version. Nodes that did not change are not
    /// looked at again, which keeps 10,000 workloads on 1,000 nodes in milliseconds.
    memo: FitMemo<'s>,
    /// Ready nodes without GPUs, by the CPU and memory they have free.
    cpu_room: RoomIndex,
    /// Ready nodes with GPUs, by their spare host CPU and memory (see [`spare_host`]).
    host_room: RoomIndex,
    /// Reused by fit searches, so looking at a node allocates nothing.
    scratch: Vec<(u32, u32)>,
}

/// A room index entry: one tier, the least free CPU first, then the least free memory.
fn room(node: u32, (cpu, memory): (u32, u32)) -> NodeRoom {
    NodeRoom { node, tier: 0, cpu, memory, tie: u64::from(memory) }
}

/// A GPU node's free host CPU and memory beyond a per-GPU share of its totals kept for each of its
/// `open` GPUs, so CPU-only work never leaves GPUs that could be placed without the host resources
/// to run them.
fn spare_host(snapshot: &Snapshot<'_>, plan: &Plan<'_, '_>, open: u32, node: u32) -> (u32, u32) {
    let Some(n) = snapshot.node(node) else { return (0, 0) };
    let open = u64::from(open);
    let gpus = u64::from(n.gpu_count.max(1));
    let keep = |total: u32| (u64::from(total) * open / gpus).min(u64::from(u32::MAX)) as u32;
    (plan.cpu_free(node).saturating_sub(keep(n.cpu_millis)), plan.memory_free(node).saturating_sub(keep(n.memory_mb)))
}

impl<'p, 's> Fleet<'p, 's> {
    pub(crate) fn new(snapshot: &'p Snapshot<'s>) -> Self {
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
        let gpu_nodes = || snapshot.ready_nodes().filter(|(_, n)| n.has_gpus()).map(|(node, _)| node);
        let by_open = NodesByFree::new(snapshot.nodes.len(), gpu_nodes().map(|node| (node, open_count[node as usize])));
        let plan = Plan::new(snapshot);
        let cpu_rooms = snapshot
            .ready_nodes()
            .filter(|(_, n)| !n.has_gpus())
            .map(|(node, _)| room(node, (plan.cpu_free(node), plan.memory_free(node))));
        let cpu_room = RoomIndex::new(snapshot.nodes.len(), cpu_rooms);
        let host_rooms =
            gpu_nodes().map(|node| room(node, spare_host(snapshot, &plan, open_count[node as usize], node)));
        let host_room = RoomIndex::new(snapshot.nodes.len(), host_rooms);
        Fleet {
            snapshot,
            plan,
            open,
            open_count,
            by_open,
            memo: FitMemo::new(snapshot.nodes.len()),
            cpu_room,
            host_room,
            scratch: Vec::new(),
        }
    }

    /// Files `node` (a ready node) in its room index after a change.
    fn refresh_room(&mut self, node: u32) {
        match self.snapshot.node(node) {
            Some(n) if n.is_ready() && n.has_gpus() => {
                let open = self.open_count.get(node as usize).copied().unwrap_or(0);
                let (cpu, memory) = spare_host(self.snapshot, &self.plan, open, node);
                self.host_room.set(node, cpu, memory, u64::from(memory));
            }
            Some(n) if n.is_ready() => {
                let (cpu, memory) = (self.plan.cpu_free(node), self.plan.memory_free(node));
                self.cpu_room.set(node, cpu, memory, u64::from(memory));
            }
            _ => {}
        }
    }

    pub(crate) fn has_host_room(&self, node: u32, w: &Workload<'_>) -> bool {
        self.plan.cpu_free(node) >= w.cpu_millis && self.plan.memory_free(node) >= w.memory_mb
    }

    /// The CPU node with room for `w` and the least CPU left over.
    pub(crate) fn cpu_node(&self, w: &Workload<'_>) -> Option<u32> {
        self.cpu_room.best(w.cpu_millis, w.memory_mb, |node| can_run(self.snapshot, w, node))
    }

    /// The GPU node whose spare host CPU and memory (see [`spare_host`]) have room for
    /// CPU-only `w`, the least left over.
    pub(crate) fn host_cpu_node(&self, w: &Workload<'_>) -> Option<u32> {
        self.host_room.best(w.cpu_millis, w.memory_mb, |node| can_run(self.snapshot, w, node))
    }

    /// The best fit for `w`: the fewest open GPUs left over on the node, then the least GPU memory
    /// left over, then the lowest node index. `None` when no ready node has enough open GPUs that
    /// fit and the host CPU and memory.
    pub(crate) fn best_fit(&mut self, w: &Workload<'s>, need: &GpuNeed<'s>) -> Option<Fit> {
        if need.count == 0 {
            return None;
        }
        let mut memo = std::mem::take(&mut self.memo);
        let id = memo.id(w);
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut best: Option<(u64, u32)> = None;
        let mut seen = memo.need(id);
        // Groups are visited tightest first; the first group with a fitting node holds the best fit.
        for group in self.by_open.at_least(need.count) {
            for &node in group {
                if !can_run(self.snapshot, w, node) {
                    continue;
                }
                // Open GPUs only dwindle in a cycle: a node that did not fit never will.
                let version = self.by_open.version(node);
                let waste = seen.waste(node, version, || self.fitting(node, need, &mut scratch));
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
    pub(crate) fn open_fitting(&self, node: u32, need: &GpuNeed<'_>) -> u32 {
        self.snapshot.node_gpus(node).filter(|(g, gpu)| self.open[*g as usize] && need.fits(gpu)).count() as u32
    }

    pub(crate) fn place_gpus(&mut self, index: u32, fit: Fit, reason: String) -> Result<(), Failure> {
        self.plan.place(index, fit.node, fit.gpus.clone(), reason)?;
        self.close(fit.node, &fit.gpus);
        self.refresh_room(fit.node);
        Ok(())
    }

    /// A CPU placement: no GPUs, the node's CPU and memory.
    pub(crate) fn place_cpu(&mut self, index: u32, node: u32, reason: String) -> Result<(), Failure> {
        self.plan.place(index, node, Vec::new(), reason)?;
        self.refresh_room(node);
        Ok(())
    }

    /// Sets the open GPUs of `node` that fit `need` aside for a waiting workload.
    pub(crate) fn reserve(&mut self, node: u32, need: &GpuNeed<'_>) {
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
        self.by_open.moved(node, before, after);
    }

    /// Why `w`'s shape finds no room now.
    pub(crate) fn no_fit(&self, w: &Workload<'_>, need: &GpuNeed<'_>) -> NoFit {
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
            return NoFit::TakenThisCycle {
                left: format!("{no_node} has {} left", need.describe("free")),
                now: self.busy(w, need, no_node),
            };
        }
        NoFit::Busy(self.busy(w, need, no_node))
    }

    /// What `w`'s shape lacks in the room left now (the plan's open GPUs): the reason the next
    /// cycle finds too, when nothing else changes.
    fn busy(&self, w: &Workload<'_>, need: &GpuNeed<'_>, no_node: &str) -> String {
        let snapshot = self.snapshot;
        let gpus_fit_now = self
            .by_open
            .at_least(need.count)
            .flatten()
            .any(|&node| can_run(snapshot, w, node) && self.open_fitting(node, need) >= need.count);
        if gpus_fit_now {
            let nodes = if w.container { "the ready nodes that run containers" } else { "the ready nodes" };
            return format!(
                "{nodes} with {} lack {} mCPU and {} MiB of host memory free",
                need.describe("free"),
                w.cpu_millis,
                w.memory_mb
            );
        }
        let most = self
            .by_open
            .at_least(1)
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
        format!("{no_node} has {}{most}", need.describe("free"))
    }
}

pub(crate) fn node_name<'s>(snapshot: &Snapshot<'s>, node: u32) -> &'s str {
    snapshot.node(node).map_or("?", |n| n.name)
}

/// Whether `node` can run `w`: a bool test for work not in a container.
pub(crate) fn can_run(snapshot: &Snapshot<'_>, w: &Workload<'_>, node: u32) -> bool {
    !w.container || snapshot.node(node).is_some_and(|n| n.can_run(w))
}

/// Why a shape of GPU work found no room, worked out once per shape.
#[derive(Clone)]
pub(crate) enum NoFit {
    /// Not even on an idle fleet: the whole reason.
    Never(String),
    /// It would have fit the GPUs free when the cycle began: work placed ahead of it took them.
    /// `left` says so (for the reason that names the tenant whose work went first); `now` is what
    /// it lacks in the room the cycle leaves, the same words the next cycle finds: a reason that
    /// only said "taken this cycle" changed again one cycle later, for every such workload.
    TakenThisCycle { left: String, now: String },
    /// Running work holds what it needs: the whole reason.
    Busy(String),
}
