//! Encodes the cycle's `FleetView` into the policy ABI's snapshot, borrowing its strings, and
//! turns a policy's decoded decisions into proposals for the check.

use airtime_policy_sdk::abi;

use crate::fleet::{FleetView, GpuSharing, WHOLE_GPU_MILLI};
use crate::services::{LoadMetric, ReplicaVariant, ScalePlan, ServiceEntry};
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
///
/// The services table (ABI 1.3) carries `fleet.services` with the autoscaler's plan for each
/// ([`crate::services::plan`] on this fleet, computed only when it has services). A tenant's view
/// (`FleetView::tenant_view`) holds only that tenant's services, indexes remapped, so a tenant's
/// snapshot carries only its own.
///
/// A tenant's snapshot plans its services on the tenant's view: demand and the placed and pending
/// replicas are the platform's numbers, but the desired split between CPU and GPU replicas counts
/// only the CPU room of the nodes that view holds, so it can differ from what the platform's plan
/// starts (the autoscaler acts on the platform's plan only).
pub fn build<'a>(fleet: &'a FleetView, params: &'a str, scope_tenant: Option<usize>) -> abi::Snapshot<'a> {
    build_inner(fleet, params, scope_tenant, true)
}

/// The platform snapshot the host's check reads: the services without their plans (the check
/// needs none of the autoscaler's numbers, so a cycle does not plan once more to check).
pub fn build_for_check(fleet: &FleetView) -> abi::Snapshot<'_> {
    build_inner(fleet, "", None, false)
}

fn build_inner<'a>(
    fleet: &'a FleetView,
    params: &'a str,
    scope_tenant: Option<usize>,
    planned: bool,
) -> abi::Snapshot<'a> {
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
                gpu_limit: t.gpu_limit.unwrap_or(0),
            })
            .collect(),
        nodes: fleet
            .nodes
            .iter()
            .map(|n| abi::Node {
                name: &n.name,
                // A cordoned node is `draining` to policies: the ABI's word for a node that takes
                // no new work (its own meaning since ABI 1.0), so every guest already leaves it alone.
                state: match n.state {
                    NodeState::Ready => abi::NodeState::Ready,
                    NodeState::Cordoned | NodeState::Draining => abi::NodeState::Draining,
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
                containers: n.containers,
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
                container: w.container,
                preemptions_last_hour: w.preemptions_last_hour,
                gang_size: w.gang.as_ref().map_or(0, |g| g.size),
                gang_rank: w.gang.as_ref().map_or(0, |g| g.rank),
                gang_id: w.gang.as_ref().map_or("", |g| &g.id),
                // A replica of a service outside this view names none (a tenant view keeps only
                // its own services, and remaps the index).
                service: w.replica_of.filter(|r| r.service < fleet.services.len()).map(|r| to_index(r.service)),
                replica_variant: w
                    .replica_of
                    .filter(|r| r.service < fleet.services.len())
                    .map_or(abi::ReplicaVariant::None, |r| replica_variant(r.variant)),
            })
            .collect(),
        settings: Some(settings(fleet)),
        params,
        scope_tenant: scope_tenant.map(to_index),
        services: services(fleet, planned),
        arrivals: fleet
            .arrivals
            .iter()
            .map(|a| abi::Arrival {
                gpu_milli: a.gpu_milli,
                gpu_count: a.gpu_count,
                cpu_millis: a.cpu_millis,
                count: a.count,
                gpu_models: &a.gpu_models,
            })
            .collect(),
    }
}

/// The services with their plans (zeros unless `planned`); nothing to compute for a fleet
/// without services.
fn services(fleet: &FleetView, planned: bool) -> Vec<abi::Service<'_>> {
    if fleet.services.is_empty() {
        return Vec::new();
    }
    if !planned {
        return fleet
            .services
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let none = ScalePlan {
                    service: i,
                    desired: Default::default(),
                    placed: Default::default(),
                    pending: Default::default(),
                    demand: None,
                    latest: None,
                    start: Vec::new(),
                    drain: Vec::new(),
                    reason: String::new(),
                };
                service(s, &none)
            })
            .collect();
    }
    let plans = crate::services::plan(fleet);
    fleet.services.iter().zip(&plans).map(|(s, p)| service(s, p)).collect()
}

fn service<'a>(s: &'a ServiceEntry, p: &ScalePlan) -> abi::Service<'a> {
    abi::Service {
        name: &s.name,
        tenant: to_index(s.tenant),
        class: class(s.class),
        metric: match s.metric {
            LoadMetric::RequestsPerSecond => abi::LoadMetric::RequestsPerSecond,
            LoadMetric::ConcurrentRequests => abi::LoadMetric::ConcurrentRequests,
            LoadMetric::TokensPerSecond => abi::LoadMetric::TokensPerSecond,
        },
        min_replicas: s.min_replicas,
        max_replicas: s.max_replicas,
        capacity: s.capacity as f32,
        cpu_capacity: s.cpu_variant.as_ref().map_or(0.0, |c| c.capacity as f32),
        demand: p.demand.unwrap_or(0.0) as f32,
        latest: p.latest.unwrap_or(0.0) as f32,
        desired_gpu: p.desired.gpu,
        desired_cpu: p.desired.cpu,
        placed_gpu: p.placed.gpu,
        placed_cpu: p.placed.cpu,
        pending_gpu: p.pending.gpu,
        pending_cpu: p.pending.cpu,
        gpu_milli_per_replica: s.gpu_milli_per_replica,
        has_cpu_variant: s.cpu_variant.is_some(),
        draining: s.draining,
        // The plan has no demand while the reports are stale (or the service drains).
        stale: p.demand.is_none() && !s.draining,
    }
}

fn replica_variant(v: ReplicaVariant) -> abi::ReplicaVariant {
    match v {
        ReplicaVariant::Gpu => abi::ReplicaVariant::Gpu,
        ReplicaVariant::Cpu => abi::ReplicaVariant::Cpu,
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
        checkpointable_only: s.checkpointable_only,
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

#[cfg(test)]
mod tests {
    use chrono::{Duration, TimeZone, Utc};

    use super::*;
    use crate::fleet::{NodeEntry, ReplicaOf, TenantEntry, WorkloadEntry};
    use crate::services::{CpuVariant, LoadSample};

    fn service(name: &str, tenant: usize) -> ServiceEntry {
        ServiceEntry::fixture(name, tenant)
    }

    fn workload(f: &FleetView, name: &str, tenant: usize, replica_of: Option<ReplicaOf>) -> WorkloadEntry {
        WorkloadEntry {
            id_text: format!("00000000-0000-4000-8000-{:012}", f.workloads.len()).into(),
            class: WorkloadClass::RealtimeInference,
            replica_of,
            ..WorkloadEntry::pending(name, tenant, 1, f.now - Duration::seconds(60))
        }
    }

    /// Two tenants with a service each (`chat` of `web`, with a CPU variant and 42 req/s now;
    /// `search` of `acme`, never reported), a pending GPU replica of each, and a job.
    fn fleet() -> FleetView {
        let now = Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap();
        let mut f = FleetView {
            now,
            tenants: vec![TenantEntry::named("web"), TenantEntry::named("acme")],
            nodes: vec![NodeEntry::ready("gpu-0", 0, 0)],
            ..FleetView::default()
        };
        let mut chat = service("chat", 0);
        chat.cpu_variant = Some(CpuVariant { capacity: 5.0, cpu_millis: 4000, memory_mb: 8192 });
        chat.loads = vec![LoadSample { at: now, value: 42.0 }];
        f.services = vec![chat, service("search", 1)];
        let job = workload(&f, "train", 1, None);
        f.workloads.push(job);
        let replica =
            workload(&f, "search-0", 1, Some(ReplicaOf { service: 1, variant: ReplicaVariant::Gpu, ready: true }));
        f.workloads.push(replica);
        let replica =
            workload(&f, "chat-0", 0, Some(ReplicaOf { service: 0, variant: ReplicaVariant::Gpu, ready: true }));
        f.workloads.push(replica);
        f
    }

    #[test]
    fn the_platform_snapshot_carries_the_weeks_arrivals_and_a_tenants_carries_none() {
        let mut f = fleet();
        f.arrivals = std::sync::Arc::new(vec![crate::fleet::ArrivalEntry {
            gpu_milli: 250,
            gpu_count: 1,
            cpu_millis: 1000,
            gpu_models: "H100".into(),
            count: 7,
        }]);
        let platform = build(&f, "{}", None);
        let a = &platform.arrivals[..];
        assert_eq!(a.len(), 1);
        assert_eq!(
            (a[0].gpu_milli, a[0].gpu_count, a[0].cpu_millis, a[0].count, a[0].gpu_models),
            (250, 1, 1000, 7, "H100")
        );
        // Everyone's shapes are the platform's to see, not a tenant's.
        let view = f.tenant_view(1, &[], &[]);
        assert!(build(&view.view, "{}", Some(0)).arrivals.is_empty());
    }

    #[test]
    fn a_replica_names_its_service_and_the_services_carry_their_plans() {
        let f = fleet();
        let snapshot = build(&f, "{}", None);
        let plans = crate::services::plan(&f);
        let names: Vec<&str> = snapshot.services.iter().map(|s| s.name).collect();
        assert_eq!(names, ["chat", "search"]);
        let (job, search, chat) = (&snapshot.workloads[0], &snapshot.workloads[1], &snapshot.workloads[2]);
        assert_eq!((job.service, job.replica_variant), (None, abi::ReplicaVariant::None));
        assert_eq!((search.service, search.replica_variant), (Some(1), abi::ReplicaVariant::Gpu));
        assert_eq!(snapshot.service_of(chat).map(|s| s.name), Some("chat"));

        let c = &snapshot.services[0];
        assert_eq!(
            (c.tenant, c.class, c.metric),
            (0, abi::WorkloadClass::RealtimeInference, abi::LoadMetric::RequestsPerSecond)
        );
        assert_eq!((c.min_replicas, c.max_replicas, c.gpu_milli_per_replica), (1, 10, 1000));
        assert_eq!((c.capacity, c.cpu_capacity, c.latest), (15.0, 5.0, 42.0));
        assert_eq!(c.demand, plans[0].demand.expect("a fresh report") as f32);
        assert_eq!((c.desired_gpu, c.desired_cpu), (plans[0].desired.gpu, plans[0].desired.cpu));
        assert!(c.desired_replicas() > 0);
        assert_eq!((c.placed_gpu, c.placed_cpu, c.pending_gpu, c.pending_cpu), (0, 0, 1, 0));
        assert!(c.has_cpu_variant && !c.draining && !c.stale);

        let s = &snapshot.services[1];
        assert_eq!((s.tenant, s.pending_gpu, s.demand, s.latest), (1, 1, 0.0, 0.0));
        assert!(s.stale && !s.has_cpu_variant, "never reported: the plan holds, with no demand");
        assert_eq!((s.desired_gpu, s.desired_cpu), (plans[1].desired.gpu, plans[1].desired.cpu));

        // Through the ABI both ways, as a guest reads it.
        let bytes = abi::encode_snapshot(&snapshot);
        assert_eq!(abi::decode_snapshot(&bytes), Ok(snapshot));
    }

    #[test]
    fn a_tenant_snapshot_holds_only_its_own_services() {
        let f = fleet();
        let view = f.tenant_view(1, &[], &[]);
        let snapshot = build(&view.view, "{}", Some(crate::fleet::TenantView::SCOPE_TENANT));
        assert_eq!(snapshot.services.len(), 1);
        let search = &snapshot.services[0];
        assert_eq!((search.name, search.tenant, search.pending_gpu), ("search", 0, 1));
        let names: Vec<&str> = snapshot.workloads.iter().map(|w| w.name).collect();
        assert_eq!(names, ["train", "search-0"], "only its own workloads");
        assert_eq!(snapshot.workloads[1].service, Some(0), "the index remapped to its own services");
        assert_eq!(snapshot.replicas(0).map(|(i, _)| i).collect::<Vec<_>>(), [1]);
        let bytes = abi::encode_snapshot(&snapshot);
        assert_eq!(abi::decode_snapshot(&bytes), Ok(snapshot));
    }

    #[test]
    fn a_fleet_without_services_sends_an_empty_table() {
        let mut f = fleet();
        f.services.clear();
        for w in &mut f.workloads {
            w.replica_of = None;
        }
        let snapshot = build(&f, "{}", None);
        assert!(snapshot.services.is_empty());
        assert!(snapshot.workloads.iter().all(|w| w.service.is_none()));
    }

    #[test]
    fn a_replica_of_a_service_outside_the_view_names_none() {
        let mut f = fleet();
        f.services.truncate(1);
        let snapshot = build(&f, "{}", None);
        assert_eq!(snapshot.workloads[1].service, None);
        assert_eq!(snapshot.workloads[1].replica_variant, abi::ReplicaVariant::None);
        assert_eq!(snapshot.workloads[2].service, Some(0));
        assert!(abi::decode_snapshot(&abi::encode_snapshot(&snapshot)).is_ok());
    }
}
