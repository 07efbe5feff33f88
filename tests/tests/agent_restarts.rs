//! Agent restarts that leave work running: a node agent stopped for an upgrade (SIGTERM, as
//! `systemctl restart` stops it) or killed outright (SIGKILL, a crash) and started again finds its
//! predecessor's workloads still running under their tethers, adopts them, and the control plane
//! keeps them as they are — the same attempt, the same process, finishing once with all their
//! output. An agent that stays down lets the node's lease run out, and only then is its work
//! stopped and requeued. Real control plane, real agents, real PostgreSQL.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use airtime_tests::{
    Api, ControlPlane, NodeAgent, TestDb, eventually, fresh_control_plane, nodes_ready, one_node_fleet,
    workload_reaches,
};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);
/// Lines the counting job prints, one every 50 ms.
const LINES: u32 = 120;

/// A job that prints `line 1` … `line N` on stdout (every tenth also on stderr), one every 50 ms,
/// and writes its pid to `pidfile` first, so the story can tell whether the process it sees at
/// the end is the one that started.
fn counting_job(pidfile: &std::path::Path) -> Value {
    let script = format!(
        "echo $$ > '{}'; i=1; while [ $i -le {LINES} ]; do echo \"line $i\"; \
         [ $((i % 10)) -eq 0 ] && echo \"tenth $i\" >&2; i=$((i + 1)); sleep 0.05; done",
        pidfile.display()
    );
    json!({"name": "counts-through-restarts", "class": "fine_tuning", "command": ["sh", "-c", script],
           "resources": {"cpu_millis": 100}})
}

/// The pid the job wrote to `pidfile` when it started.
async fn job_pid(pidfile: &std::path::Path) -> u32 {
    eventually("the job's pid", WAIT, || {
        let pidfile = pidfile.to_path_buf();
        async move { Ok(std::fs::read_to_string(&pidfile).ok().and_then(|p| p.trim().parse().ok())) }
    })
    .await
    .unwrap()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z')))
}

/// The workload's output lines for `stream`, in the order the control plane serves them.
async fn output(api: &Api, id: &str, stream: &str) -> Vec<String> {
    let logs = api.ok(&format!("/api/v1/workloads/{id}/logs?stream={stream}&tail=5000")).await.unwrap();
    logs["lines"].as_array().unwrap().iter().map(|l| l["text"].as_str().unwrap().to_owned()).collect()
}

/// Every expected line is there, in order; a line shipped twice around the restart (acknowledged
/// by the control plane, not yet recorded by the agent that died) is tolerated, a missing one not.
fn assert_complete(lines: &[String], expected: &[String]) {
    let mut deduplicated: Vec<&String> = Vec::new();
    for line in lines {
        if !deduplicated.contains(&line) {
            deduplicated.push(line);
        }
    }
    let expected: Vec<&String> = expected.iter().collect();
    assert_eq!(deduplicated, expected, "every line once, in order (shipped: {} lines)", lines.len());
    assert!(lines.len() <= expected.len() + 25, "{} lines shipped twice", lines.len() - expected.len());
}

/// How the agent process goes.
enum Going {
    /// SIGTERM, as `systemctl restart` or an upgrade stops it.
    Stopped,
    /// SIGKILL, as a crash or the OOM killer ends it.
    Killed,
}

/// The story both restarts tell: the job runs, the agent goes, the job runs on with no agent for a
/// second, the agent comes back, and the job finishes once, attempt 1, same process, every line of
/// its output shipped.
async fn a_job_runs_through_an_agent_restart(going: Going) {
    // Agents find their node's workloads by its name: each story has a node of its own.
    let node = match going {
        Going::Stopped => "upgraded",
        Going::Killed => "crashed",
    };
    let (_db, cp) = fresh_control_plane(&[]).await.unwrap();
    let api = cp.api();
    let mut agent = NodeAgent::start(&cp, node, &["--no-nvml"]).await.unwrap();
    nodes_ready(&api, 1).await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let w = api.created("/api/v1/workloads", &counting_job(&pidfile)).await.unwrap();
    let id = w["id"].as_str().unwrap().to_owned();
    workload_reaches(&api, &id, "running", WAIT).await.unwrap();
    let pid = job_pid(&pidfile).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;

    match going {
        Going::Stopped => {
            let status = agent.terminate().await.unwrap();
            assert!(status.success(), "the agent's clean stop: {status}");
        }
        Going::Killed => agent.crash().await,
    }
    // No agent runs: the job does, and the control plane still shows it running.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(alive(pid), "the job ended with its agent");
    let shown = api.ok(&format!("/api/v1/workloads/{id}")).await.unwrap();
    assert_eq!((shown["state"].as_str(), shown["attempt"].as_u64()), (Some("running"), Some(1)), "{shown}");

    agent.restart().await.unwrap();
    let done = workload_reaches(&api, &id, "succeeded", WAIT).await.unwrap();
    assert_eq!(done["attempt"], 1, "the same attempt finished: {done}");
    let history = done["history"].to_string();
    assert!(!history.contains("requeued") && !history.contains("failed"), "{history}");
    let first_pid = std::fs::read_to_string(&pidfile).unwrap();
    assert_eq!(first_pid.trim(), pid.to_string(), "the job never started again");

    let stdout: Vec<String> = (1..=LINES).map(|i| format!("line {i}")).collect();
    let stderr: Vec<String> = (1..=LINES).filter(|i| i % 10 == 0).map(|i| format!("tenth {i}")).collect();
    let shipped = eventually("all of the job's output", WAIT, || {
        let (api, id, want) = (api.clone(), id.clone(), stdout.len());
        async move {
            let lines = output(&api, &id, "stdout").await;
            let mut seen = lines.clone();
            seen.sort();
            seen.dedup();
            Ok((seen.len() >= want).then_some(lines))
        }
    })
    .await
    .unwrap();
    assert_complete(&shipped, &stdout);
    assert_complete(&output(&api, &id, "stderr").await, &stderr);
    let mut kept = shipped.clone();
    kept.sort();
    kept.dedup();
    eprintln!(
        "agent-restart ({node}): the job ran on through it — same process, attempt 1, {} of {LINES} stdout lines kept, {} shipped twice",
        kept.len(),
        shipped.len() - kept.len()
    );
    let node = &api.ok("/api/v1/nodes").await.unwrap()[0];
    assert_eq!(node["agent_protocol"], "1.3", "{node}");
    cp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_stopped_for_an_upgrade_and_started_again_leaves_its_job_running_to_finish_once_with_all_its_output() {
    a_job_runs_through_an_agent_restart(Going::Stopped).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_and_started_again_adopts_its_running_job_which_finishes_once_with_all_its_output() {
    a_job_runs_through_an_agent_restart(Going::Killed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_crashes_and_stays_down_keeps_its_work_until_the_lease_runs_out_then_it_is_stopped_and_requeued()
{
    let db = TestDb::create().await.unwrap();
    // A short lease: the node counts lost after 3 s without a heartbeat, its work is fenced at
    // 4 s and requeued after the lease, the grace period and 5 s.
    let cp = ControlPlane::start(&db, &["--node-fence-after-ms", "4000"]).await.unwrap();
    let api = cp.api();
    let mut settings = api.ok("/api/v1/settings/priorities").await.unwrap();
    settings["grace_period_s"] = json!(2);
    assert_eq!(api.put("/api/v1/settings/priorities", &settings).await.unwrap().status, 200);
    let mut agent = NodeAgent::start(&cp, "gone-for-good", &["--no-nvml"]).await.unwrap();
    nodes_ready(&api, 1).await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let script = format!("echo $$ > '{}'; while true; do sleep 0.1; done", pidfile.display());
    let w = api
        .created(
            "/api/v1/workloads",
            &json!({"name": "outlives-its-agent-a-while", "class": "training", "command": ["sh", "-c", script],
                    "resources": {"cpu_millis": 100}}),
        )
        .await
        .unwrap();
    let id = w["id"].as_str().unwrap().to_owned();
    workload_reaches(&api, &id, "running", WAIT).await.unwrap();
    let pid = job_pid(&pidfile).await;

    agent.crash().await;
    let crashed = Instant::now();
    // Within the lease the work runs on, as the control plane shows it.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert!(alive(pid), "the job ended with its agent, before the lease ran out");
    let shown = api.ok(&format!("/api/v1/workloads/{id}")).await.unwrap();
    assert_eq!(shown["state"], "running", "{shown}");
    eventually("the job to be stopped by its tether", Duration::from_secs(20), || async move {
        Ok((!alive(pid)).then_some(()))
    })
    .await
    .unwrap();
    let stopped = crashed.elapsed();
    // The lease the agent last renewed ran out 4 s after its last answered heartbeat (up to half
    // a second before the crash); the tether checks it every second.
    assert!(stopped >= Duration::from_millis(3000), "stopped {stopped:?} after the crash, before the lease ran out");
    let requeued = workload_reaches(&api, &id, "pending", Duration::from_secs(30)).await.unwrap();
    let since_stop = crashed.elapsed();
    assert!(requeued["history"].to_string().contains("requeued"), "{requeued}");
    assert!(since_stop > stopped, "requeued only after the work had stopped");
    cp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_of_the_previous_protocol_registers_and_one_of_a_newer_protocol_is_told_to_upgrade_the_control_plane()
{
    let (_db, cp) = fresh_control_plane(&[]).await.unwrap();
    let api = cp.api();
    let enrol = |name: &'static str| {
        let cp = &cp;
        async move {
            let token = cp.enrolment_token(name).await.unwrap();
            let enrolled = cp
                .anonymous()
                .created("/api/v1/agent/enrol", &json!({"enrolment_token": token, "name": name}))
                .await
                .unwrap();
            cp.api_as(enrolled["credential"].as_str().unwrap())
        }
    };
    // Exactly what a 1.0 agent (before protocol versions and adoption) sends when it registers.
    let previous = json!({"name": "old-agent", "hostname": "old-agent", "cpu_millis": 4000, "memory_mb": 8192,
                          "labels": {}, "cost_per_hour": null, "agent_version": "0.2.0", "gpu_source": "none",
                          "gpus": []});
    let node = enrol("old-agent").await;
    let registered = node.created("/api/v1/agent/register", &previous).await.unwrap();
    assert!(registered["lease_ms"].as_u64().is_some(), "{registered}");
    let shown = api.ok("/api/v1/nodes").await.unwrap();
    let old = shown.as_array().unwrap().iter().find(|n| n["name"] == "old-agent").unwrap().clone();
    assert_eq!((old["agent_version"].as_str(), old["agent_protocol"].as_str()), (Some("0.2.0"), Some("1.0")), "{old}");

    let mut newer = previous.clone();
    newer["name"] = json!("new-agent");
    newer["hostname"] = json!("new-agent");
    // One minor version past this control plane's (1.3).
    newer["protocol"] = json!("1.4");
    let node = enrol("new-agent").await;
    let refused = node.post("/api/v1/agent/register", &newer).await.unwrap();
    assert_eq!(refused.status, 422, "{}", refused.body);
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("upgrade the control plane first"), "{message}");
    cp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_ends_while_its_agent_is_down_is_reported_as_it_ended_and_never_runs_again() {
    let (_db, cp, mut agent) = one_node_fleet("down-at-the-end", &["--no-nvml"]).await.unwrap();
    let api = cp.api();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let starts = dir.path().join("starts");
    // Records each start, prints a line, waits a second, prints another and exits 3.
    let script = format!(
        "echo $$ > '{}'; echo started >> '{}'; echo before; sleep 1; echo after; exit 3",
        pidfile.display(),
        starts.display()
    );
    let w = api
        .created(
            "/api/v1/workloads",
            &json!({"name": "ends-alone", "class": "evaluation", "command": ["sh", "-c", script],
                    "resources": {"cpu_millis": 100}}),
        )
        .await
        .unwrap();
    let id = w["id"].as_str().unwrap().to_owned();
    let pid = job_pid(&pidfile).await;
    agent.terminate().await.unwrap();
    eventually("the job to end with no agent", WAIT, || async move { Ok((!alive(pid)).then_some(())) }).await.unwrap();
    agent.restart().await.unwrap();
    let ended = workload_reaches(&api, &id, "failed", WAIT).await.unwrap();
    assert_eq!((ended["attempt"].as_u64(), ended["exit_code"].as_i64()), (Some(1), Some(3)), "{ended}");
    let output = eventually("its output", WAIT, || {
        let (api, id) = (api.clone(), id.clone());
        async move {
            let lines = output(&api, &id, "stdout").await;
            Ok((lines.len() >= 2).then_some(lines))
        }
    })
    .await
    .unwrap();
    assert_eq!(output, ["before", "after"]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = std::fs::read_to_string(&starts).unwrap();
    assert_eq!(started.lines().count(), 1, "it ran once");
    cp.stop().await;
}
