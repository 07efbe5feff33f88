//! Rolling upgrades of the control plane (docs/operations.md, "Upgrading control planes").
//!
//! Two replicas behind a load balancer, restarted one at a time (SIGTERM, as a Deployment's
//! rolling update sends it) while the CLI submits work and two agents report and run it: no
//! submission fails beyond the retry the CLI makes, every one is queued once and runs once, one
//! scheduler commits at a time and scheduling pauses less than one lease. Between the two
//! restarts the schema moves one release ahead (the next release's expand step, applied as its
//! first replica would at start): the replica still running keeps working on it, and a replica
//! started on it starts.
//!
//! Migrations are written expand, then contract: from migration [`RULE_SINCE`] on, each one only
//! adds — tables, columns an old replica's INSERT may leave out, constraints on new columns — so a
//! replica of the previous release keeps working while the next one rolls out; removals come in a
//! later release as a migration marked `-- contract:`. The first test checks every migration (and
//! a planted violation) against that rule on a real PostgreSQL.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use airtime_tests::balancer::Balancer;
use airtime_tests::{Cli, CliRun, ControlPlane, NodeAgent, TestDb, eventually, nodes_ready, overlapping_cycles};

/// The first migration written under the expand/contract rule (cordon and drain, issue 38).
const RULE_SINCE: u32 = 26;

/// The scheduling lease the replicas run with.
const LEASE: Duration = Duration::from_millis(3000);

/// The next release's expand step, as its first replica would apply it at start: a defaulted
/// column on a table every cycle writes, a nullable one, a new table, and its row in sqlx's
/// migration table (a version this build does not know).
const NEXT_RELEASE_EXPAND: &str = "\
    ALTER TABLE workloads ADD COLUMN gang_min_members integer NOT NULL DEFAULT 1 CHECK (gang_min_members >= 1); \
    ALTER TABLE nodes ADD COLUMN topology jsonb; \
    CREATE TABLE topology_domains (node_id uuid NOT NULL REFERENCES nodes (id), level text NOT NULL, \
        PRIMARY KEY (node_id, level));";
const NEXT_RELEASE_VERSION: i64 = 9_999;

/// A schema as an old replica's statements see it.
#[derive(Debug, Default)]
struct Schema {
    /// (table, column) → (type, nullable, has a default).
    columns: BTreeMap<(String, String), (String, bool, bool)>,
    /// Constraints and unique indexes: (table, name) → the columns they cover.
    rules: BTreeMap<(String, String), Vec<String>>,
    /// Views and functions, by name.
    routines: BTreeSet<String>,
}

impl Schema {
    async fn read(pool: &sqlx::PgPool) -> Schema {
        let mut schema = Schema::default();
        let columns: Vec<(String, String, String, String, Option<String>)> = sqlx::query_as(
            "SELECT c.table_name::text, c.column_name::text, c.data_type::text, c.is_nullable::text, \
                 c.column_default::text \
             FROM information_schema.columns c JOIN information_schema.tables t \
                 ON t.table_schema = c.table_schema AND t.table_name = c.table_name \
             WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE'",
        )
        .fetch_all(pool)
        .await
        .unwrap();
        for (table, column, ty, nullable, default) in columns {
            schema.columns.insert((table, column), (ty, nullable == "YES", default.is_some()));
        }
        let rules: Vec<(String, String, Vec<String>)> = sqlx::query_as(
            "SELECT c.conrelid::regclass::text, c.conname::text, \
                 coalesce(array_agg(a.attname::text ORDER BY a.attname) FILTER (WHERE a.attname IS NOT NULL), '{}') \
             FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace \
             LEFT JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey) \
             WHERE n.nspname = 'public' AND c.conrelid <> 0 GROUP BY 1, 2 \
             UNION ALL \
             SELECT i.indrelid::regclass::text, i.indexrelid::regclass::text, \
                 coalesce(array_agg(a.attname::text ORDER BY a.attname) FILTER (WHERE a.attname IS NOT NULL), '{}') \
             FROM pg_index i JOIN pg_class r ON r.oid = i.indrelid JOIN pg_namespace n ON n.oid = r.relnamespace \
             LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) \
             WHERE n.nspname = 'public' AND i.indisunique AND NOT i.indisprimary GROUP BY 1, 2",
        )
        .fetch_all(pool)
        .await
        .unwrap();
        for (table, name, columns) in rules {
            schema.rules.insert((table, name), columns);
        }
        let routines: Vec<(String,)> = sqlx::query_as(
            "SELECT table_name::text FROM information_schema.views WHERE table_schema = 'public' \
             UNION SELECT p.proname::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
                 WHERE n.nspname = 'public'",
        )
        .fetch_all(pool)
        .await
        .unwrap();
        schema.routines = routines.into_iter().map(|(r,)| r).collect();
        schema
    }

    fn tables(&self) -> BTreeSet<&str> {
        self.columns.keys().map(|(t, _)| t.as_str()).collect()
    }
}

/// How the change from `before` to `after` could break a replica of the previous release, which
/// reads and writes `before`'s tables and columns and calls its views and functions.
fn expand_violations(before: &Schema, after: &Schema) -> Vec<String> {
    let mut found = Vec::new();
    let old_tables = before.tables();
    for ((table, column), (ty, nullable, _)) in &before.columns {
        match after.columns.get(&(table.clone(), column.clone())) {
            None => found.push(format!("{table}.{column} was removed (or renamed)")),
            Some((new_ty, _, _)) if new_ty != ty => {
                found.push(format!("{table}.{column} changed type from {ty} to {new_ty}"));
            }
            Some((_, false, false)) if *nullable => {
                found.push(format!("{table}.{column} became NOT NULL without a default"));
            }
            Some(_) => {}
        }
    }
    for ((table, column), (_, nullable, default)) in &after.columns {
        let added = !before.columns.contains_key(&(table.clone(), column.clone()));
        if added && old_tables.contains(table.as_str()) && !nullable && !default {
            found.push(format!("{table}.{column} was added NOT NULL without a default: an old INSERT fails"));
        }
    }
    for ((table, name), columns) in &after.rules {
        if before.rules.contains_key(&(table.clone(), name.clone())) || !old_tables.contains(table.as_str()) {
            continue;
        }
        let old: Vec<&String> =
            columns.iter().filter(|c| before.columns.contains_key(&(table.clone(), (*c).clone()))).collect();
        if !old.is_empty() {
            found.push(format!(
                "{table}: the new constraint or unique index {name} covers existing columns {old:?}: an old write may fail"
            ));
        }
    }
    for routine in before.routines.difference(&after.routines) {
        found.push(format!("the view or function {routine} was removed"));
    }
    found
}

/// The migrations, in order: (version, file name, text).
fn migrations() -> Vec<(u32, String, String)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations");
    let mut all: Vec<(u32, String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let version = name.split('_').next().unwrap().parse().unwrap();
            (version, name, std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    all.sort();
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_migration_since_the_rule_only_expands_the_schema_and_a_planted_removal_is_caught() {
    let db = TestDb::create().await.unwrap();
    let pool = db.pool().await.unwrap();
    let mut checked = Vec::new();
    for (version, name, text) in migrations() {
        let rule = version >= RULE_SINCE && !text.trim_start().starts_with("-- contract:");
        let before = if rule { Some(Schema::read(&pool).await) } else { None };
        sqlx::raw_sql(sqlx::AssertSqlSafe(text)).execute(&pool).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        if let Some(before) = before {
            let broken = expand_violations(&before, &Schema::read(&pool).await);
            assert!(broken.is_empty(), "{name} is not expand-only: {broken:#?}");
            checked.push(name);
        }
    }
    assert!(checked.len() >= 3, "the rule checked {checked:?}");

    // The next release's expand step passes too.
    let before = Schema::read(&pool).await;
    sqlx::raw_sql(NEXT_RELEASE_EXPAND).execute(&pool).await.unwrap();
    assert_eq!(expand_violations(&before, &Schema::read(&pool).await), Vec::<String>::new());

    // A contract step that was not marked as one is caught, each of its breaks named.
    let before = Schema::read(&pool).await;
    sqlx::raw_sql(
        "ALTER TABLE nodes DROP COLUMN hostname; \
         ALTER TABLE gpus ADD COLUMN slot integer NOT NULL; \
         ALTER TABLE workloads ALTER COLUMN priority TYPE bigint; \
         ALTER TABLE nodes ADD CONSTRAINT planted_name_short CHECK (length(name) < 64); \
         DROP FUNCTION node_shown_state(text, text) CASCADE;",
    )
    .execute(&pool)
    .await
    .unwrap();
    let broken = expand_violations(&before, &Schema::read(&pool).await).join("\n");
    for needle in [
        "nodes.hostname was removed",
        "gpus.slot was added NOT NULL without a default",
        "workloads.priority changed type from integer to bigint",
        "planted_name_short covers existing columns [\"name\"]",
        "node_shown_state was removed",
    ] {
        assert!(broken.contains(needle), "{needle:?} not reported in:\n{broken}");
    }
}

/// Submits `eval-NNN` through the CLI every 250 ms until `stop`, as a user's script would.
fn submission_stream(
    cli: Arc<Cli>,
    url: String,
    token: String,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<CliRun>> {
    tokio::spawn(async move {
        let mut runs = Vec::new();
        let mut i = 0;
        while !stop.load(Ordering::SeqCst) {
            let name = format!("eval-{i:03}");
            let args = [
                "--url",
                &url,
                "--token",
                &token,
                "submit",
                "--name",
                &name,
                "--class",
                "evaluation",
                "--gpus",
                "1",
                "--cpu",
                "100m",
                "--",
                "sleep",
                "2",
            ];
            runs.push(cli.run(&args).await.unwrap());
            i += 1;
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        runs
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_restarted_one_at_a_time_under_submissions_and_running_work_lose_nothing_and_run_nothing_twice() {
    let db = TestDb::create().await.unwrap();
    let pool = db.pool().await.unwrap();
    let lease_ms = LEASE.as_millis().to_string();
    let args = ["--leader-lease-ms", lease_ms.as_str()];
    let first = ControlPlane::start(&db, &args).await.unwrap();
    let second = ControlPlane::start(&db, &args).await.unwrap();
    let balancer = Balancer::start(&[&first.url, &second.url]).await.unwrap();
    let gpus = ["--simulate-gpus", "4:H100-SXM:81920"];
    let _agents = [
        NodeAgent::start_via(&first, &balancer.url, "roll-1", &gpus).await.unwrap(),
        NodeAgent::start_via(&first, &balancer.url, "roll-2", &gpus).await.unwrap(),
    ];
    nodes_ready(&first.api(), 2).await.unwrap();
    let (_, epoch_before) = airtime_tests::lease_held(&pool, None).await.unwrap();
    let token = first.admin_token.clone();

    let cli = Arc::new(Cli::new().unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let stream = submission_stream(Arc::clone(&cli), balancer.url.clone(), token.clone(), Arc::clone(&stop));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let roll_started = chrono::Utc::now();

    // The next release's first replica expands the schema at start; then the first replica is
    // replaced: it answers what it is answering, hands back the lease and exits cleanly.
    sqlx::raw_sql(NEXT_RELEASE_EXPAND).execute(&pool).await.unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES ($1, 'next release expand', true, '\\x00', 0)",
    )
    .bind(NEXT_RELEASE_VERSION)
    .execute(&pool)
    .await
    .unwrap();
    let old_url = first.url.clone();
    let stopping = std::time::Instant::now();
    let status = first.terminate().await.unwrap();
    eprintln!("the first replica exited {:?} after SIGTERM", stopping.elapsed());
    assert!(status.success(), "the first replica exited with {status}");
    // Its replacement starts on the expanded schema (a version this build does not know).
    let third = ControlPlane::start(&db, &args).await.unwrap();
    balancer.replace(&old_url, &third.url).unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Then the second.
    let old_url = second.url.clone();
    let stopping = std::time::Instant::now();
    let status = second.terminate().await.unwrap();
    eprintln!("the second replica exited {:?} after SIGTERM", stopping.elapsed());
    assert!(status.success(), "the second replica exited with {status}");
    let fourth = ControlPlane::start(&db, &args).await.unwrap();
    balancer.replace(&old_url, &fourth.url).unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let roll_ended = chrono::Utc::now();
    stop.store(true, Ordering::SeqCst);
    let runs = stream.await.unwrap();

    // No submission failed beyond the CLI's own retry.
    let failed: Vec<&CliRun> = runs.iter().filter(|r| r.code != 0).collect();
    assert!(failed.is_empty(), "submissions failed during the roll: {failed:#?}");
    let retried = runs.iter().filter(|r| r.stderr.contains("retrying")).count();
    eprintln!("{} submissions during the roll, {retried} of them retried by the CLI", runs.len());
    assert!(runs.len() >= 20, "only {} submissions", runs.len());

    // Each was queued once and runs to its end once.
    let api = third.api();
    let done: Vec<(String, i64, i32, String)> =
        eventually("every submission to finish", Duration::from_secs(120), || {
            let (pool, want) = (pool.clone(), runs.len());
            async move {
                let rows: Vec<(String, i64, i32, String)> = sqlx::query_as(
                    "SELECT name, count(*) OVER (PARTITION BY name), attempt, state FROM workloads ORDER BY name",
                )
                .fetch_all(&pool)
                .await?;
                Ok((rows.len() >= want && rows.iter().all(|r| r.3 == "succeeded")).then_some(rows))
            }
        })
        .await
        .unwrap();
    assert_eq!(done.len(), runs.len(), "queued more (or fewer) workloads than were submitted");
    let twice: Vec<_> = done.iter().filter(|(_, copies, attempt, _)| *copies != 1 || *attempt != 1).collect();
    assert!(twice.is_empty(), "queued or run more than once: {twice:?}");

    // One scheduler at a time, and the handover came within a lease.
    assert_eq!(overlapping_cycles(&pool).await.unwrap(), vec![]);
    let (_, epoch_after) = airtime_tests::lease_held(&pool, None).await.unwrap();
    assert!(epoch_after > epoch_before, "the lease never changed hands (epoch {epoch_before} → {epoch_after})");
    let starts: Vec<(chrono::DateTime<chrono::Utc>,)> = sqlx::query_as(
        "SELECT started_at FROM scheduling_cycles WHERE started_at BETWEEN $1 AND $2 ORDER BY started_at",
    )
    .bind(roll_started)
    .bind(roll_ended)
    .fetch_all(&pool)
    .await
    .unwrap();
    let longest = starts.windows(2).map(|w| (w[1].0 - w[0].0).to_std().unwrap()).max().unwrap();
    eprintln!("the longest pause between scheduling cycles during the roll: {longest:?}");
    assert!(longest < LEASE, "scheduling paused {longest:?}, longer than the lease {LEASE:?}");
    assert_eq!(api.ok("/api/v1/nodes").await.unwrap().as_array().unwrap().len(), 2);
    third.stop().await;
    fourth.stop().await;
}
