//! The runtime itself: caching, limits as configuration, concurrency, capacity, isolation between
//! runtimes.

use std::collections::HashSet;
use std::thread;
use std::time::{Duration, Instant};

use airtime_builtin_policies::PRIORITY_BEST_FIT;
use airtime_policy_host::{
    EvaluationRequest, Lane, LaneSlots, PolicyError, PolicyLimits, PolicyRuntime, RuntimeConfig,
};
use airtime_policy_sdk::testing::SnapshotFixture;
use sha2::{Digest, Sha256};

use crate::support::{runtime, small_fleet, wat};

#[test]
fn compiled_policies_are_cached_by_sha256_and_evicted_least_recently_used() {
    let runtime = PolicyRuntime::new(RuntimeConfig { cache_capacity: 2, ..RuntimeConfig::default() }).expect("starts");
    let first = runtime.compile(PRIORITY_BEST_FIT).expect("compiles");
    assert_eq!(first.sha256_hex(), hex::encode(Sha256::digest(PRIORITY_BEST_FIT)));
    let again = runtime.compile(PRIORITY_BEST_FIT).expect("cached");
    assert_eq!(again.sha256(), first.sha256());
    assert_eq!(runtime.cached_policies(), 1);
    runtime.compile(&wat("first_pending_on_gpu0")).expect("compiles");
    runtime.compile(&wat("log_flood")).expect("compiles");
    assert_eq!(runtime.cached_policies(), 2, "capacity 2");
    // An evicted policy stays usable by whoever holds it.
    runtime
        .evaluate(EvaluationRequest::new(&first, &small_fleet().encode(), &PolicyLimits::default()))
        .into_result()
        .expect("still runs");
}

#[test]
fn limits_are_json_with_defaults_and_refuse_unknown_fields() {
    let limits: PolicyLimits = serde_json::from_str(r#"{"deadline_ms": 500}"#).expect("parses");
    assert_eq!(limits, PolicyLimits { deadline_ms: 500, ..PolicyLimits::default() });
    assert_eq!(serde_json::from_str::<PolicyLimits>("{}").expect("parses"), PolicyLimits::default());
    let error = serde_json::from_str::<PolicyLimits>(r#"{"deadline": 500}"#).expect_err("unknown field");
    assert!(error.to_string().starts_with("unknown field `deadline`"), "{error}");
    let defaults = serde_json::to_value(PolicyLimits::default()).expect("serialises");
    assert_eq!(
        defaults,
        serde_json::json!({
            "deadline_ms": 2000,
            "max_memory_bytes": 268435456,
            "max_output_bytes": 8388608,
            "max_log_lines": 1000,
            "max_log_bytes": 65536
        })
    );
}

#[test]
fn limits_out_of_range_are_refused_before_anything_runs() {
    let policy = runtime().compile(PRIORITY_BEST_FIT).expect("compiles");
    let bad = PolicyLimits { deadline_ms: 0, ..PolicyLimits::default() };
    let error = runtime()
        .evaluate(EvaluationRequest::new(&policy, &small_fleet().encode(), &bad))
        .into_result()
        .expect_err("refused");
    assert_eq!(error.to_string(), "invalid policy limits: deadline_ms is 0; it must be 1 to 60000");
    assert!(!error.is_policy_fault());
    let bad = PolicyLimits { max_memory_bytes: 1024, ..PolicyLimits::default() };
    assert_eq!(bad.validate().expect_err("tiny").kind(), "invalid_limits");
}

#[test]
fn memory_limits_above_the_runtime_ceiling_are_clamped_to_it() {
    let runtime =
        PolicyRuntime::new(RuntimeConfig { max_memory_bytes: 8 << 20, ..RuntimeConfig::default() }).expect("starts");
    let policy = runtime.compile(&wat("memory_bomb")).expect("compiles");
    let limits = PolicyLimits { max_memory_bytes: 4 << 30, ..PolicyLimits::default() };
    let error = runtime
        .evaluate(EvaluationRequest::new(&policy, &small_fleet().encode(), &limits))
        .into_result()
        .expect_err("bomb");
    assert!(matches!(error, PolicyError::MemoryLimit { limit, .. } if limit == 8 << 20), "{error:?}");
}

#[test]
fn evaluations_run_concurrently_on_one_runtime() {
    let policy = runtime().compile(PRIORITY_BEST_FIT).expect("compiles");
    let bytes = SnapshotFixture::synthetic_fleet(20, 8, 200, 1).encode();
    let outputs: Vec<Vec<u8>> = thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                scope.spawn(|| {
                    let mut last = Vec::new();
                    for _ in 0..10 {
                        last = runtime()
                            .evaluate(EvaluationRequest::new(&policy, &bytes, &PolicyLimits::default()))
                            .into_result()
                            .expect("runs")
                            .output;
                    }
                    last
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("no panic")).collect()
    });
    assert!(outputs.windows(2).all(|pair| pair[0] == pair[1]), "same input, same output, on every thread");
}

#[test]
fn a_full_lane_answers_capacity_after_the_deadline_and_never_takes_the_platforms_slot() {
    // One slot per lane (and one instance for compile probes): the pool can never run out under
    // an evaluation, whatever path asks.
    let runtime = PolicyRuntime::new(RuntimeConfig {
        max_concurrent_instances: 3,
        lanes: LaneSlots { platform: 1, tenant: 1 },
        ..RuntimeConfig::default()
    })
    .expect("starts");
    let looping = runtime.compile(&wat("infinite_loop")).expect("compiles");
    let good = runtime.compile(PRIORITY_BEST_FIT).expect("compiles");
    let bytes = small_fleet().encode();
    thread::scope(|scope| {
        // A tenant's looping policy holds the tenants' only slot for 600 ms.
        let busy = scope.spawn(|| {
            runtime
                .evaluate(EvaluationRequest::new(
                    &looping,
                    &bytes,
                    &PolicyLimits { deadline_ms: 600, ..PolicyLimits::default() },
                ))
                .into_result()
        });
        thread::sleep(Duration::from_millis(150));
        // Another tenant evaluation waits for a slot at most its own deadline, then says so.
        let started = Instant::now();
        let error = runtime
            .evaluate(EvaluationRequest::new(
                &good,
                &bytes,
                &PolicyLimits { deadline_ms: 100, ..PolicyLimits::default() },
            ))
            .into_result()
            .expect_err("the tenants' only slot is busy");
        assert!(started.elapsed() >= Duration::from_millis(100), "it waited for a slot");
        assert_eq!(error.kind(), "capacity", "{error}");
        assert!(!error.is_policy_fault());
        // The platform's lane is its own: the looping tenant cannot keep it from an instance.
        runtime
            .evaluate(EvaluationRequest::new(&good, &bytes, &PolicyLimits::default()).in_lane(Lane::Platform))
            .into_result()
            .expect("the platform's slot is free");
        assert_eq!(busy.join().expect("no panic").expect_err("loops").kind(), "deadline_exceeded");
    });
    runtime
        .evaluate(EvaluationRequest::new(&good, &bytes, &PolicyLimits::default()))
        .into_result()
        .expect("the slot is free again");
}

#[test]
fn lanes_that_do_not_fit_the_pool_are_refused_at_start() {
    let Err(error) = PolicyRuntime::new(RuntimeConfig {
        max_concurrent_instances: 2,
        lanes: LaneSlots { platform: 1, tenant: 1 },
        ..RuntimeConfig::default()
    }) else {
        panic!("lanes leaving no instance for compile probes were accepted");
    };
    assert_eq!(error.kind(), "invalid_limits", "{error}");
}

#[test]
fn a_policy_compiled_by_another_runtime_is_refused() {
    let other = PolicyRuntime::new(RuntimeConfig::default()).expect("starts");
    let policy = other.compile(PRIORITY_BEST_FIT).expect("compiles");
    let error = runtime()
        .evaluate(EvaluationRequest::new(&policy, &small_fleet().encode(), &PolicyLimits::default()))
        .into_result()
        .expect_err("foreign");
    assert_eq!(
        error.to_string(),
        "internal error in the policy runtime: the policy was compiled by another PolicyRuntime"
    );
    drop(other); // stops its ticker thread; the policy it compiled is still held here
    drop(policy);
}

#[test]
fn the_compatibility_hash_is_stable_for_a_configuration() {
    let a = runtime().compatibility_hash();
    assert_eq!(a.len(), 64);
    assert_eq!(a, runtime().compatibility_hash());
    let same = PolicyRuntime::new(RuntimeConfig::default()).expect("starts");
    assert_eq!(same.compatibility_hash(), a, "another engine with the same configuration can share artifacts");
}

#[test]
fn error_kinds_are_distinct() {
    let errors = [
        PolicyError::NotWasm { reason: String::new() },
        PolicyError::ModuleTooLarge { len: 0, limit: 0 },
        PolicyError::InvalidModule { message: String::new() },
        PolicyError::ForbiddenImport { module: String::new(), name: String::new() },
        PolicyError::ImportTypeMismatch {
            module: String::new(),
            name: String::new(),
            expected: String::new(),
            found: String::new(),
        },
        PolicyError::MissingExport { name: String::new(), expected: String::new() },
        PolicyError::WrongExportType { name: String::new(), expected: String::new(), found: String::new() },
        PolicyError::UnsupportedModule { message: String::new() },
        PolicyError::AbiVersionMismatch { module: 0, host: 1 },
        PolicyError::StartTrapped { message: String::new() },
        PolicyError::Trap { message: String::new() },
        PolicyError::StackOverflow { max_wasm_stack: 0 },
        PolicyError::GuestFailed { message: String::new() },
        PolicyError::DeadlineExceeded { deadline: Duration::ZERO },
        PolicyError::MemoryLimit { limit: 0, requested: 0 },
        PolicyError::OutputTooLarge { len: 0, limit: 0 },
        PolicyError::AbiViolation { message: String::new() },
        PolicyError::MalformedOutput(airtime_policy_sdk::abi::decode_decisions(&[]).expect_err("empty is malformed")),
        PolicyError::Capacity { message: String::new() },
        PolicyError::InvalidLimits { message: String::new() },
        PolicyError::Internal { message: String::new() },
    ];
    let kinds: HashSet<&str> = errors.iter().map(PolicyError::kind).collect();
    assert_eq!(kinds.len(), errors.len());
}

#[test]
fn modules_past_the_size_limit_are_refused_before_compiling() {
    let runtime =
        PolicyRuntime::new(RuntimeConfig { max_module_bytes: 1024, ..RuntimeConfig::default() }).expect("starts");
    let error = runtime.compile(PRIORITY_BEST_FIT).expect_err("too large");
    assert_eq!(error, PolicyError::ModuleTooLarge { len: PRIORITY_BEST_FIT.len(), limit: 1024 });
}
