//! The simulator's speed on the whole Alibaba trace (149 days, 1,213 GPU nodes, 6,212 GPUs, 8,152
//! pods) with a Wasm policy through the production core: the median wall time of `AIRTIME_SIM_RUNS`
//! replays (default 3) per policy, and the decisions per second they sustained.
//!
//! `cargo bench -p airtime-sim --bench alibaba_replay` (traces from `../shared/traces` or
//! `AIRTIME_TRACES`; `AIRTIME_SIM_POLICIES=slo-first,fifo` to choose the policies).

#![allow(clippy::print_stdout, clippy::expect_used)]

use airtime_sim::engine::{self, Config};
use airtime_sim::policy::Catalog;

fn main() {
    let dir = airtime_sim::shared_traces().join("alibaba-openb-2023");
    let (fleet, trace) =
        airtime_sim::alibaba::load(&dir, &Default::default()).expect("the Alibaba trace loads (set AIRTIME_TRACES)");
    let runs: usize = std::env::var("AIRTIME_SIM_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let policies = std::env::var("AIRTIME_SIM_POLICIES").unwrap_or_else(|_| "slo-first".into());
    let catalog = Catalog::new().expect("the runtime starts");
    println!("whole Alibaba trace: {} pods, {} GPUs, {} runs each", trace.workloads.len(), fleet.gpu_count(), runs);
    for name in policies.split(',') {
        let policy = catalog.load(name).expect("the policy loads");
        let mut walls = Vec::new();
        let mut rates = Vec::new();
        let mut cycles = 0;
        for _ in 0..runs {
            let scores =
                engine::run(&catalog, &fleet, &trace, &policy, &[], &Config::default()).expect("the replay runs");
            walls.push(scores.wall_s);
            rates.push(scores.decisions_per_s);
            cycles = scores.cycles;
        }
        walls.sort_by(f64::total_cmp);
        rates.sort_by(f64::total_cmp);
        println!(
            "{name:<18} median {:>6.2} s (min {:.2}, max {:.2}) · {cycles} cycles · median {:.0} decisions/s",
            walls[walls.len() / 2],
            walls[0],
            walls[walls.len() - 1],
            rates[rates.len() / 2]
        );
    }
}
