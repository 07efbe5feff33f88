//! The placement toolkit: the indexes a best-fit policy needs to stay fast at 1,000 nodes and
//! 10,000 pending workloads, in Wasm as natively. The built-in policies (`priority-best-fit`,
//! `cost-aware`, `fair-share`, `slo-first`) are written with it; a policy started from the
//! template gets the same structures.
//!
//! A cycle only ever takes resources: each placement lowers some node's free GPUs, CPU and memory.
//! So instead of looking at every node for every workload, keep the nodes sorted by what they have
//! free and update the one entry a placement changes:
//!
//! - [`NodesByFree`]: nodes grouped by how many GPUs they have free, tightest first, with a version
//!   per node that moves when its free GPUs do (for [`FitMemo`]).
//! - [`RoomIndex`]: nodes ordered by the host CPU (then a tie-break of the policy's: memory, cost)
//!   they have free, optionally in tiers (cost, CPU-only first): the tightest node with room is a
//!   binary search.
//! - [`TightestGpus`]: every node's GPUs sorted once per cycle, tightest first (least free memory,
//!   then device order), with their model and MIG profile interned, so looking at a node for a
//!   workload allocates nothing and compares no strings; [`TightestGpus::fit`] picks a gang's GPUs
//!   on one node, from a single NVLink domain when one has enough.
//! - [`FitMemo`]: per GPU need, per node, what a fit came to as of the node's version, so a node
//!   whose GPUs did not change is not looked at again.
//! - [`gpu_list`]: "GPUs [0,1]" for reasons.
//!
//! Every structure follows the rules of [`Plan`]: a GPU is free when the plan says so (no share of
//! it held or given), a need fits a GPU as [`GpuNeed::fits`] says (memory, an allowed model, MIG
//! instances only for their profile). Shares of one GPU are placed with
//! [`Plan::best_fit_share`] or [`crate::frag::FragPlacer`]; tell the indexes afterwards
//! what the placement changed, as for any other.
//!
//! ```
//! use airtime_policy_sdk::fit::{FitMemo, NodesByFree, TightestGpus};
//! use airtime_policy_sdk::plan::Plan;
//! use airtime_policy_sdk::testing::SnapshotFixture;
//!
//! let bytes = SnapshotFixture::new()
//!     .node("a", 8, "H100", 81920)
//!     .node("b", 2, "H100", 81920)
//!     .pending("train", 2, 40960)
//!     .encode();
//! let snapshot = airtime_policy_sdk::abi::decode_snapshot(&bytes).unwrap();
//! let mut plan = Plan::new(&snapshot);
//! let mut free = NodesByFree::of_ready_nodes(&snapshot, &plan);
//! let gpus = TightestGpus::new(&snapshot);
//! let mut memo = FitMemo::new(snapshot.nodes.len());
//! let (index, workload) = (0, &snapshot.workloads[0]);
//! let need = workload.gpu_need();
//! let allowed = gpus.kinds_allowed(&need);
//! let id = memo.id(workload);
//! let mut scratch = Vec::new();
//!
//! // The tightest group first: node b (2 free) before node a (8 free).
//! let mut best = None;
//! for group in free.at_least(need.count) {
//!     for &node in group {
//!         let version = free.version(node);
//!         let waste = memo.waste(id, node, version, || {
//!             gpus.fit(&plan, node, &need, &allowed, true, &mut scratch).map(|f| f.waste)
//!         });
//!         if waste.is_some() && best.is_none() {
//!             best = Some(node);
//!         }
//!     }
//!     if best.is_some() {
//!         break;
//!     }
//! }
//! let node = best.unwrap();
//! let taken = gpus.take(&plan, node, &need, &allowed, true, &mut scratch).unwrap();
//! assert_eq!((node, taken.gpus.clone()), (1, vec![8, 9]));
//! let before = plan.free_gpu_count(node);
//! plan.place(index, node, taken.gpus, "best fit").unwrap();
//! free.moved(node, before, plan.free_gpu_count(node));
//! assert_eq!(free.at_least(0).next().unwrap(), &[1]);
//! ```

use std::collections::BTreeMap;

use crate::abi::{Snapshot, Workload};
use crate::plan::Plan;
use crate::view::{GpuNeed, same_model};

/// Nodes grouped by how many GPUs they have free, each group in node order, and a version per node
/// that moves whenever its free GPUs change.
#[derive(Debug, Clone, Default)]
pub struct NodesByFree {
    /// `by_free[k]`: the indexed nodes with exactly `k` free GPUs, ascending.
    by_free: Vec<Vec<u32>>,
    /// Per node (of the snapshot); starts at 1, so 0 can mean "never looked at".
    version: Vec<u32>,
}

impl NodesByFree {
    /// Indexes `nodes`, each `(node, free GPUs)`; `node_count` is the snapshot's number of nodes.
    /// Nodes not given are not indexed (and [`moved`](Self::moved) leaves them out).
    pub fn new(node_count: usize, nodes: impl IntoIterator<Item = (u32, u32)>) -> Self {
        let mut by_free: Vec<Vec<u32>> = Vec::new();
        for (node, free) in nodes {
            let free = free as usize;
            if by_free.len() <= free {
                by_free.resize_with(free + 1, Vec::new);
            }
            by_free[free].push(node);
        }
        for group in &mut by_free {
            group.sort_unstable();
            group.dedup();
        }
        NodesByFree { by_free, version: vec![1; node_count] }
    }

    /// The ready nodes of `snapshot` by what `plan` has free on them (nodes without GPUs in the
    /// group of 0).
    pub fn of_ready_nodes(snapshot: &Snapshot<'_>, plan: &Plan<'_, '_>) -> Self {
        Self::new(snapshot.nodes.len(), snapshot.ready_nodes().map(|(node, _)| (node, plan.free_gpu_count(node))))
    }

    /// `node` went from `before` to `after` free GPUs: it moves group (if it is indexed) and its
    /// version moves on.
    pub fn moved(&mut self, node: u32, before: u32, after: u32) {
        if before == after {
            return;
        }
        if let Some(version) = self.version.get_mut(node as usize) {
            *version = version.wrapping_add(1).max(1);
        }
        let Some(group) = self.by_free.get_mut(before as usize) else { return };
        let Ok(at) = group.binary_search(&node) else { return };
        group.remove(at);
        let after = after as usize;
        if self.by_free.len() <= after {
            self.by_free.resize_with(after + 1, Vec::new);
        }
        if let Err(at) = self.by_free[after].binary_search(&node) {
            self.by_free[after].insert(at, node);
        }
    }

    /// The groups of nodes with at least `count` free GPUs, tightest first, each in node order.
    pub fn at_least(&self, count: u32) -> impl Iterator<Item = &[u32]> {
        self.by_free.iter().skip(count as usize).map(Vec::as_slice)
    }

    /// Which group `node` is in (`None`: not indexed).
    pub fn free_of(&self, node: u32) -> Option<u32> {
        self.by_free.iter().position(|group| group.binary_search(&node).is_ok()).map(|k| k as u32)
    }

    /// `node`'s version: 1 at first, moved on by every change of its free GPUs (0 for an index that
    /// names no node).
    pub fn version(&self, node: u32) -> u32 {
        self.version.get(node as usize).copied().unwrap_or(0)
    }
}

/// A node's room as [`RoomIndex`] files it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeRoom {
    pub node: u32,
    /// Lower tiers are looked at first (a cost, or 0 for CPU-only nodes and 1 for the rest).
    pub tier: u64,
    /// Free host CPU, thousandths of a core.
    pub cpu: u32,
    /// Free host memory, MiB.
    pub memory: u32,
    /// Orders nodes of equal free CPU in a tier before the node index does (free memory, a cost).
    pub tie: u64,
}

/// `(cpu, tie, node, memory)`: sorted, the tightest CPU fit first.
type RoomEntry = (u32, u64, u32, u32);

/// Nodes ordered by the host CPU they have free, in tiers: the tightest node with room for a
/// workload — the lowest tier with one, then the least free CPU, then the tie-break, then the node
/// index — is a binary search and a short scan, not a pass over the fleet.
#[derive(Debug, Clone, Default)]
pub struct RoomIndex {
    /// Per tier (by ascending tier key), its nodes sorted.
    tiers: Vec<Vec<RoomEntry>>,
    /// Per node: its tier and its entry there; `None` when not indexed.
    at: Vec<Option<(usize, RoomEntry)>>,
}

impl RoomIndex {
    /// Indexes `rooms`; `node_count` is the snapshot's number of nodes. Nodes not given are not
    /// indexed: [`set`](Self::set) ignores them.
    pub fn new(node_count: usize, rooms: impl IntoIterator<Item = NodeRoom>) -> Self {
        let rooms: Vec<NodeRoom> = rooms.into_iter().filter(|r| (r.node as usize) < node_count).collect();
        let mut keys: Vec<u64> = rooms.iter().map(|r| r.tier).collect();
        keys.sort_unstable();
        keys.dedup();
        let mut tiers: Vec<Vec<RoomEntry>> = vec![Vec::new(); keys.len()];
        let mut at = vec![None; node_count];
        for room in rooms {
            let Ok(tier) = keys.binary_search(&room.tier) else { continue };
            let entry = (room.cpu, room.tie, room.node, room.memory);
            if let Some(slot) = at.get_mut(room.node as usize) {
                if slot.is_some() {
                    continue; // a node is indexed once, as first given
                }
                *slot = Some((tier, entry));
                tiers[tier].push(entry);
            }
        }
        for tier in &mut tiers {
            tier.sort_unstable();
        }
        RoomIndex { tiers, at }
    }

    /// `node` has `cpu` mCPU and `memory` MiB free now, with tie-break `tie`; ignored for a node not
    /// indexed.
    pub fn set(&mut self, node: u32, cpu: u32, memory: u32, tie: u64) {
        let Some(Some((tier, old))) = self.at.get(node as usize).copied() else { return };
        let entry = (cpu, tie, node, memory);
        if old == entry {
            return;
        }
        let Some(list) = self.tiers.get_mut(tier) else { return };
        let Ok(from) = list.binary_search(&old) else { return };
        let to = list.partition_point(|e| *e < entry);
        // Move the entry in place: rooms only shrink in a cycle, so it moves a short way forward.
        if to <= from {
            list[to..=from].rotate_right(1);
            list[to] = entry;
        } else {
            list[from..to].rotate_left(1);
            list[to - 1] = entry;
        }
        self.at[node as usize] = Some((tier, entry));
    }

    /// The tightest node with room for `cpu` and `memory` that `can_run` the workload: the first
    /// tier with one, and in it the least free CPU, then the tie-break, then the node index.
    pub fn best(&self, cpu: u32, memory: u32, can_run: impl Fn(u32) -> bool) -> Option<u32> {
        self.tiers.iter().find_map(|list| {
            let start = list.partition_point(|&(c, ..)| c < cpu);
            list.get(start..)?
                .iter()
                .find(|&&(_, _, node, m)| m >= memory && can_run(node))
                .map(|&(_, _, node, _)| node)
        })
    }

    /// What `node` is filed with: `(free mCPU, free MiB)`; `None` when it is not indexed.
    pub fn room(&self, node: u32) -> Option<(u32, u32)> {
        self.at.get(node as usize).copied().flatten().map(|(_, (cpu, _, _, memory))| (cpu, memory))
    }
}

/// One GPU of a node, as [`TightestGpus`] orders them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// Index in the snapshot's GPU table.
    pub gpu: u32,
    /// Free memory now, MiB ([`crate::abi::Gpu::memory_free_mb`]).
    pub memory_free_mb: u32,
    pub device_index: u32,
    pub nvlink_group: Option<u32>,
    /// Position of its model and MIG profile in [`TightestGpus`]' kinds.
    kind: u32,
}

/// Every node's GPUs, tightest first (least free memory, then device order, then table order), node
/// after node, sorted once per cycle: a GPU's free memory does not change within one, and
/// placements only take GPUs out, which [`fit`](Self::fit) skips by asking the plan.
#[derive(Debug, Clone, Default)]
pub struct TightestGpus<'s> {
    /// (model, a MIG instance, its profile), trimmed, one entry per kind ignoring ASCII case: a
    /// need checks each kind once, not each GPU.
    kinds: Vec<(&'s str, bool, &'s str)>,
    order: Vec<Candidate>,
    /// `order_at[node]..order_at[node + 1]` is the node's run.
    order_at: Vec<usize>,
}

/// Where [`TightestGpus::fit`] would put a gang on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeFit {
    /// The NVLink domain the GPUs come from; `None`: the tightest GPUs, whatever their domains.
    pub domain: Option<u32>,
    /// Free memory the chosen GPUs leave over beyond the need, MiB (lower is tighter).
    pub waste: u64,
}

/// The GPUs [`TightestGpus::take`] chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// Tightest first (sort them for a decision that lists them in index order).
    pub gpus: Vec<u32>,
    /// All in one NVLink domain.
    pub one_nvlink_domain: bool,
}

impl<'s> TightestGpus<'s> {
    pub fn new(snapshot: &Snapshot<'s>) -> Self {
        let mut kinds: Vec<(&'s str, bool, &'s str)> = Vec::new();
        let mut order = Vec::with_capacity(snapshot.gpus.len());
        let mut order_at = Vec::with_capacity(snapshot.nodes.len() + 1);
        for (node, _) in snapshot.nodes_indexed() {
            let start = order.len();
            order_at.push(start);
            for (gpu, g) in snapshot.node_gpus(node) {
                let (model, mig, profile) = (g.model.trim(), g.is_mig(), g.mig_profile.trim());
                let same = |&(m, i, p): &(&str, bool, &str)| i == mig && same_model(m, model) && same_model(p, profile);
                let kind = match kinds.iter().position(same) {
                    Some(at) => at,
                    None => {
                        kinds.push((model, mig, profile));
                        kinds.len() - 1
                    }
                };
                order.push(Candidate {
                    gpu,
                    memory_free_mb: g.memory_free_mb(),
                    device_index: g.device_index,
                    nvlink_group: g.nvlink_group,
                    kind: kind as u32,
                });
            }
            // GPU indexes are distinct, so the order is total.
            order[start..].sort_unstable_by_key(|c| (c.memory_free_mb, c.device_index, c.gpu));
        }
        order_at.push(order.len());
        TightestGpus { kinds, order, order_at }
    }

    /// `node`'s GPUs, tightest first (empty for an index that names no node).
    pub fn node(&self, node: u32) -> &[Candidate] {
        let node = node as usize;
        match (self.order_at.get(node), self.order_at.get(node + 1)) {
            (Some(&a), Some(&b)) => self.order.get(a..b).unwrap_or(&[]),
            _ => &[],
        }
    }

    /// Per GPU kind, whether `need` may run on it: an allowed model, and MIG instances only for a
    /// need of their profile ([`GpuNeed::device_kind_fits`]). Work it out once per need, and pass it
    /// to [`fit`](Self::fit).
    pub fn kinds_allowed(&self, need: &GpuNeed<'_>) -> Vec<bool> {
        self.kinds
            .iter()
            .map(|&(model, mig, profile)| {
                // The rule of `GpuNeed::device_kind_fits`, once per kind.
                let kind_fits = if mig || !need.mig_profile.is_empty() {
                    mig && same_model(profile, need.mig_profile)
                } else {
                    true
                };
                need.allows_model(model) && kind_fits
            })
            .collect()
    }

    /// Whether `need` would fit on `node` now, and how tightly: the free GPUs (by `plan`) of an
    /// `allowed` kind with the memory, the first `need.count` of them tightest first; or, with
    /// `prefer_nvlink` and more than one GPU, the first `need.count` of one NVLink domain when a
    /// domain has enough: the domain with the fewest fitting GPUs that still has enough (keeping big
    /// domains whole), then the lowest domain number. `None` if too few fit.
    ///
    /// Fills `scratch` with the node's fitting GPUs, tightest first. No allocation once `scratch`
    /// has grown, and no sorting: this is what a best-fit search runs for each node it looks at.
    pub fn fit(
        &self,
        plan: &Plan<'_, '_>,
        node: u32,
        need: &GpuNeed<'_>,
        allowed: &[bool],
        prefer_nvlink: bool,
        scratch: &mut Vec<Candidate>,
    ) -> Option<NodeFit> {
        let count = need.count as usize;
        scratch.clear();
        if count == 0 || (plan.free_gpu_count(node) as usize) < count {
            return None;
        }
        scratch.extend(self.node(node).iter().filter(|c| {
            c.memory_free_mb >= need.memory_mb
                && allowed.get(c.kind as usize).copied().unwrap_or(false)
                && plan.is_gpu_free(c.gpu)
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
        Some(NodeFit { domain, waste })
    }

    /// The GPUs [`fit`](Self::fit) would take on `node`, and whether they share one NVLink domain.
    pub fn take(
        &self,
        plan: &Plan<'_, '_>,
        node: u32,
        need: &GpuNeed<'_>,
        allowed: &[bool],
        prefer_nvlink: bool,
        scratch: &mut Vec<Candidate>,
    ) -> Option<Taken> {
        let NodeFit { domain, .. } = self.fit(plan, node, need, allowed, prefer_nvlink, scratch)?;
        let count = need.count as usize;
        let chosen = || scratch.iter().filter(|c| domain.is_none_or(|d| c.nvlink_group == Some(d))).take(count);
        let gpus: Vec<u32> = chosen().map(|c| c.gpu).collect();
        let first_group = scratch.first().and_then(|c| c.nvlink_group);
        let one_nvlink_domain =
            domain.is_some() || (first_group.is_some() && chosen().all(|c| c.nvlink_group == first_group));
        Some(Taken { gpus, one_nvlink_domain })
    }
}

/// What one node's fit for a need came to, as of a node version.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Seen {
    /// 0: never looked at (versions start at 1).
    version: u32,
    /// The memory a fit would leave over; `None`: it does not fit.
    waste: Option<u64>,
}

/// Per GPU need, per node: whether and how tightly the need fit the node, as of the node's version
/// ([`NodesByFree::version`]). A node whose free GPUs did not change is not looked at again, and a
/// node a need did not fit is not looked at again at all (free GPUs only dwindle in a cycle), which
/// keeps a cycle of 10,000 workloads on 1,000 nodes in milliseconds.
///
/// Needs are keyed by GPU count, memory per GPU, the allowed models as the workload wrote them and
/// the MIG profile: what [`GpuNeed::fits`] looks at. Host CPU and memory are not in the key; check
/// them apart.
#[derive(Debug, Clone, Default)]
pub struct FitMemo<'s> {
    ids: BTreeMap<(u32, u32, &'s str, &'s str), usize>,
    /// Per need id, per node.
    seen: Vec<Vec<Seen>>,
    node_count: usize,
}

impl<'s> FitMemo<'s> {
    /// A memo for a snapshot of `node_count` nodes.
    pub fn new(node_count: usize) -> Self {
        FitMemo { ids: BTreeMap::new(), seen: Vec::new(), node_count }
    }

    /// The number of `workload`'s GPU need: the same for every workload asking for the same GPUs,
    /// numbered from 0 in order of first use.
    pub fn id(&mut self, workload: &Workload<'s>) -> usize {
        let key = (workload.gpu_count, workload.gpu_memory_mb, workload.gpu_models, workload.mig_profile);
        match self.ids.get(&key) {
            Some(&id) => id,
            None => {
                self.seen.push(vec![Seen::default(); self.node_count]);
                self.ids.insert(key, self.seen.len() - 1);
                self.seen.len() - 1
            }
        }
    }

    /// How many needs it has numbered.
    pub fn needs(&self) -> usize {
        self.seen.len()
    }

    /// The waste of need `id` on `node` at `version`: see [`NeedMemo::waste`]. In a loop over
    /// nodes, take [`need`](Self::need) once instead.
    pub fn waste(&mut self, id: usize, node: u32, version: u32, fit: impl FnOnce() -> Option<u64>) -> Option<u64> {
        self.need(id).waste(node, version, fit)
    }

    /// Need `id`'s memo, for a loop over nodes (an unknown id remembers nothing).
    pub fn need(&mut self, id: usize) -> NeedMemo<'_> {
        NeedMemo { nodes: self.seen.get_mut(id).map_or(&mut [][..], Vec::as_mut_slice) }
    }
}

/// One need's memo, per node (from [`FitMemo::need`]).
#[derive(Debug)]
pub struct NeedMemo<'m> {
    nodes: &'m mut [Seen],
}

impl NeedMemo<'_> {
    /// The need was looked at on `node` and did not fit: it never will this cycle (free GPUs only
    /// dwindle), so a search may skip the node before any other check.
    #[inline]
    pub fn never_fits(&self, node: u32) -> bool {
        self.nodes.get(node as usize).is_some_and(|seen| seen.version != 0 && seen.waste.is_none())
    }

    /// The waste of the need on `node` at `version`: remembered if the node was looked at in this
    /// version, or did not fit before; else `fit()`, remembered (not for a node out of range).
    /// `None`: it does not fit.
    #[inline]
    pub fn waste(&mut self, node: u32, version: u32, fit: impl FnOnce() -> Option<u64>) -> Option<u64> {
        let Some(seen) = self.nodes.get_mut(node as usize) else { return fit() };
        if seen.version == version || (seen.version != 0 && seen.waste.is_none()) {
            return seen.waste;
        }
        let waste = fit();
        *seen = Seen { version, waste };
        waste
    }
}

/// "GPUs [0,1]" (or "GPU [3]"): the device indexes of `gpus` on their node, for reasons.
pub fn gpu_list(snapshot: &Snapshot<'_>, gpus: &[u32]) -> String {
    let mut text = String::with_capacity(8 + 3 * gpus.len());
    text.push_str(if gpus.len() == 1 { "GPU [" } else { "GPUs [" });
    for (n, gpu) in gpus.iter().filter_map(|&g| snapshot.gpu(g)).enumerate() {
        if n > 0 {
            text.push(',');
        }
        push_number(&mut text, gpu.device_index);
    }
    text.push(']');
    text
}

/// Appends `n` in decimal. Reasons written for every placement are cheaper built with this and
/// `push_str` than with `format!`, whose dynamic dispatch costs, in Wasm, as much as the rest of a
/// placement.
pub fn push_number(text: &mut String, mut n: u32) {
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
