//! The host's check of every decision a policy returns, before anything is applied. A policy is
//! untrusted code: it may name a workload outside its scope, a GPU that is busy or on another node,
//! the same GPU twice, a node that cannot fit the work, more GPUs than its tenant may hold, or a
//! preemption the platform's rules protect against. Each such decision is refused with the precise
//! reason, and the rest of the cycle goes on.
//!
//! One implementation: the structural rules are the SDK's own [`Checker`] (what a policy's unit
//! tests apply through `airtime_policy_sdk::check::check_decisions`), run on the same ABI snapshot
//! the policy read (the preemption settings included: the snapshot shows them, ABI 1.5); the host
//! adds the rules only it knows through [`Checker::check_with`] — scope and quota. The control
//! plane's cycle, the simulator and a policy's tests therefore
//! refuse exactly the same decisions.

use std::borrow::Cow;

use airtime_policy_sdk::abi;
use airtime_policy_sdk::check::Checker;

use crate::fleet::{FleetView, WHOLE_GPU_MILLI};
use crate::snapshot;

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

/// Checks proposals in order; an earlier accepted placement's GPUs, CPU and memory count as taken
/// for later ones, so two placements can never share a GPU.
pub fn check(fleet: &FleetView, scope: Scope, proposals: Vec<Proposal>) -> Checked {
    let snapshot = snapshot::build_for_check(fleet);
    let mut checker = Checker::new(&snapshot);
    let mut held = fleet.held_milli();
    let mut out = Checked::default();
    for proposal in proposals {
        let index = proposal.workload();
        let refuse = |reason: String| Refusal { workload: (index < fleet.workloads.len()).then_some(index), reason };
        if let (Scope::Tenant(t), Some(w)) = (scope, fleet.workloads.get(index))
            && w.tenant != t
        {
            let owner = fleet.tenants.get(w.tenant).map_or("?", |t| t.name.as_str());
            out.refused
                .push(refuse(format!("workload {} belongs to tenant {owner}, outside this policy's scope", w.name)));
            continue;
        }
        let decision = decision(&proposal);
        let verdict = checker.check_with(&decision, |_| match &proposal {
            // The preemption rules are the SDK checker's (the snapshot shows them, ABI 1.5).
            Proposal::Preempt { .. } => Ok(()),
            Proposal::Place { gpus, .. } => within_quota(fleet, index, placement_milli(fleet, index, gpus), &held),
            Proposal::KeepPending { .. } => Ok(()),
        });
        match verdict {
            Ok(()) => {
                if let Proposal::Place { gpus, .. } = &proposal {
                    held[fleet.workloads[index].tenant] += placement_milli(fleet, index, gpus);
                }
                out.accepted.push(proposal);
            }
            Err(reason) => out.refused.push(refuse(reason)),
        }
    }
    // A gang is placed whole or not at all: the members of one placed in part are refused.
    for (workload, reason) in checker.partial_gangs() {
        let workload = workload as usize;
        out.accepted.retain(|p| !(p.workload() == workload && matches!(p, Proposal::Place { .. })));
        out.refused.push(Refusal { workload: Some(workload), reason });
    }
    out
}

/// The proposal as the ABI decision it came from (indexes past `u32` name nothing).
fn decision(proposal: &Proposal) -> abi::Decision<'_> {
    let index = |i: usize| u32::try_from(i).unwrap_or(u32::MAX);
    let (action, reason) = match proposal {
        Proposal::Place { node, gpus, reason, .. } => {
            (abi::Action::Place { node: index(*node), gpus: gpus.iter().map(|&g| index(g)).collect() }, reason)
        }
        Proposal::Preempt { reason, .. } => (abi::Action::Preempt, reason),
        Proposal::KeepPending { reason, .. } => (abi::Action::KeepPending, reason),
    };
    abi::Decision { workload: index(proposal.workload()), action, reason: Cow::Borrowed(reason.as_str()) }
}

/// Thousandths of a GPU a placement takes: a share's thousandths on a shared GPU, else 1000 per
/// GPU (indexes that name nothing take nothing; the structural check refuses them).
pub fn placement_milli(fleet: &FleetView, workload: usize, gpus: &[usize]) -> u32 {
    let Some(w) = fleet.workloads.get(workload) else { return 0 };
    gpus.iter().filter_map(|&g| fleet.gpus.get(g)).map(|g| g.grant_for(w).0).sum()
}

pub use airtime_policy_sdk::gpus_in_words;

/// The quota rules no policy can override, counted in thousandths (a quarter-GPU share counts
/// 0.25): a tenant that may not borrow holds at most its guaranteed GPUs, and no tenant more than
/// its limit.
fn within_quota(fleet: &FleetView, workload: usize, milli: u32, held: &[u32]) -> Result<(), String> {
    let w = &fleet.workloads[workload];
    let tenant = &fleet.tenants[w.tenant];
    let holds = u64::from(held[w.tenant]);
    if let Some(limit) = tenant.gpu_limit
        && milli > 0
        && holds + u64::from(milli) > u64::from(limit) * u64::from(WHOLE_GPU_MILLI)
    {
        return Err(format!(
            "place: tenant {} is at its limit: it holds {} of at most {limit} GPUs and workload {} needs {}",
            tenant.name,
            gpus_in_words(holds),
            w.name,
            gpus_in_words(u64::from(milli))
        ));
    }
    let guaranteed = u64::from(tenant.guaranteed_gpus) * u64::from(WHOLE_GPU_MILLI);
    if milli > 0 && !tenant.may_borrow && holds + u64::from(milli) > guaranteed {
        return Err(format!(
            "place: tenant {} may not borrow: it holds {} of its {} guaranteed GPUs and workload {} needs {}",
            tenant.name,
            gpus_in_words(holds),
            tenant.guaranteed_gpus,
            w.name,
            gpus_in_words(u64::from(milli))
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::{GpuEntry, GpuSharing, Holder, NodeEntry, TenantEntry, TenantView, WorkloadEntry};
    use airtime_protocol::workload::{NodeState, WorkloadState};
    use uuid::Uuid;

    fn fleet() -> FleetView {
        let node = |name: &str, first: usize, count: usize| NodeEntry {
            cost_per_hour: 10.0,
            ..NodeEntry::ready(name, first, count)
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
            holders: holder
                .map(|workload| vec![Holder { workload, milli: WHOLE_GPU_MILLI, memory_mb: 0 }])
                .unwrap_or_default(),
            simulated: true,
            sharing: GpuSharing::None,
            mig_profile: String::new(),
        };
        let workload = |tenant: usize, state: WorkloadState, gpu_count: u32| WorkloadEntry {
            state,
            gpu_memory_mb: 40000,
            ..WorkloadEntry::pending("w", tenant, gpu_count, chrono::Utc::now())
        };
        FleetView {
            now: chrono::Utc::now(),
            settings: Default::default(),
            tenants: vec![TenantEntry::named("a"), TenantEntry::named("b")],
            nodes: vec![node("n1", 0, 2), node("n2", 2, 1)],
            gpus: vec![gpu(0, 0, None), gpu(0, 1, None), gpu(1, 0, Some(3))],
            workloads: vec![
                workload(0, WorkloadState::Pending, 1),
                workload(0, WorkloadState::Pending, 1),
                workload(1, WorkloadState::Pending, 2),
                workload(1, WorkloadState::Running, 1),
            ],
            services: Vec::new(),
            arrivals: Default::default(),
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
            (vec![place(0, 0, &[0]), place(1, 0, &[0])], Scope::Platform, "taken by an earlier decision"),
            (vec![place(0, 1, &[2])], Scope::Platform, "is held by"),
            (vec![place(0, 0, &[2])], Scope::Platform, "is on node n2, not n1"),
            (vec![place(0, 0, &[9])], Scope::Platform, "no GPU 9"),
            (vec![place(2, 0, &[0])], Scope::Platform, "needs 2 GPUs, 1 were given"),
            (vec![place(2, 0, &[0, 0])], Scope::Platform, "listed twice"),
            (vec![place(3, 0, &[0])], Scope::Platform, "running"),
            (vec![place(9, 0, &[0])], Scope::Platform, "snapshot has 4"),
            (vec![place(0, 7, &[0])], Scope::Platform, "no node 7"),
            (vec![place(2, 0, &[0, 1])], Scope::Tenant(0), "outside this policy's scope"),
            (vec![place(0, 0, &[])], Scope::Platform, "cannot run on CPU"),
            (vec![Proposal::Preempt { workload: 3, reason: String::new() }], Scope::Platform, "not preemptible"),
            (
                vec![place(0, 0, &[0]), Proposal::KeepPending { workload: 0, reason: String::new() }],
                Scope::Platform,
                "already has a decision",
            ),
        ];
        for (proposals, scope, expected) in cases {
            let reason = refusal_of(proposals, scope);
            assert!(reason.contains(expected), "{reason:?} should contain {expected:?}");
        }
    }

    #[test]
    fn no_placement_lands_on_a_cordoned_or_draining_node_whatever_the_policy_says() {
        for state in [NodeState::Cordoned, NodeState::Draining, NodeState::Lost] {
            let mut f = fleet();
            f.nodes[0].state = state;
            let checked = check(&f, Scope::Platform, vec![place(0, 0, &[0]), place(1, 0, &[])]);
            assert!(checked.accepted.is_empty(), "{state:?}: {checked:?}");
            assert_eq!(checked.refused.len(), 2, "{state:?}: {checked:?}");
            assert!(checked.refused[0].reason.contains("node n1 is"), "{:?}", checked.refused[0]);
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
        assert_eq!(t.view.gpus[1].holder(), Some(1), "its running workload, renumbered");
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

    #[test]
    fn a_tenant_that_may_not_borrow_holds_at_most_its_guarantee() {
        let mut f = fleet();
        f.tenants[0].may_borrow = false;
        f.tenants[0].guaranteed_gpus = 1;
        let checked = check(&f, Scope::Platform, vec![place(0, 0, &[0]), place(1, 0, &[1])]);
        assert_eq!(checked.accepted, vec![place(0, 0, &[0])]);
        assert!(
            checked.refused[0].reason.contains("may not borrow: it holds 1 of its 1 guaranteed GPUs"),
            "{checked:?}"
        );
        // The refused placement's GPU stays free for others.
        let checked = check(&f, Scope::Platform, vec![place(0, 0, &[0]), place(1, 0, &[1]), place(2, 0, &[1, 1])]);
        assert_eq!(checked.accepted.len(), 1);
        let checked = check(&f, Scope::Platform, vec![place(1, 0, &[1]), place(0, 0, &[1])]);
        assert_eq!(checked.accepted, vec![place(1, 0, &[1])], "the first placement took the one allowed GPU");
    }

    /// Shares: four quarters fill a shared GPU and the fifth is refused; a tenant's quota counts a
    /// quarter as 0.25; whole-GPU work is refused on the shared GPU.
    #[test]
    fn shares_never_over_commit_a_gpu_and_count_as_fractions_in_the_quota() {
        let mut f = fleet();
        f.gpus[0].sharing = GpuSharing::Mps;
        f.workloads.truncate(1);
        f.workloads[0].gpu_count = 0;
        let quarter = |f: &FleetView| WorkloadEntry {
            gpu_count: 1,
            gpu_milli: 250,
            gpu_memory_mb: 10000,
            ..f.workloads[0].clone()
        };
        f.workloads = (0..5).map(|_| quarter(&f)).collect();
        f.workloads.push(WorkloadEntry { gpu_milli: WHOLE_GPU_MILLI, ..quarter(&f) });
        let checked = check(&f, Scope::Platform, (0..6).map(|w| place(w, 0, &[0])).collect());
        assert_eq!(checked.accepted.len(), 4, "{checked:?}");
        assert!(checked.refused[0].reason.contains("has 0/1000 unshared (0 sharers)"), "{checked:?}");
        assert!(checked.refused[1].reason.contains("taken by an earlier decision"), "{checked:?}");

        // A tenant guaranteed one GPU that may not borrow: three quarters and a half are 1.25.
        f.tenants[0].may_borrow = false;
        f.tenants[0].guaranteed_gpus = 1;
        f.tenants[0].running_gpu_milli = 750;
        f.workloads[0].gpu_milli = 500;
        let checked = check(&f, Scope::Platform, vec![place(0, 0, &[0])]);
        assert!(
            checked.refused[0].reason.contains("it holds 0.75 of its 1 guaranteed GPUs and workload w needs 0.5"),
            "{checked:?}"
        );
        f.workloads[0].gpu_milli = 250;
        assert!(check(&f, Scope::Platform, vec![place(0, 0, &[0])]).refused.is_empty());
        // A MIG instance is granted (and counted) as its share of the GPU's seven compute slices.
        let mut mig = f.gpus[1].clone();
        mig.sharing = GpuSharing::Mig;
        mig.mig_profile = "1g.10gb".into();
        let asks_mig =
            WorkloadEntry { gpu_milli: WHOLE_GPU_MILLI, mig_profile: "1g.10gb".into(), ..f.workloads[0].clone() };
        assert_eq!(mig.grant_for(&asks_mig), (142, 0));
        mig.mig_profile = "3g.40gb".into();
        assert_eq!(mig.capacity_milli(), 428);
        assert_eq!(gpus_in_words(1250), "1.25");
        assert_eq!(gpus_in_words(3000), "3");
    }

    /// The host's structural rules are the SDK's: on every decision a policy's own tests accept or
    /// refuse, the host agrees (where its own rules — scope, quota, preemption settings — allow).
    #[test]
    fn the_host_refuses_exactly_what_a_policys_tests_refuse() {
        let f = fleet();
        let candidates = [
            place(0, 0, &[0]),
            place(0, 0, &[1]),
            place(1, 0, &[0]),
            place(1, 0, &[1]),
            place(2, 0, &[0, 1]),
            place(2, 1, &[2]),
            place(0, 1, &[]),
            place(3, 0, &[0]),
            place(0, 5, &[0]),
            place(7, 0, &[0]),
            Proposal::Preempt { workload: 3, reason: String::new() },
            Proposal::KeepPending { workload: 1, reason: String::new() },
            Proposal::KeepPending { workload: 3, reason: String::new() },
        ];
        // Every ordered pair and triple of candidates, as one policy output each.
        let mut outputs: Vec<Vec<Proposal>> = Vec::new();
        for a in &candidates {
            for b in &candidates {
                outputs.push(vec![a.clone(), b.clone()]);
                for c in candidates.iter().step_by(3) {
                    outputs.push(vec![a.clone(), b.clone(), c.clone()]);
                }
            }
        }
        let snapshot = snapshot::build(&f, "", None);
        for output in outputs {
            let decisions: Vec<abi::Decision<'_>> = output.iter().map(decision).collect();
            let sdk: Vec<String> = airtime_policy_sdk::check::check_decisions(&snapshot, &decisions)
                .into_iter()
                .map(|p| p.problem)
                .collect();
            let host: Vec<String> =
                check(&f, Scope::Platform, output.clone()).refused.into_iter().map(|r| r.reason).collect();
            assert_eq!(host, sdk, "{output:?}");
        }
    }
}
