//! The engine, compiled policies and evaluations.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use airtime_policy_sdk::abi::{self, ABI_VERSION, Decision};
use airtime_policy_sdk::guest::LogLevel;
use airtime_policy_sdk::text;
use sha2::{Digest, Sha256};
use wasmtime::{
    Caller, Config, Enabled, Engine, ExternType, FuncType, InstanceAllocationStrategy, InstancePre, Linker, Module,
    OptLevel, PoolConcurrencyLimitError, PoolingAllocationConfig, ResourceLimiter, Store, Trap, ValType,
};

use crate::lanes::{Lane, Lanes};
use crate::{PolicyError, PolicyLimits, RuntimeConfig};

/// Longest `airtime.fail` message kept, in bytes; the rest is cut (a panic message with a long
/// payload stays readable, and a hostile guest cannot make the host copy its whole memory).
const MAX_FAIL_MESSAGE_BYTES: usize = 4 << 10;
/// Table elements a policy may have. Rust policies use a few hundred (one per function called
/// indirectly); this bounds the pool's table slots (8 bytes each).
const MAX_TABLE_ELEMENTS: usize = 20_000;

/// The export names and types of ABI version 1.
const EXPORT_MEMORY: &str = "memory";
const EXPORT_ABI_VERSION: &str = "airtime_abi_version";
const EXPORT_ALLOC: &str = "airtime_alloc";
const EXPORT_EVALUATE: &str = "airtime_evaluate";
/// Optional (ABI 1.1): the policy's own check of its parameters, at activation.
const EXPORT_VALIDATE_PARAMS: &str = "airtime_validate_params";
const IMPORT_MODULE: &str = "airtime";

/// Runs policy modules. One per process; cheap to clone (an `Arc`), `Send` and `Sync`.
///
/// Building it starts a ticker thread that advances the engine's epoch every
/// [`RuntimeConfig::epoch_tick`]; the thread stops when the last clone is dropped.
#[derive(Clone)]
pub struct PolicyRuntime {
    inner: Arc<RuntimeInner>,
}

struct RuntimeInner {
    engine: Engine,
    linker: Linker<HostState>,
    config: RuntimeConfig,
    /// Tells compiled policies of different runtimes apart (instantiating across engines panics).
    id: u64,
    cache: Mutex<PolicyCache>,
    /// Admission to the instance pool: nothing instantiates without a slot (see `lanes`).
    lanes: Lanes,
    /// Declared last so it stops after everything else is dropped.
    _ticker: EpochTicker,
}

/// A module that passed every check at upload, ready to instantiate. Cheap to clone.
#[derive(Clone)]
pub struct CompiledPolicy {
    inner: Arc<CompiledInner>,
}

struct CompiledInner {
    sha256: [u8; 32],
    module_len: usize,
    runtime_id: u64,
    pre: InstancePre<HostState>,
    /// Exports `airtime_validate_params`.
    validates_params: bool,
}

/// What a policy said of the parameters it was offered ([`PolicyRuntime::validate_params`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParamsVerdict {
    Accepted,
    /// Refused, with the policy's message (cleaned and bounded like a failure's).
    Refused(String),
    /// The module exports no `airtime_validate_params`: it reads its parameters only when it
    /// evaluates.
    NotChecked,
}

/// One line a policy logged through `airtime.log`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PolicyLog {
    pub level: LogLevel,
    /// The line, with invalid UTF-8 replaced.
    pub message: String,
}

/// A successful evaluation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evaluation {
    /// The decision buffer, checked to decode (see [`Evaluation::decisions`]).
    pub output: Vec<u8>,
    /// What the policy logged, up to the limits.
    pub logs: Vec<PolicyLog>,
    /// Lines dropped for passing the log limits.
    pub logs_dropped: u32,
    /// Wall-clock time from instantiation to the copied output.
    pub elapsed: Duration,
    /// Size of the guest's linear memory at the end (its peak: wasm memory never shrinks).
    pub memory_bytes: u64,
}

impl Evaluation {
    /// The decisions, borrowing reasons from [`Evaluation::output`]. Structural checks only; check
    /// them against the snapshot with `airtime_policy_sdk::check::check_decisions`.
    pub fn decisions(&self) -> Result<Vec<Decision<'_>>, PolicyError> {
        abi::decode_decisions(&self.output).map_err(PolicyError::from)
    }
}

/// Everything known about one evaluation, successful or not: what the control plane records.
/// Logs written before a failure are kept, since they are often what explains it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvaluationRecord {
    /// The decision buffer, or why there is none.
    pub result: Result<Vec<u8>, PolicyError>,
    pub logs: Vec<PolicyLog>,
    pub logs_dropped: u32,
    pub elapsed: Duration,
    /// Size of the guest's linear memory at the end; 0 if instantiation failed.
    pub memory_bytes: u64,
    /// Where the time went: the policy's own work against what the sandbox adds around it
    /// (benchmarks and `airtime-policy run --repeat` report both).
    pub phases: EvaluationPhases,
}

/// What to evaluate and how: the one argument of [`PolicyRuntime::evaluate`]. Build it with
/// [`EvaluationRequest::new`] and, for another lane, [`EvaluationRequest::in_lane`].
#[derive(Debug, Clone, Copy)]
pub struct EvaluationRequest<'a> {
    /// The policy, compiled by the runtime that evaluates it.
    pub policy: &'a CompiledPolicy,
    /// The encoded snapshot (`airtime_policy_sdk::abi::encode_snapshot`).
    pub snapshot: &'a [u8],
    /// Its limits for this evaluation.
    pub limits: &'a PolicyLimits,
    /// The lane whose slot it takes ([`Lane::Tenant`], the restricted one, unless said otherwise).
    pub lane: Lane,
}

impl<'a> EvaluationRequest<'a> {
    /// Evaluate `policy` on `snapshot` (encoded) within `limits`, in the tenants' lane.
    pub fn new(policy: &'a CompiledPolicy, snapshot: &'a [u8], limits: &'a PolicyLimits) -> Self {
        EvaluationRequest { policy, snapshot, limits, lane: Lane::Tenant }
    }

    /// The same request, in `lane`.
    pub fn in_lane(self, lane: Lane) -> Self {
        EvaluationRequest { lane, ..self }
    }
}

/// Where the time of one evaluation went ([`EvaluationRecord::phases`]). A phase that did not run
/// (the evaluation failed before it) is zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EvaluationPhases {
    /// A fresh instance from the pool, with the module's memory image mapped and any start
    /// function run.
    pub instantiate: Duration,
    /// `airtime_alloc` and copying the snapshot into the guest's memory.
    pub copy_in: Duration,
    /// `airtime_evaluate`: the policy's own work (decoding the snapshot, deciding, encoding).
    pub guest: Duration,
    /// Checking the output (size, bounds, structure) where it lies and copying it out.
    pub output: Duration,
    /// Dropping the instance: the pool zeroes the memory it keeps resident for the next one.
    pub teardown: Duration,
}

impl EvaluationRecord {
    /// The [`Evaluation`], or the error (dropping the logs of a failure).
    pub fn into_result(self) -> Result<Evaluation, PolicyError> {
        let output = self.result?;
        Ok(Evaluation {
            output,
            logs: self.logs,
            logs_dropped: self.logs_dropped,
            elapsed: self.elapsed,
            memory_bytes: self.memory_bytes,
        })
    }
}

impl PolicyRuntime {
    /// Builds the engine (pooling allocator, copy-on-write memory images, epoch interruption,
    /// bounded stack) and starts the epoch ticker.
    pub fn new(config: RuntimeConfig) -> Result<Self, PolicyError> {
        let internal =
            |what: &str, error: wasmtime::Error| PolicyError::Internal { message: format!("{what}: {error:#}") };
        if config.epoch_tick.is_zero() {
            return Err(PolicyError::Internal { message: "epoch_tick must be more than zero".to_owned() });
        }
        config.probe_limits.validate()?;
        config.lanes.validate(config.max_concurrent_instances)?;

        let instances = config.max_concurrent_instances;
        let mut pool = PoolingAllocationConfig::new();
        pool
            // One instance, memory and table per evaluation; these bound concurrent evaluations.
            .total_core_instances(instances)
            .total_memories(instances)
            .total_tables(instances)
            // The ABI has one memory; Rust and C modules have at most one table.
            .max_memories_per_module(1)
            .max_tables_per_module(1)
            .table_elements(MAX_TABLE_ELEMENTS)
            // The ceiling of every policy's memory limit (the per-policy limit is a ResourceLimiter).
            .max_memory_size(config.max_memory_bytes)
            // Reused pages are zeroed in place rather than faulted in again (see the field's docs).
            .linear_memory_keep_resident(config.memory_keep_resident);
        // Where the kernel can say which pages an instance wrote (Linux 6.7+, `PAGEMAP_SCAN`), only
        // those are reset: a Rust policy's 1 MiB stack, mostly untouched, is not zeroed every time.
        // Halves the floor of an evaluation of a Rust policy (25 → 14 µs); falls back to the
        // plain reset elsewhere.
        pool.pagemap_scan(Enabled::Auto);

        let mut wasm = Config::new();
        wasm
            // Fresh instances come from pre-reserved slots: microseconds, not a fresh mmap.
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool))
            // Data segments are mapped copy-on-write from the module's image instead of copied.
            .memory_init_cow(true)
            // Deadlines: compiled code checks the epoch at function entries and loop back-edges.
            .epoch_interruption(true)
            .max_wasm_stack(config.max_wasm_stack)
            // Nothing in the ABI needs these; off means such modules fail validation at upload.
            .wasm_memory64(false)
            .wasm_multi_memory(false)
            .cranelift_opt_level(OptLevel::Speed)
            .parallel_compilation(true);
        // For profiling only: `AIRTIME_WASM_PERFMAP=1` writes /tmp/perf-<pid>.map so `perf report`
        // names the policies' compiled functions (BENCHMARKS.md, "Profiling a policy").
        if std::env::var_os("AIRTIME_WASM_PERFMAP").is_some() {
            wasm.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let engine = Engine::new(&wasm).map_err(|e| internal("building the wasm engine", e))?;

        let mut linker = Linker::new(&engine);
        linker.func_wrap(IMPORT_MODULE, "log", host_log).map_err(|e| internal("linking airtime.log", e))?;
        linker.func_wrap(IMPORT_MODULE, "fail", host_fail).map_err(|e| internal("linking airtime.fail", e))?;

        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let ticker = EpochTicker::start(engine.clone(), config.epoch_tick)?;
        Ok(PolicyRuntime {
            inner: Arc::new(RuntimeInner {
                engine,
                linker,
                cache: Mutex::new(PolicyCache::new(config.cache_capacity)),
                lanes: Lanes::new(config.lanes, config.max_concurrent_instances),
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                config,
                _ticker: ticker,
            }),
        })
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }

    /// A hex key of everything that makes compiled code valid: wasmtime's version, the `Config`
    /// and the host CPU's features (`Engine::precompile_compatibility_hash`). A cache of compiled
    /// artifacts on disk must key on it together with the module's sha256, or it will load code
    /// compiled for another engine.
    pub fn compatibility_hash(&self) -> String {
        let mut hasher = Sha256Hasher(Sha256::new());
        std::hash::Hash::hash(&self.inner.engine.precompile_compatibility_hash(), &mut hasher);
        hex::encode(hasher.0.finalize())
    }

    /// How many compiled policies the cache holds.
    pub fn cached_policies(&self) -> usize {
        self.inner.cache.lock().map(|c| c.entries.len()).unwrap_or(0)
    }

    /// Checks and compiles a module: core wasm, no imports but `airtime.log` and `airtime.fail`
    /// with their ABI types, the ABI's exports with their types, at most one memory and table;
    /// then instantiates it once (running any start function under the probe limits) and calls
    /// `airtime_abi_version`, refusing another version. A module already compiled (same sha256) is
    /// returned from the cache.
    pub fn compile(&self, wasm: &[u8]) -> Result<CompiledPolicy, PolicyError> {
        let policy = self.compile_uncached(wasm)?;
        self.remember(&policy);
        Ok(policy)
    }

    /// [`compile`](Self::compile) without keeping the result in the cache (a hit is still
    /// returned): for a module that must pass more checks (a trial evaluation) before it is kept,
    /// so a refused upload never stays resident. Keep it with [`remember`](Self::remember).
    pub fn compile_uncached(&self, wasm: &[u8]) -> Result<CompiledPolicy, PolicyError> {
        check_header(wasm)?;
        let limit = self.inner.config.max_module_bytes;
        if wasm.len() > limit {
            return Err(PolicyError::ModuleTooLarge { len: wasm.len(), limit });
        }
        let sha256: [u8; 32] = Sha256::digest(wasm).into();
        if let Some(hit) = self.inner.cache.lock().ok().and_then(|mut c| c.get(&sha256)) {
            return Ok(hit);
        }
        check_function_count(wasm, self.inner.config.max_functions)?;

        let module = Module::new(&self.inner.engine, wasm)
            .map_err(|e| PolicyError::InvalidModule { message: format!("{e:#}") })?;
        check_imports(&module)?;
        let validates_params = check_exports(&module)?;
        check_resources(&module, &self.inner.config)?;
        let pre = self
            .inner
            .linker
            .instantiate_pre(&module)
            .map_err(|e| PolicyError::Internal { message: format!("pre-instantiating a checked module: {e:#}") })?;
        let policy = CompiledPolicy {
            inner: Arc::new(CompiledInner {
                sha256,
                module_len: wasm.len(),
                runtime_id: self.inner.id,
                pre,
                validates_params,
            }),
        };
        self.probe(&policy)?;
        Ok(policy)
    }

    /// Keeps a compiled policy in the cache, so compiling the same bytes again is free.
    pub fn remember(&self, policy: &CompiledPolicy) {
        if policy.inner.runtime_id != self.inner.id {
            return;
        }
        if let Ok(mut cache) = self.inner.cache.lock() {
            cache.insert(policy.inner.sha256, policy.clone());
        }
    }

    /// Instantiates once and asks for the ABI version.
    fn probe(&self, policy: &CompiledPolicy) -> Result<(), PolicyError> {
        let limits = self.inner.config.probe_limits;
        let _slot = self.inner.lanes.admit_probe(limits.deadline())?;
        let mut store = self.store(&limits);
        let instance =
            policy.inner.pre.instantiate(&mut store).map_err(|e| self.classify(e, &store, Phase::Instantiate))?;
        let version = instance
            .get_typed_func::<(), i32>(&mut store, EXPORT_ABI_VERSION)
            .map_err(|e| PolicyError::Internal {
                message: format!("{EXPORT_ABI_VERSION} after its type was checked: {e:#}"),
            })?
            .call(&mut store, ())
            .map_err(|e| self.classify(e, &store, Phase::Call))?;
        if u32::try_from(version).ok() != Some(ABI_VERSION) {
            return Err(PolicyError::AbiVersionMismatch { module: version, host: ABI_VERSION });
        }
        Ok(())
    }

    /// Offers `params` (the JSON an activation would hand the policy in every snapshot) to the
    /// policy's `airtime_validate_params`, in a fresh instance bounded by `limits`: the host copies
    /// the UTF-8 text into a buffer from `airtime_alloc` and calls the export with its pointer and
    /// length; 0 accepts, `(ptr << 32) | len` refuses with the UTF-8 message there. Blocking.
    pub fn validate_params(
        &self,
        policy: &CompiledPolicy,
        params: &str,
        limits: &PolicyLimits,
    ) -> Result<ParamsVerdict, PolicyError> {
        if policy.inner.runtime_id != self.inner.id {
            return Err(PolicyError::Internal {
                message: "the policy was compiled by another PolicyRuntime".to_owned(),
            });
        }
        if !policy.inner.validates_params {
            return Ok(ParamsVerdict::NotChecked);
        }
        limits.validate()?;
        // A parameter check is something a tenant causes: it runs in the tenants' lane.
        let _slot = self.inner.lanes.admit(Lane::Tenant, limits.deadline())?;
        let mut store = self.store(limits);
        let abi_error = |message: String| PolicyError::AbiViolation { message };
        let internal = |what: &str, e: wasmtime::Error| PolicyError::Internal { message: format!("{what}: {e:#}") };
        let len = i32::try_from(params.len())
            .map_err(|_| PolicyError::Internal { message: format!("{} bytes of parameters", params.len()) })?;
        let instance =
            policy.inner.pre.instantiate(&mut store).map_err(|e| self.classify(e, &store, Phase::Instantiate))?;
        let memory = instance
            .get_memory(&mut store, EXPORT_MEMORY)
            .ok_or_else(|| PolicyError::Internal { message: "checked module has no memory".to_owned() })?;
        let alloc =
            instance.get_typed_func::<i32, i32>(&mut store, EXPORT_ALLOC).map_err(|e| internal(EXPORT_ALLOC, e))?;
        let validate = instance
            .get_typed_func::<(i32, i32), i64>(&mut store, EXPORT_VALIDATE_PARAMS)
            .map_err(|e| internal(EXPORT_VALIDATE_PARAMS, e))?;
        let ptr = alloc.call(&mut store, len).map_err(|e| self.classify(e, &store, Phase::Call))?;
        let start = ptr as u32 as usize;
        let Some(target) = memory.data_mut(&mut store).get_mut(start..start + params.len()) else {
            return Err(abi_error(format!("{EXPORT_ALLOC}({len}) returned {start:#x}, outside memory")));
        };
        target.copy_from_slice(params.as_bytes());
        let packed = validate.call(&mut store, (ptr, len)).map_err(|e| self.classify(e, &store, Phase::Call))?;
        if packed == 0 {
            return Ok(ParamsVerdict::Accepted);
        }
        let (out_ptr, out_len) = ((packed as u64 >> 32) as usize, (packed as u64 & 0xFFFF_FFFF) as usize);
        let data = memory.data(&store);
        let Some(message) = data.get(out_ptr..out_ptr.saturating_add(out_len.min(64 * 1024))) else {
            return Err(abi_error(format!(
                "{EXPORT_VALIDATE_PARAMS} returned {out_len} bytes at {out_ptr:#x}, outside the {}-byte memory",
                data.len()
            )));
        };
        let message = text::clean_owned(String::from_utf8_lossy(message).into_owned(), text::MAX_FAILURE_CHARS);
        Ok(ParamsVerdict::Refused(message))
    }

    /// The one way a policy is evaluated: a slot in the request's lane (waiting at most the
    /// deadline for one), a fresh instance, the call, the teardown. Blocking (call it from a blocking
    /// thread: `tokio::task::spawn_blocking`), bounded by the request's limits. The decision buffer
    /// is checked to decode; its meaning is the caller's to check. The record keeps the logs and
    /// the timing whether or not the evaluation succeeded; [`EvaluationRecord::into_result`] is
    /// the result alone.
    pub fn evaluate(&self, request: EvaluationRequest<'_>) -> EvaluationRecord {
        let EvaluationRequest { policy, snapshot: snapshot_bytes, limits, lane } = request;
        let started = Instant::now();
        let mut phases = EvaluationPhases::default();
        let failed_early = |error| EvaluationRecord {
            result: Err(error),
            logs: Vec::new(),
            logs_dropped: 0,
            elapsed: started.elapsed(),
            memory_bytes: 0,
            phases,
        };
        if policy.inner.runtime_id != self.inner.id {
            let error =
                PolicyError::Internal { message: "the policy was compiled by another PolicyRuntime".to_owned() };
            return failed_early(error);
        }
        if let Err(error) = limits.validate() {
            return failed_early(error);
        }
        let _slot = match self.inner.lanes.admit(lane, limits.deadline()) {
            Ok(slot) => slot,
            Err(error) => return failed_early(error),
        };
        let mut store = self.store(limits);
        let result = self.run(policy, &mut store, snapshot_bytes, limits, &mut phases);
        let memory_bytes = store.data().memory_bytes;
        let teardown = Instant::now();
        let state = store.into_data();
        phases.teardown = teardown.elapsed();
        EvaluationRecord {
            result,
            logs: state.logs.lines,
            logs_dropped: state.logs.dropped,
            elapsed: started.elapsed(),
            memory_bytes,
            phases,
        }
    }

    /// A store for one evaluation: memory capped, deadline set, logs bounded.
    fn store(&self, limits: &PolicyLimits) -> Store<HostState> {
        let ceiling = self.inner.config.max_memory_bytes as u64;
        let state = HostState {
            memory: MemoryCap { limit: limits.max_memory_bytes.min(ceiling), refused: None },
            logs: LogBook {
                lines: Vec::new(),
                bytes: 0,
                dropped: 0,
                max_lines: limits.max_log_lines,
                max_bytes: limits.max_log_bytes,
            },
            failure: None,
            memory_bytes: 0,
            deadline: limits.deadline(),
        };
        let mut store = Store::new(&self.inner.engine, state);
        store.limiter(|state| &mut state.memory);
        // Ticks to the deadline, rounded up, plus one: the deadline is never cut short by the tick
        // already in progress, and overshoots by at most one tick.
        let tick = self.inner.config.epoch_tick.as_nanos().max(1);
        let ticks = limits.deadline().as_nanos().div_ceil(tick) as u64 + 1;
        store.set_epoch_deadline(ticks);
        store.epoch_deadline_trap();
        store
    }

    fn run(
        &self,
        policy: &CompiledPolicy,
        store: &mut Store<HostState>,
        snapshot: &[u8],
        limits: &PolicyLimits,
        phases: &mut EvaluationPhases,
    ) -> Result<Vec<u8>, PolicyError> {
        let abi_error = |message: String| PolicyError::AbiViolation { message };
        let internal = |what: &str, e: wasmtime::Error| PolicyError::Internal { message: format!("{what}: {e:#}") };
        let len = i32::try_from(snapshot.len()).map_err(|_| PolicyError::Internal {
            message: format!("a {}-byte snapshot passes 2 GiB", snapshot.len()),
        })?;

        let mut clock = Instant::now();
        let mut lap = |phase: &mut Duration| {
            let now = Instant::now();
            *phase = now - clock;
            clock = now;
        };
        let instance =
            policy.inner.pre.instantiate(&mut *store).map_err(|e| self.classify(e, store, Phase::Instantiate))?;
        let memory = instance
            .get_memory(&mut *store, EXPORT_MEMORY)
            .ok_or_else(|| PolicyError::Internal { message: "checked module has no memory".to_owned() })?;
        let alloc =
            instance.get_typed_func::<i32, i32>(&mut *store, EXPORT_ALLOC).map_err(|e| internal(EXPORT_ALLOC, e))?;
        let evaluate = instance
            .get_typed_func::<(i32, i32), i64>(&mut *store, EXPORT_EVALUATE)
            .map_err(|e| internal(EXPORT_EVALUATE, e))?;
        lap(&mut phases.instantiate);

        let ptr = alloc.call(&mut *store, len).map_err(|e| self.classify(e, store, Phase::Call))?;
        store.data_mut().memory_bytes = memory.data_size(&*store) as u64;
        let start = ptr as u32 as usize;
        let Some(target) = memory.data_mut(&mut *store).get_mut(start..start + snapshot.len()) else {
            return Err(abi_error(format!(
                "{EXPORT_ALLOC}({len}) returned {start:#x}, but {start:#x}+{len} is outside the {}-byte memory",
                memory.data_size(&*store)
            )));
        };
        target.copy_from_slice(snapshot);
        lap(&mut phases.copy_in);

        let packed = evaluate.call(&mut *store, (ptr, len));
        lap(&mut phases.guest);
        store.data_mut().memory_bytes = memory.data_size(&*store) as u64;
        let packed = packed.map_err(|e| self.classify(e, store, Phase::Call))?;
        let (out_ptr, out_len) = ((packed as u64 >> 32) as usize, packed as u64 & 0xFFFF_FFFF);
        if out_len > limits.max_output_bytes {
            return Err(PolicyError::OutputTooLarge { len: out_len, limit: limits.max_output_bytes });
        }
        let data = memory.data(&*store);
        let Some(output) = data.get(out_ptr..out_ptr + out_len as usize) else {
            return Err(abi_error(format!(
                "{EXPORT_EVALUATE} returned {out_len} bytes at {out_ptr:#x}, outside the {}-byte memory",
                data.len()
            )));
        };
        // Checked where it lies, then copied: nothing is allocated for an output that is refused.
        abi::validate_decisions(output)?;
        let output = output.to_vec();
        lap(&mut phases.output);
        Ok(output)
    }

    /// Names what ended a guest call: the state the host functions and the limiter left in the
    /// store says more than the trap itself.
    fn classify(&self, error: wasmtime::Error, store: &Store<HostState>, phase: Phase) -> PolicyError {
        let state = store.data();
        if let Some(message) = &state.failure {
            return PolicyError::GuestFailed { message: message.clone() };
        }
        if let Some(requested) = state.memory.refused {
            return PolicyError::MemoryLimit { limit: state.memory.limit, requested };
        }
        if let Some(fault) = error.downcast_ref::<HostFault>() {
            return PolicyError::AbiViolation { message: fault.0.clone() };
        }
        if let Some(trap) = error.downcast_ref::<Trap>() {
            return match (trap, phase) {
                (Trap::Interrupt, _) => PolicyError::DeadlineExceeded { deadline: state.deadline },
                (Trap::StackOverflow, _) => {
                    PolicyError::StackOverflow { max_wasm_stack: self.inner.config.max_wasm_stack }
                }
                (_, Phase::Instantiate) => PolicyError::StartTrapped { message: trap.to_string() },
                (_, Phase::Call) => PolicyError::Trap { message: trap.to_string() },
            };
        }
        if let Some(pool) = error.downcast_ref::<PoolConcurrencyLimitError>() {
            return PolicyError::Capacity { message: pool.to_string() };
        }
        match phase {
            Phase::Instantiate => PolicyError::Internal { message: format!("instantiating: {error:#}") },
            Phase::Call => PolicyError::Trap { message: format!("{error:#}") },
        }
    }
}

impl fmt::Debug for PolicyRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyRuntime").field("config", &self.inner.config).finish_non_exhaustive()
    }
}

impl CompiledPolicy {
    /// The sha256 of the module's bytes.
    pub fn sha256(&self) -> &[u8; 32] {
        &self.inner.sha256
    }

    /// The sha256 in lowercase hex.
    pub fn sha256_hex(&self) -> String {
        hex::encode(self.inner.sha256)
    }

    /// Size of the module, in bytes.
    pub fn module_len(&self) -> usize {
        self.inner.module_len
    }
}

impl fmt::Debug for CompiledPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledPolicy")
            .field("sha256", &self.sha256_hex())
            .field("module_len", &self.inner.module_len)
            .finish()
    }
}

#[derive(Clone, Copy)]
enum Phase {
    Instantiate,
    Call,
}

/// The store's data: what the host functions and the limiter record during one evaluation.
struct HostState {
    memory: MemoryCap,
    logs: LogBook,
    /// The message of `airtime.fail`.
    failure: Option<String>,
    memory_bytes: u64,
    deadline: Duration,
}

/// Caps linear memory at the policy's limit; growing past it traps (a Rust guest would abort on
/// the failed allocation anyway, anonymously), and the request is kept for the error.
struct MemoryCap {
    limit: u64,
    refused: Option<u64>,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired as u64 > self.limit {
            self.refused = Some(desired as u64);
            return Err(wasmtime::Error::msg(format!(
                "memory limit: asked for {desired} bytes, the limit is {}",
                self.limit
            )));
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }

    fn instances(&self) -> usize {
        1
    }

    fn memories(&self) -> usize {
        1
    }

    fn tables(&self) -> usize {
        1
    }
}

/// The lines `airtime.log` kept, within the limits, and how many it dropped.
struct LogBook {
    lines: Vec<PolicyLog>,
    bytes: u64,
    dropped: u32,
    max_lines: u32,
    max_bytes: u64,
}

/// A guest passed a host function a buffer outside its memory.
#[derive(Debug)]
struct HostFault(String);

impl fmt::Display for HostFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HostFault {}

/// The guest called `airtime.fail`; the message is in the store.
#[derive(Debug)]
struct GuestGaveUp;

impl fmt::Display for GuestGaveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the policy called airtime.fail")
    }
}

impl std::error::Error for GuestGaveUp {}

/// `airtime.log(level, ptr, len)`. Bounded: once the line or byte limit is reached, lines are
/// counted without being read.
fn host_log(mut caller: Caller<'_, HostState>, level: i32, ptr: i32, len: i32) -> wasmtime::Result<()> {
    let (start, len) = (ptr as u32 as usize, len as u32 as usize);
    let book = &caller.data().logs;
    if book.lines.len() >= book.max_lines as usize || book.bytes + len as u64 > book.max_bytes {
        caller.data_mut().logs.dropped = caller.data().logs.dropped.saturating_add(1);
        return Ok(());
    }
    let message = match guest_bytes(&mut caller, "airtime.log", start, len) {
        Ok(bytes) => text::clean_owned(String::from_utf8_lossy(bytes).into_owned(), text::MAX_LOG_CHARS),
        Err(fault) => return Err(wasmtime::Error::new(fault)),
    };
    let book = &mut caller.data_mut().logs;
    book.bytes += len as u64;
    book.lines.push(PolicyLog { level: LogLevel::from_code(level), message });
    Ok(())
}

/// `airtime.fail(ptr, len)`: records the message (its first 4 KiB) and traps.
fn host_fail(mut caller: Caller<'_, HostState>, ptr: i32, len: i32) -> wasmtime::Result<()> {
    let (start, len) = (ptr as u32 as usize, len as u32 as usize);
    let message = match guest_bytes(&mut caller, "airtime.fail", start, len.min(MAX_FAIL_MESSAGE_BYTES)) {
        Ok(bytes) => {
            let mut message = String::from_utf8_lossy(bytes).into_owned();
            if len > MAX_FAIL_MESSAGE_BYTES {
                message.push_str(&format!(" … ({len} bytes, cut at {MAX_FAIL_MESSAGE_BYTES})"));
            }
            text::clean_owned(message, text::MAX_FAILURE_CHARS)
        }
        Err(fault) => format!("(unreadable message: {fault})"),
    };
    caller.data_mut().failure = Some(message);
    Err(wasmtime::Error::new(GuestGaveUp))
}

/// `len` bytes of the caller's memory at `start`, or why not.
fn guest_bytes<'c>(
    caller: &'c mut Caller<'_, HostState>,
    function: &str,
    start: usize,
    len: usize,
) -> Result<&'c [u8], HostFault> {
    let Some(memory) = caller.get_export(EXPORT_MEMORY).and_then(|e| e.into_memory()) else {
        return Err(HostFault(format!("{function} called by a module without memory")));
    };
    let data = memory.data(&*caller);
    let size = data.len();
    data.get(start..start.saturating_add(len))
        .ok_or_else(|| HostFault(format!("{function} got {len} bytes at {start:#x}, outside the {size}-byte memory")))
}

/// Refuses bytes that are not a core module before wasmtime sees them, with a message that says
/// what they are instead.
fn check_header(wasm: &[u8]) -> Result<(), PolicyError> {
    let not_wasm = |reason: String| Err(PolicyError::NotWasm { reason });
    let Some(magic) = wasm.get(..4) else {
        return not_wasm(format!("{} bytes is shorter than the 8-byte wasm header", wasm.len()));
    };
    if magic != b"\0asm" {
        let text = if wasm.starts_with(b"(module") || wasm.starts_with(b"(component") {
            " (WebAssembly text: compile it to binary first)".to_owned()
        } else if wasm.starts_with(b"\x7fELF") {
            " (an ELF executable)".to_owned()
        } else {
            String::new()
        };
        return not_wasm(format!("it starts with {:02x?}, not the wasm magic \\0asm{text}", magic));
    }
    match wasm.get(4..8) {
        Some([1, 0, 0, 0]) => Ok(()),
        Some([0x0d, 0, 1, 0]) => {
            not_wasm("it is a WebAssembly component; policies are core modules (see docs/policy-abi.md)".to_owned())
        }
        Some(version) => not_wasm(format!("unknown wasm version bytes {version:02x?}")),
        None => not_wasm(format!("{} bytes is shorter than the 8-byte wasm header", wasm.len())),
    }
}

/// "(i32, i32) -> i64".
fn signature(params: &[ValType], results: &[ValType]) -> String {
    let list = |types: &[ValType]| types.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
    match results {
        [] => format!("func ({})", list(params)),
        [one] => format!("func ({}) -> {one}", list(params)),
        many => format!("func ({}) -> ({})", list(params), list(many)),
    }
}

fn describe(ty: &ExternType) -> String {
    match ty {
        ExternType::Func(f) => describe_func(f),
        ExternType::Memory(m) => {
            let mut text = if m.is_64() { "a 64-bit memory".to_owned() } else { "a memory".to_owned() };
            if m.is_shared() {
                text.push_str(" (shared)");
            }
            text
        }
        ExternType::Table(_) => "a table".to_owned(),
        ExternType::Global(_) => "a global".to_owned(),
        ExternType::Tag(_) => "a tag".to_owned(),
    }
}

fn describe_func(f: &FuncType) -> String {
    signature(&f.params().collect::<Vec<_>>(), &f.results().collect::<Vec<_>>())
}

/// Whether `ty` is a function of exactly these (numeric) parameter and result types.
fn is_func(ty: &ExternType, params: &[ValType], results: &[ValType]) -> bool {
    let ExternType::Func(f) = ty else { return false };
    let same = |a: &mut dyn ExactSizeIterator<Item = ValType>, b: &[ValType]| {
        a.len() == b.len() && a.zip(b).all(|(x, y)| ValType::eq(&x, y))
    };
    same(&mut f.params(), params) && same(&mut f.results(), results)
}

fn check_imports(module: &Module) -> Result<(), PolicyError> {
    use ValType::I32;
    for import in module.imports() {
        let (module_name, name, ty) = (import.module(), import.name(), import.ty());
        let expected: &[ValType] = match (module_name, name) {
            (IMPORT_MODULE, "log") => &[I32, I32, I32],
            (IMPORT_MODULE, "fail") => &[I32, I32],
            _ => {
                return Err(PolicyError::ForbiddenImport { module: module_name.to_owned(), name: name.to_owned() });
            }
        };
        if !is_func(&ty, expected, &[]) {
            return Err(PolicyError::ImportTypeMismatch {
                module: module_name.to_owned(),
                name: name.to_owned(),
                expected: signature(expected, &[]),
                found: describe(&ty),
            });
        }
    }
    Ok(())
}

/// Checks the required exports; returns whether the optional `airtime_validate_params` is there
/// (with its type checked too).
fn check_exports(module: &Module) -> Result<bool, PolicyError> {
    use ValType::{I32, I64};
    let find = |name: &str, expected: &str| {
        module
            .get_export(name)
            .ok_or_else(|| PolicyError::MissingExport { name: name.to_owned(), expected: expected.to_owned() })
    };
    let memory = find(EXPORT_MEMORY, "a memory")?;
    match &memory {
        ExternType::Memory(m) if !m.is_64() && !m.is_shared() => {}
        other => {
            return Err(PolicyError::WrongExportType {
                name: EXPORT_MEMORY.to_owned(),
                expected: "a 32-bit, unshared memory".to_owned(),
                found: describe(other),
            });
        }
    }
    let functions: [(&str, &[ValType], &[ValType]); 3] =
        [(EXPORT_ABI_VERSION, &[], &[I32]), (EXPORT_ALLOC, &[I32], &[I32]), (EXPORT_EVALUATE, &[I32, I32], &[I64])];
    for (name, params, results) in functions {
        let expected = signature(params, results);
        let ty = find(name, &expected)?;
        if !is_func(&ty, params, results) {
            return Err(PolicyError::WrongExportType { name: name.to_owned(), expected, found: describe(&ty) });
        }
    }
    let Some(validate) = module.get_export(EXPORT_VALIDATE_PARAMS) else { return Ok(false) };
    if !is_func(&validate, &[I32, I32], &[I64]) {
        return Err(PolicyError::WrongExportType {
            name: EXPORT_VALIDATE_PARAMS.to_owned(),
            expected: signature(&[I32, I32], &[I64]),
            found: describe(&validate),
        });
    }
    Ok(true)
}

/// Refuses a module with more functions than the runtime compiles, before compiling anything:
/// wasmparser reads only the section headers, so this costs microseconds whatever the module.
fn check_function_count(wasm: &[u8], max_functions: u32) -> Result<(), PolicyError> {
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        let count = match payload {
            Ok(wasmparser::Payload::FunctionSection(reader)) => reader.count(),
            Ok(wasmparser::Payload::CodeSectionStart { count, .. }) => count,
            Ok(wasmparser::Payload::CodeSectionEntry(_)) => break, // past the headers that count
            Ok(_) => continue,
            // Malformed modules are refused by the full validation, with its precise message.
            Err(_) => break,
        };
        if count > max_functions {
            return Err(PolicyError::UnsupportedModule {
                message: format!(
                    "it defines {count} functions; a policy may define at most {max_functions} \
                     (compilation time grows with them)"
                ),
            });
        }
    }
    Ok(())
}

fn check_resources(module: &Module, config: &RuntimeConfig) -> Result<(), PolicyError> {
    let unsupported = |message: String| Err(PolicyError::UnsupportedModule { message });
    let resources = module.resources_required();
    if resources.num_memories > 1 {
        return unsupported(format!("it defines {} memories; a policy has one", resources.num_memories));
    }
    if resources.num_tables > 1 {
        return unsupported(format!("it defines {} tables; a policy may have one", resources.num_tables));
    }
    if let Some(pages) = resources.max_initial_memory_size {
        let bytes = pages.saturating_mul(64 << 10);
        if bytes > config.max_memory_bytes as u64 {
            return unsupported(format!(
                "its memory starts at {bytes} bytes, more than the runtime's {} -byte ceiling",
                config.max_memory_bytes
            ));
        }
    }
    if let Some(elements) = resources.max_initial_table_size
        && elements > MAX_TABLE_ELEMENTS as u64
    {
        return unsupported(format!("its table starts with {elements} elements; at most {MAX_TABLE_ELEMENTS}"));
    }
    Ok(())
}

/// Compiled policies by sha256, least recently used evicted.
struct PolicyCache {
    capacity: usize,
    clock: u64,
    entries: HashMap<[u8; 32], (CompiledPolicy, u64)>,
}

impl PolicyCache {
    fn new(capacity: usize) -> Self {
        PolicyCache { capacity, clock: 0, entries: HashMap::new() }
    }

    fn get(&mut self, sha256: &[u8; 32]) -> Option<CompiledPolicy> {
        self.clock += 1;
        let clock = self.clock;
        self.entries.get_mut(sha256).map(|(policy, used)| {
            *used = clock;
            policy.clone()
        })
    }

    fn insert(&mut self, sha256: [u8; 32], policy: CompiledPolicy) {
        if self.capacity == 0 {
            return;
        }
        self.clock += 1;
        self.entries.insert(sha256, (policy, self.clock));
        while self.entries.len() > self.capacity {
            let oldest = self.entries.iter().min_by_key(|(_, (_, used))| *used).map(|(key, _)| *key);
            match oldest {
                Some(key) => self.entries.remove(&key),
                None => break,
            };
        }
    }
}

/// Advances the engine's epoch every tick from its own thread, not a tokio task: a busy guest on
/// a runtime worker could starve tokio's timer, and so its own deadline. Sleeping between ticks
/// (rather than catching up on missed ones) never bursts ticks after a stall, which would cut
/// deadlines short.
struct EpochTicker {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    fn start(engine: Engine, tick: Duration) -> Result<Self, PolicyError> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = thread::Builder::new()
            .name("airtime-epoch".to_owned())
            .spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(tick) {
                    engine.increment_epoch();
                }
            })
            .map_err(|e| PolicyError::Internal { message: format!("starting the epoch ticker thread: {e}") })?;
        Ok(EpochTicker { stop: Some(stop), thread: Some(thread) })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        // Dropping the sender wakes the thread with `Disconnected`.
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Feeds `Hash` output into sha256, for a stable digest of the engine's compatibility hash.
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn finish(&self) -> u64 {
        0
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}
