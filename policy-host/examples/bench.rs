//! Measures what a control plane pays per evaluation, and how a Rust policy in Wasm compares with
//! the same policy compiled natively.
//!
//! ```text
//! cargo run --release -p airtime-policy-host --example bench
//! ```
//!
//! - `no-op`: instantiate a tiny hand-written module, copy an empty snapshot in, call it, copy 8
//!   bytes out: the floor of every evaluation.
//! - `priority-best-fit`: the built-in policy at three fleet sizes, in Wasm (the host's whole
//!   `evaluate`) and natively (the same work the guest does: decode the snapshot, decide, encode).

#![allow(clippy::print_stdout)] // a benchmark's report is its output

use std::time::{Duration, Instant};

use airtime_builtin_policies::PRIORITY_BEST_FIT;
use airtime_policy_host::{PolicyLimits, PolicyRuntime, RuntimeConfig};
use airtime_policy_sdk::abi::{Snapshot, encode_snapshot};
use airtime_policy_sdk::guest::evaluate_encoded;
use airtime_policy_sdk::testing::SnapshotFixture;
use priority_best_fit::PriorityBestFit;

const NO_OP: &str = r#"(module
  (memory (export "memory") 1)
  (data (i32.const 256) "ATDC\00\00\00\00")
  (func (export "airtime_abi_version") (result i32) (i32.const 1))
  (func (export "airtime_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "airtime_evaluate") (param i32 i32) (result i64)
    (i64.or (i64.shl (i64.const 256) (i64.const 32)) (i64.const 8))))"#;

/// Runs `f` until `budget` is spent (at least `min_runs` times); returns the median and minimum.
fn measure(budget: Duration, min_runs: u32, mut f: impl FnMut()) -> (Duration, Duration, u32) {
    let mut times = Vec::new();
    let started = Instant::now();
    while times.len() < min_runs as usize || started.elapsed() < budget {
        let t = Instant::now();
        f();
        times.push(t.elapsed());
    }
    times.sort();
    (times[times.len() / 2], times[0], times.len() as u32)
}

fn us(d: Duration) -> String {
    format!("{:>10.1} µs", d.as_secs_f64() * 1e6)
}

fn main() {
    let runtime = PolicyRuntime::new(RuntimeConfig::default()).expect("runtime");
    let limits = PolicyLimits::default();

    let wasm = wat::parse_str(NO_OP).expect("valid WAT");
    let no_op = runtime.compile(&wasm).expect("compiles");
    let empty = encode_snapshot(&Snapshot::default());
    let (median, min, runs) = measure(Duration::from_secs(2), 1000, || {
        runtime.evaluate(&no_op, &empty, &limits).expect("runs");
    });
    println!("no-op (instantiate + evaluate)           median {}  min {}  ({runs} runs)", us(median), us(min));

    let started = Instant::now();
    let fresh = PolicyRuntime::new(RuntimeConfig::default()).expect("runtime");
    fresh.compile(PRIORITY_BEST_FIT).expect("compiles");
    println!("priority-best-fit compile ({} KB)       {}", PRIORITY_BEST_FIT.len() / 1000, us(started.elapsed()));

    let policy = runtime.compile(PRIORITY_BEST_FIT).expect("compiles");
    for (nodes, pending) in [(10, 50), (100, 1_000), (1_000, 10_000)] {
        let bytes = SnapshotFixture::synthetic_fleet(nodes, 8, pending, 7).encode();
        let budget = Duration::from_secs(3);
        let (wasm_median, wasm_min, runs) = measure(budget, 20, || {
            runtime.evaluate(&policy, &bytes, &limits).expect("runs");
        });
        let (native_median, native_min, _) = measure(budget, 20, || {
            evaluate_encoded(&PriorityBestFit, &bytes, &mut Vec::new()).expect("runs");
        });
        let evaluation = runtime.evaluate(&policy, &bytes, &limits).expect("runs");
        println!(
            "best-fit {nodes:>5} nodes × 8 GPUs, {pending:>6} pending ({:>7} B in, {:>7} B out, {:>4.1} MiB memory)",
            bytes.len(),
            evaluation.output.len(),
            evaluation.memory_bytes as f64 / (1 << 20) as f64
        );
        println!(
            "    wasm   median {}  min {}  ({runs} runs)\n    native median {}  min {}\n    wasm / native (median) {:.2}×",
            us(wasm_median),
            us(wasm_min),
            us(native_median),
            us(native_min),
            wasm_median.as_secs_f64() / native_median.as_secs_f64()
        );
    }
}
