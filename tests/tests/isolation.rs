//! Isolation, told as the stories it protects:
//! - tenant A cannot list, read, change, cancel or infer tenant B's workloads, policies, policy
//!   logs, decisions, tokens, members or audit entries — every answer about B's things is the very
//!   answer a made-up id gets, and the fleet shows B's GPUs only as "held";
//! - a node agent's credential acts for its own node only.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use airtime_tests::policies::BUMP_ALLOC;
use airtime_tests::{Api, NodeAgent, eventually, fresh_control_plane, nodes_ready, one_node_fleet, workload_reaches};
use serde_json::{Value, json};
use uuid::Uuid;

/// B's own policy: decides nothing at the upload trial (its clock is in 2023); live, it logs a line
/// that only B may read and gives up, so it has both logs and failures.
fn tenant_b_policy() -> Vec<u8> {
    wat::parse_str(format!(
        r#"(module
  (import "airtime" "log" (func $log (param i32 i32 i32)))
  (import "airtime" "fail" (func $fail (param i32 i32)))
  (memory (export "memory") 2)
  (global $heap (mut i32) (i32.const 65536))
  (data (i32.const 16) "b-confidential-note")
  (data (i32.const 64) "giving up on purpose")
  (func (export "airtime_abi_version") (result i32) (i32.const 1))
  {BUMP_ALLOC}
  (func (export "airtime_evaluate") (param $snap i32) (param $len i32) (result i64)
    (i32.store (i32.const 1024) (i32.const 0x43445441))
    (i32.store (i32.const 1028) (i32.const 0))
    (if (i64.gt_u (i64.load offset=8 (local.get $snap)) (i64.const 1750000000000))
      (then
        (call $log (i32.const 3) (i32.const 16) (i32.const 19))
        (call $fail (i32.const 64) (i32.const 20))))
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 8))))"#
    ))
    .unwrap()
}

fn id(v: &Value) -> String {
    v["id"].as_str().unwrap_or_else(|| panic!("no id in {v}")).to_owned()
}

fn ids(list: &Value) -> Vec<String> {
    list.as_array().unwrap().iter().map(id).collect()
}

/// `method path` with B's id and with a made-up one: both 404, with the same body.
async fn same_as_missing(api: &Api, method: &str, template: &str, theirs: &str, body: Option<&Value>) {
    let real = api.request(method, &template.replace("{}", theirs), body).await.unwrap();
    let made_up = api.request(method, &template.replace("{}", &Uuid::new_v4().to_string()), body).await.unwrap();
    assert_eq!(real.status, 404, "{method} {template} with another tenant's id: {}", real.body);
    assert_eq!(real.body, made_up.body, "{method} {template}: another tenant's resource must look missing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_a_can_neither_see_nor_touch_nor_infer_tenant_b() {
    let (_db, cp, _agent) = one_node_fleet("sim", &["--simulate-gpus", "2:H100-SXM:81920"]).await.unwrap();
    let admin = cp.api();

    let a_admin = cp.api_as(&cp.user("tenant-a", "ann@a.test", "tenant_admin").await.unwrap());
    let a_member = cp.api_as(&cp.user("tenant-a", "al@a.test", "tenant_member").await.unwrap());
    let b_admin = cp.api_as(&cp.user("tenant-b", "bea@b.test", "tenant_admin").await.unwrap());
    let b_member = cp.api_as(&cp.user("tenant-b", "bo@b.test", "tenant_member").await.unwrap());
    let tenants = admin.ok("/api/v1/tenants").await.unwrap();
    let tenant_b = id(tenants.as_array().unwrap().iter().find(|t| t["name"] == "tenant-b").unwrap());

    // B's world: a workload running on a GPU, one waiting forever (so B's own policy runs every
    // cycle), B's own policy (it logs a line and gives up, so it has logs and failures), an API
    // token, and A's own workload for contrast.
    let running = id(&b_member
        .created(
            "/api/v1/workloads",
            &json!({"name": "b-secret-training", "class": "training", "command": ["sleep", "60"], "resources": {"gpu_count": 1}}),
        )
        .await
        .unwrap());
    let waiting = id(&b_member
        .created(
            "/api/v1/workloads",
            &json!({"name": "b-too-big", "class": "training", "command": ["true"], "resources": {"gpu_count": 8}}),
        )
        .await
        .unwrap());
    let uploaded =
        b_admin.post_raw("/api/v1/policies?name=b-logger", "application/wasm", tenant_b_policy()).await.unwrap();
    assert_eq!(uploaded.status, 201, "a tenant admin uploads a policy of their own tenant: {}", uploaded.body);
    assert_eq!(uploaded.body["tenant"], "tenant-b");
    let b_policy = id(&uploaded.body);
    b_admin.created(&format!("/api/v1/policies/{b_policy}/activate"), &json!({})).await.unwrap();
    let b_token = b_admin.created("/api/v1/tokens", &json!({"name": "b-ci"})).await.unwrap();
    let mine = id(&a_member
        .created(
            "/api/v1/workloads",
            &json!({"name": "a-eval", "class": "evaluation", "command": ["true"], "resources": {"gpu_count": 0, "cpu_millis": 100}}),
        )
        .await
        .unwrap());
    workload_reaches(&admin, &running, "running", Duration::from_secs(30)).await.unwrap();
    workload_reaches(&admin, &mine, "succeeded", Duration::from_secs(30)).await.unwrap();
    eventually("B's policy to log", Duration::from_secs(30), || {
        let admin = admin.clone();
        let path = format!("/api/v1/policies/{b_policy}/logs");
        async move { Ok(admin.ok(&path).await?.as_array().filter(|l| !l.is_empty()).map(|_| ())) }
    })
    .await
    .unwrap();
    // B sees its own things (the setup is real).
    assert_eq!(b_member.ok(&format!("/api/v1/workloads/{running}")).await.unwrap()["state"], "running");
    let b_logs = b_admin.ok(&format!("/api/v1/policies/{b_policy}/logs")).await.unwrap();
    assert!(b_logs.to_string().contains("b-confidential-note"), "{b_logs}");

    for (who, a) in [("A admin", &a_admin), ("A member", &a_member)] {
        // Lists show only A's own: workloads (even when asking for B by name), decisions, policies,
        // tenants, tokens, and the standing summary.
        let workloads = ids(&a.ok("/api/v1/workloads?limit=1000").await.unwrap());
        assert!(workloads.contains(&mine), "{who}");
        assert!(!workloads.contains(&running) && !workloads.contains(&waiting), "{who} lists B's work");
        assert_eq!(a.ok("/api/v1/workloads?tenant=tenant-b").await.unwrap(), json!([]), "{who}");
        let decisions = a.ok("/api/v1/decisions?limit=1000").await.unwrap();
        assert!(
            decisions.as_array().unwrap().iter().all(|d| d["workload_id"] == mine.as_str()),
            "{who} sees decisions about B's work: {decisions}"
        );
        assert_eq!(a.ok(&format!("/api/v1/decisions?workload_id={running}")).await.unwrap(), json!([]), "{who}");
        assert!(!ids(&a.ok("/api/v1/policies").await.unwrap()).contains(&b_policy), "{who} lists B's policy");
        assert!(!a.ok("/api/v1/decisions?limit=1000").await.unwrap().to_string().contains("b-confidential"), "{who}");
        let tenants = a.ok("/api/v1/tenants").await.unwrap();
        assert!(tenants.as_array().unwrap().iter().all(|t| t["name"] == "tenant-a"), "{who}: {tenants}");
        let summary = a.ok("/api/v1/tenants/summary").await.unwrap();
        assert!(!summary.to_string().contains("tenant-b"), "{who}: {summary}");
        assert!(!ids(&a.ok("/api/v1/tokens?include_revoked=true").await.unwrap()).contains(&id(&b_token)), "{who}");

        // Reading, changing or cancelling B's things answers exactly what a made-up id answers.
        same_as_missing(a, "GET", "/api/v1/workloads/{}", &running, None).await;
        same_as_missing(a, "POST", "/api/v1/workloads/{}/cancel", &running, None).await;
        same_as_missing(a, "GET", "/api/v1/policies/{}", &b_policy, None).await;
        same_as_missing(a, "GET", "/api/v1/policies/{}/logs", &b_policy, None).await;
        same_as_missing(a, "GET", "/api/v1/policies/{}/failures", &b_policy, None).await;
        same_as_missing(a, "GET", "/api/v1/policies/{}/shadow-results", &b_policy, None).await;
        same_as_missing(a, "POST", "/api/v1/policies/{}/activate", &b_policy, Some(&json!({}))).await;
        same_as_missing(a, "DELETE", "/api/v1/policies/{}", &b_policy, None).await;
        same_as_missing(a, "DELETE", "/api/v1/tokens/{}", &id(&b_token), None).await;
        same_as_missing(a, "GET", "/api/v1/tenants/{}/members", &tenant_b, None).await;

        // Submitting into B is refused exactly like submitting into a tenant that does not exist.
        let into = |tenant: &str| {
            json!({"name": "sneaky", "tenant": tenant, "class": "evaluation", "command": ["true"],
                   "resources": {"gpu_count": 0, "cpu_millis": 100}})
        };
        let into_b = a.post("/api/v1/workloads", &into("tenant-b")).await.unwrap();
        let into_nowhere = a.post("/api/v1/workloads", &into("tenant-nowhere")).await.unwrap();
        assert_eq!((into_b.status, &into_b.body["error"]["code"]), (422, &json!("unknown_tenant")), "{who}");
        assert_eq!(into_b.body["error"]["code"], into_nowhere.body["error"]["code"], "{who}");

        // The fleet shows B's GPU as held, never by what.
        let gpus = a.ok("/api/v1/gpus").await.unwrap();
        let held: Vec<&Value> = gpus.as_array().unwrap().iter().filter(|g| g["held"] == true).collect();
        assert!(!held.is_empty(), "{who}: B's workload holds a GPU: {gpus}");
        assert!(held.iter().all(|g| g["workload_id"].is_null()), "{who} sees B's workload id on a GPU: {gpus}");
        let nodes = a.ok("/api/v1/nodes").await.unwrap();
        assert!(!nodes.to_string().contains(&running), "{who}: {nodes}");
    }

    // Nor does A's audit log mention B; B's admin sees B's changes.
    let a_audit = a_admin.ok("/api/v1/audit?limit=1000").await.unwrap();
    assert!(!a_audit.to_string().contains("tenant-b") && !a_audit.to_string().contains(&b_policy), "{a_audit}");
    let b_audit = b_admin.ok("/api/v1/audit?limit=1000").await.unwrap();
    let b_actions: Vec<&str> = b_audit.as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    for action in ["workload.submit", "policy.upload", "policy.activate", "token.create"] {
        assert!(b_actions.contains(&action), "{action} missing from B's audit log: {b_actions:?}");
    }

    // B's work was not touched; the platform admin sees everyone's.
    assert_eq!(b_member.ok(&format!("/api/v1/workloads/{running}")).await.unwrap()["state"], "running");
    let everything = ids(&admin.ok("/api/v1/workloads?limit=1000").await.unwrap());
    assert!(everything.contains(&running) && everything.contains(&mine));
    let gpus = admin.ok("/api/v1/gpus").await.unwrap();
    assert!(gpus.as_array().unwrap().iter().any(|g| g["workload_id"] == running.as_str()), "{gpus}");
    cp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_credential_acts_for_its_own_node_only() {
    let (_db, cp) = fresh_control_plane(&[]).await.unwrap();
    let admin = cp.api();
    let one = NodeAgent::start(&cp, "node-one", &["--simulate-gpus", "1:L4:24576"]).await.unwrap();
    let two = NodeAgent::start(&cp, "node-two", &["--simulate-gpus", "1:L4:24576"]).await.unwrap();
    let nodes = nodes_ready(&admin, 2).await.unwrap();
    let node_id = |name: &str| id(nodes.as_array().unwrap().iter().find(|n| n["name"] == name).unwrap());
    let (one_id, two_id) = (node_id("node-one"), node_id("node-two"));

    // A workload on node two, running.
    let work = id(&admin
        .created(
            "/api/v1/workloads",
            &json!({"name": "on-two", "class": "evaluation", "command": ["sleep", "60"], "resources": {"gpu_count": 1}}),
        )
        .await
        .unwrap());
    let running = workload_reaches(&admin, &work, "running", Duration::from_secs(30)).await.unwrap();
    let work_attempt = running["attempt"].clone();
    // `agent` holds the credential of the node that does NOT run the workload; `foreign` runs it.
    let (own, own_name, holder, foreign, foreign_name) = if running["node_id"] == one_id.as_str() {
        (&two_id, "node-two", &two, &one_id, "node-one")
    } else {
        (&one_id, "node-one", &one, &two_id, "node-two")
    };
    let agent = cp.api_as(&holder.credential().await.unwrap());
    let made_up = Uuid::new_v4().to_string();

    // Telemetry, the long-poll and events for the other node: answered as for a node that does
    // not exist, and nothing changes.
    for node in [foreign.as_str(), made_up.as_str()] {
        let telemetry = agent
            .post(&format!("/api/v1/agent/nodes/{node}/telemetry"), &json!({"cpu_util": 1.0, "memory_used_mb": 1}))
            .await
            .unwrap();
        assert_eq!((telemetry.status, &telemetry.body["error"]["code"]), (404, &json!("node_not_found")), "{node}");
        let poll = agent.get(&format!("/api/v1/agent/nodes/{node}/assignments")).await.unwrap();
        assert_eq!((poll.status, &poll.body["error"]["code"]), (404, &json!("node_not_found")), "{node}");
        let exited = agent
            .post(
                &format!("/api/v1/agent/nodes/{node}/workloads/{work}/events"),
                &json!({"attempt": work_attempt, "event": "exited", "exit_code": 0}),
            )
            .await
            .unwrap();
        assert_eq!((exited.status, &exited.body["error"]["code"]), (404, &json!("node_not_found")), "{node}");
    }
    // Nor can it register under the other node's name, nor post the event as its own node.
    let register = agent
        .post(
            "/api/v1/agent/register",
            &json!({"name": foreign_name, "hostname": "h", "cpu_millis": 1000,
                    "memory_mb": 1024, "agent_version": "0", "gpu_source": "none"}),
        )
        .await
        .unwrap();
    assert_eq!((register.status, &register.body["error"]["code"]), (404, &json!("node_not_found")));
    let via_own = agent
        .post(
            &format!("/api/v1/agent/nodes/{own}/workloads/{work}/events"),
            &json!({"attempt": work_attempt, "event": "exited", "exit_code": 0}),
        )
        .await
        .unwrap();
    assert_eq!(via_own.status, 404, "not a workload of its node: {}", via_own.body);
    assert_eq!(admin.ok(&format!("/api/v1/workloads/{work}")).await.unwrap()["state"], "running", "nothing changed");
    // A node credential is no user credential.
    assert_eq!(agent.get("/api/v1/workloads").await.unwrap().status, 403);

    // Revoked, it is refused everywhere.
    let credentials = admin.ok("/api/v1/node-credentials").await.unwrap();
    let credential = credentials
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["node_name"] == own_name && c["revoked_at"].is_null())
        .unwrap();
    assert_eq!(admin.delete(&format!("/api/v1/node-credentials/{}", id(credential))).await.unwrap().status, 200);
    let refused = agent
        .post(&format!("/api/v1/agent/nodes/{own}/telemetry"), &json!({"cpu_util": 0.5, "memory_used_mb": 1}))
        .await
        .unwrap();
    assert_eq!(refused.status, 401, "{}", refused.body);
    cp.stop().await;
}
