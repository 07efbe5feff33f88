//! Decision to process start: how long from the moment the scheduling loop commits a placement to
//! the moment the workload's own process runs on the node, through the agent's long-poll.
//!
//! Real processes, real PostgreSQL. Baseline, measured in the same run: spawning the same command
//! directly (the cost of starting a shell at all). Run with `make bench` (release binaries).

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use airtime_tests::{ControlPlane, NodeAgent, TestDb, nodes_ready, workload_reaches};
use serde_json::json;

const RUNS: usize = 40;

fn now_ns() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn summary(name: &str, mut ms: Vec<f64>) -> f64 {
    ms.sort_by(f64::total_cmp);
    let median = percentile(&ms, 0.5);
    println!(
        "{name:<40} median {median:7.2} ms   p90 {:7.2} ms   p99 {:7.2} ms   min {:7.2} ms   max {:7.2} ms   (n={})",
        percentile(&ms, 0.9),
        percentile(&ms, 0.99),
        ms[0],
        ms[ms.len() - 1],
        ms.len()
    );
    median
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let dir = std::env::temp_dir().join(format!("airtime-bench-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();

        // Baseline: the same shell command, spawned directly.
        let mut baseline = Vec::new();
        for i in 0..RUNS {
            let out = dir.join(format!("base-{i}"));
            let before = now_ns();
            let status = std::process::Command::new("sh")
                .args(["-c", &format!("date +%s%N > {}", out.display())])
                .status()
                .unwrap();
            assert!(status.success());
            let started: i64 = std::fs::read_to_string(&out).unwrap().trim().parse().unwrap();
            baseline.push((started - before) as f64 / 1e6);
        }

        let db = TestDb::create().await.unwrap();
        let cp = ControlPlane::start(&db, &[]).await.unwrap();
        let api = cp.api();
        // A second replica on the same database: it stands by (the first leads the scheduling
        // loop) and serves agents; it hears the leader's placements through LISTEN/NOTIFY.
        let standby = ControlPlane::start(&db, &[]).await.unwrap();
        let replicas = [&cp, &standby];
        let base = summary("baseline: spawn the command directly", baseline);
        // The default (every workload under its tether, output spooled, its record written for a
        // later agent to adopt), then `--on-lost-contact keep` (the same, a tether that never
        // fences), then the default with the agent on the standby replica: what a replica that
        // does not lead adds.
        let mut medians = Vec::new();
        // Each round's agent has a GPU model of its own, which its workloads ask for.
        let mut agents = Vec::new();
        for (round, (label, model, extra, replica)) in [
            ("tethered, agent on the leader", "H100-SXM", None, 0),
            ("tethered, --on-lost-contact keep, agent on the leader", "A100-SXM", Some("keep"), 0),
            ("tethered, agent on a standby replica", "L40S", None, 1),
        ]
        .into_iter()
        .enumerate()
        {
            let gpus = format!("1:{model}:81920");
            let mut args = vec!["--simulate-gpus", gpus.as_str()];
            if let Some(mode) = extra {
                args.extend(["--on-lost-contact", mode]);
            }
            agents.push(NodeAgent::start(replicas[replica], &format!("bench-{round}"), &args).await.unwrap());
            nodes_ready(&api, round + 1).await.unwrap();
            let mut through_airtime = Vec::new();
            let mut submit_to_start = Vec::new();
            for i in 0..RUNS {
                let out = dir.join(format!("run-{round}-{i}"));
                let submitted = now_ns();
                let w = api
                    .created(
                        "/api/v1/workloads",
                        &json!({"name": format!("bench-{round}-{i}"), "class": "evaluation",
                                "resources": {"gpu_count": 1, "gpu_models": [model]},
                                "command": ["sh", "-c", format!("date +%s%N > {}", out.display())]}),
                    )
                    .await
                    .unwrap();
                let id = w["id"].as_str().unwrap();
                let done = workload_reaches(&api, id, "succeeded", Duration::from_secs(30)).await.unwrap();
                let started: i64 = std::fs::read_to_string(&out).unwrap().trim().parse().unwrap();
                let place = done["decisions"].as_array().unwrap().iter().find(|d| d["kind"] == "place").unwrap();
                let decided = chrono::DateTime::parse_from_rfc3339(place["decided_at"].as_str().unwrap()).unwrap();
                through_airtime.push((started - decided.timestamp_nanos_opt().unwrap()) as f64 / 1e6);
                submit_to_start.push((started - submitted) as f64 / 1e6);
            }
            println!("decision → process start (n={RUNS}, one agent, one simulated GPU), {label}");
            let airtime = summary("decision committed → process running", through_airtime);
            summary("submit (HTTP) → process running", submit_to_start);
            println!("ratio of medians (decision→start / direct spawn): {:.1}×", airtime / base);
            medians.push(airtime);
        }
        println!(
            "keeping work past the lease (--on-lost-contact keep) against the default: {:+.2} ms to the median start",
            medians[1] - medians[0]
        );
        println!("an agent on the standby replica: {:+.2} ms against one on the leader", medians[2] - medians[0]);
        standby.stop().await;
        cp.stop().await;
        let _ = std::fs::remove_dir_all(&dir);
    });
}
