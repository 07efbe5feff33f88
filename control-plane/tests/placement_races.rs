//! A cycle's placements are applied set-based, in a few statements whatever their number. One that
//! lost a race since the cycle read the fleet — its workload cancelled meanwhile, its GPU granted to
//! another meanwhile (or so much of it that a share no longer fits) — is undone alone and recorded as
//! refused; the rest commit. Against a fresh
//! PostgreSQL database (`AIRTIME_TEST_DATABASE_URL`, as the other tests use).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use airtime_control_plane::scheduler::check::Proposal;
use airtime_control_plane::scheduler::fleet_view;
use airtime_control_plane::scheduler::leader::Leadership;
use airtime_control_plane::scheduler::record::{self, CycleRecord, Decider, Mode};
use uuid::Uuid;

const TENANT: Uuid = Uuid::from_u128(1);

async fn database() -> (sqlx::PgPool, String, String) {
    let admin = std::env::var("AIRTIME_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let name = format!("airtime_races_{}", Uuid::new_v4().simple());
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut conn).await.unwrap();
    let url = format!("{}/{name}", admin.rsplit_once('/').unwrap().0);
    (airtime_control_plane::db::connect(&url, 4).await.unwrap(), admin, name)
}

async fn workload(db: &sqlx::PgPool, name: &str, state: &str, node: Option<Uuid>) -> Uuid {
    let id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO workloads (id, tenant_id, name, class, gpu_count, command, state, node_id, attempt) \
         VALUES ($1, $2, $3, 'evaluation', 1, ARRAY['true'], $4, $5, CASE WHEN $5 IS NULL THEN 0 ELSE 1 END)",
    )
    .bind(id)
    .bind(TENANT)
    .bind(name)
    .bind(state)
    .bind(node)
    .execute(db)
    .await
    .unwrap();
    id
}

/// A ready node `n1` with `gpus` H100s of 80 GiB shared as `sharing`; returns the node and its GPUs.
async fn node_with_gpus(db: &sqlx::PgPool, gpus: usize, sharing: &str) -> (Uuid, Vec<Uuid>) {
    let node = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO nodes (id, name, hostname, state, cpu_millis, memory_mb, gpu_source, agent_version) \
         VALUES ($1, 'n1', 'n1', 'ready', 64000, 524288, 'simulated', 'test')",
    )
    .bind(node)
    .execute(db)
    .await
    .unwrap();
    let ids: Vec<Uuid> = (0..gpus).map(|_| Uuid::now_v7()).collect();
    for (i, gpu) in ids.iter().enumerate() {
        sqlx::query(
            "INSERT INTO gpus (id, node_id, device_index, model, memory_mb, simulated, memory_used_mb, util, sharing) \
             VALUES ($1, $2, $3, 'H100', 81920, true, 0, 0, $4)",
        )
        .bind(gpu)
        .bind(node)
        .bind(i as i32)
        .bind(sharing)
        .execute(db)
        .await
        .unwrap();
    }
    (node, ids)
}

async fn drop_database(db: sqlx::PgPool, admin: &str, name: &str) {
    db.close().await;
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(admin).await.unwrap();
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
        .execute(&mut conn)
        .await;
}

#[tokio::test]
async fn placements_that_lost_a_race_are_undone_alone_and_the_rest_commit() {
    let (db, admin, name) = database().await;
    let (node, gpus) = node_with_gpus(&db, 3, "none").await;
    let a = workload(&db, "a", "pending", None).await;
    let b = workload(&db, "b", "pending", None).await;
    let c = workload(&db, "c", "pending", None).await;

    // The cycle reads the fleet…
    let fleet = {
        let mut conn = db.acquire().await.unwrap();
        fleet_view::load(&mut conn).await.unwrap()
    };
    let index = |id: Uuid| fleet.workloads.iter().position(|w| w.id == id).unwrap();
    let gpu = |id: Uuid| fleet.gpus.iter().position(|g| g.id == id).unwrap();
    // …and meanwhile c is cancelled and GPU 1 is granted to another workload.
    sqlx::query("UPDATE workloads SET state = 'cancelled' WHERE id = $1").bind(c).execute(&db).await.unwrap();
    let other = workload(&db, "other", "running", Some(node)).await;
    sqlx::query("INSERT INTO gpu_grants (gpu_id, workload_id, tenant_id) VALUES ($1, $2, $3)")
        .bind(gpus[1])
        .bind(other)
        .bind(TENANT)
        .execute(&db)
        .await
        .unwrap();

    let leadership = Leadership::new(Duration::from_secs(10));
    assert!(leadership.try_acquire(&db).await.unwrap());
    let decider = Decider { policy_version_id: None, policy_name: "test".into() };
    let place =
        |w: Uuid, g: Uuid| Proposal::Place { workload: index(w), node: 0, gpus: vec![gpu(g)], reason: "test".into() };
    let accepted = [(place(a, gpus[0]), &decider), (place(b, gpus[1]), &decider), (place(c, gpus[2]), &decider)];
    let outcome = record::apply(
        &db,
        &fleet,
        &accepted,
        &[],
        CycleRecord {
            leadership: &leadership,
            started_at: chrono::Utc::now(),
            trigger: "test",
            decider: &decider,
            error: None,
            seen: None,
        },
        Mode::Commit,
    )
    .await
    .unwrap();
    assert_eq!((outcome.placed, outcome.refused), (1, 2), "{outcome:?}");

    let state = |id: Uuid| {
        let db = db.clone();
        async move {
            let row: (String, i32, Option<String>, i64) = sqlx::query_as(
                "SELECT state, attempt, pending_reason, (SELECT count(*) FROM gpu_grants g WHERE g.workload_id = w.id) \
                 FROM workloads w WHERE id = $1",
            )
            .bind(id)
            .fetch_one(&db)
            .await
            .unwrap();
            row
        }
    };
    let (a_state, a_attempt, _, a_grants) = state(a).await;
    assert_eq!((a_state.as_str(), a_attempt, a_grants), ("scheduled", 1, 1));
    // b lost its GPU to the other workload: undone whole, back to pending as it was, and it says why.
    let (b_state, b_attempt, b_reason, b_grants) = state(b).await;
    assert_eq!((b_state.as_str(), b_attempt, b_grants), ("pending", 0, 0));
    assert!(b_reason.unwrap().contains("granted to another workload meanwhile"));
    let (c_state, _, _, c_grants) = state(c).await;
    assert_eq!((c_state.as_str(), c_grants), ("cancelled", 0));
    let kinds: Vec<(String,)> =
        sqlx::query_as("SELECT kind FROM decisions ORDER BY kind").fetch_all(&db).await.unwrap();
    assert_eq!(kinds, vec![("place".to_owned(),), ("rejected".to_owned(),), ("rejected".to_owned(),)]);
    let events: Vec<(Uuid, String)> =
        sqlx::query_as("SELECT workload_id, to_state FROM workload_events WHERE to_state = 'scheduled'")
            .fetch_all(&db)
            .await
            .unwrap();
    assert_eq!(events, vec![(a, "scheduled".to_owned())], "one event, for the placement that held");

    drop_database(db, &admin, &name).await;
}

/// The database's last word on shares: a GPU's grants never add up to more than the GPU. A share
/// placed while another took most of the GPU is undone alone, and two transactions granting the
/// same GPU at once cannot both win: the second statement fails (exclusion_violation) and grants
/// nothing.
#[tokio::test]
async fn a_gpus_grants_never_add_up_to_more_than_the_gpu_however_transactions_interleave() {
    let (db, admin, name) = database().await;
    let (node, gpus) = node_with_gpus(&db, 1, "mps").await;
    let gpu_id = gpus[0];
    let share = |w: Uuid, milli: i32, memory: i64| {
        sqlx::query(
            "INSERT INTO gpu_grants (gpu_id, workload_id, tenant_id, milli, memory_mb) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT DO NOTHING",
        )
        .bind(gpu_id)
        .bind(w)
        .bind(TENANT)
        .bind(milli)
        .bind(memory)
    };
    let half = workload(&db, "half", "pending", None).await;
    sqlx::query("UPDATE workloads SET gpu_milli = 500, gpu_memory_mb = 20000 WHERE id = $1")
        .bind(half)
        .execute(&db)
        .await
        .unwrap();

    // The cycle reads a free shared GPU; meanwhile 600/1000 of it is granted to another workload.
    let fleet = {
        let mut conn = db.acquire().await.unwrap();
        fleet_view::load(&mut conn).await.unwrap()
    };
    let other = workload(&db, "other", "running", Some(node)).await;
    assert_eq!(share(other, 600, 1000).execute(&db).await.unwrap().rows_affected(), 1);

    let leadership = Leadership::new(Duration::from_secs(10));
    assert!(leadership.try_acquire(&db).await.unwrap());
    let decider = Decider { policy_version_id: None, policy_name: "test".into() };
    let index = fleet.workloads.iter().position(|w| w.id == half).unwrap();
    let accepted = [(Proposal::Place { workload: index, node: 0, gpus: vec![0], reason: "test".into() }, &decider)];
    let record = CycleRecord {
        leadership: &leadership,
        started_at: chrono::Utc::now(),
        trigger: "test",
        decider: &decider,
        error: None,
        seen: None,
    };
    let outcome = record::apply(&db, &fleet, &accepted, &[], record, Mode::Commit).await.unwrap();
    assert_eq!((outcome.placed, outcome.refused), (0, 1), "500 more would make 1100/1000: {outcome:?}");
    let (state, reason): (String, Option<String>) =
        sqlx::query_as("SELECT state, pending_reason FROM workloads WHERE id = $1")
            .bind(half)
            .fetch_one(&db)
            .await
            .unwrap();
    assert_eq!(state, "pending");
    assert!(reason.unwrap().contains("granted to another workload meanwhile"));

    // Two transactions grant 400 each of the 400 left, at once: the second waits for the first and
    // is refused, whichever commits first.
    let (x, y) = (workload(&db, "x", "running", Some(node)).await, workload(&db, "y", "running", Some(node)).await);
    let mut first = db.begin().await.unwrap();
    assert_eq!(share(x, 400, 0).execute(&mut *first).await.unwrap().rows_affected(), 1);
    let second = {
        let db = db.clone();
        let insert = share(y, 400, 0);
        tokio::spawn(async move { insert.execute(&db).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!second.is_finished(), "the second grant waits for the first transaction");
    first.commit().await.unwrap();
    over_committed(second.await.unwrap(), "the second grant no longer fits");
    let (held,): (i64,) = sqlx::query_as("SELECT sum(milli)::bigint FROM gpu_grants WHERE gpu_id = $1")
        .bind(gpu_id)
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(held, 1000);
    // A memory slice past the GPU's memory is dropped too, whatever its share.
    let z = workload(&db, "z", "running", Some(node)).await;
    sqlx::query("DELETE FROM gpu_grants WHERE workload_id = $1").bind(x).execute(&db).await.unwrap();
    over_committed(share(z, 100, 81920).execute(&db).await, "a memory slice past the GPU's memory");
    // A grant of a GPU that is not shared, to a second holder, is refused as well.
    let whole = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO gpus (id, node_id, device_index, model, memory_mb, simulated, sharing) \
         VALUES ($1, $2, 1, 'H100', 81920, true, 'none')",
    )
    .bind(whole)
    .bind(node)
    .execute(&db)
    .await
    .unwrap();
    let insert_whole = |w: Uuid| {
        sqlx::query("INSERT INTO gpu_grants (gpu_id, workload_id, tenant_id, milli) VALUES ($1, $2, $3, 1)")
            .bind(whole)
            .bind(w)
            .bind(TENANT)
    };
    assert_eq!(insert_whole(x).execute(&db).await.unwrap().rows_affected(), 1);
    over_committed(insert_whole(y).execute(&db).await, "a GPU that is not shared has one holder");
    let (grants,): (i64,) = sqlx::query_as("SELECT count(*) FROM gpu_grants WHERE workload_id IN ($1, $2)")
        .bind(y)
        .bind(z)
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(grants, 0, "a refused statement grants nothing");

    drop_database(db, &admin, &name).await;
}

/// The trigger `gpu_grants_check` refused the statement: SQLSTATE 23P01 (exclusion_violation).
fn over_committed(result: Result<sqlx::postgres::PgQueryResult, sqlx::Error>, why: &str) {
    refused(result, "23P01", "would be over-committed", why);
}

/// The statement failed with `code`, its message containing `says`.
fn refused(result: Result<sqlx::postgres::PgQueryResult, sqlx::Error>, code: &str, says: &str, why: &str) {
    match result {
        Err(sqlx::Error::Database(e)) => {
            assert_eq!(e.code().as_deref(), Some(code), "{why}: {e}");
            assert!(e.message().contains(says), "{why}: {e}");
        }
        other => panic!("{why}: expected the statement to be refused, got {other:?}"),
    }
}

/// Grants, decisions and events check what they name once per statement (migration 0020), as the
/// foreign keys they replaced checked it per row: a GPU, workload, node, cycle or policy version
/// that does not exist, or a workload named in another tenant than its own, is refused
/// (foreign_key_violation), and the statement writes none of its rows.
#[tokio::test]
async fn grants_decisions_and_events_refuse_what_does_not_exist() {
    let (db, admin, name) = database().await;
    let (node, gpus) = node_with_gpus(&db, 2, "none").await;
    let w = workload(&db, "w", "running", Some(node)).await;
    let other_tenant = Uuid::now_v7();
    sqlx::query("INSERT INTO tenants (id, name) VALUES ($1, 'other')").bind(other_tenant).execute(&db).await.unwrap();
    let made_up = Uuid::now_v7();

    let grants = |gpu: Vec<Uuid>, workload: Vec<Uuid>, tenant: Vec<Uuid>| {
        sqlx::query(
            "INSERT INTO gpu_grants (gpu_id, workload_id, tenant_id) \
             SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::uuid[])",
        )
        .bind(gpu)
        .bind(workload)
        .bind(tenant)
    };
    refused(
        grants(vec![made_up], vec![w], vec![TENANT]).execute(&db).await,
        "23503",
        "GPU",
        "a GPU that does not exist",
    );
    refused(
        grants(vec![gpus[0]], vec![made_up], vec![TENANT]).execute(&db).await,
        "23503",
        "workload",
        "a workload that does not exist",
    );
    refused(
        grants(vec![gpus[0]], vec![w], vec![other_tenant]).execute(&db).await,
        "23503",
        "in the grant's tenant",
        "a workload named in another tenant",
    );
    // One bad grant fails its statement whole: the good one beside it is not written either.
    refused(
        grants(vec![gpus[0], made_up], vec![w, w], vec![TENANT, TENANT]).execute(&db).await,
        "23503",
        "does not exist",
        "a statement with one bad grant",
    );
    let (held,): (i64,) = sqlx::query_as("SELECT count(*) FROM gpu_grants").fetch_one(&db).await.unwrap();
    assert_eq!(held, 0, "a refused statement grants nothing");
    assert_eq!(grants(vec![gpus[0]], vec![w], vec![TENANT]).execute(&db).await.unwrap().rows_affected(), 1);

    let (cycle,): (i64,) = sqlx::query_as(
        "INSERT INTO scheduling_cycles (started_at, finished_at, trigger, policy_name, duration_us, placed, \
             preempted, pending, rejected) VALUES (now(), now(), 'test', 'test', 0, 0, 0, 0, 0) RETURNING id",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    let decision = |cycle: i64, tenant: Uuid, node: Option<Uuid>, version: Option<Uuid>| {
        sqlx::query(
            "INSERT INTO decisions (cycle_id, tenant_id, workload_id, kind, node_id, reason, policy_version_id, \
                 policy_name) VALUES ($1, $2, $3, 'place', $4, 'test', $5, 'test')",
        )
        .bind(cycle)
        .bind(tenant)
        .bind(w)
        .bind(node)
        .bind(version)
    };
    refused(decision(cycle + 1, TENANT, Some(node), None).execute(&db).await, "23503", "cycle", "an unknown cycle");
    refused(decision(cycle, other_tenant, Some(node), None).execute(&db).await, "23503", "tenant", "another tenant");
    refused(decision(cycle, TENANT, Some(made_up), None).execute(&db).await, "23503", "node", "an unknown node");
    refused(
        decision(cycle, TENANT, Some(node), Some(made_up)).execute(&db).await,
        "23503",
        "policy version",
        "an unknown policy version",
    );
    assert_eq!(decision(cycle, TENANT, Some(node), None).execute(&db).await.unwrap().rows_affected(), 1);

    let event = |workload: Uuid, tenant: Uuid| {
        sqlx::query(
            "INSERT INTO workload_events (workload_id, tenant_id, from_state, to_state, attempt, detail) \
             VALUES ($1, $2, 'scheduled', 'running', 1, 'test')",
        )
        .bind(workload)
        .bind(tenant)
    };
    refused(event(made_up, TENANT).execute(&db).await, "23503", "workload", "an unknown workload");
    refused(event(w, other_tenant).execute(&db).await, "23503", "in the event's tenant", "another tenant");
    assert_eq!(event(w, TENANT).execute(&db).await.unwrap().rows_affected(), 1);

    drop_database(db, &admin, &name).await;
}

#[tokio::test]
async fn the_fleet_read_counts_each_running_workloads_preemptions_of_the_last_hour_only() {
    let (db, admin, name) = database().await;
    let (node, _) = node_with_gpus(&db, 1, "none").await;
    let often = workload(&db, "preempted-often", "running", Some(node)).await;
    let never = workload(&db, "never-preempted", "running", Some(node)).await;
    let waiting = workload(&db, "waiting", "pending", None).await;
    // Two preemptions of `often` in the last hour, one three hours ago; one of `waiting` (pending
    // work counts none); an event into another state counts none.
    for (workload, to_state, ago) in [
        (often, "preempting", "10 minutes"),
        (often, "preempting", "50 minutes"),
        (often, "preempting", "3 hours"),
        (often, "running", "5 minutes"),
        (waiting, "preempting", "5 minutes"),
    ] {
        sqlx::query(
            "INSERT INTO workload_events (workload_id, tenant_id, at, from_state, to_state, attempt, detail) \
             VALUES ($1, $2, now() - $3::interval, 'running', $4, 1, 'test')",
        )
        .bind(workload)
        .bind(TENANT)
        .bind(ago)
        .bind(to_state)
        .execute(&db)
        .await
        .unwrap();
    }
    let fleet = fleet_view::load(&mut db.acquire().await.unwrap()).await.unwrap();
    let count = |id: Uuid| fleet.workloads.iter().find(|w| w.id == id).unwrap().preemptions_last_hour;
    assert_eq!((count(often), count(never), count(waiting)), (2, 0, 0));
    drop_database(db, &admin, &name).await;
}

/// The loop's read of the queue fetches in full only the rows that changed since its last read
/// (`fleet_view::WorkloadCache`): whatever changed between two reads — a priority, a workload
/// leaving the queue, a new one, a preemption counted in the last hour — it sees exactly what a
/// full read sees.
#[tokio::test]
async fn the_loops_cached_read_of_the_queue_sees_what_a_full_read_sees() {
    let (db, admin, name) = database().await;
    let (node, gpus) = node_with_gpus(&db, 2, "none").await;
    let a = workload(&db, "a", "pending", None).await;
    let b = workload(&db, "b", "running", Some(node)).await;
    let c = workload(&db, "c", "pending", None).await;
    sqlx::query("INSERT INTO gpu_grants (gpu_id, workload_id, tenant_id) VALUES ($1, $2, $3)")
        .bind(gpus[0])
        .bind(b)
        .bind(TENANT)
        .execute(&db)
        .await
        .unwrap();

    let mut cache = fleet_view::WorkloadCache::default();
    let reads = |cache: &mut fleet_view::WorkloadCache| {
        let db = db.clone();
        let mut cache = std::mem::take(cache);
        async move {
            let mut conn = db.acquire().await.unwrap();
            let cached = fleet_view::load_with(&mut conn, Some(&mut cache)).await.unwrap();
            let full = fleet_view::load(&mut conn).await.unwrap();
            (format!("{:?}", cached.workloads), format!("{:?}", full.workloads), cache)
        }
    };
    let (cached, full, kept) = reads(&mut cache).await;
    assert_eq!(cached, full);
    assert_eq!(kept.len(), 3);
    cache = kept;

    // Between two cycles: a's priority changes, c is cancelled, d arrives, b is preempted.
    sqlx::query("UPDATE workloads SET priority = 90, pending_reason = 'changed' WHERE id = $1")
        .bind(a)
        .execute(&db)
        .await
        .unwrap();
    sqlx::query("UPDATE workloads SET state = 'cancelled' WHERE id = $1").bind(c).execute(&db).await.unwrap();
    let d = workload(&db, "d", "pending", None).await;
    sqlx::query(
        "INSERT INTO workload_events (workload_id, tenant_id, from_state, to_state, attempt, detail) \
         VALUES ($1, $2, 'running', 'preempting', 1, 'test')",
    )
    .bind(b)
    .bind(TENANT)
    .execute(&db)
    .await
    .unwrap();

    let (cached, full, kept) = reads(&mut cache).await;
    assert_eq!(cached, full);
    assert!(cached.contains("priority: 90") && cached.contains("preemptions_last_hour: 1"), "{cached}");
    assert!(!cached.contains(&c.to_string()) && cached.contains(&d.to_string()), "{cached}");
    assert_eq!(kept.len(), 3, "a, b and d are active");
    drop_database(db, &admin, &name).await;
}

/// A cycle rewrites the reasons of the work it keeps waiting (after a mass placement, most of the
/// queue). It rewrites a row only in the version it decided on — one changed meanwhile waits for
/// the next cycle — and the rows it did rewrite go into the loop's cache, so the next read fetches
/// only what others changed and still sees exactly what a full read sees.
#[tokio::test]
async fn a_cycles_own_rewrites_are_not_read_again_and_never_overwrite_a_newer_row() {
    let (db, admin, name) = database().await;
    let (node, gpus) = node_with_gpus(&db, 1, "none").await;
    let placed = workload(&db, "placed", "pending", None).await;
    let waits = workload(&db, "waits", "pending", None).await;
    let changed = workload(&db, "changed", "pending", None).await;
    let raised = workload(&db, "raised", "pending", None).await;
    let victim = workload(&db, "victim", "running", Some(node)).await;

    // The cycle reads through the loop's cache…
    let mut cache = fleet_view::WorkloadCache::default();
    let fleet = fleet_view::load_with(&mut db.acquire().await.unwrap(), Some(&mut cache)).await.unwrap();
    assert_eq!(cache.fetched(), 5);
    let index = |id: Uuid| fleet.workloads.iter().position(|w| w.id == id).unwrap();
    // …and meanwhile someone raises the priority of `changed` and of `raised`.
    sqlx::query("UPDATE workloads SET priority = 90 WHERE id = ANY($1)")
        .bind(vec![changed, raised])
        .execute(&db)
        .await
        .unwrap();

    let leadership = Leadership::new(Duration::from_secs(10));
    assert!(leadership.try_acquire(&db).await.unwrap());
    let decider = Decider { policy_version_id: None, policy_name: "test".into() };
    let keep = |w: Uuid| Proposal::KeepPending { workload: index(w), reason: "the only GPU is taken".into() };
    let accepted = [
        (Proposal::Place { workload: index(placed), node: 0, gpus: vec![0], reason: "test".into() }, &decider),
        // Placed although it changed since the read (it is still pending): the move does not
        // depend on the version, only what the cache takes in does.
        (Proposal::Place { workload: index(raised), node: 0, gpus: vec![], reason: "test".into() }, &decider),
        (Proposal::Preempt { workload: index(victim), reason: "make room".into() }, &decider),
        (keep(waits), &decider),
        (keep(changed), &decider),
    ];
    assert_eq!(fleet.gpus[0].id, gpus[0]);
    let record = CycleRecord {
        leadership: &leadership,
        started_at: chrono::Utc::now(),
        trigger: "test",
        decider: &decider,
        error: None,
        seen: Some(&cache),
    };
    let outcome = record::apply(&db, &fleet, &accepted, &[], record, Mode::Commit).await.unwrap();
    assert_eq!((outcome.placed, outcome.preempted), (2, 1));
    let mut rewritten: Vec<Uuid> = outcome.rewritten.iter().map(|r| r.id).collect();
    rewritten.sort();
    let mut expected = vec![waits, placed, victim];
    expected.sort();
    assert_eq!(rewritten, expected, "only the rows still in the version the cycle read");
    let reason = |id: Uuid| {
        let db = db.clone();
        async move {
            sqlx::query_scalar::<_, Option<String>>("SELECT pending_reason FROM workloads WHERE id = $1")
                .bind(id)
                .fetch_one(&db)
                .await
                .unwrap()
        }
    };
    assert_eq!(reason(waits).await.as_deref(), Some("the only GPU is taken"));
    assert_ne!(reason(changed).await.as_deref(), Some("the only GPU is taken"), "decided on an older row");

    // The next read fetches only the two rows another changed; the placed, preempted and
    // rewritten ones are the cycle's own, and the cache holds them as a full read finds them.
    cache.rewritten(outcome.rewritten);
    let mut conn = db.acquire().await.unwrap();
    let cached = fleet_view::load_with(&mut conn, Some(&mut cache)).await.unwrap();
    assert_eq!(cache.fetched(), 2);
    let full = fleet_view::load(&mut conn).await.unwrap();
    assert_eq!(format!("{:?}", cached.workloads), format!("{:?}", full.workloads));
    assert!(format!("{:?}", cached.workloads).contains("the only GPU is taken"));
    let state =
        |f: &fleet_view::FleetView, id: Uuid| f.workloads.iter().find(|w| w.id == id).map(|w| (w.state, w.node));
    assert_eq!(state(&cached, placed).map(|s| s.0), Some(airtime_control_plane::model::WorkloadState::Scheduled));
    assert_eq!(state(&cached, victim).map(|s| s.0), Some(airtime_control_plane::model::WorkloadState::Preempting));
    assert_eq!(state(&cached, placed).and_then(|s| s.1), Some(0), "on the node it was placed on");
    drop(conn);
    drop_database(db, &admin, &name).await;
}

/// GPU-time counts every grant's interval, held or ended: a held grant is read from `gpu_grants`
/// (it writes no history row when granted, so a burst's grants cost none), an ended one from the
/// history its release wrote, and a grant undone in the transaction that made it leaves nothing.
#[tokio::test]
async fn a_grants_interval_counts_while_held_and_after_it_ends_and_an_undone_grant_leaves_none() {
    let (db, admin, name) = database().await;
    let (node, gpus) = node_with_gpus(&db, 2, "none").await;
    let held = workload(&db, "held", "running", Some(node)).await;
    let undone = workload(&db, "undone", "running", Some(node)).await;
    // Granted ten minutes ago.
    sqlx::query(
        "INSERT INTO gpu_grants (gpu_id, workload_id, tenant_id, granted_at) \
         VALUES ($1, $2, $3, now() - interval '600 seconds')",
    )
    .bind(gpus[0])
    .bind(held)
    .bind(TENANT)
    .execute(&db)
    .await
    .unwrap();
    let history = |w: Uuid| {
        let db = db.clone();
        async move {
            let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM gpu_grant_history WHERE workload_id = $1")
                .bind(w)
                .fetch_one(&db)
                .await
                .unwrap();
            n
        }
    };
    let allocated = || {
        let db = db.clone();
        async move {
            let (s,): (Option<f64>,) = sqlx::query_as(
                "SELECT sum(allocated_s) FROM airtime_gpu_usage(now() - interval '1 hour', now() + interval '1 hour', \
                     interval '3 seconds') WHERE tenant_id = $1 AND class = 'evaluation'",
            )
            .bind(TENANT)
            .fetch_one(&db)
            .await
            .unwrap();
            s.unwrap_or(0.0)
        }
    };
    assert_eq!(history(held).await, 0, "a held grant is its own row");
    let while_held = allocated().await;
    assert!((600.0..610.0).contains(&while_held), "ten minutes held so far: {while_held}");

    // Released: its whole interval is in the history, and counts the same.
    sqlx::query("DELETE FROM gpu_grants WHERE workload_id = $1").bind(held).execute(&db).await.unwrap();
    let (from, to): (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>) =
        sqlx::query_as("SELECT granted_at, released_at FROM gpu_grant_history WHERE workload_id = $1 AND gpu_id = $2")
            .bind(held)
            .bind(gpus[0])
            .fetch_one(&db)
            .await
            .unwrap();
    assert!((600..610).contains(&(to - from).num_seconds()), "{from} .. {to}");
    let after = allocated().await;
    assert!((after - while_held).abs() < 10.0, "the same interval once ended: {after} against {while_held}");

    // Granted and undone in one transaction (a placement rolled back): nothing held, nothing kept.
    let mut tx = db.begin().await.unwrap();
    sqlx::query("INSERT INTO gpu_grants (gpu_id, workload_id, tenant_id) VALUES ($1, $2, $3)")
        .bind(gpus[1])
        .bind(undone)
        .bind(TENANT)
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query("DELETE FROM gpu_grants WHERE workload_id = $1").bind(undone).execute(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(history(undone).await, 0, "an undone grant leaves no history");

    drop_database(db, &admin, &name).await;
}
