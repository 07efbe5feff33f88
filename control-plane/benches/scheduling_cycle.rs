//! One whole scheduling cycle at fleet scale, against a real PostgreSQL: read the fleet and queue,
//! encode the snapshots, run the platform policy and every tenant's own policy (Wasm), check every
//! decision, and commit them with their reasons. 1,000 nodes × 8 GPUs, 5,000 workloads running
//! (one GPU each) and 10,000 pending, across 20 tenants each with its own policy.
//!
//! Baseline, measured in the same run: reading the fleet and queue alone (`fleet_view::load`), the
//! floor any cycle pays. Beside each cycle's wall time, its CPU time (this process's threads and
//! PostgreSQL's processes) and the machine's stolen time, so a slow cycle can be told from a
//! stalled one. Run with `make bench`.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::time::{Duration, Instant};

use airtime_control_plane::scheduler::{self, Scheduler, SchedulerSettings, fleet_view};

const NODES: usize = 1000;
const GPUS_PER_NODE: usize = 8;
const PENDING: usize = 10_000;
const RUNNING: usize = 5_000;
const TENANTS: usize = 20;
/// Steady-state cycles measured (`SCHEDULING_BENCH_CYCLES` changes it).
const CYCLES: usize = 20;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// CPU time, from the kernel's per-task accounting (`schedstat`: nanoseconds, not clock ticks):
/// `this` is every thread of this process (the loop, the runtime's workers, the Wasm evaluations on the
/// blocking pool), `postgres` every PostgreSQL process, `steal` the machine's stolen time (the
/// hypervisor ran someone else). Why: on this shared machine a cycle's wall time also holds the
/// time it waited for a CPU; its CPU time is the work it did, so a slow cycle can be told apart from
/// a stalled one.
#[derive(Clone, Copy, Default)]
struct Cpu {
    this: u64,
    postgres: u64,
    steal: u64,
}

fn schedstat_ns(path: &std::path::Path) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn cpu_now() -> Cpu {
    let mut cpu = Cpu::default();
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        cpu.this = tasks.flatten().map(|t| schedstat_ns(&t.path().join("schedstat"))).sum();
    }
    if let Ok(procs) = std::fs::read_dir("/proc") {
        for p in procs.flatten() {
            let path = p.path();
            if std::fs::read_to_string(path.join("comm")).is_ok_and(|c| c.trim_end() == "postgres") {
                cpu.postgres += schedstat_ns(&path.join("schedstat"));
            }
        }
    }
    // USER_HZ ticks; the eighth value of the `cpu` line.
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let steal: u64 =
        stat.lines().next().and_then(|l| l.split_whitespace().nth(8)).and_then(|v| v.parse().ok()).unwrap_or(0);
    cpu.steal = steal * 10_000_000;
    cpu
}

impl Cpu {
    /// Milliseconds of each since `before`.
    fn since(self, before: Cpu) -> (f64, f64, f64) {
        let ms = |a: u64, b: u64| a.saturating_sub(b) as f64 / 1e6;
        (ms(self.this, before.this), ms(self.postgres, before.postgres), ms(self.steal, before.steal))
    }
}

/// The nearest-rank quantile.
fn quantile(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
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
        let state = Scheduler::standalone(db.clone(), settings()).await.unwrap();
        assert!(state.leadership.try_acquire(&db).await.unwrap(), "the bench leads its own database");
        seed(&db, RUNNING, PENDING).await;
        if std::env::var("SCHEDULING_BENCH_TENANT_POLICIES").is_ok_and(|v| v == "0") {
            // The platform's policy alone, for comparison.
            sqlx::query("DELETE FROM policy_activations WHERE scope <> 'platform'").execute(&db).await.unwrap();
            println!("  (tenant policies off: SCHEDULING_BENCH_TENANT_POLICIES=0)");
        }

        let mut reads = Vec::new();
        let mut cycles = Vec::new();
        let mut first = None;
        let mut phases = Vec::new();
        let mut cpus: Vec<(f64, f64, f64)> = Vec::new();
        let rounds = std::env::var("SCHEDULING_BENCH_CYCLES").ok().and_then(|c| c.parse().ok()).unwrap_or(CYCLES);
        for i in 0..=rounds {
            let clock = Instant::now();
            let mut conn = db.acquire().await.unwrap();
            let fleet = fleet_view::load(&mut conn).await.unwrap();
            drop(conn);
            reads.push(clock.elapsed().as_secs_f64() * 1000.0);
            assert!(fleet.workloads.len() >= PENDING + RUNNING);

            let cpu_before = cpu_now();
            let clock = Instant::now();
            let outcome = scheduler::run_cycle(&state, "bench").await.unwrap().unwrap();
            let ms = clock.elapsed().as_secs_f64() * 1000.0;
            let used = cpu_now().since(cpu_before);
            if i == 0 {
                first = Some((ms, outcome.placed, outcome.pending));
            } else {
                cycles.push(ms);
                cpus.push(used);
                phases.push(outcome.phases);
            }
        }
        let (first_ms, placed, pending) = first.unwrap();
        println!(
            "scheduling cycle, {NODES} nodes × {GPUS_PER_NODE} GPUs, {RUNNING} running, {PENDING} pending, \
             {TENANTS} tenants each with its own policy (slo-first for the platform, Wasm)"
        );
        println!("  first cycle (places {placed}, records {pending} pending reasons): {first_ms:8.1} ms");
        let each: Vec<String> = cycles.iter().map(|ms| format!("{ms:.0}")).collect();
        println!("  every steady-state cycle, in order (ms): {}", each.join(" "));
        let p99 = quantile(&cycles, 0.99);
        let slowest = (0..cycles.len()).max_by(|&a, &b| cycles[a].total_cmp(&cycles[b])).unwrap();
        let slowest_phases: Vec<String> =
            phases[slowest].named().iter().map(|(name, d)| format!("{name} {:.1}", d.as_secs_f64() * 1000.0)).collect();
        println!("  the slowest's phases (ms): {}", slowest_phases.join(", "));
        let (this, pg, steal) = cpus[slowest];
        println!(
            "  the slowest's CPU (ms): this process {this:.1} + PostgreSQL {pg:.1} = {:.1} of its {:.1} wall; the machine's steal {steal:.0}",
            this + pg,
            cycles[slowest]
        );
        let work: Vec<f64> = cpus.iter().map(|(this, pg, _)| this + pg).collect();
        println!(
            "  CPU per steady-state cycle (this process + PostgreSQL), median {:.1} ms, p99 {:.1} ms; this process alone, median {:.1} ms",
            median(work.clone()),
            quantile(&work, 0.99),
            median(cpus.iter().map(|c| c.0).collect())
        );
        let steady = median(cycles);
        let read = median(reads.clone());
        println!("  steady-state cycle, median of {rounds}:                    {steady:8.1} ms");
        println!("  steady-state cycle, p99:                               {p99:8.1} ms");
        println!("  baseline: read fleet and queue alone, median:          {read:8.1} ms");
        println!("  ratio (cycle / read):                                  {:8.2}×", steady / read);
        println!("  where a steady-state cycle's time goes (medians):");
        for (k, (name, _)) in phases[0].named().iter().enumerate() {
            let ms = median(phases.iter().map(|p| p.named()[k].1.as_secs_f64() * 1000.0).collect());
            println!("    {name:<28} {ms:8.1} ms");
        }

        drop(state);
        db.close().await;
        burst(&admin, &settings()).await;
        if std::env::var_os("SCHEDULING_BENCH_KEEP_DB").is_some() {
            println!("  kept the database {name} (SCHEDULING_BENCH_KEEP_DB)");
            return;
        }
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
            .execute(&mut conn)
            .await;
    });
}

/// The loop's own handles' settings: no signing key, no API (the control plane's defaults).
fn settings() -> SchedulerSettings {
    SchedulerSettings {
        tick: Duration::from_millis(1000),
        batch_window: Duration::from_millis(20),
        leader_lease: Duration::from_millis(10_000),
        cycle_budget: Duration::from_millis(1000),
        usage_half_life_hours: 24.0,
        policy_suspend_after: 3,
    }
}

/// The burst: 2,500 workloads arrive at an idle fleet of 1,000 × 8 GPUs (20 tenants, each with
/// its own policy) and one cycle places them all. Each round on a fresh database; the baseline is
/// the same fleet's read, as above.
async fn burst(admin: &str, settings: &SchedulerSettings) {
    const BURST: usize = 2_500;
    let rounds: usize = std::env::var("SCHEDULING_BENCH_BURST_ROUNDS").ok().and_then(|c| c.parse().ok()).unwrap_or(3);
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(admin).await.unwrap();
    let (mut cycles, mut reads, mut phases) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let name = format!("airtime_bench_{}", uuid::Uuid::new_v4().simple());
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut conn).await.unwrap();
        let url = format!("{}/{name}", admin.rsplit_once('/').unwrap().0);
        let db = airtime_control_plane::db::connect(&url, 8).await.unwrap();
        let state = Scheduler::standalone(db.clone(), settings.clone()).await.unwrap();
        assert!(state.leadership.try_acquire(&db).await.unwrap());
        seed(&db, 0, BURST).await;
        // The policies compiled and the pool warm, as on a running control plane: each built-in
        // is dry-run once on this fleet (nothing applied).
        let builtins: Vec<(uuid::Uuid,)> = sqlx::query_as(
            "SELECT DISTINCT ON (p.id) v.id FROM policy_versions v JOIN policies p ON p.id = v.policy_id \
             WHERE p.builtin ORDER BY p.id, v.version DESC",
        )
        .fetch_all(&db)
        .await
        .unwrap();
        for (version,) in builtins {
            let selected = state.policies.version(&db, version, serde_json::json!({})).await.unwrap();
            scheduler::dry_run(&state, &selected).await.unwrap();
        }
        let clock = Instant::now();
        let fleet = fleet_view::load(&mut db.acquire().await.unwrap()).await.unwrap();
        reads.push(clock.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(fleet.pending_count(), BURST);
        let clock = Instant::now();
        let outcome = scheduler::run_cycle(&state, "bench").await.unwrap().unwrap();
        cycles.push(clock.elapsed().as_secs_f64() * 1000.0);
        phases.push(outcome.phases);
        println!("  burst round: placed {} of {BURST} in {:.1} ms", outcome.placed, cycles.last().unwrap());
        drop(state);
        db.close().await;
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
            .execute(&mut conn)
            .await;
    }
    println!("the burst: {BURST} workloads arrive at an idle {NODES} × {GPUS_PER_NODE} fleet, one cycle");
    println!("  cycle, median of {rounds}:                                {:8.1} ms", median(cycles));
    println!("  baseline: read fleet and queue alone, median:          {:8.1} ms", median(reads));
    for (k, (name, _)) in phases[0].named().iter().enumerate() {
        let ms = median(phases.iter().map(|p| p.named()[k].1.as_secs_f64() * 1000.0).collect());
        println!("    {name:<28} {ms:8.1} ms");
    }
}

/// 1,000 ready nodes of 8 simulated GPUs (H100 and A100 alternating); 20 tenants, each with its
/// own policy (priority-best-fit and fair-share alternating, as tenant admins would pick); 5,000
/// running workloads holding one GPU each; 10,000 pending workloads of mixed shapes — in bulk
/// statements.
async fn seed(db: &sqlx::PgPool, running: usize, pending: usize) {
    sqlx::query(
        "INSERT INTO tenants (id, name, weight) \
         SELECT gen_random_uuid(), 'team-' || lpad(t::text, 2, '0'), 1 + t % 3 FROM generate_series(1, $1 - 1) AS t",
    )
    .bind(TENANTS as i32)
    .execute(db)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO policy_activations (scope, policy_version_id) \
         SELECT t.id::text, (SELECT v.id FROM policy_versions v JOIN policies p ON p.id = v.policy_id \
                             WHERE p.name = CASE WHEN t.weight % 2 = 0 THEN 'fair-share' ELSE 'priority-best-fit' END \
                             ORDER BY v.version DESC LIMIT 1) \
         FROM tenants t",
    )
    .execute(db)
    .await
    .unwrap();
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
    // Tenants by row number, so work spreads evenly over them.
    sqlx::query(
        "WITH t AS (SELECT id, row_number() OVER (ORDER BY name) - 1 AS k FROM tenants) \
         INSERT INTO workloads (id, tenant_id, name, class, priority, gpu_count, gpu_memory_mb, cpu_millis, memory_mb, \
                                preemptible, command, state, submitted_at) \
         SELECT gen_random_uuid(), t.id, 'w-' || i, \
                (ARRAY['realtime_inference','batch_inference','training','fine_tuning','quantization','embeddings','evaluation'])[1 + i % 7], \
                (i * 7919) % 100, (ARRAY[1, 1, 2, 4, 8])[1 + i % 5], 10000 + (i % 7) * 10000, 1000, 4096, i % 3 = 0, \
                ARRAY['true'], 'pending', now() - make_interval(secs => $1 - i) \
         FROM generate_series(1, $1) AS i JOIN t ON t.k = i % $2",
    )
    .bind(pending as i32)
    .bind(TENANTS as i64)
    .execute(db)
    .await
    .unwrap();
    // The running work: one GPU each, on the first 5,000 GPUs in node order, granted.
    sqlx::query(
        "WITH t AS (SELECT id, row_number() OVER (ORDER BY name) - 1 AS k FROM tenants), \
              g AS (SELECT g.id AS gpu_id, g.node_id, row_number() OVER (ORDER BY n.name, g.device_index) AS i \
                    FROM gpus g JOIN nodes n ON n.id = g.node_id), \
              w AS (INSERT INTO workloads (id, tenant_id, name, class, priority, gpu_count, gpu_memory_mb, cpu_millis, \
                                           memory_mb, preemptible, command, state, node_id, last_node_id, attempt, \
                                           submitted_at, started_at) \
                    SELECT gen_random_uuid(), t.id, 'r-' || g.i, 'training', (g.i * 7919) % 100, 1, 40000, 1000, 4096, \
                           g.i % 2 = 0, ARRAY['true'], 'running', g.node_id, g.node_id, 1, \
                           now() - interval '2 hours', now() - interval '1 hour' \
                    FROM g JOIN t ON t.k = g.i % $2 WHERE g.i <= $1 \
                    RETURNING id, tenant_id, node_id, name) \
         INSERT INTO gpu_grants (gpu_id, workload_id, tenant_id, granted_at) \
         SELECT g.gpu_id, w.id, w.tenant_id, now() - interval '1 hour' FROM w JOIN g ON 'r-' || g.i = w.name",
    )
    .bind(running as i64)
    .bind(TENANTS as i64)
    .execute(db)
    .await
    .unwrap();
    sqlx::query("ANALYZE").execute(db).await.unwrap();
}
