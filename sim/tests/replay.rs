//! The simulator's stories: a replay goes through the production core — its checks refuse what the
//! control plane refuses, a failing policy gives way to the built-in, the preemption rules hold —
//! and it scores real traces and synthetic mixes; bad files are named precisely.

use std::path::{Path, PathBuf};
use std::process::Command;

use airtime_protocol::settings::PrioritySettings;
use airtime_protocol::workload::WorkloadClass;
use airtime_sim::engine::{self, Config};
use airtime_sim::format::{FleetSpec, NodeType, TenantSpec, Trace, TraceWorkload};
use airtime_sim::policy::Catalog;
use airtime_sim::score::Scores;

fn fleet(gpus: u32) -> FleetSpec {
    FleetSpec {
        tenants: vec![
            TenantSpec {
                name: "serving".into(),
                guaranteed_gpus: 1,
                weight: 1,
                tier: 1,
                may_borrow: true,
                gpu_limit: None,
                policy: None,
            },
            TenantSpec {
                name: "research".into(),
                guaranteed_gpus: 1,
                weight: 1,
                tier: 0,
                may_borrow: true,
                gpu_limit: None,
                policy: None,
            },
        ],
        node_types: vec![NodeType {
            name: "h100x".into(),
            count: 1,
            gpus,
            gpu_model: "H100".into(),
            gpu_memory_mb: 81920,
            cpu_millis: 64_000,
            memory_mb: 512_000,
            cost_per_hour: 2.5 * f64::from(gpus),
            gpu_sharing: Default::default(),
            mig_layout: Vec::new(),
        }],
        settings: PrioritySettings::default(),
    }
}

fn workload(id: &str, class: WorkloadClass, arrive_s: u64, duration_s: u64, gpus: u32) -> TraceWorkload {
    let realtime = class == WorkloadClass::RealtimeInference;
    TraceWorkload {
        mig_profile: None,
        id: id.into(),
        tenant: if realtime { "serving" } else { "research" }.into(),
        class,
        arrive_s,
        duration_s,
        gpus,
        gpu_milli: 1000,
        gpu_memory_mb: 0,
        gpu_models: Vec::new(),
        cpu_millis: 1000,
        memory_mb: 1024,
        priority: if realtime { 100 } else { 0 },
        preemptible: !realtime,
        checkpointable: !realtime,
        cpu_capable: false,
    }
}

fn replay(policy: &str, fleet: &FleetSpec, trace: &Trace) -> Scores {
    replay_with(policy, fleet, trace, Config::default())
}

/// A replay scored over the first `window_s` seconds (0: up to the last arrival).
fn replay_for(policy: &str, fleet: &FleetSpec, trace: &Trace, window_s: u64) -> Scores {
    replay_with(policy, fleet, trace, Config { window_s, ..Config::default() })
}

fn replay_with(policy: &str, fleet: &FleetSpec, trace: &Trace, config: Config) -> Scores {
    let catalog = Catalog::new().expect("the runtime starts");
    let policy = catalog.load(policy).expect("the policy loads");
    engine::run(&catalog, fleet, trace, &policy, &[], &config).expect("the replay runs")
}

fn wat_module(dir: &Path, name: &str) -> PathBuf {
    let source = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/wat").join(format!("{name}.wat")),
    )
    .expect("the fixture exists");
    let path = dir.join(format!("{name}.wasm"));
    std::fs::write(&path, wat::parse_str(&source).expect("the fixture parses")).expect("write");
    path
}

fn delay(scores: &Scores, class: WorkloadClass) -> f64 {
    scores.queue_delay.iter().find(|d| d.class == class).map(|d| d.start_delay_s.p50).expect("the class ran")
}

#[test]
fn a_decision_the_control_plane_would_refuse_the_simulator_refuses() {
    // A hand-written policy that always places the first pending workload on GPU 0: once GPU 0 is
    // held, the host's check refuses it, and the second job waits for the first to end.
    let dir = tempfile::tempdir().expect("temp dir");
    let module = wat_module(dir.path(), "first_pending_on_gpu0");
    let trace = Trace {
        workloads: vec![
            workload("first", WorkloadClass::Training, 0, 1000, 1),
            workload("second", WorkloadClass::Training, 10, 100, 1),
        ],
        ..Trace::default()
    };
    let config = Config { until_s: 5000, ..Config::default() };
    let scores = replay_with(module.to_str().expect("utf-8 path"), &fleet(2), &trace, config);
    assert!(scores.refused > 0, "the GPU held by `first` is refused to `second`: {scores:?}");
    assert_eq!(scores.completed_workloads, 2);
    let second = scores.queue_delay.iter().find(|d| d.class == WorkloadClass::Training).expect("training ran");
    assert!(second.start_delay_s.p99 >= 990.0, "second started only when first freed GPU 0: {second:?}");
}

#[test]
fn a_failing_platform_policy_gives_way_to_the_built_in_as_in_the_control_plane() {
    let dir = tempfile::tempdir().expect("temp dir");
    let module = wat_module(dir.path(), "fail_with_message");
    let trace = Trace { workloads: vec![workload("job", WorkloadClass::Training, 0, 60, 1)], ..Trace::default() };
    let scores = replay(module.to_str().expect("utf-8 path"), &fleet(2), &trace);
    assert!(scores.policy_failures > 0);
    assert_eq!(scores.completed_workloads, 1, "priority-best-fit placed it");
    assert_eq!(delay(&scores, WorkloadClass::Training), 0.0);
}

#[test]
fn a_burst_of_realtime_traffic_preempts_training_which_resumes_from_its_checkpoint() {
    // Training holds both GPUs; a real-time replica arrives at 100 s. slo-first preempts training
    // (30 s grace), the replica starts, training resumes when a GPU pair is free again and loses
    // nothing (checkpointable). FIFO never preempts: the replica waits for training to end.
    let trace = Trace {
        workloads: vec![
            workload("train", WorkloadClass::Training, 0, 1000, 2),
            workload("replica", WorkloadClass::RealtimeInference, 100, 300, 1),
        ],
        ..Trace::default()
    };
    let slo = replay_for("slo-first", &fleet(2), &trace, 2000);
    assert!(slo.preemptions >= 1, "{slo:?}");
    let rt = slo.realtime_start_delay_s.p50;
    assert!((30.0..=60.0).contains(&rt), "the replica started after the grace period: {rt}");
    assert_eq!(slo.wasted_gpu_hours, 0.0, "a checkpointable job loses no work");
    assert_eq!(slo.completed_workloads, 1);
    assert!((slo.completed_gpu_hours - 2000.0 / 3600.0).abs() < 1e-9);

    let fifo = replay_for("fifo", &fleet(2), &trace, 2000);
    assert_eq!(fifo.preemptions, 0);
    assert_eq!(fifo.realtime_start_delay_s.count, 0, "the replica's demand ended before training did");
    assert!(fifo.realtime_slo_attainment < slo.realtime_slo_attainment);
}

#[test]
fn scores_account_for_every_gpu_hour() {
    // Over a 1,000 s window: one 1-GPU job for its first half on a 2-GPU fleet, a second for all
    // of it at a quarter of a GPU: allocated = (0.5 + 1) / 2, busy = (0.5 + 0.25) / 2.
    let mut quarter = workload("quarter", WorkloadClass::BatchInference, 0, 1000, 1);
    quarter.gpu_milli = 250;
    let trace =
        Trace { workloads: vec![workload("half", WorkloadClass::Training, 0, 500, 1), quarter], ..Trace::default() };
    let s = replay_for("priority-best-fit", &fleet(2), &trace, 1000);
    assert_eq!(s.span_s, 1000);
    assert!((s.allocated_share - 0.75).abs() < 1e-9, "{}", s.allocated_share);
    assert!((s.busy_share - 0.375).abs() < 1e-9, "{}", s.busy_share);
    assert!((s.idle_gpu_hours - (2000.0 - 750.0) / 3600.0).abs() < 1e-9);
    assert!((s.idle_cost - 2.5 * 1250.0 / 3600.0).abs() < 1e-6, "{}", s.idle_cost);
    assert!(s.decisions_per_s > 0.0 && s.cycles >= 1);
}

#[test]
fn quarter_gpu_replicas_share_a_gpu_and_are_billed_as_quarters_unless_the_gpus_are_not_shared() {
    // Two GPUs; four quarter-GPU real-time replicas and a one-GPU training job, all for an hour.
    let mut trace = Trace { workloads: Vec::new(), ..Trace::default() };
    for i in 0..4 {
        let mut replica = workload(&format!("replica-{i}"), WorkloadClass::RealtimeInference, 0, 3600, 1);
        replica.gpu_milli = 250;
        replica.gpu_memory_mb = 10240;
        trace.workloads.push(replica);
    }
    trace.workloads.push(workload("train", WorkloadClass::Training, 0, 3600, 1));
    let window = Config { window_s: 3600, until_s: 3600, ..Config::default() };

    let mut shared = fleet(2);
    airtime_sim::share_gpus(&mut shared, airtime_protocol::sharing::GpuSharing::Mps).expect("MPS");
    let scores = replay_with("slo-first", &shared, &trace, window.clone());
    assert_eq!(scores.realtime_slo_attainment, 1.0, "all four replicas run: {scores:?}");
    // One GPU in quarters and one whole: two GPUs allocated, both busy, over the hour.
    assert!((scores.allocated_gpu_hours - 2.0).abs() < 0.01, "{}", scores.allocated_gpu_hours);
    assert!((scores.busy_gpu_hours - 2.0).abs() < 0.01, "{}", scores.busy_gpu_hours);
    let serving = scores.tenants.iter().find(|t| t.name == "serving").expect("serving");
    assert!((serving.mean_gpus - 1.0).abs() < 0.01, "four quarters are one GPU: {serving:?}");

    // The same fleet without sharing: each replica holds a whole GPU, so only two of the five run.
    let scores = replay_with("slo-first", &fleet(2), &trace, window);
    assert!(scores.realtime_slo_attainment < 1.0, "{scores:?}");
    assert!(scores.held_idle_gpu_hours > 1.0, "a quarter replica holding a whole GPU idles 3/4 of it");
}

#[test]
fn a_mig_layout_carves_each_gpu_into_instances_that_serve_only_their_profile() {
    let mut mig = fleet(1);
    mig.node_types[0].gpu_sharing = airtime_protocol::sharing::GpuSharing::Mig;
    mig.node_types[0].mig_layout = vec!["3g.40gb".into(), "2g.20gb".into(), "1g.10gb".into(), "1g.10gb".into()];
    mig.check().expect("a valid layout");
    let mut trace = Trace { workloads: Vec::new(), ..Trace::default() };
    for (i, profile) in ["1g.10gb", "1g.10gb", "1g.10gb", "3g.40gb"].iter().enumerate() {
        let mut w = workload(&format!("quant-{i}"), WorkloadClass::Quantization, 0, 600, 1);
        w.mig_profile = Some((*profile).to_owned());
        trace.workloads.push(w);
    }
    trace.workloads.push(workload("whole", WorkloadClass::Training, 0, 600, 1));
    let scores = replay_with("slo-first", &mig, &trace, Config { window_s: 900, until_s: 900, ..Config::default() });
    // Two 1g instances and the 3g one run; the third 1g and the whole-GPU job find no device.
    assert_eq!(scores.unfinished_workloads, 2, "{scores:?}");
    assert_eq!(scores.gpus, 1, "four instances are one physical GPU");

    mig.node_types[0].mig_layout.push("2g.20gb".into());
    let error = mig.check().expect_err("8 compute slices");
    assert!(error.contains("9 compute slices, a GPU has 7"), "{error}");
}

#[test]
fn a_lost_node_requeues_its_work() {
    let mut fleet = fleet(1);
    fleet.node_types[0].count = 2;
    let trace = Trace::parse(
        concat!(
            r#"{"type":"workload","id":"job","tenant":"research","class":"training","arrive_s":0,"duration_s":600,"gpus":1,"preemptible":true}"#,
            "\n",
            r#"{"type":"node_down","node":"h100x-0","at_s":100}"#,
            "\n"
        )
        .as_bytes(),
        "t.jsonl",
    )
    .expect("parses");
    let s = replay("priority-best-fit", &fleet, &trace);
    assert_eq!(s.requeued_by_node_loss, 1);
    assert_eq!(s.completed_workloads, 1, "it ran again on the other node");
    assert!((s.wasted_gpu_hours - 100.0 / 3600.0).abs() < 1e-9, "not checkpointable: the 100 s run is lost");
}

fn sim() -> Command {
    Command::new(env!("CARGO_BIN_EXE_airtime-sim"))
}

#[test]
fn the_command_compares_policies_on_a_generated_mix_with_a_table_json_and_a_plot() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (fleet, trace) = (dir.path().join("fleet.json"), dir.path().join("trace.jsonl"));
    let out = sim()
        .args(["generate", "--seed", "4", "--hours", "6", "--gpu-nodes", "4", "--fleet-out"])
        .arg(&fleet)
        .arg("--trace-out")
        .arg(&trace)
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (json, plot) = (dir.path().join("scores.json"), dir.path().join("utilisation.svg"));
    let out = sim()
        .args([
            "run",
            "--policy",
            "slo-first",
            "--policy",
            "fifo",
            "--policy",
            "static-partition",
            "--seeds",
            "1,2",
            "--jitter-s",
            "120",
        ])
        .arg("--fleet")
        .arg(&fleet)
        .arg("--trace")
        .arg(&trace)
        .arg("--json")
        .arg(&json)
        .arg("--plot")
        .arg(&plot)
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for policy in ["slo-first", "fifo", "static-partition"] {
        assert!(stdout.lines().any(|l| l.contains(policy)), "a row for {policy}:\n{stdout}");
    }
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json written")).expect("json parses");
    assert_eq!(report["runs"].as_array().map(Vec::len), Some(6), "3 policies × 2 seeds");
    assert!(report["runs"][0]["series"].as_array().is_some_and(|s| s.len() > 10));
    let svg = std::fs::read_to_string(&plot).expect("plot written");
    assert!(
        svg.starts_with("<svg") && svg.contains("static-partition") && svg.contains("<polyline"),
        "an SVG with a line per policy"
    );
}

#[test]
fn a_bad_trace_line_is_named_and_nothing_runs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let fleet = dir.path().join("fleet.json");
    self::fleet(2).save(&fleet).expect("write");
    let trace = dir.path().join("trace.jsonl");
    std::fs::write(
        &trace,
        concat!(
            r#"{"type":"workload","id":"a","tenant":"research","class":"training","arrive_s":0,"duration_s":10}"#,
            "\n",
            r#"{"type":"workload","id":"b","tenant":"research","class":"training","arrive_s":0,"duration_s":10,"gpus":"two"}"#,
            "\n"
        ),
    )
    .expect("write");
    let out = sim().arg("run").arg("--fleet").arg(&fleet).arg("--trace").arg(&trace).output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("trace.jsonl line 2: invalid type: string \"two\""), "{stderr}");
    assert!(out.stdout.is_empty(), "no table for a bad trace");

    std::fs::write(
        &trace,
        r#"{"type":"workload","id":"a","tenant":"nobody","class":"training","arrive_s":0,"duration_s":10}"#,
    )
    .expect("write");
    let out = sim()
        .arg("run")
        .arg("--fleet")
        .arg(&fleet)
        .arg("--trace")
        .arg(&trace)
        .arg("--policy")
        .arg("fifo")
        .output()
        .expect("runs");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("tenant nobody is not in the fleet"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The real traces (`../shared/traces`, or `AIRTIME_TRACES`), when this machine has them.
fn traces() -> Option<PathBuf> {
    let dir = airtime_sim::shared_traces();
    if dir.join("alibaba-openb-2023").is_dir() {
        Some(dir)
    } else {
        eprintln!("SKIPPED: no real traces at {} (set AIRTIME_TRACES)", dir.display());
        None
    }
}

#[test]
fn a_slice_of_the_alibaba_trace_with_azure_demand_replays_through_every_policy_level() {
    let Some(dir) = traces() else { return };
    let options = airtime_sim::alibaba::Options {
        max_nodes: Some(24),
        max_pods: Some(400),
        compress: 200.0,
        ..Default::default()
    };
    let (fleet, alibaba) =
        airtime_sim::alibaba::load(&dir.join("alibaba-openb-2023"), &options).expect("the trace loads");
    let azure_options = airtime_sim::azure::Options { days: 1, scale: 0.5, ..Default::default() };
    let counts = airtime_sim::azure::arrivals(
        &dir.join("azure-llm-2023/AzureLLMInferenceTrace_conv.csv"),
        azure_options.window_s,
    )
    .expect("arrivals load");
    let azure = airtime_sim::azure::to_trace(&counts, &azure_options);
    let trace = airtime_sim::merge(vec![alibaba, azure]);
    let slo = replay("slo-first", &fleet, &trace);
    let fifo = replay("fifo", &fleet, &trace);
    for s in [&slo, &fifo] {
        assert!(
            s.busy_share <= s.allocated_share + 1e-9 && s.allocated_share <= 1.0,
            "{}: {} / {}",
            s.policy,
            s.busy_share,
            s.allocated_share
        );
        assert!((0.0..=1.0).contains(&s.realtime_slo_attainment));
        assert!(s.cycles > 10);
    }
    assert!(
        slo.realtime_slo_attainment >= fifo.realtime_slo_attainment,
        "real-time first: {} vs FIFO's {}",
        slo.realtime_slo_attainment,
        fifo.realtime_slo_attainment
    );
}
