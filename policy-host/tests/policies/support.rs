//! Shared fixtures: one runtime for the binary, WAT fixtures by name, a small fleet.

use std::path::PathBuf;
use std::sync::OnceLock;

use airtime_policy_host::{CompiledPolicy, EvaluationRequest, PolicyError, PolicyLimits, PolicyRuntime, RuntimeConfig};
use airtime_policy_sdk::testing::SnapshotFixture;

/// One runtime for all tests, as in a process (tests also build their own where config matters).
pub fn runtime() -> &'static PolicyRuntime {
    static RUNTIME: OnceLock<PolicyRuntime> = OnceLock::new();
    RUNTIME.get_or_init(|| PolicyRuntime::new(RuntimeConfig::default()).expect("the default runtime starts"))
}

/// The bytes of `tests/fixtures/wat/<name>.wat`.
pub fn wat(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/wat").join(format!("{name}.wat"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    wat::parse_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Compiles WAT fixture `name`, which must pass every upload check.
pub fn compile_wat(name: &str) -> CompiledPolicy {
    runtime().compile(&wat(name)).unwrap_or_else(|e| panic!("{name} should compile: {e}"))
}

/// The error compiling WAT fixture `name`.
pub fn compile_error(name: &str) -> PolicyError {
    match runtime().compile(&wat(name)) {
        Ok(_) => panic!("{name} should be refused at upload"),
        Err(error) => error,
    }
}

/// The error evaluating `policy` on a small fleet with `limits`.
pub fn evaluate_error(policy: &CompiledPolicy, limits: &PolicyLimits) -> PolicyError {
    match runtime().evaluate(EvaluationRequest::new(policy, &small_fleet().encode(), limits)).into_result() {
        Ok(evaluation) => panic!("the evaluation should fail, but returned {} bytes", evaluation.output.len()),
        Err(error) => error,
    }
}

/// Two nodes, a running workload, three pending ones (one with non-ASCII text).
pub fn small_fleet() -> SnapshotFixture {
    SnapshotFixture::new()
        .node("gpu-a", 4, "H100", 81920)
        .node("gpu-b", 8, "A100", 40960)
        .tenant("acme")
        .running("serving", "gpu-a", &[1])
        .pending_with("train-ünïcode-训练", 4, 30000, |w| w.priority = 3)
        .workload_tenant("train-ünïcode-训练", "acme")
        .pending_with("infer", 1, 20480, |w| w.gpu_models = "H100, A100".into())
        .pending("gang-too-big", 16, 1024)
}
