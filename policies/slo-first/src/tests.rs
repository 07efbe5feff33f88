//! The policy's decisions on small fleets, natively, through the real ABI (sdk::testing).

use airtime_policy_sdk::abi::{Settings, Sharing, WorkloadClass, WorkloadState};
use airtime_policy_sdk::testing::SnapshotFixture;

use super::SloFirst;

const HOUR_MS: u64 = 3_600_000;

fn settings() -> Settings {
    Settings { realtime_first: true, grace_period_s: 30, max_preemptions_per_hour: 4, ..Settings::default() }
}

#[test]
fn a_burst_of_customer_traffic_preempts_preemptible_training() {
    let outcome = SnapshotFixture::new()
        .settings(settings())
        .node("gpu-a", 1, "H100", 81920)
        .running_with("train", "gpu-a", &[0], |w| {
            w.class = WorkloadClass::Training;
            w.preemptible = true;
            w.checkpointable = true;
            w.priority = 50;
        })
        .pending_with("chat", 1, 0, |w| w.class = WorkloadClass::RealtimeInference)
        .evaluate(&SloFirst)
        .expect("runs");
    assert!(outcome.is_preempted("train"));
    assert!(outcome.reason("train").unwrap().contains("real-time inference chat"), "{:?}", outcome.reason("train"));
    assert!(outcome.reason("chat").unwrap().contains("preempting train"), "{:?}", outcome.reason("chat"));
}

#[test]
fn a_burst_stops_no_more_than_it_uses_of_work_that_would_lose_its_progress() {
    // A quarter of a GPU of customer traffic does not stop four GPUs of training that keeps no
    // checkpoint: 3.75 GPUs would stand idle and the run would start over.
    let outcome = SnapshotFixture::new()
        .settings(settings())
        .node("gpu-a", 4, "H100", 81920)
        .running_with("train", "gpu-a", &[0, 1, 2, 3], |w| {
            w.class = WorkloadClass::Training;
            w.preemptible = true;
        })
        .pending_with("chat", 1, 0, |w| {
            w.class = WorkloadClass::RealtimeInference;
            w.gpu_milli = 250;
        })
        .evaluate(&SloFirst)
        .expect("runs");
    assert!(!outcome.is_preempted("train"), "{:?}", outcome.reason("train"));
}

#[test]
fn a_burst_stops_a_bigger_job_only_if_it_resumes_and_nothing_its_size_would_do() {
    let fleet = || {
        SnapshotFixture::new()
            .settings(settings())
            .node("gpu-a", 2, "H100", 81920)
            .running_with("train", "gpu-a", &[0, 1], |w| {
                w.class = WorkloadClass::Training;
                w.preemptible = true;
                w.checkpointable = true;
            })
            .pending_with("chat", 1, 0, |w| w.class = WorkloadClass::RealtimeInference)
    };
    // The only victim is bigger but resumes: customer traffic does not wait on it.
    let outcome = fleet().evaluate(&SloFirst).expect("runs");
    assert!(outcome.is_preempted("train"), "{:?}", outcome.reason("chat"));
    // A job its size elsewhere is stopped instead: nothing stands idle.
    let outcome = fleet()
        .node("gpu-b", 1, "H100", 81920)
        .running_with("eval", "gpu-b", &[0], |w| {
            w.class = WorkloadClass::Evaluation;
            w.preemptible = true;
            w.checkpointable = true;
        })
        .evaluate(&SloFirst)
        .expect("runs");
    assert!(outcome.is_preempted("eval") && !outcome.is_preempted("train"), "{:?}", outcome.reason("chat"));
}

#[test]
fn a_burst_never_stops_work_when_it_would_still_not_fit() {
    // The victim frees its GPU but the burst needs more host CPU than the node would then have:
    // stopping it would only lose work.
    let outcome = SnapshotFixture::new()
        .settings(settings())
        .node_with("gpu-a", 2, "H100", 81920, |n| {
            n.cpu_millis = 16_000;
            n.cpu_millis_free = 16_000;
        })
        .running_with("hog", "gpu-a", &[0], |w| w.cpu_millis = 14_000)
        .running_with("train", "gpu-a", &[1], |w| {
            w.class = WorkloadClass::Training;
            w.preemptible = true;
            w.cpu_millis = 1_000;
        })
        .pending_with("chat", 1, 0, |w| {
            w.class = WorkloadClass::RealtimeInference;
            w.cpu_millis = 4_000;
        })
        .evaluate(&SloFirst)
        .expect("runs");
    assert!(!outcome.is_preempted("train"), "{:?}", outcome.reason("train"));
    assert!(outcome.placed_on("chat").is_none());
}

#[test]
fn while_its_victim_stops_a_burst_waits_and_preempts_nothing_more() {
    let outcome = SnapshotFixture::new()
        .settings(settings())
        .node("gpu-a", 2, "H100", 81920)
        .running_with("train", "gpu-a", &[0, 1], |w| {
            w.preemptible = true;
            w.state = WorkloadState::Stopping;
        })
        .running_with("eval", "gpu-a", &[], |w| w.preemptible = true)
        .pending_with("chat", 1, 0, |w| w.class = WorkloadClass::RealtimeInference)
        .evaluate(&SloFirst)
        .expect("runs");
    assert!(outcome.reason("chat").unwrap().contains("waiting for preempted work"), "{:?}", outcome.reason("chat"));
    assert!(!outcome.is_preempted("eval"));
}

#[test]
fn work_within_its_minimum_runtime_is_protected_and_the_burst_says_for_how_long() {
    let now = 100 * HOUR_MS;
    let outcome = SnapshotFixture::new()
        .now_ms(now)
        .settings(Settings { min_runtime_s: 600, ..settings() })
        .node("gpu-a", 1, "H100", 81920)
        .running_with("young", "gpu-a", &[0], |w| {
            w.preemptible = true;
            w.started_ms = now - 60_000;
        })
        .pending_with("chat", 1, 0, |w| w.class = WorkloadClass::RealtimeInference)
        .evaluate(&SloFirst)
        .expect("runs");
    assert!(!outcome.is_preempted("young"));
    assert_eq!(outcome.reason("chat"), Some("waiting: young is protected by its minimum runtime for 540 more s"));
}

#[test]
fn the_burst_reserve_holds_non_preemptible_batch_work_but_not_real_time_or_preemptible_work() {
    let outcome = SnapshotFixture::new()
        .settings(Settings { burst_reserve_gpus: 1, ..settings() })
        .node("gpu-b", 2, "A100", 40960)
        .pending("batch", 1, 0)
        .pending_with("sweep", 1, 0, |w| w.preemptible = true)
        .pending_with("chat", 1, 0, |w| w.class = WorkloadClass::RealtimeInference)
        .evaluate(&SloFirst)
        .expect("runs");
    assert!(outcome.placed_on("chat").is_some());
    assert!(outcome.reason("batch").unwrap().contains("burst reserve"), "{:?}", outcome.reason("batch"));
    assert!(outcome.placed_on("sweep").is_some(), "preemptible work may use the reserve");
}

#[test]
fn an_owner_below_its_guarantee_reclaims_gpus_from_a_borrowing_tenant() {
    let outcome = SnapshotFixture::new()
        .settings(settings())
        .tenant_with("research", |t| {
            t.may_borrow = true;
            t.running_gpus = 2;
        })
        .tenant_with("product", |t| t.guaranteed_gpus = 2)
        .node("gpu-c", 2, "L40S", 49152)
        .running_with("sweep-0", "gpu-c", &[0], |w| {
            w.tenant = 0;
            w.preemptible = true;
            w.started_ms = 1;
        })
        .running_with("sweep-1", "gpu-c", &[1], |w| {
            w.tenant = 0;
            w.preemptible = true;
            w.started_ms = 2;
        })
        .pending_with("finetune", 1, 0, |w| w.tenant = 1)
        .evaluate(&SloFirst)
        .expect("runs");
    assert!(outcome.is_preempted("sweep-1"), "the most recently started borrower goes first");
    assert!(!outcome.is_preempted("sweep-0"));
    assert!(outcome.reason("sweep-1").unwrap().contains("reclaimed"), "{:?}", outcome.reason("sweep-1"));
}

#[test]
fn a_borrower_cannot_reclaim_and_a_tenant_that_may_not_borrow_waits_on_its_quota() {
    let outcome = SnapshotFixture::new()
        .settings(settings())
        .tenant_with("strict", |t| {
            t.guaranteed_gpus = 1;
            t.running_gpus = 1;
            t.may_borrow = false;
        })
        .node("gpu-c", 2, "L40S", 49152)
        .running_with("mine", "gpu-c", &[0], |w| w.tenant = 0)
        .pending_with("more", 1, 0, |w| w.tenant = 0)
        .evaluate(&SloFirst)
        .expect("runs");
    assert!(outcome.reason("more").unwrap().starts_with("quota used up"), "{:?}", outcome.reason("more"));
}

#[test]
fn a_big_gang_reserves_its_node_and_small_jobs_may_not_take_those_gpus() {
    let outcome = SnapshotFixture::new()
        .settings(settings())
        .node("gpu-d", 8, "H100", 81920)
        .node("gpu-small", 1, "H100", 81920)
        .running("small-0", "gpu-d", &[0])
        .running("small-1", "gpu-d", &[1])
        .pending_with("pretrain", 8, 0, |w| w.priority = 10)
        .pending("stream-0", 1, 0)
        .pending("stream-1", 1, 0)
        .evaluate(&SloFirst)
        .expect("runs");
    assert!(outcome.reason("pretrain").unwrap().contains("waiting for its gang"), "{:?}", outcome.reason("pretrain"));
    // One small job backfills the node that is not reserved; the next waits behind the reservation.
    assert_eq!(outcome.placed_on("stream-0"), Some("gpu-small"));
    assert!(outcome.reason("stream-1").unwrap().contains("reserved for pretrain"), "{:?}", outcome.reason("stream-1"));
}

#[test]
fn cpu_capable_embeddings_go_to_a_cpu_node_leaving_the_gpu_to_gpu_only_work() {
    let outcome = SnapshotFixture::new()
        .settings(settings())
        .node("gpu-e", 1, "L4", 24576)
        .cpu_node("cpu-e", 8000, 32768)
        .pending_with("embed", 1, 0, |w| {
            w.class = WorkloadClass::Embeddings;
            w.cpu_capable = true;
            w.cpu_millis = 500;
        })
        .pending_with("quantize", 1, 20000, |w| w.class = WorkloadClass::Quantization)
        .evaluate(&SloFirst)
        .expect("runs");
    assert_eq!(outcome.placement("embed"), Some(("cpu-e", vec![])));
    assert_eq!(outcome.placement("quantize"), Some(("gpu-e", vec![0])));
}

#[test]
fn real_time_inference_is_never_preempted() {
    let outcome = SnapshotFixture::new()
        .settings(settings())
        .node("gpu-a", 1, "H100", 81920)
        .running_with("chat-1", "gpu-a", &[0], |w| {
            w.class = WorkloadClass::RealtimeInference;
            w.preemptible = true;
        })
        .pending_with("chat-2", 1, 0, |w| w.class = WorkloadClass::RealtimeInference)
        .evaluate(&SloFirst)
        .expect("runs");
    assert!(!outcome.is_preempted("chat-1"));
    assert!(outcome.is_kept_pending("chat-2"));
}

#[test]
fn it_places_work_on_a_large_mixed_fleet() {
    // The full 1,000 × 8 / 10,000 size is timed in policy-host's benchmark; this proves behaviour.
    let outcome =
        SnapshotFixture::synthetic_fleet(100, 8, 2_000, 7).settings(settings()).evaluate(&SloFirst).expect("runs");
    assert!(outcome.placed().len() > 50, "places work at scale: {}", outcome.placed().len());
}

#[test]
fn a_container_workload_goes_to_a_node_with_a_container_engine() {
    // The bare node is the tighter fit (2 GPUs, not 4), but it has no container engine.
    let fixture = SnapshotFixture::new()
        .settings(settings())
        .node("bare", 2, "H100", 81920)
        .node_with("engine", 4, "H100", 81920, |n| n.containers = true)
        .cpu_node("cpu-bare", 8000, 32768)
        .node_with("cpu-engine", 0, "", 0, |n| n.containers = true)
        .container_work(1);
    let outcome = fixture.evaluate(&SloFirst).expect("runs");
    assert_eq!(outcome.placement("image"), Some(("engine", vec![0])));
    assert_eq!(outcome.placement("image-cpu"), Some(("cpu-engine", vec![])));
    assert_eq!(outcome.placement("plain"), Some(("bare", vec![0])));
    assert_eq!(fixture.problems(&outcome.decisions), vec![]);

    // A burst in a container preempts on the node with the engine, not on the bare one.
    let outcome = SnapshotFixture::new()
        .settings(settings())
        .node("bare", 1, "H100", 81920)
        .node_with("engine", 1, "H100", 81920, |n| n.containers = true)
        .running_with("cheap", "bare", &[0], |w| {
            w.class = WorkloadClass::Training;
            w.preemptible = true;
            w.priority = 0;
        })
        .running_with("dearer", "engine", &[0], |w| {
            w.class = WorkloadClass::Training;
            w.preemptible = true;
            w.priority = 50;
        })
        .pending_with("chat", 1, 0, |w| {
            w.class = WorkloadClass::RealtimeInference;
            w.container = true;
        })
        .evaluate(&SloFirst)
        .expect("runs");
    assert!(outcome.is_preempted("dearer") && !outcome.is_preempted("cheap"));

    let outcome = SnapshotFixture::new()
        .settings(settings())
        .node("bare", 2, "H100", 81920)
        .pending_with("image", 1, 1024, |w| w.container = true)
        .pending("plain", 1, 1024)
        .evaluate(&SloFirst)
        .expect("runs");
    assert_eq!(outcome.reason("image"), Some("no ready node runs containers"));
    assert_eq!(outcome.placed_on("plain"), Some("bare"));
}

#[test]
fn a_node_without_the_host_cpu_a_gpu_job_asks_for_is_passed_over() {
    let outcome = SnapshotFixture::new()
        .settings(settings())
        .node_with("busy-host", 2, "H100", 81920, |n| n.cpu_millis_free = 100)
        .node("roomy-host", 2, "H100", 81920)
        .pending_with("train", 1, 0, |w| w.cpu_millis = 4000)
        .evaluate(&SloFirst)
        .expect("the policy runs and every decision passes the host's checks");
    assert_eq!(outcome.placed_on("train"), Some("roomy-host"));
}

#[test]
fn four_quarter_gpu_inference_workloads_share_one_gpu_and_training_goes_elsewhere() {
    let outcome = SnapshotFixture::new()
        .node("shared", 2, "H100", 81920)
        .sharing("shared", Sharing::Mps)
        .pending_with("q1", 1, 10240, |w| {
            w.gpu_milli = 250;
            w.class = WorkloadClass::RealtimeInference;
        })
        .pending_with("q2", 1, 10240, |w| {
            w.gpu_milli = 250;
            w.class = WorkloadClass::RealtimeInference;
        })
        .pending_with("q3", 1, 10240, |w| {
            w.gpu_milli = 250;
            w.class = WorkloadClass::RealtimeInference;
        })
        .pending_with("q4", 1, 10240, |w| {
            w.gpu_milli = 250;
            w.class = WorkloadClass::RealtimeInference;
        })
        .pending_with("train", 1, 40960, |w| w.class = WorkloadClass::Training)
        .evaluate(&SloFirst)
        .expect("sound decisions");
    let quarters: Vec<Vec<u32>> =
        ["q1", "q2", "q3", "q4"].iter().map(|q| outcome.placement(q).expect("placed").1).collect();
    assert!(quarters.iter().all(|gpus| gpus == &quarters[0]), "all four on one GPU: {quarters:?}");
    let (_, train) = outcome.placement("train").expect("training placed");
    assert_ne!(train, quarters[0], "the whole-GPU job takes the other GPU");
    assert!(outcome.reason("q1").unwrap().contains("least fragmenting"), "{:?}", outcome.reason("q1"));
}

#[test]
fn a_tenant_quota_counts_a_quarter_gpu_as_a_quarter() {
    let outcome = SnapshotFixture::new()
        .node("shared", 1, "H100", 81920)
        .sharing("shared", Sharing::TimeSlicing)
        .tenant_with("team", |t| {
            t.guaranteed_gpus = 1;
            t.may_borrow = false;
        })
        .running_share("a", "shared", 0, 250, 0)
        .running_share("b", "shared", 0, 250, 0)
        .running_share("c", "shared", 0, 250, 0)
        .pending_share("d", 250, 0)
        .pending_share("e", 250, 0)
        .edit(|doc| {
            let team = doc.tenants.iter().position(|t| t.name == "team").expect("team") as u32;
            for w in &mut doc.workloads {
                w.tenant = team;
            }
            doc.tenants[team as usize].running_gpu_milli = 750;
            doc.tenants[team as usize].running_gpus = 1;
        })
        .evaluate(&SloFirst)
        .expect("sound decisions");
    assert!(outcome.placement("d").is_some(), "{:?}", outcome.reason("d"));
    assert!(outcome.is_kept_pending("e"));
    assert!(outcome.reason("e").unwrap().contains("holds 1 of its 1 guaranteed GPUs"), "{:?}", outcome.reason("e"));
}

#[test]
fn a_gang_behind_fragmentation_moves_checkpointable_work_that_fits_elsewhere() {
    // 6 GPUs free over two nodes, 4 on neither: the checkpointable 1-GPU job on b moves to a.
    let outcome = SnapshotFixture::new()
        .settings(settings())
        .node("a", 4, "H100", 81920)
        .node("b", 4, "H100", 81920)
        .running_with("serving", "a", &[0], |w| w.class = WorkloadClass::BatchInference)
        .running_with("sweep", "b", &[0], |w| {
            w.class = WorkloadClass::Training;
            w.preemptible = true;
            w.checkpointable = true;
            w.started_ms -= HOUR_MS;
        })
        .pending_with("gang", 4, 0, |w| {
            w.class = WorkloadClass::Training;
            w.priority = 10;
        })
        .evaluate(&SloFirst)
        .expect("runs");
    assert!(outcome.is_preempted("sweep"), "{:?}", outcome.reason("sweep"));
    assert!(outcome.reason("sweep").unwrap().contains("consolidation"), "{:?}", outcome.reason("sweep"));
    let reason = outcome.reason("gang").unwrap();
    assert!(reason.starts_with("consolidating: moving sweep off b"), "{reason}");
    assert!(!outcome.is_preempted("serving"));
}

#[test]
fn a_gang_across_nodes_is_placed_whole_one_member_a_node_or_waits_holding_nothing() {
    let fleet = || {
        SnapshotFixture::new()
            .settings(settings())
            .node("n0", 2, "H100", 81920)
            .node("n1", 2, "H100", 81920)
            .node("n2", 2, "H100", 81920)
    };
    // Three members of two GPUs: one on each node, though each node could not hold two of them.
    let outcome = fleet().pending_gang("train", 3, 2).evaluate(&SloFirst).expect("runs");
    let mut nodes: Vec<&str> = ["train-0", "train-1", "train-2"].iter().filter_map(|m| outcome.placed_on(m)).collect();
    nodes.sort_unstable();
    assert_eq!(nodes, ["n0", "n1", "n2"]);
    assert!(outcome.reason("train-1").unwrap().contains("gang member rank 1 of 3"), "{:?}", outcome.reason("train-1"));
    // Four members on three nodes: none placed, and small work behind it still runs.
    let outcome = fleet().pending_gang("big", 4, 2).pending("small", 1, 0).evaluate(&SloFirst).expect("runs");
    for member in ["big-0", "big-1", "big-2", "big-3"] {
        assert!(outcome.is_kept_pending(member), "{member}: {:?}", outcome.decision(member));
    }
    let reason = outcome.reason("big-0").unwrap();
    assert!(reason.contains("needs 4 nodes") && reason.contains("3 ready nodes have that now"), "{reason}");
    assert!(outcome.placed_on("small").is_some());
}

#[test]
fn a_gang_whose_whole_demand_passes_its_tenants_limit_waits_whole_with_the_reason() {
    // Three members of two GPUs is six GPUs; the tenant may hold five. Each member alone would fit.
    let outcome = SnapshotFixture::new()
        .settings(settings())
        .tenant_with("default", |t| t.gpu_limit = 5)
        .node("n0", 2, "H100", 81920)
        .node("n1", 2, "H100", 81920)
        .node("n2", 2, "H100", 81920)
        .pending_gang("train", 3, 2)
        .evaluate(&SloFirst)
        .expect("runs");
    for member in ["train-0", "train-1", "train-2"] {
        assert!(outcome.is_kept_pending(member), "{member}: {:?}", outcome.decision(member));
    }
    let reason = outcome.reason("train-0").unwrap();
    assert!(reason.contains("at its limit") && reason.contains("at most 5 GPUs"), "{reason}");
}
