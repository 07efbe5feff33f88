//! Gangs across nodes (ABI 1.6): a workload of several members, each a workload of its own asking
//! for the same resources, that the host runs whole or not at all. Every member must be placed in
//! the same evaluation, each on a node of its own; a placement of some members only is refused
//! (the [`Checker`](crate::check::Checker)), and [`Plan::into_decisions`](crate::plan::Plan) keeps
//! such members pending instead of emitting them.

use std::collections::HashMap;

use crate::abi::{Snapshot, WorkloadState};

/// The gangs of a snapshot: each gang's members (workload indexes), by rank.
#[derive(Debug, Default, Clone)]
pub struct Gangs<'a> {
    members: HashMap<&'a str, Vec<u32>>,
}

/// Whether a gang can be placed now, and if not why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GangReadiness {
    /// Every member is pending: place them all.
    Ready(Vec<u32>),
    /// Some members are still stopping or missing from the snapshot: the gang waits for them.
    Waiting { pending: u32, size: u32 },
}

impl<'a> Gangs<'a> {
    /// One pass over the workloads.
    pub fn of(snapshot: &Snapshot<'a>) -> Gangs<'a> {
        let mut members: HashMap<&'a str, Vec<u32>> = HashMap::new();
        for (i, w) in snapshot.workloads.iter().enumerate() {
            if w.in_gang() {
                members.entry(w.gang_id).or_default().push(i as u32);
            }
        }
        for list in members.values_mut() {
            list.sort_by_key(|&i| snapshot.workloads[i as usize].gang_rank);
        }
        Gangs { members }
    }

    /// Every member of gang `id` in the snapshot (any state), by rank.
    pub fn members(&self, id: &str) -> &[u32] {
        self.members.get(id).map_or(&[], Vec::as_slice)
    }

    /// Gang `id` of `size` members, by what the snapshot shows of it.
    pub fn readiness(&self, snapshot: &Snapshot<'_>, id: &str, size: u32) -> GangReadiness {
        let members = self.members(id);
        let pending: Vec<u32> = members
            .iter()
            .copied()
            .filter(|&i| snapshot.workloads[i as usize].state == WorkloadState::Pending)
            .collect();
        if pending.len() as u32 == size && members.len() as u32 == size {
            GangReadiness::Ready(pending)
        } else {
            GangReadiness::Waiting { pending: pending.len() as u32, size }
        }
    }

    /// Each gang's id and members.
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, &[u32])> + '_ {
        self.members.iter().map(|(id, m)| (*id, m.as_slice()))
    }
}

#[cfg(test)]
mod tests {
    use crate::abi::{Decision, decode_snapshot};
    use crate::plan::Plan;
    use crate::testing::SnapshotFixture;

    fn fleet() -> SnapshotFixture {
        SnapshotFixture::new().node("n0", 2, "H100", 81920).node("n1", 2, "H100", 81920).node("n2", 2, "H100", 81920)
    }

    #[test]
    fn a_gang_placed_in_part_or_twice_on_one_node_is_refused() {
        let fixture = fleet().pending_gang("train", 3, 2);
        // Two of three members: both refused, the gang is placed whole or not at all.
        let partial = [Decision::place(0, 0, vec![0, 1], "r0"), Decision::place(1, 1, vec![2, 3], "r1")];
        let problems = fixture.problems(&partial);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems.iter().all(|p| p.problem.contains("only 2 of its members were placed")), "{problems:?}");
        // Two members on one node (each asks for one GPU here): the second refused.
        let fixture = fleet().pending_gang("small", 2, 1);
        let stacked = [Decision::place(0, 0, vec![0], "r0"), Decision::place(1, 0, vec![1], "r1")];
        let problems = fixture.problems(&stacked);
        assert!(problems.iter().any(|p| p.problem.contains("each member needs a node of its own")), "{problems:?}");
        // Every member, each on its own node: sound.
        let whole = [
            Decision::place(0, 0, vec![0, 1], "r0"),
            Decision::place(1, 1, vec![2, 3], "r1"),
            Decision::place(2, 2, vec![4, 5], "r2"),
        ];
        assert_eq!(fleet().pending_gang("train", 3, 2).problems(&whole), vec![]);
    }

    #[test]
    fn a_plan_keeps_a_partial_gang_pending_and_takes_a_placement_back_exactly() {
        let fixture = fleet().pending_gang("train", 3, 2);
        let bytes = fixture.encode();
        let snapshot = decode_snapshot(&bytes).unwrap();
        let mut plan = Plan::new(&snapshot);
        let before = (plan.free_gpu_total(), plan.free_gpu_count(1), plan.cpu_free(1), plan.memory_free(1));
        plan.place(0, 0, vec![0, 1], "r0").unwrap();
        plan.place(1, 1, vec![2, 3], "r1").unwrap();
        assert!(plan.unplace_last());
        assert_eq!(
            (plan.free_gpu_total(), plan.free_gpu_count(1), plan.cpu_free(1), plan.memory_free(1)),
            (4, before.1, before.2, before.3)
        );
        assert!(!plan.is_decided(1) && plan.is_gpu_free(2) && plan.is_gpu_free(3));
        let decisions = plan.into_decisions();
        assert_eq!(decisions.len(), 1);
        assert!(decisions[0].reason.contains("the rest of its gang was not placed"), "{:?}", decisions[0]);
    }
}
