//! A cycle's decisions in the making, keeping track of what they have already taken, so a policy
//! never places one GPU twice or decides one workload twice.
//!
//! ```
//! use airtime_policy_sdk::plan::Plan;
//! use airtime_policy_sdk::testing::SnapshotFixture;
//!
//! let fixture = SnapshotFixture::new().node("n1", 2, "H100", 81920).pending("a", 2, 1000).pending("b", 1, 1000);
//! let bytes = fixture.encode();
//! let snapshot = airtime_policy_sdk::abi::decode_snapshot(&bytes).unwrap();
//! let mut plan = Plan::new(&snapshot);
//! plan.place(0, 0, vec![0, 1], "both GPUs").unwrap();
//! // GPU 0 is taken by the first decision:
//! let error = plan.place(1, 0, vec![0], "again").unwrap_err();
//! assert_eq!(error.to_string(), "cannot place workload 1 (b): GPU 0 (n1 device 0) is already taken");
//! plan.keep_pending(1, "no free GPU").unwrap();
//! assert_eq!(plan.into_decisions().len(), 2);
//! ```

use std::borrow::Cow;
use std::fmt;

use crate::abi::{Decision, Gpu, Snapshot, WHOLE_GPU_MILLI};

/// Decisions so far, and what they took.
#[derive(Debug, Clone)]
pub struct Plan<'s, 'a> {
    snapshot: &'s Snapshot<'a>,
    /// Thousandths of each GPU held or given (1000: not free for whole-GPU work at all).
    milli_taken: Vec<u32>,
    /// Memory slices reserved on each GPU, MiB (held and given).
    memory_reserved: Vec<u32>,
    free_on_node: Vec<u32>,
    cpu_free: Vec<u32>,
    memory_free: Vec<u32>,
    decided: Vec<bool>,
    free_total: u32,
    decisions: Vec<Decision<'a>>,
}

/// A decision the plan refused: it would take something already taken or decide twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanError {
    message: String,
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for PlanError {}

impl<'s, 'a> Plan<'s, 'a> {
    /// A plan with nothing decided: GPUs held by workloads are taken, the rest free; CPU and memory
    /// as the nodes report them.
    pub fn new(snapshot: &'s Snapshot<'a>) -> Self {
        let milli_taken: Vec<u32> = snapshot.gpus.iter().map(|g| WHOLE_GPU_MILLI - g.free_share_milli()).collect();
        let memory_reserved: Vec<u32> = snapshot.gpus.iter().map(|g| g.memory_reserved_mb).collect();
        let mut free_on_node = vec![0u32; snapshot.nodes.len()];
        let mut free_total = 0;
        for gpu in snapshot.gpus.iter().filter(|g| g.is_free()) {
            if let Some(count) = free_on_node.get_mut(gpu.node as usize) {
                *count += 1;
                if snapshot.node(gpu.node).is_some_and(|n| n.is_ready()) {
                    free_total += 1;
                }
            }
        }
        Plan {
            snapshot,
            milli_taken,
            memory_reserved,
            free_on_node,
            cpu_free: snapshot.nodes.iter().map(|n| n.cpu_millis_free).collect(),
            memory_free: snapshot.nodes.iter().map(|n| n.memory_mb_free).collect(),
            decided: vec![false; snapshot.workloads.len()],
            free_total,
            decisions: Vec::new(),
        }
    }

    /// The snapshot this plan is for.
    pub fn snapshot(&self) -> &'s Snapshot<'a> {
        self.snapshot
    }

    /// Whether `node` can run `workload` at all ([`crate::abi::Node::can_run`]).
    pub fn can_run(&self, workload: &crate::abi::Workload<'_>, node: u32) -> bool {
        self.snapshot.node(node).is_some_and(|n| n.can_run(workload))
    }

    /// Neither held (not even a share of it) by a workload nor taken by a decision of this plan.
    pub fn is_gpu_free(&self, gpu: u32) -> bool {
        self.milli_taken.get(gpu as usize).is_some_and(|&taken| taken == 0)
    }

    /// Thousandths of `gpu` neither held nor given by this plan (0 for an unknown index).
    pub fn free_milli(&self, gpu: u32) -> u32 {
        self.milli_taken.get(gpu as usize).map_or(0, |&taken| WHOLE_GPU_MILLI.saturating_sub(taken))
    }

    /// Memory of `gpu` a new share could reserve after this plan's placements, MiB.
    pub fn share_memory_free(&self, gpu: u32) -> u32 {
        match (self.snapshot.gpu(gpu), self.memory_reserved.get(gpu as usize)) {
            (Some(g), Some(&reserved)) => g.memory_mb.saturating_sub(g.memory_used_mb.max(reserved)),
            _ => 0,
        }
    }

    /// Whether `workload` (a share of one GPU) fits on `gpu` as a share now: a shareable GPU of an
    /// allowed model with its thousandths and memory slice unreserved.
    pub fn fits_share(&self, workload: &crate::abi::Workload<'_>, gpu: u32) -> bool {
        self.snapshot
            .gpu(gpu)
            .is_some_and(|g| workload.gpu_need().fits_share(g, self.free_milli(gpu), self.share_memory_free(gpu)))
    }

    /// Whether placing `workload` on `gpu` would take a share only (it asks for a fraction and the
    /// GPU is shareable), rather than the whole GPU.
    fn takes_share(&self, workload: &crate::abi::Workload<'_>, gpu: u32) -> bool {
        workload.is_share() && self.snapshot.gpu(gpu).is_some_and(Gpu::is_shareable)
    }

    /// `(gpu index, gpu)` for the GPUs of `node` still free in this plan.
    pub fn free_gpus(&self, node: u32) -> impl Iterator<Item = (u32, &'s Gpu<'a>)> + '_ {
        self.snapshot.node_gpus(node).filter(|(i, _)| self.is_gpu_free(*i))
    }

    /// How many GPUs of `node` are still free in this plan.
    pub fn free_gpu_count(&self, node: u32) -> u32 {
        self.free_on_node.get(node as usize).copied().unwrap_or(0)
    }

    /// Free GPUs left on ready nodes, fleet-wide.
    pub fn free_gpu_total(&self) -> u32 {
        self.free_total
    }

    /// CPU (thousandths of a core) still free on `node` after this plan's placements.
    pub fn cpu_free(&self, node: u32) -> u32 {
        self.cpu_free.get(node as usize).copied().unwrap_or(0)
    }

    /// Memory (MiB) still free on `node` after this plan's placements.
    pub fn memory_free(&self, node: u32) -> u32 {
        self.memory_free.get(node as usize).copied().unwrap_or(0)
    }

    /// Whether `workload` already has a decision.
    pub fn is_decided(&self, workload: u32) -> bool {
        self.decided.get(workload as usize).copied().unwrap_or(false)
    }

    /// Places `workload` on `node` using `gpus` (none: a CPU placement), taking them and the
    /// workload's `cpu_millis` and `memory_mb` from the node, which must have them free: the host
    /// reserves host CPU and memory for every placement.
    ///
    /// Refused (and nothing taken) if the workload is unknown or already decided, the node unknown
    /// or short of CPU or memory, a GPU unknown, on another node, listed twice or already taken.
    pub fn place(
        &mut self,
        workload: u32,
        node: u32,
        gpus: Vec<u32>,
        reason: impl Into<Cow<'a, str>>,
    ) -> Result<(), PlanError> {
        let w = self.check_undecided(workload, "place")?;
        let refuse =
            |why: String| PlanError { message: format!("cannot place workload {workload} ({}): {why}", w.name) };
        let Some(n) = self.snapshot.node(node) else {
            return Err(refuse(format!("no node {node} (the snapshot has {})", self.snapshot.nodes.len())));
        };
        if !n.can_run(w) {
            return Err(refuse(format!("it runs in a container and {} has no container engine", n.name)));
        }
        for (position, &gpu) in gpus.iter().enumerate() {
            let Some(g) = self.snapshot.gpu(gpu) else {
                return Err(refuse(format!("no GPU {gpu} (the snapshot has {})", self.snapshot.gpus.len())));
            };
            if g.node != node {
                return Err(refuse(format!("GPU {gpu} is on node {}, not {}", g.node, n.name)));
            }
            if gpus.get(..position).is_some_and(|before| before.contains(&gpu)) {
                return Err(refuse(format!("GPU {gpu} is listed twice")));
            }
            if self.takes_share(w, gpu) {
                if !self.fits_share(w, gpu) {
                    return Err(refuse(format!(
                        "GPU {gpu} ({} device {}) has {}/1000 and {} MiB unreserved; it needs {}/1000 and {} MiB",
                        n.name,
                        g.device_index,
                        self.free_milli(gpu),
                        self.share_memory_free(gpu),
                        w.gpu_milli,
                        w.gpu_memory_mb
                    )));
                }
            } else if !self.is_gpu_free(gpu) {
                return Err(refuse(format!("GPU {gpu} ({} device {}) is already taken", n.name, g.device_index)));
            }
        }
        let (cpu, memory) = (self.cpu_free(node), self.memory_free(node));
        if cpu < w.cpu_millis || memory < w.memory_mb {
            return Err(refuse(format!(
                "{} has {cpu} mCPU and {memory} MiB free; it needs {} mCPU and {} MiB",
                n.name, w.cpu_millis, w.memory_mb
            )));
        }
        if let Some(c) = self.cpu_free.get_mut(node as usize) {
            *c -= w.cpu_millis;
        }
        if let Some(m) = self.memory_free.get_mut(node as usize) {
            *m -= w.memory_mb;
        }
        let mut newly_taken = 0u32;
        for &gpu in &gpus {
            let share = self.takes_share(w, gpu);
            let Some(taken) = self.milli_taken.get_mut(gpu as usize) else { continue };
            if *taken == 0 {
                newly_taken += 1;
            }
            if share {
                *taken = taken.saturating_add(w.gpu_milli).min(WHOLE_GPU_MILLI);
                if let Some(reserved) = self.memory_reserved.get_mut(gpu as usize) {
                    *reserved = reserved.saturating_add(w.gpu_memory_mb);
                }
            } else {
                *taken = WHOLE_GPU_MILLI;
            }
        }
        if let Some(free) = self.free_on_node.get_mut(node as usize) {
            *free = free.saturating_sub(newly_taken);
        }
        if n.is_ready() {
            self.free_total = self.free_total.saturating_sub(newly_taken);
        }
        self.mark(workload);
        self.decisions.push(Decision::place(workload, node, gpus, reason));
        Ok(())
    }

    /// The first of `nodes` (in the order given; pass `snapshot.ready_nodes()`' indexes for the
    /// snapshot's order) where `workload` fits now: the CPU and memory free, and — for GPU work — as
    /// many free GPUs as it needs of an allowed model with the memory, the lowest-indexed ones (for a
    /// share of one GPU, the first shareable GPU with room for it, else a free whole GPU).
    /// What [`place`](Self::place) would accept, so first-fit policies need no index of their own.
    pub fn first_fit(&self, workload: u32, nodes: impl IntoIterator<Item = u32>) -> Option<(u32, Vec<u32>)> {
        let w = self.snapshot.workload(workload)?;
        let need = w.gpu_need();
        nodes.into_iter().find_map(|node| {
            if !self.can_run(w, node) || self.cpu_free(node) < w.cpu_millis || self.memory_free(node) < w.memory_mb {
                return None;
            }
            if need.count == 0 {
                return Some((node, Vec::new()));
            }
            if w.is_share()
                && let Some((gpu, _)) = self.snapshot.node_gpus(node).find(|(g, _)| self.fits_share(w, *g))
            {
                return Some((node, vec![gpu]));
            }
            if self.free_gpu_count(node) < need.count {
                return None;
            }
            let gpus: Vec<u32> = self
                .free_gpus(node)
                .filter(|(_, gpu)| need.fits(gpu))
                .map(|(i, _)| i)
                .take(need.count as usize)
                .collect();
            (gpus.len() == need.count as usize).then_some((node, gpus))
        })
    }

    /// The GPUs `workload` would take on `node` if it fits there now, host CPU and memory too: none
    /// for CPU work; for a share, the GPU `rank` puts first of those that hold it (a shareable GPU
    /// with room, or a free GPU that is not shared, taken whole); for whole GPUs, the first free ones
    /// that fit, in device order. `None` where it does not fit.
    pub fn gpus_on<K: Ord>(&self, workload: u32, node: u32, rank: impl Fn(u32) -> K) -> Option<Vec<u32>> {
        let w = self.snapshot.workload(workload)?;
        if !self.can_run(w, node) || self.cpu_free(node) < w.cpu_millis || self.memory_free(node) < w.memory_mb {
            return None;
        }
        let need = w.gpu_need();
        if need.count == 0 {
            return Some(Vec::new());
        }
        if w.is_share() {
            return self
                .snapshot
                .node_gpus(node)
                .filter(
                    |&(g, gpu)| {
                        if gpu.is_shareable() { self.fits_share(w, g) } else { self.is_gpu_free(g) && need.fits(gpu) }
                    },
                )
                .min_by_key(|&(g, _)| (rank(g), g))
                .map(|(g, _)| vec![g]);
        }
        let gpus: Vec<u32> =
            self.free_gpus(node).filter(|(_, gpu)| need.fits(gpu)).map(|(g, _)| g).take(need.count as usize).collect();
        (gpus.len() == need.count as usize).then_some(gpus)
    }

    /// For a share of one GPU: the shareable GPU on one of `nodes` (with the workload's CPU and
    /// memory free) that the share fills tightest — the least free left on it (best fit), then the
    /// lowest index. `None` when no shareable GPU has room (or `workload` is not a share).
    pub fn best_fit_share(&self, workload: u32, nodes: impl IntoIterator<Item = u32>) -> Option<(u32, u32)> {
        let w = self.snapshot.workload(workload).filter(|w| w.is_share())?;
        nodes
            .into_iter()
            .filter(|&node| {
                self.can_run(w, node) && self.cpu_free(node) >= w.cpu_millis && self.memory_free(node) >= w.memory_mb
            })
            .flat_map(|node| self.snapshot.node_gpus(node).map(move |(g, _)| (node, g)))
            .filter(|&(_, g)| self.fits_share(w, g))
            .min_by_key(|&(_, g)| (self.free_milli(g), g))
    }

    /// Preempts `workload` (its GPUs stay taken for this cycle: they free up once it has stopped).
    /// Refused if it is not running or not preemptible, as the host would refuse it.
    pub fn preempt(&mut self, workload: u32, reason: impl Into<Cow<'a, str>>) -> Result<(), PlanError> {
        let w = self.check_undecided(workload, "preempt")?;
        if !w.is_running() || !w.preemptible {
            let why = if w.is_running() { "not preemptible".to_owned() } else { format!("{}, not running", w.state) };
            return Err(PlanError { message: format!("cannot preempt workload {workload} ({}): it is {why}", w.name) });
        }
        self.mark(workload);
        self.decisions.push(Decision::preempt(workload, reason));
        Ok(())
    }

    /// Keeps `workload` pending.
    pub fn keep_pending(&mut self, workload: u32, reason: impl Into<Cow<'a, str>>) -> Result<(), PlanError> {
        self.check_undecided(workload, "keep pending")?;
        self.mark(workload);
        self.decisions.push(Decision::keep_pending(workload, reason));
        Ok(())
    }

    /// The decisions so far, in the order made.
    pub fn decisions(&self) -> &[Decision<'a>] {
        &self.decisions
    }

    /// The decisions, in the order made — but a gang's members placed while another member of the
    /// gang was not are kept pending instead (the host would refuse them: a gang is placed whole or
    /// not at all; [`crate::gang`]).
    pub fn into_decisions(self) -> Vec<Decision<'a>> {
        let snapshot = self.snapshot;
        if !snapshot.workloads.iter().any(|w| w.in_gang()) {
            return self.decisions;
        }
        let gangs = crate::gang::Gangs::of(snapshot);
        let mut is_placed = vec![false; snapshot.workloads.len()];
        for d in &self.decisions {
            if matches!(d.action, crate::abi::Action::Place { .. })
                && let Some(p) = is_placed.get_mut(d.workload as usize)
            {
                *p = true;
            }
        }
        let placed = |i: u32| is_placed.get(i as usize).copied().unwrap_or(false);
        let partial: Vec<&str> = gangs
            .iter()
            .filter(|(_, members)| {
                let n = members.iter().filter(|&&m| placed(m)).count();
                n > 0
                    && (n < members.len() || (members.len() as u32) < snapshot.workloads[members[0] as usize].gang_size)
            })
            .map(|(id, _)| id)
            .collect();
        if partial.is_empty() {
            return self.decisions;
        }
        self.decisions
            .into_iter()
            .map(|d| {
                let w = &snapshot.workloads[d.workload as usize];
                if w.in_gang() && partial.contains(&w.gang_id) && matches!(d.action, crate::abi::Action::Place { .. }) {
                    Decision::keep_pending(
                        d.workload,
                        "the rest of its gang was not placed: a gang runs whole or not at all",
                    )
                } else {
                    d
                }
            })
            .collect()
    }

    /// Takes back the last decision if it is a placement, returning what it took to the plan
    /// (`false`, changing nothing, when the last decision is not a placement) — how a gang that
    /// does not fit whole leaves no member placed.
    pub fn unplace_last(&mut self) -> bool {
        let Some(Decision { workload, action: crate::abi::Action::Place { node, gpus }, .. }) = self.decisions.last()
        else {
            return false;
        };
        let (workload, node, gpus) = (*workload, *node, gpus.clone());
        let Some(w) = self.snapshot.workload(workload) else { return false };
        self.decisions.pop();
        if let Some(c) = self.cpu_free.get_mut(node as usize) {
            *c += w.cpu_millis;
        }
        if let Some(m) = self.memory_free.get_mut(node as usize) {
            *m += w.memory_mb;
        }
        let mut freed = 0u32;
        for &gpu in &gpus {
            let share = self.takes_share(w, gpu);
            let Some(taken) = self.milli_taken.get_mut(gpu as usize) else { continue };
            if share {
                *taken = taken.saturating_sub(w.gpu_milli);
                if let Some(reserved) = self.memory_reserved.get_mut(gpu as usize) {
                    *reserved = reserved.saturating_sub(w.gpu_memory_mb);
                }
            } else {
                *taken = 0;
            }
            if *taken == 0 {
                freed += 1;
            }
        }
        if let Some(free) = self.free_on_node.get_mut(node as usize) {
            *free += freed;
        }
        if self.snapshot.node(node).is_some_and(|n| n.is_ready()) {
            self.free_total += freed;
        }
        if let Some(decided) = self.decided.get_mut(workload as usize) {
            *decided = false;
        }
        true
    }

    fn check_undecided(&self, workload: u32, what: &str) -> Result<&'s crate::abi::Workload<'a>, PlanError> {
        let Some(w) = self.snapshot.workload(workload) else {
            return Err(PlanError {
                message: format!(
                    "cannot {what} workload {workload}: the snapshot has {} workloads",
                    self.snapshot.workloads.len()
                ),
            });
        };
        if self.is_decided(workload) {
            return Err(PlanError {
                message: format!("cannot {what} workload {workload} ({}): it already has a decision", w.name),
            });
        }
        Ok(w)
    }

    fn mark(&mut self, workload: u32) {
        if let Some(decided) = self.decided.get_mut(workload as usize) {
            *decided = true;
        }
    }
}
