//! The policy's decisions on small fleets, natively, through the real ABI (sdk::testing).

use std::time::{Duration, Instant};

use airtime_policy_sdk::abi::{Action, Settings, WorkloadClass};
use airtime_policy_sdk::testing::SnapshotFixture;

use super::CostAware;

fn settings() -> Settings {
    Settings { realtime_first: true, grace_period_s: 30, max_preemptions_per_hour: 4, ..Settings::default() }
}

/// A GPU node costing `cost` per hour.
fn gpu_node(
    fixture: SnapshotFixture,
    name: &str,
    gpus: u32,
    model: &str,
    memory_mb: u32,
    cost: f32,
) -> SnapshotFixture {
    fixture.node_with(name, gpus, model, memory_mb, |n| n.cost_per_hour = cost)
}

/// A CPU node (no GPUs) with `cpu_millis` free and 256 GiB of memory, costing `cost` per hour.
fn cpu_node(fixture: SnapshotFixture, name: &str, cpu_millis: u32, cost: f32) -> SnapshotFixture {
    fixture.node_with(name, 0, "", 0, |n| {
        n.cpu_millis = cpu_millis;
        n.cpu_millis_free = cpu_millis;
        n.memory_mb = 262_144;
        n.memory_mb_free = 262_144;
        n.cost_per_hour = cost;
    })
}

#[test]
fn cpu_capable_inference_goes_to_the_cheapest_cpu_node_with_room_instead_of_a_gpu() {
    let mut fleet = SnapshotFixture::new().settings(settings());
    fleet = gpu_node(fleet, "gpu-h100", 8, "H100", 81920, 31.5);
    fleet = cpu_node(fleet, "cpu-big", 64_000, 0.9);
    fleet = cpu_node(fleet, "cpu-small", 16_000, 0.4);
    let outcome = fleet
        .pending_with("embed", 1, 0, |w| {
            w.class = WorkloadClass::Embeddings;
            w.cpu_capable = true;
            w.cpu_millis = 2_000;
        })
        .pending_with("chat", 1, 0, |w| {
            w.class = WorkloadClass::RealtimeInference;
            w.cpu_capable = true;
            w.cpu_millis = 15_000;
        })
        .pending_with("pretrain", 2, 40960, |w| {
            w.class = WorkloadClass::Training;
            w.cpu_capable = true;
        })
        .evaluate(&CostAware)
        .expect("runs");
    // Real-time first takes the cheapest CPU node; the embeddings job no longer fits there and takes
    // the next cheapest, still not a GPU.
    assert_eq!(outcome.placement("chat"), Some(("cpu-small", vec![])));
    assert_eq!(
        outcome.reason("chat"),
        Some("placed on cpu-small at $0.40/h instead of a $31.50/h GPU node (gpu-h100)")
    );
    assert_eq!(outcome.placement("embed"), Some(("cpu-big", vec![])));
    assert_eq!(outcome.reason("embed"), Some("placed on cpu-big at $0.90/h instead of a $31.50/h GPU node (gpu-h100)"));
    // Training is not inference: CPU-capable or not, it runs on GPUs while they fit.
    assert_eq!(outcome.placement("pretrain"), Some(("gpu-h100", vec![0, 1])));
}

#[test]
fn gpu_work_goes_to_the_cheapest_node_per_gpu_hour_whose_free_gpus_fit_it() {
    let mut fleet = SnapshotFixture::new();
    fleet = gpu_node(fleet, "gpu-h100", 8, "H100", 81920, 31.5); // $3.94 per GPU-hour
    fleet = gpu_node(fleet, "gpu-l4", 2, "L4", 24576, 1.6); // $0.80
    fleet = gpu_node(fleet, "gpu-a100", 4, "A100", 40960, 8.0); // $2.00
    let outcome = fleet
        .pending_with("small-infer", 1, 20000, |w| w.priority = 30)
        .pending_with("mid", 2, 30000, |w| w.priority = 20)
        .pending_with("big", 4, 60000, |w| w.priority = 10)
        .evaluate(&CostAware)
        .expect("runs");
    assert_eq!(
        outcome.reason("small-infer"),
        Some("cheapest fit on gpu-l4 at $0.80/h per GPU: GPU [0] (L4), 1 left free there")
    );
    // 30 GB does not fit an L4: the A100s are the cheapest that fit.
    assert_eq!(
        outcome.reason("mid"),
        Some("cheapest fit on gpu-a100 at $2.00/h per GPU ($4.00/h for 2 GPUs): GPUs [0,1] (A100), 2 left free there")
    );
    assert_eq!(outcome.placement("big"), Some(("gpu-h100", vec![0, 1, 2, 3])));
    assert_eq!(
        outcome.logs[0].message,
        "cost-aware: placed 3 of 3 pending workloads (0 on CPU nodes); new GPU placements cost $20.55/h in all; 7 GPUs left free"
    );
}

#[test]
fn among_nodes_of_equal_cost_per_gpu_the_best_fit_wins() {
    let mut fleet = SnapshotFixture::new();
    fleet = gpu_node(fleet, "cheap-but-full", 8, "H100", 81920, 8.0); // $1.00 per GPU-hour, all held
    fleet = gpu_node(fleet, "four", 4, "H100", 81920, 10.0); // $2.50
    fleet = gpu_node(fleet, "eight", 8, "H100", 81920, 20.0); // $2.50, 6 held
    let outcome = fleet
        .running("resident-0", "cheap-but-full", &[0, 1, 2, 3, 4, 5, 6, 7])
        .running("resident-1", "eight", &[0, 1, 2, 3, 4, 5])
        .pending_with("pair", 2, 0, |w| w.priority = 20)
        .pending_with("quad", 4, 0, |w| w.priority = 10)
        .evaluate(&CostAware)
        .expect("runs");
    // The pair fills the two free GPUs of "eight" exactly, keeping "four" whole for the quad.
    assert_eq!(outcome.placement("pair"), Some(("eight", vec![6, 7])));
    assert_eq!(outcome.placement("quad"), Some(("four", vec![0, 1, 2, 3])));
}

#[test]
fn real_time_inference_goes_first_and_the_burst_reserve_holds_non_preemptible_batch_work() {
    let mut fleet = SnapshotFixture::new().settings(Settings { burst_reserve_gpus: 1, ..settings() });
    fleet = gpu_node(fleet, "gpu-b", 2, "A100", 40960, 6.0);
    let outcome = fleet
        .pending_with("batch", 1, 0, |w| w.priority = 90)
        .pending_with("sweep", 1, 0, |w| w.preemptible = true)
        .pending_with("chat", 1, 0, |w| w.class = WorkloadClass::RealtimeInference)
        .evaluate(&CostAware)
        .expect("runs");
    assert_eq!(outcome.placed(), vec!["chat", "sweep"]);
    assert_eq!(
        outcome.reason("batch"),
        Some(
            "held for the burst reserve: 1 GPUs are kept free for real-time inference (1 free now; preemptible work may use them)"
        )
    );
}

#[test]
fn cpu_capable_inference_takes_the_cheapest_gpu_when_no_cpu_node_has_room() {
    let mut fleet = SnapshotFixture::new();
    fleet = cpu_node(fleet, "cpu-tiny", 1_000, 0.2);
    fleet = gpu_node(fleet, "gpu-l4", 1, "L4", 24576, 0.8);
    let outcome = fleet
        .pending_with("embed", 1, 0, |w| {
            w.class = WorkloadClass::Embeddings;
            w.cpu_capable = true;
            w.cpu_millis = 2_000;
        })
        .pending_with("etl", 0, 0, |w| w.cpu_millis = 4_000)
        .evaluate(&CostAware)
        .expect("runs");
    assert_eq!(
        outcome.reason("embed"),
        Some(
            "no CPU node has room for 2000 mCPU and 4096 MiB; cheapest fit on gpu-l4 at $0.80/h per GPU: GPU [0] (L4), 0 left free there"
        )
    );
    // CPU-only work with no CPU node free uses the spare host CPU of a GPU node, none of its GPUs.
    assert_eq!(outcome.placement("etl"), Some(("gpu-l4", vec![])));
    assert_eq!(
        outcome.reason("etl"),
        Some(
            "no CPU node has 4000 mCPU and 4096 MiB free; placed on the spare host CPU of gpu-l4 (a $0.80/h GPU node), using none of its GPUs"
        )
    );
}

#[test]
fn cpu_only_work_on_a_gpu_node_never_takes_the_host_cpu_its_free_gpus_need() {
    let fleet = SnapshotFixture::new().node_with("gpu-small", 1, "L4", 24576, |n| {
        n.cpu_millis = 8_000;
        n.cpu_millis_free = 8_000;
        n.cost_per_hour = 0.8;
    });
    let outcome = fleet
        .pending_with("etl", 0, 0, |w| w.cpu_millis = 6_000)
        .pending_with("infer", 1, 0, |w| w.cpu_millis = 4_000)
        .evaluate(&CostAware)
        .expect("runs");
    // etl came first, but taking 6 of the 8 cores would have left the GPU without the host CPU
    // infer needs.
    assert_eq!(outcome.placed_on("infer"), Some("gpu-small"));
    assert_eq!(
        outcome.reason("etl"),
        Some(
            "no CPU node has 6000 mCPU and 4096 MiB of memory free, nor any GPU node beyond the host CPU and memory kept for its free GPUs"
        )
    );
}

#[test]
fn it_never_preempts_not_even_for_real_time_inference() {
    let mut fleet = SnapshotFixture::new().settings(settings());
    fleet = gpu_node(fleet, "gpu-a", 1, "H100", 81920, 4.0);
    let outcome = fleet
        .running_with("train", "gpu-a", &[0], |w| {
            w.class = WorkloadClass::Training;
            w.preemptible = true;
            w.started_ms = 1;
        })
        .pending_with("chat", 1, 0, |w| w.class = WorkloadClass::RealtimeInference)
        .evaluate(&CostAware)
        .expect("runs");
    assert!(outcome.decisions.iter().all(|d| d.action != Action::Preempt));
    assert_eq!(
        outcome.reason("chat"),
        Some("no ready node has 1 free GPU with ≥ 0 MiB; every GPU that fits it is taken")
    );
}

#[test]
fn a_tenant_that_may_not_borrow_waits_on_its_quota_but_may_still_run_on_cpu() {
    let mut fleet = SnapshotFixture::new().tenant_with("strict", |t| {
        t.guaranteed_gpus = 1;
        t.running_gpus = 1;
        t.may_borrow = false;
    });
    fleet = gpu_node(fleet, "gpu-c", 2, "L40S", 49152, 5.0);
    fleet = cpu_node(fleet, "cpu-c", 8_000, 0.5);
    let outcome = fleet
        .running_with("mine", "gpu-c", &[0], |w| w.tenant = 0)
        .pending_with("more", 1, 0, |w| w.tenant = 0)
        .pending_with("score", 1, 0, |w| {
            w.tenant = 0;
            w.class = WorkloadClass::Evaluation;
            w.cpu_capable = true;
        })
        .evaluate(&CostAware)
        .expect("runs");
    assert_eq!(
        outcome.reason("more"),
        Some("quota used up: tenant strict holds 1 of its 1 guaranteed GPUs and may not borrow")
    );
    assert_eq!(outcome.placement("score"), Some(("cpu-c", vec![])));
}

#[test]
fn what_never_fits_says_so_and_what_is_busy_says_how_close_it_comes() {
    let mut fleet = SnapshotFixture::new();
    fleet = gpu_node(fleet, "gpu-big", 8, "H100", 81920, 30.0);
    let outcome = fleet
        .running("resident", "gpu-big", &[0, 1, 2, 3, 4])
        .pending("eight", 8, 1024)
        .pending("huge", 16, 1024)
        .pending_with("a100-only", 1, 0, |w| w.gpu_models = "A100".to_owned())
        .evaluate(&CostAware)
        .expect("runs");
    assert_eq!(
        outcome.reason("eight"),
        Some("no ready node has 8 free GPUs with ≥ 1024 MiB; the most on one node is 3 (gpu-big)")
    );
    assert_eq!(outcome.reason("huge"), Some("no ready node has 16 GPUs with ≥ 1024 MiB, even with all its GPUs free"));
    assert_eq!(
        outcome.reason("a100-only"),
        Some("no ready node has 1 GPU with ≥ 0 MiB (A100), even with all its GPUs free")
    );
}

/// The synthetic fleet with ten cheap GPU nodes ($1.00 per GPU-hour against $2.50) and four CPU
/// nodes.
#[test]
fn a_container_workload_goes_to_a_node_with_a_container_engine_though_it_costs_more() {
    let mut fleet = SnapshotFixture::new().settings(settings());
    fleet = gpu_node(fleet, "cheap-bare", 8, "H100", 81920, 8.0);
    fleet = fleet.node_with("dear-engine", 8, "H100", 81920, |n| {
        n.cost_per_hour = 32.0;
        n.containers = true;
    });
    fleet = cpu_node(fleet, "cpu-bare", 32_000, 0.2);
    fleet = fleet.node_with("cpu-engine", 0, "", 0, |n| {
        n.cost_per_hour = 0.8;
        n.containers = true;
    });
    let fixture = fleet.container_work(1);
    let outcome = fixture.evaluate(&CostAware).expect("valid decisions");
    assert_eq!(outcome.placement("image"), Some(("dear-engine", vec![0])));
    assert_eq!(outcome.placement("image-cpu"), Some(("cpu-engine", vec![])));
    assert_eq!(outcome.placement("plain"), Some(("cheap-bare", vec![0])));
    assert_eq!(fixture.problems(&outcome.decisions), vec![]);

    let fleet = gpu_node(SnapshotFixture::new(), "cheap-bare", 8, "H100", 81920, 8.0);
    let outcome = fleet
        .pending_with("image", 1, 1024, |w| w.container = true)
        .pending("plain", 1, 1024)
        .evaluate(&CostAware)
        .expect("valid decisions");
    assert_eq!(outcome.reason("image"), Some("no ready node runs containers"));
    assert_eq!(outcome.placed_on("plain"), Some("cheap-bare"));
}

fn priced_fleet(nodes: u32, pending: u32) -> SnapshotFixture {
    let mut fleet = SnapshotFixture::synthetic_fleet(nodes, 8, pending, 11).settings(settings()).edit(|doc| {
        for node in doc.nodes.iter_mut().take(10) {
            node.cost_per_hour = 8.0;
        }
    });
    for i in 0..4 {
        fleet = cpu_node(fleet, &format!("cpu-{i}"), 64_000, 0.4 + i as f32 * 0.1);
    }
    fleet
}

#[test]
fn on_a_large_priced_fleet_the_cheap_gpus_fill_first_and_cpu_nodes_take_inference() {
    let fixture = priced_fleet(100, 2_000);
    let started = Instant::now();
    let outcome = fixture.evaluate(&CostAware).expect("runs, and the host accepts every decision");
    let elapsed = started.elapsed();
    assert_eq!(outcome.decisions.len(), 2_000, "every pending workload has a decision");
    assert!(outcome.placed().len() > 300, "places work at scale: {}", outcome.placed().len());
    // Every GPU of the ten cheap nodes is taken before the cycle ends.
    let doc = fixture.document();
    let cheap_gpus: usize = outcome
        .decisions
        .iter()
        .filter_map(|d| match &d.action {
            Action::Place { node, gpus } if *node < 10 => Some(gpus.len()),
            _ => None,
        })
        .sum();
    assert_eq!(cheap_gpus, 80);
    // CPU-capable inference went to the CPU nodes, with the saving in its reason.
    let on_cpu = outcome
        .decisions
        .iter()
        .filter(|d| matches!(&d.action, Action::Place { node, gpus } if gpus.is_empty() && doc.nodes[*node as usize].gpu_count == 0))
        .count();
    assert!(on_cpu > 10, "{on_cpu} placements on CPU nodes");
    assert!(outcome.decisions.iter().any(|d| d.reason.starts_with("placed on cpu-0 at $0.40/h instead of a $")));
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
}
