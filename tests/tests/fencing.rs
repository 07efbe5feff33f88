//! Fencing: an agent that cannot reach the control plane for longer than its node's lease stops
//! its work (SIGTERM, then SIGKILL after the grace period) and reports it for requeueing; the work
//! runs again once the control plane answers — and never twice at once. And an agent that dies
//! takes its work with it: each workload's tether stops its whole process group with the grace
//! period. And an agent cut off by a network partition while the control plane runs on stops its
//! work before the control plane requeues it elsewhere. Real control plane, agents and PostgreSQL;
//! the control plane is killed for the outage, a network namespace is cut off for the partition.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use airtime_tests::{
    ControlPlane, Netns, NodeAgent, TestDb, eventually, fresh_control_plane, nodes_ready, workload_reaches,
};
use serde_json::json;

/// A training job that writes `start <attempt> <time>` to `journal` when it starts and `stop
/// <attempt> <time>` when SIGTERM ends it, so a story can see whether two attempts overlapped.
fn journaling_job(name: &str, journal: &std::path::Path, resources: serde_json::Value) -> serde_json::Value {
    let script = "echo \"start $AIRTIME_ATTEMPT $(date +%s.%N)\" >> \"$JOURNAL\"; \
                  trap 'echo \"stop $AIRTIME_ATTEMPT $(date +%s.%N)\" >> \"$JOURNAL\"; exit 0' TERM; \
                  while true; do sleep 0.1; done";
    json!({"name": name, "class": "training", "command": ["sh", "-c", script],
           "env": {"JOURNAL": journal.display().to_string()}, "resources": resources})
}

/// `(what, attempt, unix seconds)` lines the workload wrote.
fn journal(path: &std::path::Path) -> Vec<(String, u32, f64)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            Some((parts.next()?.to_owned(), parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_loses_the_control_plane_past_its_lease_stops_its_work_and_it_runs_again_once() {
    let db = TestDb::create().await.unwrap();
    let lease = ["--node-fence-after-ms", "4000"];
    let first = ControlPlane::start(&db, &lease).await.unwrap();
    let api = first.api();
    let mut settings = api.ok("/api/v1/settings/priorities").await.unwrap();
    settings["grace_period_s"] = json!(2);
    assert_eq!(api.put("/api/v1/settings/priorities", &settings).await.unwrap().status, 200);
    let _agent = NodeAgent::start(&first, "edge-1", &["--no-nvml"]).await.unwrap();
    nodes_ready(&api, 1).await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("journal");
    let w =
        api.created("/api/v1/workloads", &journaling_job("writer", &log, json!({"cpu_millis": 100}))).await.unwrap();
    let id = w["id"].as_str().unwrap().to_owned();
    workload_reaches(&api, &id, "running", Duration::from_secs(30)).await.unwrap();

    // The control plane goes away: within its lease the work runs on; past it, it is stopped.
    let address = first.url.trim_start_matches("http://").trim_end_matches('/').to_owned();
    first.stop().await;
    let gone = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!journal(&log).iter().any(|(what, ..)| what == "stop"), "stopped within the lease: {:?}", journal(&log));
    eventually("the agent to fence its work", Duration::from_secs(20), || {
        let log = log.clone();
        async move { Ok(journal(&log).iter().any(|(what, a, _)| what == "stop" && *a == 1).then_some(())) }
    })
    .await
    .unwrap();
    assert!(gone.elapsed() >= Duration::from_secs(3), "fenced after {:?}, before its 4 s lease", gone.elapsed());

    // The control plane is back: the stopped attempt is requeued, not failed, and runs again.
    let second = ControlPlane::start(&db, &["--listen", &address, lease[0], lease[1]]).await.unwrap();
    let api = second.api();
    eventually("the work to run again", Duration::from_secs(40), || {
        let (api, path) = (api.clone(), format!("/api/v1/workloads/{id}"));
        async move {
            let w = api.ok(&path).await?;
            Ok((w["state"] == "running" && w["attempt"] == 2).then_some(()))
        }
    })
    .await
    .unwrap();
    eventually("the second attempt's start", Duration::from_secs(20), || {
        let log = log.clone();
        async move { Ok(journal(&log).iter().any(|(what, a, _)| what == "start" && *a == 2).then_some(())) }
    })
    .await
    .unwrap();
    let lines = journal(&log);
    let at = |what: &str, attempt: u32| lines.iter().find(|(w, a, _)| w == what && *a == attempt).map(|l| l.2).unwrap();
    assert!(at("start", 2) > at("stop", 1), "the two attempts overlapped: {lines:?}");
    let detail = api.ok(&format!("/api/v1/workloads/{id}")).await.unwrap();
    let history = detail["history"].to_string();
    assert!(history.contains("fenced") && history.contains("requeued"), "{history}");
    assert!(!history.contains("\"failed\""), "a fenced attempt is not a failure: {history}");
    second.stop().await;
}

/// The pids of live processes whose environment names workload `id` (its process, its tether,
/// and everything they started), from `/proc`.
fn processes_of(id: &str) -> Vec<u32> {
    let wanted = format!("AIRTIME_WORKLOAD_ID={id}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // A zombie has ended; only its parent's wait is missing.
            let zombie = stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
            !zombie && environ.split(|b| *b == 0).any(|var| var == wanted.as_bytes())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_with_sigkill_takes_its_work_with_it_after_the_grace_period() {
    let (_db, cp) = fresh_control_plane(&[]).await.unwrap();
    let api = cp.api();
    let mut settings = api.ok("/api/v1/settings/priorities").await.unwrap();
    settings["grace_period_s"] = json!(3);
    assert_eq!(api.put("/api/v1/settings/priorities", &settings).await.unwrap().status, 200);
    let agent = NodeAgent::start(&cp, "doomed", &["--no-nvml"]).await.unwrap();
    nodes_ready(&api, 1).await.unwrap();

    // A job that ignores SIGTERM (only SIGKILL ends it), with a child of its own.
    let script = "trap '' TERM; sh -c 'sleep 600' & while true; do sleep 0.2; done";
    let w = api
        .created(
            "/api/v1/workloads",
            &json!({"name": "outlives-nothing", "class": "training", "command": ["sh", "-c", script],
                    "resources": {"cpu_millis": 100}}),
        )
        .await
        .unwrap();
    let id = w["id"].as_str().unwrap().to_owned();
    workload_reaches(&api, &id, "running", Duration::from_secs(30)).await.unwrap();
    let running = eventually("the job, its tether and its children", Duration::from_secs(10), || {
        let id = id.clone();
        async move { Ok(Some(processes_of(&id)).filter(|p| p.len() >= 3)) }
    })
    .await
    .unwrap();

    agent.kill().await;
    let killed = Instant::now();
    // Within the grace period the job that ignores SIGTERM still runs: the tether waits for it,
    // then kills the whole group, as the agent itself would have.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!processes_of(&id).is_empty(), "everything ended before the grace period: was {running:?}");
    eventually("every process of the workload to end", Duration::from_secs(15), || {
        let id = id.clone();
        async move { Ok(processes_of(&id).is_empty().then_some(())) }
    })
    .await
    .unwrap();
    let ended = killed.elapsed();
    assert!(ended >= Duration::from_millis(2500), "ended {ended:?} after the agent, before its 3 s grace");
    cp.stop().await;
}

/// The pids of workload `id`'s live processes of attempt `attempt` (see [`processes_of`]).
fn processes_of_attempt(id: &str, attempt: u32) -> Vec<u32> {
    let wanted = format!("AIRTIME_ATTEMPT={attempt}");
    processes_of(id)
        .into_iter()
        .filter(|pid| {
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            environ.split(|b| *b == 0).any(|var| var == wanted.as_bytes())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_partitioned_from_a_running_control_plane_stops_its_work_before_it_runs_elsewhere() {
    let netns = Netns::create().await.unwrap();
    let db = TestDb::create().await.unwrap();
    // Listening on every address: the host's agent and the API on loopback, the namespace's agent
    // through its veth pair.
    let cp = ControlPlane::start(&db, &["--listen", "0.0.0.0:0", "--node-fence-after-ms", "4000"]).await.unwrap();
    let api = cp.api();
    let mut settings = api.ok("/api/v1/settings/priorities").await.unwrap();
    settings["grace_period_s"] = json!(2);
    assert_eq!(api.put("/api/v1/settings/priorities", &settings).await.unwrap().status, 200);
    let _cut_off = NodeAgent::start_in(&cp, &netns, "cut-off", &["--simulate-gpus", "1:A100:40960"]).await.unwrap();
    nodes_ready(&api, 1).await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("journal");
    let w =
        api.created("/api/v1/workloads", &journaling_job("one-writer", &log, json!({"gpu_count": 1}))).await.unwrap();
    let id = w["id"].as_str().unwrap().to_owned();
    let first = workload_reaches(&api, &id, "running", Duration::from_secs(30)).await.unwrap();
    let _other = NodeAgent::start(&cp, "other", &["--simulate-gpus", "1:A100:40960"]).await.unwrap();
    nodes_ready(&api, 2).await.unwrap();

    // The partition: the control plane runs on and hears the other agent, not this one. It takes
    // the silent node for lost, and requeues its work only once the agent must have stopped it
    // (its lease, the grace period and a margin); the cut-off agent stops it after its lease.
    netns.partition().await.unwrap();
    let cut = Instant::now();
    let moved = eventually("the work to run again elsewhere", Duration::from_secs(40), || {
        let (api, path) = (api.clone(), format!("/api/v1/workloads/{id}"));
        async move {
            let w = api.ok(&path).await?;
            Ok((w["state"] == "running" && w["attempt"] == 2).then_some(w))
        }
    })
    .await
    .unwrap();
    assert_ne!(moved["node_id"], first["node_id"], "requeued onto the node it cannot reach: {moved}");
    assert!(
        cut.elapsed() >= Duration::from_secs(6),
        "requeued {:?} after the cut, before lease and grace",
        cut.elapsed()
    );
    eventually("the second attempt's start", Duration::from_secs(20), || {
        let log = log.clone();
        async move { Ok(journal(&log).iter().any(|(what, a, _)| what == "start" && *a == 2).then_some(())) }
    })
    .await
    .unwrap();
    let lines = journal(&log);
    let at = |what: &str, attempt: u32| lines.iter().find(|(w, a, _)| w == what && *a == attempt).map(|l| l.2);
    let stopped = at("stop", 1).unwrap_or_else(|| panic!("the cut-off copy never stopped: {lines:?}"));
    assert!(at("start", 2).unwrap() > stopped, "the two copies overlapped: {lines:?}");
    assert!(processes_of_attempt(&id, 1).is_empty(), "the cut-off copy still runs: {:?}", processes_of_attempt(&id, 1));

    // Healed: the cut-off agent is heard again and its node is ready, and the work still runs once,
    // where it was requeued; the old attempt is not started again.
    netns.heal().await.unwrap();
    eventually("the cut-off node to be ready again", Duration::from_secs(30), || {
        let api = api.clone();
        async move {
            let nodes = api.ok("/api/v1/nodes").await?;
            let ready =
                nodes.as_array().is_some_and(|n| n.iter().any(|n| n["name"] == "cut-off" && n["state"] == "ready"));
            Ok(ready.then_some(()))
        }
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let now = api.ok(&format!("/api/v1/workloads/{id}")).await.unwrap();
    assert_eq!(
        (now["state"].clone(), now["attempt"].clone(), now["node_id"].clone()),
        (json!("running"), json!(2), moved["node_id"].clone()),
        "{now}"
    );
    let starts: Vec<u32> = journal(&log).iter().filter(|(w, ..)| w == "start").map(|(_, a, _)| *a).collect();
    assert_eq!(starts, vec![1, 2], "each attempt started once");
    assert!(processes_of_attempt(&id, 1).is_empty() && !processes_of_attempt(&id, 2).is_empty(), "one live copy");
    cp.stop().await;
}
