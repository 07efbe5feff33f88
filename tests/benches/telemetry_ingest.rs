//! Telemetry ingest through the API, in GPU samples per second, against a raw `COPY` of the same
//! number of rows into the same table on the same machine (issue 10, item 8).
//!
//! A real control plane and PostgreSQL; N nodes × 8 GPUs enrolled and registered over the API as
//! agents are; then many concurrent clients (each one keep-alive HTTP/1.1 connection of `hyper`'s,
//! its requests' parts made once: the load generator shares the machine it measures, so it is kept
//! as light as it can be) post telemetry reports through HTTP for a fixed window
//! (each node has at most one report in flight, as an agent has; each client drives its own share
//! of the nodes as fast as it is answered, so each node reports several times a second, faster than
//! the protocol's heartbeat, which the control plane keeps at its default of 2 s). Every 204 means
//! the report committed. Then, in the same
//! run and on the same database, the same number of `gpu_telemetry` rows is written with one raw
//! `COPY … FROM STDIN`. Where the time goes: the control plane's and PostgreSQL's CPU over the
//! window, and the same clients sending a report the API refuses right after authenticating it
//! (`422`, nothing written): the cost of HTTP and the credential check alone.
//!
//! Knobs (environment): `TELEMETRY_NODES` (1000), `TELEMETRY_CLIENTS` (256), `TELEMETRY_SECONDS`
//! (20). `TELEMETRY_BASELINE_BIN_DIR`: a directory with a control plane built from an older commit
//! (the per-report path): its ingest is measured in the same run, by this bench run again as a
//! child process with `AIRTIME_BIN_DIR` pointing there.
//!
//! ```sh
//! cargo build --release -p airtime-control-plane --bins
//! AIRTIME_BIN_DIR=$PWD/target/release cargo bench -p airtime-tests --bench telemetry_ingest
//! ```

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue};

use airtime_tests::agents::{EnrolledNode, telemetry_report};
use airtime_tests::{ControlPlane, TestDb};

const GPUS: u32 = 8;

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// CPU seconds (user + system) of the processes whose command line contains `needle`, or whose
/// name is `name` (PostgreSQL's backends), from /proc.
fn cpu_seconds(matches: impl Fn(&str, &str) -> bool) -> f64 {
    let tick = 100.0; // USER_HZ on Linux
    let mut total = 0.0;
    let Ok(entries) = std::fs::read_dir("/proc") else { return f64::NAN };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(cmdline) = std::fs::read(path.join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let Ok(stat) = std::fs::read_to_string(path.join("stat")) else { continue };
        let Some((head, rest)) = stat.rsplit_once(") ") else { continue };
        let comm = head.split_once(" (").map(|(_, c)| c).unwrap_or("");
        if !matches(&cmdline, comm) {
            continue;
        }
        let fields: Vec<&str> = rest.split(' ').collect();
        // utime and stime are the 14th and 15th fields of stat, the 12th and 13th after the name.
        if let (Some(u), Some(s)) = (fields.get(11), fields.get(12)) {
            total += u.parse::<f64>().unwrap_or(0.0) / tick + s.parse::<f64>().unwrap_or(0.0) / tick;
        }
    }
    total
}

/// Busy and total CPU seconds of the whole machine, from /proc/stat.
fn machine_cpu() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().next() else { return (f64::NAN, f64::NAN) };
    let v: Vec<f64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    let total: f64 = v.iter().sum();
    // idle and iowait
    let idle = v.get(3).copied().unwrap_or(0.0) + v.get(4).copied().unwrap_or(0.0);
    ((total - idle) / 100.0, total / 100.0)
}

/// CPU seconds (user + system) of one process, all its threads.
fn cpu_seconds_of(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return f64::NAN };
    let Some((_, rest)) = stat.rsplit_once(") ") else { return f64::NAN };
    let fields: Vec<&str> = rest.split(' ').collect();
    let tick = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / 100.0;
    tick(11) + tick(12)
}

struct Load {
    reports: u64,
    latencies_ms: Vec<f64>,
    other_statuses: Vec<u16>,
}

/// Every client posts the reports of its nodes, one node after another, until the window closes;
/// answers inside the window count (after a warm-up of `warm_up`).
/// The nodes, and the clients that drive them.
struct Driver<'a> {
    base: &'a str,
    nodes: &'a [EnrolledNode],
    clients: usize,
}

/// A client's keep-alive HTTP/1.1 connection to the control plane (`authority` is `host:port`):
/// one per client, as each agent has its own. Plain hyper rather than reqwest's pooled client: the
/// load generator runs on the machine it measures, and every microsecond it spends is one the
/// control plane and PostgreSQL do not get.
async fn connect(authority: &str) -> std::io::Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>> {
    let stream = tokio::net::TcpStream::connect(authority).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .map_err(std::io::Error::other)?;
    tokio::spawn(connection);
    Ok(sender)
}

async fn drive(
    Driver { base, nodes, clients }: &Driver<'_>,
    body: Arc<dyn Fn(usize) -> Vec<u8> + Send + Sync>,
    warm_up: Duration,
    window: Duration,
    expect: u16,
) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let measure_from = start + warm_up;
    let mut tasks = Vec::new();
    let clients = *clients;
    let authority: Arc<str> = base.trim_start_matches("http://").trim_end_matches('/').into();
    for c in 0..clients {
        // Each node's request, made once: its path, its credential, its body.
        let mine: Vec<(String, HeaderValue, Bytes)> = nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| i % clients == c)
            .map(|(i, n)| {
                let bearer = HeaderValue::from_str(&format!("Bearer {}", n.agent.token().unwrap())).unwrap();
                (n.telemetry_path(), bearer, Bytes::from(body(i)))
            })
            .collect();
        if mine.is_empty() {
            continue;
        }
        let stop = stop.clone();
        let authority = authority.clone();
        tasks.push(tokio::spawn(async move {
            let mut load = Load { reports: 0, latencies_ms: Vec::new(), other_statuses: Vec::new() };
            let host = HeaderValue::from_str(&authority).unwrap();
            let json = HeaderValue::from_static("application/json");
            let mut sender = None;
            let mut k = 0;
            while !stop.load(Ordering::Relaxed) {
                let (path, bearer, body) = &mine[k % mine.len()];
                k += 1;
                let sent = Instant::now();
                let status = async {
                    if sender.as_ref().is_none_or(|s: &hyper::client::conn::http1::SendRequest<_>| s.is_closed()) {
                        sender = Some(connect(&authority).await.ok()?);
                    }
                    let request = hyper::Request::post(path.as_str())
                        .header(HOST, host.clone())
                        .header(AUTHORIZATION, bearer.clone())
                        .header(CONTENT_TYPE, json.clone())
                        .body(Full::new(body.clone()))
                        .ok()?;
                    let answer = sender.as_mut()?.send_request(request).await;
                    let Ok(resp) = answer else {
                        sender = None;
                        return None;
                    };
                    let status = resp.status().as_u16();
                    resp.into_body().collect().await.ok()?;
                    Some(status)
                }
                .await
                .unwrap_or(0);
                if sent < measure_from || stop.load(Ordering::Relaxed) {
                    continue;
                }
                if status == expect {
                    load.reports += 1;
                    load.latencies_ms.push(sent.elapsed().as_secs_f64() * 1e3);
                } else {
                    load.other_statuses.push(status);
                }
            }
            load
        }));
    }
    tokio::time::sleep_until((measure_from + window).into()).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Load { reports: 0, latencies_ms: Vec::new(), other_statuses: Vec::new() };
    for task in tasks {
        let load = task.await.unwrap();
        all.reports += load.reports;
        all.latencies_ms.extend(load.latencies_ms);
        all.other_statuses.extend(load.other_statuses);
    }
    all.latencies_ms.sort_by(f64::total_cmp);
    all
}

async fn enrol(cp: &ControlPlane, count: usize) -> Vec<EnrolledNode> {
    let limit = Arc::new(tokio::sync::Semaphore::new(16));
    let mut tasks = Vec::new();
    for n in 0..count {
        let limit = limit.clone();
        let cp_url = cp.url.clone();
        let admin = cp.admin_token.clone();
        tasks.push(tokio::spawn(async move {
            let _permit = limit.acquire_owned().await.unwrap();
            EnrolledNode::register_at(&cp_url, &admin, &format!("bench-{n:04}"), GPUS).await.unwrap()
        }));
    }
    let mut nodes = Vec::new();
    for task in tasks {
        nodes.push(task.await.unwrap());
    }
    nodes
}

fn report_body(i: usize) -> Vec<u8> {
    let util: Vec<f64> = (0..GPUS as usize).map(|g| ((i * 13 + g * 7) % 100) as f64 / 100.0).collect();
    serde_json::to_vec(&telemetry_report(0.25, &util)).unwrap()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let nodes_n = knob("TELEMETRY_NODES", 1000) as usize;
        let clients = knob("TELEMETRY_CLIENTS", 256) as usize;
        let window = Duration::from_secs(knob("TELEMETRY_SECONDS", 20));
        let warm_up = Duration::from_secs(3);
        let child = std::env::var_os("TELEMETRY_BENCH_CHILD").is_some();
        let label = if child { "per-report path (baseline binary)" } else { "group commit (this tree)" };

        let db = TestDb::create().await.unwrap();
        // Registration of a thousand nodes is a burst of admin mutations: no rate limit for the bench.
        // The protocol's heartbeat (the control plane's defaults), not the harness's fast one.
        let cp = ControlPlane::start(
            &db,
            &[
                "--mutations-per-minute",
                "10000000",
                "--mutation-burst",
                "1000000",
                "--heartbeat-interval-ms",
                "2000",
                "--node-lost-after-ms",
                "15000",
            ],
        )
        .await
        .unwrap();
        let enrolling = Instant::now();
        let nodes = enrol(&cp, nodes_n).await;
        println!(
            "[{label}] {nodes_n} nodes × {GPUS} GPUs enrolled and registered in {:.1} s; {clients} clients, {} s window",
            enrolling.elapsed().as_secs_f64(),
            window.as_secs()
        );
        let pool = db.pool().await.unwrap();
        let samples_before: i64 =
            sqlx::query_scalar("SELECT count(*) FROM gpu_telemetry").fetch_one(&pool).await.unwrap();
        let db_name = db.name.clone();
        let control_plane = move |cmd: &str, _: &str| cmd.contains("airtime-control-plane") && cmd.contains(&db_name);
        let postgres = |_: &str, comm: &str| comm.starts_with("postgres");

        // Through the API.
        let me = std::process::id();
        let self_cpu = move || cpu_seconds_of(me);
        let (m0, d0) = (machine_cpu(), self_cpu());
        let (cp0, pg0, t0) = (cpu_seconds(&control_plane), cpu_seconds(postgres), Instant::now());
        let driver = Driver { base: &cp.url, nodes: &nodes, clients };
        let load = drive(&driver, Arc::new(report_body), warm_up, window, 204).await;
        let elapsed = t0.elapsed().as_secs_f64();
        let (cp_cpu, pg_cpu) =
            ((cpu_seconds(&control_plane) - cp0) / elapsed, (cpu_seconds(postgres) - pg0) / elapsed);
        let reports_s = load.reports as f64 / window.as_secs_f64();
        let ingest = reports_s * f64::from(GPUS);
        println!(
            "[{label}] through the API: {reports_s:.0} reports/s = {ingest:.0} GPU samples/s; report latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (n={}); other answers: {}",
            percentile(&load.latencies_ms, 0.5),
            percentile(&load.latencies_ms, 0.99),
            percentile(&load.latencies_ms, 1.0),
            load.reports,
            load.other_statuses.len()
        );
        let (m1, d1) = (machine_cpu(), self_cpu());
        let cores = std::thread::available_parallelism().map(|n| n.get() as f64).unwrap_or(2.0);
        let machine_busy = (m1.0 - m0.0) / (m1.1 - m0.1) * cores;
        let driver_cpu = (d1 - d0) / elapsed;
        println!(
            "[{label}] CPU over the run (cores busy, of 2): machine {machine_busy:.2} = control plane {cp_cpu:.2} + PostgreSQL {pg_cpu:.2} + this driver {driver_cpu:.2} + other work {:.2}",
            (machine_busy - cp_cpu - pg_cpu - driver_cpu).max(0.0)
        );
        // Nothing acknowledged is missing.
        let samples_after: i64 =
            sqlx::query_scalar("SELECT count(*) FROM gpu_telemetry").fetch_one(&pool).await.unwrap();
        let written = samples_after - samples_before;
        assert!(
            written >= (load.reports * u64::from(GPUS)) as i64,
            "{written} samples written for {} acknowledged reports",
            load.reports
        );

        // The flushes, read back from the history: a flush's rows share its transaction's now().
        let (flushes, per_flush_p50, per_flush_max, gap_p50_ms): (i64, f64, i64, f64) = sqlx::query_as(
            "WITH f AS (SELECT at, count(*) AS samples FROM node_telemetry WHERE at > now() - interval '10 minutes' \
                        GROUP BY at), \
                  g AS (SELECT extract(epoch FROM at - lag(at) OVER (ORDER BY at)) * 1000 AS gap FROM f) \
             SELECT (SELECT count(*) FROM f), \
                    (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY samples) FROM f)::float8, \
                    (SELECT max(samples) FROM f), \
                    (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY gap) FROM g)::float8",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        println!(
            "[{label}] transactions that wrote reports: {flushes}; reports per transaction p50 {per_flush_p50:.0}, max {per_flush_max}; p50 {gap_p50_ms:.1} ms between their starts"
        );

        // HTTP and the credential check alone: a report refused (422) after authentication.
        let refused = |i: usize| {
            let mut body: serde_json::Value = serde_json::from_slice(&report_body(i)).unwrap();
            body["cpu_util"] = serde_json::json!(7.5);
            serde_json::to_vec(&body).unwrap()
        };
        let auth = drive(&driver, Arc::new(refused), warm_up, window / 2, 422).await;
        let auth_s = auth.reports as f64 / (window / 2).as_secs_f64();
        println!(
            "[{label}] authenticate and refuse (422, nothing written): {auth_s:.0} requests/s; p50 {:.1} ms, p99 {:.1} ms",
            percentile(&auth.latencies_ms, 0.5),
            percentile(&auth.latencies_ms, 0.99)
        );
        if child {
            println!("[{label}] RESULT ingest_samples_per_s={ingest:.0}");
            cp.stop().await;
            return;
        }

        // A raw COPY of as many rows into the same table, same database, same machine.
        let rows = written.max(1) as usize;
        let gpus: Vec<uuid::Uuid> = sqlx::query_scalar("SELECT id FROM gpus ORDER BY id").fetch_all(&pool).await.unwrap();
        let mut text = String::with_capacity(rows * 64);
        for r in 0..rows {
            use std::fmt::Write as _;
            let u = (r % 100) as f64 / 100.0;
            let _ = writeln!(
                text,
                "{}\t{u}\t{}\t{}\t{}\t0",
                gpus[r % gpus.len()],
                (u * 80000.0) as u64,
                40.0 + u * 40.0,
                100.0 + u * 600.0
            );
        }
        let mut conn = pool.acquire().await.unwrap();
        let copying = Instant::now();
        sqlx::query("BEGIN").execute(&mut *conn).await.unwrap();
        let mut sink = conn
            .copy_in_raw("COPY gpu_telemetry (gpu_id, util, memory_used_mb, temperature_c, power_w, ecc_errors) FROM STDIN")
            .await
            .unwrap();
        sink.send(text.into_bytes()).await.unwrap();
        let copied = sink.finish().await.unwrap();
        sqlx::query("COMMIT").execute(&mut *conn).await.unwrap();
        let copy_s = copied as f64 / copying.elapsed().as_secs_f64();
        println!("[raw COPY] {copied} rows into gpu_telemetry in {:.2} s = {copy_s:.0} rows/s", copying.elapsed().as_secs_f64());
        println!("ratio, API ingest / raw COPY: {:.0} %", ingest / copy_s * 100.0);
        drop(conn);
        cp.stop().await;

        // The per-report path, in the same run: this bench again against the baseline binary.
        if let Some(dir) = std::env::var_os("TELEMETRY_BASELINE_BIN_DIR").filter(|d| !d.is_empty()) {
            let out = tokio::process::Command::new(std::env::current_exe().unwrap())
                .env("AIRTIME_BIN_DIR", dir)
                .env("TELEMETRY_BENCH_CHILD", "1")
                .arg("--bench")
                .output()
                .await
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            print!("{stdout}");
            if let Some(before) = stdout
                .lines()
                .find_map(|l| l.split("RESULT ingest_samples_per_s=").nth(1))
                .and_then(|v| v.trim().parse::<f64>().ok())
            {
                println!(
                    "group commit / per-report path: {:.1}× ({ingest:.0} against {before:.0} GPU samples/s); per-report / raw COPY: {:.0} %",
                    ingest / before,
                    before / copy_s * 100.0
                );
            } else {
                println!("the baseline run gave no result: {}", String::from_utf8_lossy(&out.stderr));
            }
        }
    });
}
