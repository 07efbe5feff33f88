//! The scheduling model, story by story: real control plane and agent processes, real PostgreSQL,
//! the built-in `slo-first` policy running as Wasm. Each test reads like the story it proves.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::path::Path;
use std::time::Duration;

use airtime_tests::{ControlPlane, Fleet, NodeAgent, TestDb, eventually, nodes_ready, workload_reaches};
use serde_json::{Value, json};

const WAIT: Duration = Fleet::WAIT;

/// A fleet with `slo-first` active (the default) and the given priority settings changed.
async fn scenario(agents: &[(&str, &[&str])], priorities: Value) -> Fleet {
    let fleet = Fleet::start(agents).await;
    let api = &fleet.api;
    let mut settings = api.ok("/api/v1/settings/priorities").await.unwrap();
    for (k, v) in priorities.as_object().unwrap() {
        settings[k] = v.clone();
    }
    let put = api.put("/api/v1/settings/priorities", &settings).await.unwrap();
    assert_eq!(put.status, 200, "{}", put.body);
    let policies = api.ok("/api/v1/policies").await.unwrap();
    let slo = policies.as_array().unwrap().iter().find(|p| p["name"] == "slo-first").expect("slo-first is built in");
    assert_eq!(slo["active_version"], slo["versions"][0]["version"], "slo-first is the default: {slo}");
    fleet
}

fn states(w: &Value) -> Vec<String> {
    w["history"].as_array().unwrap().iter().map(|e| e["to_state"].as_str().unwrap().to_owned()).collect()
}

/// A training loop that checkpoints its step on SIGTERM and resumes from it when placed again.
fn checkpointing_trainer(dir: &Path) -> Vec<String> {
    let d = dir.display();
    let script = format!(
        "n=0; if [ -f {d}/ckpt ]; then n=$(cat {d}/ckpt); echo \"resumed from $n\" >> {d}/log; fi; \
         trap 'echo $n > {d}/ckpt; echo \"checkpointed at $n\" >> {d}/log; exit 0' TERM; \
         while [ $n -lt 1000000 ]; do n=$((n+1)); sleep 0.05; done"
    );
    vec!["sh".into(), "-c".into(), script]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_customer_traffic_preempts_training_which_resumes_from_its_checkpoint_after() {
    let s = scenario(&[("gpu-a", &["--simulate-gpus", "2:H100-SXM:81920"])], json!({"grace_period_s": 5})).await;
    let training = s
        .submit(json!({"name": "train-llm", "class": "training", "priority": 10, "preemptible": true,
                       "checkpointable": true, "resources": {"gpu_count": 2}, "command": checkpointing_trainer(&s.dir)}))
        .await;
    s.reaches(&training, "running").await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Customer traffic arrives: a real-time inference replica that needs one of the GPUs.
    let burst = s
        .submit(json!({"name": "chat-replica", "class": "realtime_inference", "priority": 0,
                       "resources": {"gpu_count": 1}, "command": ["sleep", "3"]}))
        .await;
    let running = s.reaches(&burst, "running").await;
    let trained = s.workload(&training).await;
    assert!(
        trained["state"] == "pending" || trained["state"] == "scheduled" || trained["state"] == "running",
        "{trained}"
    );
    let history = states(&trained);
    assert!(history.contains(&"preempting".to_owned()), "training was preempted: {history:?}");
    let preempt = trained["decisions"].as_array().unwrap().iter().find(|d| d["kind"] == "preempt").unwrap();
    assert!(preempt["reason"].as_str().unwrap().contains("chat-replica"), "the cause is named: {preempt}");
    // Within the grace period: the burst started well before SIGKILL would have been needed.
    let log = std::fs::read_to_string(s.dir.join("log")).unwrap();
    assert!(log.contains("checkpointed at"), "the checkpoint signal reached training: {log}");
    println!("burst started: {}", running["started_at"]);

    // The burst ends; training is placed again and resumes from its checkpoint.
    s.reaches(&burst, "succeeded").await;
    eventually("training resumed from its checkpoint", WAIT, || {
        let path = s.dir.join("log");
        async move { Ok(std::fs::read_to_string(&path)?.contains("resumed from").then_some(())) }
    })
    .await
    .unwrap();
    let resumed = s.reaches(&training, "running").await;
    assert_eq!(resumed["attempt"], 2, "{resumed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_training_ends_at_night_its_gpus_go_to_the_queued_batch_job_except_the_burst_reserve() {
    // The night window covers every hour, so the training bonus is in force now.
    let s = scenario(
        &[("gpu-b", &["--simulate-gpus", "4:A100:40960"])],
        json!({"burst_reserve_gpus": 1, "night_training_bonus": 50, "night_start_hour": 0, "night_end_hour": 0}),
    )
    .await;
    let marker = s.dir.join("training-may-end");
    let training = s
        .submit(json!({"name": "night-train", "class": "training", "resources": {"gpu_count": 3},
                       "command": ["sh", "-c", format!("while [ ! -f {} ]; do sleep 0.1; done", marker.display())]}))
        .await;
    s.reaches(&training, "running").await;
    let batch = s
        .submit(json!({"name": "batch-embed-3", "class": "batch_inference", "resources": {"gpu_count": 3},
                       "command": ["sleep", "30"]}))
        .await;
    let small = s
        .submit(json!({"name": "batch-small", "class": "batch_inference", "resources": {"gpu_count": 1},
                       "command": ["sleep", "30"]}))
        .await;
    // While training runs, the one free GPU is the burst reserve: batch work is held for it.
    s.pending_because(&small, "burst reserve").await;

    std::fs::write(&marker, b"done").unwrap();
    s.reaches(&training, "succeeded").await;
    let placed = s.reaches(&batch, "running").await;
    assert_eq!(placed["gpu_ids"].as_array().unwrap().len(), 3);
    // The reserve stays free for real-time inference: the 1-GPU batch job still waits, and says why.
    let held = s.pending_because(&small, "burst reserve").await;
    println!("held: {}", held["pending_reason"]);
    let gpus = s.api.ok("/api/v1/gpus").await.unwrap();
    assert_eq!(gpus.as_array().unwrap().iter().filter(|g| g["workload_id"].is_null()).count(), 1);

    // Customer-facing inference may use the reserve.
    let chat = s
        .submit(json!({"name": "chat", "class": "realtime_inference", "resources": {"gpu_count": 1}, "command": ["sleep", "30"]}))
        .await;
    s.reaches(&chat, "running").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_borrows_idle_gpus_and_they_are_reclaimed_when_the_owner_needs_them() {
    let s = scenario(&[("gpu-c", &["--simulate-gpus", "2:L40S:49152"])], json!({"grace_period_s": 2})).await;
    s.tenant("research", 0).await;
    s.tenant("product", 2).await;
    let mut borrowed = Vec::new();
    for i in 0..2 {
        borrowed.push(
            s.submit(json!({"name": format!("sweep-{i}"), "tenant": "research", "class": "evaluation",
                            "preemptible": true, "resources": {"gpu_count": 1}, "command": ["sleep", "600"]}))
                .await,
        );
    }
    for id in &borrowed {
        s.reaches(id, "running").await;
    }
    let summary = s.api.ok("/api/v1/tenants/summary").await.unwrap();
    let research = summary.as_array().unwrap().iter().find(|t| t["tenant"] == "research").unwrap();
    assert_eq!(research["borrowing_gpus"], 2.0, "{research}");

    // The owner submits work: one borrowed GPU is reclaimed for it.
    let owned = s
        .submit(json!({"name": "product-finetune", "tenant": "product", "class": "fine_tuning",
                       "resources": {"gpu_count": 1}, "command": ["sleep", "600"]}))
        .await;
    s.reaches(&owned, "running").await;
    let mut reclaimed = 0;
    for id in &borrowed {
        let w = s.workload(id).await;
        if states(&w).contains(&"preempting".to_owned()) {
            reclaimed += 1;
            let why = w["decisions"].as_array().unwrap().iter().find(|d| d["kind"] == "preempt").unwrap();
            assert!(why["reason"].as_str().unwrap().contains("reclaim"), "{why}");
            s.pending_because(id, "").await;
        }
    }
    assert_eq!(reclaimed, 1, "exactly one borrowed GPU was reclaimed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eight_gpu_training_job_is_never_placed_partly_nor_starved_by_a_stream_of_one_gpu_jobs() {
    let s = scenario(&[("gpu-d", &["--simulate-gpus", "8:H100-SXM:81920"])], json!({})).await;
    // Small jobs hold some GPUs when the big one arrives.
    let mut small = Vec::new();
    for i in 0..3 {
        small.push(
            s.submit(json!({"name": format!("small-{i}"), "class": "evaluation", "resources": {"gpu_count": 1},
                            "command": ["sleep", "2"]}))
                .await,
        );
    }
    for id in &small {
        s.reaches(id, "running").await;
    }
    let big = s
        .submit(json!({"name": "pretrain-8", "class": "training", "resources": {"gpu_count": 8}, "command": ["sleep", "30"]}))
        .await;
    s.pending_because(&big, "8").await;
    // A stream of 1-GPU jobs keeps arriving; none may take the GPUs the big job waits for.
    let mut stream = Vec::new();
    for i in 0..4 {
        stream.push(
            s.submit(json!({"name": format!("stream-{i}"), "class": "evaluation", "resources": {"gpu_count": 1},
                            "command": ["sleep", "1"]}))
                .await,
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let placed = s.reaches(&big, "running").await;
    assert_eq!(placed["gpu_ids"].as_array().unwrap().len(), 8, "all eight GPUs or none");
    for d in placed["decisions"].as_array().unwrap() {
        if d["kind"] == "place" {
            assert_eq!(d["gpu_ids"].as_array().unwrap().len(), 8, "never placed partly: {d}");
        }
    }
    // The stream waited behind the reservation and says so.
    let waiting = s.workload(&stream[0]).await;
    let reasons: Vec<String> = waiting["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["kind"] == "keep_pending")
        .map(|d| d["reason"].as_str().unwrap().to_owned())
        .collect();
    assert!(reasons.iter().any(|r| r.contains("reserved") && r.contains("pretrain-8")), "{reasons:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_asking_for_its_gpu_model_in_lower_case_is_placed_and_nothing_waits_behind_it_for_ever() {
    // The node reports "H100-SXM"; the gang asks for " h100-sxm": the same model by the SDK's rule
    // (ASCII case and surrounding spaces ignored), which the host's check now applies too.
    let s = scenario(&[("gpu-m", &["--simulate-gpus", "8:H100-SXM:81920"])], json!({})).await;
    let gang = s
        .submit(json!({"name": "pretrain-lower", "class": "training", "command": ["sleep", "30"],
                        "resources": {"gpu_count": 8, "gpu_models": [" h100-sxm"]}}))
        .await;
    let placed = s.reaches(&gang, "running").await;
    assert_eq!(placed["gpu_ids"].as_array().unwrap().len(), 8);
    let refused: Vec<&Value> =
        placed["decisions"].as_array().unwrap().iter().filter(|d| d["kind"] == "rejected").collect();
    assert!(refused.is_empty(), "the host refused what the policy placed: {refused:?}");
    // Stored as asked, trimmed: the model list is parsed once, at submission.
    assert_eq!(placed["resources"]["gpu_models"], json!(["h100-sxm"]), "{placed}");
    // And the small jobs that queued behind it run once it ends (they are not kept waiting for a
    // gang the host refuses for ever).
    s.api.created(&format!("/api/v1/workloads/{gang}/cancel"), &json!({})).await.unwrap();
    for i in 0..4 {
        let small = s
            .submit(json!({"name": format!("after-{i}"), "class": "evaluation", "resources": {"gpu_count": 1},
                            "command": ["sleep", "1"]}))
            .await;
        s.reaches(&small, "running").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpu_capable_embedding_service_lands_on_a_cpu_node_while_a_gpu_only_job_takes_the_gpu() {
    let s = scenario(
        &[
            ("gpu-e", &["--simulate-gpus", "1:L4:24576", "--cost-per-hour", "2.5"]),
            ("cpu-e", &["--cost-per-hour", "0.4"]),
        ],
        json!({}),
    )
    .await;
    let embed = s
        .submit(json!({"name": "embed-svc", "class": "embeddings", "resources": {"gpu_count": 1, "cpu_capable": true,
                       "cpu_millis": 500, "memory_mb": 256}, "command": ["sleep", "30"]}))
        .await;
    let gpu_job = s
        .submit(json!({"name": "quantize-70b", "class": "quantization", "resources": {"gpu_count": 1, "gpu_memory_mb": 20000},
                       "command": ["sleep", "30"]}))
        .await;
    let embed = s.reaches(&embed, "running").await;
    let gpu_job = s.reaches(&gpu_job, "running").await;
    let nodes = s.api.ok("/api/v1/nodes").await.unwrap();
    let name_of = |id: &Value| {
        nodes.as_array().unwrap().iter().find(|n| &n["id"] == id).map(|n| n["name"].as_str().unwrap().to_owned())
    };
    assert_eq!(name_of(&embed["node_id"]).as_deref(), Some("cpu-e"));
    assert!(embed["gpu_ids"].as_array().unwrap().is_empty());
    assert_eq!(name_of(&gpu_job["node_id"]).as_deref(), Some("gpu-e"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_protected_by_minimum_runtime_is_not_preempted_before_it() {
    let s = scenario(
        &[("gpu-f", &["--simulate-gpus", "1:H100-SXM:81920"])],
        json!({"min_runtime_s": 4, "grace_period_s": 2}),
    )
    .await;
    let training = s
        .submit(json!({"name": "young-train", "class": "training", "preemptible": true, "checkpointable": true,
                       "resources": {"gpu_count": 1}, "command": checkpointing_trainer(&s.dir)}))
        .await;
    let running = s.reaches(&training, "running").await;
    let burst = s
        .submit(json!({"name": "chat-burst", "class": "realtime_inference", "resources": {"gpu_count": 1},
                       "command": ["sleep", "30"]}))
        .await;
    // Until its minimum runtime is over, training keeps its GPU and the burst says why it waits.
    let waiting = s.pending_because(&burst, "minimum runtime").await;
    println!("burst waits: {}", waiting["pending_reason"]);
    assert_eq!(s.workload(&training).await["state"], "running");

    let placed = s.reaches(&burst, "running").await;
    let trained = s.workload(&training).await;
    let preempted_at = trained["history"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["to_state"] == "preempting")
        .map(|e| e["at"].as_str().unwrap().to_owned())
        .expect("preempted after its minimum runtime");
    let ran = chrono::DateTime::parse_from_rfc3339(&preempted_at).unwrap()
        - chrono::DateTime::parse_from_rfc3339(running["started_at"].as_str().unwrap()).unwrap();
    assert!(ran.num_milliseconds() >= 4000, "preempted after {} ms, before its 4 s minimum", ran.num_milliseconds());
    println!("burst placed: {}", placed["started_at"]);
}

/// A burst of submissions is decided together: the loop gathers the events that follow the first
/// for its batching window, so twenty-four submissions in under a second cost a cycle or two, not one
/// each. On a loaded machine the stream itself can last longer than a window; then each further
/// window the stream spans may cost one more cycle, and still never one per submission.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_of_submissions_is_decided_in_a_cycle_or_two_not_one_each() {
    let window = Duration::from_millis(900);
    let db = TestDb::create().await.unwrap();
    let batch_ms = window.as_millis().to_string();
    let cp =
        ControlPlane::start(&db, &["--tick-ms", "5000", "--leader-lease-ms", "15000", "--cycle-batch-ms", &batch_ms])
            .await
            .unwrap();
    let api = cp.api();
    let _agent = NodeAgent::start(&cp, "cpu-1", &[]).await.unwrap();
    nodes_ready(&api, 1).await.unwrap();

    // A first workload, so the policy is compiled and the loop warm before the stream.
    let body = json!({"name": "warm-up", "class": "evaluation", "command": ["sleep", "300"],
                      "resources": {"gpu_count": 0, "cpu_millis": 10, "memory_mb": 16}});
    let first = api.created("/api/v1/workloads", &body).await.unwrap()["id"].as_str().unwrap().to_owned();
    workload_reaches(&api, &first, "running", WAIT).await.unwrap();
    let warm = api.ok("/api/v1/decisions?kind=place").await.unwrap()[0]["cycle_id"].as_i64().unwrap();

    // One every 10 ms or so, as a pipeline submitting an evaluation sweep would: each is an event.
    let mut ids = Vec::new();
    let stream = std::time::Instant::now();
    for i in 0..24 {
        let body = json!({"name": format!("eval-{i}"), "class": "evaluation", "command": ["sleep", "300"],
                          "resources": {"gpu_count": 0, "cpu_millis": 10, "memory_mb": 16}});
        ids.push(api.created("/api/v1/workloads", &body).await.unwrap()["id"].as_str().unwrap().to_owned());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let span = stream.elapsed();
    for id in &ids {
        workload_reaches(&api, id, "running", WAIT).await.unwrap();
    }
    let decisions = api.ok("/api/v1/decisions?kind=place&limit=1000").await.unwrap();
    let cycles: std::collections::BTreeSet<i64> =
        decisions.as_array().unwrap().iter().map(|d| d["cycle_id"].as_i64().unwrap()).filter(|&c| c > warm).collect();
    assert_eq!(decisions.as_array().unwrap().len(), 25, "{decisions}");
    // One cycle for the first window, one for a tick or the events that came during the cycle, and
    // one per further window the stream lasted (none when it fits in one, as it does unloaded).
    let allowed = 2 + (span.as_millis() / window.as_millis()) as usize;
    println!("24 submissions over {} ms placed in {} cycles (at most {allowed})", span.as_millis(), cycles.len());
    assert!(
        cycles.len() <= allowed && cycles.len() < ids.len() / 4,
        "24 submissions over {} ms placed in {} cycles: {cycles:?}",
        span.as_millis(),
        cycles.len()
    );
}
