//! GPU fragmentation: how much of a node's free GPU capacity the work that typically arrives could
//! not use. The measure of Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads
//! with Fragmentation Gradient Descent" (USENIX ATC '23, the paper that published the Alibaba trace
//! Airtime replays), used by the default policy to place shares of GPUs.
//!
//! For one kind of task `m` and a node with free GPU capacity `f_1 … f_k` (thousandths of each GPU):
//! - if `m` cannot run on the node at all (too few GPUs with room for it, or too little CPU), every
//!   free thousandth is fragmented for it: `F(m) = Σ f_g`;
//! - a share `d < 1000` can use only GPUs with at least `d` free: `F(m) = Σ f_g` over `f_g < d`;
//! - whole-GPU work can use only fully free GPUs: `F(m) = Σ f_g` over `f_g < 1000`.
//!
//! - work that needs no GPU can use none of it: `F(m) = Σ f_g` (their "XL" and "XR" cases).
//!
//! The node's fragmentation for a [`Workmix`] (the popularity `p_m` of each kind of task) is the
//! expectation `Σ p_m F(m)`. Placing a task where it *adds* the least fragmentation (the gradient)
//! leaves the most capacity usable by what comes next; best fit alone packs shares onto the
//! fullest GPU even when the sliver it leaves fits nothing that arrives.
//!
//! [`FragPlacer::new`] compares placements by the exact gradient, ties to the node left with the
//! least free; [`FragPlacer::scored`] as their plugin does, by `⌊σ(−added/1000) × 100⌋`
//! ([`score`]), ties in a fixed pseudo-random order of the nodes ([`node_order`]), as their
//! simulator breaks them by prefixing node names with a random permutation. What each places on
//! their fill experiment is in `docs/simulator-results.md`.

use std::collections::{BTreeMap, BTreeSet};

use crate::abi::{Snapshot, WHOLE_GPU_MILLI};
use crate::plan::Plan;
use crate::view::model_allowed;

/// The share of the work the typical kinds cover: the most popular kinds are kept until they
/// account for this much of it, as Weng et al.'s simulator keeps its "typical pods" (95%).
pub const TYPICAL_SHARE: f64 = 0.95;

/// How long pending work counts in [`Workmix::of`]: 10 minutes.
pub const RECENT_MS: u64 = 600_000;

/// One kind of task in the mix.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TaskKind<'a> {
    /// Thousandths of each GPU: below 1000 for a share of one GPU.
    pub milli: u32,
    /// GPUs, all on one node (1 for a share).
    pub count: u32,
    /// Host CPU it needs on the node, thousandths of a core.
    pub cpu_millis: u32,
    /// The GPU models it may use (a workload's `gpu_models`, comma-separated); empty for any.
    pub models: &'a str,
    /// Its share of the mix (the weights sum to 1).
    pub weight: f64,
}

/// The work that typically arrives: kinds of task and their popularity.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Workmix<'a> {
    kinds: Vec<TaskKind<'a>>,
    /// The share of the mix that needs no GPU: every free thousandth is fragmented for it.
    cpu_only: f64,
}

impl<'a> Workmix<'a> {
    /// A mix of kinds; weights are normalised, kinds with no weight, no GPUs or no capacity dropped.
    pub fn new(kinds: impl IntoIterator<Item = TaskKind<'a>>) -> Workmix<'a> {
        Workmix::with_cpu_only(kinds, 0.0)
    }

    /// A mix of GPU kinds and work that needs no GPU, weighing `cpu_only` against the kinds'
    /// weights; all normalised to sum to 1.
    pub fn with_cpu_only(kinds: impl IntoIterator<Item = TaskKind<'a>>, cpu_only: f64) -> Workmix<'a> {
        let mut kinds: Vec<TaskKind<'a>> =
            kinds.into_iter().filter(|k| k.weight > 0.0 && k.count > 0 && k.milli > 0).collect();
        let cpu_only = cpu_only.max(0.0);
        let total: f64 = kinds.iter().map(|k| k.weight).sum::<f64>() + cpu_only;
        if total <= 0.0 {
            return Workmix::default();
        }
        for kind in &mut kinds {
            kind.weight /= total;
        }
        Workmix { kinds, cpu_only: cpu_only / total }
    }

    /// The work that typically arrives, for a snapshot: the host's record of what the scope was
    /// asked for lately ([`Snapshot::arrivals`](crate::abi::Snapshot::arrivals), ABI 1.9: the last
    /// week's submissions on Airtime's hosts) when it keeps one. Weng et al. give FGD the typical
    /// pods of the whole workload; what a queue holds in one cycle is a poor stand-in for that —
    /// early on a few dozen pods, later skewed to what fits — and on their fill experiment costs
    /// FGD almost a point of allocation (`docs/simulator-results.md`).
    ///
    /// Without that record (an older host, a tenant's view), the snapshot's own work, running and
    /// pending for less than [`RECENT_MS`] (not MIG requests, which use instances rather than
    /// capacity): work that has waited longer is left out, since what could not be placed piles up
    /// in a full cluster and would bend the mix towards shapes that do not fit. Work without GPUs
    /// counts where it competes with GPU work for a GPU node's cores: pending, or running on a
    /// node with GPUs (CPU work on a CPU-only node never sees a GPU).
    pub fn of(snapshot: &Snapshot<'a>) -> Workmix<'a> {
        if !snapshot.arrivals.is_empty() {
            // Whole GPUs count 1000 thousandths each, whatever a host sent; `counted` makes work
            // without GPUs one kind per CPU size.
            return Workmix::counted(snapshot.arrivals.iter().map(|a| {
                let milli = if a.gpu_count == 1 { a.gpu_milli.min(WHOLE_GPU_MILLI) } else { WHOLE_GPU_MILLI };
                ((milli, a.gpu_count, a.cpu_millis, a.gpu_models.trim()), a.count)
            }));
        }
        let on_gpu_node = |w: &crate::abi::Workload<'a>| {
            w.is_pending() || w.node.and_then(|n| snapshot.node(n)).is_some_and(|n| n.gpu_count > 0)
        };
        Workmix::typical(
            snapshot
                .workloads
                .iter()
                .filter(|w| !w.is_pending() || snapshot.now_ms.saturating_sub(w.submitted_ms) < RECENT_MS)
                .filter(|w| if w.needs_gpu() { !w.asks_mig() } else { on_gpu_node(w) })
                .map(|w| {
                    let (milli, count) = if !w.needs_gpu() {
                        (0, 0)
                    } else if w.is_share() {
                        (w.gpu_milli, 1)
                    } else {
                        (WHOLE_GPU_MILLI, w.gpu_count)
                    };
                    (milli, count, w.cpu_millis, w.gpu_models.trim())
                }),
        )
    }

    /// The typical mix of a list of tasks, each `(thousandths of each GPU, GPUs, host CPU, allowed
    /// models)`: equal tasks are one kind weighted by how many there are, and the most popular kinds
    /// are kept until they cover [`TYPICAL_SHARE`] of the tasks. Tasks without GPUs (0 GPUs or 0
    /// thousandths) are kinds like any other, told apart by their CPU, and weigh as
    /// [`cpu_only`](Self::cpu_only) — as Weng et al.'s typical pods include CPU-only pods.
    pub fn typical(tasks: impl IntoIterator<Item = (u32, u32, u32, &'a str)>) -> Workmix<'a> {
        Workmix::counted(tasks.into_iter().map(|task| (task, 1)))
    }

    /// [`typical`](Self::typical) of tasks given as `(shape, how many)`.
    pub fn counted(tasks: impl IntoIterator<Item = ((u32, u32, u32, &'a str), u32)>) -> Workmix<'a> {
        let mut counts: BTreeMap<Shape<'a>, u32> = BTreeMap::new();
        for ((milli, count, cpu, models), n) in tasks {
            let task = if milli == 0 || count == 0 { (0, 0, cpu, "") } else { (milli, count, cpu, models) };
            let slot = counts.entry(task).or_default();
            *slot = slot.saturating_add(n);
        }
        let mut kinds: Vec<(Shape<'a>, u32)> = counts.into_iter().collect();
        // Most popular first; equal counts in key order, so the mix does not depend on the order of
        // the snapshot.
        kinds.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let total: f64 = kinds.iter().map(|k| f64::from(k.1)).sum();
        let mut covered = 0.0;
        let mut typical = Vec::new();
        let mut cpu_only = 0.0;
        for ((milli, count, cpu_millis, models), n) in kinds {
            if covered >= TYPICAL_SHARE * total {
                break;
            }
            covered += f64::from(n);
            if count == 0 {
                cpu_only += f64::from(n);
            } else {
                typical.push(TaskKind { milli, count, cpu_millis, models, weight: f64::from(n) });
            }
        }
        Workmix::with_cpu_only(typical, cpu_only)
    }

    /// The GPU kinds, weights summing to 1 less [`cpu_only`](Self::cpu_only) (empty for a mix of
    /// nothing).
    pub fn kinds(&self) -> &[TaskKind<'a>] {
        &self.kinds
    }

    /// The share of the mix that needs no GPU.
    pub fn cpu_only(&self) -> f64 {
        self.cpu_only
    }

    /// Expected fragmented capacity of a node, in thousandths of a GPU: its GPUs' free thousandths
    /// and models (`free`, one per GPU, 0..=1000) and its free CPU. 0 for an empty mix.
    pub fn node_fragmentation<'m>(&self, free: impl Iterator<Item = (u32, &'m str)> + Clone, cpu_free: u32) -> f64 {
        let gpu: f64 = self
            .kinds
            .iter()
            .map(|kind| kind.weight * f64::from(task_fragmentation(free.clone(), cpu_free, kind)))
            .sum();
        if self.cpu_only > 0.0 {
            let total: u32 = free.map(|(f, _)| f.min(WHOLE_GPU_MILLI)).sum();
            gpu + self.cpu_only * f64::from(total)
        } else {
            gpu
        }
    }
}

/// `F(m)` for one node: the free thousandths `kind` could not use there. `free` is each GPU's free
/// thousandths and model: a GPU of a model the kind may not use is fragmented for it.
pub fn task_fragmentation<'m>(
    free: impl Iterator<Item = (u32, &'m str)> + Clone,
    cpu_free: u32,
    kind: &TaskKind<'_>,
) -> u32 {
    let total: u32 = free.clone().map(|(f, _)| f.min(WHOLE_GPU_MILLI)).sum();
    let share = kind.count == 1 && kind.milli < WHOLE_GPU_MILLI;
    let need = if share { kind.milli } else { WHOLE_GPU_MILLI };
    if cpu_free < kind.cpu_millis {
        return total;
    }
    let mut usable_gpus = 0u32;
    let mut unusable = 0u32;
    for (f, model) in free {
        if f >= need && model_allowed(kind.models, model) {
            usable_gpus += 1;
        } else {
            unusable += f.min(WHOLE_GPU_MILLI);
        }
    }
    if usable_gpus < kind.count { total } else { unusable }
}

/// The score of a placement that adds `added` thousandths of expected fragmentation, as Weng et
/// al.'s FGD plugin gives it: `⌊σ(−added/1000) × 100⌋`, 0–100, higher better. Placements within
/// about 0.04 GPU of each other near zero, and wider apart further out, score alike.
pub fn score(added: f64) -> u32 {
    let s = 100.0 / (1.0 + (added / 1000.0).exp());
    if s.is_finite() { s.floor().clamp(0.0, 100.0) as u32 } else { 0 }
}

/// A node's place in the fixed pseudo-random order that breaks ties between equally scored
/// placements: a hash of its name, so the order is the same every cycle and on every host and
/// spreads ties over the fleet rather than filling one corner of it.
pub fn node_order(name: &str) -> u64 {
    use std::hash::Hasher;
    let mut h = Fx(0x243f_6a88_85a3_08d3);
    h.write(name.as_bytes());
    h.write_u64(name.len() as u64);
    // A final avalanche, so names that differ in one byte land far apart.
    let mut x = h.finish();
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x
}

/// Where a workload goes, and what it adds to the fleet's expected fragmentation.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    pub node: u32,
    /// The GPUs it takes (none for CPU work).
    pub gpus: Vec<u32>,
    /// Expected fragmentation added, thousandths of a GPU (negative: the node becomes more usable).
    pub added: f64,
}

/// A node's state as far as fragmentation goes: free CPU and each (non-MIG) GPU's free thousandths
/// and model, sorted. Nodes in the same state fragment alike, so the measure is computed once per
/// state a cycle sees, not once per node.
type NodeState<'a> = (u32, Vec<(u32, &'a str)>);

/// What a workload asks of a node's state: GPUs, thousandths of each, host CPU, allowed models.
type Shape<'a> = (u32, u32, u32, &'a str);

/// Deterministic, fast hashing for the placer's memos (the multiply-rotate hash of rustc's
/// `FxHasher`): the same on every host and in Wasm, and a fraction of SipHash's cost on the short
/// keys hashed here. Not for keys an adversary chooses — a tenant's own module only slows itself.
#[derive(Debug, Clone, Copy, Default)]
struct Fx(u64);

impl std::hash::Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }
    fn write_u8(&mut self, n: u8) {
        self.write_u64(u64::from(n));
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

type Fixed = std::hash::BuildHasherDefault<Fx>;
type Map<K, V> = std::collections::HashMap<K, V, Fixed>;

/// Fragmentation gradient descent (Weng et al., ATC '23) as a placement action: place a workload
/// where it adds the least expected fragmentation for the [`Workmix`] — exactly, ties to the
/// tightest node ([`new`](Self::new)), or by FGD's integer [`score`], ties in the fixed
/// [`node_order`] ([`scored`](Self::scored)). Whole GPUs, shares and CPU work on GPU nodes alike,
/// with host CPU counted (CPU work on a GPU node strands its GPUs for every kind that then lacks
/// the cores).
///
/// Built once per cycle (the mix is fixed for it). It interns each node state it meets and
/// remembers, per state and shape of work, the best it could add there, so a placement looks at
/// each node through two lookups and evaluates GPUs only on nodes that could beat the best so far.
/// A node's state is re-read when its free CPU or GPU thousandths moved, whoever placed there.
#[derive(Debug, Clone)]
pub struct FragPlacer<'a> {
    mix: Workmix<'a>,
    measured: Map<NodeState<'a>, f64>,
    /// Per node: (its state's id, free CPU and free thousandths when it was read).
    node_state: Vec<Option<(u32, u32, u32)>>,
    states: Vec<NodeState<'a>>,
    state_ids: Map<NodeState<'a>, u32>,
    /// Per (state, shape): the least it could add there and the free left, if it fits at all.
    best_on_state: Map<(u32, Shape<'a>), Option<(f64, u64)>>,
    /// The ready nodes by (state id, the most memory one of their GPUs has), built at the first
    /// placement: a placement weighs each group once, then looks at nodes of the best groups only.
    /// Each group's nodes as (place in the [`node_order`], index), first in that order first.
    groups: BTreeMap<(u32, u32), BTreeSet<(u64, u32)>>,
    /// Per node: its place in the [`node_order`] (all 0 unless scored).
    order: Vec<u64>,
    /// Compare by FGD's integer score, ties in the node order (else the exact gradient, ties to
    /// the tightest node).
    scored: bool,
    /// Per node: the group it is filed in.
    filed: Vec<Option<(u32, u32)>>,
    indexed: bool,
    /// Moves whenever a node changes group.
    version: u64,
    /// Per shape: the groups it fits, best bound first, as of a version.
    ranked: Map<Shape<'a>, (u64, Ranked)>,
}

/// How two placements compare, the least first: (added, free left, node) when exact, (100 −
/// score, place in the order, node) when scored.
type Key = (f64, u64, u32);

/// Groups with the least key any of their nodes could have for a shape: (key, group), best first.
type Ranked = std::rc::Rc<Vec<(Key, (u32, u32))>>;

impl<'a> FragPlacer<'a> {
    /// Compares placements by the exact gradient; ties go to the node left with the least free,
    /// then the lowest index.
    pub fn new(mix: Workmix<'a>) -> Self {
        FragPlacer::with(mix, false)
    }

    /// Compares placements by FGD's integer [`score`]; ties go to the first node in the fixed
    /// [`node_order`], as Weng et al.'s simulator breaks them.
    pub fn scored(mix: Workmix<'a>) -> Self {
        FragPlacer::with(mix, true)
    }

    fn with(mix: Workmix<'a>, scored: bool) -> Self {
        FragPlacer {
            mix,
            measured: Map::default(),
            node_state: Vec::new(),
            states: Vec::new(),
            state_ids: Map::default(),
            best_on_state: Map::default(),
            groups: BTreeMap::new(),
            order: Vec::new(),
            scored,
            filed: Vec::new(),
            indexed: false,
            version: 0,
            ranked: Map::default(),
        }
    }

    /// Files every ready node in its group, once.
    fn index(&mut self, plan: &Plan<'_, 'a>) {
        if self.indexed {
            return;
        }
        self.indexed = true;
        let snapshot = plan.snapshot();
        self.filed = vec![None; snapshot.nodes.len()];
        // Nodes with a container engine come after those without, so that among equal scores
        // plain work leaves them to container work (which runs nowhere else).
        self.order = snapshot
            .nodes
            .iter()
            .map(|n| if self.scored { node_order(n.name) >> 1 | u64::from(n.containers) << 63 } else { 0 })
            .collect();
        for (node, _) in snapshot.ready_nodes() {
            self.file(plan, node);
        }
    }

    /// Files `node` in the group of its state now.
    fn file(&mut self, plan: &Plan<'_, 'a>, node: u32) {
        let id = self.state_of(plan, node);
        let memory = plan.snapshot().node_gpus(node).filter(|(_, g)| !g.is_mig()).map(|(_, g)| g.memory_mb).max();
        let key = (id, memory.unwrap_or(0));
        let order = (self.order.get(node as usize).copied().unwrap_or(0), node);
        let Some(slot) = self.filed.get_mut(node as usize) else { return };
        if *slot == Some(key) {
            return;
        }
        if let Some(old) = slot.replace(key)
            && let Some(group) = self.groups.get_mut(&old)
        {
            group.remove(&order);
            if group.is_empty() {
                self.groups.remove(&old);
            }
        }
        self.groups.entry(key).or_default().insert(order);
        self.version += 1;
    }

    /// Tells the placer that work was placed on `node` (by it or otherwise), so its group is right
    /// for the next placement. (A node it was not told of is re-filed when next looked at.)
    pub fn placed(&mut self, plan: &Plan<'_, 'a>, node: u32) {
        if self.indexed {
            self.file(plan, node);
        }
    }

    pub fn mix(&self) -> &Workmix<'a> {
        &self.mix
    }

    fn measure(&mut self, state: &NodeState<'a>) -> f64 {
        if let Some(&f) = self.measured.get(state) {
            return f;
        }
        let f = self.mix.node_fragmentation(state.1.iter().copied(), state.0);
        self.measured.insert(state.clone(), f);
        f
    }

    /// The id of `node`'s state under `plan`, read again when its free CPU or GPUs moved.
    fn state_of(&mut self, plan: &Plan<'_, 'a>, node: u32) -> u32 {
        let snapshot = plan.snapshot();
        let cpu = plan.cpu_free(node);
        let milli: u32 = snapshot.node_gpus(node).map(|(g, _)| plan.free_milli(g)).sum();
        if self.node_state.len() < snapshot.nodes.len() {
            self.node_state.resize(snapshot.nodes.len(), None);
        }
        if let Some(Some((id, c, m))) = self.node_state.get(node as usize)
            && (*c, *m) == (cpu, milli)
        {
            return *id;
        }
        let state = (
            cpu,
            sorted(
                snapshot.node_gpus(node).filter(|(_, g)| !g.is_mig()).map(|(g, gpu)| (plan.free_milli(g), gpu.model)),
            ),
        );
        let id = match self.state_ids.get(&state) {
            Some(&id) => id,
            None => {
                let id = self.states.len() as u32;
                self.states.push(state.clone());
                self.state_ids.insert(state, id);
                id
            }
        };
        if let Some(slot) = self.node_state.get_mut(node as usize) {
            *slot = Some((id, cpu, milli));
        }
        id
    }

    /// The least `shape` could add on a node in state `id` if every GPU the state shows were open
    /// to it, and the free left then: a bound no node in that state can beat.
    fn bound(&mut self, id: u32, shape: Shape<'a>) -> Option<(f64, u64)> {
        if let Some(&known) = self.best_on_state.get(&(id, shape)) {
            return known;
        }
        let state = self.states[id as usize].clone();
        let (count, milli, cpu, models) = shape;
        let mut best: Option<(f64, u64)> = None;
        if state.0 >= cpu {
            let before = self.measure(&state);
            let share = count == 1 && milli < WHOLE_GPU_MILLI;
            let need = if share { milli } else { WHOLE_GPU_MILLI };
            // (positions in the state taken, thousandths taken from each)
            let mut options: Vec<(Vec<usize>, u32)> = Vec::new();
            if count == 0 {
                options.push((Vec::new(), 0));
            } else if share {
                let mut seen: Vec<(u32, &str)> = Vec::new();
                for (i, &(f, m)) in state.1.iter().enumerate() {
                    if f >= need && model_allowed(models, m) && !seen.contains(&(f, m)) {
                        seen.push((f, m));
                        options.push((vec![i], need));
                        // A free GPU that is not shared goes whole to a share.
                        if f >= WHOLE_GPU_MILLI {
                            options.push((vec![i], WHOLE_GPU_MILLI));
                        }
                    }
                }
            } else {
                let whole: Vec<usize> = (0..state.1.len())
                    .filter(|&i| state.1[i].0 >= WHOLE_GPU_MILLI && model_allowed(models, state.1[i].1))
                    .take(count as usize)
                    .collect();
                if whole.len() == count as usize {
                    options.push((whole, WHOLE_GPU_MILLI));
                }
            }
            for (taken, amount) in options {
                let after: NodeState<'a> =
                    (
                        state.0 - cpu,
                        sorted(state.1.iter().enumerate().map(|(i, &(f, m))| {
                            if taken.contains(&i) { (f.saturating_sub(amount), m) } else { (f, m) }
                        })),
                    );
                let left = after.1.iter().map(|&(f, _)| u64::from(f)).sum::<u64>() + u64::from(after.0) / 1000;
                let added = self.measure(&after) - before;
                if best.is_none_or(|b| (added, left) < b) {
                    best = Some((added, left));
                }
            }
        }
        self.best_on_state.insert((id, shape), best);
        best
    }

    /// The placement of `workload` on a ready node `allowed` says it may use (with its CPU and
    /// memory free, a node that can run it) adding the least expected fragmentation; `usable(gpu)`
    /// may rule out GPUs (say, ones reserved for the head of the queue). A share takes one
    /// shareable GPU with room (or a free GPU that is not shared, whole); whole-GPU work takes free
    /// GPUs that fit it, the tightest by memory; CPU work takes no GPU. Nodes are compared as the
    /// placer compares ([`new`](Self::new), [`scored`](Self::scored)); on a node, the GPUs adding
    /// the least (then leaving the least free) are taken. `None` when it fits nowhere, or asks
    /// for a MIG instance (which does not fragment capacity). Call [`placed`](Self::placed) after
    /// placing anything, so the next search starts from the right groups.
    pub fn place(
        &mut self,
        plan: &Plan<'_, 'a>,
        workload: u32,
        allowed: impl Fn(u32) -> bool,
        usable: impl Fn(u32) -> bool,
    ) -> Option<Placement> {
        let snapshot = plan.snapshot();
        let w = snapshot.workload(workload)?;
        if w.asks_mig() {
            return None;
        }
        let need = w.gpu_need();
        let shape: Shape<'a> = (need.count, need.milli, w.cpu_millis, w.gpu_models.trim());
        self.index(plan);
        let candidates = self.rank(shape);
        // (key, added, gpus): the least key wins.
        let mut best: Option<(Key, f64, Vec<u32>)> = None;
        let mut moved: Vec<u32> = Vec::new();
        for &(bound, key) in candidates.iter() {
            if need.count > 0 && need.memory_mb > key.1 {
                continue;
            }
            // No node of this group or a later one (the groups are in that order) beats the best.
            if best.as_ref().is_some_and(|b| b.0 <= bound) {
                break;
            }
            let Some(group) = self.groups.remove(&key) else { continue };
            for &(order, node) in &group {
                // The least this node could do: the group's bound, at its place.
                let least = if self.scored { (bound.0, order, node) } else { (bound.0, bound.1, node) };
                if best.as_ref().is_some_and(|b| b.0 <= least) {
                    break;
                }
                if !allowed(node)
                    || !plan.can_run(w, node)
                    || plan.cpu_free(node) < w.cpu_millis
                    || plan.memory_free(node) < w.memory_mb
                {
                    continue;
                }
                let id = self.state_of(plan, node);
                if id != key.0 {
                    moved.push(node);
                }
                if let Some((added, left, gpus)) = self.on_node(plan, w, &need, node, id, &usable) {
                    let candidate = self.key(added, left, order, node);
                    let met = id == key.0 && candidate <= least;
                    if best.as_ref().is_none_or(|b| candidate < b.0) {
                        best = Some((candidate, added, gpus));
                    }
                    // No later node of the group beats the bound this one met.
                    if met {
                        break;
                    }
                }
            }
            self.groups.insert(key, group);
        }
        for node in moved {
            self.file(plan, node);
        }
        best.map(|((_, _, node), added, gpus)| Placement { node, gpus, added })
    }

    /// The groups where `shape` fits, best bound first, then by their first node in the order: no
    /// node of a group can do better than its bound. Kept per shape until a node changes group.
    fn rank(&mut self, shape: Shape<'a>) -> Ranked {
        if let Some((version, ranked)) = self.ranked.get(&shape)
            && *version == self.version
        {
            return ranked.clone();
        }
        let keys: Vec<((u32, u32), (u64, u32))> =
            self.groups.iter().filter_map(|(key, group)| Some((*key, *group.first()?))).collect();
        let mut ranked: Vec<(Key, (u32, u32))> = Vec::new();
        for (key, (order, node)) in keys {
            if let Some((added, left)) = self.bound(key.0, shape) {
                ranked.push((self.key(added, left, order, node), key));
            }
        }
        ranked.sort_unstable_by(|x, y| x.partial_cmp(y).unwrap_or(std::cmp::Ordering::Equal));
        let ranked = std::rc::Rc::new(ranked);
        self.ranked.insert(shape, (self.version, ranked.clone()));
        ranked
    }

    /// How a placement adding `added` and leaving `left` free on `node` (at `order`) compares.
    fn key(&self, added: f64, left: u64, order: u64, node: u32) -> Key {
        if self.scored { (f64::from(100 - score(added)), order, node) } else { (added, left, node) }
    }

    /// The best placement on one node, the GPUs as they are (memory, reservations, sharing).
    fn on_node(
        &mut self,
        plan: &Plan<'_, 'a>,
        w: &crate::abi::Workload<'a>,
        need: &crate::view::GpuNeed<'_>,
        node: u32,
        id: u32,
        usable: &impl Fn(u32) -> bool,
    ) -> Option<(f64, u64, Vec<u32>)> {
        let snapshot = plan.snapshot();
        let state = self.states[id as usize].clone();
        let before = self.measure(&state);
        let gpus: Vec<(u32, u32, &'a str)> = snapshot
            .node_gpus(node)
            .filter(|(_, g)| !g.is_mig())
            .map(|(g, gpu)| (g, plan.free_milli(g), gpu.model))
            .collect();
        let cpu_after = state.0 - w.cpu_millis;
        let mut options: Vec<(Vec<u32>, u32)> = Vec::new();
        if need.count == 0 {
            options.push((Vec::new(), 0));
        } else if w.is_share() {
            let mut seen: Vec<(u32, &str, bool)> = Vec::new();
            for &(g, f, m) in &gpus {
                let gpu = &snapshot.gpus[g as usize];
                let shared = gpu.is_shareable();
                let fits = if shared { plan.fits_share(w, g) } else { plan.is_gpu_free(g) && need.fits(gpu) };
                if !usable(g) || !fits || seen.contains(&(f, m, shared)) {
                    continue;
                }
                seen.push((f, m, shared));
                options.push((vec![g], if shared { w.gpu_milli } else { WHOLE_GPU_MILLI }));
            }
        } else {
            let mut fitting: Vec<(u32, u32)> = plan
                .free_gpus(node)
                .filter(|(g, gpu)| !gpu.is_mig() && need.fits(gpu) && usable(*g))
                .map(|(g, gpu)| (gpu.memory_free_mb(), g))
                .collect();
            if (fitting.len() as u32) < need.count {
                return None;
            }
            fitting.sort_unstable();
            options.push((fitting.iter().take(need.count as usize).map(|&(_, g)| g).collect(), WHOLE_GPU_MILLI));
        }
        let mut best: Option<(f64, u64, Vec<u32>)> = None;
        for (taken, milli) in options {
            let after: NodeState<'a> = (
                cpu_after,
                sorted(
                    gpus.iter()
                        .map(|&(g, f, m)| if taken.contains(&g) { (f.saturating_sub(milli), m) } else { (f, m) }),
                ),
            );
            let left = after.1.iter().map(|&(f, _)| u64::from(f)).sum::<u64>() + u64::from(after.0) / 1000;
            let added = self.measure(&after) - before;
            if best.as_ref().is_none_or(|b| (added, left) < (b.0, b.1)) {
                best = Some((added, left, taken));
            }
        }
        best
    }
}

/// A node's GPUs as (free, model), sorted: the key of its state.
fn sorted<'m>(gpus: impl Iterator<Item = (u32, &'m str)>) -> Vec<(u32, &'m str)> {
    let mut v: Vec<(u32, &'m str)> = gpus.collect();
    v.sort_unstable();
    v
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{Sharing, decode_snapshot};
    use crate::owned::OwnedArrival;
    use crate::testing::SnapshotFixture;

    fn kind(milli: u32, count: u32, weight: f64) -> TaskKind<'static> {
        TaskKind { milli, count, cpu_millis: 0, models: "", weight }
    }

    fn any<const N: usize>(free: [u32; N]) -> impl Iterator<Item = (u32, &'static str)> + Clone {
        free.into_iter().map(|f| (f, "V100"))
    }

    #[test]
    fn a_share_cannot_use_a_sliver_smaller_than_itself() {
        // GPUs with 300, 600 and 1000 free; a half-GPU task can use the 600 and the 1000.
        assert_eq!(task_fragmentation(any([300, 600, 1000]), 0, &kind(500, 1, 1.0)), 300);
        // A quarter fits everywhere: nothing is fragmented for it.
        assert_eq!(task_fragmentation(any([300, 600, 1000]), 0, &kind(250, 1, 1.0)), 0);
    }

    #[test]
    fn whole_gpu_work_cannot_use_partly_held_gpus() {
        assert_eq!(task_fragmentation(any([300, 600, 1000, 1000]), 0, &kind(1000, 2, 1.0)), 900);
        // Three whole GPUs do not exist here: every free thousandth is fragmented for it.
        assert_eq!(task_fragmentation(any([300, 600, 1000, 1000]), 0, &kind(1000, 3, 1.0)), 2900);
    }

    #[test]
    fn a_node_without_the_cpu_is_all_fragment() {
        let needs_cpu = TaskKind { milli: 500, count: 1, cpu_millis: 4000, models: "", weight: 1.0 };
        assert_eq!(task_fragmentation(any([1000, 1000]), 3999, &needs_cpu), 2000);
        assert_eq!(task_fragmentation(any([1000, 1000]), 4000, &needs_cpu), 0);
    }

    #[test]
    fn a_node_of_a_model_the_kind_may_not_use_is_all_fragment_for_it() {
        let t4_only = TaskKind { milli: 1000, count: 1, cpu_millis: 0, models: "T4", weight: 1.0 };
        assert_eq!(task_fragmentation(any([1000, 500]), 0, &t4_only), 1500);
        let t4 = [(1000, "T4"), (500, "T4")];
        assert_eq!(task_fragmentation(t4.into_iter(), 0, &t4_only), 500);
    }

    #[test]
    fn the_expectation_weighs_each_kind_by_its_popularity() {
        let mix = Workmix::new([kind(500, 1, 3.0), kind(1000, 1, 1.0)]);
        assert!((mix.kinds()[0].weight - 0.75).abs() < 1e-12);
        // Half-GPU tasks: 300 fragmented; whole-GPU tasks: 300 fragmented.
        assert!((mix.node_fragmentation(any([300, 1000]), 0) - 300.0).abs() < 1e-9);
        assert_eq!(Workmix::default().node_fragmentation(any([300, 1000]), 0), 0.0);
    }

    #[test]
    fn the_mix_keeps_the_typical_kinds_and_drops_the_long_tail() {
        let mut fixture = SnapshotFixture::new().node("n", 200, "V100", 16384);
        for i in 0..96u32 {
            fixture = fixture.running(&format!("common{i}"), "n", &[i]);
        }
        for i in 0..4u32 {
            fixture = fixture.running(&format!("rare{i}"), "n", &[100 + 2 * i, 101 + 2 * i]);
        }
        // Work that has waited long is not what arrives next.
        for i in 0..50 {
            fixture = fixture.pending(&format!("stuck{i}"), 8, 0);
        }
        let bytes = fixture.encode();
        let snapshot = decode_snapshot(&bytes).unwrap();
        let mix = Workmix::of(&snapshot);
        assert_eq!(mix.kinds().len(), 1, "{mix:?}");
        assert_eq!(mix.kinds()[0].count, 1);
    }

    #[test]
    fn the_hosts_record_of_arrivals_is_the_mix_when_it_keeps_one() {
        // The queue holds only a whole-GPU job, but the week brought mostly quarter shares and
        // CPU-only pods: the mix is the week's, weighted by how often each shape came.
        let fixture = SnapshotFixture::new().node("n", 8, "V100", 16384).pending("one", 1, 0).edit(|doc| {
            doc.arrivals = vec![
                OwnedArrival { gpu_milli: 250, gpu_count: 1, cpu_millis: 2000, count: 60, gpu_models: String::new() },
                OwnedArrival { gpu_milli: 0, gpu_count: 0, cpu_millis: 8000, count: 30, gpu_models: String::new() },
                OwnedArrival { gpu_milli: 1000, gpu_count: 8, cpu_millis: 0, count: 10, gpu_models: "V100".into() },
            ];
        });
        let bytes = fixture.encode();
        let snapshot = decode_snapshot(&bytes).unwrap();
        let mix = Workmix::of(&snapshot);
        let kinds: Vec<(u32, u32, f64)> = mix.kinds().iter().map(|k| (k.milli, k.count, k.weight)).collect();
        assert_eq!(kinds.len(), 2, "{mix:?}");
        assert_eq!((kinds[0].0, kinds[0].1), (250, 1));
        assert!((kinds[0].2 - 0.6).abs() < 1e-9 && (mix.cpu_only() - 0.3).abs() < 1e-9, "{mix:?}");
        assert_eq!((kinds[1].0, kinds[1].1, mix.kinds()[1].models), (1000, 8, "V100"));
        // Without the record, the queue's own work.
        let bytes = SnapshotFixture::new().node("n", 8, "V100", 16384).running("one", "n", &[0]).encode();
        let bare = decode_snapshot(&bytes).unwrap();
        let kinds: Vec<(u32, u32)> = Workmix::of(&bare).kinds().iter().map(|k| (k.milli, k.count)).collect();
        assert_eq!(kinds, [(1000, 1)]);
    }

    /// The fleet's whole expected fragmentation under a plan: what brute force minimises.
    fn fleet_fragmentation(plan: &Plan<'_, '_>, mix: &Workmix<'_>) -> f64 {
        let snapshot = plan.snapshot();
        (0..snapshot.nodes.len() as u32)
            .map(|node| {
                let free: Vec<(u32, &str)> =
                    snapshot.node_gpus(node).map(|(g, gpu)| (plan.free_milli(g), gpu.model)).collect();
                mix.node_fragmentation(free.into_iter(), plan.cpu_free(node))
            })
            .sum()
    }

    #[test]
    fn the_placer_finds_what_brute_force_over_every_placement_finds() {
        // A small shared fleet in a messy state, and a workload of every kind: the placer's choice
        // adds exactly the least fragmentation of all the placements the plan would accept, and
        // the scored placer's scores as well as that.
        let fixture = SnapshotFixture::new()
            .node("a", 4, "V100", 16384)
            .node("b", 2, "T4", 16384)
            .node("c", 4, "V100", 16384)
            .sharing("a", Sharing::Mps)
            .sharing("b", Sharing::Mps)
            .sharing("c", Sharing::Mps)
            .running_share("r1", "a", 0, 300, 0)
            .running_share("r2", "a", 1, 700, 0)
            .running_share("r3", "b", 0, 500, 0)
            .running_share("r4", "c", 2, 250, 0)
            .running("r5", "c", &[0])
            .pending_share("half", 500, 0)
            .pending_share("fifth", 200, 0)
            .pending("one", 1, 0)
            .pending("two", 2, 0)
            .pending_with("cpu", 0, 0, |w| w.cpu_millis = 2000)
            .pending_with("t4", 1, 0, |w| w.gpu_models = "T4".into());
        let bytes = fixture.encode();
        let snapshot = decode_snapshot(&bytes).unwrap();
        let mix = Workmix::new([
            kind(500, 1, 4.0),
            kind(1000, 2, 1.0),
            TaskKind { milli: 250, count: 1, cpu_millis: 3000, models: "", weight: 2.0 },
            TaskKind { milli: 1000, count: 1, cpu_millis: 0, models: "T4", weight: 1.0 },
        ]);
        let mut placer = FragPlacer::new(mix.clone());
        let mut scored_placer = FragPlacer::scored(mix.clone());
        let plan = Plan::new(&snapshot);
        let before = fleet_fragmentation(&plan, &mix);
        for (index, w) in snapshot.workloads.iter().enumerate().filter(|(_, w)| w.is_pending()) {
            let index = index as u32;
            let chosen = placer.place(&plan, index, |_| true, |_| true).expect("fits somewhere");
            // Brute force: every node, every GPU set of the right size the plan accepts.
            let mut least = f64::INFINITY;
            for node in 0..3u32 {
                let gpus: Vec<u32> = snapshot.node_gpus(node).map(|(g, _)| g).collect();
                let count = w.gpu_count as usize;
                let mut sets: Vec<Vec<u32>> = vec![Vec::new()];
                for _ in 0..count {
                    let mut next = Vec::new();
                    for set in &sets {
                        for &g in gpus.iter().filter(|&&g| set.last().is_none_or(|&l| g > l)) {
                            let mut longer = set.clone();
                            longer.push(g);
                            next.push(longer);
                        }
                    }
                    sets = next;
                }
                for set in sets {
                    let mut trial = plan.clone();
                    if trial.place(index, node, set, "trial").is_ok() {
                        least = least.min(fleet_fragmentation(&trial, &mix) - before);
                    }
                }
            }
            assert!(
                (chosen.added - least).abs() < 1e-9,
                "{}: placer adds {}, the least is {least}",
                w.name,
                chosen.added
            );
            let scored = scored_placer.place(&plan, index, |_| true, |_| true).expect("fits somewhere");
            assert_eq!(score(scored.added), score(least), "{}: scored placer adds {}", w.name, scored.added);
            let mut trial = plan.clone();
            trial.place(index, chosen.node, chosen.gpus.clone(), "chosen").expect("the plan accepts it");
            assert!((fleet_fragmentation(&trial, &mix) - before - chosen.added).abs() < 1e-9);
        }
    }

    #[test]
    fn work_without_gpus_is_a_kind_of_the_mix_for_which_every_free_gpu_is_fragment() {
        // Three GPU tasks of one kind and one CPU-only task: a quarter of the mix uses no GPU.
        let mix = Workmix::typical([(500, 1, 0, ""), (500, 1, 0, ""), (500, 1, 0, ""), (0, 0, 4000, "")]);
        assert_eq!(mix.kinds().len(), 1);
        assert!((mix.cpu_only() - 0.25).abs() < 1e-12, "{mix:?}");
        // 300 is fragment for the half-GPU kind; all 1300 free for the CPU-only one.
        let expected = 0.75 * 300.0 + 0.25 * 1300.0;
        assert!((mix.node_fragmentation(any([300, 1000]), 0) - expected).abs() < 1e-9);
    }

    #[test]
    fn placements_score_as_the_fgd_plugin_scores_them() {
        assert_eq!(score(0.0), 50);
        // Reducing fragmentation by a whole GPU: σ(1) = 0.731.
        assert_eq!(score(-1000.0), 73);
        assert_eq!(score(1000.0), 26);
        // Within about 0.04 GPU of zero, placements tie.
        assert_eq!(score(-30.0), score(0.0));
        assert_eq!(score(f64::INFINITY), 0);
        assert_eq!(score(f64::NEG_INFINITY), 100);
    }

    #[test]
    fn equally_scored_nodes_are_chosen_in_the_fixed_order_not_by_index() {
        // Eight empty, identical nodes: a whole GPU scores the same on each, so the first node in
        // the order of names takes it, whatever its index; and a node that fills changes nothing
        // for the others.
        let mut fixture = SnapshotFixture::new();
        let names: Vec<String> = (0..8).map(|i| format!("node-{i}")).collect();
        for name in &names {
            fixture = fixture.node(name, 4, "V100", 16384);
        }
        let bytes = fixture.pending("one", 1, 0).encode();
        let snapshot = decode_snapshot(&bytes).unwrap();
        let mut placer = FragPlacer::scored(Workmix::new([kind(1000, 1, 1.0)]));
        let plan = Plan::new(&snapshot);
        let index = snapshot.workloads.iter().position(|w| w.name == "one").unwrap() as u32;
        let chosen = placer.place(&plan, index, |_| true, |_| true).expect("fits");
        let first = (0..8u32).min_by_key(|&n| node_order(&names[n as usize])).unwrap();
        assert_eq!(chosen.node, first);
        assert_ne!(node_order("node-0"), node_order("node-1"));
    }

    #[test]
    fn the_gradient_keeps_a_whole_gpu_whole_where_best_fit_would_not_care() {
        // Mix: mostly half-GPU work. Node A has a GPU with 700 free; node B a GPU with 500 free.
        // A 200 task: best fit picks B (leaves 300); but 300 fits no half-GPU task, while A's
        // remaining 500 still does. The gradient picks A.
        let mix = Workmix::new([kind(500, 1, 1.0)]);
        let delta = |before: [u32; 1], after: [u32; 1]| {
            mix.node_fragmentation(any(after), 0) - mix.node_fragmentation(any(before), 0)
        };
        let on_a = delta([700], [500]);
        let on_b = delta([500], [300]);
        assert!(on_a < on_b, "A adds {on_a}, B adds {on_b}");
    }
}
