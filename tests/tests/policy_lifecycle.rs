//! A policy's life over the REST API, as its author lives it: upload (checked), dry-run against the
//! live fleet, run in shadow beside the active policy, activate with parameters, roll back, delete.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use airtime_tests::{eventually, one_node_fleet};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_author_uploads_dry_runs_shadows_activates_and_rolls_back_a_policy() {
    let (_db, cp, _agent) = one_node_fleet("sim", &["--simulate-gpus", "2:A100:40960"]).await.unwrap();
    let api = cp.api();

    // A workload that cannot fit anywhere keeps the loop deciding every cycle.
    let stuck = api
        .created(
            "/api/v1/workloads",
            &json!({"name": "too-big", "class": "training", "command": ["true"],
                                             "resources": {"gpu_count": 4}}),
        )
        .await
        .unwrap();
    let stuck_id = stuck["id"].as_str().unwrap().to_owned();

    // Replay production inputs locally: the live snapshot, run through the `airtime-policy` CLI.
    let snapshot = api.ok("/api/v1/scheduler/snapshot").await.unwrap();
    assert!(snapshot["workloads"].as_array().unwrap().iter().any(|w| w["name"] == "too-big"), "{snapshot}");
    let dir = tempfile::tempdir().unwrap();
    let (snap_path, wasm_path) = (dir.path().join("snapshot.json"), dir.path().join("template.wasm"));
    std::fs::write(&snap_path, serde_json::to_vec(&snapshot).unwrap()).unwrap();
    std::fs::write(&wasm_path, airtime_builtin_policies::TEMPLATE).unwrap();
    let replay = std::process::Command::new(airtime_tests::bin("airtime-policy"))
        .arg("run")
        .arg(&wasm_path)
        .arg("--snapshot")
        .arg(&snap_path)
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&replay.stdout);
    assert!(replay.status.success(), "{printed}\n{}", String::from_utf8_lossy(&replay.stderr));
    assert!(printed.contains("too-big"), "the replay decides for the live workload: {printed}");

    // Upload the template (v1), then a second version (v2).
    let v1 = api
        .post_raw("/api/v1/policies?name=my-policy", "application/wasm", airtime_builtin_policies::TEMPLATE.to_vec())
        .await
        .unwrap();
    assert_eq!(v1.status, 201, "{}", v1.body);
    let id = v1.body["id"].as_str().unwrap().to_owned();
    assert_eq!(v1.body["versions"][0]["version"], 1);
    assert_eq!(v1.body["versions"][0]["sha256"].as_str().unwrap().len(), 64);
    let v2 = api
        .post_raw(
            "/api/v1/policies?name=my-policy",
            "application/wasm",
            airtime_builtin_policies::PRIORITY_BEST_FIT.to_vec(),
        )
        .await
        .unwrap();
    assert_eq!(v2.status, 201, "{}", v2.body);
    assert_eq!(v2.body["versions"][0]["version"], 2);

    // Dry-run v1 on the live fleet: its decisions and logs come back, nothing is applied.
    let dry = api.created(&format!("/api/v1/policies/{id}/dry-run"), &json!({"version": 1})).await.unwrap();
    assert!(dry["error"].is_null(), "{dry}");
    let mine = dry["decisions"].as_array().unwrap().iter().find(|d| d["workload_id"] == stuck_id.as_str()).unwrap();
    assert_eq!(mine["kind"], "keep_pending", "{dry}");
    assert!(!mine["reason"].as_str().unwrap().is_empty());
    // A module not uploaded yet can be dry-run too.
    let unstored = api
        .post_raw("/api/v1/policies/dry-run", "application/wasm", airtime_builtin_policies::TEMPLATE.to_vec())
        .await
        .unwrap();
    assert_eq!(unstored.status, 200, "{}", unstored.body);
    assert_eq!(api.ok(&format!("/api/v1/workloads/{stuck_id}")).await.unwrap()["state"], "pending");

    // Shadow v1 beside the active slo-first: compared every cycle, never applied.
    let shadow = api.put(&format!("/api/v1/policies/{id}/shadow"), &json!({"version": 1})).await.unwrap();
    assert_eq!(shadow.status, 200, "{}", shadow.body);
    assert_eq!(shadow.body["shadow_version"], 1);
    let results = eventually("shadow results", Duration::from_secs(20), || {
        let api = api.clone();
        let path = format!("/api/v1/policies/{id}/shadow-results");
        async move {
            let r = api.ok(&path).await?;
            Ok(r.as_array().filter(|a| !a.is_empty()).cloned())
        }
    })
    .await
    .unwrap();
    assert!(results[0]["active_policy_name"].as_str().unwrap().starts_with("slo-first"), "{}", results[0]);
    assert!(results[0]["agreed"].as_i64().unwrap() + results[0]["differed"].as_i64().unwrap() >= 1);
    // A shadowed version cannot be deleted.
    assert_eq!(api.delete(&format!("/api/v1/policies/{id}/versions/1")).await.unwrap().status, 409);
    assert_eq!(api.delete(&format!("/api/v1/policies/{id}/shadow")).await.unwrap().status, 204);

    // Activate v2 with parameters; then roll back to v1.
    let active = api
        .created(&format!("/api/v1/policies/{id}/activate"), &json!({"version": 2, "params": {"max_placements": 5}}))
        .await
        .unwrap();
    assert_eq!(active["active_version"], 2);
    assert_eq!(active["active_params"]["max_placements"], 5);
    let bad =
        api.post(&format!("/api/v1/policies/{id}/activate"), &json!({"version": 2, "params": [1, 2]})).await.unwrap();
    assert_eq!(bad.status, 422, "{}", bad.body);
    // The policy's own check (its `airtime_validate_params` export) refuses a value it cannot read,
    // with its own message, before anything is written.
    let refused = api
        .post(&format!("/api/v1/policies/{id}/activate"), &json!({"version": 2, "params": {"max_placements": -1}}))
        .await
        .unwrap();
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert_eq!(refused.body["error"]["code"], "invalid_params");
    assert_eq!(
        refused.body["error"]["message"],
        "the policy refused its parameters: params.max_placements: expected an unsigned 32-bit integer, found -1"
    );
    assert_eq!(api.ok(&format!("/api/v1/policies/{id}")).await.unwrap()["active_params"]["max_placements"], 5);
    let rolled = api.created(&format!("/api/v1/policies/{id}/rollback"), &json!({})).await.unwrap();
    assert_eq!(rolled["active_version"], 1);
    assert_eq!(rolled["active_params"]["max_placements"], 5, "parameters survive a rollback");
    let again = api.post(&format!("/api/v1/policies/{id}/rollback"), &json!({})).await.unwrap();
    assert_eq!(again.status, 409, "{}", again.body);

    // The next decision for the stuck workload names the active version.
    eventually("a decision by my-policy v1", Duration::from_secs(20), || {
        let api = api.clone();
        let path = format!("/api/v1/decisions?workload_id={stuck_id}");
        async move {
            let d = api.ok(&path).await?;
            Ok(d.as_array().unwrap().iter().any(|d| d["policy_name"] == "my-policy v1").then_some(()))
        }
    })
    .await
    .unwrap();

    // Limits outside the host's bounds are refused; sane ones are kept.
    let limits = api.put(&format!("/api/v1/policies/{id}/limits"), &json!({"deadline_ms": 0})).await.unwrap();
    assert_eq!(limits.status, 422, "{}", limits.body);
    let limits = api.put(&format!("/api/v1/policies/{id}/limits"), &json!({"deadline_ms": 500})).await.unwrap();
    assert_eq!(limits.body["limits"]["deadline_ms"], 500, "{}", limits.body);

    // v2 is not in use: it can be deleted. v1 is active: it cannot. Built-ins cannot be deleted.
    assert_eq!(api.delete(&format!("/api/v1/policies/{id}/versions/2")).await.unwrap().status, 204);
    assert_eq!(api.delete(&format!("/api/v1/policies/{id}/versions/1")).await.unwrap().status, 409);
    let policies = api.ok("/api/v1/policies").await.unwrap();
    let builtin = policies.as_array().unwrap().iter().find(|p| p["builtin"] == true).unwrap();
    let refused = api.delete(&format!("/api/v1/policies/{}", builtin["id"].as_str().unwrap())).await.unwrap();
    assert_eq!(refused.status, 409, "{}", refused.body);
    let mine = policies.as_array().unwrap().iter().find(|p| p["id"] == id.as_str()).unwrap();
    assert_eq!(mine["versions"].as_array().unwrap().len(), 1, "the deleted version is gone from the listing");
    cp.stop().await;
}
