//! The telemetry writer against a real PostgreSQL: what one flush writes (every sample kept, the
//! latest values on the rows, unknown nodes untouched), that a failed flush fails every report it
//! held and writes nothing, that closing the writer answers everything queued, that the rows get
//! each GPU's newest values within the latest-values interval and never an older sample, and that a
//! node reporting faster than its heartbeat interval has its row rewritten once per interval.

#![allow(clippy::unwrap_used)]

use airtime_control_plane::fleet::registry::{self, Registration};
use airtime_control_plane::fleet::telemetry::{self, TelemetryReport, TelemetryWriter, WriteError};
use serde_json::json;
use uuid::Uuid;

async fn database() -> (sqlx::PgPool, String, String) {
    let admin = std::env::var("AIRTIME_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let name = format!("airtime_telemetry_{}", Uuid::new_v4().simple());
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut conn).await.unwrap();
    let url = format!("{}/{name}", admin.rsplit_once('/').unwrap().0);
    (airtime_control_plane::db::connect(&url, 8).await.unwrap(), admin, name)
}

async fn drop_database(db: sqlx::PgPool, admin: &str, name: &str) {
    db.close().await;
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(admin).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
        .execute(&mut conn)
        .await
        .unwrap();
}

async fn node(db: &sqlx::PgPool, name: &str, gpus: u32) -> Uuid {
    let gpus: Vec<_> =
        (0..gpus).map(|i| json!({"index": i, "model": "H100", "memory_mb": 81920, "simulated": true})).collect();
    let registration: Registration = serde_json::from_value(json!({
        "name": name, "hostname": name, "cpu_millis": 64000, "memory_mb": 262144,
        "agent_version": "0.1.0", "gpu_source": "simulated", "gpus": gpus
    }))
    .unwrap();
    registry::register(db, &registration).await.unwrap()
}

/// A GPU sample as read back: node, GPU index, util, memory, temperature, power.
type Sample = (Uuid, i32, Option<f32>, Option<i64>, Option<f32>, Option<f32>);

fn report(cpu: f32, gpus: &[(u32, f32)]) -> TelemetryReport {
    let gpus: Vec<_> = gpus
        .iter()
        .map(|(i, u)| json!({"index": i, "util": u, "memory_used_mb": 1000 + i, "temperature_c": 60.5, "power_w": 300}))
        .collect();
    serde_json::from_value(json!({"cpu_util": cpu, "memory_used_mb": 4096, "gpus": gpus})).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_flush_keeps_every_sample_and_the_latest_values_and_skips_unknown_nodes() {
    let (db, admin, name) = database().await;
    telemetry::ensure_partitions(&db, std::time::Duration::ZERO, std::time::Duration::from_secs(3600)).await.unwrap();
    let a = node(&db, "a", 2).await;
    let b = node(&db, "b", 1).await;
    let unknown = Uuid::now_v7();
    sqlx::query("UPDATE nodes SET state = 'lost', last_seen_at = now() - interval '1 hour' WHERE id = $1")
        .bind(b)
        .execute(&db)
        .await
        .unwrap();

    // Two reports of a in one batch (the second without GPU 1), one of b, one of a node that is not.
    let batch = vec![
        (a, report(0.25, &[(0, 0.1), (1, 0.2)])),
        (unknown, report(0.5, &[(0, 0.9)])),
        (a, report(0.75, &[(0, 0.3)])),
        (b, report(0.5, &[(0, 0.4), (7, 0.5)])),
    ];
    let known = telemetry::write_batch(&db, &batch).await.unwrap();
    assert_eq!(known, [a, b].into_iter().collect());

    // Both of a's host samples, in arrival order; b's; nothing of the unknown node.
    let history: Vec<(Uuid, f32)> =
        sqlx::query_as("SELECT node_id, cpu_util FROM node_telemetry ORDER BY at, id").fetch_all(&db).await.unwrap();
    assert_eq!(history, vec![(a, 0.25), (a, 0.75), (b, 0.5)]);
    // Every GPU sample of a registered GPU (b has no GPU 7): a's GPU 0 twice, in order.
    let samples: Vec<Sample> = sqlx::query_as(
        "SELECT g.node_id, g.device_index, t.util, t.memory_used_mb, t.temperature_c, t.power_w \
         FROM gpu_telemetry t JOIN gpus g ON g.id = t.gpu_id ORDER BY g.node_id, g.device_index, t.at, t.id",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    let mut expected = vec![
        (a, 0, Some(0.1), Some(1000), Some(60.5), Some(300.0)),
        (a, 0, Some(0.3), Some(1000), Some(60.5), Some(300.0)),
        (a, 1, Some(0.2), Some(1001), Some(60.5), Some(300.0)),
        (b, 0, Some(0.4), Some(1000), Some(60.5), Some(300.0)),
    ];
    // Stable: a's two samples of GPU 0 stay in arrival order.
    expected.sort_by_key(|row| (row.0, row.1));
    assert_eq!(samples, expected);

    // The latest values on the rows: a's later report, GPU 1 from the only report that had it.
    let nodes: Vec<(Uuid, f32, String, bool)> = sqlx::query_as(
        "SELECT id, cpu_util, state, last_seen_at > now() - interval '1 minute' FROM nodes ORDER BY name",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    assert_eq!(nodes, vec![(a, 0.75, "ready".to_owned(), true), (b, 0.5, "ready".to_owned(), true)]);
    let gpus: Vec<(Uuid, i32, Option<f32>)> =
        sqlx::query_as("SELECT node_id, device_index, util FROM gpus ORDER BY node_id, device_index")
            .fetch_all(&db)
            .await
            .unwrap();
    let mut want = vec![(a, 0, Some(0.3)), (a, 1, Some(0.2)), (b, 0, Some(0.4))];
    want.sort_by_key(|row| (row.0, row.1));
    assert_eq!(gpus, want);

    // A batch of unknown nodes only writes nothing and says so.
    assert!(telemetry::write_batch(&db, &[(unknown, report(0.1, &[]))]).await.unwrap().is_empty());
    drop_database(db, &admin, &name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_flush_fails_every_report_it_held_and_writes_nothing() {
    let (db, admin, name) = database().await;
    let writer = TelemetryWriter::start(db.clone(), 1, telemetry::LATEST_EVERY).await.unwrap();
    let nodes = [node(&db, "a", 1).await, node(&db, "b", 1).await, node(&db, "c", 1).await];
    sqlx::query("UPDATE nodes SET last_seen_at = now() - interval '1 hour', state = 'lost'")
        .execute(&db)
        .await
        .unwrap();
    // The GPU history cannot be written: every flush fails at its COPY, after the node rows.
    sqlx::query("ALTER TABLE gpu_telemetry ADD CONSTRAINT refuse_all CHECK (util > 2)").execute(&db).await.unwrap();

    let outcomes = futures::future::join_all(nodes.iter().map(|&n| writer.record(n, report(0.5, &[(0, 0.5)])))).await;
    for outcome in &outcomes {
        assert!(matches!(outcome, Err(WriteError::Database(_))), "{outcome:?}");
    }
    // Rolled back: no heartbeat counted, no sample kept.
    let (seen, lost, samples): (i64, i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE last_seen_at > now() - interval '1 minute'), \
                count(*) FILTER (WHERE state = 'lost'), (SELECT count(*) FROM node_telemetry) FROM nodes",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    assert_eq!((seen, lost, samples), (0, 3, 0));

    // Once the database takes them, the same reports are written.
    sqlx::query("ALTER TABLE gpu_telemetry DROP CONSTRAINT refuse_all").execute(&db).await.unwrap();
    for &n in &nodes {
        assert!(writer.record(n, report(0.5, &[(0, 0.5)])).await.unwrap());
    }
    writer.close().await;
    drop_database(db, &admin, &name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_writes_what_is_queued_then_refuses() {
    let (db, admin, name) = database().await;
    let writer = TelemetryWriter::start(db.clone(), 1, telemetry::LATEST_EVERY).await.unwrap();
    let n = node(&db, "a", 8).await;
    let gpus: Vec<(u32, f32)> = (0..8).map(|i| (i, 0.5)).collect();
    // Many reports in flight, then close: every one is answered written, none is lost.
    let pending: Vec<_> = (0..500)
        .map(|_| {
            let writer = writer.clone();
            let report = report(0.5, &gpus);
            tokio::spawn(async move { writer.record(n, report).await })
        })
        .collect();
    tokio::task::yield_now().await;
    let mut written = 0;
    let mut refused = 0;
    let closing = writer.close();
    let answers = futures::future::join_all(pending);
    let ((), answers) = tokio::join!(closing, answers);
    for answer in answers {
        match answer.unwrap() {
            Ok(true) => written += 1,
            Err(WriteError::Stopped) => refused += 1,
            other => panic!("unexpected answer {other:?}"),
        }
    }
    assert_eq!(written + refused, 500);
    let (reports, samples): (i64, i64) =
        sqlx::query_as("SELECT (SELECT count(*) FROM node_telemetry), (SELECT count(*) FROM gpu_telemetry)")
            .fetch_one(&db)
            .await
            .unwrap();
    // What was acknowledged is exactly what is stored.
    assert_eq!((reports, samples), (written, written * 8));
    assert!(matches!(writer.record(n, report(0.5, &gpus)).await, Err(WriteError::Stopped)));
    drop_database(db, &admin, &name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rows_get_the_newest_gpu_values_within_the_interval_never_an_older_one() {
    let (db, admin, name) = database().await;
    let writer = TelemetryWriter::start(db.clone(), 1, telemetry::LATEST_EVERY).await.unwrap();
    let n = node(&db, "a", 2).await;
    let gpu0 = || async {
        sqlx::query_scalar::<_, Option<f32>>("SELECT util FROM gpus WHERE node_id = $1 AND device_index = 0")
            .bind(n)
            .fetch_one(&db)
            .await
            .unwrap()
    };

    // An agent reporting fast: 40 reports one after another. The history holds every sample at
    // once; the rows, rewritten at most once a second rather than 40 times, the newest soon after.
    for k in 0..40 {
        assert!(writer.record(n, report(0.5, &[(0, k as f32 / 100.0), (1, 0.5)])).await.unwrap());
        let shown = gpu0().await;
        assert!(shown.is_none_or(|u| u <= k as f32 / 100.0), "the row shows {shown:?} before report {k} was written");
    }
    let samples: i64 = sqlx::query_scalar("SELECT count(*) FROM gpu_telemetry").fetch_one(&db).await.unwrap();
    assert_eq!(samples, 80);
    let waited = std::time::Instant::now();
    while gpu0().await != Some(0.39) {
        assert!(waited.elapsed() < telemetry::LATEST_EVERY * 3, "the newest value did not reach the row");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    // Another replica wrote a newer sample of GPU 0 than the one this writer holds: it stays.
    sqlx::query(
        "UPDATE gpus SET util = 0.99, telemetry_at = now() + interval '1 hour' WHERE node_id = $1 AND device_index = 0",
    )
    .bind(n)
    .execute(&db)
    .await
    .unwrap();
    assert!(writer.record(n, report(0.5, &[(0, 0.11), (1, 0.12)])).await.unwrap());
    // Closing writes what the writer holds.
    writer.close().await;
    let rows: Vec<(i32, Option<f32>)> =
        sqlx::query_as("SELECT device_index, util FROM gpus WHERE node_id = $1 ORDER BY device_index")
            .bind(n)
            .fetch_all(&db)
            .await
            .unwrap();
    assert_eq!(rows, vec![(0, Some(0.99)), (1, Some(0.12))]);
    drop_database(db, &admin, &name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_reporting_faster_than_its_heartbeat_has_its_row_rewritten_once_per_interval_and_every_sample_kept() {
    let (db, admin, name) = database().await;
    let writer = TelemetryWriter::start(db.clone(), 1, std::time::Duration::from_secs(2)).await.unwrap();
    let n = node(&db, "a", 1).await;
    let unknown = Uuid::now_v7();
    let row = || async {
        sqlx::query_as::<_, (String, bool, f32, i64)>(
            "SELECT state, last_seen_at > now() - interval '1 minute', cpu_util, xmin::text::bigint \
             FROM nodes WHERE id = $1",
        )
        .bind(n)
        .fetch_one(&db)
        .await
        .unwrap()
    };

    // The first report writes the heartbeat (this writer never wrote the node's).
    assert!(writer.record(n, report(0.5, &[(0, 0.5)])).await.unwrap());
    let (state, fresh, cpu, mut version) = row().await;
    assert_eq!((state.as_str(), fresh, cpu), ("ready", true, 0.5));

    // Ten more reports as fast as they are answered: every sample goes to the history, but the
    // node's row is rewritten at most once per latest-values interval (the latest-values writer),
    // not at every report. An unknown node is still told so.
    let started = std::time::Instant::now();
    let mut rewrites = 0;
    for k in 1..=10 {
        assert!(writer.record(n, report(k as f32 / 100.0, &[(0, 0.5)])).await.unwrap());
        let (_, _, _, now) = row().await;
        rewrites += usize::from(now != version);
        version = now;
    }
    let intervals = started.elapsed().as_secs_f64() / telemetry::LATEST_EVERY.as_secs_f64();
    assert!(
        rewrites as f64 <= intervals.ceil() + 1.0,
        "{rewrites} rewrites of the node's row in {intervals:.2} intervals"
    );
    assert!(!writer.record(unknown, report(0.5, &[(0, 0.5)])).await.unwrap());
    let (hosts, gpus): (i64, i64) =
        sqlx::query_as("SELECT (SELECT count(*) FROM node_telemetry), (SELECT count(*) FROM gpu_telemetry)")
            .fetch_one(&db)
            .await
            .unwrap();
    assert_eq!((hosts, gpus), (11, 11));

    // The newest report's values reach the row within the interval.
    let waited = std::time::Instant::now();
    while row().await.2 != 0.1 {
        assert!(waited.elapsed() < telemetry::LATEST_EVERY * 3, "the newest host values did not reach the row");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    // A node marked lost meanwhile (as if silent for an hour) is ready again at its next report's
    // write.
    sqlx::query("UPDATE nodes SET state = 'lost', last_seen_at = now() - interval '1 hour' WHERE id = $1")
        .bind(n)
        .execute(&db)
        .await
        .unwrap();
    assert!(writer.record(n, report(0.25, &[(0, 0.5)])).await.unwrap());
    let waited = std::time::Instant::now();
    while row().await.0 != "ready" {
        assert!(waited.elapsed() < telemetry::LATEST_EVERY * 3, "the lost node was not ready again");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(row().await.1);
    writer.close().await;
    drop_database(db, &admin, &name).await;
}
