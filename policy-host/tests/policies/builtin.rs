//! The built-in policies, compiled from Rust by airtime-builtin-policies, run in the host exactly
//! as they run natively.

use airtime_builtin_policies::{ALL, PRIORITY_BEST_FIT, SDK_PROBE, TEMPLATE};
use airtime_policy_host::{EvaluationRequest, PolicyError, PolicyLimits};
use airtime_policy_sdk::abi::{decode_snapshot, encode_decisions};
use airtime_policy_sdk::check::check_decisions;
use airtime_policy_sdk::testing::SnapshotFixture;
use priority_best_fit::PriorityBestFit;

use crate::support::{runtime, small_fleet};

/// Runs `module` in the host and `native` through the SDK harness on `fixture`; both must produce
/// the same bytes and the same logs.
fn same_as_native(module: &[u8], native: &dyn airtime_policy_sdk::guest::Policy, fixture: &SnapshotFixture) {
    let policy = runtime().compile(module).expect("compiles");
    let bytes = fixture.encode();
    let evaluation = runtime()
        .evaluate(EvaluationRequest::new(&policy, &bytes, &PolicyLimits::default()))
        .into_result()
        .expect("evaluates");
    let expected = fixture.evaluate(native).expect("native run");
    assert_eq!(evaluation.output, encode_decisions(&expected.decisions), "wasm and native decide alike");
    let logs: Vec<_> = evaluation.logs.iter().map(|l| (l.level, l.message.as_str())).collect();
    let native_logs: Vec<_> = expected.logs.iter().map(|l| (l.level, l.message.as_str())).collect();
    assert_eq!(logs, native_logs);
    let snapshot = decode_snapshot(&bytes).expect("valid");
    assert_eq!(check_decisions(&snapshot, &evaluation.decisions().expect("decodes")), vec![]);
}

#[test]
fn every_builtin_compiles_and_reports_its_hash() {
    for (name, bytes) in ALL {
        let policy = runtime().compile(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(policy.module_len(), bytes.len());
        assert_eq!(policy.sha256_hex().len(), 64);
    }
}

#[test]
fn priority_best_fit_in_wasm_matches_native() {
    same_as_native(PRIORITY_BEST_FIT, &PriorityBestFit, &small_fleet());
    same_as_native(PRIORITY_BEST_FIT, &PriorityBestFit, &SnapshotFixture::synthetic_fleet(40, 8, 500, 3));
}

#[test]
fn priority_best_fit_places_as_documented() {
    let policy = runtime().compile(PRIORITY_BEST_FIT).expect("compiles");
    let fixture = small_fleet();
    let evaluation = runtime()
        .evaluate(EvaluationRequest::new(&policy, &fixture.encode(), &PolicyLimits::default()))
        .into_result()
        .expect("evaluates");
    let reasons: Vec<String> = evaluation.decisions().expect("decodes").iter().map(|d| d.reason.to_string()).collect();
    assert_eq!(
        reasons,
        vec![
            "best fit on gpu-b: GPUs 0,1,2,3 (A100), 4 GPUs left free there",
            "best fit on gpu-a: GPU 0 (H100), 2 GPUs left free there",
            "no ready node has 16 GPUs with ≥ 1024 MiB, even with all its GPUs free",
        ]
    );
    assert_eq!(evaluation.logs[0].message, "placed 2 of 3 pending workloads; 6 GPUs left free");
}

#[test]
fn the_template_in_wasm_matches_native() {
    same_as_native(TEMPLATE, &airtime_policy_template::Template, &small_fleet());
}

#[test]
fn a_policy_error_reaches_the_host_as_guest_failed() {
    let policy = runtime().compile(PRIORITY_BEST_FIT).expect("compiles");
    let bytes = small_fleet().params(r#"{"max_placements": -1}"#).encode();
    let error = runtime()
        .evaluate(EvaluationRequest::new(&policy, &bytes, &PolicyLimits::default()))
        .into_result()
        .expect_err("bad params");
    assert_eq!(
        error,
        PolicyError::GuestFailed {
            message: "params.max_placements: expected an unsigned 32-bit integer, found -1".into()
        }
    );
}

fn probe(params: &str, limits: &PolicyLimits) -> Result<airtime_policy_host::Evaluation, PolicyError> {
    let policy = runtime().compile(SDK_PROBE).expect("compiles");
    runtime().evaluate(EvaluationRequest::new(&policy, &small_fleet().params(params).encode(), limits)).into_result()
}

#[test]
fn a_rust_panic_reaches_the_host_with_its_message_and_location() {
    let error = probe(r#"{"panic": "the fleet is on fire"}"#, &PolicyLimits::default()).expect_err("panics");
    let PolicyError::GuestFailed { message } = &error else { panic!("{error:?}") };
    assert!(message.starts_with("panicked at policies/sdk-probe/src/lib.rs:"), "{message}");
    assert!(message.ends_with(":\nthe fleet is on fire"), "{message}");
    assert_eq!(
        probe(r#"{"fail": "gave up politely"}"#, &PolicyLimits::default()),
        Err(PolicyError::GuestFailed { message: "gave up politely".into() })
    );
}

#[test]
fn a_rust_guest_allocating_past_its_limit_hits_memory_limit() {
    let limits = PolicyLimits { max_memory_bytes: 32 << 20, ..PolicyLimits::default() };
    let error = probe(r#"{"allocate_mb": 64}"#, &limits).expect_err("too much");
    let PolicyError::MemoryLimit { limit, requested } = error else { panic!("{error:?}") };
    assert_eq!(limit, 32 << 20);
    assert!(requested > 64 << 20, "{requested}");
    let evaluation = probe(r#"{"allocate_mb": 16}"#, &limits).expect("fits");
    assert!(evaluation.memory_bytes >= 16 << 20 && evaluation.memory_bytes <= 32 << 20, "{}", evaluation.memory_bytes);
    assert_eq!(evaluation.logs[0].message, format!("allocated {} bytes", 16 << 20));
}

#[test]
fn the_sdk_allocator_reuses_freed_memory_and_never_mixes_blocks() {
    // Thousands of blocks of sizes from bytes to a MiB allocated, grown, shrunk, zero-allocated and
    // freed, every live one checked: the guest fails if a block was handed out twice or a reused
    // one was not zeroed for `vec![0; n]`.
    let evaluation = probe(r#"{"churn": 4000}"#, &PolicyLimits::default()).expect("runs");
    let line = &evaluation.logs[0].message;
    assert!(line.starts_with("churn: 4000 rounds, ") && line.ends_with(", all checked"), "{line}");
    let allocated: u64 =
        line["churn: 4000 rounds, ".len()..].split(' ').next().and_then(|n| n.parse().ok()).expect("a number");
    // Freed blocks are reused: memory stays a fraction of what was allocated in total.
    assert!(
        evaluation.memory_bytes * 4 < allocated,
        "{} bytes of memory for {allocated} bytes allocated",
        evaluation.memory_bytes
    );
}

#[test]
fn rust_guest_logs_are_capped_and_counted() {
    let evaluation = probe(r#"{"log_lines": 2500}"#, &PolicyLimits::default()).expect("runs");
    assert_eq!(evaluation.logs.len(), 1_000);
    assert_eq!(evaluation.logs_dropped, 1_500);
    assert_eq!(evaluation.logs[999].message, "line 999");
}

#[test]
fn strings_cross_the_abi_intact() {
    let evaluation = probe("{}", &PolicyLimits::default()).expect("runs");
    let reasons: Vec<String> = evaluation.decisions().expect("decodes").iter().map(|d| d.reason.to_string()).collect();
    assert_eq!(
        reasons,
        vec![
            "train-ünïcode-训练 of acme: 4×30000 MiB [], 2 nodes, 12 GPUs, now 1700000000000",
            "infer of default: 1×20480 MiB [H100, A100], 2 nodes, 12 GPUs, now 1700000000000",
            "gang-too-big of default: 16×1024 MiB [], 2 nodes, 12 GPUs, now 1700000000000",
        ]
    );
}

#[test]
fn a_policy_checks_its_parameters_before_it_is_activated() {
    use airtime_policy_host::ParamsVerdict;
    let limits = PolicyLimits::default();
    let best_fit = runtime().compile(PRIORITY_BEST_FIT).expect("compiles");
    assert_eq!(runtime().validate_params(&best_fit, r#"{"max_placements": 3}"#, &limits), Ok(ParamsVerdict::Accepted));
    assert_eq!(
        runtime().validate_params(&best_fit, r#"{"max_placements": -1}"#, &limits),
        Ok(ParamsVerdict::Refused("params.max_placements: expected an unsigned 32-bit integer, found -1".into())),
        "the same message an evaluation with these parameters fails with"
    );
    let probe = runtime().compile(SDK_PROBE).expect("compiles");
    assert_eq!(
        runtime().validate_params(&probe, r#"{"refuse_params": "no\u0000 GPUs"}"#, &limits),
        Ok(ParamsVerdict::Refused("no\u{fffd} GPUs".into())),
        "the refusal is cleaned like any guest text"
    );
    // A module without the optional export (hand-written WAT, ABI 1.0) is not asked.
    let hand_written = crate::support::compile_wat("first_pending_on_gpu0");
    assert_eq!(runtime().validate_params(&hand_written, "{}", &limits), Ok(ParamsVerdict::NotChecked));
}
