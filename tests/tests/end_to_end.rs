//! A workload submitted over REST is placed by a Wasm policy and run by a node agent: real
//! processes, real PostgreSQL, the built-in policy compiled to Wasm.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::time::Duration;

use airtime_tests::{NodeAgent, fresh_control_plane, nodes_ready, one_node_fleet, workload_reaches};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

fn scratch_file(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("airtime-e2e-{tag}-{}", uuid::Uuid::new_v4().simple()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submitted_workload_is_placed_by_the_wasm_policy_run_by_the_agent_and_its_exit_recorded() {
    let (_db, cp) = fresh_control_plane(&[]).await.unwrap();
    let api = cp.api();
    let _agent = NodeAgent::start(&cp, "sim-gpu-1", &["--simulate-gpus", "2:H100-SXM:81920", "--cost-per-hour", "8.5"])
        .await
        .unwrap();

    // The node joins with its simulated GPUs, marked as simulated.
    let nodes = nodes_ready(&api, 1).await.unwrap();
    let node = &nodes[0];
    assert_eq!(node["name"], "sim-gpu-1");
    assert_eq!(node["simulated"], true);
    assert_eq!(node["gpus"].as_array().unwrap().len(), 2);
    assert!(node["gpus"].as_array().unwrap().iter().all(|g| g["simulated"] == true && g["model"] == "H100-SXM"));
    assert!(node["cpu_millis"].as_i64().unwrap() > 0, "real host CPU is reported: {node}");

    // A short real command that records what the agent gave it.
    let out = scratch_file("env");
    let script =
        format!("echo \"$CUDA_VISIBLE_DEVICES $AIRTIME_ATTEMPT\" > {}; date +%s%N >> {}", out.display(), out.display());
    let submitted = api
        .created(
            "/api/v1/workloads",
            &json!({
                "name": "eval-small",
                "class": "evaluation",
                "priority": 10,
                "resources": {"gpu_count": 1, "gpu_memory_mb": 20000, "cpu_millis": 100, "memory_mb": 64},
                "command": ["sh", "-c", script],
            }),
        )
        .await
        .unwrap();
    assert_eq!(submitted["state"], "pending");
    let id = submitted["id"].as_str().unwrap().to_owned();

    let done = workload_reaches(&api, &id, "succeeded", WAIT).await.unwrap();
    assert_eq!(done["exit_code"], 0);

    // It ran on a simulated GPU, with CUDA_VISIBLE_DEVICES set to that GPU and the attempt named.
    let written = std::fs::read_to_string(&out).unwrap();
    let mut lines = written.lines();
    let env_line = lines.next().unwrap();
    assert!(env_line == "0 1" || env_line == "1 1", "CUDA_VISIBLE_DEVICES and attempt: {env_line:?}");
    let started_ns: i64 = lines.next().unwrap().trim().parse().unwrap();
    let _ = std::fs::remove_file(&out);

    // The state history tells the story, in order.
    let states: Vec<&str> =
        done["history"].as_array().unwrap().iter().map(|e| e["to_state"].as_str().unwrap()).collect();
    assert_eq!(states, ["pending", "scheduled", "running", "succeeded"], "{}", done["history"]);

    // The decision is recorded with the policy version and the reason it gave.
    let decisions = done["decisions"].as_array().unwrap();
    let place = decisions.iter().find(|d| d["kind"] == "place").expect("a place decision");
    assert!(place["policy_name"].as_str().unwrap().starts_with("slo-first v"), "{place}");
    assert!(!place["reason"].as_str().unwrap().is_empty(), "{place}");
    assert_eq!(place["node_name"], "sim-gpu-1");
    assert_eq!(place["gpu_ids"].as_array().unwrap().len(), 1);

    // The same decision over the decisions API.
    let listed = api.ok(&format!("/api/v1/decisions?workload_id={id}")).await.unwrap();
    assert!(listed.as_array().unwrap().iter().any(|d| d["id"] == place["id"]));

    // Decision to process start, measured: decided_at (commit time upper bound) to the child's clock.
    let decided_ns = chrono_ns(place["decided_at"].as_str().unwrap());
    let latency_ms = (started_ns - decided_ns) as f64 / 1e6;
    println!("decision → process start: {latency_ms:.1} ms");
    assert!(latency_ms < 1000.0, "decision to process start took {latency_ms:.1} ms");

    // The GPU is free again and the workload is listed by state.
    let gpus = api.ok("/api/v1/gpus").await.unwrap();
    assert!(gpus.as_array().unwrap().iter().all(|g| g["workload_id"].is_null()), "{gpus}");
    let succeeded = api.ok("/api/v1/workloads?state=succeeded").await.unwrap();
    assert_eq!(succeeded.as_array().unwrap().len(), 1);

    cp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_command_is_recorded_failed_and_a_cancelled_one_is_stopped() {
    let (_db, cp, _agent) = one_node_fleet("sim-gpu-2", &["--simulate-gpus", "1:A100:40960"]).await.unwrap();
    let api = cp.api();

    let failing = api
        .created(
            "/api/v1/workloads",
            &json!({"name": "broken", "class": "batch_inference", "command": ["sh", "-c", "exit 3"],
                    "resources": {"gpu_count": 1}}),
        )
        .await
        .unwrap();
    let failed = workload_reaches(&api, failing["id"].as_str().unwrap(), "failed", WAIT).await.unwrap();
    assert_eq!(failed["exit_code"], 3);
    assert!(failed["message"].as_str().unwrap().contains("code 3"), "{failed}");

    // A program that does not exist fails to start, and says why.
    let missing = api
        .created(
            "/api/v1/workloads",
            &json!({"name": "typo", "class": "evaluation", "command": ["/no/such/program"],
                    "resources": {"cpu_millis": 100}}),
        )
        .await
        .unwrap();
    let failed = workload_reaches(&api, missing["id"].as_str().unwrap(), "failed", WAIT).await.unwrap();
    assert!(failed["message"].as_str().unwrap().contains("/no/such/program"), "the agent's reason: {failed}");
    let last = failed["history"].as_array().unwrap().last().unwrap();
    assert!(last["detail"].as_str().unwrap().starts_with("failed to start"), "{last}");

    // A long job is cancelled: SIGTERM reaches it and the GPU comes free.
    let long = api
        .created(
            "/api/v1/workloads",
            &json!({"name": "long-train", "class": "training", "command": ["sleep", "600"],
                    "resources": {"gpu_count": 1}}),
        )
        .await
        .unwrap();
    let id = long["id"].as_str().unwrap();
    workload_reaches(&api, id, "running", WAIT).await.unwrap();
    let asked = std::time::Instant::now();
    let cancel = api.post(&format!("/api/v1/workloads/{id}/cancel"), &Value::Null).await.unwrap();
    assert_eq!(cancel.status, 202, "{}", cancel.body);
    let cancelled = workload_reaches(&api, id, "cancelled", WAIT).await.unwrap();
    // SIGTERM itself ended it, not SIGKILL at the end of the 30 s grace period (a workload that
    // inherited a blocked SIGTERM from its tether once took the whole grace period).
    assert!(asked.elapsed() < std::time::Duration::from_secs(10), "cancelled after {:?}", asked.elapsed());
    let states: Vec<&str> =
        cancelled["history"].as_array().unwrap().iter().map(|e| e["to_state"].as_str().unwrap()).collect();
    assert_eq!(states, ["pending", "scheduled", "running", "cancelling", "cancelled"]);

    // Cancelling a finished workload is a conflict, with the error shape.
    let again = api.post(&format!("/api/v1/workloads/{id}/cancel"), &Value::Null).await.unwrap();
    assert_eq!(again.status, 409);
    assert_eq!(again.body["error"]["code"], "already_finished");
    cp.stop().await;
}

fn chrono_ns(rfc3339: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(rfc3339).unwrap().timestamp_nanos_opt().unwrap()
}
