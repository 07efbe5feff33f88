//! Bad input gets a clear 4xx with the one JSON error shape, writes nothing, and the loop keeps
//! scheduling: malformed JSON, unknown fields, wrong types, oversized bodies, unknown ids, an upload
//! that is not Wasm, and a node agent sending garbage.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use airtime_tests::{Api, NodeAgent, fresh_control_plane, nodes_ready, workload_reaches};
use serde_json::{Value, json};

async fn row_counts(db: &sqlx::PgPool) -> Vec<i64> {
    let mut counts = Vec::new();
    for table in
        ["workloads", "workload_events", "policies", "policy_versions", "nodes", "gpus", "decisions", "tenants"]
    {
        let (n,): (i64,) =
            sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}"))).fetch_one(db).await.unwrap();
        counts.push(n);
    }
    counts
}

async fn raw(api: &Api, method: &str, path: &str, content_type: &str, body: Vec<u8>) -> (u16, Value) {
    let client = reqwest::Client::new();
    let req = match method {
        "POST" => client.post(api.url(path)),
        _ => client.get(api.url(path)),
    };
    let req = match api.token() {
        Some(token) => req.bearer_auth(token),
        None => req,
    };
    let resp = req.header("content-type", content_type).body(body).send().await.unwrap();
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_a_clear_json_error_change_nothing_and_scheduling_goes_on() {
    let (db, cp) = fresh_control_plane(&[]).await.unwrap();
    let api = cp.api();
    let agent = NodeAgent::start(&cp, "sim", &["--simulate-gpus", "1:L4:24576"]).await.unwrap();
    let nodes = nodes_ready(&api, 1).await.unwrap();
    // The agent routes are called with the node's own credential.
    let agent_api = cp.api_as(&agent.credential().await.unwrap());
    let node_id = nodes[0]["id"].as_str().unwrap().to_owned();
    let pool = db.pool().await.unwrap();
    let before = row_counts(&pool).await;

    let json = "application/json";
    let builtin = api.ok("/api/v1/policies").await.unwrap()[0]["id"].as_str().unwrap().to_owned();
    let big = format!("{{\"name\": \"{}\"}}", "x".repeat(2 * 1024 * 1024));
    // (method, path, content type, body, expected status, expected error code)
    type Case<'a> = (&'a str, String, &'a str, Vec<u8>, u16, &'a str);
    let cases: Vec<Case<'_>> = vec![
        ("POST", "/api/v1/workloads".into(), json, b"{not json".to_vec(), 400, "malformed_json"),
        ("POST", "/api/v1/workloads".into(), json, br#"{"name":"x","class":"training","command":["true"],"gpu_cout":1}"#.to_vec(), 400, "invalid_body"),
        ("POST", "/api/v1/workloads".into(), json, br#"{"name":"x","class":"training","command":"true"}"#.to_vec(), 400, "invalid_body"),
        ("POST", "/api/v1/workloads".into(), json, br#"{"name":"x","class":"astrology","command":["true"]}"#.to_vec(), 400, "invalid_body"),
        ("POST", "/api/v1/workloads".into(), json, br#"{"name":"x","class":"training","command":["true"],"resources":{"gpu_count":-1}}"#.to_vec(), 400, "invalid_body"),
        ("POST", "/api/v1/workloads".into(), json, br#"{"name":"x","class":"training","command":[],"resources":{"gpu_count":1}}"#.to_vec(), 422, "invalid_workload"),
        ("POST", "/api/v1/workloads".into(), json, br#"{"name":"x","tenant":"nobody","class":"training","command":["true"],"resources":{"gpu_count":1}}"#.to_vec(), 422, "unknown_tenant"),
        ("POST", "/api/v1/workloads".into(), json, big.into_bytes(), 413, "payload_too_large"),
        ("POST", "/api/v1/workloads".into(), "text/plain", b"{}".to_vec(), 415, "unsupported_media_type"),
        ("GET", "/api/v1/workloads/not-a-uuid".into(), json, vec![], 400, "invalid_path"),
        ("GET", format!("/api/v1/workloads/{}", uuid::Uuid::new_v4()), json, vec![], 404, "not_found"),
        ("POST", format!("/api/v1/workloads/{}/cancel", uuid::Uuid::new_v4()), json, vec![], 404, "not_found"),
        ("GET", "/api/v1/workloads?state=sleeping".into(), json, vec![], 400, "invalid_query"),
        ("GET", "/api/v1/workloads?colour=red".into(), json, vec![], 400, "invalid_query"),
        ("GET", format!("/api/v1/nodes/{}", uuid::Uuid::new_v4()), json, vec![], 404, "not_found"),
        ("GET", "/api/v1/no-such-route".into(), json, vec![], 404, "not_found"),
        ("POST", "/api/v1/policies?name=evil".into(), "application/wasm", b"MZ\x90\x00 this is not wasm".to_vec(), 422, "invalid_policy"),
        ("POST", "/api/v1/policies?name=evil".into(), "application/wasm", vec![], 400, "empty_module"),
        ("POST", "/api/v1/policies?name=evil".into(), "text/plain", b"\0asm".to_vec(), 415, "unsupported_media_type"),
        ("POST", "/api/v1/policies".into(), "application/wasm", b"\0asm\x01\0\0\0".to_vec(), 400, "invalid_query"),
        ("POST", format!("/api/v1/policies/{}/activate", uuid::Uuid::new_v4()), json, b"{}".to_vec(), 404, "not_found"),
        // A node agent sending garbage.
        ("POST", "/api/v1/agent/register".into(), json, br#"{"garbage": true}"#.to_vec(), 400, "invalid_body"),
        ("POST", "/api/v1/agent/register".into(), json, br#"{"name":"","hostname":"h","cpu_millis":1,"memory_mb":1,"agent_version":"x","gpu_source":"none"}"#.to_vec(), 422, "invalid_registration"),
        ("POST", "/api/v1/agent/register".into(), json, br#"{"name":"not-sim","hostname":"h","cpu_millis":1,"memory_mb":1,"agent_version":"x","gpu_source":"none"}"#.to_vec(), 404, "node_not_found"),
        ("POST", format!("/api/v1/agent/nodes/{node_id}/telemetry"), json, br#"{"cpu_util": 7.5, "memory_used_mb": 1}"#.to_vec(), 422, "invalid_telemetry"),
        ("POST", format!("/api/v1/agent/nodes/{}/telemetry", uuid::Uuid::new_v4()), json, br#"{"cpu_util": 0.5, "memory_used_mb": 1}"#.to_vec(), 404, "node_not_found"),
        ("POST", format!("/api/v1/agent/nodes/{node_id}/workloads/{}/events", uuid::Uuid::new_v4()), json, br#"{"attempt":1,"event":"exploded"}"#.to_vec(), 400, "invalid_body"),
        ("POST", format!("/api/v1/agent/nodes/{node_id}/workloads/{}/events", uuid::Uuid::new_v4()), json, br#"{"attempt":1,"event":"started"}"#.to_vec(), 404, "not_found"),
        ("GET", format!("/api/v1/agent/nodes/{node_id}/assignments?after=banana"), json, vec![], 400, "invalid_query"),
        // A number PostgreSQL's JSONB would store but not give back as a double (found by schemathesis).
        ("POST", format!("/api/v1/policies/{builtin}/activate"), json, br#"{"params":{"x":[-1.7976931348623157e308]}}"#.to_vec(), 422, "invalid_params"),
        // A NUL in any text (PostgreSQL's text cannot hold one): refused at the edge, never a 500.
        ("POST", "/api/v1/auth/login".into(), json, br#"{"email":"ada\u0000@x.io","password":"p"}"#.to_vec(), 400, "nul_character"),
        ("POST", "/api/v1/workloads".into(), json, br#"{"name":"x","class":"training","command":["true"],"resources":{"gpu_count":1,"gpu_models":["h100\u0000"]}}"#.to_vec(), 400, "nul_character"),
        ("POST", "/api/v1/workloads".into(), json, br#"{"name":"x","tenant":"\u0000","class":"training","command":["true"]}"#.to_vec(), 400, "nul_character"),
        ("GET", "/api/v1/workloads?tenant=%00".into(), json, vec![], 400, "nul_character"),
        ("GET", "/api/v1/audit?action=a%00b".into(), json, vec![], 400, "nul_character"),
        ("GET", "/api/v1/workloads/%00".into(), json, vec![], 400, "nul_character"),
        ("POST", format!("/api/v1/policies/{}/activate", uuid::Uuid::new_v4()), json, br#"{"params":{"k":"\u0000"}}"#.to_vec(), 400, "nul_character"),
        ("POST", format!("/api/v1/agent/nodes/{node_id}/workloads/{}/events", uuid::Uuid::new_v4()), json, br#"{"attempt":1,"event":"exited","exit_code":1,"message":"\u0000"}"#.to_vec(), 400, "nul_character"),
    ];
    for (method, path, content_type, body, status, code) in cases {
        let caller = if path.starts_with("/api/v1/agent/") { &agent_api } else { &api };
        let (got, answer) = raw(caller, method, &path, content_type, body).await;
        assert_eq!(got, status, "{method} {path}: {answer}");
        assert_eq!(answer["error"]["code"], code, "{method} {path}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(!message.is_empty(), "{method} {path}: the error says what is wrong");
        assert!(!message.to_lowercase().contains("sql"), "{method} {path}: no internals leak: {message}");
    }

    assert_eq!(row_counts(&pool).await, before, "bad input wrote nothing");

    // The loop still schedules.
    let ok = api
        .created(
            "/api/v1/workloads",
            &json!({"name": "still-fine", "class": "evaluation", "command": ["true"], "resources": {"gpu_count": 1}}),
        )
        .await
        .unwrap();
    workload_reaches(&api, ok["id"].as_str().unwrap(), "succeeded", Duration::from_secs(30)).await.unwrap();

    // Health, readiness and metrics answer.
    assert_eq!(api.ok("/healthz").await.unwrap()["status"], "ok");
    assert_eq!(api.ok("/readyz").await.unwrap()["status"], "ready");
    let metrics = reqwest::get(api.url("/metrics")).await.unwrap().text().await.unwrap();
    for family in [
        "airtime_scheduling_cycle_duration_seconds_count",
        "airtime_queue_depth",
        "airtime_workloads{state=\"succeeded\"} 1",
        "airtime_nodes{state=\"ready\"} 1",
    ] {
        assert!(metrics.contains(family), "metrics lack {family}:\n{metrics}");
    }
    cp.stop().await;
}
