//! What a pending workload is short of, in words, against the fleet as it is now: "needs 4 GPUs of
//! H100 with 40960 MiB free on one node; the best ready node (n7) has 2". The same rules as the
//! checker (a ready node that can run it, GPUs free or with room for a share, an allowed model, the
//! memory by live telemetry, a MIG profile's instances), so it names what a placement would lack.

use airtime_protocol::workload::{NodeState, WorkloadState};

use crate::fleet::{FleetView, GpuEntry, NodeEntry, WHOLE_GPU_MILLI, WorkloadEntry};

/// Why `workload` (pending) cannot be placed on any ready node right now; `None` when some ready
/// node has all it needs (it waits for the policy's order, not for room).
pub fn shortfall(fleet: &FleetView, workload: &WorkloadEntry) -> Option<String> {
    if workload.state != WorkloadState::Pending {
        return None;
    }
    let candidates: Vec<(usize, &NodeEntry)> = fleet
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.state == NodeState::Ready && (!workload.container || n.containers))
        .collect();
    if candidates.is_empty() {
        return Some(if workload.container {
            "no ready node runs containers".to_owned()
        } else {
            "no node is ready".to_owned()
        });
    }
    let host_fits = |n: &NodeEntry| n.cpu_millis_free >= workload.cpu_millis && n.memory_mb_free >= workload.memory_mb;
    let host_need = format!("{} mCPU and {} MiB", workload.cpu_millis, workload.memory_mb);
    let host_has = |n: &NodeEntry| format!("{} mCPU and {} MiB", n.cpu_millis_free, n.memory_mb_free);

    let gpu_work = workload.gpu_count > 0;
    if !gpu_work || (workload.cpu_capable && candidates.iter().any(|(_, n)| host_fits(n))) {
        if candidates.iter().any(|(_, n)| host_fits(n)) {
            return None;
        }
        if !gpu_work {
            let best = candidates.iter().max_by_key(|(_, n)| (n.cpu_millis_free, n.memory_mb_free))?;
            return Some(format!(
                "needs {host_need} free on one node; the best ready node ({}) has {}",
                best.1.name,
                host_has(best.1)
            ));
        }
    }
    // GPU work: the most fitting GPUs one node has free, and whether its host room fits too.
    // One pass over the GPUs (not one per node: at 1,000 nodes × 8 GPUs that was 8 million checks
    // per workload shape, every cycle).
    let mut fitting = vec![0u32; fleet.nodes.len()];
    for gpu in fleet.gpus.iter().filter(|g| gpu_fits(g, workload)) {
        if let Some(count) = fitting.get_mut(gpu.node) {
            *count += 1;
        }
    }
    let mut best: Option<(u32, &NodeEntry)> = None;
    for &(i, n) in &candidates {
        let count = fitting[i];
        if count >= workload.gpu_count && host_fits(n) {
            return None;
        }
        if best.is_none_or(|(c, b)| (count, host_fits(n)) > (c, host_fits(b))) {
            best = Some((count, n));
        }
    }
    let (count, node) = best?;
    let need = describe_gpus(workload);
    Some(if count >= workload.gpu_count {
        format!(
            "needs {need} and {host_need} free on one node; the best ready node ({}) has the GPUs but {}",
            node.name,
            host_has(node)
        )
    } else {
        format!("needs {need} on one node; the best ready node ({}) has {count}", node.name)
    })
}

/// Whether `gpu` could take `workload` now (one of its GPUs).
fn gpu_fits(gpu: &GpuEntry, w: &WorkloadEntry) -> bool {
    if !w.allows_model(&gpu.model) {
        return false;
    }
    let is_mig = !gpu.mig_profile.is_empty();
    if !w.mig_profile.is_empty() || is_mig {
        return is_mig && gpu.mig_profile.eq_ignore_ascii_case(&w.mig_profile) && gpu.holders.is_empty();
    }
    if w.is_share() && gpu.sharing.is_shared() {
        let memory_free = gpu.memory_mb.saturating_sub(gpu.memory_used_mb.max(gpu.reserved_memory_mb()));
        return WHOLE_GPU_MILLI - gpu.held_milli() >= w.gpu_milli && memory_free >= w.gpu_memory_mb;
    }
    gpu.holders.is_empty() && gpu.memory_mb.saturating_sub(gpu.memory_used_mb) >= w.gpu_memory_mb
}

fn describe_gpus(w: &WorkloadEntry) -> String {
    let what = if !w.mig_profile.is_empty() {
        format!("a free MIG instance {}", w.mig_profile)
    } else if w.is_share() {
        format!("{}/1000 of a shared GPU", w.gpu_milli)
    } else if w.gpu_count == 1 {
        "1 free GPU".to_owned()
    } else {
        format!("{} free GPUs", w.gpu_count)
    };
    let models =
        if w.gpu_models.is_empty() { String::new() } else { format!(" of {}", w.gpu_models.replace(',', " or ")) };
    let memory = if w.gpu_memory_mb > 0 { format!(" with {} MiB", w.gpu_memory_mb) } else { String::new() };
    format!("{what}{models}{memory}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::{GpuSharing, Holder};
    use chrono::Utc;
    use uuid::Uuid;

    fn node(name: &str, cpu_free: u32) -> NodeEntry {
        NodeEntry {
            id: Uuid::new_v4(),
            name: name.into(),
            state: NodeState::Ready,
            cpu_millis: 64_000,
            memory_mb: 512_000,
            cpu_millis_free: cpu_free,
            memory_mb_free: 512_000,
            cost_per_hour: 0.0,
            cpu_util: 0.0,
            simulated: true,
            containers: false,
            gpu_first: 0,
            gpu_count: 0,
        }
    }

    fn gpu(node: usize, held: bool) -> GpuEntry {
        GpuEntry {
            id: Uuid::new_v4(),
            node,
            device_index: 0,
            model: "H100".into(),
            memory_mb: 81_920,
            memory_used_mb: 0,
            util: 0.0,
            nvlink_group: None,
            holders: if held { vec![Holder { workload: 99, milli: 1000, memory_mb: 0 }] } else { vec![] },
            simulated: true,
            sharing: GpuSharing::None,
            mig_profile: String::new(),
        }
    }

    fn pending(gpu_count: u32, cpu_millis: u32) -> WorkloadEntry {
        WorkloadEntry {
            gpu_models: "H100".into(),
            cpu_millis,
            memory_mb: 0,
            ..WorkloadEntry::pending("w", 0, gpu_count, Utc::now())
        }
    }

    #[test]
    fn a_gang_is_told_how_many_gpus_the_best_node_has() {
        let fleet = FleetView {
            nodes: vec![node("n1", 64_000), node("n2", 64_000)],
            gpus: vec![gpu(0, true), gpu(0, false), gpu(1, false), gpu(1, false), gpu(1, true)],
            ..FleetView::default()
        };
        assert_eq!(
            shortfall(&fleet, &pending(4, 1000)).as_deref(),
            Some("needs 4 free GPUs of H100 on one node; the best ready node (n2) has 2")
        );
        assert_eq!(shortfall(&fleet, &pending(2, 1000)), None, "n2 fits it now");
        let hungry = pending(2, 100_000);
        assert_eq!(
            shortfall(&fleet, &hungry).as_deref(),
            Some(
                "needs 2 free GPUs of H100 and 100000 mCPU and 0 MiB free on one node; the best ready node (n2) has \
                 the GPUs but 64000 mCPU and 512000 MiB"
            )
        );
    }

    #[test]
    fn cpu_and_container_work_are_told_what_they_lack() {
        let fleet = FleetView { nodes: vec![node("small", 500), node("smaller", 200)], ..FleetView::default() };
        assert_eq!(
            shortfall(&fleet, &pending(0, 1000)).as_deref(),
            Some("needs 1000 mCPU and 0 MiB free on one node; the best ready node (small) has 500 mCPU and 512000 MiB")
        );
        let boxed = WorkloadEntry { container: true, ..pending(0, 100) };
        assert_eq!(shortfall(&fleet, &boxed).as_deref(), Some("no ready node runs containers"));
    }

    #[test]
    fn waiting_work_is_judged_on_the_room_the_cycle_leaves() {
        // n2 has two free GPUs; this cycle places a 2-GPU workload there.
        let fleet = FleetView {
            nodes: vec![node("n1", 64_000), node("n2", 64_000)],
            gpus: vec![gpu(0, true), gpu(1, false), gpu(1, false)],
            workloads: vec![pending(2, 1000), pending(1, 1000)],
            ..FleetView::default()
        };
        assert_eq!(shortfall(&fleet, &fleet.workloads[1]), None, "before the placement, n2 fits it");
        let room = fleet.room_after(&[(0, 1, &[1, 2])]);
        assert_eq!(
            shortfall(&room, &fleet.workloads[1]).as_deref(),
            Some("needs 1 free GPU of H100 on one node; the best ready node (n1) has 0")
        );
        assert_eq!(room.nodes[1].cpu_millis_free, 63_000, "the placement's CPU is taken");
        assert_eq!(fleet.gpus[1].holders.len(), 0, "the fleet read is left as it was");
    }
}
