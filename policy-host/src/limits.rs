//! The limits: per evaluation ([`PolicyLimits`], stored per policy by the control plane) and per
//! process ([`RuntimeConfig`], fixed when the engine is built).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::PolicyError;

/// What one evaluation may use. Every field has a default; the control plane stores overrides per
/// policy as JSON (`{"deadline_ms": 500}`), unknown fields refused.
///
/// Exceeding a limit ends the evaluation with an error naming it, except the log limits: lines
/// past them are dropped and counted, never an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyLimits {
    /// Wall-clock time for the whole evaluation (instantiation with the start function, copying
    /// the snapshot in, `airtime_evaluate`, copying decisions out), in milliseconds. Enforced by
    /// epoch interruption: the guest traps at the first loop back-edge or function entry after the
    /// deadline, so the real bound is this plus one epoch tick. Default 2,000 (Kubewarden's
    /// default; priority-best-fit takes a few milliseconds at 10,000 pending workloads).
    pub deadline_ms: u64,
    /// Largest the guest's linear memory may grow, in bytes. Growing past it traps with
    /// [`PolicyError::MemoryLimit`]. Default 256 MiB: the 1,000-node, 10,000-workload snapshot is
    /// about 2 MiB encoded and the SDK's decoded copy about as much again, so this leaves a policy
    /// ample room while keeping 64 concurrent evaluations within 16 GiB. Clamped to
    /// [`RuntimeConfig::max_memory_bytes`].
    pub max_memory_bytes: u64,
    /// Largest decision buffer accepted, in bytes. Checked before it is copied out of the guest.
    /// Default 8 MiB: 10,000 decisions at 32 bytes plus a 200-byte reason each is about 2.3 MiB.
    pub max_output_bytes: u64,
    /// Log lines kept per evaluation; later lines are counted in `logs_dropped`. Default 1,000.
    pub max_log_lines: u32,
    /// Log bytes kept per evaluation (a line that would pass it is dropped and counted). Default
    /// 64 KiB.
    pub max_log_bytes: u64,
}

impl Default for PolicyLimits {
    fn default() -> Self {
        PolicyLimits {
            deadline_ms: 2_000,
            max_memory_bytes: 256 << 20,
            max_output_bytes: 8 << 20,
            max_log_lines: 1_000,
            max_log_bytes: 64 << 10,
        }
    }
}

/// Bounds on what a stored override may ask for, so a typo cannot disable a limit.
const MAX_DEADLINE_MS: u64 = 60_000;
const MIN_MEMORY_BYTES: u64 = 64 << 10;
const MAX_OUTPUT_BYTES: u64 = 1 << 30;
const MAX_LOG_LINES: u32 = 100_000;
const MAX_LOG_BYTES: u64 = 16 << 20;

impl PolicyLimits {
    /// The deadline as a `Duration`.
    pub fn deadline(&self) -> Duration {
        Duration::from_millis(self.deadline_ms)
    }

    /// Checks that every limit is in its sane range: deadline 1 ms to 60 s, memory at least one
    /// 64 KiB page, output 8 bytes (an empty decision buffer) to 1 GiB, at most 100,000 log lines
    /// and 16 MiB of logs. [`crate::PolicyRuntime::evaluate`] refuses limits that fail this.
    pub fn validate(&self) -> Result<(), PolicyError> {
        let invalid = |message: String| Err(PolicyError::InvalidLimits { message });
        if !(1..=MAX_DEADLINE_MS).contains(&self.deadline_ms) {
            return invalid(format!("deadline_ms is {}; it must be 1 to {MAX_DEADLINE_MS}", self.deadline_ms));
        }
        if self.max_memory_bytes < MIN_MEMORY_BYTES {
            return invalid(format!(
                "max_memory_bytes is {}; it must be at least one 64 KiB page ({MIN_MEMORY_BYTES})",
                self.max_memory_bytes
            ));
        }
        if !(8..=MAX_OUTPUT_BYTES).contains(&self.max_output_bytes) {
            return invalid(format!(
                "max_output_bytes is {}; it must be 8 to {MAX_OUTPUT_BYTES}",
                self.max_output_bytes
            ));
        }
        if self.max_log_lines > MAX_LOG_LINES {
            return invalid(format!("max_log_lines is {}; it must be at most {MAX_LOG_LINES}", self.max_log_lines));
        }
        if self.max_log_bytes > MAX_LOG_BYTES {
            return invalid(format!("max_log_bytes is {}; it must be at most {MAX_LOG_BYTES}", self.max_log_bytes));
        }
        Ok(())
    }
}

/// Process-wide settings, fixed when [`crate::PolicyRuntime::new`] builds the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// How often the ticker thread advances the engine's epoch: the resolution of every deadline.
    /// Default 10 ms, so a 2 s deadline is 200 ticks (several ticks per deadline, as wasmtime
    /// advises) and the ticker wakes 100 times a second, which costs nothing measurable.
    pub epoch_tick: Duration,
    /// Wasm call-stack size for every evaluation, in bytes. In wasmtime this is a property of the
    /// engine, not of a store, so it cannot vary per policy. Deep recursion past it traps with
    /// [`PolicyError::StackOverflow`]. Default 512 KiB (wasmtime's and Shopify Functions' value).
    /// The guest runs on the calling thread's native stack, so callers need this much stack free
    /// plus host frames: tokio's blocking threads (2 MiB) and the main thread are fine.
    pub max_wasm_stack: usize,
    /// The most linear memory any policy may have, in bytes: the pooling allocator's slot size.
    /// A policy's [`PolicyLimits::max_memory_bytes`] is clamped to it. Default 1 GiB. Each slot
    /// reserves (not commits) address space of wasmtime's default 4 GiB reservation plus guard.
    pub max_memory_bytes: usize,
    /// Bytes at the start of each pooled memory slot that are kept resident between instances and
    /// zeroed with `memset` when an instance ends (only the pages it wrote, where Linux has
    /// `PAGEMAP_SCAN`), instead of being returned to the kernel. Pages past it are released
    /// (`madvise`) and fault in again, zero-filled, on the next use: one page fault per 4 KiB
    /// touched, which at the design size (a 10,000-workload snapshot, about 10 MiB of guest memory)
    /// costs more than the policy's own work. Default 16 MiB; the price is up to this much resident
    /// memory per slot that has been used.
    pub memory_keep_resident: usize,
    /// Instances alive at once: the pool's slots. Default 64.
    pub max_concurrent_instances: u32,
    /// Evaluations at once in each lane (see [`crate::Lane`]): every evaluation takes a slot in
    /// its lane before it instantiates, waiting at most its deadline for one. Together they must
    /// fit in [`Self::max_concurrent_instances`]. Default: as many as the machine has cores, each.
    pub lanes: crate::LaneSlots,
    /// Compiled policies kept, keyed by the module's sha256; the least recently used is evicted.
    /// Default 128.
    pub cache_capacity: usize,
    /// Largest module `compile` accepts, in bytes (compilation time and memory grow with it).
    /// Default 16 MiB; the built-in policies are 100 to 300 KB.
    pub max_module_bytes: usize,
    /// Functions a module may define. Compilation time grows with the number of functions
    /// (200,000 tiny functions took 24 to 60 s on two cores), so this bounds the CPU an upload can
    /// cost before anything else is checked. Default 20,000; the built-in policies define 300 to
    /// 1,500.
    pub max_functions: u32,
    /// Limits for the probe that `compile` runs (instantiate and call `airtime_abi_version`), which
    /// bounds a start function that loops or allocates. Default: [`PolicyLimits::default`].
    pub probe_limits: PolicyLimits,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            epoch_tick: Duration::from_millis(10),
            max_wasm_stack: 512 << 10,
            max_memory_bytes: 1 << 30,
            memory_keep_resident: 16 << 20,
            max_concurrent_instances: 64,
            lanes: crate::LaneSlots::default(),
            cache_capacity: 128,
            max_module_bytes: 16 << 20,
            max_functions: 20_000,
            probe_limits: PolicyLimits::default(),
        }
    }
}
