//! Nothing is lost: state lives in PostgreSQL, so a control plane killed mid-flight and started
//! again loses no workload and no decision, and a node agent killed with its work running comes
//! back, stops what it left behind and runs the requeued work again. Two replicas: a leader that
//! is killed hands the scheduling loop to the standby once its lease lapses, and a leader whose
//! lease was taken commits no cycle.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use airtime_tests::{
    ControlPlane, NodeAgent, TestDb, eventually, fresh_control_plane, lease_held, nodes_ready, one_node_fleet,
    overlapping_cycles, send_signal, workload_reaches,
};
use nix::sys::signal::Signal;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(40);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_killed_mid_flight_comes_back_with_every_workload_and_decision() {
    let (db, first, _agent) = one_node_fleet("steady", &["--simulate-gpus", "2:A100:40960"]).await.unwrap();
    let api = first.api();

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
async fn a_control_plane_down_longer_than_the_lost_node_timeout_restarts_no_running_work() {
    // The harness runs control planes with --node-lost-after-ms 3000 and heartbeats every 500 ms.
    let (db, first, _agent) = one_node_fleet("steady", &["--simulate-gpus", "1:A100:40960"]).await.unwrap();
    let api = first.api();
    let w = api
        .created(
            "/api/v1/workloads",
            &json!({"name": "runs-through-the-outage", "class": "training", "resources": {"gpu_count": 1},
                    "command": ["sleep", "120"]}),
        )
        .await
        .unwrap();
    let id = w["id"].as_str().unwrap().to_owned();
    workload_reaches(&api, &id, "running", WAIT).await.unwrap();

    // Down for longer than the lost-node timeout: the agents could not be heard, not silent.
    let address = first.url.trim_start_matches("http://").trim_end_matches('/').to_owned();
    first.stop().await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let second = ControlPlane::start(&db, &["--listen", &address]).await.unwrap();
    let api = second.api();
    // Past another timeout after the return: the node is ready and its work ran on, once.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let node = &api.ok("/api/v1/nodes").await.unwrap()[0];
    assert_eq!(node["state"], "ready", "{node}");
    let detail = api.ok(&format!("/api/v1/workloads/{id}")).await.unwrap();
    assert_eq!((detail["state"].clone(), detail["attempt"].clone()), (json!("running"), json!(1)), "{detail}");
    let history = detail["history"].to_string();
    assert!(!history.contains("lost"), "the node was taken for lost: {history}");
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_agent_is_killed_and_replaced_without_its_state_runs_its_work_again() {
    let (_db, cp, agent) = one_node_fleet("flaky", &["--simulate-gpus", "1:L4:24576"]).await.unwrap();
    let api = cp.api();

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

    // The host is reimaged: a new agent on it has none of the old one's state (no records of its
    // workloads), so the old work's tether, its lease file gone, stops it.
    agent.kill().await;
    let _again = NodeAgent::start(&cp, "flaky", &["--simulate-gpus", "1:L4:24576"]).await.unwrap();

    // The new agent runs nothing of the old one's: the work is requeued and placed again.
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

/// POSTs a submission with an `Idempotency-Key`, as a client retrying after a timeout would.
async fn submit_with_key(
    api: &airtime_tests::Api,
    key: &str,
    body: &serde_json::Value,
) -> (u16, Option<String>, serde_json::Value) {
    let answer = reqwest::Client::new()
        .post(api.url("/api/v1/workloads"))
        .bearer_auth(api.token().unwrap())
        .header("Idempotency-Key", key)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    let replayed = answer.headers().get("idempotent-replayed").map(|v| v.to_str().unwrap().to_owned());
    (status, replayed, answer.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_retried_with_its_idempotency_key_is_queued_once() {
    let (_db, cp) = fresh_control_plane(&[]).await.unwrap();
    let api = cp.api();
    let body = json!({"name": "retried", "class": "evaluation", "resources": {"gpu_count": 1}, "command": ["true"]});

    // The client's first answer was lost to a timeout; it retries with the same key.
    let (status, replayed, first) = submit_with_key(&api, "order-7f3a", &body).await;
    assert_eq!((status, replayed), (201, None), "{first}");
    let (status, replayed, again) = submit_with_key(&api, "order-7f3a", &body).await;
    assert_eq!((status, replayed.as_deref()), (201, Some("true")), "{again}");
    assert_eq!(again["id"], first["id"]);

    // Retries racing each other still queue one workload.
    let racing = submit_concurrently(&api, "order-race", &body).await;
    assert!(racing.windows(2).all(|w| w[0] == w[1]), "{racing:?}");

    // The same key for a different request is a client error, not a silent replay.
    let other =
        json!({"name": "something-else", "class": "evaluation", "resources": {"gpu_count": 1}, "command": ["true"]});
    let (status, _, refused) = submit_with_key(&api, "order-7f3a", &other).await;
    assert_eq!((status, refused["error"]["code"].clone()), (422, json!("idempotency_key_reused")), "{refused}");
    // Keys belong to a tenant: another tenant's identical key is its own.
    let research = cp.api_as(&cp.user("research", "lead@research.test", "tenant_member").await.unwrap());
    let (status, replayed, theirs) = submit_with_key(&research, "order-7f3a", &body).await;
    assert_eq!((status, replayed), (201, None), "{theirs}");
    assert_ne!(theirs["id"], first["id"]);

    let all = api.ok("/api/v1/workloads?limit=100").await.unwrap();
    let named = |n: &str| all.as_array().unwrap().iter().filter(|w| w["name"] == n).count();
    assert_eq!((named("retried"), named("something-else")), (3, 0), "one per tenant and one raced: {all}");
    cp.stop().await;
}

/// Five submissions with one key at once; their workload ids.
async fn submit_concurrently(api: &airtime_tests::Api, key: &str, body: &serde_json::Value) -> Vec<serde_json::Value> {
    let mut tasks = Vec::new();
    for _ in 0..5 {
        let (api, key, body) = (api.clone(), key.to_owned(), body.clone());
        tasks.push(tokio::spawn(async move { submit_with_key(&api, &key, &body).await }));
    }
    let mut ids = Vec::new();
    for task in tasks {
        let (status, _, answer) = task.await.unwrap();
        assert_eq!(status, 201, "{answer}");
        ids.push(answer["id"].clone());
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lease_was_taken_commits_no_cycle_until_it_leads_again() {
    let (db, cp) = fresh_control_plane(&["--leader-lease-ms", "2000"]).await.unwrap();
    let api = cp.api();
    let _agent = NodeAgent::start(&cp, "steady", &["--simulate-gpus", "1:A100:40960"]).await.unwrap();
    nodes_ready(&api, 1).await.unwrap();
    let pool = db.pool().await.unwrap();
    lease_held(&pool, None).await.unwrap();

    // Another replica takes the lease (as a standby would once this one's lapsed, say while the
    // database restarted under it). This one must not commit another cycle.
    sqlx::query(
        "UPDATE scheduler_lease SET holder = '00000000-0000-0000-0000-0000000000ff', epoch = epoch + 1, \
         renewed_at = now() + interval '1 hour'",
    )
    .execute(&pool)
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (cycles_before,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM scheduling_cycles").fetch_one(&pool).await.unwrap();
    let w = api
        .created(
            "/api/v1/workloads",
            &json!({"name": "waits-for-a-leader", "class": "evaluation", "resources": {"gpu_count": 1}, "command": ["sleep", "30"]}),
        )
        .await
        .unwrap();
    let id = w["id"].as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (cycles_after,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM scheduling_cycles").fetch_one(&pool).await.unwrap();
    assert_eq!(cycles_after, cycles_before, "a deposed leader committed cycles");
    assert_eq!(api.ok(&format!("/api/v1/workloads/{id}")).await.unwrap()["state"], "pending");

    // The other replica goes away (its lease lapses): this one leads again and places the work.
    sqlx::query("UPDATE scheduler_lease SET renewed_at = '-infinity'").execute(&pool).await.unwrap();
    workload_reaches(&api, &id, "running", WAIT).await.unwrap();
    let (epoch,): (i64,) = sqlx::query_as("SELECT epoch FROM scheduler_lease").fetch_one(&pool).await.unwrap();
    assert!(epoch >= 3, "a new epoch for the new term: {epoch}");
    cp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_served_by_a_standby_replica_hears_the_leaders_placement_at_once() {
    let (db, leader) = fresh_control_plane(&[]).await.unwrap();
    let pool = db.pool().await.unwrap();
    lease_held(&pool, None).await.unwrap();
    let standby = ControlPlane::start(&db, &[]).await.unwrap();
    // The agent's long-polls land on the standby; the leader decides.
    let _agent = NodeAgent::start(&standby, "behind-the-standby", &["--simulate-gpus", "1:L4:24576"]).await.unwrap();
    nodes_ready(&leader.api(), 1).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await; // the agent is waiting in its long-poll

    let asked = std::time::Instant::now();
    let w = leader
        .api()
        .created(
            "/api/v1/workloads",
            &json!({"name": "placed-by-the-leader", "class": "evaluation", "resources": {"gpu_count": 1},
                    "command": ["sleep", "30"]}),
        )
        .await
        .unwrap();
    workload_reaches(&leader.api(), w["id"].as_str().unwrap(), "running", WAIT).await.unwrap();
    let waited = asked.elapsed();
    // Without the relay the standby's long-poll answered only at its 25 s timeout.
    assert!(waited < Duration::from_secs(5), "decision to start took {waited:?} through the standby");
    standby.stop().await;
    leader.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_under_running_work_hands_the_loop_to_the_standby_which_runs_nothing_twice() {
    let db = TestDb::create().await.unwrap();
    let lease = ["--leader-lease-ms", "2000"];
    let leader = ControlPlane::start(&db, &lease).await.unwrap();
    let pool = db.pool().await.unwrap();
    let (old_holder, old_epoch) = lease_held(&pool, None).await.unwrap();
    let standby = ControlPlane::start(&db, &lease).await.unwrap();
    // The agent is served by the standby, which outlives the leader.
    let _agent = NodeAgent::start(&standby, "steady", &["--simulate-gpus", "4:A100:40960"]).await.unwrap();
    let api = standby.api();
    nodes_ready(&api, 1).await.unwrap();
    let job = |name: &str| json!({"name": name, "class": "training", "resources": {"gpu_count": 1}, "command": ["sleep", "600"]});
    let mut before = Vec::new();
    for name in ["ran-before-a", "ran-before-b"] {
        let w = api.created("/api/v1/workloads", &job(name)).await.unwrap();
        let id = w["id"].as_str().unwrap().to_owned();
        workload_reaches(&api, &id, "running", WAIT).await.unwrap();
        before.push(id);
    }

    // The leader dies (SIGKILL: its lease is not handed over). Work submitted meanwhile waits for
    // the lease to lapse, then the standby leads and places it.
    leader.stop().await;
    let mut after = Vec::new();
    for name in ["placed-after-a", "placed-after-b"] {
        let w = api.created("/api/v1/workloads", &job(name)).await.unwrap();
        after.push(w["id"].as_str().unwrap().to_owned());
    }
    for id in &after {
        workload_reaches(&api, id, "running", WAIT).await.unwrap();
    }
    let (holder, epoch) = lease_held(&pool, Some(old_holder)).await.unwrap();
    assert!(epoch > old_epoch, "the standby's term is a new epoch: {holder} {epoch}");

    // What ran before runs on, once; what came after ran once; four GPUs, four workloads.
    for id in before.iter().chain(&after) {
        let w = api.ok(&format!("/api/v1/workloads/{id}")).await.unwrap();
        assert_eq!((w["state"].clone(), w["attempt"].clone()), (json!("running"), json!(1)), "{w}");
    }
    let gpus = api.ok("/api/v1/gpus").await.unwrap();
    let held: usize = gpus.as_array().unwrap().iter().map(|g| g["shares"].as_array().map_or(0, Vec::len)).sum();
    assert_eq!(held, 4, "one grant per workload: {gpus}");
    // One scheduler at a time.
    assert_eq!(overlapping_cycles(&pool).await.unwrap(), vec![], "cycles of two schedulers overlapped");
    standby.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_paused_past_its_lease_finds_the_standby_leading_and_commits_no_cycle() {
    let db = TestDb::create().await.unwrap();
    let lease = ["--leader-lease-ms", "2000"];
    let leader = ControlPlane::start(&db, &lease).await.unwrap();
    let pool = db.pool().await.unwrap();
    let (old_holder, _) = lease_held(&pool, None).await.unwrap();
    let standby = ControlPlane::start(&db, &lease).await.unwrap();
    let _agent = NodeAgent::start(&standby, "steady", &["--simulate-gpus", "1:A100:40960"]).await.unwrap();
    nodes_ready(&standby.api(), 1).await.unwrap();
    // Work that never fits keeps every leader cycling (a cycle with nothing waiting records none).
    standby
        .api()
        .created(
            "/api/v1/workloads",
            &json!({"name": "never-fits", "class": "training", "resources": {"gpu_count": 8}, "command": ["sleep", "1"]}),
        )
        .await
        .unwrap();

    // The leader stalls past its lease (a paused VM, a long GC): the standby takes the lease over.
    send_signal(leader.pid(), Signal::SIGSTOP).unwrap();
    lease_held(&pool, Some(old_holder)).await.unwrap();
    // It wakes up believing it leads: its next renewal or commit finds the lease gone.
    send_signal(leader.pid(), Signal::SIGCONT).unwrap();
    let (cycles_before,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM scheduling_cycles").fetch_one(&pool).await.unwrap();
    let w = leader
        .api()
        .created(
            "/api/v1/workloads",
            &json!({"name": "placed-once", "class": "evaluation", "resources": {"gpu_count": 1}, "command": ["sleep", "600"]}),
        )
        .await
        .unwrap();
    let id = w["id"].as_str().unwrap().to_owned();
    workload_reaches(&standby.api(), &id, "running", WAIT).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;

    let (cycles_after,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM scheduling_cycles").fetch_one(&pool).await.unwrap();
    assert!(cycles_after - cycles_before >= 5, "the new leader cycled: {} cycles", cycles_after - cycles_before);
    assert_eq!(overlapping_cycles(&pool).await.unwrap(), vec![], "the paused leader cycled beside the new one");
    let w = standby.api().ok(&format!("/api/v1/workloads/{id}")).await.unwrap();
    assert_eq!((w["state"].clone(), w["attempt"].clone()), (json!("running"), json!(1)), "{w}");
    standby.stop().await;
    leader.stop().await;
}
