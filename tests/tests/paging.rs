//! Paging through lists that grow with the fleet and the work: an operator walks the queue, the
//! nodes and the GPUs a page at a time and sees each item exactly once, in the order of the whole
//! list — keyset pagination (the last item of a page is the cursor of the next), so a page deep in
//! a long list costs what the first one does. Real control plane, agents and PostgreSQL.

#![allow(clippy::unwrap_used)]

use airtime_tests::{Api, NodeAgent, fresh_control_plane, nodes_ready};
use serde_json::{Value, json};

/// Follows a list page by page: `cursor(last item)` names the next page's start.
async fn walk(api: &Api, path: &str, param: &str, limit: usize, cursor: impl Fn(&Value) -> String) -> Vec<Value> {
    let mut all = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let sep = if path.contains('?') { '&' } else { '?' };
        let url = match &next {
            Some(c) => format!("{path}{sep}limit={limit}&{param}={c}"),
            None => format!("{path}{sep}limit={limit}"),
        };
        let page = api.ok(&url).await.unwrap();
        let items = page.as_array().unwrap().clone();
        assert!(items.len() <= limit, "{url} answered {} items", items.len());
        let Some(last) = items.last() else { break };
        next = Some(cursor(last));
        all.extend(items);
    }
    all
}

fn ids(items: &[Value]) -> Vec<String> {
    items.iter().map(|i| i["id"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_pages_through_the_queue_and_the_fleet_and_sees_everything_once() {
    let (_db, cp) = fresh_control_plane(&[]).await.unwrap();
    let api = cp.api();
    let mut agents = Vec::new();
    for (name, gpus) in [("node-a", "2:H100:81920"), ("node-b", "3:L4:24576"), ("node-c", "2:H100:81920")] {
        agents.push(NodeAgent::start(&cp, name, &["--simulate-gpus", gpus]).await.unwrap());
    }
    nodes_ready(&api, 3).await.unwrap();

    // Seven gangs no node can hold: they stay in the queue.
    for i in 0..7 {
        let body = json!({"name": format!("gang-{i}"), "class": "training", "command": ["sleep", "300"],
                          "resources": {"gpu_count": 8, "cpu_millis": 10}});
        api.created("/api/v1/workloads", &body).await.unwrap();
    }
    let whole = api.ok("/api/v1/workloads?limit=1000").await.unwrap();
    let whole = whole.as_array().unwrap();
    assert_eq!(whole.len(), 7);
    let paged = walk(&api, "/api/v1/workloads", "before", 3, |w| w["id"].as_str().unwrap().to_owned()).await;
    assert_eq!(ids(&paged), ids(whole), "pages of 3 give the whole queue, newest first, each once");
    let filtered =
        walk(&api, "/api/v1/workloads?state=pending", "before", 2, |w| w["id"].as_str().unwrap().into()).await;
    assert_eq!(ids(&filtered), ids(whole), "a filter and a cursor combine");

    // A tenant's cursor cannot be another tenant's workload: it answers an empty page.
    let token = cp.user("other", "member@other.example", "tenant_member").await.unwrap();
    let theirs = cp.api_as(&token);
    let cursor = whole[3]["id"].as_str().unwrap();
    let page = theirs.ok(&format!("/api/v1/workloads?before={cursor}")).await.unwrap();
    assert_eq!(page, json!([]), "another tenant's workload is no cursor");

    // Nodes, two at a time, by name, each with exactly its own GPUs.
    let nodes = walk(&api, "/api/v1/nodes", "after", 2, |n| n["name"].as_str().unwrap().to_owned()).await;
    let names: Vec<&str> = nodes.iter().map(|n| n["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["node-a", "node-b", "node-c"]);
    let gpu_counts: Vec<usize> = nodes.iter().map(|n| n["gpus"].as_array().unwrap().len()).collect();
    assert_eq!(gpu_counts, [2, 3, 2]);
    for node in &nodes {
        assert!(node["gpus"].as_array().unwrap().iter().all(|g| g["node_id"] == node["id"]), "{node}");
    }
    assert_eq!(api.ok("/api/v1/nodes").await.unwrap().as_array().unwrap().len(), 3, "no limit: the whole fleet");

    // GPUs, three at a time: a page may end in the middle of a node and the next goes on from there.
    let all_gpus = api.ok("/api/v1/gpus").await.unwrap();
    let gpus = walk(&api, "/api/v1/gpus", "after", 3, |g| g["id"].as_str().unwrap().to_owned()).await;
    assert_eq!(gpus.len(), 7);
    assert_eq!(ids(&gpus), ids(all_gpus.as_array().unwrap()));

    // A cursor that is not one is a clear 400, not an empty page.
    let bad = api.get("/api/v1/gpus?after=gpu-0").await.unwrap();
    assert_eq!(bad.status, 400, "{}", bad.body);
    drop(agents);
}
