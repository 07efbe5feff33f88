//! What-if in the product, as a platform admin uses it: after an hour of real work, ask what
//! another policy would have made of it, watch the run's progress, read both score sets side by
//! side — and find them to be exactly what the simulator says for the same history. Real control
//! plane and agent processes (simulated GPUs), real PostgreSQL, the built-in policies as Wasm, the
//! real `airtime-sim` binary.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::time::Duration;

use airtime_tests::{bin, eventually, one_node_fleet, workload_reaches};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_platform_admin_replays_the_last_hour_with_fair_share_and_gets_the_simulators_scores() {
    let (_db, cp, _agent) = one_node_fleet("gpu-node", &["--simulate-gpus", "2:H100:81920"]).await.unwrap();
    let api = cp.api();

    // An hour's work, in miniature: a gang of two, two single-GPU jobs and a CPU job.
    let mut ids = Vec::new();
    for (name, class, gpus, cmd) in [
        ("gang", "training", 2, "sleep 2"),
        ("eval-a", "evaluation", 1, "sleep 1"),
        ("eval-b", "evaluation", 1, "sleep 1"),
        ("tokenise", "batch_inference", 0, "true"),
    ] {
        let w = api
            .created(
                "/api/v1/workloads",
                &json!({"name": name, "class": class, "command": ["sh", "-c", cmd],
                        "resources": {"gpu_count": gpus, "cpu_millis": 100}, "expected_duration_s": 2}),
            )
            .await
            .unwrap();
        ids.push(w["id"].as_str().unwrap().to_owned());
    }
    for id in &ids {
        workload_reaches(&api, id, "succeeded", WAIT).await.unwrap();
    }

    // What would fair-share have done with it?
    let policies = api.ok("/api/v1/policies").await.unwrap();
    let fair_share = policies.as_array().unwrap().iter().find(|p| p["name"] == "fair-share").unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let bad = api.post(&format!("/api/v1/policies/{fair_share}/what-if"), &json!({"hours": 0})).await.unwrap();
    assert_eq!(bad.status, 422, "{}", bad.body);
    assert!(bad.body["error"]["message"].as_str().unwrap().contains("between 1 and 168"), "{}", bad.body);
    let queued = api.post(&format!("/api/v1/policies/{fair_share}/what-if"), &json!({"hours": 1})).await.unwrap();
    assert_eq!(queued.status, 202, "{}", queued.body);
    let run_id = queued.body["id"].as_str().unwrap().to_owned();
    assert!(matches!(queued.body["state"].as_str(), Some("queued" | "running")), "{}", queued.body);

    let run = eventually("the what-if run to finish", WAIT, || {
        let (api, path) = (api.clone(), format!("/api/v1/what-if/{run_id}"));
        async move {
            let run = api.ok(&path).await?;
            Ok(matches!(run["state"].as_str(), Some("succeeded" | "failed")).then_some(run))
        }
    })
    .await
    .unwrap();
    assert_eq!(run["state"], "succeeded", "{run}");
    assert_eq!(run["progress"], 1.0, "{run}");
    let result = &run["result"];
    assert_eq!(result["workloads"], 4, "every workload of the hour is replayed: {result}");
    assert_eq!(result["active"]["policy"], "slo-first", "against the active policy");
    assert_eq!(result["candidate"]["policy"], "fair-share");
    for side in ["active", "candidate"] {
        assert_eq!(result[side]["completed_workloads"], 4, "{side}: {}", result[side]);
    }

    // The same history through the simulator's own command gives the same scores.
    let inputs = api.ok(&format!("/api/v1/what-if/{run_id}/inputs")).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fleet = dir.path().join("fleet.json");
    let trace = dir.path().join("trace.jsonl");
    let out = dir.path().join("scores.json");
    std::fs::write(&fleet, serde_json::to_string_pretty(&inputs["fleet"]).unwrap()).unwrap();
    std::fs::write(&trace, inputs["trace"].as_str().unwrap()).unwrap();
    let config = &inputs["config"];
    let arg = |k: &str| config[k].as_u64().unwrap().to_string();
    let status = std::process::Command::new(bin("airtime-sim"))
        .args(["run", "--fleet", fleet.to_str().unwrap(), "--trace", trace.to_str().unwrap()])
        .args(["--policy", "slo-first", "--policy", "fair-share"])
        .args(["--min-cycle-interval-s", &arg("min_cycle_interval_s"), "--window-s", &arg("window_s")])
        .args(["--until-s", &arg("until_s"), "--seeds", &arg("seed"), "--json", out.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "airtime-sim run failed");
    let sim: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    for (side, policy) in [("active", "slo-first"), ("candidate", "fair-share")] {
        let replayed = &result[side];
        let simulated = sim["runs"].as_array().unwrap().iter().find(|r| r["policy"] == policy).unwrap();
        for score in [
            "owned_gpu_hours",
            "allocated_gpu_hours",
            "busy_gpu_hours",
            "idle_gpu_hours",
            "completed_gpu_hours",
            "completed_workloads",
            "preemptions",
            "cycles",
            "decisions",
            "refused",
            "queue_delay",
            "tenants",
        ] {
            assert_eq!(replayed[score], simulated[score], "{side} ({policy}): {score}");
        }
    }
}
