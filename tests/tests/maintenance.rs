//! Taking a node out for maintenance, as an operator does it with the `airtime` command line
//! (`docs/operations.md` gives the same commands): real control plane and agent processes
//! (simulated GPUs), real PostgreSQL, the built-in policies as Wasm.
//!
//! - A cordoned node takes no new work, and stays cordoned when its agent restarts (re-registers)
//!   and when the control plane restarts; uncordoned, it takes work again.
//! - A drained node ends empty, each kind of work handled as the drain promises: checkpointable
//!   work gets the checkpoint signal and is requeued onto another node, a service replica is
//!   replaced on another node before it stops, a job that is neither is left to finish, and one
//!   still running at the drain's deadline is stopped and requeued.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use airtime_tests::{
    Api, Cli, ControlPlane, NodeAgent, eventually, fresh_control_plane, nodes_ready, workload_reaches,
};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(40);

/// `airtime` as the platform admin of `cp`.
async fn airtime(cli: &Cli, cp: &ControlPlane, args: &[&str]) -> Value {
    let mut all = vec!["--url", cp.url.as_str(), "--token", cp.admin_token.as_str(), "-o", "json"];
    all.extend_from_slice(args);
    cli.run(&all).await.unwrap().ok().unwrap().json().unwrap()
}

/// The node of this name, as `GET /nodes/{id}` shows it.
async fn node(api: &Api, name: &str) -> Value {
    let nodes = api.ok("/api/v1/nodes").await.unwrap();
    let id = nodes.as_array().unwrap().iter().find(|n| n["name"] == name).unwrap()["id"].as_str().unwrap().to_owned();
    api.ok(&format!("/api/v1/nodes/{id}")).await.unwrap()
}

/// Waits until the node of this name is heard from in `state`.
async fn node_is(api: &Api, name: &str, state: &str) -> Value {
    eventually(&format!("node {name} {state}"), WAIT, || {
        let (api, name) = (api.clone(), name.to_owned());
        async move {
            let nodes = api.ok("/api/v1/nodes").await?;
            Ok(nodes.as_array().unwrap().iter().find(|n| n["name"] == name && n["state"] == state).cloned())
        }
    })
    .await
    .unwrap()
}

/// Asserts the workload stays pending, never placed, for `window` (asked every 200 ms).
async fn stays_pending(api: &Api, id: &str, window: Duration, after: &str) {
    let end = tokio::time::Instant::now() + window;
    while tokio::time::Instant::now() < end {
        let w = api.ok(&format!("/api/v1/workloads/{id}")).await.unwrap();
        assert_eq!((w["state"].clone(), w["node_id"].clone()), (json!("pending"), Value::Null), "after {after}: {w}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn job(name: &str, extra: Value) -> Value {
    let mut body = json!({"name": name, "class": "evaluation", "resources": {"cpu_millis": 100},
                          "command": ["sleep", "600"]});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cordoned_node_takes_no_work_through_agent_and_control_plane_restarts_until_uncordoned() {
    let (db, cp) = fresh_control_plane(&[]).await.unwrap();
    let api = cp.api();
    let flags = ["--simulate-gpus", "1:A100:40960"];
    let agent = NodeAgent::start(&cp, "rack-7", &flags).await.unwrap();
    nodes_ready(&api, 1).await.unwrap();
    let cli = Cli::new().unwrap();

    // Bad input changes nothing: a reason too long, an unknown field, an unknown node, a viewer.
    let id = node(&api, "rack-7").await["id"].as_str().unwrap().to_owned();
    let long = "x".repeat(501);
    let refused = api.post(&format!("/api/v1/nodes/{id}/cordon"), &json!({"reason": long})).await.unwrap();
    assert_eq!((refused.status, refused.body["error"]["code"].clone()), (422, json!("invalid_reason")));
    let refused = api.post(&format!("/api/v1/nodes/{id}/drain"), &json!({"deadline": 5})).await.unwrap();
    assert!((400..500).contains(&refused.status) && refused.body["error"]["code"].is_string(), "{}", refused.body);
    let refused = api.post(&format!("/api/v1/nodes/{id}/drain"), &json!({"deadline_s": 700_000})).await.unwrap();
    assert_eq!((refused.status, refused.body["error"]["code"].clone()), (422, json!("invalid_deadline")));
    let missing = api.post(&format!("/api/v1/nodes/{}/cordon", uuid::Uuid::nil()), &json!({})).await.unwrap();
    assert_eq!(missing.status, 404, "{}", missing.body);
    let viewer = cp.api_as(&cp.user("default", "viewer@ops.test", "viewer").await.unwrap());
    let forbidden = viewer.post(&format!("/api/v1/nodes/{id}/cordon"), &json!({})).await.unwrap();
    assert_eq!(forbidden.status, 403, "{}", forbidden.body);
    assert_eq!(node(&api, "rack-7").await["state"], "ready", "refused requests changed the node");

    // Cordoned by name, with a reason: shown, audited, counted.
    let cordoned = airtime(&cli, &cp, &["nodes", "cordon", "rack-7", "--reason", "fan replacement"]).await;
    assert_eq!(cordoned["state"], "cordoned", "{cordoned}");
    assert_eq!(cordoned["maintenance"]["reason"], "fan replacement");
    assert_eq!(cordoned["maintenance"]["by"], airtime_tests::ADMIN_EMAIL);
    let audit = api.ok("/api/v1/audit?action=node.cordon").await.unwrap();
    assert_eq!(audit.as_array().unwrap().len(), 1, "{audit}");
    let metrics = cp.metrics(false).await.unwrap();
    assert!(metrics.contains("airtime_nodes{state=\"cordoned\"} 1"), "{metrics}");

    // No new work lands there: the only node is cordoned, so the job waits.
    let waiting =
        api.created("/api/v1/workloads", &job("waits", json!({"resources": {"gpu_count": 1}}))).await.unwrap();
    let waiting = waiting["id"].as_str().unwrap().to_owned();
    stays_pending(&api, &waiting, Duration::from_secs(3), "the cordon").await;

    // The agent dies and stays away until its node is lost, then starts again and registers: the
    // node comes back cordoned (registration used to reset a node to `ready`), the job waits.
    agent.kill().await;
    node_is(&api, "rack-7", "lost").await;
    let agent = NodeAgent::start(&cp, "rack-7", &flags).await.unwrap();
    let after_agent = node_is(&api, "rack-7", "cordoned").await;
    assert_eq!(after_agent["maintenance"]["reason"], "fan replacement", "{after_agent}");
    stays_pending(&api, &waiting, Duration::from_secs(3), "the agent's restart").await;

    // The control plane restarts: the cordon is in the database, and holds.
    let address = cp.url.trim_start_matches("http://").trim_end_matches('/').to_owned();
    cp.stop().await;
    let cp = ControlPlane::start(&db, &["--listen", &address]).await.unwrap();
    let api = cp.api();
    let after_restart = node(&api, "rack-7").await;
    assert_eq!(after_restart["maintenance"]["mode"], "cordoned", "{after_restart}");
    assert_eq!(after_restart["maintenance"]["reason"], "fan replacement");
    stays_pending(&api, &waiting, Duration::from_secs(3), "the control plane's restart").await;
    assert_eq!(node(&api, "rack-7").await["state"], "cordoned");

    // Uncordoned: the node takes the job.
    let lifted = airtime(&cli, &cp, &["nodes", "uncordon", "rack-7"]).await;
    assert_eq!((lifted["state"].clone(), lifted["maintenance"].clone()), (json!("ready"), Value::Null));
    let placed = workload_reaches(&api, &waiting, "running", WAIT).await.unwrap();
    assert_eq!(placed["node_id"], json!(id));
    drop(agent);
    cp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_node_ends_empty_with_each_kind_of_work_moved_or_finished_as_promised() {
    let (_db, cp) = fresh_control_plane(&[]).await.unwrap();
    let api = cp.api();
    let flags = ["--simulate-gpus", "2:A100:40960"];
    let _old = NodeAgent::start(&cp, "old-host", &flags).await.unwrap();
    nodes_ready(&api, 1).await.unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let saved = scratch.path().join("checkpoints");

    // On the only node: a checkpointable training job that saves a checkpoint on SIGTERM, a
    // service's replica, a job that is neither and would run long, and one that ends soon.
    let training = api
        .created(
            "/api/v1/workloads",
            &json!({"name": "train", "class": "training", "checkpointable": true, "resources": {"gpu_count": 1},
                    "command": ["sh", "-c", format!("trap 'echo saved >> {}; exit 0' TERM; sleep 600 & wait",
                                                    saved.display())]}),
        )
        .await
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let service = api
        .created(
            "/api/v1/services",
            &json!({"name": "chat", "class": "realtime_inference", "capacity": 10.0, "min_replicas": 1,
                    "max_replicas": 2, "replica": {"command": ["sleep", "600"], "resources": {"gpu_count": 1}}}),
        )
        .await
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Its gateway reports 6 req/s, one replica's worth (the autoscaler replaces a replica on a
    // known demand).
    let reporter = {
        let (api, path) = (api.clone(), format!("/api/v1/services/{service}/load"));
        tokio::spawn(async move {
            loop {
                let answer = api.post(&path, &json!({"requests_per_s": 6.0, "p95_latency_ms": 80.0})).await;
                assert!(answer.is_ok_and(|a| a.status == 202), "a load report was refused");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    let long =
        api.created("/api/v1/workloads", &job("long", json!({}))).await.unwrap()["id"].as_str().unwrap().to_owned();
    for id in [&training, &long] {
        workload_reaches(&api, id, "running", WAIT).await.unwrap();
    }
    let replicas = eventually("the service's replica to run", WAIT, || {
        let (api, path) = (api.clone(), format!("/api/v1/workloads?service_id={service}&state=running"));
        async move { Ok(api.ok(&path).await?.as_array().filter(|a| a.len() == 1).cloned()) }
    })
    .await
    .unwrap();
    let old_replica = replicas[0]["id"].as_str().unwrap().to_owned();
    let short =
        api.created("/api/v1/workloads", &job("short", json!({"command": ["sleep", "5"]}))).await.unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned();
    workload_reaches(&api, &short, "running", WAIT).await.unwrap();

    // A second node joins; the first is drained with a 12 s deadline, and the command waits until
    // nothing is left on it.
    let _new = NodeAgent::start(&cp, "new-host", &flags).await.unwrap();
    nodes_ready(&api, 2).await.unwrap();
    let old_id = node(&api, "old-host").await["id"].as_str().unwrap().to_owned();
    let new_id = node(&api, "new-host").await["id"].as_str().unwrap().to_owned();
    let cli = Cli::new().unwrap();
    let drained = airtime(
        &cli,
        &cp,
        &[
            "nodes",
            "drain",
            "old-host",
            "--reason",
            "kernel upgrade",
            "--deadline",
            "12s",
            "--wait",
            "--timeout",
            "50s",
        ],
    )
    .await;
    assert_eq!(drained["state"], "draining", "{drained}");
    assert_eq!(drained["maintenance"]["drained"], true, "{drained}");
    assert_eq!((drained["maintenance"]["remaining"].clone(), drained["work"].clone()), (json!(0), json!([])));
    let shown = airtime(&cli, &cp, &["nodes", "get", "old-host"]).await;
    assert_eq!((shown["state"].clone(), shown["maintenance"]["drained"].clone()), (json!("draining"), json!(true)));

    // The checkpointable job got the checkpoint signal and runs on the other node.
    let moved = workload_reaches(&api, &training, "running", WAIT).await.unwrap();
    assert_eq!((moved["node_id"].clone(), moved["attempt"].clone()), (json!(new_id), json!(2)), "{moved}");
    let history = moved["history"].to_string();
    assert!(history.contains("old-host is draining (checkpoint and requeue)"), "{history}");
    assert!(std::fs::read_to_string(&saved).unwrap_or_default().contains("saved"), "no checkpoint was saved");

    // The replica was replaced on the other node, and stopped only once its replacement ran.
    let old = api.ok(&format!("/api/v1/workloads/{old_replica}")).await.unwrap();
    assert_eq!(old["state"], "cancelled", "{old}");
    let stopped_at = event_at(&old, "cancelling");
    let running = api.ok(&format!("/api/v1/workloads?service_id={service}&state=running")).await.unwrap();
    let running = running.as_array().unwrap();
    assert_eq!(running.len(), 1, "{running:?}");
    assert_eq!(running[0]["node_id"], json!(new_id), "{running:?}");
    let replacement = api.ok(&format!("/api/v1/workloads/{}", running[0]["id"].as_str().unwrap())).await.unwrap();
    assert!(event_at(&replacement, "running") < stopped_at, "the replica stopped before its replacement ran");

    // The short job finished where it was; the long one ran into the deadline and was requeued.
    let finished = api.ok(&format!("/api/v1/workloads/{short}")).await.unwrap();
    assert_eq!((finished["state"].clone(), finished["attempt"].clone()), (json!("succeeded"), json!(1)));
    assert_eq!(finished["last_node_id"], json!(old_id), "{finished}");
    let requeued = workload_reaches(&api, &long, "running", WAIT).await.unwrap();
    assert_eq!((requeued["node_id"].clone(), requeued["attempt"].clone()), (json!(new_id), json!(2)));
    assert!(requeued["history"].to_string().contains("the drain's deadline has passed"), "{requeued}");

    // Nothing new lands on the drained node, and the drain is in the audit log.
    let after =
        api.created("/api/v1/workloads", &job("after", json!({}))).await.unwrap()["id"].as_str().unwrap().to_owned();
    let placed = workload_reaches(&api, &after, "running", WAIT).await.unwrap();
    assert_eq!(placed["node_id"], json!(new_id));
    let audit = api.ok("/api/v1/audit?action=node.drain").await.unwrap();
    assert_eq!(audit[0]["detail"]["reason"], "kernel upgrade", "{audit}");
    reporter.abort();
    cp.stop().await;
}

/// When the workload's history first entered `state`.
fn event_at(workload: &Value, state: &str) -> chrono::DateTime<chrono::Utc> {
    let history = workload["history"].as_array().unwrap();
    let event = history.iter().find(|e| e["to_state"] == state);
    let at = event.unwrap_or_else(|| panic!("never {state}: {workload}"))["at"].as_str().unwrap();
    chrono::DateTime::parse_from_rfc3339(at).unwrap().to_utc()
}
