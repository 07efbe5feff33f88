//! GPU sharing on the Alibaba trace's four pod lists (default, gpushare40, multigpu20, gpuspec10),
//! measured as Weng et al. ("Beware of Fragmentation", USENIX ATC '23, who published them) measure
//! placement: **fill the cluster** — the pods arrive one a second in file order and never leave —
//! and see, when it can take no more, how much of the GPU capacity the placed pods ask for (what
//! they use: a 0.46-GPU pod counts 0.46 however much it holds), how much is allocated (held), how
//! many pods are left waiting, and the GPU capacity left free that no waiting pod can use.
//! Three ways of placing the fractional pods, all through the production core with slo-first:
//!
//! - `least fragmenting`: GPUs shared by MPS, shares placed where they add the least expected
//!   fragmentation for the work that typically arrives (the default);
//! - `best fit`: GPUs shared, shares placed on the fullest GPU they fit (`{"placement": "best_fit"}`);
//! - `whole GPUs`: GPUs not shared, every fractional pod holds a whole GPU (Airtime before GPU
//!   sharing, and any scheduler without it).
//!
//! The fleet is the trace's 1,213 GPU nodes (6,212 GPUs); `AIRTIME_SHARING_NODES` takes the first N.
//! `cargo bench -p airtime-sim --bench gpu_sharing` (traces from `../shared/traces` or
//! `AIRTIME_TRACES`).

#![allow(clippy::print_stdout, clippy::expect_used)]

use airtime_protocol::sharing::GpuSharing;
use airtime_sim::engine::{self, Config};
use airtime_sim::policy::Catalog;

fn main() {
    let dir = airtime_sim::shared_traces().join("alibaba-openb-2023");
    let nodes: Option<usize> = std::env::var("AIRTIME_SHARING_NODES").ok().and_then(|v| v.parse().ok());
    let catalog = Catalog::new().expect("the runtime starts");
    let ways = [
        ("least fragmenting", "slo-first", GpuSharing::Mps),
        ("best fit", r#"slo-first={"placement": "best_fit"}"#, GpuSharing::Mps),
        ("whole GPUs", "slo-first", GpuSharing::None),
    ];
    println!("fill the cluster: pods arrive 1/s in file order and stay; slo-first through the production core\n");
    println!(
        "| pod list | placement | GPUs | fractional pods | capacity used by placed pods | allocated (held) | pods waiting | free but unusable GPUs | wall |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for list in ["default", "gpushare40", "multigpu20", "gpuspec10"] {
        for (way, policy, sharing) in ways {
            let options = airtime_sim::alibaba::Options {
                pod_file: format!("openb_pod_list_{list}.csv"),
                max_nodes: nodes,
                gpu_sharing: sharing,
                fill: true,
                ..Default::default()
            };
            let (fleet, trace) =
                airtime_sim::alibaba::load(&dir, &options).expect("the Alibaba trace loads (set AIRTIME_TRACES)");
            let fractional = trace.workloads.iter().filter(|w| w.gpus == 1 && w.gpu_milli < 1000).count();
            let window = trace.workloads.iter().map(|w| w.arrive_s).max().unwrap_or(0) + 60;
            let config = Config { window_s: window, until_s: window, sample_s: 60, ..Config::default() };
            let policy = catalog.load(policy).expect("the policy loads");
            let s = engine::run(&catalog, &fleet, &trace, &policy, &[], &config).expect("the replay runs");
            // The cluster when the arrivals have stopped: the last sample of the window.
            let end = s.series.iter().rev().find(|x| x.t_s <= window).expect("a sample");
            println!(
                "| {list} | {way} | {} | {fractional} of {} | {:.1}% | {:.1}% | {} | {:.0} | {:.1} s |",
                s.gpus,
                trace.workloads.len(),
                100.0 * end.busy_gpus / s.gpus as f64,
                100.0 * end.allocated_gpus / s.gpus as f64,
                end.pending,
                end.fragmented_gpus,
                s.wall_s
            );
        }
    }
}
