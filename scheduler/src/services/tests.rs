//! The autoscaler's rules, one story each.

use chrono::{Duration, TimeZone, Utc};

use super::*;
use crate::fleet::{NodeEntry, ReplicaOf, TenantEntry, WorkloadEntry};

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap()
}

fn chat() -> ServiceEntry {
    ServiceEntry { id: Uuid::from_u128(1), ..ServiceEntry::fixture("chat", 0) }
}

fn with_cpu(mut s: ServiceEntry) -> ServiceEntry {
    s.cpu_variant = Some(CpuVariant { capacity: 5.0, cpu_millis: 4000, memory_mb: 8192 });
    s
}

/// A fleet at `t0()` with one GPU node and `cpu_nodes` CPU nodes of 8 cores, and `service`.
fn fleet(service: ServiceEntry, cpu_nodes: usize) -> FleetView {
    let mut nodes = vec![NodeEntry::ready("gpu-0", 0, 8)];
    nodes.extend((0..cpu_nodes).map(|i| NodeEntry::ready(&format!("cpu-{i}"), 0, 0)));
    FleetView {
        now: t0(),
        tenants: vec![TenantEntry::named("web")],
        nodes,
        services: vec![service],
        ..FleetView::default()
    }
}

/// Reports `values`, one every 10 s, the last one now.
fn report(f: &mut FleetView, values: &[f64]) {
    let n = values.len() as i64;
    f.services[0].loads = values
        .iter()
        .enumerate()
        .map(|(i, &value)| LoadSample { at: f.now - Duration::seconds(10 * (n - 1 - i as i64)), value })
        .collect();
}

/// A replica of the first service in `state` (placed ones on node `node`).
fn replica(f: &mut FleetView, variant: ReplicaVariant, state: WorkloadState, node: usize) -> usize {
    let i = f.workloads.len();
    let placed = state != WorkloadState::Pending;
    let gpu_count = u32::from(variant == ReplicaVariant::Gpu);
    f.workloads.push(WorkloadEntry {
        class: WorkloadClass::RealtimeInference,
        state,
        cpu_millis: 4000,
        memory_mb: 8192,
        started_at: placed.then(|| f.now - Duration::seconds(500 - i as i64)),
        node: placed.then_some(node),
        replica_of: Some(ReplicaOf { service: 0, variant, ready: placed }),
        ..WorkloadEntry::pending(&format!("chat-{i}"), 0, gpu_count, f.now - Duration::seconds(600 - i as i64))
    });
    if placed && variant == ReplicaVariant::Cpu {
        f.nodes[node].cpu_millis_free -= 4000;
        f.nodes[node].memory_mb_free -= 8192;
    }
    i
}

#[test]
fn rising_demand_starts_the_replicas_it_needs_and_says_why() {
    let mut f = fleet(chat(), 0);
    replica(&mut f, ReplicaVariant::Gpu, WorkloadState::Running, 0);
    report(&mut f, &[42.0]);
    let plan = &plan(&f)[0];
    assert_eq!(plan.desired, Replicas { gpu: 3, cpu: 0 });
    assert_eq!(plan.start, vec![ReplicaVariant::Gpu, ReplicaVariant::Gpu]);
    assert!(plan.drain.is_empty());
    assert_eq!(plan.reason, "scale up: demand 42 req/s over 3 replicas at 15 req/s each");
}

#[test]
fn bursty_demand_gets_headroom_and_a_smooth_one_does_not() {
    let mut smooth = fleet(chat(), 0);
    report(&mut smooth, &[30.0, 30.0, 30.0, 30.0]);
    assert_eq!(plan(&smooth)[0].desired.gpu, 2);

    let mut bursty = fleet(chat(), 0);
    report(&mut bursty, &[10.0, 50.0, 10.0, 30.0]);
    let plan = &plan(&bursty)[0];
    // The down window still remembers 50 req/s, and the swings between reports add headroom.
    assert!(plan.demand.unwrap() > 60.0, "{plan:?}");
    assert!(plan.reason.contains("for bursts"), "{}", plan.reason);
}

#[test]
fn a_dip_drains_nothing_until_the_scale_down_window_has_passed() {
    let mut f = fleet(chat(), 0);
    for _ in 0..3 {
        replica(&mut f, ReplicaVariant::Gpu, WorkloadState::Running, 0);
    }
    // 45 req/s a minute ago, 10 now: the 300 s window still holds the 45.
    report(&mut f, &[45.0, 45.0, 10.0, 10.0, 10.0, 10.0]);
    f.services[0].scale_down_window_s = 300;
    let held = &plan(&f)[0];
    assert!(!held.changes(), "{held:?}");
    // Once the window no longer holds the peak, two replicas drain, newest first.
    f.services[0].scale_down_window_s = 30;
    let down = &plan(&f)[0];
    assert_eq!(down.desired.gpu, 1, "{down:?}");
    assert_eq!(down.drain, vec![2, 1]);
    assert!(down.reason.starts_with("scale down: demand 10 req/s"), "{}", down.reason);
}

#[test]
fn without_reports_it_holds_what_runs_and_never_drops_below_min() {
    let mut f = fleet(ServiceEntry { min_replicas: 2, ..chat() }, 0);
    replica(&mut f, ReplicaVariant::Gpu, WorkloadState::Running, 0);
    let never = &plan(&f)[0];
    assert_eq!(never.desired.gpu, 2, "{never:?}");
    assert_eq!(never.start, vec![ReplicaVariant::Gpu]);
    assert!(never.reason.starts_with("no load report yet: holding 2 replicas"), "{}", never.reason);

    // Three replicas ran for a peak; the reports stopped 5 minutes ago at 1 req/s: all three stay.
    for _ in 0..2 {
        replica(&mut f, ReplicaVariant::Gpu, WorkloadState::Running, 0);
    }
    f.services[0].loads = vec![LoadSample { at: f.now - Duration::seconds(300), value: 1.0 }];
    let stale = &plan(&f)[0];
    assert!(!stale.changes(), "{stale:?}");
    assert!(stale.reason.starts_with("no load report for 300 s: holding 3 replicas"), "{}", stale.reason);
}

#[test]
fn a_light_model_fills_the_cpu_nodes_first_and_spills_to_gpus_at_the_peak() {
    // Two CPU nodes of 8 cores hold four 4-core CPU replicas (20 req/s).
    let mut f = fleet(with_cpu(chat()), 2);
    report(&mut f, &[12.0]);
    let low = &plan(&f)[0];
    assert_eq!(low.desired, Replicas { gpu: 0, cpu: 3 });

    report(&mut f, &[50.0]);
    let peak = &plan(&f)[0];
    assert_eq!(peak.desired, Replicas { gpu: 2, cpu: 4 }, "{peak:?}");
    assert!(
        peak.reason.contains("4 CPU replicas at 5 req/s each and 2 GPU replicas at 15 req/s each"),
        "{}",
        peak.reason
    );
    assert!(peak.reason.contains("CPU nodes have room for 4 CPU replicas"), "{}", peak.reason);
}

#[test]
fn when_demand_falls_the_gpu_replicas_drain_first_and_the_cpus_carry_it() {
    let mut f = fleet(ServiceEntry { scale_down_window_s: 0, ..with_cpu(chat()) }, 2);
    for node in [1, 1, 2, 2] {
        replica(&mut f, ReplicaVariant::Cpu, WorkloadState::Running, node);
    }
    let gpu_a = replica(&mut f, ReplicaVariant::Gpu, WorkloadState::Running, 0);
    let gpu_b = replica(&mut f, ReplicaVariant::Gpu, WorkloadState::Running, 0);
    report(&mut f, &[18.0]);
    let plan = &plan(&f)[0];
    assert_eq!(plan.desired, Replicas { gpu: 0, cpu: 4 }, "{plan:?}");
    assert_eq!(plan.drain, vec![gpu_b, gpu_a]);
}

#[test]
fn a_move_back_to_cpu_keeps_the_gpu_replicas_until_the_cpu_ones_run() {
    // The CPU nodes were full; now they are free. Demand 18 on 2 GPU replicas (30).
    let mut f = fleet(ServiceEntry { scale_down_window_s: 0, ..with_cpu(chat()) }, 2);
    replica(&mut f, ReplicaVariant::Gpu, WorkloadState::Running, 0);
    replica(&mut f, ReplicaVariant::Gpu, WorkloadState::Running, 0);
    report(&mut f, &[18.0]);
    let first = &plan(&f)[0];
    assert_eq!(first.desired, Replicas { gpu: 0, cpu: 4 });
    assert_eq!(first.start.len(), 4);
    assert!(first.drain.is_empty(), "nothing placed carries the demand yet: {first:?}");

    // Next cycle the four CPU replicas are pending: still no drain.
    for _ in 0..4 {
        replica(&mut f, ReplicaVariant::Cpu, WorkloadState::Pending, 0);
    }
    let waiting = &plan(&f)[0];
    assert!(waiting.start.is_empty() && waiting.drain.is_empty(), "{waiting:?}");

    // They run: both GPU replicas drain.
    for (w, node) in [(2, 1), (3, 1), (4, 2), (5, 2)] {
        f.workloads[w].state = WorkloadState::Running;
        f.workloads[w].node = Some(node);
        f.workloads[w].started_at = Some(f.now);
        f.workloads[w].replica_of.as_mut().unwrap().ready = true;
        f.nodes[node].cpu_millis_free -= 4000;
        f.nodes[node].memory_mb_free -= 8192;
    }
    let moved = &plan(&f)[0];
    assert_eq!(moved.drain, vec![1, 0], "{moved:?}");
}

#[test]
fn a_replica_whose_server_has_not_answered_carries_nothing_and_drains_before_one_that_serves() {
    let mut f = fleet(ServiceEntry { scale_down_window_s: 0, ..chat() }, 0);
    let starting = replica(&mut f, ReplicaVariant::Gpu, WorkloadState::Running, 0);
    f.workloads[starting].replica_of.as_mut().unwrap().ready = false;
    let serving = replica(&mut f, ReplicaVariant::Gpu, WorkloadState::Running, 0);
    report(&mut f, &[14.0]);
    let plan = &plan(&f)[0];
    assert_eq!(plan.desired, Replicas { gpu: 1, cpu: 0 });
    // The newest serves and alone carries the demand: the one still starting goes.
    assert_eq!(plan.drain, vec![starting], "{plan:?}");
    assert_ne!(plan.drain, vec![serving]);
}

#[test]
fn the_cpu_variant_is_used_only_while_its_load_costs_no_more_than_on_gpus() {
    // A GPU replica costs 4 an hour for 15 req/s (0.27 a unit); a CPU replica 2 for 5 (0.40).
    let dear = ServiceEntry { replica_cost_per_hour: Some(VariantCosts { gpu: 4.0, cpu: 2.0 }), ..with_cpu(chat()) };
    let mut f = fleet(dear, 2);
    report(&mut f, &[12.0]);
    assert_eq!(plan(&f)[0].desired, Replicas { gpu: 1, cpu: 0 });
    // At 0.5 an hour (0.10 a unit) the CPU nodes come first again.
    f.services[0].replica_cost_per_hour = Some(VariantCosts { gpu: 4.0, cpu: 0.5 });
    assert_eq!(plan(&f)[0].desired, Replicas { gpu: 0, cpu: 3 });
    // Running on both, demand gone: the dearer per unit of load (here GPU) drains first.
    f.services[0].scale_down_window_s = 0;
    let cpu = replica(&mut f, ReplicaVariant::Cpu, WorkloadState::Running, 1);
    let gpu = replica(&mut f, ReplicaVariant::Gpu, WorkloadState::Running, 0);
    report(&mut f, &[4.0]);
    let down = &plan(&f)[0];
    assert_eq!(down.drain, vec![gpu], "{down:?}");
    assert_ne!(down.drain, vec![cpu]);
}

#[test]
fn pending_replicas_that_no_cpu_node_can_hold_give_way_to_gpu_replicas() {
    let mut f = fleet(with_cpu(chat()), 1);
    replica(&mut f, ReplicaVariant::Cpu, WorkloadState::Running, 1);
    replica(&mut f, ReplicaVariant::Cpu, WorkloadState::Running, 1);
    let stuck = replica(&mut f, ReplicaVariant::Cpu, WorkloadState::Pending, 0);
    report(&mut f, &[15.0]);
    let plan = &plan(&f)[0];
    assert_eq!(plan.desired, Replicas { gpu: 1, cpu: 2 }, "{plan:?}");
    assert_eq!(plan.drain, vec![stuck]);
    assert_eq!(plan.start, vec![ReplicaVariant::Gpu]);
}

#[test]
fn bounds_hold_at_the_peak_and_a_lowered_maximum_drains_at_once() {
    let mut f = fleet(ServiceEntry { max_replicas: 4, ..chat() }, 0);
    report(&mut f, &[500.0]);
    assert_eq!(plan(&f)[0].desired.gpu, 4);

    let mut f = fleet(ServiceEntry { max_replicas: 2, ..chat() }, 0);
    for _ in 0..4 {
        replica(&mut f, ReplicaVariant::Gpu, WorkloadState::Running, 0);
    }
    report(&mut f, &[60.0]);
    let plan = &plan(&f)[0];
    assert_eq!(plan.desired.gpu, 2);
    assert_eq!(plan.drain.len(), 2);
}

#[test]
fn a_deleted_service_drains_every_replica() {
    let mut f = fleet(ServiceEntry { draining: true, ..chat() }, 0);
    replica(&mut f, ReplicaVariant::Gpu, WorkloadState::Running, 0);
    replica(&mut f, ReplicaVariant::Gpu, WorkloadState::Pending, 0);
    report(&mut f, &[100.0]);
    let plan = &plan(&f)[0];
    assert_eq!(plan.desired.total(), 0);
    assert_eq!(plan.drain.len(), 2);
    assert!(plan.start.is_empty());
}

#[test]
fn the_burst_reserve_keeps_room_for_the_last_hours_peak() {
    let mut f = fleet(chat(), 0);
    report(&mut f, &[20.0]);
    f.services[0].recent_peak = Some(80.0);
    let plans = plan(&f);
    assert_eq!(plans[0].desired.gpu, 2);
    // 80 req/s needs 6 replicas: 4 more GPUs than the 2 desired.
    assert_eq!(burst_reserve(&f, &plans), 4);

    f.services[0].gpu_milli_per_replica = 250;
    assert_eq!(burst_reserve(&f, &plans), 1, "four quarter-GPU replicas are one GPU");
    f.services[0].recent_peak = None;
    assert_eq!(burst_reserve(&f, &plans), 0);
}

#[test]
fn a_replica_on_a_draining_node_is_replaced_elsewhere_before_it_stops() {
    // Two GPU nodes; both replicas run on the first, which an operator drains.
    let mut f = fleet(chat(), 0);
    let second = NodeEntry { id: Uuid::new_v4(), name: "gpu-1".into(), ..f.nodes[0].clone() };
    f.nodes.push(second);
    f.nodes[0].state = NodeState::Draining;
    let old = [
        replica(&mut f, ReplicaVariant::Gpu, WorkloadState::Running, 0),
        replica(&mut f, ReplicaVariant::Gpu, WorkloadState::Running, 0),
    ];
    // Without fresh reports nothing is replaced (a replacement could not be told from a replica
    // that was there): both are held.
    let stale = &plan(&f)[0];
    assert_eq!(stale.desired, Replicas { gpu: 2, cpu: 0 });
    assert!(stale.start.is_empty() && stale.drain.is_empty(), "{stale:?}");
    assert!(stale.reason.contains("not replaced without fresh load reports"), "{}", stale.reason);
    report(&mut f, &[28.0]);

    // The desired count is unchanged by the drain; both replacements start, nothing stops yet.
    let first = &plan(&f)[0];
    assert_eq!(first.desired, Replicas { gpu: 2, cpu: 0 });
    assert_eq!(first.start, vec![ReplicaVariant::Gpu, ReplicaVariant::Gpu]);
    assert!(first.drain.is_empty(), "{first:?}");
    assert!(first.reason.contains("on draining nodes, 0 replaced and stopping"), "{}", first.reason);

    // Placed but not yet running: still nothing stops (no dip below what the service should have).
    let new = [
        replica(&mut f, ReplicaVariant::Gpu, WorkloadState::Scheduled, 1),
        replica(&mut f, ReplicaVariant::Gpu, WorkloadState::Scheduled, 1),
    ];
    let waiting = &plan(&f)[0];
    assert!(waiting.start.is_empty() && waiting.drain.is_empty(), "{waiting:?}");

    // One replacement runs: one old replica stops; both run: both have.
    f.workloads[new[0]].state = WorkloadState::Running;
    let one = &plan(&f)[0];
    assert_eq!((one.start.len(), one.drain.len()), (0, 1), "{one:?}");
    assert!(old.contains(&one.drain[0]));
    f.workloads[new[1]].state = WorkloadState::Running;
    let both = &plan(&f)[0];
    let mut drained = both.drain.clone();
    drained.sort_unstable();
    assert_eq!(drained, old.to_vec());

    // A node that is only cordoned moves nothing.
    f.nodes[0].state = NodeState::Cordoned;
    let cordoned = &plan(&f)[0];
    assert!(cordoned.drain.iter().all(|w| !old.contains(w)), "{cordoned:?}");
}

/// An adapter over a fleet in memory: the autoscaler's plans "applied" by adding the replicas they
/// start as pending work; what the cycle decided on noted.
struct InMemory {
    fleet: FleetView,
    scaled_with: Vec<ScalePlan>,
    decided_on: Option<FleetView>,
}

impl crate::cycle::Adapter for InMemory {
    type Policy = NoPolicy;
    type Error = crate::cycle::BuiltinFailed;

    async fn read(&mut self) -> Result<FleetView, Self::Error> {
        Ok(self.fleet.clone())
    }

    async fn scale(&mut self, _: &FleetView, plans: &[ScalePlan]) -> Result<Option<FleetView>, Self::Error> {
        self.scaled_with = plans.to_vec();
        if !plans.iter().any(ScalePlan::changes) {
            return Ok(None);
        }
        for &variant in plans.iter().flat_map(|p| &p.start) {
            replica(&mut self.fleet, variant, WorkloadState::Pending, 0);
        }
        Ok(Some(self.fleet.clone()))
    }

    fn decides(&mut self, fleet: &FleetView) -> bool {
        self.decided_on = Some(fleet.clone());
        false
    }

    async fn levels(&mut self, _: &FleetView) -> Result<crate::cycle::Levels<NoPolicy>, Self::Error> {
        Ok(crate::cycle::Levels { platform: NoPolicy, tenants: Vec::new() })
    }
}

use crate::cycle::NoPolicy;

/// The one cycle on a fleet with `floor` GPUs of configured burst reserve: the adapter, and the
/// burst reserve of the fleet the cycle would decide on.
fn one_cycle(mut f: FleetView, floor: i32) -> (InMemory, i32) {
    f.settings.burst_reserve_gpus = floor;
    let mut adapter = InMemory { fleet: f, scaled_with: Vec::new(), decided_on: None };
    let turn = futures::executor::block_on(crate::cycle::run(&mut adapter, &NoPolicy)).unwrap();
    assert!(matches!(turn, crate::cycle::Turn::Idle(_)), "the adapter said there was nothing to decide");
    let reserve = adapter.decided_on.as_ref().unwrap().settings.burst_reserve_gpus;
    (adapter, reserve)
}

#[test]
fn the_cycle_scales_then_keeps_the_burst_reserve_of_the_fleet_read_again_above_its_floor() {
    let mut f = fleet(chat(), 0);
    report(&mut f, &[20.0]);
    f.services[0].recent_peak = Some(80.0);

    let (adapter, reserve) = one_cycle(f.clone(), 1);
    assert_eq!(adapter.scaled_with[0].start.len(), 2, "the autoscaler's plans reached the adapter");
    let decided_on = adapter.decided_on.unwrap();
    assert_eq!(decided_on.workloads.len(), 2, "the cycle decides on the fleet read again, with the new replicas");
    // 80 req/s needs 6 replicas: 4 more GPUs than the 2 desired, above the floor of 1.
    assert_eq!(reserve, 4);

    let (_, reserve) = one_cycle(f, 6);
    assert_eq!(reserve, 6, "the configured reserve is the floor");

    let mut quiet = fleet(chat(), 0);
    quiet.services.clear();
    let (adapter, reserve) = one_cycle(quiet, 3);
    assert!(adapter.scaled_with.is_empty(), "no services: no scaling");
    assert_eq!(reserve, 3, "no services: the configured reserve");
}
