//! A policy in hand-written WAT: the ABI is implementable without Rust or the SDK.

use airtime_policy_host::{EvaluationRequest, PolicyLimits};
use airtime_policy_sdk::abi::{Action, decode_snapshot};
use airtime_policy_sdk::check::check_decisions;
use airtime_policy_sdk::guest::LogLevel;

use crate::support::{compile_wat, runtime, small_fleet};

#[test]
fn a_wat_policy_places_the_first_pending_workload_on_gpu_0() {
    let policy = compile_wat("first_pending_on_gpu0");
    let fixture = small_fleet();
    let snapshot_bytes = fixture.encode();
    let evaluation = runtime()
        .evaluate(EvaluationRequest::new(&policy, &snapshot_bytes, &PolicyLimits::default()))
        .into_result()
        .expect("evaluates");
    let decisions = evaluation.decisions().expect("decodes");
    assert_eq!(decisions.len(), 1);
    // Workload 0 is `serving` (running); the first pending one is 1.
    assert_eq!(decisions[0].workload, 1);
    assert_eq!(decisions[0].action, Action::Place { node: 0, gpus: vec![0] });
    assert_eq!(decisions[0].reason, "first pending workload, GPU 0 (WAT)");
    assert_eq!(evaluation.logs.len(), 1);
    assert_eq!(evaluation.logs[0].level, LogLevel::Info);
    assert_eq!(evaluation.logs[0].message, "hello from WAT");
    // …and the host's own checks accept it (GPU 0 of gpu-a is free; the workload needs 4 GPUs, so
    // the only problem is the count, which is this toy policy's, not the ABI's).
    let snapshot = decode_snapshot(&snapshot_bytes).expect("valid");
    let problems = check_decisions(&snapshot, &decisions);
    assert_eq!(problems.len(), 1);
    assert!(problems[0].problem.contains("needs 4 GPUs, 1 were given"), "{}", problems[0]);
}

#[test]
fn a_wat_policy_with_nothing_to_do_returns_an_empty_list() {
    let policy = compile_wat("first_pending_on_gpu0");
    let bytes = airtime_policy_sdk::testing::SnapshotFixture::new().pending("a", 1, 1).encode();
    let evaluation = runtime()
        .evaluate(EvaluationRequest::new(&policy, &bytes, &PolicyLimits::default()))
        .into_result()
        .expect("evaluates");
    assert_eq!(evaluation.decisions().expect("decodes"), vec![]);
}

#[test]
fn every_evaluation_gets_a_fresh_instance() {
    let policy = compile_wat("state_probe");
    let bytes = small_fleet().encode();
    for _ in 0..5 {
        runtime()
            .evaluate(EvaluationRequest::new(&policy, &bytes, &PolicyLimits::default()))
            .into_result()
            .expect("no state from the previous run");
    }
}
