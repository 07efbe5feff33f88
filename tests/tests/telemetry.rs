//! Telemetry at scale, through the real control plane: many agents' reports at once are written
//! in batches (group commit) and every acknowledged sample is in the history, with the latest
//! values on the rows (the GPUs' within a second); an unknown node is refused and writes nothing; a lost node that reports is
//! ready again; retention drops whole hourly partitions and keeps the recent ones.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use airtime_tests::agents::{EnrolledNode, telemetry_report};
use airtime_tests::{ControlPlane, eventually, fresh_control_plane};
use serde_json::json;

const NODES: usize = 24;
const GPUS: u32 = 8;
const REPORTS: usize = 30;

/// Report `k` of node `n`: GPU `i` at a utilisation that names (n, k, i), so each sample can be
/// found again in the history and in order.
fn util(n: usize, k: usize, i: usize) -> f64 {
    ((n * 7 + k * 3 + i) % 100) as f64 / 100.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_agents_at_once_every_sample_kept_latest_on_the_rows() {
    let (db, cp) = fresh_control_plane(&[]).await.unwrap();
    let mut nodes = Vec::new();
    for n in 0..NODES {
        nodes.push(EnrolledNode::register(&cp, &format!("tele-{n:02}"), GPUS).await.unwrap());
    }
    let pool = db.pool().await.unwrap();
    let count = |sql: &'static str| {
        let pool = pool.clone();
        async move { sqlx::query_scalar::<_, i64>(sql).fetch_one(&pool).await.unwrap() }
    };
    let (before_nodes, before_gpus) =
        (count("SELECT count(*) FROM node_telemetry").await, count("SELECT count(*) FROM gpu_telemetry").await);

    // Every node sends its reports one after another, all nodes at once: 720 reports in flight
    // together, batched by the writer; each answer must be 204 (written) before the next.
    let senders: Vec<_> = nodes
        .iter()
        .enumerate()
        .map(|(n, node)| {
            let node = node.clone();
            tokio::spawn(async move {
                for k in 0..REPORTS {
                    let gpus: Vec<f64> = (0..GPUS as usize).map(|i| util(n, k, i)).collect();
                    let cpu = k as f64 / REPORTS as f64;
                    let answer = node.agent.post(&node.telemetry_path(), &telemetry_report(cpu, &gpus)).await.unwrap();
                    assert_eq!(answer.status, 204, "{}: report {k}: {}", node.name, answer.body);
                }
            })
        })
        .collect();
    for sender in senders {
        sender.await.unwrap();
    }

    // Every acknowledged sample is in the history (beside the heartbeats of registration time).
    let host = count("SELECT count(*) FROM node_telemetry").await - before_nodes;
    let samples = count("SELECT count(*) FROM gpu_telemetry").await - before_gpus;
    assert_eq!((host, samples), ((NODES * REPORTS) as i64, (NODES * REPORTS * GPUS as usize) as i64));
    // In each GPU's history, the node's reports in the order they were sent.
    for (n, node) in nodes.iter().enumerate() {
        let rows: Vec<(i32, f32)> = sqlx::query_as(
            "SELECT g.device_index, t.util FROM gpu_telemetry t JOIN gpus g ON g.id = t.gpu_id \
             WHERE g.node_id = $1::uuid ORDER BY g.device_index, t.at, t.id",
        )
        .bind(&node.node_id)
        .fetch_all(&pool)
        .await
        .unwrap();
        let expected: Vec<(i32, f32)> =
            (0..GPUS as usize).flat_map(|i| (0..REPORTS).map(move |k| (i as i32, util(n, k, i) as f32))).collect();
        assert_eq!(rows, expected, "{}", node.name);
        // The latest values on the rows, as the API shows them: the node's and the GPUs' within the
        // latest-values writer's interval (one second; the nodes report faster than the heartbeat
        // interval, so not every report rewrites the node's row) — never an older one.
        let last = REPORTS - 1;
        let path = format!("/api/v1/nodes/{}", node.node_id);
        let newest = |view: &serde_json::Value| {
            let cpu = view["telemetry"]["cpu_util"].as_f64().unwrap() as f32;
            assert!((0..REPORTS).any(|k| cpu == (k as f64 / REPORTS as f64) as f32), "{cpu}");
            cpu == (last as f64 / REPORTS as f64) as f32
                && view["gpus"].as_array().unwrap().iter().all(|gpu| {
                    let i = gpu["device_index"].as_u64().unwrap() as usize;
                    let shown = gpu["telemetry"]["util"].as_f64().map(|u| u as f32);
                    // Before the newest value is written, only values of this run's reports are shown.
                    assert!(shown.is_none() || (0..REPORTS).any(|k| shown == Some(util(n, k, i) as f32)), "{gpu}");
                    shown == Some(util(n, last, i) as f32)
                })
        };
        let api = cp.api();
        eventually(&format!("{}'s newest values on its rows", node.name), Duration::from_secs(5), || {
            let (api, path) = (api.clone(), path.clone());
            async move { Ok(newest(&api.ok(&path).await?).then_some(())) }
        })
        .await
        .unwrap();
    }

    // A node this credential is not for (or that does not exist) is refused and nothing is written.
    let made_up = uuid::Uuid::new_v4();
    let answer = nodes[0]
        .agent
        .post(&format!("/api/v1/agent/nodes/{made_up}/telemetry"), &telemetry_report(0.5, &[0.5; 8]))
        .await
        .unwrap();
    assert_eq!((answer.status, &answer.body["error"]["code"]), (404, &json!("node_not_found")));
    assert_eq!(count("SELECT count(*) FROM node_telemetry").await - before_nodes, (NODES * REPORTS) as i64);
    assert_eq!(count("SELECT count(*) FROM gpu_telemetry").await - before_gpus, samples);

    // Silent past --node-lost-after-ms (3 s in the harness), a node is lost; its next report,
    // once answered, has it ready again.
    let lost = &nodes[1];
    let path = format!("/api/v1/nodes/{}", lost.node_id);
    eventually("the silent node to be lost", Duration::from_secs(30), || {
        let api = cp.api();
        let path = path.clone();
        async move { Ok((api.ok(&path).await?["state"] == "lost").then_some(())) }
    })
    .await
    .unwrap();
    let answer = lost.agent.post(&lost.telemetry_path(), &telemetry_report(0.1, &[0.1; 8])).await.unwrap();
    assert_eq!(answer.status, 204, "{}", answer.body);
    assert_eq!(cp.api().ok(&path).await.unwrap()["state"], "ready");
    cp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_drops_whole_old_partitions_and_keeps_recent_history() {
    let (db, cp) = fresh_control_plane(&["--telemetry-retention-hours", "24"]).await.unwrap();
    let node = EnrolledNode::register(&cp, "keeper", 1).await.unwrap();
    let answer = node.agent.post(&node.telemetry_path(), &telemetry_report(0.5, &[0.5])).await.unwrap();
    assert_eq!(answer.status, 204, "{}", answer.body);
    cp.stop().await;

    let pool = db.pool().await.unwrap();
    // An hour two days ago, with a sample of each kind in it; and a sample 23 hours ago, which the
    // start-up made a partition for (the retained hours are covered).
    for (table, column, value) in [("gpu_telemetry", "gpu_id", "gpus"), ("node_telemetry", "node_id", "nodes")] {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE TABLE {table}_ancient PARTITION OF {table} FOR VALUES \
             FROM (date_trunc('hour', now()) - interval '48 hours') TO (date_trunc('hour', now()) - interval '47 hours')"
        )))
        .execute(&pool)
        .await
        .unwrap();
        let extra = if table == "node_telemetry" { ", cpu_util, memory_used_mb" } else { "" };
        let extra_values = if table == "node_telemetry" { ", 0.5, 1" } else { "" };
        for at in ["date_trunc('hour', now()) - interval '47 hours 30 minutes'", "now() - interval '23 hours'"] {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO {table} ({column}, at{extra}) SELECT id, {at}{extra_values} FROM {value}"
            )))
            .execute(&pool)
            .await
            .unwrap();
        }
    }
    let rows = |pool: sqlx::PgPool| async move {
        sqlx::query_as::<_, (i64, i64, i64, i64)>(
            "SELECT (SELECT count(*) FROM gpu_telemetry WHERE at < now() - interval '24 hours'), \
                    (SELECT count(*) FROM gpu_telemetry WHERE at >= now() - interval '24 hours'), \
                    (SELECT count(*) FROM node_telemetry WHERE at < now() - interval '24 hours'), \
                    (SELECT count(*) FROM node_telemetry WHERE at >= now() - interval '24 hours')",
        )
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    let (old_gpu, recent_gpu, old_node, recent_node) = rows(pool.clone()).await;
    assert_eq!((old_gpu, old_node), (1, 1));
    assert!(recent_gpu >= 2 && recent_node >= 2, "{recent_gpu} {recent_node}");

    // The control plane prunes at its first pass: the old hour's partitions are dropped whole.
    let cp = ControlPlane::start(&db, &["--telemetry-retention-hours", "24"]).await.unwrap();
    eventually("the old partitions to be dropped", Duration::from_secs(30), || {
        let pool = pool.clone();
        async move {
            let left: Option<String> = sqlx::query_scalar(
                "SELECT string_agg(relname, ', ') FROM pg_class \
                 WHERE relname IN ('gpu_telemetry_ancient', 'node_telemetry_ancient')",
            )
            .fetch_one(&pool)
            .await?;
            Ok(left.is_none().then_some(()))
        }
    })
    .await
    .unwrap();
    assert_eq!(rows(pool.clone()).await, (0, recent_gpu, 0, recent_node));
    // Nothing retention keeps was dropped: every hour of the last day still has its partition.
    let (hours,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
         WHERE i.inhparent = 'gpu_telemetry'::regclass",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(hours >= 24, "{hours} hourly partitions of gpu_telemetry");
    cp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_node_credential_is_refused_at_once_here_and_within_a_second_elsewhere() {
    let (db, cp) = fresh_control_plane(&[]).await.unwrap();
    let pool = db.pool().await.unwrap();
    let report = telemetry_report(0.5, &[0.5]);
    let revoke_in_sql = |name: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query("UPDATE node_credentials SET revoked_at = now() WHERE node_name = $1")
                .bind(name)
                .execute(&pool)
                .await
                .unwrap();
        }
    };

    // Revoked by another replica (straight in the database) while its agent keeps reporting:
    // this control plane keeps verifying the credential it took (its sweep reads every kept
    // credential again), and takes it for at most a second after the revocation, never longer.
    let elsewhere = EnrolledNode::register(&cp, "revoked-elsewhere", 1).await.unwrap();
    for _ in 0..8 {
        assert_eq!(elsewhere.agent.post(&elsewhere.telemetry_path(), &report).await.unwrap().status, 204);
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    revoke_in_sql("revoked-elsewhere").await;
    let revoked = std::time::Instant::now();
    loop {
        let sent = revoked.elapsed();
        let answer = elsewhere.agent.post(&elsewhere.telemetry_path(), &report).await.unwrap();
        if answer.status == 401 {
            break;
        }
        assert_eq!(answer.status, 204, "{}", answer.body);
        assert!(sent < Duration::from_secs(1), "still taken {sent:?} after its revocation");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let refused = elsewhere.agent.post(&elsewhere.telemetry_path(), &report).await.unwrap();
    assert_eq!(refused.status, 401, "once refused, refused: {}", refused.body);

    // Revoked through this control plane's API: refused at once.
    let here = EnrolledNode::register(&cp, "revoked-here", 1).await.unwrap();
    assert_eq!(here.agent.post(&here.telemetry_path(), &report).await.unwrap().status, 204);
    let credentials = cp.api().ok("/api/v1/node-credentials").await.unwrap();
    let id = credentials.as_array().unwrap().iter().find(|c| c["node_name"] == "revoked-here").unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(cp.api().delete(&format!("/api/v1/node-credentials/{id}")).await.unwrap().status, 200);
    let refused = here.agent.post(&here.telemetry_path(), &report).await.unwrap();
    assert_eq!(refused.status, 401, "{}", refused.body);
    cp.stop().await;
}
