//! Nothing is lost: state lives in PostgreSQL, so a control plane killed mid-flight and started
//! again loses no workload and no decision, and a node agent killed with its work running comes
//! back, stops what it left behind and runs the requeued work again.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use airtime_tests::{ControlPlane, NodeAgent, TestDb, eventually, nodes_ready, workload_reaches};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(40);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_killed_mid_flight_comes_back_with_every_workload_and_decision() {
    let db = TestDb::create().await.unwrap();
    let first = ControlPlane::start(&db, &[]).await.unwrap();
    let api = first.api();
    let _agent = NodeAgent::start(&first, "steady", &["--simulate-gpus", "2:A100:40960"]).await.unwrap();
    nodes_ready(&api, 1).await.unwrap();

    let running = api
        .created(
            "/api/v1/workloads",
            &json!({"name": "outlives-the-control-plane", "class": "batch_inference",
                                             "resources": {"gpu_count": 1}, "command": ["sleep", "4"]}),
        )
        .await
        .unwrap();
    let running_id = running["id"].as_str().unwrap().to_owned();
    workload_reaches(&api, &running_id, "running", WAIT).await.unwrap();
    let queued = api
        .created(
            "/api/v1/workloads",
            &json!({"name": "queued-too-big", "class": "training",
                                             "resources": {"gpu_count": 8}, "command": ["true"]}),
        )
        .await
        .unwrap();
    let queued_id = queued["id"].as_str().unwrap().to_owned();
    eventually("the big one to get its reason", WAIT, || {
        let api = api.clone();
        let path = format!("/api/v1/workloads/{queued_id}");
        async move { Ok(api.ok(&path).await?["pending_reason"].as_str().map(|r| r.contains("GPUs")).filter(|x| *x)) }
    })
    .await
    .unwrap();
    let decisions_before = api.ok("/api/v1/decisions?limit=1000").await.unwrap().as_array().unwrap().len();

    // SIGKILL, no goodbye; then a new process on the same address and database.
    let address = first.url.trim_start_matches("http://").trim_end_matches('/').to_owned();
    first.stop().await;
    let second = ControlPlane::start(&db, &["--listen", &address]).await.unwrap();
    let api = second.api();

    // The workload that ran through the outage finishes and is recorded; the queue is intact.
    let done = workload_reaches(&api, &running_id, "succeeded", WAIT).await.unwrap();
    assert_eq!(done["exit_code"], 0);
    let waiting = api.ok(&format!("/api/v1/workloads/{queued_id}")).await.unwrap();
    assert_eq!(waiting["state"], "pending");
    let decisions_after = api.ok("/api/v1/decisions?limit=1000").await.unwrap().as_array().unwrap().len();
    assert!(decisions_after >= decisions_before, "no decision lost: {decisions_before} → {decisions_after}");
    assert!(done["decisions"].as_array().unwrap().iter().any(|d| d["kind"] == "place"));
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_agent_killed_with_work_running_comes_back_and_the_work_runs_again() {
    let db = TestDb::create().await.unwrap();
    let cp = ControlPlane::start(&db, &[]).await.unwrap();
    let api = cp.api();
    let agent = NodeAgent::start(&cp, "flaky", &["--simulate-gpus", "1:L4:24576"]).await.unwrap();
    nodes_ready(&api, 1).await.unwrap();

    let w = api
        .created(
            "/api/v1/workloads",
            &json!({"name": "survives-its-agent", "class": "fine_tuning",
                                             "resources": {"gpu_count": 1}, "command": ["sleep", "600"]}),
        )
        .await
        .unwrap();
    let id = w["id"].as_str().unwrap().to_owned();
    let first_run = workload_reaches(&api, &id, "running", WAIT).await.unwrap();
    assert_eq!(first_run["attempt"], 1);

    agent.kill().await;
    let _again = NodeAgent::start(&cp, "flaky", &["--simulate-gpus", "1:L4:24576"]).await.unwrap();

    // The restarted agent runs nothing of the old one's: the work is requeued and placed again.
    let rerun = eventually("a second attempt running", WAIT, || {
        let api = api.clone();
        let path = format!("/api/v1/workloads/{id}");
        async move {
            let w = api.ok(&path).await?;
            Ok((w["state"] == "running" && w["attempt"] == 2).then_some(w))
        }
    })
    .await
    .unwrap();
    let details: Vec<String> =
        rerun["history"].as_array().unwrap().iter().map(|e| e["detail"].as_str().unwrap().to_owned()).collect();
    assert!(details.iter().any(|d| d.contains("requeued")), "{details:?}");
    let nodes = api.ok("/api/v1/nodes").await.unwrap();
    assert_eq!(nodes.as_array().unwrap().len(), 1, "the same node, not a second one: {nodes}");
    cp.stop().await;
}
