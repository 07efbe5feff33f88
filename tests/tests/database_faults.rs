//! PostgreSQL restarted, then stopped for longer than the lost-node timeout and the scheduling
//! lease, under a running fleet: two control plane replicas and an agent with work running, on a
//! cluster of the test's own (never the shared server). Through both faults the fleet keeps one
//! scheduler (no two committed cycles ever overlap), takes no node for lost for silence it could
//! not have heard, restarts no running work, and schedules again once the database is back; while
//! the database is stopped, `/readyz` answers 503 within a second.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use airtime_tests::{
    Api, ControlPlane, NodeAgent, PgCluster, TestDb, eventually, lease_held, nodes_ready, overlapping_cycles,
    running_trainers, send_signal, workload_reaches,
};
use nix::sys::signal::Signal;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(40);

/// Waits until the control plane answers from its database again.
async fn answers(api: &Api) {
    eventually("the control plane to answer from its database", WAIT, || {
        let api = api.clone();
        async move { Ok((api.get("/api/v1/nodes").await?.status == 200).then_some(())) }
    })
    .await
    .unwrap();
}

/// Every state the fleet's nodes show over `window`, asked every 100 ms (an answer the database
/// could not give yet is skipped).
async fn node_states_over(api: &Api, window: Duration) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let end = tokio::time::Instant::now() + window;
    while tokio::time::Instant::now() < end {
        if let Ok(nodes) = api.ok("/api/v1/nodes").await {
            seen.extend(nodes.as_array().into_iter().flatten().filter_map(|n| n["state"].as_str().map(str::to_owned)));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    seen
}

/// The node is ready and every workload runs its first attempt, never taken for lost.
async fn ran_through(api: &Api, ids: &[String], after: &str) {
    let nodes = api.ok("/api/v1/nodes").await.unwrap();
    assert_eq!(nodes[0]["state"], "ready", "after {after}: {nodes}");
    for id in ids {
        let w = api.ok(&format!("/api/v1/workloads/{id}")).await.unwrap();
        assert_eq!((w["state"].clone(), w["attempt"].clone()), (json!("running"), json!(1)), "after {after}: {w}");
        let history = w["history"].to_string();
        assert!(!history.contains("lost"), "after {after}, its node was taken for lost: {history}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_restarted_and_stopped_under_two_replicas_leaves_one_scheduler_and_runs_nothing_twice() {
    let cluster = PgCluster::create().await.unwrap();
    let db = TestDb::create_on(&cluster.admin_url()).await.unwrap();
    // A lease shorter than the stop below, so the stop ends it and both replicas may claim it; a
    // lost-node timeout (5 s) shorter than the stop too, with room for a loaded machine between
    // the database's return and the agent's first heartbeat through the other replica.
    let lease = ["--leader-lease-ms", "2000", "--heartbeat-interval-ms", "500", "--node-lost-after-ms", "5000"];
    let first = ControlPlane::start(&db, &lease).await.unwrap();
    let pool = db.pool().await.unwrap();
    lease_held(&pool, None).await.unwrap();
    pool.close().await;
    let second = ControlPlane::start(&db, &lease).await.unwrap();
    // The agent is served by the standby; the leader decides.
    let agent = NodeAgent::start(&second, "steady", &["--simulate-gpus", "2:A100:40960"]).await.unwrap();
    let api = first.api();
    nodes_ready(&api, 1).await.unwrap();
    let ids = running_trainers(&api, &["trainer-a", "trainer-b"], WAIT).await.unwrap();

    // A restart: every connection of both replicas ends at once.
    cluster.restart().await.unwrap();
    // Watched past the lost-node timeout (5 s) after the return: never lost.
    let states = node_states_over(&api, Duration::from_secs(7)).await;
    assert_eq!(states, BTreeSet::from(["ready".to_owned()]), "the node's states after the restart");
    answers(&second.api()).await;
    ran_through(&api, &ids, "the restart").await;

    // A stop of 8 s: longer than the lost-node timeout and the lease. The agent is silent from
    // the stop until 1.5 s after the database is back (paused: its next heartbeat due later, as
    // one is at the protocol's 2 s interval). The control plane could not hear it while the
    // database was down: it must count only those 1.5 s, not the 9.5 s since its last heartbeat.
    let agent_pid = agent.pid();
    send_signal(agent_pid, Signal::SIGSTOP).unwrap();
    let ready = first.anonymous().get("/readyz").await.unwrap();
    assert_eq!(ready.status, 200, "readiness before the stop: {}", ready.body);
    cluster.stop().await.unwrap();
    let stopped = tokio::time::Instant::now();
    // Readiness says "not ready" within a second all through the stop (the pool's acquire would
    // wait 5 s: a probe with a one-second timeout saw its own timeout, not a 503), on both replicas.
    for _ in 0..3 {
        for replica in [&first, &second] {
            let asked = tokio::time::Instant::now();
            let ready = replica.anonymous().get("/readyz").await.unwrap();
            let took = asked.elapsed();
            assert_eq!(ready.status, 503, "readiness with the database stopped: {}", ready.body);
            assert_eq!(ready.body["error"]["code"], "unavailable", "{}", ready.body);
            assert!(took < Duration::from_secs(1), "readiness took {took:?} with the database stopped");
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    tokio::time::sleep(Duration::from_secs(8).saturating_sub(stopped.elapsed())).await;
    cluster.start().await.unwrap();
    answers(&api).await;
    eventually("readiness once the database is back", WAIT, || {
        let anonymous = first.anonymous();
        async move { Ok((anonymous.get("/readyz").await?.status == 200).then_some(())) }
    })
    .await
    .unwrap();
    let resume = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        send_signal(agent_pid, Signal::SIGCONT).unwrap();
    });
    // Watched from the return until past the lost-node timeout after the agent speaks: never lost.
    let states = node_states_over(&api, Duration::from_secs(8)).await;
    resume.await.unwrap();
    assert_eq!(states, BTreeSet::from(["ready".to_owned()]), "the node's states after the stop");
    answers(&second.api()).await;
    ran_through(&api, &ids, "the stop").await;

    // Someone leads again and schedules: new work is placed.
    let w = api
        .created(
            "/api/v1/workloads",
            &json!({"name": "after-the-outage", "class": "evaluation", "resources": {"cpu_millis": 100},
                    "command": ["sleep", "600"]}),
        )
        .await
        .unwrap();
    workload_reaches(&api, w["id"].as_str().unwrap(), "running", WAIT).await.unwrap();

    // One scheduler throughout.
    let pool = db.pool().await.unwrap();
    assert_eq!(overlapping_cycles(&pool).await.unwrap(), vec![], "cycles of two schedulers overlapped");
    let (cycles,): (i64,) = sqlx::query_as("SELECT count(*) FROM scheduling_cycles").fetch_one(&pool).await.unwrap();
    assert!(cycles >= 3, "the fleet cycled: {cycles} cycles");
    pool.close().await;
    second.stop().await;
    first.stop().await;
}
