//! Hostile and broken modules: each refused at upload or stopped at evaluation with the precise
//! error, and the host unharmed.

use std::time::{Duration, Instant};

use airtime_policy_host::{EvaluationRequest, PolicyError, PolicyLimits};

use crate::support::{compile_error, compile_wat, evaluate_error, runtime, small_fleet};

fn limits(edit: impl FnOnce(&mut PolicyLimits)) -> PolicyLimits {
    let mut limits = PolicyLimits::default();
    edit(&mut limits);
    limits
}

#[test]
fn an_infinite_loop_is_stopped_at_the_deadline() {
    let policy = compile_wat("infinite_loop");
    let started = Instant::now();
    let error = evaluate_error(&policy, &limits(|l| l.deadline_ms = 100));
    let took = started.elapsed();
    assert_eq!(error, PolicyError::DeadlineExceeded { deadline: Duration::from_millis(100) });
    assert_eq!(error.to_string(), "the policy ran past its 100 ms deadline");
    assert_eq!(error.kind(), "deadline_exceeded");
    assert!(took >= Duration::from_millis(100), "stopped early, after {took:?}");
    assert!(took < Duration::from_millis(1_000), "stopped late, after {took:?}");
}

#[test]
fn a_memory_bomb_hits_the_memory_limit() {
    let policy = compile_wat("memory_bomb");
    let error = evaluate_error(&policy, &limits(|l| l.max_memory_bytes = 16 << 20));
    assert_eq!(error, PolicyError::MemoryLimit { limit: 16 << 20, requested: (16 << 20) + (1 << 16) });
    assert_eq!(error.kind(), "memory_limit");
}

#[test]
fn deep_recursion_overflows_the_stack() {
    let policy = compile_wat("deep_recursion");
    let error = evaluate_error(&policy, &PolicyLimits::default());
    assert_eq!(error, PolicyError::StackOverflow { max_wasm_stack: 512 << 10 });
    assert_eq!(error.to_string(), "the policy overflowed its 524288-byte wasm stack (runaway recursion?)");
}

#[test]
fn a_huge_output_is_refused_before_it_is_copied() {
    let policy = compile_wat("huge_output");
    let error = evaluate_error(&policy, &PolicyLimits::default());
    assert_eq!(error, PolicyError::OutputTooLarge { len: 64 << 20, limit: 8 << 20 });
}

#[test]
fn malformed_and_truncated_outputs_are_refused() {
    let error = evaluate_error(&compile_wat("malformed_output"), &PolicyLimits::default());
    assert_eq!(error.kind(), "malformed_output");
    assert_eq!(
        error.to_string(),
        "the policy's decisions are malformed: decision header: magic is \"ATDX\" (bytes [41, 54, 44, 58]), expected \"ATDC\""
    );
    let error = evaluate_error(&compile_wat("truncated_output"), &PolicyLimits::default());
    assert_eq!(
        error.to_string(),
        "the policy's decisions are malformed: snapshot header: decisions table (3 records of 32 bytes at 0x8) runs past the 8-byte buffer"
    );
}

#[test]
fn buffers_outside_guest_memory_are_abi_violations() {
    let error = evaluate_error(&compile_wat("output_outside_memory"), &PolicyLimits::default());
    assert_eq!(
        error.to_string(),
        "the policy broke the ABI: airtime_evaluate returned 64 bytes at 0xfffa, outside the 65536-byte memory"
    );
    let error = evaluate_error(&compile_wat("alloc_outside_memory"), &PolicyLimits::default());
    assert_eq!(error.kind(), "abi_violation");
    assert!(error.to_string().contains("airtime_alloc("), "{error}");
    let error = evaluate_error(&compile_wat("log_outside_memory"), &PolicyLimits::default());
    assert_eq!(
        error.to_string(),
        "the policy broke the ABI: airtime.log got 1000 bytes at 0xfde8, outside the 65536-byte memory"
    );
}

#[test]
fn wasi_and_unknown_imports_are_refused_by_name() {
    let error = compile_error("wasi_import");
    assert_eq!(
        error,
        PolicyError::ForbiddenImport { module: "wasi_snapshot_preview1".into(), name: "fd_write".into() }
    );
    assert_eq!(
        error.to_string(),
        "the module imports `wasi_snapshot_preview1.fd_write`; a policy may import only `airtime.log` and `airtime.fail`"
    );
    assert_eq!(
        compile_error("unknown_host_function"),
        PolicyError::ForbiddenImport { module: "airtime".into(), name: "open_socket".into() }
    );
    assert_eq!(
        compile_error("wrong_import_type").to_string(),
        "the module imports `airtime.log` as func (i32, i32); the ABI defines it as func (i32, i32, i32)"
    );
}

#[test]
fn bytes_that_are_not_wasm_are_refused_with_what_they_are() {
    let error = runtime().compile(b"hello, world").expect_err("not wasm");
    assert_eq!(error.kind(), "not_wasm");
    assert_eq!(
        error.to_string(),
        "not a WebAssembly module: it starts with [68, 65, 6c, 6c], not the wasm magic \\0asm"
    );
    let text = runtime().compile(b"(module)").expect_err("text");
    assert!(text.to_string().ends_with("(WebAssembly text: compile it to binary first)"), "{text}");
    let component = runtime().compile(b"\0asm\x0d\0\x01\0").expect_err("component");
    assert!(component.to_string().contains("a WebAssembly component"), "{component}");
    let short = runtime().compile(b"\0a").expect_err("short");
    assert_eq!(short.to_string(), "not a WebAssembly module: 2 bytes is shorter than the 8-byte wasm header");
    let invalid = runtime().compile(b"\0asm\x01\0\0\0\x01\xff").expect_err("invalid");
    assert_eq!(invalid.kind(), "invalid_module");
}

#[test]
fn another_abi_version_is_refused_naming_both() {
    let error = compile_error("abi_version_7");
    assert_eq!(error, PolicyError::AbiVersionMismatch { module: 7, host: 1 });
    assert_eq!(error.to_string(), "module speaks ABI version 7; this control plane speaks 1");
}

#[test]
fn a_trapping_start_function_is_refused_at_upload() {
    let error = compile_error("start_trap");
    assert_eq!(error.kind(), "start_trapped");
    assert_eq!(
        error.to_string(),
        "the module's start function trapped: wasm trap: wasm `unreachable` instruction executed"
    );
}

#[test]
fn missing_and_mistyped_exports_are_named() {
    assert_eq!(
        compile_error("missing_export").to_string(),
        "the module does not export `airtime_evaluate` (func (i32, i32) -> i64), which the ABI requires"
    );
    assert_eq!(
        compile_error("wrong_export_type").to_string(),
        "the module exports `airtime_alloc` as func (i64) -> i32; the ABI requires func (i32) -> i32"
    );
}

#[test]
fn a_log_flood_is_capped_and_counted_not_fatal() {
    let policy = compile_wat("log_flood");
    let evaluation = runtime()
        .evaluate(EvaluationRequest::new(&policy, &small_fleet().encode(), &limits(|l| l.max_log_lines = 50)))
        .into_result()
        .expect("logging too much is not an error");
    assert_eq!(evaluation.logs.len(), 50);
    assert_eq!(evaluation.logs_dropped, 100_000 - 50);
    assert_eq!(evaluation.logs[0].message, "flood");

    let evaluation = runtime()
        .evaluate(EvaluationRequest::new(&policy, &small_fleet().encode(), &limits(|l| l.max_log_bytes = 12)))
        .into_result()
        .expect("logging too much is not an error");
    assert_eq!(evaluation.logs.len(), 2, "two 5-byte lines fit in 12 bytes");
}

#[test]
fn airtime_fail_carries_the_message_and_logs_survive() {
    let policy = compile_wat("fail_with_message");
    let record = runtime().evaluate(EvaluationRequest::new(&policy, &small_fleet().encode(), &PolicyLimits::default()));
    assert_eq!(record.result, Err(PolicyError::GuestFailed { message: "no GPUs of model B300 in this fleet".into() }));
    assert_eq!(record.logs.len(), 1);
    assert_eq!(record.logs[0].message, "about to give up");
}

#[test]
fn the_host_survives_every_adversary_and_still_evaluates() {
    // After all of the above (in any order), a good policy still runs.
    let policy = compile_wat("first_pending_on_gpu0");
    for _ in 0..3 {
        let _ = runtime()
            .evaluate(EvaluationRequest::new(
                &compile_wat("infinite_loop"),
                &small_fleet().encode(),
                &limits(|l| l.deadline_ms = 20),
            ))
            .into_result();
        let _ = runtime()
            .evaluate(EvaluationRequest::new(
                &compile_wat("memory_bomb"),
                &small_fleet().encode(),
                &limits(|l| l.max_memory_bytes = 4 << 20),
            ))
            .into_result();
        let _ = runtime()
            .evaluate(EvaluationRequest::new(
                &compile_wat("deep_recursion"),
                &small_fleet().encode(),
                &PolicyLimits::default(),
            ))
            .into_result();
    }
    let evaluation = runtime()
        .evaluate(EvaluationRequest::new(&policy, &small_fleet().encode(), &PolicyLimits::default()))
        .into_result()
        .expect("runs");
    assert_eq!(evaluation.decisions().expect("decodes").len(), 1);
}
