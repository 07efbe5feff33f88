use airtime_policy_sdk::abi::decode_snapshot;
use airtime_policy_sdk::check::check_decisions;
use airtime_policy_sdk::owned::OwnedWorkload;
use airtime_policy_sdk::testing::{FIXTURE_NOW_MS, Outcome, SnapshotFixture};

use super::*;

fn run(fixture: SnapshotFixture) -> Outcome {
    fixture.evaluate(&StrictPriority).unwrap_or_else(|error| panic!("{error}"))
}

/// Running, preemptible, at `priority`.
fn preemptible(priority: i32) -> impl FnOnce(&mut OwnedWorkload) {
    move |w| {
        w.preemptible = true;
        w.priority = priority;
    }
}

fn priority(priority: i32) -> impl FnOnce(&mut OwnedWorkload) {
    move |w| w.priority = priority
}

#[test]
fn highest_priority_first_then_submission_first_fit() {
    let outcome = run(SnapshotFixture::new()
        .node("n1", 1, "H100", 81920)
        .node("n2", 2, "H100", 81920)
        .pending_with("low", 1, 1024, priority(1))
        .pending_with("high", 2, 1024, priority(9))
        .pending_with("high-later", 1, 1024, priority(9)));
    assert_eq!(outcome.placement("high"), Some(("n2", vec![0, 1])), "first node where it fits");
    assert_eq!(outcome.placement("high-later"), Some(("n1", vec![0])));
    assert!(outcome.is_kept_pending("low"));
    assert!(outcome.decisions.iter().all(|d| d.action != Action::Preempt), "nothing runs: nothing to preempt");
}

#[test]
fn the_lowest_priority_preemptible_work_on_one_node_makes_room() {
    let outcome = run(SnapshotFixture::new()
        .node("n1", 2, "H100", 81920)
        .running_with("low", "n1", &[0], preemptible(1))
        .running_with("mid", "n1", &[1], preemptible(5))
        .pending_with("urgent", 1, 1024, priority(10))
        .pending_with("later", 1, 1024, priority(0)));
    assert!(outcome.is_preempted("low"), "the lowest priority goes first");
    assert!(!outcome.is_preempted("mid"), "one victim is enough");
    assert_eq!(outcome.reason("low"), Some("strict priority: preempted for urgent (priority 10 over 1); requeued"));
    assert_eq!(outcome.reason("urgent"), Some("strict priority 10: preempting low on n1; starts once they stop"));
    assert!(outcome.is_kept_pending("later"), "priority 0 preempts nothing and n1 is held for urgent");
}

#[test]
fn non_preemptible_and_equal_priority_work_is_never_preempted() {
    let outcome = run(SnapshotFixture::new()
        .node("n1", 2, "H100", 81920)
        .running_with("pinned", "n1", &[0], priority(0))
        .running_with("equal", "n1", &[1], preemptible(10))
        .pending_with("urgent", 1, 1024, priority(10)));
    assert!(!outcome.is_preempted("pinned") && !outcome.is_preempted("equal"));
    assert_eq!(
        outcome.reason("urgent"),
        Some(
            "strict priority: no ready node has 1 free GPU with ≥ 1024 MiB, 1000 mCPU and 4096 MiB of host memory; preempting lower-priority work would not make room"
        )
    );
}

#[test]
fn victims_are_all_on_one_node_and_the_fewest_are_taken() {
    // n1 needs two victims for a 2-GPU gang, n2 one (a 2-GPU job), n3 could but only with a
    // non-preemptible neighbour's GPU.
    let outcome = run(SnapshotFixture::new()
        .node("n1", 2, "H100", 81920)
        .node("n2", 2, "H100", 81920)
        .node("n3", 2, "H100", 81920)
        .running_with("a", "n1", &[0], preemptible(0))
        .running_with("b", "n1", &[1], preemptible(0))
        .running_with("pair", "n2", &[0, 1], preemptible(3))
        .running_with("c", "n3", &[0], preemptible(0))
        .running_with("pinned", "n3", &[1], priority(0))
        .pending_with("gang", 2, 1024, priority(10)));
    assert!(outcome.is_preempted("pair"), "one victim on n2 beats two on n1, whatever the priorities");
    for other in ["a", "b", "c", "pinned"] {
        assert!(outcome.decision(other).is_none(), "{other} is left alone");
    }
}

#[test]
fn the_victim_set_is_minimal_not_every_lower_priority_job() {
    // Lowest first would take tiny (1 GPU) and then big (2 GPUs); big alone is enough.
    let outcome = run(SnapshotFixture::new()
        .node("n1", 4, "H100", 81920)
        .running_with("tiny", "n1", &[0], preemptible(0))
        .running_with("big", "n1", &[1, 2], preemptible(1))
        .running_with("other", "n1", &[3], preemptible(2))
        .pending_with("gang", 2, 1024, priority(10)));
    assert!(outcome.is_preempted("big"));
    assert!(!outcome.is_preempted("tiny") && !outcome.is_preempted("other"));
}

#[test]
fn while_its_victims_stop_it_waits_and_preempts_nothing_more() {
    let outcome = run(SnapshotFixture::new()
        .node("n1", 2, "H100", 81920)
        .running_with("stopping", "n1", &[0], |w| {
            w.state = WorkloadState::Stopping;
            w.preemptible = true;
        })
        .running_with("low", "n1", &[1], preemptible(0))
        .pending_with("urgent", 1, 1024, priority(10))
        .pending_with("small", 0, 0, priority(1)));
    assert!(!outcome.is_preempted("low"));
    assert_eq!(outcome.reason("urgent"), Some("strict priority 10: waits for stopping work on n1 to free room"));
    assert!(outcome.is_kept_pending("small"), "n1 is held for urgent, and it is the only node");
}

#[test]
fn stopping_work_counts_and_only_the_rest_is_preempted() {
    let outcome = run(SnapshotFixture::new()
        .node("n1", 3, "H100", 81920)
        .running_with("stopping", "n1", &[0], |w| w.state = WorkloadState::Stopping)
        .running_with("low", "n1", &[1], preemptible(0))
        .running_with("lower", "n1", &[2], preemptible(-1))
        .pending_with("gang", 2, 1024, priority(10)));
    assert!(outcome.is_preempted("lower"));
    assert!(!outcome.is_preempted("low"), "the stopping GPU and one victim are enough");
}

#[test]
fn work_inside_its_minimum_runtime_is_protected_and_the_reason_says_for_how_long() {
    let outcome = run(SnapshotFixture::new()
        .settings(Settings { min_runtime_s: 600, max_preemptions_per_hour: 4, ..Settings::default() })
        .node("n1", 1, "H100", 81920)
        .running_with("young", "n1", &[0], preemptible(0))
        .pending_with("urgent", 1, 1024, priority(10)));
    assert!(!outcome.is_preempted("young"), "it has run 60 s of its 600");
    assert_eq!(
        outcome.reason("urgent"),
        Some(
            "strict priority: no ready node has 1 free GPU with ≥ 1024 MiB, 1000 mCPU and 4096 MiB of host memory; lower-priority young is protected by its minimum runtime for 540 more s"
        )
    );

    let old = run(SnapshotFixture::new()
        .settings(Settings { min_runtime_s: 30, max_preemptions_per_hour: 4, ..Settings::default() })
        .node("n1", 1, "H100", 81920)
        .running_with("old", "n1", &[0], preemptible(0))
        .pending_with("urgent", 1, 1024, priority(10)));
    assert!(old.is_preempted("old"), "60 s is past its 30");
}

#[test]
fn settings_that_allow_no_preemptions_get_none() {
    let outcome = run(SnapshotFixture::new()
        .settings(Settings { max_preemptions_per_hour: 0, ..Settings::default() })
        .node("n1", 1, "H100", 81920)
        .running_with("low", "n1", &[0], preemptible(0))
        .pending_with("urgent", 1, 1024, priority(10)));
    assert!(!outcome.is_preempted("low"));
    assert!(outcome.reason("urgent").is_some_and(|r| r.ends_with("the settings allow no preemptions")));
}

#[test]
fn victims_must_free_gpus_of_an_allowed_model_and_the_host_resources() {
    let outcome = run(SnapshotFixture::new()
        .node("a100", 1, "A100", 40960)
        .node_with("h100", 1, "H100", 81920, |n| n.cpu_millis_free = 2_000)
        .running_with("on-a100", "a100", &[0], preemptible(0))
        .running_with("on-h100", "h100", &[0], |w| {
            w.preemptible = true;
            w.cpu_millis = 500;
        })
        .pending_with("h100-only", 1, 1024, |w| {
            w.gpu_models = "H100".into();
            w.priority = 10;
            w.cpu_millis = 4_000;
        }));
    assert!(!outcome.is_preempted("on-a100"), "its GPU is not a model h100-only allows");
    assert!(!outcome.is_preempted("on-h100"), "1500 + 500 mCPU is short of 4000");
    assert!(outcome.is_kept_pending("h100-only"));
}

#[test]
fn one_victim_is_claimed_once_and_a_second_preemptor_looks_elsewhere() {
    let outcome = run(SnapshotFixture::new()
        .node("n1", 1, "H100", 81920)
        .node("n2", 1, "H100", 81920)
        .running_with("v1", "n1", &[0], preemptible(0))
        .running_with("v2", "n2", &[0], preemptible(0))
        .pending_with("first", 1, 1024, priority(10))
        .pending_with("second", 1, 1024, priority(9)));
    assert!(outcome.is_preempted("v1") && outcome.is_preempted("v2"));
    assert!(outcome.reason("first").is_some_and(|r| r.contains("preempting v1 on n1")));
    assert!(outcome.reason("second").is_some_and(|r| r.contains("preempting v2 on n2")));
}

/// Random fleets with running, stopping and pending work, settings or none: one decision per
/// pending workload, every preemption of running preemptible work of lower priority than some
/// pending workload, and the host's checks accept it all (`run` fails otherwise).
#[test]
fn a_container_workload_goes_to_a_node_with_a_container_engine_and_preempts_only_there() {
    let fixture = SnapshotFixture::new()
        .node("bare", 2, "H100", 81920)
        .node_with("engine", 2, "H100", 81920, |n| n.containers = true)
        .pending_with("image", 1, 1024, |w| {
            w.container = true;
            w.priority = 5;
        })
        .pending_with("image-cpu", 0, 0, |w| w.container = true)
        .pending("plain", 1, 1024);
    let outcome = run(fixture.clone());
    assert_eq!(outcome.placement("image"), Some(("engine", vec![0])));
    assert_eq!(outcome.placement("image-cpu"), Some(("engine", vec![])));
    assert_eq!(outcome.placement("plain"), Some(("bare", vec![0])));
    assert_eq!(fixture.problems(&outcome.decisions), vec![]);

    // Full: the victim is on the node with the engine, though the one on the bare node is cheaper.
    let outcome = run(SnapshotFixture::new()
        .node("bare", 1, "H100", 81920)
        .node_with("engine", 1, "H100", 81920, |n| n.containers = true)
        .running_with("cheap", "bare", &[0], preemptible(0))
        .running_with("dearer", "engine", &[0], preemptible(3))
        .pending_with("image", 1, 1024, |w| {
            w.container = true;
            w.priority = 10;
        }));
    assert!(outcome.is_preempted("dearer") && !outcome.is_preempted("cheap"));

    let outcome = run(SnapshotFixture::new()
        .node("bare", 2, "H100", 81920)
        .pending_with("image", 1, 1024, |w| w.container = true)
        .pending("plain", 1, 1024));
    assert_eq!(outcome.reason("image"), Some("strict priority: no ready node runs containers"));
    assert_eq!(outcome.placed_on("plain"), Some("bare"));
}

#[test]
fn random_fleets_get_decisions_the_host_accepts() {
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (mut preemptions, mut waits_for_stopping) = (0, 0);
    for case in 0..150 {
        let nodes = 1 + next() % 12;
        let mut fixture = SnapshotFixture::new();
        if next() % 2 == 0 {
            fixture = fixture.settings(Settings {
                min_runtime_s: [0, 30, 600][(next() % 3) as usize],
                max_preemptions_per_hour: (next() % 3) as u32,
                ..Settings::default()
            });
        }
        let mut running = 0;
        for n in 0..nodes {
            let gpus = [0u32, 1, 2, 4, 8][(next() % 5) as usize];
            let name = format!("n{n}");
            let model = if next() % 3 == 0 { "A100" } else { "H100" };
            let state = if next() % 8 == 0 { NodeState::Draining } else { NodeState::Ready };
            fixture = fixture.node_with(&name, gpus, model, 81920, |node| node.state = state);
            let mut device = 0;
            while device < gpus {
                let take = (1 + next() % 4).min(u64::from(gpus - device)) as u32;
                if next() % 3 != 0 {
                    let devices: Vec<u32> = (device..device + take).collect();
                    let roll = next();
                    fixture = fixture.running_with(&format!("r{running}"), &name, &devices, |w| {
                        w.priority = (roll % 5) as i32;
                        w.preemptible = roll % 4 != 0;
                        w.state = if roll % 6 == 0 { WorkloadState::Stopping } else { WorkloadState::Running };
                        w.started_ms = FIXTURE_NOW_MS - (roll >> 8) % 1_200_000;
                        w.cpu_millis = [500, 4_000, 16_000][((roll >> 32) % 3) as usize];
                    });
                    running += 1;
                }
                device += take;
            }
        }
        let pending = next() % 40;
        for p in 0..pending {
            let roll = next();
            fixture = fixture.pending_with(&format!("p{p}"), [0u32, 1, 1, 2, 4, 8][(roll % 6) as usize], 20480, |w| {
                w.priority = ((roll >> 8) % 6) as i32;
                w.gpu_models = ["", "H100", "a100"][((roll >> 16) % 3) as usize].into();
                w.cpu_millis = [500, 4_000, 32_000][((roll >> 24) % 3) as usize];
            });
        }
        let outcome = run(fixture.clone());
        let bytes = fixture.encode();
        let snapshot = decode_snapshot(&bytes).expect("fixture");
        assert_eq!(check_decisions(&snapshot, &outcome.decisions), vec![], "case {case}");
        let top = snapshot.pending().map(|(_, w)| w.priority).max();
        let mut decided_pending = 0;
        for decision in &outcome.decisions {
            let w = &snapshot.workloads[decision.workload as usize];
            match decision.action {
                Action::Preempt => {
                    preemptions += 1;
                    assert!(w.is_running() && w.preemptible, "case {case}: {}", w.name);
                    assert!(top.is_some_and(|top| w.priority < top), "case {case}: {} outranks all", w.name);
                    if let Some(s) = snapshot.settings {
                        assert!(s.max_preemptions_per_hour > 0, "case {case}");
                        assert!(w.running_ms(snapshot.now_ms) / 1000 >= u64::from(s.min_runtime_s), "case {case}");
                    }
                }
                _ => decided_pending += 1,
            }
            waits_for_stopping += usize::from(decision.reason.contains("waits for stopping work"));
        }
        assert_eq!(decided_pending, pending, "case {case}: one decision per pending workload");
    }
    assert!(preemptions > 50 && waits_for_stopping > 5, "{preemptions} preemptions, {waits_for_stopping} waits");
}
