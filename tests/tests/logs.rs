//! Logs a user can read, story by story: real control plane and agent processes, real PostgreSQL.
//! What a workload prints reaches the API through its agent (chunked, bounded), by attempt and
//! stream, with a tail, followed live, within a retention limit, and under its tenant's isolation.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::time::Duration;

use airtime_tests::{Api, NodeAgent, eventually, fresh_control_plane, nodes_ready, one_node_fleet, workload_reaches};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

async fn submit(api: &Api, name: &str, script: &str) -> String {
    let w = api
        .created(
            "/api/v1/workloads",
            &json!({"name": name, "class": "evaluation", "command": ["sh", "-c", script],
                    "resources": {"gpu_count": 0, "cpu_millis": 100}}),
        )
        .await
        .unwrap();
    w["id"].as_str().unwrap().to_owned()
}

fn texts(logs: &Value) -> Vec<String> {
    logs["lines"].as_array().unwrap().iter().map(|l| l["text"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_jobs_output_says_why_in_its_detail_and_reads_back_by_stream_and_tail() {
    let (_db, cp, _agent) = one_node_fleet("cpu-node", &["--no-nvml"]).await.unwrap();
    let api = cp.api();

    let id = submit(
        &api,
        "oom",
        "for i in 1 2 3; do echo out $i; done; printf 'bin\\000ary\\n'; echo 'oops: out of memory' >&2; exit 3",
    )
    .await;
    workload_reaches(&api, &id, "failed", WAIT).await.unwrap();

    // The detail of a failed workload carries its last lines: why it failed, without a log search.
    let detail = eventually("the failed attempt's last lines in its detail", WAIT, || {
        let (api, path) = (api.clone(), format!("/api/v1/workloads/{id}"));
        async move {
            let w = api.ok(&path).await?;
            let has = w["last_output"].as_array().is_some_and(|l| l.iter().any(|t| t == "oops: out of memory"));
            Ok(has.then_some(w))
        }
    })
    .await
    .unwrap();
    assert_eq!(detail["exit_code"], 3);

    let all = api.ok(&format!("/api/v1/workloads/{id}/logs")).await.unwrap();
    let mut lines = texts(&all);
    lines.sort();
    // A binary byte is shown, not lost with its batch: NUL cannot travel in JSON.
    assert_eq!(lines, ["bin\u{FFFD}ary", "oops: out of memory", "out 1", "out 2", "out 3"], "{all}");
    assert!(all["lines"].as_array().unwrap().iter().all(|l| l["attempt"] == 1));
    let stderr = api.ok(&format!("/api/v1/workloads/{id}/logs?stream=stderr")).await.unwrap();
    assert_eq!(texts(&stderr), ["oops: out of memory"]);
    let stdout = api.ok(&format!("/api/v1/workloads/{id}/logs?stream=stdout&tail=2")).await.unwrap();
    assert_eq!(texts(&stdout), ["out 3", "bin\u{FFFD}ary"]);
    // Nothing new since the cursor.
    let since = api.ok(&format!("/api/v1/workloads/{id}/logs?after={}", all["cursor"])).await.unwrap();
    assert!(texts(&since).is_empty(), "{since}");
    let no_attempt = api.ok(&format!("/api/v1/workloads/{id}/logs?attempt=2")).await.unwrap();
    assert!(texts(&no_attempt).is_empty());

    // Bad queries are refused clearly; another tenant cannot read it, nor learn it exists.
    let bad = api.get(&format!("/api/v1/workloads/{id}/logs?tail=20000")).await.unwrap();
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body["error"]["message"].as_str().unwrap().contains("tail is at most"), "{}", bad.body);
    let bad = api.get(&format!("/api/v1/workloads/{id}/logs?stream=stdin")).await.unwrap();
    assert_eq!(bad.status, 400, "{}", bad.body);
    let stranger = api.with_token(&cp.user("tenant-b", "b@b.test", "tenant_admin").await.unwrap());
    let hidden = stranger.get(&format!("/api/v1/workloads/{id}/logs")).await.unwrap();
    assert_eq!(hidden.status, 404, "{}", hidden.body);
    let hidden = stranger.get(&format!("/api/v1/workloads/{id}")).await.unwrap();
    assert_eq!(hidden.status, 404, "{}", hidden.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn following_a_running_job_streams_its_lines_as_they_come_and_ends_with_it() {
    let (_db, cp, _agent) = one_node_fleet("cpu-node", &["--no-nvml"]).await.unwrap();
    let api = cp.api();

    let id = submit(&api, "ticker", "for i in 1 2 3 4 5 6; do echo tick $i; sleep 0.5; done").await;
    workload_reaches(&api, &id, "running", WAIT).await.unwrap();
    let started = std::time::Instant::now();
    let response = reqwest::Client::new()
        .get(api.url(&format!("/api/v1/workloads/{id}/logs?follow=true")))
        .bearer_auth(api.token().unwrap())
        // As browsers and most clients ask: the stream still comes line by line, uncompressed.
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    // The answer ends by itself once the workload has ended and its output is in.
    let body = tokio::time::timeout(WAIT, response.text()).await.expect("the follow ends").unwrap();
    let lines: Vec<String> =
        body.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()["text"].as_str().unwrap().to_owned()).collect();
    let expected: Vec<String> = (1..=6).map(|i| format!("tick {i}")).collect();
    assert_eq!(lines, expected, "every line, once, in order");
    assert!(started.elapsed() >= Duration::from_secs(1), "it streamed while the job ran");
    workload_reaches(&api, &id, "succeeded", WAIT).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chatty_job_keeps_only_its_newest_output_within_the_limit() {
    let (_db, cp) = fresh_control_plane(&["--log-bytes-per-workload", "65536"]).await.unwrap();
    let api = cp.api();
    let _agent = NodeAgent::start(&cp, "cpu-node", &["--no-nvml"]).await.unwrap();
    nodes_ready(&api, 1).await.unwrap();

    // About 230 KB of output, well past the 64 KiB the control plane keeps for one workload.
    let id = submit(&api, "chatty", "seq 1 40000").await;
    workload_reaches(&api, &id, "succeeded", WAIT).await.unwrap();
    let logs = eventually("the last line to be stored", WAIT, || {
        let (api, path) = (api.clone(), format!("/api/v1/workloads/{id}/logs?tail=1"));
        async move {
            let logs = api.ok(&path).await?;
            Ok((texts(&logs) == ["40000"]).then_some(logs))
        }
    })
    .await
    .unwrap();
    assert!(
        logs["dropped_bytes"].as_i64().unwrap() > 100_000,
        "the oldest output was dropped: {}",
        logs["dropped_bytes"]
    );
    let kept = api.ok(&format!("/api/v1/workloads/{id}/logs")).await.unwrap();
    let kept = texts(&kept);
    let bytes: usize = kept.iter().map(|l| l.len() + 1).sum();
    assert!(bytes <= 65_536, "within the limit: {bytes} bytes");
    assert_eq!(kept.last().map(String::as_str), Some("40000"), "the newest output is what is kept");
    let first: u32 = kept[0].parse().unwrap();
    let expected: Vec<String> = (first..=40000).map(|i| i.to_string()).collect();
    assert_eq!(kept, expected, "what is kept is whole and in order");
}
