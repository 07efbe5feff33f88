//! GPU sharing on the Alibaba trace's four pod lists (default, gpushare40, multigpu20, gpuspec10):
//! the share of owned GPU capacity allocated and busy, and how fragmented the free capacity was,
//! for three ways of placing the fractional pods, all through the production core with slo-first:
//!
//! - `least fragmenting`: shared (MPS) GPUs, shares placed where they add the least expected
//!   fragmentation for the work that typically arrives (Weng et al., ATC '23; the default);
//! - `best fit`: shared GPUs, shares placed on the fullest GPU they fit (`{"share_fit": "best_fit"}`);
//! - `whole GPUs`: GPUs not shared, so every fractional pod holds a whole GPU (what Airtime did
//!   before GPU sharing, and what a scheduler without sharing does).
//!
//! The slice: 150 GPU nodes from day 115 (`--start-s 9936000`) with arrivals compressed 34×, the
//! day comparison of `docs/simulator-results.md`; `AIRTIME_SHARING_COMPRESS` and
//! `AIRTIME_SHARING_NODES` change it.
//!
//! `cargo bench -p airtime-sim --bench gpu_sharing` (traces from `../shared/traces` or
//! `AIRTIME_TRACES`).

#![allow(clippy::print_stdout, clippy::expect_used)]

use std::path::PathBuf;

use airtime_protocol::sharing::GpuSharing;
use airtime_sim::engine::{self, Config};
use airtime_sim::policy::Catalog;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    let dir = std::env::var_os("AIRTIME_TRACES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/traces"))
        .join("alibaba-openb-2023");
    let compress: f64 = env_or("AIRTIME_SHARING_COMPRESS", 34.0);
    let nodes: usize = env_or("AIRTIME_SHARING_NODES", 150);
    let catalog = Catalog::new().expect("the runtime starts");
    let ways = [
        ("least fragmenting", "slo-first", GpuSharing::Mps),
        ("best fit", r#"slo-first={"share_fit": "best_fit"}"#, GpuSharing::Mps),
        ("whole GPUs", "slo-first", GpuSharing::None),
    ];
    println!(
        "{nodes} GPU nodes from day 115, arrivals compressed {compress}×; slo-first through the production core\n"
    );
    println!(
        "| pod list | placement | fractional pods | allocated | busy | fragmented share of free | real-time SLO | completed GPU-h | wall |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for list in ["default", "gpushare40", "multigpu20", "gpuspec10"] {
        for (way, policy, sharing) in ways {
            let options = airtime_sim::alibaba::Options {
                pod_file: format!("openb_pod_list_{list}.csv"),
                compress,
                start_s: 9_936_000,
                max_nodes: Some(nodes),
                gpu_sharing: sharing,
                ..Default::default()
            };
            let (fleet, trace) =
                airtime_sim::alibaba::load(&dir, &options).expect("the Alibaba trace loads (set AIRTIME_TRACES)");
            let fractional = trace.workloads.iter().filter(|w| w.gpus == 1 && w.gpu_milli < 1000).count();
            let policy = catalog.load(policy).expect("the policy loads");
            let s = engine::run(&catalog, &fleet, &trace, &policy, &[], &Config::default()).expect("the replay runs");
            println!(
                "| {list} | {way} | {fractional} of {} | {:.1}% | {:.1}% | {:.1}% | {:.2}% | {:.0} | {:.1} s |",
                trace.workloads.len(),
                100.0 * s.allocated_share,
                100.0 * s.busy_share,
                100.0 * s.fragmented_share_of_free,
                100.0 * s.realtime_slo_attainment,
                s.completed_gpu_hours,
                s.wall_s
            );
        }
    }
}
