//! The one place Airtime runs untrusted policy modules: wasmtime behind a narrow API whose every
//! limit is written down. No other crate in the workspace should depend on wasmtime.
//!
//! ```no_run
//! use airtime_policy_host::{EvaluationRequest, Lane, PolicyLimits, PolicyRuntime, RuntimeConfig};
//!
//! # fn main() -> Result<(), airtime_policy_host::PolicyError> {
//! # let (wasm, snapshot_bytes): (Vec<u8>, Vec<u8>) = (vec![], vec![]);
//! let runtime = PolicyRuntime::new(RuntimeConfig::default())?; // once per process
//! let policy = runtime.compile(&wasm)?; // at upload: every check, then cached by sha256
//! // Each cycle, on a blocking thread (tokio::task::spawn_blocking):
//! let limits = PolicyLimits::default();
//! let request = EvaluationRequest::new(&policy, &snapshot_bytes, &limits).in_lane(Lane::Platform);
//! let record = runtime.evaluate(request); // logs and timing, kept whether or not it succeeded
//! let evaluation = record.into_result()?;
//! for decision in evaluation.decisions()? {
//!     // check against the snapshot (airtime_policy_sdk::check::check_decisions), then act
//! }
//! # Ok(()) }
//! ```
//!
//! # How wasmtime is used, and why
//! - **One engine per process** ([`PolicyRuntime`]), with the **pooling allocator** and
//!   **copy-on-write memory images**: a fresh instance per evaluation costs microseconds, so no
//!   state survives from one evaluation to the next and none needs resetting.
//! - **An `InstancePre` per module**, built at [`PolicyRuntime::compile`] with the two host
//!   functions linked, so an evaluation does no import resolution.
//! - **Deadlines by epoch interruption**, with a dedicated ticker thread (not a tokio task).
//!   Epochs over fuel: epoch checks cost about 13% of `priority-best-fit`'s time at 10,000 pending
//!   workloads (measured by turning them off), fuel about twice that or more, and our target is a
//!   policy within 1.5× of native speed. Fuel's one advantage, deterministic
//!   and reproducible cut-off points, matters less than speed here: a policy is a pure function of
//!   its snapshot, so a cycle that times out is replayed from the recorded snapshot, not from a
//!   fuel count. The price: a deadline is wall-clock time, so a loaded host times out sooner.
//! - **Cheap resets**: where Linux has `PAGEMAP_SCAN` (6.7+), only the pages an instance wrote are
//!   zeroed when it ends (a Rust policy's 1 MiB stack is mostly untouched), which halves the floor of
//!   an evaluation of a Rust policy; elsewhere the pool zeroes what it keeps resident.
//! - **Where the time goes** is measured for every evaluation
//!   ([`EvaluationRecord::phases`]): instantiation, copies, the guest's own work, the output
//!   check, teardown. `cargo bench -p airtime-policy-host --bench policy_eval` reports them
//!   (`BENCHMARKS.md`).
//! - **Memory capped per evaluation** by a `ResourceLimiter` ([`PolicyLimits::max_memory_bytes`])
//!   under an engine-wide ceiling ([`RuntimeConfig::max_memory_bytes`]); growth past it traps with
//!   a precise error rather than returning -1, which a Rust guest would turn into an anonymous abort.
//! - **Stack bounded** by `max_wasm_stack` ([`RuntimeConfig::max_wasm_stack`]): engine-wide in
//!   wasmtime, so it is not a per-policy limit.
//! - **Host functions are bounded**: `airtime.log` keeps at most [`PolicyLimits::max_log_lines`]
//!   lines and [`PolicyLimits::max_log_bytes`] bytes and only counts the rest; `airtime.fail`
//!   reads at most 4 KiB. Both check the guest's pointers against its memory.
//! - **No WASI, no clock, no randomness, no other imports**: a module importing anything else is
//!   refused at upload, naming the import.
//! - **Output checked** where it lies in the guest's memory (size, bounds, structure:
//!   `abi::validate_decisions`, which allocates nothing) before it is copied out; what it means is
//!   checked by the caller against the snapshot.
//! - Compiled code is cached in memory by the module's sha256. Precompiled artifacts are only
//!   valid for one wasmtime version, `Config` and CPU: a disk cache must also key on
//!   [`PolicyRuntime::compatibility_hash`], and must never deserialize bytes it did not write.

mod error;
mod lanes;
mod limits;
mod runtime;

pub use error::PolicyError;
pub use lanes::{Lane, LaneSlots};
pub use limits::{PolicyLimits, RuntimeConfig};
pub use runtime::{
    CompiledPolicy, Evaluation, EvaluationPhases, EvaluationRecord, EvaluationRequest, ParamsVerdict, PolicyLog,
    PolicyRuntime,
};

/// The ABI version this host speaks.
pub use airtime_policy_sdk::abi::ABI_VERSION;
