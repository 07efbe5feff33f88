//! Why work waits and what a settings change would do, before anyone saves it: a pending workload's
//! place in the queue and what it is short of, and the priority preview — real control plane, agent
//! and PostgreSQL, the built-in platform policy.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use airtime_tests::{Api, eventually, one_node_fleet, workload_reaches};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

async fn submit(api: &Api, body: Value) -> String {
    api.created("/api/v1/workloads", &body).await.unwrap()["id"].as_str().unwrap().to_owned()
}

fn job(name: &str, class: &str, gpus: u32, priority: i32) -> Value {
    json!({"name": name, "class": class, "priority": priority, "command": ["sleep", "300"], "preemptible": true,
           "checkpointable": true, "resources": {"gpu_count": gpus, "cpu_millis": 10}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_workload_knows_its_place_in_the_queue_and_what_it_is_short_of() {
    let (_db, cp, _agent) = one_node_fleet("gpu-1", &["--simulate-gpus", "2:H100:81920"]).await.unwrap();
    let api = cp.api();

    // Two GPUs, both busy; then a gang of four, and two single-GPU jobs, the later one urgent.
    let running = submit(&api, job("train", "training", 2, 0)).await;
    workload_reaches(&api, &running, "running", WAIT).await.unwrap();
    let gang = submit(&api, job("gang", "training", 4, 0)).await;
    let plain = submit(&api, job("plain", "training", 1, 0)).await;
    let urgent = submit(&api, job("urgent", "training", 1, 50)).await;

    let seen = eventually("the gang's shortfall", WAIT, || {
        let (api, path) = (api.clone(), format!("/api/v1/workloads/{gang}"));
        async move {
            let w = api.ok(&path).await?;
            Ok(w["shortfall"].as_str().map(|_| w.clone()))
        }
    })
    .await
    .unwrap();
    assert_eq!(seen["shortfall"], "needs 4 free GPUs on one node; the best ready node (gpu-1) has 0", "{seen}");
    let position = |id: &str| {
        let (api, path) = (api.clone(), format!("/api/v1/workloads/{id}"));
        async move { api.ok(&path).await.unwrap()["queue_position"].clone() }
    };
    // Higher priority first, then the order of submission.
    assert_eq!(position(&urgent).await, 1);
    assert_eq!(position(&gang).await, 2);
    assert_eq!(position(&plain).await, 3);
    assert_eq!(position(&running).await, Value::Null, "a running workload has no place in the queue");
    // A list ranks the queue once and says the same as each workload read alone, whether it is
    // asked for the pending work or for everything.
    for path in ["/api/v1/workloads?state=pending", "/api/v1/workloads"] {
        let listed = api.ok(path).await.unwrap();
        let places: Vec<(String, Value)> = listed
            .as_array()
            .unwrap()
            .iter()
            .map(|w| (w["id"].as_str().unwrap().to_owned(), w["queue_position"].clone()))
            .collect();
        assert_eq!(places.iter().filter(|(_, p)| p.is_i64()).count(), 3, "{path}: {listed}");
        for (id, place) in places {
            assert_eq!(place, position(&id).await, "{path}: {listed}");
        }
    }

    // The fleet at a glance says the same, in a few hundred bytes.
    let summary = api.get("/api/v1/fleet/summary").await.unwrap();
    assert_eq!(summary.status, 200, "{}", summary.body);
    let s = &summary.body;
    assert_eq!(
        (s["nodes_ready"].as_i64(), s["gpus"].as_i64(), s["gpus_held"].as_i64()),
        (Some(1), Some(2), Some(2)),
        "{s}"
    );
    assert_eq!(s["gpus_allocated"], 2.0);
    assert_eq!(s["workloads"]["pending"], 3, "{s}");
    assert_eq!(s["pending_by_reason"].as_array().unwrap().iter().map(|r| r["count"].as_i64().unwrap()).sum::<i64>(), 3);
    assert!(serde_json::to_string(s).unwrap().len() < 2048);

    // The answer to a submission does not count the queue (a reading of the workload does).
    let answer = api.created("/api/v1/workloads", &job("late", "training", 1, 0)).await.unwrap();
    assert_eq!(answer["state"], "pending", "{answer}");
    assert_eq!(answer["queue_position"], Value::Null, "{answer}");
    assert_eq!(position(answer["id"].as_str().unwrap()).await, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priority_change_is_previewed_against_the_live_queue_before_it_is_saved() {
    let (_db, cp, _agent) = one_node_fleet("gpu-1", &["--simulate-gpus", "1:H100:81920"]).await.unwrap();
    let api = cp.api();
    // Training may not be preempted in its first hour: a customer-facing request waits for it.
    let mut settings = api.ok("/api/v1/settings/priorities").await.unwrap();
    settings["min_runtime_s"] = json!(3600);
    settings["checkpointable_only"] = json!(false);
    let saved = api.put("/api/v1/settings/priorities", &settings).await.unwrap();
    assert_eq!(saved.status, 200, "{}", saved.body);
    let training = submit(&api, job("long-training", "training", 1, 0)).await;
    workload_reaches(&api, &training, "running", WAIT).await.unwrap();
    let chat = submit(
        &api,
        json!({"name": "chat", "class": "realtime_inference", "command": ["sleep", "300"],
               "resources": {"gpu_count": 1, "cpu_millis": 10}}),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(api.ok(&format!("/api/v1/workloads/{chat}")).await.unwrap()["state"], "pending");

    // With no minimum run time, the training job would be preempted for the customer's request.
    let mut candidate = settings.clone();
    candidate["min_runtime_s"] = json!(0);
    let preview = api.post("/api/v1/settings/priorities/preview", &candidate).await.unwrap();
    assert_eq!(preview.status, 200, "{}", preview.body);
    let p = &preview.body;
    let change = p["changes"].as_array().unwrap().iter().find(|c| c["workload_id"] == training).cloned();
    let change = change.unwrap_or_else(|| panic!("the training job changes: {p}"));
    assert_eq!(
        (change["current"]["action"].as_str(), change["candidate"]["action"].as_str()),
        (Some("none"), Some("preempt")),
        "{p}"
    );
    assert_eq!(change["candidate"]["node"], "gpu-1");
    assert_eq!((p["preempted_now"].as_u64(), p["preempted_with_candidate"].as_u64()), (Some(0), Some(1)), "{p}");

    // Nothing was applied or stored: the settings and the training job are as they were.
    assert_eq!(api.ok("/api/v1/settings/priorities").await.unwrap()["min_runtime_s"], 3600);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(api.ok(&format!("/api/v1/workloads/{training}")).await.unwrap()["state"], "running");
    // Bad settings are refused as saving them would be; only platform admins may preview.
    candidate["grace_period_s"] = json!(-1);
    let bad = api.post("/api/v1/settings/priorities/preview", &candidate).await.unwrap();
    assert_eq!(bad.status, 422, "{}", bad.body);
    let member = api.with_token(&cp.user("default", "m@m.test", "tenant_member").await.unwrap());
    let refused = member.post("/api/v1/settings/priorities/preview", &settings).await.unwrap();
    assert_eq!(refused.status, 403, "{}", refused.body);
}
