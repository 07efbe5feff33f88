//! The built-in Airtime policies as WebAssembly modules, compiled from the policy crates by
//! `build.rs` (a nested `cargo build --target wasm32-unknown-unknown`) and embedded here.
//!
//! The control plane registers [`ALL`] at startup; tests use the constants to run real modules.

/// `policies/priority-best-fit`: highest priority first, best fit on free GPUs.
pub const PRIORITY_BEST_FIT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/priority_best_fit.wasm"));

/// `policies/slo-first`: the default platform policy (real-time first, quotas with reclaim, burst
/// reserve, backfill with a reservation, preemption for bursts).
pub const SLO_FIRST: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/slo_first.wasm"));

/// `policies/fair-share`: weighted fair share across tenants by decayed GPU-hours (guarantees first,
/// reclaim from the tenant most over its fair share).
pub const FAIR_SHARE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/fair_share.wasm"));

/// `policies/cost-aware`: CPU nodes for CPU-capable inference, the cheapest fitting GPUs for the
/// rest; never preempts.
pub const COST_AWARE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cost_aware.wasm"));

/// `policies/template`: the first-fit starting point authors copy. Not a built-in policy (it is not
/// in [`ALL`]); built so tests prove the template still compiles to a working module.
pub const TEMPLATE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/airtime_policy_template.wasm"));

/// `policies/sdk-probe`: a test policy that takes every path of the Rust SDK on demand (panic,
/// failure, allocation, logging). For the host's tests; not in [`ALL`].
pub const SDK_PROBE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/airtime_sdk_probe.wasm"));

/// `policies/baseline-fifo`: one queue in submission order, head-of-line blocking, no preemption.
pub const BASELINE_FIFO: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/baseline_fifo.wasm"));

/// `policies/baseline-static-partition`: a dedicated inference pool and a training pool.
pub const BASELINE_STATIC_PARTITION: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/baseline_static_partition.wasm"));

/// `policies/baseline-strict-priority`: strict priority with preemption (Kueue's and Slurm's default).
pub const BASELINE_STRICT_PRIORITY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/baseline_strict_priority.wasm"));

/// `policies/baseline-best-fit`: the BestFit scoring of Weng et al.'s simulator (ATC '23).
pub const BASELINE_BEST_FIT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/baseline_best_fit.wasm"));

/// `policies/baseline-random`: the Random scoring of Weng et al.'s simulator (ATC '23).
pub const BASELINE_RANDOM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/baseline_random.wasm"));

/// `policies/baseline-fgd`: Weng et al.'s FGD measure on the SDK's exact placer, alone.
pub const BASELINE_FGD: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/baseline_fgd.wasm"));

/// What platform teams run today, written as ordinary policies: the simulator compares Airtime's
/// policies against these (`airtime-sim`). Not in [`ALL`]: the control plane does not register them.
pub const BASELINES: &[(&str, &[u8])] = &[
    ("fifo", BASELINE_FIFO),
    ("static-partition", BASELINE_STATIC_PARTITION),
    ("strict-priority", BASELINE_STRICT_PRIORITY),
];

/// The placement baselines of Weng et al.'s fill experiment, reimplemented from their simulator:
/// `airtime-sim fill` compares against these (and checks its protocol by them). Not in [`ALL`] nor in
/// [`BASELINES`]: they place and never queue by priority, so a replay of mixed work says little.
pub const FILL_BASELINES: &[(&str, &[u8])] =
    &[("weng-best-fit", BASELINE_BEST_FIT), ("weng-random", BASELINE_RANDOM), ("fgd", BASELINE_FGD)];

/// Every built-in policy: (name, module bytes).
pub const ALL: &[(&str, &[u8])] = &[
    ("slo-first", SLO_FIRST),
    ("priority-best-fit", PRIORITY_BEST_FIT),
    ("fair-share", FAIR_SHARE),
    ("cost-aware", COST_AWARE),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modules_are_core_wasm() {
        for (name, bytes) in
            ALL.iter().chain(BASELINES).chain([("template", TEMPLATE), ("sdk-probe", SDK_PROBE)].iter())
        {
            assert_eq!(bytes.get(..8), Some(&b"\0asm\x01\0\0\0"[..]), "{name} is a core wasm module");
        }
    }
}
