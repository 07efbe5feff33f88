//! Two levels of policy: the platform policy grants GPUs between tenants; a tenant's own policy
//! (here a hand-written WAT module) orders and places that tenant's work within its grant, sees
//! none of the other tenants' work, and cannot go beyond what it was granted.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use airtime_tests::{eventually, one_node_fleet, workload_reaches};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(40);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_own_policy_places_its_work_within_the_platforms_grant() {
    let (_db, cp, _agent) = one_node_fleet("shared", &["--simulate-gpus", "1:H100-SXM:81920"]).await.unwrap();
    let admin = cp.api();

    // The research tenant's admin uploads and activates the tenant's own policy: newest first.
    let research_token = cp.user("research", "lead@research.test", "tenant_admin").await.unwrap();
    cp.user("product", "lead@product.test", "tenant_admin").await.unwrap();
    let research = cp.api_as(&research_token);
    let wasm =
        wat::parse_file(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/wat/newest_pending_first.wat"))
            .unwrap();
    let uploaded = research.post_raw("/api/v1/policies?name=research-order", "application/wasm", wasm).await.unwrap();
    assert_eq!(uploaded.status, 201, "{}", uploaded.body);
    assert_eq!(uploaded.body["tenant"], "research");
    let id = uploaded.body["id"].as_str().unwrap().to_owned();
    research.created(&format!("/api/v1/policies/{id}/activate"), &json!({})).await.unwrap();

    // Hold the only GPU while the queue fills, so all three wait for the same decision.
    let blocker = submit(&admin, "default", "blocker", 100, &["sh", "-c", "sleep 2"]).await;
    workload_reaches(&admin, &blocker, "running", WAIT).await.unwrap();
    let urgent = submit(&admin, "research", "research-urgent", 50, &["sleep", "30"]).await;
    let newest = submit(&admin, "research", "research-newest", 1, &["sleep", "30"]).await;
    let other = submit(&admin, "product", "product-job", 10, &["sleep", "30"]).await;

    // The platform grants the GPU to research (its highest-priority work); research's policy
    // spends the grant on its newest workload instead.
    let placed = workload_reaches(&admin, &newest, "running", WAIT).await.unwrap();
    let place = placed["decisions"].as_array().unwrap().iter().find(|d| d["kind"] == "place").unwrap();
    assert_eq!(place["policy_name"], "research-order v1", "{place}");
    assert_eq!(place["reason"], "tenant order: newest first");

    let waiting = admin.ok(&format!("/api/v1/workloads/{urgent}")).await.unwrap();
    assert_eq!(waiting["state"], "pending");
    assert!(waiting["pending_reason"].as_str().unwrap().contains("research-order v1"), "{waiting}");

    // The tenant policy never saw product's work: nothing of product's was decided by it or refused.
    let product_job = admin.ok(&format!("/api/v1/workloads/{other}")).await.unwrap();
    assert_eq!(product_job["state"], "pending");
    for d in product_job["decisions"].as_array().unwrap() {
        assert_ne!(d["policy_name"], "research-order v1", "{d}");
        assert_ne!(d["kind"], "rejected", "{d}");
    }
    // And research's admin cannot see product's workload at all.
    let hidden = research.get(&format!("/api/v1/workloads/{other}")).await.unwrap();
    assert_eq!(hidden.status, 404, "{}", hidden.body);
    eventually("research's policy evaluated without failures", WAIT, || {
        let research = research.clone();
        let path = format!("/api/v1/policies/{id}/failures");
        async move { Ok(research.ok(&path).await?.as_array().map(Vec::is_empty).filter(|empty| *empty)) }
    })
    .await
    .unwrap();
    cp.stop().await;
}

async fn submit(api: &airtime_tests::Api, tenant: &str, name: &str, priority: i32, command: &[&str]) -> String {
    let body: Value = json!({"name": name, "tenant": tenant, "class": "batch_inference", "priority": priority,
                             "resources": {"gpu_count": 1}, "command": command});
    api.created("/api/v1/workloads", &body).await.unwrap()["id"].as_str().unwrap().to_owned()
}
