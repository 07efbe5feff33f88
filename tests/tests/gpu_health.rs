//! GPU health: a GPU whose agent reports a fault (here a simulated XID 79, "fallen off the bus"
//! in NVML's words, written to the agent's `--simulated-gpu-faults` file) is quarantined — no new
//! work, its workload stopped and requeued onto a healthy GPU — shown on the GPU's view and in the
//! metrics; the quarantine outlives an agent restart until a platform admin clears it; a GPU whose
//! clocks are held down for heat is shown and counted but keeps its work; a node with two faulty
//! GPUs is drained for repair. Real control plane, agent and PostgreSQL.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use airtime_tests::{Api, Cli, NodeAgent, eventually, fresh_control_plane, nodes_ready, workload_reaches};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

/// The GPU of node `node` whose slot is `index`, as `GET /api/v1/gpus` shows it.
async fn gpu(api: &Api, index: i64) -> Value {
    let gpus = api.ok("/api/v1/gpus").await.unwrap();
    gpus.as_array().unwrap().iter().find(|g| g["device_index"] == index).unwrap().clone()
}

/// The slot the workload holds, once it holds one.
async fn held_slot(api: &Api, id: &str) -> i64 {
    eventually("the workload's GPU", WAIT, || {
        let (api, id) = (api.clone(), id.to_owned());
        async move {
            let gpus = api.ok("/api/v1/gpus").await?;
            Ok(gpus
                .as_array()
                .unwrap()
                .iter()
                .find(|g| g["shares"].as_array().is_some_and(|s| s.iter().any(|s| s["workload_id"] == id.as_str())))
                .and_then(|g| g["device_index"].as_i64()))
        }
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_that_faults_is_quarantined_its_work_moves_to_a_healthy_gpu_and_a_second_fault_drains_the_node() {
    let (_db, cp) = fresh_control_plane(&[]).await.unwrap();
    let api = cp.api();
    let dir = tempfile::tempdir().unwrap();
    let faults = dir.path().join("faults");
    let faults_arg = format!("--simulated-gpu-faults={}", faults.display());
    let mut agent =
        NodeAgent::start(&cp, "flaky-gpus", &["--simulate-gpus", "2:H100-SXM:81920", &faults_arg]).await.unwrap();
    nodes_ready(&api, 1).await.unwrap();

    let w = api
        .created(
            "/api/v1/workloads",
            &json!({"name": "trains-on", "class": "training", "checkpointable": true,
                    "resources": {"gpu_count": 1}, "command": ["sleep", "600"]}),
        )
        .await
        .unwrap();
    let id = w["id"].as_str().unwrap().to_owned();
    workload_reaches(&api, &id, "running", WAIT).await.unwrap();
    let first = held_slot(&api, &id).await;

    // The GPU it runs on reports XID 79.
    std::fs::write(&faults, format!("{first} xid 79\n")).unwrap();
    let quarantined = eventually("the GPU quarantined", WAIT, || {
        let api = api.clone();
        async move {
            let g = gpu(&api, first).await;
            Ok((!g["fault"].is_null()).then_some(g))
        }
    })
    .await
    .unwrap();
    assert_eq!(quarantined["fault"], "XID 79", "{quarantined}");
    // Its work is stopped, requeued, and runs again on the healthy GPU.
    let moved = eventually("the work running again on the healthy GPU", WAIT, || {
        let (api, id) = (api.clone(), id.clone());
        async move {
            let w = api.ok(&format!("/api/v1/workloads/{id}")).await?;
            Ok((w["state"] == "running" && w["attempt"] == 2).then_some(w))
        }
    })
    .await
    .unwrap();
    assert!(moved["history"].to_string().contains("faulted (XID 79)"), "{moved}");
    let second = held_slot(&api, &id).await;
    assert_ne!(second, first, "placed on the quarantined GPU again");
    let metrics = cp.metrics(true).await.unwrap();
    assert!(metrics.lines().any(|l| l == "airtime_gpus_faulty 1"), "{metrics}");

    // Nothing new lands on the quarantined GPU: a second job waits rather than take it.
    let waiting = api
        .created(
            "/api/v1/workloads",
            &json!({"name": "waits", "class": "training", "resources": {"gpu_count": 1},
                    "command": ["sleep", "600"]}),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let waiting = api.ok(&format!("/api/v1/workloads/{}", waiting["id"].as_str().unwrap())).await.unwrap();
    assert_eq!(waiting["state"], "pending", "{waiting}");
    let waiting_id = waiting["id"].as_str().unwrap().to_owned();

    // The card is reseated (the fault file empties) and the agent restarted, as an operator
    // would: the quarantine outlives the restart (an XID is reported only by the agent process
    // that saw it), so the job still waits.
    std::fs::write(&faults, "").unwrap();
    agent.terminate().await.unwrap();
    agent.restart().await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(gpu(&api, first).await["fault"], "XID 79");
    assert_eq!(api.ok(&format!("/api/v1/workloads/{waiting_id}")).await.unwrap()["state"], "pending");

    // A platform admin clears it with the CLI (audited): the waiting job lands on the repaired GPU.
    let cli = Cli::new().unwrap();
    let slot = first.to_string();
    let cleared = cli
        .run(&[
            "--url",
            &cp.url,
            "--token",
            &cp.admin_token,
            "nodes",
            "clear-fault",
            "flaky-gpus",
            &slot,
            "--reason",
            "reseated",
        ])
        .await
        .unwrap()
        .ok()
        .unwrap();
    assert!(cleared.stdout.contains(&format!("GPU {first} of node flaky-gpus takes work again")), "{cleared:?}");
    assert!(gpu(&api, first).await["fault"].is_null());
    workload_reaches(&api, &waiting_id, "running", WAIT).await.unwrap();
    assert_eq!(held_slot(&api, &waiting_id).await, first);
    let audit = api.ok("/api/v1/audit?action=gpu.clear_fault").await.unwrap();
    assert!(audit.to_string().contains("reseated"), "{audit}");

    // The repaired GPU runs hot: its clocks are held down. A warning, shown and counted — not a
    // fault: it keeps its work.
    std::fs::write(&faults, format!("{first} throttle hw_thermal\n")).unwrap();
    let throttled = eventually("the GPU shown throttled", WAIT, || {
        let api = api.clone();
        async move {
            let g = gpu(&api, first).await;
            Ok((g["telemetry"]["throttle"] == json!(["hw_thermal"])).then_some(g))
        }
    })
    .await
    .unwrap();
    assert!(throttled["fault"].is_null(), "{throttled}");
    let metrics = cp.metrics(true).await.unwrap();
    assert!(metrics.lines().any(|l| l == "airtime_gpus_throttled 1"), "{metrics}");
    let series = format!("airtime_gpu_throttled{{node=\"flaky-gpus\",gpu=\"{first}\",reason=\"hw_thermal\"}} 1");
    assert!(metrics.lines().any(|l| l == series), "{metrics}");
    let still = api.ok(&format!("/api/v1/workloads/{waiting_id}")).await.unwrap();
    assert_eq!((still["state"].as_str(), still["attempt"].as_i64()), (Some("running"), Some(1)), "{still}");

    // A second faulty GPU drains the node for repair.
    std::fs::write(&faults, format!("{first} xid 79\n{second} ecc_uncorrectable 2\n")).unwrap();
    let node = eventually("the node drained", WAIT, || {
        let api = api.clone();
        async move {
            let n = api.ok("/api/v1/nodes").await?;
            let n = n[0].clone();
            Ok((n["state"] == "draining").then_some(n))
        }
    })
    .await
    .unwrap();
    assert!(node["maintenance"]["reason"].as_str().unwrap().contains("2 of its GPUs are faulty"), "{node}");
    assert_eq!(gpu(&api, second).await["fault"], "2 uncorrectable ECC errors");
    cp.stop().await;
}
