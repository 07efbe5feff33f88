//! What an open dashboard tab costs at 1,000 nodes × 8 GPUs: bytes transferred per minute, time
//! to first render and the server's CPU, for the overview and fleet pages against "today's page"
//! (the v0.1 page, which fetched every node and every GPU — twice: `GET /nodes` carries each
//! node's GPUs, `GET /gpus` all of them again — every 3 s), on the same fleet in the same run.
//!
//! The fleet is registered in the database directly (an agent per node would not fit on the
//! machine the numbers are taken on): 1,000 ready nodes with a cost and 8 simulated H100s each,
//! with latest telemetry, and a day of hourly usage roll-ups for the overview's charts; a task
//! keeps the nodes heard from. `tests/browser/dashboard-bench.mjs` drives headless Chromium and
//! measures; the old page's files come from git (`git show 6eae2e7^:web/…`).
//!
//! Run with `make bench` (release binaries), or alone:
//! `AIRTIME_BIN_DIR=$PWD/target/release cargo bench -p airtime-tests --bench dashboard`.
//! `DASHBOARD_BENCH_TABS`, `DASHBOARD_BENCH_WINDOW_S` and `DASHBOARD_BENCH_ROUNDS` change the
//! tabs per page (2), the measured window (60 s) and the rounds (3).

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use airtime_tests::{ADMIN_EMAIL, ADMIN_PASSWORD, ControlPlane, TestDb};

const NODES: i64 = 1000;
const GPUS_PER_NODE: i64 = 8;
const CHROMIUM: &str = "/usr/bin/chromium";
/// The last commit with the v0.1 page (the React app replaced it in 6eae2e7).
const OLD_PAGE: &str = "6eae2e7^";

fn root() -> PathBuf {
    let tests = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    tests.parent().map(Path::to_path_buf).unwrap_or(tests)
}

/// The control plane's process id: the one process whose command line names this database.
fn control_plane_pid(db_url: &str) -> u32 {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let args: Vec<String> = cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        if args.first().is_some_and(|a| a.ends_with("airtime-control-plane"))
            && args.iter().any(|a| a == db_url)
            && args.iter().any(|a| a == "--listen")
        {
            found.push(pid);
        }
    }
    assert_eq!(found.len(), 1, "one control plane on {db_url}: {found:?}");
    found[0]
}

fn old_page(into: &Path) {
    for file in ["index.html", "app.js", "style.css"] {
        let out = std::process::Command::new("git")
            .current_dir(root())
            .args(["show", &format!("{OLD_PAGE}:web/{file}")])
            .output()
            .expect("git (the old page is read from the repository's history)");
        assert!(out.status.success(), "git show {OLD_PAGE}:web/{file}: {}", String::from_utf8_lossy(&out.stderr));
        std::fs::write(into.join(file), out.stdout).unwrap();
    }
}

async fn register_fleet(pool: &sqlx::PgPool) {
    sqlx::query(
        "INSERT INTO nodes (id, name, hostname, state, cpu_millis, memory_mb, cost_per_hour, gpu_source, \
                            agent_version, cpu_util, memory_used_mb) \
         SELECT gen_random_uuid(), format('node-%s', lpad(k::text, 4, '0')), format('host-%s', k), 'ready', 64000, \
                1048576, 8 * 2.5, 'simulated', 'bench', (k % 100) / 100.0, 200000 + k \
         FROM generate_series(0, $1 - 1) AS k",
    )
    .bind(NODES)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO gpus (id, node_id, device_index, uuid, model, memory_mb, simulated, util, memory_used_mb, \
                           temperature_c, power_w, ecc_errors) \
         SELECT gen_random_uuid(), n.id, i, format('GPU-%s-%s', n.name, i), 'H100', 81920, true, \
                ((i * 13 + length(n.name) * 7 + ascii(right(n.name, 1))) % 101) / 100.0, 40000, 60, 400, 0 \
         FROM nodes n CROSS JOIN generate_series(0, $1 - 1) AS i",
    )
    .bind(GPUS_PER_NODE)
    .execute(pool)
    .await
    .unwrap();
    // A day of closed hours, as the roll-up writes them: every GPU owned, half of it busy.
    sqlx::query(
        "INSERT INTO gpu_usage_hourly (hour, gpu_id, node_id, model, tenant_id, class, owned_s, allocated_s, busy_s, \
                                       cost_per_gpu_hour) \
         SELECT date_trunc('hour', now()) - make_interval(hours => h), g.id, g.node_id, g.model, NULL, NULL, \
                3600, 0, 1800, 2.5 \
         FROM gpus g CROSS JOIN generate_series(1, 24) AS h",
    )
    .execute(pool)
    .await
    .unwrap();
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let web = root().join("web");
        assert!(Path::new(CHROMIUM).exists(), "{CHROMIUM} is missing: apt-get install -y chromium");
        assert!(
            web.join("node_modules/playwright-core").is_dir(),
            "web/node_modules has no playwright-core: run `make web` (npm ci in web/)"
        );
        let old = tempfile::tempdir().unwrap();
        old_page(old.path());

        let db = TestDb::create().await.unwrap();
        let cp = ControlPlane::start(&db, &[]).await.unwrap();
        let pool = db.pool().await.unwrap();
        register_fleet(&pool).await;
        // Heard from, as agents heartbeating would be (the harness loses a node after 3 s).
        let keepalive = {
            let pool = pool.clone();
            tokio::spawn(async move {
                loop {
                    let _ = sqlx::query("UPDATE nodes SET last_seen_at = now()").execute(&pool).await;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            })
        };
        let summary = cp.api().ok("/api/v1/fleet/summary").await.unwrap();
        assert_eq!(summary["gpus"], NODES * GPUS_PER_NODE, "{summary}");
        assert_eq!(summary["nodes_ready"], NODES, "{summary}");

        let var = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.to_owned());
        let output = tokio::process::Command::new("node")
            .arg(root().join("tests/browser/dashboard-bench.mjs"))
            .env("AIRTIME_URL", &cp.url)
            .env("ADMIN_EMAIL", ADMIN_EMAIL)
            .env("ADMIN_PASSWORD", ADMIN_PASSWORD)
            .env("OLD_WEB", old.path())
            .env("CP_PID", control_plane_pid(&db.url).to_string())
            .env("DB_NAME", &db.name)
            .env("GPUS", (NODES * GPUS_PER_NODE).to_string())
            .env("WEB_DIR", &web)
            .env("CHROMIUM", CHROMIUM)
            .env("TABS", var("DASHBOARD_BENCH_TABS", "2"))
            .env("WINDOW_S", var("DASHBOARD_BENCH_WINDOW_S", "60"))
            .env("ROUNDS", var("DASHBOARD_BENCH_ROUNDS", "3"))
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .output()
            .await
            .expect("starting node (is Node.js installed? see scripts/prerequisites.sh)");
        keepalive.abort();
        let stdout = String::from_utf8_lossy(&output.stdout);
        print!("{stdout}");
        assert!(output.status.success(), "the benchmark script failed ({})", output.status);
        let result: serde_json::Value = serde_json::from_str(
            stdout.lines().find_map(|l| l.strip_prefix("RESULT ")).expect("a RESULT line"),
        )
        .unwrap();

        println!(
            "\ndashboard at {NODES} nodes × {GPUS_PER_NODE} GPUs, {} tab(s) per page, {} s windows, {} rounds (medians)",
            result["tabs"], result["window_s"], result["rounds"]
        );
        println!(
            "{:<22} {:>14} {:>10} {:>14} {:>16} {:>16}",
            "page", "KB/min/tab", "req/min", "first render", "CP CPU/tab", "DB CPU/tab"
        );
        let old_bytes = result["old"]["bytes_per_min_per_tab"].as_f64().unwrap();
        let old_cpu = result["old"]["cp_cpu_s_per_min_per_tab"].as_f64().unwrap()
            + result["old"]["db_cpu_s_per_min_per_tab"].as_f64().unwrap();
        for page in ["old", "overview", "fleet"] {
            let r = &result[page];
            let f = |k: &str| r[k].as_f64().unwrap();
            println!(
                "{:<22} {:>14.1} {:>10.1} {:>11.0} ms {:>12.2} s/min {:>12.2} s/min",
                if page == "old" { "today's page (v0.1)" } else { page },
                f("bytes_per_min_per_tab") / 1000.0,
                f("requests_per_min_per_tab"),
                f("first_render_ms"),
                f("cp_cpu_s_per_min_per_tab"),
                f("db_cpu_s_per_min_per_tab"),
            );
        }
        for page in ["overview", "fleet"] {
            let r = &result[page];
            let cpu = r["cp_cpu_s_per_min_per_tab"].as_f64().unwrap() + r["db_cpu_s_per_min_per_tab"].as_f64().unwrap();
            println!(
                "{page}: {:.1}× fewer bytes than today's page, {:.1}× less server CPU (control plane + database)",
                old_bytes / r["bytes_per_min_per_tab"].as_f64().unwrap(),
                old_cpu / cpu.max(1e-9),
            );
        }
        cp.stop().await;
    });
}
