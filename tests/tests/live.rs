//! The live feed: Server-Sent Events of workload state changes, decisions and node states, read by
//! two callers at once — a tenant's member, who sees their tenant's work and never another's, and a
//! platform admin, who sees all — and resumed from an event's id after a reconnect.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use airtime_tests::{Api, one_node_fleet, workload_reaches};
use serde_json::{Value, json};

/// One stream's events as `(event, id, data)`, collected until `enough` says so or `wait` passes.
async fn collect(
    api: &Api,
    query: &str,
    wait: Duration,
    enough: impl Fn(&[(String, String, Value)]) -> bool,
) -> Vec<(String, String, Value)> {
    let mut response = reqwest::Client::new()
        .get(api.url(&format!("/api/v1/events/stream{query}")))
        .bearer_auth(api.token().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut text = String::new();
    let mut events = Vec::new();
    let deadline = tokio::time::Instant::now() + wait;
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(deadline, response.chunk()).await {
        text.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            let field = |name: &str| block.lines().find_map(|l| l.strip_prefix(name)).map(str::to_owned);
            if let (Some(event), Some(id), Some(data)) = (field("event: "), field("id: "), field("data: ")) {
                events.push((event, id, serde_json::from_str(&data).unwrap()));
            }
        }
        if enough(&events) {
            break;
        }
    }
    events
}

fn reached(events: &[(String, String, Value)], workload: &str, state: &str) -> bool {
    events.iter().any(|(e, _, d)| e == "workload" && d["workload_id"] == workload && d["to_state"] == state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_caller_sees_live_only_what_the_api_would_show_them() {
    let (_db, cp, _agent) = one_node_fleet("cpu-node", &["--no-nvml"]).await.unwrap();
    let admin = cp.api();
    let ann = admin.with_token(&cp.user("acme", "ann@acme.test", "tenant_member").await.unwrap());
    let bob = admin.with_token(&cp.user("globex", "bob@globex.test", "tenant_member").await.unwrap());
    let job =
        |name: &str| json!({"name": name, "class": "evaluation", "command": ["true"], "resources": {"cpu_millis": 10}});

    let (ann_api, admin_api) = (ann.clone(), admin.clone());
    let ann_feed =
        tokio::spawn(async move { collect(&ann_api, "?wait_s=8", Duration::from_secs(10), |_| false).await });
    let admin_feed =
        tokio::spawn(async move { collect(&admin_api, "?wait_s=8", Duration::from_secs(10), |_| false).await });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mine = ann.created("/api/v1/workloads", &job("ann-eval")).await.unwrap()["id"].as_str().unwrap().to_owned();
    let theirs = bob.created("/api/v1/workloads", &job("bob-eval")).await.unwrap()["id"].as_str().unwrap().to_owned();
    workload_reaches(&admin, &mine, "succeeded", Duration::from_secs(30)).await.unwrap();
    workload_reaches(&admin, &theirs, "succeeded", Duration::from_secs(30)).await.unwrap();

    let ann_events = ann_feed.await.unwrap();
    let admin_events = admin_feed.await.unwrap();
    // Ann sees her workload go pending → scheduled → running → succeeded, its placement decision,
    // and the node; nothing of Bob's.
    for state in ["pending", "running", "succeeded"] {
        assert!(reached(&ann_events, &mine, state), "{state} missing from {ann_events:?}");
    }
    assert!(ann_events.iter().any(|(e, _, d)| e == "decision" && d["workload_id"] == mine && d["decision"] == "place"));
    assert!(ann_events.iter().any(|(e, _, d)| e == "node" && d["name"] == "cpu-node" && d["state"] == "ready"));
    let leaked = ann_events.iter().any(|(_, _, d)| d.to_string().contains(&theirs) || d.to_string().contains("globex"));
    assert!(!leaked, "another tenant's work in Ann's feed: {ann_events:?}");
    // The admin sees both.
    assert!(reached(&admin_events, &mine, "succeeded") && reached(&admin_events, &theirs, "succeeded"));

    // A reconnect resumes after the last id it saw: nothing twice, nothing missed.
    let (_, first_id, _) =
        ann_events.iter().find(|(e, _, d)| e == "workload" && d["to_state"] == "pending").unwrap().clone();
    let resumed = collect(&ann, &format!("?after={first_id}&wait_s=2"), Duration::from_secs(5), |evs| {
        reached(evs, &mine, "succeeded")
    })
    .await;
    assert!(reached(&resumed, &mine, "succeeded"), "{resumed:?}");
    assert!(!reached(&resumed, &mine, "pending"), "the event before the cursor came again: {resumed:?}");
    let bad = ann.get("/api/v1/events/stream?after=yesterday").await.unwrap();
    assert_eq!(bad.status, 400, "{}", bad.body);
}
