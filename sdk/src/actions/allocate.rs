//! Allocation: where a workload goes, by best fit or by the least fragmenting fit, with the
//! fleet's indexes kept current as the cycle places work, so each placement looks at the tightest
//! candidates instead of the whole fleet.

use crate::abi::{Node, Snapshot, Workload};
use crate::fit::{NodeRoom, NodesByFree, RoomIndex};
use crate::frag::{FragPlacer, Workmix};
use crate::gang::{GangReadiness, Gangs};
use crate::plan::{Plan, PlanError};
use crate::view::GpuNeed;

/// How GPU work is placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// Where it adds the least expected fragmentation for the work that typically arrives (Weng et
    /// al.'s FGD: [`FragPlacer`]) — whole GPUs, shares, and CPU work on GPU nodes.
    LeastFragmenting,
    /// As [`LeastFragmenting`](Self::LeastFragmenting), placements compared by FGD's integer score
    /// and ties spread in a fixed order of the nodes, as Weng et al.'s simulator does
    /// ([`FragPlacer::scored`]).
    FgdScore,
    /// The node with the fewest free GPUs left, the fullest GPU a share fits on.
    BestFit,
}

impl Fit {
    /// Placed by fragmentation gradient descent (exactly or by score).
    pub fn by_fragmentation(self) -> bool {
        matches!(self, Fit::LeastFragmenting | Fit::FgdScore)
    }
}

/// Where an allocation puts a workload, and how it was chosen (for the decision's reason).
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    pub node: u32,
    pub gpus: Vec<u32>,
    pub how: String,
}

/// The allocator of one cycle.
pub struct Allocator<'s> {
    fit: Fit,
    /// Built at the first placement that asks, so a cycle that places nothing pays nothing for it.
    placer: Option<FragPlacer<'s>>,
    /// Ready nodes by free GPUs.
    free: NodesByFree,
    /// Built at the first CPU placement that asks: a cycle with no CPU work sorts nothing for it.
    cpu: Option<CpuRoom>,
}

struct CpuRoom {
    /// Ready CPU-only nodes, the least free CPU first, then the cheapest.
    cpu_only: RoomIndex,
    /// Every ready node, the least free CPU first.
    every: RoomIndex,
}

fn room(plan: &Plan<'_, '_>, node: u32, tie: u64) -> NodeRoom {
    NodeRoom { node, tier: 0, cpu: plan.cpu_free(node), memory: plan.memory_free(node), tie }
}

/// A node's cost per hour in cents, the tie-break between CPU nodes of equal free CPU.
fn cents(n: &Node<'_>) -> u64 {
    u64::from((n.cost_per_hour * 100.0) as u32)
}

impl<'s> Allocator<'s> {
    pub fn new(plan: &Plan<'_, 's>, fit: Fit) -> Self {
        Allocator { fit, placer: None, free: NodesByFree::of_ready_nodes(plan.snapshot(), plan), cpu: None }
    }

    pub fn fit(&self) -> Fit {
        self.fit
    }

    fn placer(&mut self, snapshot: &Snapshot<'s>) -> &mut FragPlacer<'s> {
        let scored = self.fit == Fit::FgdScore;
        self.placer.get_or_insert_with(|| {
            if scored { FragPlacer::scored(Workmix::of(snapshot)) } else { FragPlacer::new(Workmix::of(snapshot)) }
        })
    }

    fn cpu_room(&mut self, plan: &Plan<'_, '_>) -> &CpuRoom {
        self.cpu.get_or_insert_with(|| {
            let snapshot = plan.snapshot();
            let cpu_only =
                snapshot.ready_nodes().filter(|(_, n)| n.gpu_count == 0).map(|(node, n)| room(plan, node, cents(n)));
            CpuRoom {
                cpu_only: RoomIndex::new(snapshot.nodes.len(), cpu_only),
                every: RoomIndex::new(
                    snapshot.nodes.len(),
                    snapshot.ready_nodes().map(|(node, _)| room(plan, node, 0)),
                ),
            }
        })
    }

    /// A node for `w` on CPU: a ready CPU-only node with room for its CPU and memory (the tightest,
    /// then the cheapest); for CPU-only work, failing that, a GPU node — where its cores strand the
    /// least GPU capacity when placing least fragmenting, the tightest otherwise.
    pub fn cpu(&mut self, plan: &Plan<'_, 's>, workload: u32) -> Option<u32> {
        let snapshot = plan.snapshot();
        let w = snapshot.workload(workload)?;
        let can_run = |node: u32| snapshot.node(node).is_some_and(|n| n.can_run(w));
        let cpu = self.cpu_room(plan);
        if let Some(node) = cpu.cpu_only.best(w.cpu_millis, w.memory_mb, can_run) {
            return Some(node);
        }
        if w.needs_gpu() {
            return None;
        }
        let node = cpu.every.best(w.cpu_millis, w.memory_mb, can_run)?;
        if self.fit.by_fragmentation() {
            return self.placer(snapshot).place(plan, workload, |_| true, |_| true).map(|p| p.node);
        }
        Some(node)
    }

    /// A share of one GPU on a node `allowed` admits: the shareable GPU where it adds the least
    /// fragmentation, or the fullest one that holds it (best fit).
    pub fn share(&mut self, plan: &Plan<'_, 's>, workload: u32, allowed: impl Fn(u32) -> bool) -> Option<Allocation> {
        let snapshot = plan.snapshot();
        match self.fit {
            Fit::LeastFragmenting | Fit::FgdScore => self
                .placer(snapshot)
                .place(plan, workload, allowed, |g| snapshot.gpus[g as usize].is_shareable())
                .map(|p| Allocation { node: p.node, gpus: p.gpus, how: fragment_words(p.added) }),
            Fit::BestFit => {
                let open = snapshot.ready_nodes().map(|(node, _)| node).filter(|&n| allowed(n));
                plan.best_fit_share(workload, open).map(|(node, gpu)| Allocation {
                    node,
                    gpus: vec![gpu],
                    how: "best fit".to_owned(),
                })
            }
        }
    }

    /// Whole GPUs (or a share that takes a GPU whole) among those `usable` admits, with the
    /// workload's host CPU and memory free on the node: the least fragmenting fit, or best fit
    /// (always for MIG instances, which do not fragment capacity).
    pub fn gpus(&mut self, plan: &Plan<'_, 's>, workload: u32, usable: impl Fn(u32) -> bool) -> Option<Allocation> {
        let snapshot = plan.snapshot();
        let w = snapshot.workload(workload)?;
        let need = w.gpu_need();
        if self.fit.by_fragmentation() && need.mig_profile.is_empty() {
            return self.placer(snapshot).place(plan, workload, |_| true, usable).map(|p| Allocation {
                node: p.node,
                gpus: p.gpus,
                how: fragment_words(p.added),
            });
        }
        self.best_fit(plan, w, &need, (w.cpu_millis, w.memory_mb), usable).map(|(node, gpus)| Allocation {
            node,
            gpus,
            how: "best fit".to_owned(),
        })
    }

    /// Whether some ready node has the GPUs for `w` among those `usable` admits, with `host` CPU
    /// and memory free: with `(0, 0)`, `false` means no workload of its GPU shape fits this cycle.
    pub fn fits(&self, plan: &Plan<'_, 's>, w: &Workload<'_>, host: (u32, u32), usable: impl Fn(u32) -> bool) -> bool {
        self.best_fit(plan, w, &w.gpu_need(), host, usable).is_some()
    }

    /// The node that can run `w` whose fitting free GPUs hold the gang with the fewest left over,
    /// with `host` CPU and memory free; on it, the tightest GPUs by free memory. Nodes are visited
    /// by their free-GPU count, tightest first, so GPU lists are built for the best candidates only.
    fn best_fit(
        &self,
        plan: &Plan<'_, 's>,
        w: &Workload<'_>,
        need: &GpuNeed<'_>,
        (cpu_millis, memory_mb): (u32, u32),
        usable: impl Fn(u32) -> bool,
    ) -> Option<(u32, Vec<u32>)> {
        if need.count == 0 {
            return None;
        }
        let snapshot = plan.snapshot();
        let mut fitting: Vec<(u32, u32)> = Vec::new();
        for group in self.free.at_least(need.count) {
            for &node in group {
                let runs = snapshot.node(node).is_some_and(|n| n.can_run(w));
                if !runs || plan.cpu_free(node) < cpu_millis || plan.memory_free(node) < memory_mb {
                    continue;
                }
                fitting.clear();
                fitting.extend(
                    plan.free_gpus(node)
                        .filter(|(g, gpu)| need.fits(gpu) && usable(*g))
                        .map(|(g, gpu)| (gpu.memory_free_mb(), g)),
                );
                if (fitting.len() as u32) < need.count {
                    continue;
                }
                fitting.sort_unstable();
                return Some((node, fitting.iter().take(need.count as usize).map(|(_, g)| *g).collect()));
            }
        }
        None
    }

    /// A gang across nodes (ABI 1.6): every one of `members` (its pending members, by rank) on a
    /// node of its own, on GPUs `usable` admits — each member where it fits best (or fragments
    /// least), the nodes its earlier members took excluded, so the search is one allocation per
    /// member, never over subsets of nodes. All or nothing: when a member finds no node, the
    /// members placed before it are taken back and `None` is returned, the plan as it was.
    /// `reason` words each member's placement from its allocation.
    pub fn gang(
        &mut self,
        plan: &mut Plan<'_, 's>,
        members: &[u32],
        usable: impl Fn(u32) -> bool,
        reason: impl Fn(u32, &Allocation) -> String,
    ) -> Result<Option<Vec<Allocation>>, PlanError> {
        let snapshot = plan.snapshot();
        let mut placed: Vec<Allocation> = Vec::with_capacity(members.len());
        for &member in members {
            let taken: Vec<u32> = placed.iter().map(|a| a.node).collect();
            let fit =
                self.gpus(plan, member, |g| usable(g) && snapshot.gpu(g).is_some_and(|gpu| !taken.contains(&gpu.node)));
            let Some(fit) = fit else {
                for a in placed.iter().rev() {
                    let before = plan.free_gpu_count(a.node);
                    plan.unplace_last();
                    self.refile(plan, a.node, before);
                }
                return Ok(None);
            };
            let words = reason(member, &fit);
            self.place(plan, member, fit.node, fit.gpus.clone(), words)?;
            placed.push(fit);
        }
        Ok(Some(placed))
    }

    /// How many ready nodes could each take one member of a gang shaped like `w` now (on GPUs
    /// `usable` admits): what a waiting gang's reason says.
    pub fn nodes_with_room(&self, plan: &Plan<'_, 's>, w: &Workload<'_>, usable: impl Fn(u32) -> bool) -> u32 {
        let need = w.gpu_need();
        let snapshot = plan.snapshot();
        let mut count = 0;
        for group in self.free.at_least(need.count.max(1)) {
            for &node in group {
                let runs = snapshot.node(node).is_some_and(|n| n.can_run(w));
                if runs
                    && plan.cpu_free(node) >= w.cpu_millis
                    && plan.memory_free(node) >= w.memory_mb
                    && plan.free_gpus(node).filter(|(g, gpu)| need.fits(gpu) && usable(*g)).count() as u32 >= need.count
                {
                    count += 1;
                }
            }
        }
        count
    }

    /// Files a node whose free capacity changed (it had `before` free GPUs) in every index.
    fn refile(&mut self, plan: &Plan<'_, 's>, node: u32, before: u32) {
        self.free.moved(node, before, plan.free_gpu_count(node));
        if let Some(cpu) = self.cpu.as_mut() {
            let (free_cpu, memory) = (plan.cpu_free(node), plan.memory_free(node));
            let tie = plan.snapshot().node(node).map_or(0, cents);
            cpu.cpu_only.set(node, free_cpu, memory, tie);
            cpu.every.set(node, free_cpu, memory, 0);
        }
        if let Some(placer) = self.placer.as_mut() {
            placer.placed(plan, node);
        }
    }

    /// Places `workload` through the plan and files what the placement took.
    pub fn place(
        &mut self,
        plan: &mut Plan<'_, 's>,
        workload: u32,
        node: u32,
        gpus: Vec<u32>,
        reason: String,
    ) -> Result<(), PlanError> {
        let before = plan.free_gpu_count(node);
        plan.place(workload, node, gpus, reason)?;
        self.refile(plan, node, before);
        Ok(())
    }
}

/// A gang across nodes decided whole, for a policy that keeps no [`Allocator`] of its own: every
/// pending member placed by `fit` (each on a node of its own), or every one kept pending with what
/// the gang waits for. Nothing when its members are decided already (the first one met decided
/// them all).
pub fn decide_gang<'s>(
    plan: &mut Plan<'_, 's>,
    gangs: &Gangs<'s>,
    w: &Workload<'s>,
    fit: Fit,
) -> Result<(), PlanError> {
    let snapshot = plan.snapshot();
    let size = w.gang_size;
    let members = gangs.members(w.gang_id);
    let undecided: Vec<u32> = members
        .iter()
        .copied()
        .filter(|&m| !plan.is_decided(m) && snapshot.workloads[m as usize].state == crate::abi::WorkloadState::Pending)
        .collect();
    if undecided.is_empty() {
        return Ok(());
    }
    let reason = match gangs.readiness(snapshot, w.gang_id, size) {
        GangReadiness::Waiting { pending, .. } => {
            format!("its gang waits until all {size} members are back in the queue ({pending} are)")
        }
        GangReadiness::Ready(ready) => {
            let mut alloc = Allocator::new(plan, fit);
            let words = |m: u32, a: &Allocation| {
                format!(
                    "gang member rank {} of {size} on {}: {}",
                    snapshot.workloads[m as usize].gang_rank, snapshot.nodes[a.node as usize].name, a.how
                )
            };
            if alloc.gang(plan, &ready, |_| true, words)?.is_some() {
                return Ok(());
            }
            let room = alloc.nodes_with_room(plan, w, |_| true);
            format!(
                "a gang of {size}: needs {size} nodes, each with {}; {room} ready nodes have that now",
                w.needs_in_words()
            )
        }
    };
    for m in undecided {
        plan.keep_pending(m, reason.clone())?;
    }
    Ok(())
}

/// How a fragmentation-aware placement is explained: what it adds to the capacity no typical
/// workload could use.
fn fragment_words(added: f64) -> String {
    format!("the least fragmenting fit ({added:+.0}/1000 GPU expected unusable)")
}
