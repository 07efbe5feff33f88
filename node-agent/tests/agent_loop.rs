//! The agent's loops against a small fake control plane that speaks `docs/agent-protocol.md`:
//! real HTTP, real child processes. The full end-to-end test with the real control plane lives in
//! the workspace's `tests/` crate.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use uuid::Uuid;

use support::{TestResult, run, start_agent, start_fake, stop, unix_nanos};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_and_stops_workloads_from_the_desired_state() -> TestResult {
    let (cp, url) = start_fake().await?;
    let dir = tempfile::tempdir()?;
    let agent = start_agent(&url, dir.path(), &["--simulate-gpus", "2:H100-SXM:81920"])?;

    // Registration advertises the simulated GPUs, flagged as such.
    let registration = cp.wait_for("registration", |cp| cp.recorded().registrations.first().cloned()).await;
    assert_eq!(registration.name, "test-node");
    assert_eq!(registration.hostname, "test-host");
    assert_eq!(registration.labels.get("zone").map(String::as_str), Some("a"));
    assert_eq!(serde_json::to_value(registration.gpu_source)?, json!("simulated"));
    let gpus: Vec<(u32, bool, u64)> = registration.gpus.iter().map(|g| (g.index, g.simulated, g.memory_mb)).collect();
    assert_eq!(gpus, vec![(0, true, 81920), (1, true, 81920)]);
    assert!(registration.cpu_millis >= 1000 && registration.memory_mb > 0);

    // A run assignment starts at once, on the GPU it names.
    let serve = Uuid::new_v4();
    let serve_run = run(
        serve,
        "date +%s%N > started; echo \"$CUDA_VISIBLE_DEVICES $MODEL\" > env.txt; exec sleep 30",
        &[1],
        30_000,
    );
    let version = cp.set_desired(vec![serve_run.clone()]);
    let started = cp.wait_for_event(serve, "started").await;
    assert_eq!(started["attempt"], 1);
    assert!(started["pid"].as_u64().unwrap_or(0) > 0, "{started}");
    let started_file = dir.path().join("started");
    cp.wait_for("the workload's start mark", |_| {
        std::fs::read_to_string(&started_file).ok().filter(|s| s.ends_with('\n'))
    })
    .await;
    let child_ran_at: u128 = std::fs::read_to_string(&started_file)?.trim().parse()?;
    let answered_at = cp.recorded().answered.get(&version).copied().ok_or("no answer time")?;
    let latency_us = child_ran_at.saturating_sub(unix_nanos(answered_at)) / 1000;
    eprintln!("long-poll answer → workload running (HTTP + decode + spawn + sh start): {latency_us} µs");
    assert!(latency_us < 1_000_000, "{latency_us} µs");
    assert_eq!(std::fs::read_to_string(dir.path().join("env.txt"))?, "1 llama\n");

    // Simulated telemetry follows the workload: GPU 1 busy, GPU 0 idle.
    cp.wait_for("busy telemetry on GPU 1", |cp| {
        cp.recorded().telemetry.iter().rev().find_map(|t| {
            let busy = t.gpus.get(1)?.util? > 0.9 && t.gpus.first()?.util? == 0.0;
            busy.then_some(())
        })
    })
    .await;

    // Stop: SIGTERM, reported with the reason.
    cp.set_desired(vec![stop(&serve_run, "preempted: by test", 200)]);
    let exited = cp.wait_for_event(serve, "exited").await;
    assert_eq!(
        exited,
        json!({"attempt": 1, "event": "exited", "signal": 15, "message": "stopped: preempted: by test"})
    );

    // An exit code is reported, and a finished attempt still listed is not started again.
    let batch = Uuid::new_v4();
    let missing = Uuid::new_v4();
    let mut missing_run = run(missing, "", &[], 1000);
    missing_run.command = vec!["/nonexistent/airtime-program".into()];
    cp.set_desired(vec![run(batch, "exit 3", &[0], 1000), missing_run]);
    let exited = cp.wait_for_event(batch, "exited").await;
    assert_eq!(exited["exit_code"], 3);
    assert_eq!(exited["signal"], Value::Null);
    let failed = cp.wait_for_event(missing, "failed_to_start").await;
    let message = failed["message"].as_str().unwrap_or_default();
    assert!(message.contains("No such file or directory"), "{message}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(cp.events_of(batch).len(), 2, "{:?}", cp.events_of(batch));
    assert_eq!(cp.events_of(missing).len(), 1);

    // A workload that disappears from the desired state is stopped too.
    let orphan = Uuid::new_v4();
    cp.set_desired(vec![run(orphan, "exec sleep 30", &[], 1000)]);
    cp.wait_for_event(orphan, "started").await;
    cp.set_desired(vec![]);
    let exited = cp.wait_for_event(orphan, "exited").await;
    assert_eq!(exited["message"], "stopped: no longer assigned to this node");

    // An agent without its binary cannot leave work to outlive it: shutdown stops what runs and
    // delivers its exit, to be requeued rather than counted failed, before returning.
    let last = Uuid::new_v4();
    cp.set_desired(vec![run(last, "exec sleep 30", &[0], 5000)]);
    cp.wait_for_event(last, "started").await;
    agent.shut_down().await?;
    let events = cp.events_of(last);
    let exited = events.iter().find(|e| e["event"] == "exited").ok_or("no exit delivered at shutdown")?;
    assert_eq!(exited["signal"], 15);
    assert_eq!(exited["message"], "stopped: the node agent is shutting down; the work is requeued");
    assert_eq!(exited["requeue"], true);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_waits_for_the_gpu_a_stopping_workload_releases() -> TestResult {
    let (cp, url) = start_fake().await?;
    let dir = tempfile::tempdir()?;
    let agent = start_agent(&url, dir.path(), &["--simulate-gpus", "1:L4:23034"])?;

    // The old workload takes 300 ms to checkpoint after SIGTERM.
    let old = Uuid::new_v4();
    let old_run = run(old, "trap 'sleep 0.3; exit 0' TERM; while :; do sleep 0.05; done", &[0], 10_000);
    cp.set_desired(vec![old_run.clone()]);
    cp.wait_for_event(old, "started").await;

    let new = Uuid::new_v4();
    cp.set_desired(vec![stop(&old_run, "preempted: by new", 10_000), run(new, "exec sleep 30", &[0], 1000)]);
    cp.wait_for_event(new, "started").await;
    // Events arrive in the order the agent produced them.
    let events: Vec<(Uuid, Value)> = cp.recorded().events.iter().map(|(id, event, _)| (*id, event.clone())).collect();
    let position = |id: Uuid, name: &str| events.iter().position(|(w, e)| *w == id && e["event"] == name);
    let old_exit = position(old, "exited").ok_or("old workload never exited")?;
    let new_start = position(new, "started").ok_or("new workload never started")?;
    assert_eq!(events[old_exit].1["exit_code"], 0, "{:?}", events[old_exit]);
    assert!(new_start > old_exit, "the new workload started before the old one released GPU 0");
    agent.shut_down().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_again_and_retries_events_when_the_control_plane_falters() -> TestResult {
    let (cp, url) = start_fake().await?;
    let dir = tempfile::tempdir()?;
    let agent = start_agent(&url, dir.path(), &["--heartbeat-ms", "100"])?;
    cp.wait_for("registration", |cp| cp.recorded().registrations.first().cloned()).await;

    // The control plane forgets the node: the next heartbeat gets 404 and the agent registers again.
    cp.recorded().forget_node = true;
    cp.wait_for("a second registration", |cp| (cp.recorded().registrations.len() >= 2).then_some(())).await;

    // Event posts fail with 503 twice: both events still arrive, once each, in order.
    cp.recorded().failing_events = 2;
    let quick = Uuid::new_v4();
    cp.set_desired(vec![run(quick, "exit 0", &[], 1000)]);
    cp.wait_for_event(quick, "exited").await;
    let names: Vec<Value> = cp.events_of(quick).into_iter().map(|e| e["event"].clone()).collect();
    assert_eq!(names, vec![json!("started"), json!("exited")]);

    // A CPU node reports no GPUs, and real host numbers.
    let last = cp.recorded().telemetry.last().cloned().ok_or("no telemetry")?;
    assert!(last.gpus.is_empty());
    assert!(last.memory_used_mb > 0);
    agent.shut_down().await?;
    Ok(())
}
