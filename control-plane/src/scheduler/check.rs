//! The host's check of every decision a policy returns, before anything is applied. A policy is
//! untrusted code: it may name a workload outside its scope, a GPU that is busy or on another node,
//! the same GPU twice, or a node that cannot fit the work. Each such decision is refused with the
//! precise reason, and the rest of the cycle goes on.

use std::collections::HashSet;

use crate::model::{NodeState, WorkloadState};
use crate::scheduler::fleet_view::FleetView;

/// A decision as the policy returned it, in snapshot indexes.
#[derive(Debug, Clone, PartialEq)]
pub enum Proposal {
    Place { workload: usize, node: usize, gpus: Vec<usize>, reason: String },
    Preempt { workload: usize, reason: String },
    KeepPending { workload: usize, reason: String },
}

impl Proposal {
    pub fn workload(&self) -> usize {
        match self {
            Self::Place { workload, .. } | Self::Preempt { workload, .. } | Self::KeepPending { workload, .. } => {
                *workload
            }
        }
    }
}

/// Whose workloads a policy may decide for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The platform policy: every tenant's workloads.
    Platform,
    /// A tenant's own policy: only that tenant's workloads (index into the tenants table).
    Tenant(usize),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The workload the refused decision named, when that index was valid.
    pub workload: Option<usize>,
    pub reason: String,
}

#[derive(Debug, Default)]
pub struct Checked {
    pub accepted: Vec<Proposal>,
    pub refused: Vec<Refusal>,
}

/// Checks proposals in order; an earlier accepted placement's GPUs and CPU count as taken for later
/// ones, so two placements can never share a GPU.
pub fn check(fleet: &FleetView, scope: Scope, proposals: Vec<Proposal>) -> Checked {
    let mut out = Checked::default();
    let mut decided: HashSet<usize> = HashSet::new();
    let mut taken_gpus: HashSet<usize> = HashSet::new();
    let mut cpu_free: Vec<u64> = fleet.nodes.iter().map(|n| u64::from(n.cpu_millis_free)).collect();
    let mut mem_free: Vec<u64> = fleet.nodes.iter().map(|n| n.memory_mb_free).collect();

    for proposal in proposals {
        let index = proposal.workload();
        let Some(w) = fleet.workloads.get(index) else {
            out.refused.push(Refusal {
                workload: None,
                reason: format!("names workload #{index}, but the snapshot has {}", fleet.workloads.len()),
            });
            continue;
        };
        let refuse = |why: String| Refusal { workload: Some(index), reason: why };
        if let Scope::Tenant(t) = scope
            && w.tenant != t
        {
            out.refused.push(refuse(format!(
                "workload {} belongs to tenant {}, outside this policy's scope",
                w.id, fleet.tenants[w.tenant].name
            )));
            continue;
        }
        if !decided.insert(index) {
            out.refused.push(refuse(format!("a second decision for workload {} in one cycle", w.id)));
            continue;
        }
        match &proposal {
            Proposal::KeepPending { .. } => {
                if w.state != WorkloadState::Pending {
                    out.refused.push(refuse(format!(
                        "keep pending for workload {}, which is {}",
                        w.id,
                        w.state.as_str()
                    )));
                    continue;
                }
            }
            Proposal::Preempt { .. } => {
                if !matches!(w.state, WorkloadState::Scheduled | WorkloadState::Running) {
                    out.refused.push(refuse(format!("preempt workload {}, which is {}", w.id, w.state.as_str())));
                    continue;
                }
                if !w.preemptible {
                    out.refused.push(refuse(format!("preempt workload {}, which is not preemptible", w.id)));
                    continue;
                }
                if let Err(why) = preemption_allowed(fleet, index) {
                    out.refused.push(refuse(why));
                    continue;
                }
            }
            Proposal::Place { node, gpus, .. } => {
                if w.state != WorkloadState::Pending {
                    out.refused.push(refuse(format!("place workload {}, which is {}", w.id, w.state.as_str())));
                    continue;
                }
                let Some(n) = fleet.nodes.get(*node) else {
                    out.refused
                        .push(refuse(format!("place on node #{node}, but the snapshot has {}", fleet.nodes.len())));
                    continue;
                };
                if n.state != NodeState::Ready {
                    out.refused.push(refuse(format!("place on node {}, which is {}", n.name, n.state.as_str())));
                    continue;
                }
                if let Err(why) = check_gpus(fleet, index, *node, gpus, &taken_gpus) {
                    out.refused.push(refuse(why));
                    continue;
                }
                // A CPU placement needs the CPU alternative; a GPU placement its host share too.
                let (cpu, mem) = (u64::from(w.cpu_millis), w.memory_mb);
                if cpu > cpu_free[*node] || mem > mem_free[*node] {
                    out.refused.push(refuse(format!(
                        "node {} has {} millicores and {} MiB free; workload {} needs {cpu} and {mem}",
                        n.name, cpu_free[*node], mem_free[*node], w.id
                    )));
                    continue;
                }
                cpu_free[*node] -= cpu;
                mem_free[*node] -= mem;
                taken_gpus.extend(gpus.iter().copied());
            }
        }
        out.accepted.push(proposal);
    }
    out
}

/// The platform's preemption rules, which no policy can override: minimum runtime, the cap on
/// preemptions per hour, and (when set) only checkpointable work.
pub fn preemption_allowed(fleet: &FleetView, workload: usize) -> Result<(), String> {
    let w = &fleet.workloads[workload];
    let rules = &fleet.settings;
    if rules.checkpointable_only && !w.checkpointable {
        return Err(format!("preempt workload {}: only checkpointable work may be preempted", w.id));
    }
    if let Some(started) = w.started_at {
        let ran = (fleet.now - started).num_seconds();
        if ran < i64::from(rules.min_runtime_s) {
            return Err(format!(
                "preempt workload {}: it has run {ran} s of its protected {} s minimum runtime",
                w.id, rules.min_runtime_s
            ));
        }
    }
    if w.preemptions_last_hour >= rules.max_preemptions_per_hour.max(0) as u32 {
        return Err(format!(
            "preempt workload {}: already preempted {} times in the last hour (cap {})",
            w.id, w.preemptions_last_hour, rules.max_preemptions_per_hour
        ));
    }
    Ok(())
}

fn check_gpus(
    fleet: &FleetView,
    workload: usize,
    node: usize,
    gpus: &[usize],
    taken: &HashSet<usize>,
) -> Result<(), String> {
    let w = &fleet.workloads[workload];
    let n = &fleet.nodes[node];
    if gpus.is_empty() {
        if w.gpu_count == 0 || w.cpu_capable {
            return Ok(());
        }
        return Err(format!(
            "CPU placement for workload {}, which needs {} GPUs and is not cpu_capable",
            w.id, w.gpu_count
        ));
    }
    if gpus.len() != w.gpu_count as usize {
        return Err(format!(
            "{} GPUs for workload {}, which needs exactly {} (a gang is all or nothing)",
            gpus.len(),
            w.id,
            w.gpu_count
        ));
    }
    let mut seen = HashSet::new();
    for &g in gpus {
        let Some(gpu) = fleet.gpus.get(g) else {
            return Err(format!("GPU #{g} does not exist (the snapshot has {})", fleet.gpus.len()));
        };
        let label = format!("GPU {} of node {}", gpu.device_index, fleet.nodes[gpu.node].name);
        if gpu.node != node {
            return Err(format!("{label} is not on node {}", n.name));
        }
        if !seen.insert(g) {
            return Err(format!("{label} is listed twice"));
        }
        if gpu.holder.is_some() {
            return Err(format!("{label} is occupied"));
        }
        if taken.contains(&g) {
            return Err(format!("{label} was already given to another workload this cycle"));
        }
        if !w.allows_model(&gpu.model) {
            return Err(format!("{label} is a {}, not one of the allowed models ({})", gpu.model, w.gpu_models));
        }
        let free = gpu.memory_mb.saturating_sub(gpu.memory_used_mb);
        if free < w.gpu_memory_mb {
            return Err(format!(
                "{label} has {free} MiB free of {} MiB; workload {} needs {} MiB",
                gpu.memory_mb, w.id, w.gpu_memory_mb
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::WorkloadClass;
    use crate::scheduler::fleet_view::{GpuEntry, NodeEntry, TenantEntry, TenantView, WorkloadEntry};
    use uuid::Uuid;

    fn fleet() -> FleetView {
        let tenant = |name: &str| TenantEntry {
            id: Uuid::new_v4(),
            name: name.into(),
            guaranteed_gpus: 0,
            weight: 1,
            tier: 0,
            may_borrow: true,
            running_gpus: 0,
            decayed_gpu_hours: 0.0,
        };
        let node = |name: &str, first: usize, count: usize| NodeEntry {
            id: Uuid::new_v4(),
            name: name.into(),
            state: NodeState::Ready,
            cpu_millis: 8000,
            memory_mb: 65536,
            cpu_millis_free: 8000,
            memory_mb_free: 65536,
            cost_per_hour: 10.0,
            cpu_util: 0.0,
            simulated: true,
            gpu_first: first,
            gpu_count: count,
        };
        let gpu = |node: usize, device_index: u32, holder: Option<usize>| GpuEntry {
            id: Uuid::new_v4(),
            node,
            device_index,
            model: "H100".into(),
            memory_mb: 81920,
            memory_used_mb: 0,
            util: 0.0,
            nvlink_group: None,
            holder,
            simulated: true,
        };
        let workload = |tenant: usize, state: WorkloadState, gpu_count: u32| WorkloadEntry {
            id: Uuid::new_v4(),
            id_text: String::new(),
            name: "w".into(),
            tenant,
            class: WorkloadClass::Training,
            state,
            priority: 0,
            gpu_count,
            gpu_memory_mb: 40000,
            gpu_models: String::new(),
            cpu_millis: 1000,
            memory_mb: 1024,
            cpu_capable: false,
            preemptible: false,
            checkpointable: false,
            expected_duration_s: 0,
            submitted_at: chrono::Utc::now(),
            started_at: None,
            node: None,
            pending_reason: None,
            preemptions_last_hour: 0,
        };
        FleetView {
            now: chrono::Utc::now(),
            settings: Default::default(),
            tenants: vec![tenant("a"), tenant("b")],
            nodes: vec![node("n1", 0, 2), node("n2", 2, 1)],
            gpus: vec![gpu(0, 0, None), gpu(0, 1, None), gpu(1, 0, Some(3))],
            workloads: vec![
                workload(0, WorkloadState::Pending, 1),
                workload(0, WorkloadState::Pending, 1),
                workload(1, WorkloadState::Pending, 2),
                workload(1, WorkloadState::Running, 1),
            ],
        }
    }

    fn place(workload: usize, node: usize, gpus: &[usize]) -> Proposal {
        Proposal::Place { workload, node, gpus: gpus.to_vec(), reason: "test".into() }
    }

    fn refusal_of(proposals: Vec<Proposal>, scope: Scope) -> String {
        let checked = check(&fleet(), scope, proposals);
        assert_eq!(checked.refused.len(), 1, "{checked:?}");
        checked.refused[0].reason.clone()
    }

    #[test]
    fn a_sound_placement_is_accepted() {
        let checked = check(&fleet(), Scope::Platform, vec![place(0, 0, &[0]), place(1, 0, &[1])]);
        assert_eq!(checked.accepted.len(), 2);
        assert!(checked.refused.is_empty());
    }

    #[test]
    fn each_unsound_decision_is_refused_with_its_reason() {
        let cases: Vec<(Vec<Proposal>, Scope, &str)> = vec![
            (vec![place(0, 0, &[0]), place(1, 0, &[0])], Scope::Platform, "already given"),
            (vec![place(0, 1, &[2])], Scope::Platform, "occupied"),
            (vec![place(0, 0, &[2])], Scope::Platform, "not on node"),
            (vec![place(0, 0, &[9])], Scope::Platform, "does not exist"),
            (vec![place(2, 0, &[0])], Scope::Platform, "exactly 2"),
            (vec![place(2, 0, &[0, 0])], Scope::Platform, "listed twice"),
            (vec![place(3, 0, &[0])], Scope::Platform, "running"),
            (vec![place(9, 0, &[0])], Scope::Platform, "snapshot has 4"),
            (vec![place(0, 7, &[0])], Scope::Platform, "node #7"),
            (vec![place(2, 0, &[0, 1])], Scope::Tenant(0), "outside this policy's scope"),
            (vec![place(0, 0, &[])], Scope::Platform, "not cpu_capable"),
            (vec![Proposal::Preempt { workload: 3, reason: String::new() }], Scope::Platform, "not preemptible"),
            (
                vec![place(0, 0, &[0]), Proposal::KeepPending { workload: 0, reason: String::new() }],
                Scope::Platform,
                "second decision",
            ),
        ];
        for (proposals, scope, expected) in cases {
            let reason = refusal_of(proposals, scope);
            assert!(reason.contains(expected), "{reason:?} should contain {expected:?}");
        }
    }

    #[test]
    fn preemption_rules_protect_young_often_preempted_and_uncheckpointable_work() {
        let mut f = fleet();
        f.workloads[3].preemptible = true;
        f.workloads[3].started_at = Some(f.now - chrono::Duration::seconds(30));
        let preempt = || vec![Proposal::Preempt { workload: 3, reason: "burst".into() }];
        assert!(check(&f, Scope::Platform, preempt()).refused.is_empty());

        f.settings.min_runtime_s = 600;
        let refused = check(&f, Scope::Platform, preempt()).refused;
        assert!(refused[0].reason.contains("minimum runtime"), "{refused:?}");

        f.settings.min_runtime_s = 0;
        f.workloads[3].preemptions_last_hour = 4;
        let refused = check(&f, Scope::Platform, preempt()).refused;
        assert!(refused[0].reason.contains("cap 4"), "{refused:?}");

        f.workloads[3].preemptions_last_hour = 0;
        f.settings.checkpointable_only = true;
        let refused = check(&f, Scope::Platform, preempt()).refused;
        assert!(refused[0].reason.contains("checkpointable"), "{refused:?}");
    }

    #[test]
    fn a_tenant_view_holds_only_its_work_and_its_grant() {
        let f = fleet();
        // Tenant b (index 1) runs workload 3 on n2's GPU 2, and is granted n1's GPU 1 this cycle.
        let t = f.tenant_view(1, &[1], &[]);
        assert_eq!(t.workloads, vec![2, 3]);
        assert_eq!(t.nodes, vec![0, 1]);
        assert_eq!(t.gpus, vec![1, 2]);
        assert_eq!(t.view.gpus[1].holder, Some(1), "its running workload, renumbered");
        assert_eq!((t.view.nodes[1].gpu_first, t.view.nodes[1].gpu_count), (1, 1));
        // The view holds that tenant alone (renumbered): no other tenant's name or quota.
        assert_eq!(t.view.tenants.len(), 1);
        assert_eq!(t.view.tenants[0].id, f.tenants[1].id);
        assert!(t.view.workloads.iter().all(|w| w.tenant == TenantView::SCOPE_TENANT));
    }

    #[test]
    fn gpu_memory_counts_live_use() {
        let mut f = fleet();
        f.gpus[0].memory_used_mb = 50000;
        let checked = check(&f, Scope::Platform, vec![place(0, 0, &[0])]);
        assert!(checked.refused[0].reason.contains("31920 MiB free"), "{:?}", checked.refused);
    }
}
