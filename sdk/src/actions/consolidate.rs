//! Consolidation: when a gang waits behind fragmentation — enough GPUs free in the fleet, never
//! enough on one node — move checkpointable work off one node to make room, as KAI-Scheduler's
//! consolidation does. A move is planned only when it loses nothing: every work moved can
//! checkpoint, ranks below the gang (so it is placed after it, elsewhere), is allowed to stop by
//! the host's rules, and fits right now on another node; the node chosen needs the fewest moves.

use crate::abi::{Snapshot, Workload, WorkloadClass};
use crate::plan::Plan;
use crate::view::GpuNeed;

use super::preempt::{RunningByNode, VictimRules};
use super::reserve::usable;

/// A planned move: stop `moved` (they resume elsewhere from their checkpoints) to free `node`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub node: u32,
    pub moved: Vec<u32>,
}

/// Where `w` (whole GPUs, `need`) could have a node by moving checkpointable work, if anywhere.
/// `reserved` GPUs are kept for others; `already` are this cycle's victims.
pub fn consolidate(
    plan: &Plan<'_, '_>,
    w: &Workload<'_>,
    need: &GpuNeed<'_>,
    reserved: &[bool],
    already: &[bool],
    running: &RunningByNode,
    rules: VictimRules,
) -> Option<Move> {
    let snapshot = plan.snapshot();
    if w.is_share() || need.count == 0 || !need.mig_profile.is_empty() {
        return None;
    }
    let rank = snapshot.effective_priority(w);
    let mut best: Option<Move> = None;
    for (node, n) in snapshot.ready_nodes() {
        if !n.can_run(w) {
            continue;
        }
        let free = plan.free_gpus(node).filter(|(g, gpu)| need.fits(gpu) && !reserved[*g as usize]).count() as u32;
        // Movable work on this node, the smallest first (the fewest GPUs moved).
        let mut movable: Vec<(u32, u32)> = running
            .on(node)
            .iter()
            .filter_map(|&v| {
                let vw = &snapshot.workloads[v as usize];
                let ok = !already[v as usize]
                    && vw.checkpointable
                    && vw.class != WorkloadClass::RealtimeInference
                    && snapshot.effective_priority(vw) < rank
                    && rules.may_stop(vw)
                    && rules.protected_for_s(vw, snapshot.now_ms).is_none();
                let frees = snapshot
                    .node_gpus(node)
                    .filter(|(g, gpu)| {
                        gpu.holder == Some(v) && gpu.sharers <= 1 && usable(need, gpu) && !reserved[*g as usize]
                    })
                    .count() as u32;
                (ok && frees > 0).then_some((v, frees))
            })
            .collect();
        movable.sort_by_key(|&(v, frees)| (frees, v));
        let mut gained = free;
        let mut moved = Vec::new();
        for &(v, frees) in &movable {
            if gained >= need.count {
                break;
            }
            gained += frees;
            moved.push(v);
        }
        if gained < need.count || moved.is_empty() || best.as_ref().is_some_and(|b| b.moved.len() <= moved.len()) {
            continue;
        }
        let cpu_after = u64::from(plan.cpu_free(node))
            + moved.iter().map(|&v| u64::from(snapshot.workloads[v as usize].cpu_millis)).sum::<u64>();
        let memory_after = u64::from(plan.memory_free(node))
            + moved.iter().map(|&v| u64::from(snapshot.workloads[v as usize].memory_mb)).sum::<u64>();
        if cpu_after < u64::from(w.cpu_millis) || memory_after < u64::from(w.memory_mb) {
            continue;
        }
        if fit_elsewhere(snapshot, plan, node, &moved, reserved) {
            best = Some(Move { node, moved });
        }
    }
    best
}

/// Whether every workload in `moved` fits, together, on ready nodes other than `from` as the plan
/// stands: whole free GPUs that fit it (not reserved), host CPU and memory.
fn fit_elsewhere(snapshot: &Snapshot<'_>, plan: &Plan<'_, '_>, from: u32, moved: &[u32], reserved: &[bool]) -> bool {
    let mut taken_gpu = vec![false; snapshot.gpus.len()];
    let mut taken_host: Vec<(u32, u32)> = vec![(0, 0); snapshot.nodes.len()];
    moved.iter().all(|&v| {
        let vw = &snapshot.workloads[v as usize];
        let need = vw.gpu_need();
        let spot = snapshot.ready_nodes().filter(|&(node, n)| node != from && n.can_run(vw)).find_map(|(node, _)| {
            let (cpu, memory) = taken_host[node as usize];
            if plan.cpu_free(node).saturating_sub(cpu) < vw.cpu_millis
                || plan.memory_free(node).saturating_sub(memory) < vw.memory_mb
            {
                return None;
            }
            let gpus: Vec<u32> = plan
                .free_gpus(node)
                .filter(|(g, gpu)| need.fits(gpu) && !reserved[*g as usize] && !taken_gpu[*g as usize])
                .map(|(g, _)| g)
                .take(need.count as usize)
                .collect();
            (gpus.len() as u32 == need.count).then_some((node, gpus))
        });
        let Some((node, gpus)) = spot else { return false };
        for g in gpus {
            taken_gpu[g as usize] = true;
        }
        let host = &mut taken_host[node as usize];
        host.0 += vw.cpu_millis;
        host.1 += vw.memory_mb;
        true
    })
}

#[cfg(test)]
mod tests {
    use crate::abi::decode_snapshot;
    use crate::testing::SnapshotFixture;

    use super::*;

    type Edit = fn(&mut crate::owned::OwnedWorkload);

    fn movable(w: &mut crate::owned::OwnedWorkload) {
        w.preemptible = true;
        w.checkpointable = true;
        w.started_ms -= 3_600_000;
    }

    /// Two 4-GPU nodes: `a` with `on_a` GPUs taken by "stays", `b` with one taken by "moves"
    /// (edited by `edit`); a 4-GPU gang of priority 5 waits. What consolidation plans for it.
    fn plan_for_gang(on_a: u32, edit: Edit) -> Option<Move> {
        let devices: Vec<u32> = (0..on_a).collect();
        let bytes = SnapshotFixture::new()
            .node("a", 4, "H100", 81920)
            .node("b", 4, "H100", 81920)
            .running("stays", "a", &devices)
            .running_with("moves", "b", &[0], edit)
            .pending_with("gang", 4, 0, |w| w.priority = 5)
            .encode();
        let snapshot = decode_snapshot(&bytes).unwrap();
        let plan = Plan::new(&snapshot);
        let (_, w) = snapshot.pending().next().unwrap();
        let none = vec![false; snapshot.workloads.len()];
        let reserved = vec![false; snapshot.gpus.len()];
        let running = RunningByNode::of(&snapshot);
        consolidate(&plan, w, &w.gpu_need(), &reserved, &none, &running, VictimRules::of(&snapshot))
    }

    #[test]
    fn a_gang_behind_fragmentation_gets_a_node_by_moving_what_fits_elsewhere() {
        // 6 GPUs free, a 4-GPU gang fits on neither node: moving the 1-GPU job off b (it fits on
        // a) frees b whole. ("stays" on a cannot checkpoint.)
        assert_eq!(plan_for_gang(1, movable), Some(Move { node: 1, moved: vec![1] }));
    }

    #[test]
    fn nothing_moves_that_cannot_checkpoint_outranks_the_gang_or_would_find_no_place() {
        let no_checkpoint: Edit = |w| {
            w.preemptible = true;
            w.started_ms -= 3_600_000;
        };
        let outranks: Edit = |w| {
            movable(w);
            w.priority = 50;
        };
        assert_eq!(plan_for_gang(1, no_checkpoint), None, "no checkpoint");
        assert_eq!(plan_for_gang(1, outranks), None, "outranks the gang");
        assert_eq!(plan_for_gang(4, movable), None, "a is full: no place elsewhere");
    }
}
