//! A cycle's placements are applied set-based, in a few statements whatever their number. One that
//! lost a race since the cycle read the fleet — its workload cancelled meanwhile, its GPU granted to
//! another meanwhile — is undone alone and recorded as refused; the rest commit. Against a fresh
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

#[tokio::test]
async fn placements_that_lost_a_race_are_undone_alone_and_the_rest_commit() {
    let (db, admin, name) = database().await;
    let node = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO nodes (id, name, hostname, state, cpu_millis, memory_mb, gpu_source, agent_version) \
         VALUES ($1, 'n1', 'n1', 'ready', 64000, 524288, 'simulated', 'test')",
    )
    .bind(node)
    .execute(&db)
    .await
    .unwrap();
    let gpus: Vec<Uuid> = (0..3).map(|_| Uuid::now_v7()).collect();
    for (i, gpu) in gpus.iter().enumerate() {
        sqlx::query(
            "INSERT INTO gpus (id, node_id, device_index, model, memory_mb, simulated, memory_used_mb, util) \
             VALUES ($1, $2, $3, 'H100', 81920, true, 0, 0)",
        )
        .bind(gpu)
        .bind(node)
        .bind(i as i32)
        .execute(&db)
        .await
        .unwrap();
    }
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

    db.close().await;
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin).await.unwrap();
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
        .execute(&mut conn)
        .await;
}
