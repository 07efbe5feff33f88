//! The head-of-queue reservation: the highest-ranked GPU work that does not fit keeps the free GPUs
//! of the node where it will fit first, and the GPUs being vacated for a preemptor are kept for it,
//! so lower-ranked work cannot take them in the meantime (backfill with a reservation).

use crate::abi::{Gpu, Snapshot, Workload, WorkloadState};
use crate::plan::Plan;
use crate::view::GpuNeed;

/// GPUs reserved this cycle, and for whom.
#[derive(Debug, Clone)]
pub struct Reservation<'a> {
    reserved: Vec<bool>,
    head: Option<&'a str>,
}

impl<'a> Reservation<'a> {
    /// Nothing reserved yet.
    pub fn new(snapshot: &Snapshot<'_>) -> Self {
        Reservation { reserved: vec![false; snapshot.gpus.len()], head: None }
    }

    /// Whether `gpu` is kept for someone.
    pub fn is_reserved(&self, gpu: u32) -> bool {
        self.reserved.get(gpu as usize).copied().unwrap_or(false)
    }

    /// Per GPU, whether it is kept (for searches that take the table).
    pub fn table(&self) -> &[bool] {
        &self.reserved
    }

    /// Whether any GPU of `node` is kept.
    pub fn touches(&self, snapshot: &Snapshot<'_>, node: u32) -> bool {
        snapshot.node_gpus(node).any(|(g, _)| self.is_reserved(g))
    }

    /// The head of the queue holding a reservation, if one does.
    pub fn head(&self) -> Option<&'a str> {
        self.head
    }

    /// Keeps the free GPUs of `node` that could serve `need`.
    pub fn keep_node(&mut self, plan: &Plan<'_, '_>, node: u32, need: &GpuNeed<'_>) {
        for (g, gpu) in plan.snapshot().node_gpus(node) {
            if plan.is_gpu_free(g) && usable(need, gpu) {
                self.reserved[g as usize] = true;
            }
        }
    }

    /// Makes `w` the head: keeps the free GPUs of the node where its gang will fit first and
    /// returns that node, or `None` when a head is already chosen, `w` shares a GPU (a share waits
    /// for room on a shared GPU, not for a node) or no node could ever hold it.
    pub fn claim_for_head(&mut self, plan: &Plan<'_, '_>, w: &Workload<'a>, need: &GpuNeed<'_>) -> Option<u32> {
        if self.head.is_some() || w.is_share() {
            return None;
        }
        let node = soonest_node(plan, w, need)?;
        self.keep_node(plan, node, need);
        self.head = Some(w.name);
        Some(node)
    }

    /// Makes `w` the head, keeping the free GPUs of `node` (one being cleared for it, say): `false`
    /// when a head is already chosen.
    pub fn claim_node_for_head(
        &mut self,
        plan: &Plan<'_, '_>,
        w: &Workload<'a>,
        node: u32,
        need: &GpuNeed<'_>,
    ) -> bool {
        if self.head.is_some() {
            return false;
        }
        self.keep_node(plan, node, need);
        self.head = Some(w.name);
        true
    }

    /// A node that can run `w` where the free unreserved GPUs plus those held by stopping work
    /// would hold its gang: room already being vacated (by an earlier preemption) to wait for.
    pub fn vacating_node(&self, plan: &Plan<'_, '_>, w: &Workload<'_>, need: &GpuNeed<'_>) -> Option<u32> {
        let snapshot = plan.snapshot();
        snapshot.ready_nodes().filter(|(_, n)| n.can_run(w)).map(|(node, _)| node).find(|&node| {
            let mut stopping = 0u32;
            let mut free = 0u32;
            for (g, gpu) in snapshot.node_gpus(node) {
                if !usable(need, gpu) || self.is_reserved(g) {
                    continue;
                }
                match gpu.holder {
                    Some(h) if snapshot.workloads[h as usize].state == WorkloadState::Stopping => stopping += 1,
                    None if plan.is_gpu_free(g) && need.fits(gpu) => free += 1,
                    _ => {}
                }
            }
            stopping > 0 && free + stopping >= need.count
        })
    }
}

/// Whether `gpu` could ever serve `need` (model and device kind: MIG instances only for their
/// profile), whoever holds it now.
pub fn usable(need: &GpuNeed<'_>, gpu: &Gpu<'_>) -> bool {
    need.allows_model(gpu.model) && need.device_kind_fits(gpu)
}

/// Where a gang will fit first: a node that can run `w` with enough GPUs it could use, the most of
/// them free now, then the lowest index.
fn soonest_node(plan: &Plan<'_, '_>, w: &Workload<'_>, need: &GpuNeed<'_>) -> Option<u32> {
    let snapshot = plan.snapshot();
    snapshot
        .ready_nodes()
        .filter(|(node, n)| {
            n.can_run(w) && snapshot.node_gpus(*node).filter(|(_, g)| usable(need, g)).count() as u32 >= need.count
        })
        .max_by_key(|(node, _)| (plan.free_gpu_count(*node), std::cmp::Reverse(*node)))
        .map(|(node, _)| node)
}

#[cfg(test)]
mod tests {
    use crate::abi::decode_snapshot;
    use crate::testing::SnapshotFixture;

    use super::*;

    #[test]
    fn the_head_keeps_the_node_with_the_most_free_gpus_and_only_one_head_is_chosen() {
        let bytes = SnapshotFixture::new()
            .node("a", 4, "V100", 16384)
            .node("b", 4, "V100", 16384)
            .running("busy", "a", &[0, 1, 2])
            .running("half", "b", &[0, 1])
            .pending("gang", 4, 0)
            .pending("other", 4, 0)
            .encode();
        let snapshot = decode_snapshot(&bytes).unwrap();
        let plan = Plan::new(&snapshot);
        let mut reservation = Reservation::new(&snapshot);
        let (gang, w) = snapshot.workloads_indexed().find(|(_, w)| w.name == "gang").unwrap();
        assert_eq!(gang, 2);
        assert_eq!(reservation.claim_for_head(&plan, w, &w.gpu_need()), Some(1));
        assert_eq!(reservation.head(), Some("gang"));
        let kept: Vec<u32> = (0..8).filter(|&g| reservation.is_reserved(g)).collect();
        assert_eq!(kept, [6, 7], "b's two free GPUs");
        let other = &snapshot.workloads[3];
        assert_eq!(reservation.claim_for_head(&plan, other, &other.gpu_need()), None);
    }
}
