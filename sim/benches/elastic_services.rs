//! Elastic inference services against fixed reserves, on the real traces (issue #13, "Measure"):
//! Azure's two LLM inference traces (conversation and code, Splitwise ISCA '24) as two real-time
//! services beside a day of Alibaba's GPU cluster (`cluster-trace-gpu-v2023`, openb) on a slice of
//! its fleet, each replayed through the production core with `slo-first` in Wasm, the core's
//! autoscaler run every cycle, in the four ways the issue compares:
//!
//! - `fixed-peak`: a fixed reserve sized for the peak (min = max = the replicas the peak needs);
//! - `fixed-mean`: a fixed reserve sized for the mean;
//! - `elastic`: elastic between the bounds, GPU replicas only;
//! - `cpu-first`: elastic with a CPU variant, the CPU-only nodes first.
//!
//! `cargo bench -p airtime-sim --bench elastic_services` (traces from `../shared/traces` or
//! `AIRTIME_TRACES`; about four minutes on two cores). What it replays, each changeable:
//! `AIRTIME_SERVICES_NODES` GPU nodes (60: 318 GPUs), `AIRTIME_SERVICES_CPU_NODES` CPU-only nodes
//! (80), `AIRTIME_SERVICES_SCALE` times the Azure rates (5), `AIRTIME_SERVICES_STARTUP_S` seconds
//! for a replica to load its model (0), `AIRTIME_SERVICES_SEEDS` (1; each seed past one jitters the
//! Alibaba arrivals by up to 600 s).

#![allow(clippy::print_stdout, clippy::expect_used)]

use airtime_sim::azure::{self, ServiceOptions};
use airtime_sim::engine::Config;
use airtime_sim::format::{CpuVariantSpec, ReplicaTemplate, Trace};
use airtime_sim::policy::Catalog;
use airtime_sim::report;
use airtime_sim::services::ServiceMode;

/// The day from which Alibaba's pods arrive in earnest (day 115), and its 34 days in one.
const ALIBABA_START_S: u64 = 9_936_000;
const ALIBABA_COMPRESS: f64 = 34.0;
const DAY_S: u64 = 86_400;

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    let traces = airtime_sim::shared_traces();
    let nodes: usize = env("AIRTIME_SERVICES_NODES", 60);
    let cpu_nodes: usize = env("AIRTIME_SERVICES_CPU_NODES", 80);
    let scale: f64 = env("AIRTIME_SERVICES_SCALE", 5.0);
    let startup_s: u32 = env("AIRTIME_SERVICES_STARTUP_S", 0);
    let seeds: Vec<u64> = std::env::var("AIRTIME_SERVICES_SEEDS")
        .unwrap_or_else(|_| "1".into())
        .split(',')
        .map(|s| s.trim().parse().expect("seeds are numbers"))
        .collect();

    let options = airtime_sim::alibaba::Options {
        start_s: ALIBABA_START_S,
        compress: ALIBABA_COMPRESS,
        max_nodes: Some(nodes),
        cpu_nodes: true,
        max_cpu_nodes: Some(cpu_nodes),
        ..Default::default()
    };
    let (fleet, alibaba) = airtime_sim::alibaba::load(&traces.join("alibaba-openb-2023"), &options)
        .expect("the Alibaba trace loads (set AIRTIME_TRACES)");
    let mut trace = Trace { workloads: alibaba.workloads, ..Trace::default() };
    for name in ["conv", "code"] {
        let service = ServiceOptions {
            name: name.into(),
            scale,
            // A GPU replica serves 2 req/s; a CPU replica of the same model 1/8 of that on 16 cores.
            capacity: 2.0,
            replica: ReplicaTemplate {
                gpus: 1,
                gpu_milli: 1000,
                gpu_memory_mb: 0,
                gpu_models: Vec::new(),
                cpu_millis: 4000,
                memory_mb: 16_384,
                priority: 100,
            },
            cpu_variant: Some(CpuVariantSpec { capacity: 0.25, cpu_millis: 16_000, memory_mb: 32_768 }),
            startup_s,
            ..ServiceOptions::default()
        };
        let file = traces.join(format!("azure-llm-2023/AzureLLMInferenceTrace_{name}.csv"));
        let counts = azure::arrivals(&file, u64::from(service.every_s)).expect("the Azure trace loads");
        trace.services.push(azure::to_service(&counts, &service));
    }
    let cpu_cores: u64 =
        fleet.node_types.iter().filter(|t| t.gpus == 0).map(|t| u64::from(t.count * t.cpu_millis)).sum();
    println!(
        "Alibaba day {} on {} GPU nodes ({} GPUs) and {cpu_nodes} CPU-only nodes ({} cores): {} pods; \
         Azure conv and code ×{scale} as services; slo-first; seeds {seeds:?}\n",
        ALIBABA_START_S / DAY_S,
        nodes,
        fleet.gpu_count(),
        cpu_cores / 1000,
        trace.workloads.len()
    );
    for s in &trace.services {
        let (peak, mean) = s.peak_and_mean();
        println!(
            "- service {}: mean {mean:.1} req/s, peak {peak:.1} req/s, {} req/s a GPU replica, max {} replicas",
            s.name, s.capacity, s.max_replicas
        );
    }
    println!();

    let catalog = Catalog::new().expect("the runtime starts");
    let policy = catalog.load("slo-first").expect("the policy loads");
    let jitter_s = if seeds.len() > 1 { 600 } else { 0 };
    let config = Config { window_s: DAY_S, until_s: DAY_S, jitter_s, ..Config::default() };
    let runs =
        airtime_sim::compare(&catalog, &fleet, &trace, &[policy], &seeds, &ServiceMode::COMPARED, &config, |s| {
            eprintln!("  {:<10} seed {}: {} cycles in {:.1} s", s.mode, s.seed, s.cycles, s.wall_s)
        })
        .expect("the replays run");
    let summaries = report::summarise(&runs);
    let wall = |mode: &str| {
        let mine: Vec<f64> = runs.iter().filter(|r| r.mode == mode).map(|r| r.wall_s).collect();
        mine.iter().sum::<f64>() / mine.len().max(1) as f64
    };
    println!(
        "| services | real-time SLO (both) | conv | code | demand served | GPUs allocated | GPUs busy | idle GPU-h \
         | done training GPU-h | done batch GPU-h | GPU replica-h | CPU replica-h | preempted | wasted GPU-h | LS pods' SLO | wall |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for s in &summaries {
        let service = |name: &str| s.services.iter().find(|v| v.name == name).expect("the service");
        let (conv, code) = (service("conv"), service("code"));
        let served: f64 = s.services.iter().map(|v| v.demand_served.mean).sum::<f64>() / s.services.len() as f64;
        println!(
            "| {} | {} | {} | {} | {:.2}% | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} s |",
            s.mode,
            pct(&s.service_slo_attainment),
            pct(&conv.slo_attainment),
            pct(&code.slo_attainment),
            100.0 * served,
            pct1(&s.allocated_share),
            pct1(&s.busy_share),
            whole(&s.idle_gpu_hours),
            whole(&s.completed_training_gpu_hours),
            whole(&s.completed_batch_gpu_hours),
            whole(&s.gpu_replica_hours),
            whole(&s.cpu_replica_hours),
            whole(&s.preemptions),
            whole(&s.wasted_gpu_hours),
            pct(&s.realtime_slo_attainment),
            wall(&s.mode)
        );
    }
    println!();
    println!(
        "| services | service | SLO (time) | demand served | GPU replica-h | CPU replica-h | peak GPU replicas | peak CPU replicas | replica start p95 |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for s in &summaries {
        for v in &s.services {
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} s |",
                s.mode,
                v.name,
                pct(&v.slo_attainment),
                pct(&v.demand_served),
                whole(&v.gpu_replica_hours),
                whole(&v.cpu_replica_hours),
                whole(&v.peak_gpu_replicas),
                whole(&v.peak_cpu_replicas),
                whole(&v.start_delay_p95_s)
            );
        }
    }
}

fn pct(s: &report::Spread) -> String {
    with_spread(s, 100.0, 2, "%")
}

fn pct1(s: &report::Spread) -> String {
    with_spread(s, 100.0, 1, "%")
}

fn whole(s: &report::Spread) -> String {
    with_spread(s, 1.0, 0, "")
}

/// The mean, and ± half the spread over the seeds when they differ.
fn with_spread(s: &report::Spread, scale: f64, digits: usize, suffix: &str) -> String {
    let half = (s.max - s.min) * scale / 2.0;
    if half * 10f64.powi(digits as i32) < 0.5 {
        format!("{:.*}{suffix}", digits, s.mean * scale)
    } else {
        format!("{:.*}{suffix} ±{:.*}", digits, s.mean * scale, digits, half)
    }
}
