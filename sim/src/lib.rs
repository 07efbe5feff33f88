//! Airtime's simulator (`docs/simulator.md`): the command line around the replay engine
//! (`airtime-replay`), with what only it needs — the real traces' loaders, a seeded generator, the
//! fill experiment and the reports.
//!
//! - [`alibaba`], [`azure`], [`generate`]: the loaders of the real traces and a seeded generator,
//!   each converting to the replay's formats ([`format`]);
//! - [`fill`]: Weng et al.'s fill experiment through the replay; [`report`]: the table, the JSON and
//!   the plot.
//!
//! The replay's modules are re-exported as they were when they lived here.

pub mod alibaba;
pub mod azure;
pub mod fill;
pub mod generate;
pub mod report;
pub mod tokens;

pub use airtime_replay::{compare, engine, format, merge, policy, score, services, share_gpus, tenant_policies};

/// Where the public traces are: `AIRTIME_TRACES`, else `../shared/traces` beside the project (what
/// the benches and tests read at run time; the traces are never copied into the repository).
pub fn shared_traces() -> std::path::PathBuf {
    std::env::var_os("AIRTIME_TRACES")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/traces"))
}
