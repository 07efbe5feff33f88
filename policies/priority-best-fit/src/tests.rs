//! Run natively through the real ABI with the SDK's fixture; every outcome has also passed the
//! host's decision checks (the harness refuses otherwise).

use airtime_policy_sdk::prelude::*;
use airtime_policy_sdk::testing::{Outcome, SnapshotFixture};

use super::PriorityBestFit;

fn run(fixture: SnapshotFixture) -> Outcome {
    match fixture.evaluate(&PriorityBestFit) {
        Ok(outcome) => outcome,
        Err(error) => panic!("{error}"),
    }
}

#[test]
fn best_fit_takes_the_node_left_with_fewest_free_gpus() {
    let outcome = run(SnapshotFixture::new()
        .node("big", 8, "H100", 81920)
        .node("small", 4, "H100", 81920)
        .pending("train", 4, 40960));
    assert_eq!(outcome.placement("train"), Some(("small", vec![0, 1, 2, 3])));
    assert_eq!(outcome.reason("train"), Some("best fit on small: GPUs 0,1,2,3 (H100), 0 GPUs left free there"));
}

#[test]
fn a_partly_used_node_is_filled_before_an_empty_one() {
    let outcome = run(SnapshotFixture::new()
        .node("empty", 8, "H100", 81920)
        .node("busy", 8, "H100", 81920)
        .running("old", "busy", &[0, 1, 2, 3, 4, 5])
        .pending("pair", 2, 1024));
    assert_eq!(outcome.placement("pair"), Some(("busy", vec![6, 7])));
    assert!(outcome.decision("old").is_none(), "running workloads are left alone");
}

#[test]
fn a_gang_never_spans_nodes_and_the_reason_says_how_close_it_came() {
    let outcome = run(SnapshotFixture::new()
        .node("n1", 2, "H100", 81920)
        .node("n2", 4, "H100", 81920)
        .running("r", "n2", &[0, 1, 2])
        .pending("gang", 4, 40960));
    assert!(outcome.is_kept_pending("gang"));
    assert_eq!(
        outcome.reason("gang"),
        Some("no ready node has 4 free GPUs with ≥ 40960 MiB; the most on one node is 2 (n1)")
    );
}

#[test]
fn live_memory_use_counts_and_the_tightest_gpu_is_taken() {
    let outcome = run(SnapshotFixture::new()
        .node("n1", 4, "H100", 81920)
        .gpu("n1", 0, |g| g.memory_used_mb = 50_000)
        .gpu("n1", 2, |g| g.memory_used_mb = 40_000)
        .pending("a", 1, 40960)
        .pending("b", 1, 40960)
        .pending("c", 1, 40960)
        .pending("d", 1, 40960));
    // Device 2 has 41920 MiB free (fits, least waste); device 0 has 31920 (does not fit).
    assert_eq!(outcome.placement("a"), Some(("n1", vec![2])));
    assert_eq!(outcome.placement("b"), Some(("n1", vec![1])));
    assert_eq!(outcome.placement("c"), Some(("n1", vec![3])));
    assert_eq!(outcome.reason("d"), Some("no ready node has 1 free GPU with ≥ 40960 MiB; all that fit are taken"));
}

#[test]
fn allowed_models_are_respected() {
    let outcome = run(SnapshotFixture::new()
        .node("h", 8, "H100", 81920)
        .node("a", 8, "A100", 81920)
        .pending_with("a100-only", 2, 1024, |w| w.gpu_models = "A100".into())
        .pending_with("h200-only", 1, 1024, |w| w.gpu_models = "H200, B200".into()));
    assert_eq!(outcome.placed_on("a100-only"), Some("a"));
    assert_eq!(
        outcome.reason("h200-only"),
        Some("no ready node has 1 GPU with ≥ 1024 MiB (H200 or B200), even with all its GPUs free")
    );
}

#[test]
fn higher_priority_wins_contention_then_earlier_submission() {
    let outcome = run(SnapshotFixture::new()
        .node("n1", 4, "H100", 81920)
        .pending_with("low-first", 4, 1024, |w| w.priority = 1)
        .pending_with("high-second", 2, 1024, |w| w.priority = 9)
        .pending_with("high-third", 2, 1024, |w| w.priority = 9)
        .pending_with("high-fourth", 2, 1024, |w| w.priority = 9));
    assert_eq!(outcome.placed(), vec!["high-second", "high-third"]);
    assert_eq!(
        outcome.reason("high-fourth"),
        Some("no ready node has 2 free GPUs with ≥ 1024 MiB; all that fit are taken")
    );
    assert_eq!(
        outcome.reason("low-first"),
        Some("no ready node has 4 free GPUs with ≥ 1024 MiB; all that fit are taken")
    );
}

#[test]
fn no_gpu_is_ever_placed_twice() {
    let mut fixture = SnapshotFixture::new().node("n1", 3, "H100", 81920).node("n2", 2, "A100", 40960);
    for i in 0..20 {
        fixture = fixture.pending(&format!("job-{i:02}"), 1, 1024);
    }
    let outcome = run(fixture);
    let mut gpus: Vec<u32> = outcome
        .decisions
        .iter()
        .filter_map(|d| match &d.action {
            Action::Place { gpus, .. } => Some(gpus.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(gpus.len(), 5);
    gpus.sort_unstable();
    gpus.dedup();
    assert_eq!(gpus.len(), 5, "five distinct GPUs");
    assert_eq!(outcome.decisions.len(), 20, "every pending workload gets a decision");
}

#[test]
fn draining_and_lost_nodes_take_nothing() {
    let outcome = run(SnapshotFixture::new()
        .node_with("draining", 8, "H100", 81920, |n| n.state = NodeState::Draining)
        .node_with("lost", 8, "H100", 81920, |n| n.state = NodeState::Lost)
        .node("ready", 1, "H100", 81920)
        .pending("two", 2, 1024)
        .pending("one", 1, 1024));
    assert_eq!(outcome.placed_on("one"), Some("ready"));
    assert_eq!(outcome.reason("two"), Some("no ready node has 2 GPUs with ≥ 1024 MiB, even with all its GPUs free"));
}

#[test]
fn cpu_workloads_go_to_cpu_nodes_first_tightest_fit() {
    let outcome = run(SnapshotFixture::new()
        .node("gpu", 8, "H100", 81920)
        .cpu_node("roomy", 64_000, 262_144)
        .cpu_node("snug", 8_000, 32_768)
        .pending_with("embed", 0, 0, |w| {
            w.cpu_millis = 6_000;
            w.memory_mb = 8_192;
        })
        .pending_with("embed-2", 0, 0, |w| {
            w.cpu_millis = 6_000;
            w.memory_mb = 8_192;
        })
        .pending_with("too-big", 0, 0, |w| {
            w.cpu_millis = 1_000_000;
            w.memory_mb = 1;
        }));
    assert_eq!(outcome.placement("embed"), Some(("snug", vec![])));
    assert_eq!(
        outcome.reason("embed"),
        Some("best fit on CPU on snug: 6000 mCPU and 8192 MiB, 2000 mCPU left free there")
    );
    assert_eq!(outcome.placed_on("embed-2"), Some("roomy"), "snug has 2000 mCPU left");
    assert_eq!(outcome.reason("too-big"), Some("no ready node has 1000000 mCPU and 1 MiB free"));
}

#[test]
fn cpu_capable_workloads_fall_back_to_cpu_when_no_gpu_fits() {
    let outcome = run(SnapshotFixture::new()
        .node("gpu", 1, "H100", 81920)
        .cpu_node("cpu", 16_000, 65_536)
        .pending_with("first", 1, 1024, |w| w.priority = 5)
        .pending_with("flexible", 1, 1024, |w| w.cpu_capable = true)
        .pending("rigid", 1, 1024));
    assert_eq!(outcome.placement("first"), Some(("gpu", vec![0])));
    assert_eq!(outcome.placement("flexible"), Some(("cpu", vec![])));
    assert_eq!(
        outcome.reason("flexible"),
        Some(
            "no ready node has 1 free GPU with ≥ 1024 MiB; all that fit are taken; runs on CPU on cpu: 1000 mCPU and 4096 MiB, 15000 mCPU left free there"
        )
    );
    assert!(outcome.is_kept_pending("rigid"));
}

#[test]
fn burst_reserve_is_left_to_realtime_inference_and_preemptible_work() {
    let settings = Settings { burst_reserve_gpus: 2, ..Settings::default() };
    let preemptible = run(SnapshotFixture::new().settings(settings).node("n1", 4, "H100", 81920).pending_with(
        "batch",
        3,
        1024,
        |w| w.preemptible = true,
    ));
    assert_eq!(preemptible.placed(), vec!["batch"], "a burst can reclaim preemptible work");
    let outcome = run(SnapshotFixture::new()
        .settings(settings)
        .node("n1", 4, "H100", 81920)
        .pending_with("batch", 3, 1024, |w| w.priority = 9)
        .pending_with("batch-small", 2, 1024, |w| w.priority = 8)
        .pending_with("serve", 3, 1024, |w| w.class = WorkloadClass::RealtimeInference));
    assert_eq!(
        outcome.reason("batch"),
        Some("4 GPUs are free and 2 are held back for real-time inference (burst reserve)")
    );
    assert_eq!(outcome.placed(), vec!["batch-small"], "4 - 2 leaves the reserve whole");
    assert_eq!(
        outcome.reason("serve"),
        Some("no ready node has 3 free GPUs with ≥ 1024 MiB; the most on one node is 2 (n1)")
    );
}

#[test]
fn realtime_first_puts_customer_facing_inference_ahead_of_priority() {
    let fixture = |realtime_first| {
        SnapshotFixture::new()
            .settings(Settings { realtime_first, ..Settings::default() })
            .node("n1", 2, "H100", 81920)
            .pending_with("train", 2, 1024, |w| {
                w.class = WorkloadClass::Training;
                w.priority = 100;
            })
            .pending_with("serve", 2, 1024, |w| w.class = WorkloadClass::RealtimeInference)
    };
    assert_eq!(run(fixture(true)).placed(), vec!["serve"]);
    assert_eq!(run(fixture(false)).placed(), vec!["train"]);
}

#[test]
fn the_night_bonus_lifts_training() {
    // The host puts the bonus in the snapshot only at night (it resolves the platform's window).
    let fixture = |night_training_bonus| {
        SnapshotFixture::new()
            .settings(Settings { night_training_bonus, ..Settings::default() })
            .node("n1", 1, "H100", 81920)
            .pending_with("batch", 1, 1024, |w| w.priority = 10)
            .pending_with("train", 1, 1024, |w| {
                w.class = WorkloadClass::Training;
                w.priority = 0;
            })
    };
    assert_eq!(run(fixture(20)).placed(), vec!["train"]);
    assert_eq!(run(fixture(0)).placed(), vec!["batch"]);
}

#[test]
fn a_gpu_placement_needs_the_host_cpu_and_memory_too() {
    let outcome = run(SnapshotFixture::new()
        .node_with("tight-but-starved", 8, "H100", 81920, |n| n.cpu_millis_free = 2_000)
        .node("roomy", 8, "H100", 81920)
        .running("r1", "tight-but-starved", &[0, 1, 2, 3])
        .running("r2", "roomy", &[0, 1])
        .pending_with("job", 2, 1024, |w| w.cpu_millis = 4_000)
        .pending_with("hungry", 2, 1024, |w| w.cpu_millis = 100_000));
    // By GPUs alone the first node is the tighter fit (2 left over, not 4), but it lacks the CPU.
    assert_eq!(outcome.placed_on("job"), Some("roomy"));
    assert_eq!(
        outcome.reason("hungry"),
        Some("the ready nodes with 2 free GPUs with ≥ 1024 MiB lack 100000 mCPU and 4096 MiB of host memory free")
    );
}

#[test]
fn multi_gpu_workloads_stay_inside_one_nvlink_domain() {
    let fixture = SnapshotFixture::new()
        .node("n1", 8, "H100", 81920)
        .edit(|doc| {
            for gpu in &mut doc.gpus {
                gpu.nvlink_group = Some(gpu.device_index / 4);
            }
        })
        .running("r", "n1", &[0, 1])
        .pending_with("three", 3, 1024, |w| w.priority = 2)
        .pending_with("two", 2, 1024, |w| w.priority = 1);
    let outcome = run(fixture.clone());
    // Domain 0 has devices 2,3 free; domain 1 has 4..8. Three GPUs only fit in domain 1, and the
    // pair then takes domain 0's two, leaving a single free GPU in domain 1.
    assert_eq!(outcome.placement("three"), Some(("n1", vec![4, 5, 6])));
    assert_eq!(
        outcome.reason("three"),
        Some("best fit on n1: GPUs 4,5,6 (H100, one NVLink domain), 3 GPUs left free there")
    );
    assert_eq!(outcome.placement("two"), Some(("n1", vec![2, 3])));

    let outcome = run(fixture.params(r#"{"prefer_nvlink": false}"#));
    assert_eq!(outcome.placement("three"), Some(("n1", vec![2, 3, 4])));
}

#[test]
fn params_bound_the_cycle_and_bad_params_fail_loudly() {
    let outcome = run(SnapshotFixture::new()
        .params(r#"{"max_placements": 1}"#)
        .node("n1", 8, "H100", 81920)
        .pending("a", 1, 1024)
        .pending("b", 1, 1024));
    assert_eq!(outcome.placed(), vec!["a"]);
    assert_eq!(outcome.reason("b"), Some("placement budget of this cycle (1) is used up"));
    assert_eq!(outcome.logs[0].message, "placed 1 of 2 pending workloads; 7 GPUs left free");
    assert_eq!(outcome.logs[0].level, LogLevel::Info);

    let error = SnapshotFixture::new()
        .params(r#"{"max_placements": -1}"#)
        .evaluate(&PriorityBestFit)
        .expect_err("negative budget");
    assert_eq!(
        error.to_string(),
        "the policy failed: params.max_placements: expected an unsigned 32-bit integer, found -1"
    );
}

#[test]
fn a_container_workload_goes_to_a_node_with_a_container_engine() {
    // The bare node is the tighter fit (4 GPUs, not 8), but it has no container engine.
    let fixture = SnapshotFixture::new()
        .node("bare", 4, "H100", 81920)
        .node_with("engine", 8, "H100", 81920, |n| n.containers = true)
        .cpu_node("bare-cpu", 16_000, 65_536)
        .node_with("engine-cpu", 0, "", 0, |n| n.containers = true)
        .container_work(2);
    let outcome = run(fixture.clone());
    assert_eq!(outcome.placement("image"), Some(("engine", vec![0, 1])));
    assert_eq!(outcome.placement("image-cpu"), Some(("engine-cpu", vec![])));
    assert_eq!(outcome.placement("plain"), Some(("bare", vec![0, 1])));
    assert_eq!(fixture.problems(&outcome.decisions), vec![]);

    // Only the bare node has room: the container workload waits and says why; the same shape out
    // of a container still runs.
    let outcome = run(SnapshotFixture::new()
        .node("bare", 4, "H100", 81920)
        .node_with("engine", 1, "H100", 81920, |n| n.containers = true)
        .pending_with("image", 2, 1024, |w| w.container = true)
        .pending("plain", 2, 1024));
    assert_eq!(
        outcome.reason("image"),
        Some("no ready node that runs containers has 2 GPUs with ≥ 1024 MiB, even with all its GPUs free")
    );
    assert_eq!(outcome.placed_on("plain"), Some("bare"));
    let outcome = run(SnapshotFixture::new()
        .node("bare", 4, "H100", 81920)
        .pending_with("image", 2, 1024, |w| w.container = true));
    assert_eq!(outcome.reason("image"), Some("no ready node runs containers"));
}

#[test]
fn a_large_synthetic_fleet_gets_a_valid_decision_for_every_pending_workload() {
    let fixture = SnapshotFixture::synthetic_fleet(50, 8, 600, 9);
    let outcome = run(fixture.clone());
    assert_eq!(outcome.decisions.len(), 600);
    let placed_gpus: usize = outcome
        .decisions
        .iter()
        .map(|d| match &d.action {
            Action::Place { gpus, .. } => gpus.len(),
            _ => 0,
        })
        .sum();
    assert!(placed_gpus > 350 && placed_gpus <= 400, "{placed_gpus} of 400 GPUs placed");
    // Same input, same output.
    assert_eq!(run(fixture).decisions, outcome.decisions);
}

/// Random fleets (node states, host CPU and memory in use, GPU memory in use, models written in
/// several ways, NVLink layouts, GPUs held by running work, burst reserves, budgets): every pending
/// workload gets exactly one decision, and the host's checks accept them all (`run` fails
/// otherwise). The caches and indexes that make a cycle fast must never produce a decision the
/// plain rules would not.
#[test]
fn random_fleets_get_decisions_the_host_accepts() {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let models = ["H100", "A100", " h100 ", "A100, H100", "B200", "h100,a100", ""];
    for case in 0..200 {
        let nodes = 1 + (next() % 40) as u32;
        let per_node = [1u32, 2, 4, 8][(next() % 4) as usize];
        let pending = (next() % 300) as u32;
        let fixture = SnapshotFixture::synthetic_fleet(nodes, per_node, pending, case).edit(|doc| {
            for node in &mut doc.nodes {
                let roll = next();
                node.state = match roll % 10 {
                    0 => NodeState::Draining,
                    1 => NodeState::Lost,
                    _ => NodeState::Ready,
                };
                node.cpu_millis_free = (roll >> 8) as u32 % (node.cpu_millis + 1);
                node.memory_mb_free = (roll >> 24) as u32 % (node.memory_mb + 1);
                node.containers = roll >> 62 != 0;
            }
            for gpu in &mut doc.gpus {
                let roll = next();
                if roll % 7 == 0 {
                    gpu.model = "A100".into();
                }
                gpu.memory_used_mb = (roll >> 8) as u32 % 60_000;
                gpu.nvlink_group = match (roll >> 40) % 4 {
                    0 => None,
                    1 => Some(gpu.node * 2 + gpu.device_index % 2),
                    _ => Some(gpu.node),
                };
            }
            for w in &mut doc.workloads {
                let roll = next();
                w.cpu_millis = [500, 4_000, 16_000, 64_000, 120_000][(roll % 5) as usize];
                w.memory_mb = [1_024, 16_384, 131_072, 600_000][((roll >> 4) % 4) as usize];
                w.gpu_models = models[((roll >> 8) % 7) as usize].into();
                w.priority = ((roll >> 16) % 5) as i32;
                w.container = (roll >> 60) % 4 == 0;
            }
            let roll = next();
            if roll % 3 == 0 {
                doc.settings = Some(Settings {
                    burst_reserve_gpus: (roll >> 8) as u32 % 6,
                    realtime_first: roll % 2 == 0,
                    ..Settings::default()
                });
            }
            doc.params = match (roll >> 16) % 4 {
                0 => r#"{"prefer_nvlink": false}"#.into(),
                1 => format!(r#"{{"max_placements": {}}}"#, (roll >> 24) % 50),
                _ => "{}".into(),
            };
        });
        let outcome = run(fixture);
        assert_eq!(outcome.decisions.len(), pending as usize, "case {case}: one decision per pending workload");
    }
}
