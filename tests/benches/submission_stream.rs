//! A steady stream of submissions against a fleet at issue 10's scale, through the real API: 1,000
//! nodes × 8 GPUs (played by the bench over the agent API, heartbeating at the protocol's rate),
//! 20 tenants each with its own policy, about 5,000 workloads holding GPUs and 10,000 waiting;
//! then 100 submissions a second for a window, each timed from request to answer. Baseline, same
//! run, same control plane and heartbeats: the same stream against the empty fleet, before the
//! queue is seeded. Also reported: the scheduling cycles the stream ran, and how long they took.
//!
//! Then the reads an operator's tools make of that fleet (issue 10, item 9), each by
//! `READ_BENCH_CLIENTS` (16) clients in a closed loop for `READ_BENCH_SECONDS`, while the heartbeats go on: a page of the
//! queue, the fleet summary, the node list (every node with its GPUs); baseline in the same run,
//! the server's floor: `GET /healthz` by as many clients (no database, no credential).
//!
//! `AIRTIME_BIN_DIR=$PWD/target/release cargo test -p airtime-tests --bench submission_stream`
//! (release binaries); `SUBMIT_BENCH_SECONDS` (30) sets each stream's window,
//! `READ_BENCH_SECONDS` (10) each read's.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use airtime_tests::agents::{EnrolledNode, telemetry_report};
use airtime_tests::{Api, ControlPlane, TestDb};
use serde_json::{Value, json};

const NODES: usize = 1000;
const GPUS: u32 = 8;
const TENANTS: usize = 20;
const HOLDING: usize = 5000;
const WAITING: usize = 10_000;
const RATE: u64 = 100;

fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1]
}

fn job(i: usize, gpus: u32) -> Value {
    json!({"name": format!("job-{i}"), "class": "training", "tenant": format!("team-{:02}", i % TENANTS),
           "priority": (i * 7919) % 100, "command": ["sleep", "3600"], "preemptible": i.is_multiple_of(3),
           "resources": {"gpu_count": gpus, "cpu_millis": 1000, "memory_mb": 4096}})
}

/// Submits `count` workloads with `width` in flight at once; returns each answer's latency in ms.
async fn submit_many(api: &Api, first: usize, count: usize, width: usize, gpus: u32) -> Vec<f64> {
    let mut latencies = Vec::with_capacity(count);
    for chunk in (first..first + count).collect::<Vec<_>>().chunks(width) {
        let tasks: Vec<_> = chunk
            .iter()
            .map(|&i| {
                let api = api.clone();
                tokio::spawn(async move {
                    let clock = Instant::now();
                    api.created("/api/v1/workloads", &job(i, gpus)).await.unwrap();
                    clock.elapsed().as_secs_f64() * 1000.0
                })
            })
            .collect();
        for t in tasks {
            latencies.push(t.await.unwrap());
        }
    }
    latencies
}

/// `RATE` submissions a second for `window`, each on its own task: the answers' latencies, sorted.
async fn stream(api: &Api, first: usize, window: Duration) -> Vec<f64> {
    let mut ticker = tokio::time::interval(Duration::from_micros(1_000_000 / RATE));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let end = Instant::now() + window;
    let mut tasks = Vec::new();
    let mut i = first;
    while Instant::now() < end {
        ticker.tick().await;
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            let clock = Instant::now();
            api.created("/api/v1/workloads", &job(i, 1)).await.unwrap();
            clock.elapsed().as_secs_f64() * 1000.0
        }));
        i += 1;
    }
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.push(t.await.unwrap());
    }
    latencies.sort_by(f64::total_cmp);
    latencies
}

/// The cycles that started since `from`: how many, and their durations' median and p99 (ms).
async fn cycles(db: &sqlx::PgPool, from: chrono::DateTime<chrono::Utc>) -> (usize, f64, f64) {
    let mut ms: Vec<f64> = sqlx::query_scalar::<_, i64>(
        "SELECT duration_us FROM scheduling_cycles WHERE started_at >= $1 AND duration_us > 0",
    )
    .bind(from)
    .fetch_all(db)
    .await
    .unwrap()
    .into_iter()
    .map(|us| us as f64 / 1000.0)
    .collect();
    if ms.is_empty() {
        return (0, 0.0, 0.0);
    }
    ms.sort_by(f64::total_cmp);
    (ms.len(), quantile(&ms, 0.5), quantile(&ms, 0.99))
}

/// What a closed loop of reads measured: each answer's latency (ms, sorted), the size of an
/// answer (bytes of its JSON, each client's first), and the answers that were not 200 (status,
/// latency in ms).
struct Reads {
    latencies: Vec<f64>,
    bytes: usize,
    failed: Vec<(u16, f64)>,
}

/// `readers` clients asking `path` in a closed loop for `window`.
async fn read_loop(api: &Api, path: &str, readers: usize, window: Duration) -> Reads {
    let end = Instant::now() + window;
    let tasks: Vec<_> = (0..readers)
        .map(|_| {
            let (api, path) = (api.clone(), path.to_owned());
            tokio::spawn(async move {
                let mut reads = Reads { latencies: Vec::new(), bytes: 0, failed: Vec::new() };
                while Instant::now() < end {
                    let clock = Instant::now();
                    let answer = api.get(&path).await.unwrap();
                    let ms = clock.elapsed().as_secs_f64() * 1000.0;
                    if answer.status == 200 {
                        reads.latencies.push(ms);
                        // Sized once: serialising every answer again (5 MB for the node list)
                        // would spend the machine the server is measured on.
                        if reads.bytes == 0 {
                            reads.bytes = answer.body.to_string().len();
                        }
                    } else {
                        reads.failed.push((answer.status, ms));
                    }
                }
                reads
            })
        })
        .collect();
    let mut all = Reads { latencies: Vec::new(), bytes: 0, failed: Vec::new() };
    for t in tasks {
        let reads = t.await.unwrap();
        all.latencies.extend(reads.latencies);
        all.bytes = all.bytes.max(reads.bytes);
        all.failed.extend(reads.failed);
    }
    all.latencies.sort_by(f64::total_cmp);
    all
}

fn report_reads(label: &str, reads: &Reads, window: Duration) {
    let latencies = &reads.latencies;
    if latencies.is_empty() {
        println!("{label:<44} no answer was 200: {:?}", &reads.failed[..reads.failed.len().min(5)]);
        return;
    }
    println!(
        "{label:<44} {:8.1} req/s   p50 {:7.2} ms   p99 {:7.2} ms   max {:7.2} ms   answer {:.1} kB   not 200: {}",
        latencies.len() as f64 / window.as_secs_f64(),
        quantile(latencies, 0.5),
        quantile(latencies, 0.99),
        latencies[latencies.len() - 1],
        reads.bytes as f64 / 1000.0,
        reads.failed.len()
    );
    if let Some((status, ms)) = reads.failed.first() {
        println!("  first not 200: {status} after {ms:.0} ms");
    }
}

fn report(label: &str, latencies: &[f64], window: Duration, cycles: (usize, f64, f64)) {
    println!(
        "{label:<44} {:6.1}/s   submit p50 {:7.2} ms   p99 {:7.2} ms   max {:7.2} ms   cycles {} (p50 {:.0} ms, p99 {:.0} ms)",
        latencies.len() as f64 / window.as_secs_f64(),
        quantile(latencies, 0.5),
        quantile(latencies, 0.99),
        latencies[latencies.len() - 1],
        cycles.0,
        cycles.1,
        cycles.2
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let window = Duration::from_secs(
            std::env::var("SUBMIT_BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(30),
        );
        let db = TestDb::create().await.unwrap();
        let pool = db.pool().await.unwrap();
        let cp = ControlPlane::start(&db, &["--db-max-connections", "32", "--mutations-per-minute", "0"]).await.unwrap();
        let api = cp.api();

        for t in 0..TENANTS {
            api.created("/api/v1/tenants", &json!({"name": format!("team-{t:02}"), "weight": 1 + t % 3}))
                .await
                .unwrap();
        }
        // Each tenant's own policy (priority-best-fit or fair-share), as its admin would activate it.
        sqlx::query(
            "INSERT INTO policy_activations (scope, policy_version_id) \
             SELECT t.id::text, (SELECT v.id FROM policy_versions v JOIN policies p ON p.id = v.policy_id \
                                 WHERE p.name = CASE WHEN t.weight % 2 = 0 THEN 'fair-share' ELSE 'priority-best-fit' END \
                                 ORDER BY v.version DESC LIMIT 1) \
             FROM tenants t WHERE t.name LIKE 'team-%'",
        )
        .execute(&pool)
        .await
        .unwrap();

        // The fleet, registered over the agent API, 16 at a time.
        let clock = Instant::now();
        let mut nodes: Vec<EnrolledNode> = Vec::with_capacity(NODES);
        for chunk in (0..NODES).collect::<Vec<_>>().chunks(16) {
            let tasks: Vec<_> = chunk
                .iter()
                .map(|&n| {
                    let (url, token) = (cp.url.clone(), cp.admin_token.clone());
                    tokio::spawn(async move {
                        EnrolledNode::register_at(&url, &token, &format!("node-{n:04}"), GPUS).await.unwrap()
                    })
                })
                .collect();
            for t in tasks {
                nodes.push(t.await.unwrap());
            }
        }
        println!("registered {NODES} nodes × {GPUS} GPUs in {:.1} s", clock.elapsed().as_secs_f64());

        // Heartbeats at the protocol's rate (each node every 2 s, 8 GPU samples each), all along.
        let beating = Arc::new(AtomicBool::new(true));
        let heartbeats = {
            let (nodes, beating) = (nodes.clone(), beating.clone());
            tokio::spawn(async move {
                let mut ticker = tokio::time::interval(Duration::from_millis(2000 / 50));
                let report = telemetry_report(0.3, &[0.5; GPUS as usize]);
                let mut next = 0;
                while beating.load(Ordering::Relaxed) {
                    ticker.tick().await;
                    // 50 ticks per 2 s, 20 nodes each.
                    for _ in 0..NODES / 50 {
                        let node = &nodes[next % NODES];
                        next += 1;
                        let (agent, path, report) = (node.agent.clone(), node.telemetry_path(), report.clone());
                        tokio::spawn(async move {
                            let _ = agent.post(&path, &report).await;
                        });
                    }
                }
            })
        };
        tokio::time::sleep(Duration::from_secs(3)).await;

        println!(
            "a stream of {RATE} submissions/s for {} s, 1 GPU each, {TENANTS} tenants each with its own policy",
            window.as_secs()
        );
        let from = chrono::Utc::now();
        let baseline = stream(&api, 1_000_000, window).await;
        report("baseline: the empty fleet", &baseline, window, cycles(&pool, from).await);

        // The queue: about 5,000 workloads holding a GPU each, then 10,000 waiting for eight.
        let clock = Instant::now();
        submit_many(&api, 0, HOLDING, 32, 1).await;
        submit_many(&api, HOLDING, WAITING, 32, 8).await;
        let settled = Instant::now();
        tokio::time::sleep(Duration::from_secs(10)).await;
        let (held,): (i64,) = sqlx::query_as("SELECT count(*) FROM gpu_grants").fetch_one(&pool).await.unwrap();
        let (pending,): (i64,) =
            sqlx::query_as("SELECT count(*) FROM workloads WHERE state = 'pending'").fetch_one(&pool).await.unwrap();
        println!(
            "seeded {} workloads in {:.1} s: {held} GPUs held, {pending} pending",
            HOLDING + WAITING,
            (settled - clock).as_secs_f64()
        );

        let from = chrono::Utc::now();
        let loaded = stream(&api, 2_000_000, window).await;
        report("the fleet at scale (5,000 holding, 10,000 waiting)", &loaded, window, cycles(&pool, from).await);
        println!(
            "ratio of p99 (at scale / empty): {:.2}×",
            quantile(&loaded, 0.99) / quantile(&baseline, 0.99)
        );

        let read_window = Duration::from_secs(
            std::env::var("READ_BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(10),
        );
        let readers: usize = std::env::var("READ_BENCH_CLIENTS").ok().and_then(|s| s.parse().ok()).unwrap_or(16);
        println!(
            "reads of the fleet at scale, {readers} clients in a closed loop for {} s each, heartbeats going on",
            read_window.as_secs()
        );
        let floor = read_loop(&api, "/healthz", readers, read_window).await;
        report_reads("baseline: GET /healthz (the server's floor)", &floor, read_window);
        for (label, path) in [
            ("GET /workloads?limit=50 (the queue's head)", "/api/v1/workloads?limit=50"),
            ("GET /workloads?state=pending&limit=50", "/api/v1/workloads?state=pending&limit=50"),
            ("GET /fleet/summary", "/api/v1/fleet/summary"),
            ("GET /nodes?limit=50 (a page of nodes)", "/api/v1/nodes?limit=50"),
            ("GET /nodes (1,000 nodes with their GPUs)", "/api/v1/nodes"),
        ] {
            let reads = read_loop(&api, path, readers, read_window).await;
            report_reads(label, &reads, read_window);
            if !reads.latencies.is_empty() {
                println!(
                    "  p99 against the floor's: {:.1}×",
                    quantile(&reads.latencies, 0.99) / quantile(&floor.latencies, 0.99)
                );
            }
        }

        beating.store(false, Ordering::Relaxed);
        let _ = heartbeats.await;
        cp.stop().await;
    });
}
