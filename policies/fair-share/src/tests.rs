//! The policy's decisions on small fleets, natively, through the real ABI (sdk::testing).

use std::time::{Duration, Instant};

use airtime_policy_sdk::abi::{Settings, WorkloadClass, WorkloadState};
use airtime_policy_sdk::testing::{EvaluationError, SnapshotFixture};

use super::FairShare;

const HOUR_MS: u64 = 3_600_000;

fn settings() -> Settings {
    Settings { realtime_first: true, grace_period_s: 30, max_preemptions_per_hour: 4, ..Settings::default() }
}

#[test]
fn the_tenant_with_fewer_weighted_gpu_hours_goes_first_even_behind_a_higher_priority() {
    let outcome = SnapshotFixture::new()
        .settings(settings())
        .tenant_with("research", |t| t.decayed_gpu_hours = 12.0)
        .tenant_with("product", |t| t.decayed_gpu_hours = 3.5)
        .node("gpu-a", 4, "H100", 81920)
        .pending_with("pretrain", 4, 40960, |w| {
            w.tenant = 0;
            w.priority = 90;
            w.class = WorkloadClass::Training;
        })
        .pending_with("serve-eval", 2, 40960, |w| w.tenant = 1)
        .evaluate(&FairShare)
        .expect("runs");
    assert_eq!(outcome.placement("serve-eval"), Some(("gpu-a", vec![0, 1])));
    assert_eq!(
        outcome.reason("serve-eval"),
        Some(
            "best fit on gpu-a: GPUs [0,1] (H100), 2 left free there; fair share: tenant product's turn at 3.5 weighted GPU-hours, the least with work waiting"
        )
    );
    assert_eq!(
        outcome.reason("pretrain"),
        Some(
            "fair share: tenant research has 12.0 weighted GPU-hours vs 3.5 for product; waiting behind product's work (no ready node has 4 free GPUs with ≥ 40960 MiB left)"
        )
    );
}

#[test]
fn weight_divides_the_history_so_a_heavier_tenant_may_use_more() {
    // ml used 20 GPU-hours with weight 4 (5.0 per unit of weight); web used 8 with weight 1 (8.0).
    let outcome = SnapshotFixture::new()
        .tenant_with("ml", |t| {
            t.decayed_gpu_hours = 20.0;
            t.weight = 4;
        })
        .tenant_with("web", |t| t.decayed_gpu_hours = 8.0)
        .node("gpu-a", 1, "A100", 40960)
        .pending_with("web-batch", 1, 0, |w| w.tenant = 1)
        .pending_with("ml-eval", 1, 0, |w| w.tenant = 0)
        .evaluate(&FairShare)
        .expect("runs");
    assert_eq!(outcome.placed_on("ml-eval"), Some("gpu-a"));
    assert!(
        outcome
            .reason("web-batch")
            .unwrap()
            .starts_with("fair share: tenant web has 8.0 weighted GPU-hours vs 5.0 for ml"),
        "{:?}",
        outcome.reason("web-batch")
    );
}

#[test]
fn shares_are_recomputed_as_the_cycle_places_work_so_equal_tenants_alternate() {
    let mut fixture = SnapshotFixture::new().tenant("a").tenant("b").node("gpu-a", 4, "L40S", 49152);
    for i in 0..3 {
        fixture = fixture
            .pending_with(&format!("a-{i}"), 1, 0, |w| {
                w.tenant = 0;
                w.priority = 10 - i;
            })
            .pending_with(&format!("b-{i}"), 1, 0, |w| {
                w.tenant = 1;
                w.priority = 10 - i;
            });
    }
    let outcome = fixture.evaluate(&FairShare).expect("runs");
    // Each GPU placed raises its tenant's share by one GPU-hour; the other tenant is then next.
    assert_eq!(outcome.placed(), vec!["a-0", "b-0", "a-1", "b-1"]);
    assert!(outcome.reason("a-2").unwrap().contains("waiting behind b's work"), "{:?}", outcome.reason("a-2"));
    assert!(outcome.reason("b-2").unwrap().contains("waiting behind a's work"), "{:?}", outcome.reason("b-2"));
}

#[test]
fn a_tenant_below_its_guarantee_goes_first_whatever_its_history() {
    let outcome = SnapshotFixture::new()
        .tenant_with("research", |t| t.decayed_gpu_hours = 0.0)
        .tenant_with("product", |t| {
            t.guaranteed_gpus = 2;
            t.decayed_gpu_hours = 500.0;
        })
        .node("gpu-a", 2, "H100", 81920)
        .pending_with("sweep", 2, 0, |w| w.tenant = 0)
        .pending_with("finetune", 2, 0, |w| w.tenant = 1)
        .evaluate(&FairShare)
        .expect("runs");
    assert_eq!(outcome.placed_on("finetune"), Some("gpu-a"));
    assert!(
        outcome
            .reason("finetune")
            .unwrap()
            .ends_with("tenant product is below its guarantee (0 of 2 GPUs) and goes first"),
        "{:?}",
        outcome.reason("finetune")
    );
    assert_eq!(
        outcome.reason("sweep"),
        Some(
            "fair share: tenant product is below its guarantee of 2 GPUs and goes first; waiting behind product's work (no ready node has 2 free GPUs with ≥ 0 MiB left)"
        )
    );
}

/// research holds 6 of 8 GPUs (far over its fair share of 8/3), batch 2 (under it); product is
/// guaranteed 4 and holds none.
fn crowded_fleet() -> SnapshotFixture {
    SnapshotFixture::new()
        .now_ms(100 * HOUR_MS)
        .settings(settings())
        .tenant_with("research", |t| {
            t.running_gpus = 6;
            t.decayed_gpu_hours = 30.0;
        })
        .tenant_with("batch", |t| {
            t.running_gpus = 2;
            t.decayed_gpu_hours = 2.0;
        })
        .tenant_with("product", |t| t.guaranteed_gpus = 4)
        .node("gpu-a", 8, "H100", 81920)
        .running_with("sweep-0", "gpu-a", &[0, 1], |w| {
            w.tenant = 0;
            w.preemptible = true;
            w.class = WorkloadClass::Training;
            w.checkpointable = true;
            w.started_ms = 10 * HOUR_MS;
        })
        .running_with("sweep-1", "gpu-a", &[2, 3], |w| {
            w.tenant = 0;
            w.preemptible = true;
            w.class = WorkloadClass::Training;
            w.checkpointable = true;
            w.started_ms = 20 * HOUR_MS;
        })
        .running_with("chat", "gpu-a", &[4, 5], |w| {
            w.tenant = 0;
            w.preemptible = true;
            w.class = WorkloadClass::RealtimeInference;
            w.priority = -10;
            w.started_ms = 30 * HOUR_MS;
        })
        .running_with("b-0", "gpu-a", &[6, 7], |w| {
            w.tenant = 1;
            w.preemptible = true;
            w.priority = -20;
            w.started_ms = 40 * HOUR_MS;
        })
}

#[test]
fn a_tenant_below_its_guarantee_reclaims_from_the_tenant_most_over_its_fair_share() {
    let outcome = crowded_fleet().pending_with("finetune", 2, 0, |w| w.tenant = 2).evaluate(&FairShare).expect("runs");
    // Not batch's work, though it has the lowest priority: batch is within its fair share. Not the
    // real-time chat, ever. Of research's sweeps, the most recently started.
    assert!(outcome.is_preempted("sweep-1"));
    assert!(!outcome.is_preempted("sweep-0"));
    assert!(!outcome.is_preempted("chat"));
    assert!(!outcome.is_preempted("b-0"));
    assert_eq!(
        outcome.reason("sweep-1"),
        Some(
            "fair-share reclaim: tenant research holds 6 GPUs, over its guarantee of 0 and its fair share of 2.7 (36.0 weighted GPU-hours); tenant product is below its guarantee of 4 GPUs and needs them for finetune; requeued, resumes from its checkpoint"
        )
    );
    assert_eq!(
        outcome.reason("finetune"),
        Some(
            "reclaiming GPUs within tenant product's guarantee of 4 GPUs: preempting sweep-1 on gpu-a from tenant research, the most over its fair share; placed once they stop"
        )
    );
}

#[test]
fn work_within_its_minimum_runtime_is_protected_and_the_waiting_work_says_for_how_long() {
    let now = 100 * HOUR_MS;
    let outcome = SnapshotFixture::new()
        .now_ms(now)
        .settings(Settings { min_runtime_s: 600, ..settings() })
        .tenant_with("research", |t| t.running_gpus = 1)
        .tenant_with("product", |t| t.guaranteed_gpus = 1)
        .node("gpu-a", 1, "H100", 81920)
        .running_with("young", "gpu-a", &[0], |w| {
            w.tenant = 0;
            w.preemptible = true;
            w.started_ms = now - 60_000;
        })
        .pending_with("finetune", 1, 0, |w| w.tenant = 1)
        .evaluate(&FairShare)
        .expect("runs");
    assert!(!outcome.is_preempted("young"));
    assert_eq!(
        outcome.reason("finetune"),
        Some(
            "waiting: young (tenant research, over its fair share) is protected by its minimum runtime for 540 more s; then it is reclaimed for tenant product's guarantee"
        )
    );
}

#[test]
fn while_its_victims_stop_the_reclaiming_work_waits_and_preempts_nothing_more() {
    let outcome = crowded_fleet()
        .edit(|doc| doc.workloads[1].state = WorkloadState::Stopping) // sweep-1, preempted last cycle
        .pending_with("finetune", 2, 0, |w| w.tenant = 2)
        .evaluate(&FairShare)
        .expect("runs");
    assert_eq!(
        outcome.reason("finetune"),
        Some(
            "waiting for preempted work on gpu-a to stop (grace period 30 s); then placed within tenant product's guarantee of 4 GPUs"
        )
    );
    assert!(outcome.decisions.iter().all(|d| d.action != airtime_policy_sdk::abi::Action::Preempt));
}

#[test]
fn reclaim_never_takes_a_tenant_below_its_own_guarantee_and_can_be_turned_off() {
    // research is over its fair share but guaranteed all 6 of its GPUs: nothing may be reclaimed.
    let guaranteed = crowded_fleet()
        .edit(|doc| doc.tenants[0].guaranteed_gpus = 6)
        .pending_with("finetune", 2, 0, |w| w.tenant = 2)
        .evaluate(&FairShare)
        .expect("runs");
    assert!(guaranteed.decisions.iter().all(|d| d.action != airtime_policy_sdk::abi::Action::Preempt));
    assert_eq!(
        guaranteed.reason("finetune"),
        Some("no ready node has 2 free GPUs with ≥ 0 MiB; every GPU that fits it is taken")
    );

    let off = crowded_fleet()
        .params(r#"{"reclaim": false}"#)
        .pending_with("finetune", 2, 0, |w| w.tenant = 2)
        .evaluate(&FairShare)
        .expect("runs");
    assert!(!off.is_preempted("sweep-1"));
    assert!(off.is_kept_pending("finetune"));
}

#[test]
fn a_tenant_that_may_not_borrow_waits_on_its_quota_and_the_burst_reserve_holds_batch_work() {
    let quota = SnapshotFixture::new()
        .tenant_with("strict", |t| {
            t.guaranteed_gpus = 1;
            t.running_gpus = 1;
            t.may_borrow = false;
        })
        .node("gpu-c", 2, "L40S", 49152)
        .running_with("mine", "gpu-c", &[0], |w| w.tenant = 0)
        .pending_with("more", 1, 0, |w| w.tenant = 0)
        .evaluate(&FairShare)
        .expect("runs");
    assert_eq!(
        quota.reason("more"),
        Some("quota used up: tenant strict holds 1 of its 1 guaranteed GPUs and may not borrow")
    );

    let reserve = SnapshotFixture::new()
        .settings(Settings { burst_reserve_gpus: 1, ..settings() })
        .node("gpu-b", 2, "A100", 40960)
        .pending("batch", 1, 0)
        .pending_with("sweep", 1, 0, |w| w.preemptible = true)
        .pending_with("chat", 1, 0, |w| w.class = WorkloadClass::RealtimeInference)
        .evaluate(&FairShare)
        .expect("runs");
    assert_eq!(reserve.placed(), vec!["chat", "sweep"], "real-time first, then preemptible work may use the reserve");
    assert_eq!(
        reserve.reason("batch"),
        Some(
            "held for the burst reserve: 1 GPUs are kept free for real-time inference (1 free now; preemptible work may use them)"
        )
    );
}

#[test]
fn gangs_go_whole_to_the_best_fitting_node_and_what_waits_says_exactly_why() {
    let outcome = SnapshotFixture::new()
        .node("gpu-big", 8, "H100", 81920)
        .node("gpu-half", 4, "H100", 81920)
        .node("gpu-small", 2, "L4", 24576)
        .running("resident", "gpu-big", &[0, 1, 2, 3, 4])
        .pending_with("gang-4", 4, 40960, |w| w.priority = 30)
        .pending_with("pair", 2, 20000, |w| w.priority = 20)
        .pending_with("another-4", 4, 40960, |w| w.priority = 10)
        .pending_with("eight", 8, 1024, |w| w.priority = 5)
        .pending("huge", 16, 1024)
        .evaluate(&FairShare)
        .expect("runs");
    assert_eq!(outcome.placement("gang-4"), Some(("gpu-half", vec![0, 1, 2, 3])));
    assert_eq!(outcome.placement("pair"), Some(("gpu-small", vec![0, 1])));
    assert_eq!(
        outcome.reason("another-4"),
        Some("no ready node has 4 free GPUs with ≥ 40960 MiB; the most on one node is 3 (gpu-big)")
    );
    assert_eq!(
        outcome.reason("eight"),
        Some("no ready node has 8 free GPUs with ≥ 1024 MiB; the most on one node is 3 (gpu-big)")
    );
    assert_eq!(outcome.reason("huge"), Some("no ready node has 16 GPUs with ≥ 1024 MiB, even with all its GPUs free"));
}

#[test]
fn cpu_work_goes_to_cpu_nodes_and_leaves_the_gpus_to_work_that_needs_them() {
    let outcome = SnapshotFixture::new()
        .node("gpu-e", 1, "L4", 24576)
        .cpu_node("cpu-e", 8000, 32768)
        .pending_with("embed", 1, 0, |w| {
            w.class = WorkloadClass::Embeddings;
            w.cpu_capable = true;
            w.cpu_millis = 500;
        })
        .pending_with("etl", 0, 0, |w| w.cpu_millis = 2000)
        .pending_with("big-etl", 0, 0, |w| w.cpu_millis = 16000)
        .pending_with("quantize", 1, 20000, |w| w.class = WorkloadClass::Quantization)
        .evaluate(&FairShare)
        .expect("runs");
    assert_eq!(outcome.placement("embed"), Some(("cpu-e", vec![])));
    assert!(outcome.reason("embed").unwrap().starts_with("CPU-capable: placed on CPU node cpu-e"));
    assert_eq!(outcome.reason("etl"), Some("placed on CPU node cpu-e (5500 mCPU left free there)"));
    // No CPU node has room for big-etl: it takes the spare host CPU of the GPU node, decided after
    // quantize (submitted later) has its GPU and the host CPU that goes with it.
    assert_eq!(outcome.placed(), vec!["embed", "etl", "quantize", "big-etl"]);
    assert_eq!(
        outcome.reason("big-etl"),
        Some(
            "no CPU node has 16000 mCPU and 4096 MiB free; placed on the spare host CPU of gpu-e (47000 mCPU left free there), using none of its GPUs"
        )
    );
    assert_eq!(outcome.placement("quantize"), Some(("gpu-e", vec![0])));
}

#[test]
fn a_container_workload_goes_to_a_node_with_a_container_engine() {
    // The bare node is the tighter fit (2 GPUs, not 4), but it has no container engine.
    let fixture = SnapshotFixture::new()
        .node("bare", 2, "H100", 81920)
        .node_with("engine", 4, "H100", 81920, |n| n.containers = true)
        .cpu_node("cpu-bare", 8000, 32768)
        .node_with("cpu-engine", 0, "", 0, |n| n.containers = true)
        .container_work(1);
    let outcome = fixture.evaluate(&FairShare).expect("runs");
    assert_eq!(outcome.placement("image"), Some(("engine", vec![0])));
    assert_eq!(outcome.placement("image-cpu"), Some(("cpu-engine", vec![])));
    assert_eq!(outcome.placement("plain"), Some(("bare", vec![0])));
    assert_eq!(fixture.problems(&outcome.decisions), vec![]);

    let outcome = SnapshotFixture::new()
        .node("bare", 2, "H100", 81920)
        .pending_with("image", 1, 1024, |w| w.container = true)
        .pending("plain", 1, 1024)
        .evaluate(&FairShare)
        .expect("runs");
    assert_eq!(outcome.reason("image"), Some("no ready node runs containers"));
    assert_eq!(outcome.placed_on("plain"), Some("bare"));
}

#[test]
fn params_weigh_the_history_and_bad_params_fail_with_the_key_named() {
    let fleet = || {
        SnapshotFixture::new()
            .tenant_with("research", |t| t.decayed_gpu_hours = 100.0)
            .tenant_with("product", |t| t.decayed_gpu_hours = 0.0)
            .node("gpu-a", 1, "H100", 81920)
            .pending_with("r", 1, 0, |w| w.tenant = 0)
            .pending_with("p", 1, 0, |w| w.tenant = 1)
    };
    assert_eq!(fleet().evaluate(&FairShare).expect("runs").placed(), vec!["p"]);
    // Without history both stand at 0; the tie goes by table order.
    assert_eq!(fleet().params(r#"{"usage_weight": 0}"#).evaluate(&FairShare).expect("runs").placed(), vec!["r"]);
    match fleet().params(r#"{"usage_weight": -1}"#).evaluate(&FairShare) {
        Err(EvaluationError::Failed { failure, .. }) => {
            assert_eq!(failure.message(), "params.usage_weight: expected a finite number ≥ 0, found -1");
        }
        other => panic!("expected the policy to fail, got {other:?}"),
    }
}

#[test]
fn it_shares_a_large_mixed_fleet_between_all_tenants_and_stays_fast() {
    let fixture = SnapshotFixture::synthetic_fleet(100, 8, 2_000, 7).settings(settings());
    let started = Instant::now();
    let outcome = fixture.evaluate(&FairShare).expect("runs, and the host accepts every decision");
    let elapsed = started.elapsed();
    let placed = outcome.placed();
    assert!(placed.len() > 300, "places work at scale: {}", placed.len());
    // Every pending workload has a decision, each with a reason.
    assert_eq!(outcome.decisions.len(), 2_000);
    assert!(outcome.decisions.iter().all(|d| !d.reason.is_empty()));
    // All 16 tenants get GPUs: none is crowded out.
    let doc = fixture.document();
    let mut gpus_by_tenant = [0u32; 16];
    for name in &placed {
        let w = doc.workloads.iter().find(|w| &w.name == name).expect("placed names a workload");
        gpus_by_tenant[w.tenant as usize] += w.gpu_count;
    }
    assert!(gpus_by_tenant.iter().all(|&g| g > 0), "{gpus_by_tenant:?}");
    // Unoptimised and on a shared machine, the whole round trip (encode, decide, check) is quick.
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
}
