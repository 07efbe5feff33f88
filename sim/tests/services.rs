//! Elastic inference services in the replay, one story each: the core's autoscaler, run every
//! cycle as the control plane runs it, makes a service's replicas follow its demand up and down
//! with no arrival to wake the loop; a service with a CPU variant serves from the CPU nodes and
//! spills to GPUs only at its peak; a bad service record is named by its line and field.

use std::process::Command;

use airtime_protocol::settings::PrioritySettings;
use airtime_protocol::workload::WorkloadClass;
use airtime_sim::engine::{self, Config};
use airtime_sim::format::{
    CpuVariantSpec, Demand, FleetSpec, NodeType, ReplicaTemplate, TenantSpec, Trace, TraceService, TraceWorkload,
};
use airtime_sim::policy::Catalog;
use airtime_sim::score::{Scores, ServiceSample};

fn node_type(name: &str, gpus: u32, cpu_millis: u32) -> NodeType {
    NodeType {
        name: name.into(),
        count: 1,
        gpus,
        gpu_model: if gpus > 0 { "A10".into() } else { String::new() },
        gpu_memory_mb: if gpus > 0 { 24_576 } else { 0 },
        cpu_millis,
        memory_mb: 262_144,
        cost_per_hour: 1.0 + f64::from(gpus),
        gpu_sharing: Default::default(),
        mig_layout: Vec::new(),
    }
}

fn fleet(node_types: Vec<NodeType>) -> FleetSpec {
    let tenant = |name: &str| TenantSpec {
        name: name.into(),
        guaranteed_gpus: 2,
        weight: 1,
        tier: 0,
        may_borrow: true,
        gpu_limit: None,
        policy: None,
    };
    FleetSpec {
        tenants: vec![tenant("serving"), tenant("research")],
        node_types,
        settings: PrioritySettings::default(),
    }
}

/// A chat service at 10 req/s a GPU replica, reporting every 15 s: `levels` held a minute each.
fn chat(levels: &[f64]) -> TraceService {
    TraceService {
        name: "chat".into(),
        tenant: "serving".into(),
        class: WorkloadClass::RealtimeInference,
        min_replicas: 1,
        max_replicas: 8,
        metric: Default::default(),
        capacity: 10.0,
        replica: ReplicaTemplate {
            gpus: 1,
            gpu_milli: 1000,
            gpu_memory_mb: 0,
            gpu_models: Vec::new(),
            cpu_millis: 2000,
            memory_mb: 8192,
            priority: 100,
        },
        cpu_variant: None,
        scale_up_window_s: 0,
        scale_down_window_s: 60,
        stale_after_s: 60,
        startup_s: 0,
        start_s: 0,
        demand: Demand { every_s: 15, values: levels.iter().flat_map(|&v| [v; 4]).collect() },
    }
}

fn replay(fleet: &FleetSpec, trace: &Trace, until_s: u64) -> Scores {
    let catalog = Catalog::new().expect("the runtime starts");
    let policy = catalog.load("slo-first").expect("the policy loads");
    let config = Config { window_s: until_s, until_s, sample_s: 15, ..Config::default() };
    engine::run(&catalog, fleet, trace, &policy, &[], &config).expect("the replay runs")
}

/// The service's sample at virtual second `t`.
fn at(scores: &Scores, t: u64) -> &ServiceSample {
    scores.services[0].series.iter().find(|s| s.t_s == t).expect("a sample at that time")
}

#[test]
fn a_services_replicas_follow_its_demand_up_and_down_and_training_gets_the_gpus_back() {
    // One node of four GPUs; a checkpointable training job takes two of them at 0. Demand rises
    // from 5 to 35 req/s (four replicas at 10 each) and falls back, a minute a level.
    let fleet = fleet(vec![node_type("a10x4", 4, 64_000)]);
    let levels = [5.0, 15.0, 25.0, 35.0, 35.0, 25.0, 15.0, 5.0, 5.0, 5.0, 5.0, 5.0];
    let training = TraceWorkload {
        id: "train".into(),
        tenant: "research".into(),
        class: WorkloadClass::Training,
        arrive_s: 0,
        duration_s: 1200,
        gpus: 2,
        gpu_milli: 1000,
        mig_profile: None,
        gpu_memory_mb: 0,
        gpu_models: Vec::new(),
        cpu_millis: 1000,
        memory_mb: 1024,
        priority: 0,
        preemptible: true,
        checkpointable: true,
        cpu_capable: false,
    };
    let trace = Trace { workloads: vec![training], services: vec![chat(&levels)], node_downs: Vec::new() };
    let scores = replay(&fleet, &trace, 2400);
    let service = &scores.services[0];

    // Nothing arrives after 0: every scaling step is the reports' own cycle.
    assert_eq!(at(&scores, 15).gpu_replicas, 1, "5 req/s: one replica");
    assert!(at(&scores, 105).gpu_replicas >= 2, "15–25 req/s: more replicas: {:?}", at(&scores, 105));
    assert_eq!(service.peak_gpu_replicas, 4, "35 req/s at 10 each, the node's four GPUs: {service:?}");
    // Training was preempted for the peak (it is checkpointable: nothing is wasted).
    assert!(scores.preemptions >= 1 && scores.wasted_gpu_hours == 0.0, "{scores:?}");
    // The scale-down window is a minute: by five minutes after the fall, one replica is left.
    assert_eq!(at(&scores, 720).gpu_replicas, 1, "{:?}", service.series);
    assert!(service.replicas_drained >= 3, "{service:?}");
    // The replicas carried the demand but in the grace period of the training job they preempted.
    assert!(service.slo_attainment > 0.9, "{service:?}");
    assert!(service.demand_served > 0.97, "{service:?}");
    // Training had its GPUs back and finished.
    assert_eq!(scores.completed_workloads, 1, "{scores:?}");
    assert!(scores.gpu_replica_hours > 0.0 && scores.cpu_replica_hours == 0.0);
}

#[test]
fn cpu_first_serves_from_the_cpu_nodes_and_spills_to_gpus_only_at_the_peak() {
    // Two CPU nodes of 16 cores hold four 8-core CPU replicas at 4 req/s each (16 req/s); the GPU
    // node's replicas carry 10 req/s each.
    let fleet =
        fleet(vec![node_type("a10x4", 4, 64_000), node_type("cpu-a", 0, 16_000), node_type("cpu-b", 0, 16_000)]);
    let mut service = chat(&[6.0, 10.0, 14.0, 30.0, 30.0, 30.0, 14.0, 10.0, 6.0, 6.0, 6.0, 6.0]);
    service.cpu_variant = Some(CpuVariantSpec { capacity: 4.0, cpu_millis: 8000, memory_mb: 16_384 });
    let trace = Trace { services: vec![service], ..Trace::default() };
    let scores = replay(&fleet, &trace, 1200);
    let s = &scores.services[0];

    let low = at(&scores, 45);
    assert_eq!((low.gpu_replicas, low.cpu_replicas), (0, 2), "6 req/s on two CPU replicas: {low:?}");
    let rising = at(&scores, 165);
    assert_eq!((rising.gpu_replicas, rising.cpu_replicas), (0, 4), "14 req/s: the CPU nodes carry it: {rising:?}");
    // At 30 req/s the CPU nodes are full (16 req/s): GPU replicas carry the rest.
    let peak = at(&scores, 285);
    assert_eq!(peak.cpu_replicas, 4, "{peak:?}");
    assert!(peak.gpu_replicas >= 2, "the spill to GPUs: {peak:?}");
    assert!(peak.capacity >= 30.0, "{peak:?}");
    // Once the demand is back to what the CPUs carry, the GPU replicas drain first.
    let after = at(&scores, 660);
    assert_eq!(after.gpu_replicas, 0, "{:?}", s.series);
    assert!(after.cpu_replicas >= 2, "{after:?}");
    assert!(s.cpu_replica_hours > s.gpu_replica_hours, "{s:?}");
    assert!(s.slo_attainment > 0.95 && s.demand_served > 0.99, "{s:?}");
}

#[test]
fn a_bad_service_record_is_named_by_its_line_and_field_and_nothing_runs() {
    let good = serde_json::to_string(&airtime_sim::format::TraceRecord::Service(chat(&[1.0]))).expect("json");
    let cases = [
        (good.replace(r#""capacity":10.0"#, r#""capacity":0.0"#), "field `capacity`: 0 is not above 0"),
        (good.replace(r#""max_replicas":8"#, r#""max_replicas":0"#), "field `max_replicas`"),
        (
            good.replace(r#""min_replicas":1"#, r#""min_replicas":9"#),
            "field `min_replicas`: 9 is more than max_replicas 8",
        ),
        (good.replace(r#""realtime_inference""#, r#""training""#), "field `class`"),
        (good.replace(r#""cpu_millis":2000"#, r#""cpus":2000"#), "unknown field `cpus`"),
        (good.replace(r#""values":[1.0,1.0,1.0,1.0]"#, r#""values":[1.0,-3.0]"#), "field `demand.values[1]`"),
        (good.replace(r#""every_s":15"#, r#""every_s":0"#), "field `demand.every_s`"),
        (good.replace(r#""stale_after_s":60"#, r#""stale_after_s":1"#), "field `stale_after_s`"),
        (good.replace(r#""name":"chat""#, r#""name":"a chat""#), "field `name`"),
        (good.clone(), "field `name`: service chat appears twice"),
    ];
    for (line, expected) in cases {
        let err = Trace::parse(format!("{good}\n{line}\n").as_bytes(), "t.jsonl").expect_err(&line);
        assert!(err.to_string().starts_with("t.jsonl line 2: "), "{err}");
        assert!(err.message.contains(expected), "{expected}: {err}");
    }

    // Through the command: the error, and no table.
    let dir = tempfile::tempdir().expect("temp dir");
    let fleet_path = dir.path().join("fleet.json");
    fleet(vec![node_type("a10x4", 4, 64_000)]).save(&fleet_path).expect("write");
    let trace = dir.path().join("services.jsonl");
    std::fs::write(
        &trace,
        format!("# two services\n{good}\n{}\n", good.replace(r#""every_s":15"#, r#""every_s":"15""#)),
    )
    .expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_airtime-sim"))
        .args(["run", "--policy", "slo-first", "--fleet"])
        .arg(&fleet_path)
        .arg("--trace")
        .arg(&trace)
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("services.jsonl line 3: invalid type: string \"15\", expected u32"), "{stderr}");
    assert!(out.stdout.is_empty());
}
