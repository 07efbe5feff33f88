//! A backup and its restore, as `docs/operations.md` ("Back up and restore") gives them: a fleet runs
//! work to completion and leaves one job pending behind a cordon; the control plane stops;
//! `pg_dump -Fc` backs its database up; `pg_restore` puts it into a fresh database on a cluster of
//! the test's own (another server, as a restore onto a new machine would be). Every row of every
//! table is there, the same (workloads, their events, decisions, cycles, GPU grants and their
//! history, usage, logs, nodes, credentials, audit); a control plane started on the restored
//! database answers with every workload and decision, the agent carries on with it (its stored
//! credential is in the backup), and the pending job, uncordoned, is placed and runs.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use airtime_tests::{
    ControlPlane, NodeAgent, PgCluster, TestDb, eventually, fresh_control_plane, nodes_ready, workload_reaches,
};
use serde_json::{Value, json};
use tokio::process::Command;

const WAIT: Duration = Duration::from_secs(40);

/// Every table of the database (partitions included), with its row count and a digest of its rows:
/// two databases with the same map hold the same rows.
async fn every_row(url: &str) -> BTreeMap<String, (i64, String)> {
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(url).await.unwrap();
    let tables: Vec<(String,)> =
        sqlx::query_as("SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")
            .fetch_all(&pool)
            .await
            .unwrap();
    let mut rows = BTreeMap::new();
    for (table,) in tables {
        let (count, digest): (i64, Option<String>) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT count(*), md5(string_agg(t::text, E'\\n' ORDER BY t::text)) FROM ONLY \"{table}\" t"
        )))
        .fetch_one(&pool)
        .await
        .unwrap();
        rows.insert(table, (count, digest.unwrap_or_default()));
    }
    pool.close().await;
    rows
}

async fn run(program: &str, args: &[&str]) {
    let out = Command::new(program).args(args).output().await.unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dump_restored_into_a_fresh_cluster_resumes_with_every_workload_decision_and_usage_row() {
    let (db, cp) = fresh_control_plane(&[]).await.unwrap();
    let api = cp.api();
    let flags = ["--simulate-gpus", "2:A100:40960", "--cost-per-hour", "4"];
    let agent = NodeAgent::start(&cp, "gpu-1", &flags).await.unwrap();
    let nodes = nodes_ready(&api, 1).await.unwrap();
    let node_id = nodes[0]["id"].as_str().unwrap().to_owned();

    // Work that ran to completion: GPU grants taken and released (usage history), logs, decisions.
    let mut done = Vec::new();
    for i in 0..3 {
        let w = api
            .created(
                "/api/v1/workloads",
                &json!({"name": format!("done-{i}"), "class": "training", "resources": {"gpu_count": 1},
                        "command": ["sh", "-c", format!("echo line from job {i}; sleep 1")]}),
            )
            .await
            .unwrap();
        done.push(w["id"].as_str().unwrap().to_owned());
    }
    for id in &done {
        workload_reaches(&api, id, "succeeded", WAIT).await.unwrap();
    }
    // And one that waits: its only node is cordoned.
    let cordoned =
        api.post(&format!("/api/v1/nodes/{node_id}/cordon"), &json!({"reason": "backup story"})).await.unwrap();
    assert_eq!(cordoned.status, 200, "{}", cordoned.body);
    let pending = api
        .created(
            "/api/v1/workloads",
            &json!({"name": "waits", "class": "training", "resources": {"gpu_count": 1},
                    "command": ["sh", "-c", "echo restored and running; sleep 1"]}),
        )
        .await
        .unwrap();
    let pending = pending["id"].as_str().unwrap().to_owned();
    eventually("the pending job to get its reason", WAIT, || {
        let (api, path) = (api.clone(), format!("/api/v1/workloads/{pending}"));
        async move {
            let w = api.ok(&path).await?;
            Ok((w["state"] == "pending" && !w["pending_reason"].is_null()).then_some(()))
        }
    })
    .await
    .unwrap();
    let workloads_before = api.ok("/api/v1/workloads?limit=100").await.unwrap();
    let decisions_before = api.ok("/api/v1/decisions?limit=1000").await.unwrap();

    // The backup: the control plane stopped (nothing changes while the dump runs; `pg_dump` alone
    // takes a consistent snapshot of a live database too), then `pg_dump -Fc`.
    let address = cp.url.trim_start_matches("http://").trim_end_matches('/').to_owned();
    cp.stop().await;
    let dir = tempfile::tempdir().unwrap();
    let dump = dir.path().join("airtime.dump");
    let dump = dump.to_str().unwrap();
    run("pg_dump", &["--format=custom", "--file", dump, "--dbname", &db.url]).await;
    let original = every_row(&db.url).await;
    for table in
        ["workloads", "workload_events", "decisions", "scheduling_cycles", "gpu_grant_history", "workload_logs"]
    {
        assert!(original[table].0 > 0, "the story has {table} rows to lose: {original:?}");
    }

    // The restore: a fresh database on another server.
    let cluster = PgCluster::create().await.unwrap();
    let restored = TestDb::create_on(&cluster.admin_url()).await.unwrap();
    run("pg_restore", &["--exit-on-error", "--no-owner", "--dbname", &restored.url, dump]).await;
    let after = every_row(&restored.url).await;
    assert_eq!(after, original, "every table's rows, restored");

    // A control plane on the restored database, where the old one listened: the agent carries on.
    let cp = ControlPlane::start(&restored, &["--listen", &address]).await.unwrap();
    let api = cp.api();
    nodes_ready(&api, 0).await.unwrap();
    let node = eventually("the node back from the restore", WAIT, || {
        let (api, path) = (api.clone(), format!("/api/v1/nodes/{node_id}"));
        async move {
            let n = api.ok(&path).await?;
            Ok((n["state"] == "cordoned").then_some(n))
        }
    })
    .await
    .unwrap();
    assert_eq!(node["maintenance"]["reason"], "backup story", "{node}");
    assert_eq!(api.ok("/api/v1/workloads?limit=100").await.unwrap(), workloads_before, "every workload, restored");
    let decisions_after = api.ok("/api/v1/decisions?limit=1000").await.unwrap();
    let decision_ids = |d: &Value| d.as_array().unwrap().iter().map(|d| d["id"].clone()).collect::<Vec<_>>();
    let (before_ids, after_ids) = (decision_ids(&decisions_before), decision_ids(&decisions_after));
    assert!(before_ids.iter().all(|id| after_ids.contains(id)), "every decision, restored");
    for id in &done {
        let w = api.ok(&format!("/api/v1/workloads/{id}")).await.unwrap();
        assert_eq!((w["state"].clone(), w["attempt"].clone()), (json!("succeeded"), json!(1)), "{w}");
    }

    // The pending job, uncordoned, is placed and runs to its end.
    let lifted = api.post(&format!("/api/v1/nodes/{node_id}/uncordon"), &json!({})).await.unwrap();
    assert_eq!(lifted.status, 200, "{}", lifted.body);
    let ran = workload_reaches(&api, &pending, "succeeded", WAIT).await.unwrap();
    assert_eq!(ran["attempt"], 1, "{ran}");
    drop(agent);
    cp.stop().await;
}
