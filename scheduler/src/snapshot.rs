//! Encodes the cycle's `FleetView` into the policy ABI's snapshot, borrowing its strings, and
//! turns a policy's decoded decisions into proposals for the check.

use airtime_policy_sdk::abi;

use crate::fleet::{FleetView, GpuSharing, WHOLE_GPU_MILLI};
use airtime_protocol::workload::{NodeState, WorkloadClass, WorkloadState};

fn u32_sat(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

fn to_index(v: usize) -> u32 {
    u32::try_from(v).unwrap_or(abi::NONE)
}

pub fn class(c: WorkloadClass) -> abi::WorkloadClass {
    match c {
        WorkloadClass::RealtimeInference => abi::WorkloadClass::RealtimeInference,
        WorkloadClass::BatchInference => abi::WorkloadClass::BatchInference,
        WorkloadClass::Training => abi::WorkloadClass::Training,
        WorkloadClass::FineTuning => abi::WorkloadClass::FineTuning,
        WorkloadClass::Quantization => abi::WorkloadClass::Quantization,
        WorkloadClass::Embeddings => abi::WorkloadClass::Embeddings,
        WorkloadClass::Evaluation => abi::WorkloadClass::Evaluation,
    }
}

/// Builds the ABI snapshot for one scope (`scope_tenant` None: the platform scope).
pub fn build<'a>(fleet: &'a FleetView, params: &'a str, scope_tenant: Option<usize>) -> abi::Snapshot<'a> {
    let ms = |t: chrono::DateTime<chrono::Utc>| u64::try_from(t.timestamp_millis()).unwrap_or(0);
    abi::Snapshot {
        now_ms: ms(fleet.now),
        tenants: fleet
            .tenants
            .iter()
            .map(|t| abi::Tenant {
                name: &t.name,
                guaranteed_gpus: t.guaranteed_gpus,
                weight: t.weight,
                // Guests that count whole GPUs see a share as the GPU it occupies.
                running_gpus: t.running_gpu_milli.div_ceil(WHOLE_GPU_MILLI),
                running_gpu_milli: t.running_gpu_milli,
                tier: t.tier,
                decayed_gpu_hours: t.decayed_gpu_hours as f32,
                may_borrow: t.may_borrow,
            })
            .collect(),
        nodes: fleet
            .nodes
            .iter()
            .map(|n| abi::Node {
                name: &n.name,
                state: match n.state {
                    NodeState::Ready => abi::NodeState::Ready,
                    NodeState::Draining => abi::NodeState::Draining,
                    NodeState::Lost => abi::NodeState::Lost,
                },
                cpu_millis: n.cpu_millis,
                cpu_millis_free: n.cpu_millis_free,
                memory_mb: u32_sat(n.memory_mb),
                memory_mb_free: u32_sat(n.memory_mb_free),
                gpu_first: to_index(n.gpu_first),
                gpu_count: to_index(n.gpu_count),
                cost_per_hour: n.cost_per_hour as f32,
                cpu_util: n.cpu_util,
                simulated: n.simulated,
            })
            .collect(),
        gpus: fleet
            .gpus
            .iter()
            .map(|g| abi::Gpu {
                node: to_index(g.node),
                device_index: g.device_index,
                model: &g.model,
                memory_mb: u32_sat(g.memory_mb),
                memory_used_mb: u32_sat(g.memory_used_mb),
                util: g.util,
                nvlink_group: g.nvlink_group,
                // A held index that names nothing (another tenant's share in a tenant view) is
                // no holder; the share still counts in free_milli.
                holder: g.holders.iter().map(|h| h.workload).find(|&w| w < fleet.workloads.len()).map(to_index),
                simulated: g.simulated,
                sharing: sharing(g.sharing),
                free_milli: WHOLE_GPU_MILLI - g.held_milli(),
                memory_reserved_mb: u32_sat(g.reserved_memory_mb()),
                sharers: to_index(g.holders.len()),
                mig_profile: &g.mig_profile,
            })
            .collect(),
        workloads: fleet
            .workloads
            .iter()
            .map(|w| abi::Workload {
                id: &w.id_text,
                name: &w.name,
                tenant: to_index(w.tenant),
                class: class(w.class),
                state: match w.state {
                    WorkloadState::Pending => abi::WorkloadState::Pending,
                    WorkloadState::Preempting | WorkloadState::Cancelling => abi::WorkloadState::Stopping,
                    _ => abi::WorkloadState::Running,
                },
                priority: w.priority,
                gpu_count: w.gpu_count,
                gpu_memory_mb: u32_sat(w.gpu_memory_mb),
                gpu_models: &w.gpu_models,
                cpu_millis: w.cpu_millis,
                memory_mb: u32_sat(w.memory_mb),
                submitted_ms: ms(w.submitted_at),
                started_ms: w.started_at.map(ms).unwrap_or(0),
                node: w.node.map(to_index),
                preemptible: w.preemptible,
                checkpointable: w.checkpointable,
                cpu_capable: w.cpu_capable,
                gang: w.gpu_count > 1,
                expected_duration_s: w.expected_duration_s,
                gpu_milli: w.gpu_milli,
                mig_profile: &w.mig_profile,
            })
            .collect(),
        settings: Some(settings(fleet)),
        params,
        scope_tenant: scope_tenant.map(to_index),
    }
}

pub fn sharing(s: GpuSharing) -> abi::Sharing {
    match s {
        GpuSharing::None => abi::Sharing::None,
        GpuSharing::TimeSlicing => abi::Sharing::TimeSlicing,
        GpuSharing::Mps => abi::Sharing::Mps,
        GpuSharing::Mig => abi::Sharing::Mig,
    }
}

fn settings(fleet: &FleetView) -> abi::Settings {
    let s = &fleet.settings;
    let hour = chrono::Timelike::hour(&fleet.now);
    abi::Settings {
        burst_reserve_gpus: s.burst_reserve_gpus.max(0) as u32,
        realtime_first: s.realtime_first,
        min_runtime_s: s.min_runtime_s.max(0) as u32,
        grace_period_s: s.grace_period_s.max(0) as u32,
        max_preemptions_per_hour: s.max_preemptions_per_hour.max(0) as u32,
        // The host resolves the time window, so policies need no clock or calendar logic.
        night_training_bonus: if s.is_night(hour) { s.night_training_bonus } else { 0 },
    }
}

/// Turns the policy's decisions into proposals for the host's check.
pub fn proposals(decisions: Vec<abi::Decision<'_>>) -> Vec<crate::check::Proposal> {
    use crate::check::Proposal;
    decisions
        .into_iter()
        .map(|d| {
            let workload = d.workload as usize;
            let reason = d.reason.into_owned();
            match d.action {
                abi::Action::Place { node, gpus } => Proposal::Place {
                    workload,
                    node: node as usize,
                    gpus: gpus.into_iter().map(|g| g as usize).collect(),
                    reason,
                },
                abi::Action::Preempt => Proposal::Preempt { workload, reason },
                abi::Action::KeepPending => Proposal::KeepPending { workload, reason },
            }
        })
        .collect()
}
