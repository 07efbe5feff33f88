//! GPU sharing, story by story: real control plane and agent processes (simulated GPUs shared by
//! MPS, time-slicing or MIG), real PostgreSQL, the built-in `slo-first` as Wasm, and a hand-written
//! ABI 1.0 policy that knows nothing of fractions.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::time::Duration;

use airtime_tests::{Fleet, eventually};
use serde_json::{Value, json};

const WAIT: Duration = Fleet::WAIT;

/// What the sharing stories ask of a fleet beyond the common steps.
trait SharingSteps {
    /// A command that writes its GPU environment to `name` in the fleet's folder, then waits.
    fn env_probe(&self, name: &str) -> Vec<String>;
    /// What that command wrote, once it has.
    async fn env_of(&self, name: &str) -> String;
    /// The GPU's row in `GET /gpus`.
    async fn gpu(&self, id: &str) -> Value;
}

impl SharingSteps for Fleet {
    fn env_probe(&self, name: &str) -> Vec<String> {
        let file = self.dir.join(name);
        vec!["sh".into(), "-c".into(), format!("env | grep -E '^(CUDA_|AIRTIME_GPU)' > {}; sleep 600", file.display())]
    }

    async fn env_of(&self, name: &str) -> String {
        let file = self.dir.join(name);
        eventually(&format!("{name} wrote its environment"), WAIT, || {
            let file = file.clone();
            async move { Ok(std::fs::read_to_string(&file).ok().filter(|t| !t.is_empty())) }
        })
        .await
        .unwrap()
    }

    async fn gpu(&self, id: &str) -> Value {
        let gpus = self.api.ok("/api/v1/gpus").await.unwrap();
        gpus.as_array().unwrap().iter().find(|g| g["id"] == id).cloned().unwrap()
    }
}

fn quarter(name: &str, command: Vec<String>) -> Value {
    json!({"name": name, "class": "realtime_inference", "command": command,
           "resources": {"gpu_count": 1, "gpu_milli": 250, "gpu_memory_mb": 10240}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_quarter_gpu_inference_workloads_share_one_gpu_and_a_whole_gpu_training_job_goes_elsewhere() {
    let f = Fleet::start(&[("mps-node", &["--simulate-gpus", "2:H100:81920", "--gpu-sharing", "mps"])]).await;
    let mut quarters = Vec::new();
    for i in 0..4 {
        let name = format!("chat-{i}");
        quarters.push(f.submit(quarter(&name, f.env_probe(&name))).await);
    }
    let training = f
        .submit(json!({"name": "train", "class": "training", "command": ["sleep", "600"],
                       "resources": {"gpu_count": 1}}))
        .await;
    let mut shared_gpu = None;
    for id in &quarters {
        let w = f.reaches(id, "running").await;
        assert_eq!(w["resources"]["gpu_milli"], 250, "{w}");
        let gpu = w["gpu_ids"][0].as_str().unwrap().to_owned();
        assert_eq!(shared_gpu.get_or_insert(gpu.clone()), &gpu, "all four quarters share one GPU");
    }
    let shared_gpu = shared_gpu.unwrap();
    let trained = f.reaches(&training, "running").await;
    assert_ne!(trained["gpu_ids"][0], shared_gpu.as_str(), "the whole-GPU job takes the other GPU: {trained}");

    // The shared GPU is held in four quarters, each with its memory slice, shown as MPS.
    let gpu = f.gpu(&shared_gpu).await;
    assert_eq!(gpu["sharing"], "mps", "{gpu}");
    assert_eq!(gpu["held_milli"], 1000, "{gpu}");
    let shares = gpu["shares"].as_array().unwrap();
    assert_eq!(shares.len(), 4, "{gpu}");
    assert!(shares.iter().all(|s| s["milli"] == 250 && s["memory_mb"] == 10240), "{gpu}");

    // Each replica runs with its share of the SMs and its pinned memory.
    let env = f.env_of("chat-0").await;
    assert!(env.contains("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25"), "{env}");
    assert!(env.contains("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=10240M"), "{env}");
    assert!(env.contains("AIRTIME_GPU_MILLI=250"), "{env}");

    // The agent attributes the GPU's busy time to the workloads sharing it.
    eventually("per-share telemetry arrives", WAIT, || {
        let f = &f;
        let id = shared_gpu.clone();
        async move {
            let gpu = f.gpu(&id).await;
            let measured =
                gpu["shares"].as_array().unwrap().iter().all(|s| s["util"].as_f64().is_some_and(|u| u > 0.0));
            Ok(measured.then_some(()))
        }
    })
    .await
    .unwrap();

    // A fifth quarter has no room on the shared GPU and no whole GPU is free: it waits, saying so.
    let fifth = f.submit(quarter("chat-4", vec!["sleep".into(), "600".into()])).await;
    let waiting = f.pending_because(&fifth, "250/1000 of a shared GPU").await;
    println!("fifth quarter: {}", waiting["pending_reason"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_slice_that_does_not_fit_is_refused_with_its_reason_and_a_mig_workload_lands_only_on_its_profile() {
    let f = Fleet::start(&[
        ("sliced", &["--simulate-gpus", "1:A100:81920", "--gpu-sharing", "time-slicing"]),
        (
            "mig-node",
            &[
                "--simulate-gpus",
                "1:H100:81920",
                "--gpu-sharing",
                "mig",
                "--mig-layout",
                "3g.40gb,2g.20gb,1g.10gb,1g.10gb",
            ],
        ),
    ])
    .await;
    let big = f
        .submit(json!({"name": "big-slice", "class": "batch_inference", "command": ["sleep", "600"],
                       "resources": {"gpu_count": 1, "gpu_milli": 300, "gpu_memory_mb": 70000, "gpu_models": ["A100"]}}))
        .await;
    f.reaches(&big, "running").await;
    let gpu = f.api.ok("/api/v1/gpus").await.unwrap();
    let sliced = gpu.as_array().unwrap().iter().find(|g| g["node_name"] == "sliced").unwrap();
    assert_eq!(sliced["sharing"], "time_slicing", "time-slicing is shown as such: {sliced}");

    // 700/1000 of the GPU is free, but only 11,920 MiB of its memory: a 20,000 MiB slice waits.
    let slice = f
        .submit(json!({"name": "slice", "class": "batch_inference", "command": ["sleep", "600"],
                       "resources": {"gpu_count": 1, "gpu_milli": 250, "gpu_memory_mb": 20000, "gpu_models": ["A100"]}}))
        .await;
    let waiting = f.pending_because(&slice, "≥ 20000 MiB unreserved").await;
    println!("slice: {}", waiting["pending_reason"]);

    // The MIG node advertises its instances; a 2g.20gb workload runs on the 2g.20gb instance alone.
    let instances: Vec<Value> =
        gpu.as_array().unwrap().iter().filter(|g| g["node_name"] == "mig-node").cloned().collect();
    let profiles: Vec<&str> = instances.iter().map(|g| g["mig_profile"].as_str().unwrap()).collect();
    assert_eq!(profiles, ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"], "{instances:?}");
    let two_g = f
        .submit(json!({"name": "mig-2g", "class": "quantization", "command": f.env_probe("mig-2g"),
                       "resources": {"gpu_count": 1, "mig_profile": "2G.20GB"}}))
        .await;
    let placed = f.reaches(&two_g, "running").await;
    let instance = f.gpu(placed["gpu_ids"][0].as_str().unwrap()).await;
    assert_eq!((instance["node_name"].as_str(), instance["mig_profile"].as_str()), (Some("mig-node"), Some("2g.20gb")));
    let env = f.env_of("mig-2g").await;
    assert!(env.contains("CUDA_VISIBLE_DEVICES=MIG-SIM-mig-node-0-1"), "{env}");

    // The only 2g.20gb instance is taken: a second one waits, and whole-GPU work never uses MIG.
    let second = f
        .submit(json!({"name": "mig-2g-b", "class": "quantization", "command": ["sleep", "600"],
                       "resources": {"gpu_count": 1, "mig_profile": "2g.20gb"}}))
        .await;
    f.pending_because(&second, "MIG 2g.20gb instance").await;
    let whole = f
        .submit(json!({"name": "whole-h100", "class": "training", "command": ["sleep", "600"],
                       "resources": {"gpu_count": 1, "gpu_models": ["H100"]}}))
        .await;
    let whole = f.pending_because(&whole, "at all").await;
    println!("whole: {}", whole["pending_reason"]);

    // A submission that mixes the two is refused before anything is written.
    let bad = f
        .api
        .post(
            "/api/v1/workloads",
            &json!({"name": "mixed", "class": "evaluation", "command": ["true"],
               "resources": {"gpu_count": 1, "gpu_milli": 500, "mig_profile": "1g.10gb"}}),
        )
        .await
        .unwrap();
    assert_eq!(bad.status, 422, "{}", bad.body);
    assert!(bad.body["error"]["message"].as_str().unwrap().contains("exclusive"), "{}", bad.body);
    let bad = f
        .api
        .post(
            "/api/v1/workloads",
            &json!({"name": "gang-share", "class": "evaluation", "command": ["true"],
               "resources": {"gpu_count": 2, "gpu_milli": 500}}),
        )
        .await
        .unwrap();
    assert_eq!(bad.status, 422, "{}", bad.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_quota_counts_a_quarter_gpu_as_a_quarter() {
    let f = Fleet::start(&[("mps-node", &["--simulate-gpus", "2:H100:81920", "--gpu-sharing", "mps"])]).await;
    f.api
        .created("/api/v1/tenants", &json!({"name": "product", "guaranteed_gpus": 1, "may_borrow": false}))
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..5 {
        let mut body = quarter(&format!("q-{i}"), vec!["sleep".into(), "600".into()]);
        body["tenant"] = json!("product");
        ids.push(f.submit(body).await);
    }
    for id in &ids[..4] {
        f.reaches(id, "running").await;
    }
    // Four quarters are its one guaranteed GPU; the fifth waits on the quota, not on capacity.
    f.pending_because(&ids[4], "holds 1 of its 1 guaranteed GPUs").await;
    let summary = f.api.ok("/api/v1/tenants/summary").await.unwrap();
    let product = summary.as_array().unwrap().iter().find(|t| t["tenant"] == "product").unwrap();
    assert_eq!(product["running_gpus"], 1.0, "{product}");
    assert_eq!(product["pending_gpus"], 0.25, "{product}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abi_1_0_policy_that_knows_nothing_of_fractions_still_runs_and_never_over_commits_a_gpu() {
    let f = Fleet::start(&[("mps-node", &["--simulate-gpus", "1:H100:81920", "--gpu-sharing", "mps"])]).await;
    // A hand-written 1.0 guest: it places the first pending workload on GPU 0, whatever holds it.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/wat/first_pending_on_gpu0.wat");
    let wasm = wat::parse_file(&path).unwrap();
    let uploaded = f.api.post_raw("/api/v1/policies?name=wat-v1", "application/wasm", wasm).await.unwrap();
    assert_eq!(uploaded.status, 201, "{}", uploaded.body);
    let id = uploaded.body["id"].as_str().unwrap();
    f.api.created(&format!("/api/v1/policies/{id}/activate"), &json!({})).await.unwrap();

    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(f.submit(quarter(&format!("q-{i}"), vec!["sleep".into(), "600".into()])).await);
    }
    for id in &ids[..4] {
        f.reaches(id, "running").await;
    }
    // The fifth placement on the full GPU is refused by the host, with the reason as its pending reason.
    let refused = f.pending_because(&ids[4], "0/1000 unshared").await;
    let rejected = refused["decisions"].as_array().unwrap().iter().find(|d| d["kind"] == "rejected");
    assert!(rejected.is_some(), "the refusal is recorded: {refused}");
    let gpus = f.api.ok("/api/v1/gpus").await.unwrap();
    let gpu = &gpus.as_array().unwrap()[0];
    assert_eq!((gpu["held_milli"].as_i64(), gpu["shares"].as_array().unwrap().len()), (Some(1000), 4), "{gpu}");
}

/// Placement by fragmentation weighs the work that typically arrives, and a queue in one cycle is
/// a poor sample of it: the policy's snapshot carries the week's submissions by shape (ABI 1.9's
/// arrivals) — placed or not, ended or not, MIG requests left out, the most frequent first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policys_snapshot_counts_the_weeks_arrivals_by_shape_whatever_became_of_them() {
    let f = Fleet::start(&[("mps-node", &["--simulate-gpus", "2:H100:81920", "--gpu-sharing", "mps"])]).await;
    let sleeper = |name: &str, resources: Value| json!({"name": name, "class": "batch_inference", "command": ["sleep", "600"], "resources": resources});
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(f.submit(quarter(&format!("chat-{i}"), vec!["sleep".into(), "600".into()])).await);
    }
    let whole = json!({"gpu_count": 1, "cpu_millis": 2000});
    ids.push(f.submit(sleeper("one", whole.clone())).await);
    ids.push(f.submit(sleeper("two", whole)).await);
    // Four GPUs fit nowhere on this node: it waits, and still counts as what arrives.
    f.submit(sleeper("too-big", json!({"gpu_count": 4, "cpu_millis": 0, "gpu_models": ["H100"]}))).await;
    let cancelled = f.submit(sleeper("cpu-only", json!({"gpu_count": 0, "cpu_millis": 500}))).await;
    f.api.post(&format!("/api/v1/workloads/{cancelled}/cancel"), &json!({})).await.unwrap();
    // Some start, some wait: the count is of what was asked for.
    f.reaches(&ids[0], "running").await;

    let snapshot = f.api.ok("/api/v1/scheduler/snapshot").await.unwrap();
    let shapes: Vec<(u64, u64, u64, u64, String)> = snapshot["arrivals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let n = |k: &str| a[k].as_u64().unwrap();
            (n("gpu_milli"), n("gpu_count"), n("cpu_millis"), n("count"), a["gpu_models"].as_str().unwrap().to_owned())
        })
        .collect();
    assert_eq!(shapes[0].3, 3, "the quarter shares, the most frequent, first: {shapes:?}");
    assert_eq!((shapes[0].0, shapes[0].1), (250, 1), "{shapes:?}");
    assert_eq!(shapes[1], (1000, 1, 2000, 2, String::new()), "{shapes:?}");
    assert!(shapes.contains(&(1000, 4, 0, 1, "H100".to_owned())), "the waiting gang counts: {shapes:?}");
    assert!(shapes.contains(&(0, 0, 500, 1, String::new())), "the cancelled CPU job counts: {shapes:?}");
    assert_eq!(shapes.len(), 4, "{shapes:?}");
}
