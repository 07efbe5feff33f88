//! The helpers policy authors lean on: snapshot views, the plan, the decision checks, and the
//! native test harness itself.

use airtime_policy_sdk::abi::decode_snapshot;
use airtime_policy_sdk::check::check_decisions;
use airtime_policy_sdk::prelude::*;
use airtime_policy_sdk::testing::{EvaluationError, SnapshotFixture};

fn fleet() -> SnapshotFixture {
    SnapshotFixture::new()
        .node("n1", 4, "H100", 81920)
        .node_with("n2", 2, "A100", 40960, |n| n.state = NodeState::Draining)
        .cpu_node("cpu", 32_000, 65_536)
        .gpu("n1", 1, |g| g.memory_used_mb = 60_000)
        .running("serving", "n1", &[0])
        .pending_with("low", 1, 30_000, |w| w.priority = 1)
        .pending_with("high-late", 1, 30_000, |w| w.priority = 5)
        .pending_with("high-early", 2, 30_000, |w| {
            w.priority = 5;
            w.submitted_ms = 0;
            w.gpu_models = " a100 , H200 ".into();
        })
}

#[test]
fn views_answer_the_usual_questions() {
    let bytes = fleet().encode();
    let s = decode_snapshot(&bytes).expect("valid");
    let free: Vec<u32> = s.free_gpus(0).map(|(i, _)| i).collect();
    assert_eq!(free, vec![1, 2, 3], "GPU 0 is held by `serving`");
    assert_eq!(s.node_gpus(1).count(), 2);
    assert_eq!(s.node_gpus(99).count(), 0, "an unknown node has no GPUs, no panic");
    assert_eq!(s.held_gpus(0).map(|(i, _)| i).collect::<Vec<_>>(), vec![0]);
    assert_eq!(s.ready_nodes().map(|(_, n)| n.name).collect::<Vec<_>>(), vec!["n1", "cpu"]);
    assert_eq!(s.free_gpu_total(), 3, "n2 is draining");

    let order: Vec<&str> = s.pending_by_priority().into_iter().map(|(_, w)| w.name).collect();
    assert_eq!(order, vec!["high-early", "high-late", "low"]);

    let (_, low) = s.pending().find(|(_, w)| w.name == "low").expect("low");
    let (_, early) = s.pending().find(|(_, w)| w.name == "high-early").expect("early");
    assert!(s.gpus[2].fits(low));
    assert!(!s.gpus[1].fits(low), "60000 of 81920 MiB in use leaves 21920 < 30000");
    assert!(!s.gpus[2].fits(early), "model H100 is not in ' a100 , H200 '");
    assert!(s.gpus[4].fits(early), "A100 matches 'a100' ignoring case and spaces");
    assert_eq!(early.allowed_models().collect::<Vec<_>>(), vec!["a100", "H200"]);
    assert_eq!(early.gpu_need().describe("free"), "2 free GPUs with ≥ 30000 MiB (a100 or H200)");
    assert_eq!(low.gpu_need().describe(""), "1 GPU with ≥ 30000 MiB");
}

#[test]
fn the_night_bonus_the_host_resolved_lifts_training_and_fine_tuning_only() {
    let fixture = |bonus| {
        SnapshotFixture::new()
            .settings(Settings { night_training_bonus: bonus, ..Settings::default() })
            .pending_with("train", 1, 1, |w| {
                w.class = WorkloadClass::Training;
                w.priority = 10;
            })
            .pending_with("tune", 1, 1, |w| {
                w.class = WorkloadClass::FineTuning;
                w.priority = 10;
            })
            .pending_with("serve", 1, 1, |w| {
                w.class = WorkloadClass::RealtimeInference;
                w.priority = 10;
            })
            .encode()
    };
    for (bonus, training) in [(50, 60), (0, 10), (-5, 5)] {
        let bytes = fixture(bonus);
        let s = decode_snapshot(&bytes).expect("valid");
        assert_eq!(s.effective_priority(&s.workloads[0]), training);
        assert_eq!(s.effective_priority(&s.workloads[1]), training);
        assert_eq!(s.effective_priority(&s.workloads[2]), 10, "inference gets no night bonus");
    }
    let day = 1_700_006_400_000 / 86_400_000 * 86_400_000;
    for (hour, night) in [(21, false), (22, true), (3, true), (6, false)] {
        let bytes = SnapshotFixture::new().now_ms(day + hour * 3_600_000).encode();
        let s = decode_snapshot(&bytes).expect("valid");
        assert_eq!((s.hour_utc() as u64, s.is_night_utc()), (hour, night));
    }
}

#[test]
fn plan_refuses_what_is_taken_and_tracks_cpu() {
    let bytes = fleet().pending("cpu-job", 0, 0).encode();
    let s = decode_snapshot(&bytes).expect("valid");
    let mut plan = Plan::new(&s);
    assert_eq!(plan.free_gpu_total(), 3);
    assert_eq!(
        plan.place(1, 0, vec![0], "x").expect_err("held").to_string(),
        "cannot place workload 1 (low): GPU 0 (n1 device 0) is already taken"
    );
    assert_eq!(
        plan.place(1, 0, vec![4], "x").expect_err("other node").to_string(),
        "cannot place workload 1 (low): GPU 4 is on node 1, not n1"
    );
    assert_eq!(
        plan.place(1, 0, vec![2, 2], "x").expect_err("twice").to_string(),
        "cannot place workload 1 (low): GPU 2 is listed twice"
    );
    assert_eq!(
        plan.place(1, 7, vec![2], "x").expect_err("no node").to_string(),
        "cannot place workload 1 (low): no node 7 (the snapshot has 3)"
    );
    plan.place(1, 0, vec![2], "ok").expect("free GPU");
    assert_eq!((plan.free_gpu_count(0), plan.free_gpu_total()), (2, 2));
    assert!(!plan.is_gpu_free(2));
    assert_eq!(
        plan.keep_pending(1, "x").expect_err("decided").to_string(),
        "cannot keep pending workload 1 (low): it already has a decision"
    );
    // Every placement takes CPU and memory (1000 mCPU, 4096 MiB by default in fixtures).
    assert_eq!((plan.cpu_free(0), plan.memory_free(0)), (62_000, 516_096), "`serving` and `low` take theirs");
    plan.place(4, 2, vec![], "cpu").expect("room");
    assert_eq!((plan.cpu_free(2), plan.memory_free(2)), (31_000, 61_440));
    assert_eq!(
        plan.preempt(0, "x").expect_err("not preemptible").to_string(),
        "cannot preempt workload 0 (serving): it is not preemptible"
    );
    assert_eq!(plan.decisions().len(), 2);
    assert!(check_decisions(&s, plan.decisions()).is_empty());
}

#[test]
fn check_finds_every_kind_of_problem() {
    let bytes = fleet().pending_with("hog", 0, 0, |w| w.cpu_millis = 40_000).encode();
    let s = decode_snapshot(&bytes).expect("valid");
    let problems = |decisions: &[Decision<'_>]| -> Vec<String> {
        check_decisions(&s, decisions).iter().map(ToString::to_string).collect()
    };
    assert_eq!(
        problems(&[
            Decision::place(1, 0, vec![2], "ok"),
            Decision::place(2, 0, vec![2], "GPU taken by decision 0"),
            Decision::place(1, 0, vec![3], "decided twice"),
            Decision::place(3, 1, vec![4, 5], "draining node"),
            Decision::preempt(1, "decided already"),
            Decision::keep_pending(0, "running, not pending"),
            Decision::place(9, 0, vec![], "no such workload"),
            Decision::place(3, 0, vec![0, 2], "claimed by decision 3, though refused there"),
        ]),
        vec![
            "decision 1 (workload 2): place: GPU 2 (n1 device 2) is taken by an earlier decision",
            "decision 2 (workload 1): workload 1 (low) already has a decision",
            "decision 3 (workload 3): place: node n2 is draining",
            "decision 4 (workload 1): workload 1 (low) already has a decision",
            "decision 5 (workload 0): keep pending: workload serving is running, not pending",
            "decision 6 (workload 9): no workload 9 (the snapshot has 5)",
            "decision 7 (workload 3): workload 3 (high-early) already has a decision",
        ]
    );
    assert_eq!(
        problems(&[
            Decision::place(3, 0, vec![2], "count"),
            Decision::place(2, 0, vec![], "gpu workload on CPU"),
            Decision::preempt(0, "not preemptible"),
            Decision::place(1, 0, vec![1], "too little free memory on device 1"),
            Decision::place(4, 2, vec![], "more CPU than the node has"),
        ]),
        vec![
            "decision 0 (workload 3): place: workload high-early needs 2 GPUs, 1 were given",
            "decision 1 (workload 2): place: workload high-late needs 1 GPUs and cannot run on CPU, but no GPU was given",
            "decision 2 (workload 0): preempt: workload serving is not preemptible",
            "decision 3 (workload 1): place: GPU 1 (n1 device 1) has 21920 MiB free; workload low needs 30000 MiB on each GPU",
            "decision 4 (workload 4): place: node cpu has 32000 mCPU and 65536 MiB free; workload hog needs 40000 mCPU and 4096 MiB",
        ]
    );
    assert_eq!(
        problems(&[Decision::place(3, 0, vec![2, 3], "model")]),
        vec!["decision 0 (workload 3): place: GPU 2 (n1 device 2) is a H100; workload high-early allows  a100 , H200 "]
    );
}

struct Greedy;

impl Policy for Greedy {
    /// Places every pending workload on GPU 2 of node 0: wrong from the second one on.
    fn evaluate<'s>(&self, s: &Snapshot<'s>, ctx: &mut Context<'s>) -> Result<Vec<Decision<'s>>, Failure> {
        ctx.warn("about to misbehave");
        if ctx.param_or("fail", false)? {
            return Err(Failure::new("asked to fail"));
        }
        Ok(s.pending().map(|(i, _)| Decision::place(i, 0, vec![2], "greedy")).collect())
    }
}

#[test]
fn the_harness_refuses_what_the_host_would_refuse_and_reports_failures_with_logs() {
    let error = fleet().evaluate(&Greedy).expect_err("GPU 1 placed twice");
    let EvaluationError::Refused { problems, logs } = &error else { panic!("{error}") };
    assert_eq!(problems.len(), 2);
    assert_eq!(logs[0].message, "about to misbehave");
    assert!(error.to_string().starts_with("the host would refuse 2 decisions:\n  decision 1"), "{error}");

    let error = fleet().params(r#"{"fail": true}"#).evaluate(&Greedy).expect_err("fails");
    assert_eq!(error.to_string(), "the policy failed: asked to fail");
    let error = fleet().params(r#"{"fail": "yes"}"#).evaluate(&Greedy).expect_err("bad param");
    assert_eq!(error.to_string(), "the policy failed: params.fail: expected true or false, found the string \"yes\"");
}

#[test]
fn synthetic_fleets_are_valid_and_repeatable() {
    let a = SnapshotFixture::synthetic_fleet(10, 8, 100, 42).encode();
    let b = SnapshotFixture::synthetic_fleet(10, 8, 100, 42).encode();
    assert_eq!(a, b);
    let s = decode_snapshot(&a).expect("valid");
    assert_eq!((s.nodes.len(), s.gpus.len(), s.workloads.len(), s.tenants.len()), (10, 80, 100, 16));
}

/// ABI 1.3: services built by the fixture, read through the views, and a policy that places a
/// service's replicas its own way (CPU replicas on the CPU node, GPU replicas on the GPUs) with the
/// host's checks passing, and the rest kept pending.
#[test]
fn services_and_their_replicas_are_visible_and_placed_like_any_workload() {
    struct ReplicasFirst;
    impl Policy for ReplicasFirst {
        fn evaluate<'s>(&self, s: &Snapshot<'s>, _: &mut Context<'s>) -> Result<Vec<Decision<'s>>, Failure> {
            let mut plan = Plan::new(s);
            // Replicas of the services furthest from their demand first, then the rest.
            let mut order: Vec<(u32, &Workload<'s>)> = s.pending().collect();
            order.sort_by(|(_, a), (_, b)| {
                let unserved = |w: &Workload<'_>| s.service_of(w).map_or(0.0, Service::unserved_demand);
                unserved(b).total_cmp(&unserved(a))
            });
            for (i, w) in order {
                // A CPU replica goes to a node without GPUs, anything else to one with GPUs.
                let cpu = w.replica_variant == ReplicaVariant::Cpu;
                let nodes: Vec<u32> = s.ready_nodes().filter(|(_, n)| n.has_gpus() != cpu).map(|(n, _)| n).collect();
                match plan.first_fit(i, nodes) {
                    Some((node, gpus)) => {
                        let reason =
                            s.service_of(w).map_or("first fit".to_owned(), |svc| format!("replica of {}", svc.name));
                        plan.place(i, node, gpus, reason).map_err(|e| Failure::new(e.to_string()))?;
                    }
                    None => plan.keep_pending(i, "no room").map_err(|e| Failure::new(e.to_string()))?,
                }
            }
            Ok(plan.into_decisions())
        }
    }

    let fixture = SnapshotFixture::new()
        .node("n1", 2, "H100", 81920)
        .cpu_node("cpu", 8_000, 32_768)
        .service_with("chat", |s| {
            s.capacity = 15.0;
            s.cpu_capacity = 5.0;
            s.has_cpu_variant = true;
            s.demand = 40.0;
            s.latest = 38.0;
            s.min_replicas = 1;
            s.max_replicas = 8;
            s.desired_gpu = 2;
            s.desired_cpu = 1;
        })
        .service("search", 10.0, 1, 4)
        .service_tenant("search", "acme")
        .running("chat-0", "n1", &[0])
        .replica_of("chat-0", "chat", ReplicaVariant::Gpu)
        .pending("chat-1", 1, 1024)
        .replica_of("chat-1", "chat", ReplicaVariant::Gpu)
        .pending("chat-cpu", 0, 0)
        .replica_of("chat-cpu", "chat", ReplicaVariant::Cpu)
        .pending("job", 1, 1024)
        .pending("search-0", 1, 1024)
        .replica_of("search-0", "search", ReplicaVariant::Gpu);

    let bytes = fixture.encode();
    let s = decode_snapshot(&bytes).expect("valid");
    assert_eq!(s.services.len(), 2);
    let chat = s.service(0).expect("chat");
    assert_eq!((chat.placed_gpu, chat.pending_gpu, chat.pending_cpu), (1, 1, 1), "the fixture counts replicas");
    assert_eq!((chat.desired_replicas(), chat.placed_replicas(), chat.pending_replicas()), (3, 1, 2));
    assert_eq!((chat.placed_capacity(), chat.unserved_demand()), (15.0, 25.0));
    assert_eq!(chat.capacity_of(ReplicaVariant::Cpu), 5.0);
    let replicas: Vec<&str> = s.replicas(0).map(|(_, w)| w.name).collect();
    assert_eq!(replicas, ["chat-0", "chat-1", "chat-cpu"]);
    let search = s.service(1).expect("search");
    assert_eq!((search.name, s.tenant(search.tenant).map(|t| t.name)), ("search", Some("acme")));
    let job = s.workloads.iter().find(|w| w.name == "job").expect("job");
    assert!(!job.is_replica() && s.service_of(job).is_none());
    let search_0 = s.workloads.iter().find(|w| w.name == "search-0").expect("replica");
    assert_eq!((search_0.tenant, search_0.class), (search.tenant, WorkloadClass::RealtimeInference));
    assert!(s.replicas(7).next().is_none() && s.service(7).is_none());

    let outcome = fixture.evaluate(&ReplicasFirst).expect("the host accepts the placements");
    assert_eq!(outcome.placement("chat-1"), Some(("n1", vec![1])));
    assert_eq!(outcome.placement("chat-cpu"), Some(("cpu", vec![])));
    assert_eq!(outcome.reason("chat-cpu"), Some("replica of chat"));
    assert!(outcome.is_kept_pending("job") && outcome.is_kept_pending("search-0"), "n1's GPUs are taken");
}
