//! One whole scheduling cycle at fleet scale, against a real PostgreSQL: read the fleet and queue,
//! encode the snapshot, run the default policy (Wasm), check every decision, and commit them with
//! their reasons. 1,000 nodes × 8 GPUs with 10,000 pending workloads.
//!
//! Baseline, measured in the same run: reading the fleet and queue alone (`fleet_view::load`), the
//! floor any cycle pays. Run with `make bench`.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::time::{Duration, Instant};

use airtime_control_plane::scheduler::{self, Scheduler, SchedulerSettings, fleet_view};

const NODES: usize = 1000;
const GPUS_PER_NODE: usize = 8;
const PENDING: usize = 10_000;
const CYCLES: usize = 7;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let admin = std::env::var("AIRTIME_TEST_DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let name = format!("airtime_bench_{}", uuid::Uuid::new_v4().simple());
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut conn).await.unwrap();
        let url = format!("{}/{name}", admin.rsplit_once('/').unwrap().0);

        let db = airtime_control_plane::db::connect(&url, 8).await.unwrap();
        // The loop's own handles: no signing key, no API (the control plane's defaults).
        let settings = SchedulerSettings {
            tick: Duration::from_millis(1000),
            leader_lease: Duration::from_millis(10_000),
            cycle_budget: Duration::from_millis(1000),
            usage_half_life_hours: 24.0,
            policy_suspend_after: 3,
        };
        let state = Scheduler::standalone(db.clone(), settings).await.unwrap();
        assert!(state.leadership.try_acquire(&db).await.unwrap(), "the bench leads its own database");
        seed(&db).await;

        let mut reads = Vec::new();
        let mut cycles = Vec::new();
        let mut first = None;
        for i in 0..CYCLES {
            let clock = Instant::now();
            let mut conn = db.acquire().await.unwrap();
            let fleet = fleet_view::load(&mut conn).await.unwrap();
            drop(conn);
            reads.push(clock.elapsed().as_secs_f64() * 1000.0);
            assert!(fleet.workloads.len() >= PENDING);

            let clock = Instant::now();
            let outcome = scheduler::run_cycle(&state, "bench").await.unwrap().unwrap();
            let ms = clock.elapsed().as_secs_f64() * 1000.0;
            if i == 0 {
                first = Some((ms, outcome.placed, outcome.pending));
            } else {
                cycles.push(ms);
            }
        }
        let (first_ms, placed, pending) = first.unwrap();
        println!("scheduling cycle, {NODES} nodes × {GPUS_PER_NODE} GPUs, {PENDING} pending (slo-first, Wasm)");
        println!("  first cycle (places {placed}, records {pending} pending reasons): {first_ms:8.1} ms");
        let steady = median(cycles);
        let read = median(reads);
        println!("  steady-state cycle, median of {}:                     {steady:8.1} ms", CYCLES - 1);
        println!("  baseline: read fleet and queue alone, median:          {read:8.1} ms");
        println!("  ratio (cycle / read):                                  {:8.2}×", steady / read);

        drop(state);
        db.close().await;
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
            .execute(&mut conn)
            .await;
    });
}

/// 1,000 ready nodes of 8 simulated GPUs (H100 and A100 alternating) and 10,000 pending workloads
/// of mixed shapes, in bulk statements.
async fn seed(db: &sqlx::PgPool) {
    sqlx::query(
        "INSERT INTO nodes (id, name, hostname, state, cpu_millis, memory_mb, gpu_source, agent_version, cost_per_hour) \
         SELECT gen_random_uuid(), 'node-' || lpad(n::text, 4, '0'), 'host-' || n, 'ready', 64000, 524288, 'simulated', 'bench', 25.0 \
         FROM generate_series(1, $1) AS n",
    )
    .bind(NODES as i32)
    .execute(db)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO gpus (id, node_id, device_index, model, memory_mb, simulated, memory_used_mb, util) \
         SELECT gen_random_uuid(), n.id, d, CASE WHEN right(n.name, 1)::int % 2 = 0 THEN 'H100' ELSE 'A100' END, 81920, true, 0, 0 \
         FROM nodes n CROSS JOIN generate_series(0, $1 - 1) AS d",
    )
    .bind(GPUS_PER_NODE as i32)
    .execute(db)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO workloads (id, tenant_id, name, class, priority, gpu_count, gpu_memory_mb, cpu_millis, memory_mb, \
                                preemptible, command, state, submitted_at) \
         SELECT gen_random_uuid(), '00000000-0000-0000-0000-000000000001', 'w-' || i, \
                (ARRAY['realtime_inference','batch_inference','training','fine_tuning','quantization','embeddings','evaluation'])[1 + i % 7], \
                (i * 7919) % 100, (ARRAY[1, 1, 2, 4, 8])[1 + i % 5], 10000 + (i % 7) * 10000, 1000, 4096, i % 3 = 0, \
                ARRAY['true'], 'pending', now() - make_interval(secs => $1 - i) \
         FROM generate_series(1, $1) AS i",
    )
    .bind(PENDING as i32)
    .execute(db)
    .await
    .unwrap();
}
