//! The scheduling core decides a cycle with real Wasm policies in the production runtime
//! (`airtime-policy-host`), driven by a blocking executor: no database, no async runtime.

use std::collections::HashSet;
use std::sync::Arc;

use airtime_policy_host::{CompiledPolicy, EvaluationRequest, PolicyLimits, PolicyLog, PolicyRuntime, RuntimeConfig};
use airtime_policy_sdk::abi;
use airtime_protocol::workload::{NodeState, WorkloadState};
use airtime_scheduler::check::Proposal;
use airtime_scheduler::cycle::{self, Composed, Evaluated, Evaluator, Lane, Levels, PolicyHandle};
use airtime_scheduler::fleet::{
    FleetView, GpuEntry, GpuSharing, Holder, NodeEntry, TenantEntry, TenantView, WHOLE_GPU_MILLI, WorkloadEntry,
};
use airtime_scheduler::snapshot;
use futures::executor::block_on;
use uuid::Uuid;

/// A policy version compiled in the production runtime.
#[derive(Clone)]
struct Module {
    id: Uuid,
    name: &'static str,
    compiled: Arc<CompiledPolicy>,
    params: String,
    builtin: bool,
}

impl PolicyHandle for Module {
    fn version(&self) -> Uuid {
        self.id
    }
    fn label(&self) -> String {
        format!("{} v1", self.name)
    }
    fn builtin(&self) -> bool {
        self.builtin
    }
    fn params(&self) -> &str {
        &self.params
    }
}

struct Wasm(PolicyRuntime, Option<Module>);

impl Evaluator for Wasm {
    type Policy = Module;
    type Log = PolicyLog;

    async fn evaluate(&self, policy: &Module, snapshot: Vec<u8>, _: Lane, _: Option<&str>) -> Evaluated<PolicyLog> {
        let record = self.0.evaluate(EvaluationRequest::new(&policy.compiled, &snapshot, &PolicyLimits::default()));
        Evaluated { output: record.result.map_err(|e| (e.kind(), e.to_string())), logs: record.logs }
    }

    async fn fallback(&self) -> Result<Module, String> {
        self.1.clone().ok_or_else(|| "no built-in in this test".to_owned())
    }
}

/// A runtime whose built-in fallback is priority-best-fit.
fn wasm() -> Wasm {
    let mut runtime = Wasm(PolicyRuntime::new(RuntimeConfig::default()).expect("the runtime starts"), None);
    runtime.1 = Some(best_fit(&runtime));
    runtime
}

fn module(runtime: &Wasm, name: &'static str, bytes: &[u8], params: &str, builtin: bool) -> Module {
    let compiled = Arc::new(runtime.0.compile(bytes).expect("compiles"));
    Module { id: Uuid::new_v4(), name, compiled, params: params.into(), builtin }
}

fn best_fit(runtime: &Wasm) -> Module {
    module(runtime, "priority-best-fit", airtime_builtin_policies::PRIORITY_BEST_FIT, "{}", true)
}

/// Two tenants; one node of four H100s, the first held by tenant b's running job.
fn fleet() -> FleetView {
    let now = chrono::Utc::now();
    let gpu = |device_index: u32, holder: Option<usize>| GpuEntry {
        id: Uuid::new_v4(),
        node: 0,
        device_index,
        model: "H100".into(),
        memory_mb: 81920,
        memory_used_mb: 0,
        util: 0.0,
        nvlink_group: None,
        holders: holder
            .map(|workload| vec![Holder { workload, milli: WHOLE_GPU_MILLI, memory_mb: 0 }])
            .unwrap_or_default(),
        simulated: true,
        sharing: GpuSharing::None,
        mig_profile: String::new(),
    };
    let workload = |name: &str, tenant: usize, state: WorkloadState, age_s: i64| WorkloadEntry {
        state,
        gpu_memory_mb: 1024,
        started_at: (state == WorkloadState::Running).then_some(now),
        node: (state == WorkloadState::Running).then_some(0),
        ..WorkloadEntry::pending(name, tenant, 1, now - chrono::Duration::seconds(age_s))
    };
    let mut b = TenantEntry::named("b");
    b.running_gpu_milli = 1000;
    FleetView {
        now,
        settings: Default::default(),
        tenants: vec![TenantEntry::named("a"), b],
        nodes: vec![NodeEntry {
            id: Uuid::new_v4(),
            name: "gpu-1".into(),
            state: NodeState::Ready,
            cpu_millis: 16000,
            memory_mb: 131072,
            cpu_millis_free: 15000,
            memory_mb_free: 130048,
            cost_per_hour: 12.0,
            cpu_util: 0.0,
            simulated: true,
            containers: true,
            gpu_first: 0,
            gpu_count: 4,
        }],
        gpus: vec![gpu(0, Some(3)), gpu(1, None), gpu(2, None), gpu(3, None)],
        workloads: vec![
            workload("a-train", 0, WorkloadState::Pending, 30),
            workload("a-eval", 0, WorkloadState::Pending, 20),
            workload("b-train", 1, WorkloadState::Pending, 10),
            workload("b-running", 1, WorkloadState::Running, 100),
        ],
        services: Vec::new(),
        arrivals: Default::default(),
    }
}

fn placements(composed: &Composed, fleet: &FleetView) -> Vec<(String, Vec<u32>, String)> {
    let mut out: Vec<_> = composed
        .accepted
        .iter()
        .filter_map(|(p, d)| match p {
            Proposal::Place { workload, gpus, .. } => Some((
                fleet.workloads[*workload].name.to_string(),
                gpus.iter().map(|&g| fleet.gpus[g].device_index).collect(),
                d.policy_name.clone(),
            )),
            _ => None,
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_tenant_policy_places_its_own_work_within_what_the_platform_granted() {
    let runtime = wasm();
    let f = fleet();
    let platform = best_fit(&runtime);
    let own = module(&runtime, "a-own", airtime_builtin_policies::PRIORITY_BEST_FIT, "{}", false);
    let levels = Levels { platform, tenants: vec![(0, own)] };
    let decided = block_on(cycle::decide(&runtime, &f, levels)).expect("decides");
    let composed = decided.compose(&f, &HashSet::new());

    let placed = placements(&composed, &f);
    assert_eq!(placed.len(), 3, "{placed:?}");
    let gpus: HashSet<u32> = placed.iter().flat_map(|(_, g, _)| g.clone()).collect();
    assert_eq!(gpus, HashSet::from([1, 2, 3]), "three free GPUs, each given once: {placed:?}");
    for (name, _, decider) in &placed {
        let expected = if name.starts_with("a-") { "a-own v1" } else { "priority-best-fit v1" };
        assert_eq!(decider, expected, "{name} is decided by its tenant's own policy, or the platform's");
    }
    assert!(composed.refused.is_empty(), "{:?}", composed.refused);
    assert_eq!(decided.notes.successes.len(), 2);
}

#[test]
fn a_failing_platform_policy_gives_way_to_the_builtin_and_is_noted() {
    let runtime = wasm();
    let f = fleet();
    let failing =
        module(&runtime, "probe", airtime_builtin_policies::SDK_PROBE, r#"{"fail": "no GPUs for you"}"#, false);
    let levels = Levels { platform: failing, tenants: vec![] };
    let decided = block_on(cycle::decide(&runtime, &f, levels)).expect("decides");

    assert_eq!(decided.platform_policy().label(), "priority-best-fit v1");
    let (failed, failure) = &decided.notes.failures[0];
    assert_eq!(
        (failed.name, failure.kind, failure.message.as_str()),
        ("probe", "guest_failed", "the policy failed: no GPUs for you")
    );
    assert_eq!(decided.error().as_deref(), Some("probe v1 failed (guest_failed): the policy failed: no GPUs for you"));
    let placed = placements(&decided.compose(&f, &HashSet::new()), &f);
    assert_eq!(placed.len(), 3, "the built-in placed everyone: {placed:?}");
}

#[test]
fn a_tenant_policys_unsound_decision_is_refused_as_its_own_tests_would_refuse_it() {
    let runtime = wasm();
    let f = fleet();
    // Tenant b's policy (a hand-written WAT module) places b's first pending workload on GPU 0 of
    // its view: the GPU b's running job holds.
    let wat = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/wat/first_pending_on_gpu0.wat"
    ))
    .expect("fixture");
    let hostile = module(&runtime, "b-own", &wat::parse_str(&wat).expect("parses"), "{}", false);
    let platform = best_fit(&runtime);
    let levels = Levels { platform, tenants: vec![(1, hostile)] };
    let decided = block_on(cycle::decide(&runtime, &f, levels)).expect("decides");
    let composed = decided.compose(&f, &HashSet::new());

    let (refusal, decider) = &composed.refused[0];
    assert_eq!(decider.policy_name, "b-own v1");
    assert_eq!(refusal.workload, Some(2), "b-train, in the full fleet's indexes");
    // The same decision through the SDK's own check, on the snapshot b's policy read.
    let view = f.tenant_view(1, &[3], &[0]);
    let snapshot = snapshot::build(&view.view, "{}", Some(TenantView::SCOPE_TENANT));
    let decision =
        abi::Decision { workload: 0, action: abi::Action::Place { node: 0, gpus: vec![0] }, reason: "".into() };
    let problems = airtime_policy_sdk::check::check_decisions(&snapshot, &[decision]);
    assert_eq!(refusal.reason, problems[0].problem);
    assert!(refusal.reason.contains("is held by b-running"), "{}", refusal.reason);

    // b-train waits, saying why; a's work is placed by the platform's policy.
    let pending = composed.accepted.iter().find_map(|(p, _)| match p {
        Proposal::KeepPending { workload: 2, reason } => Some(reason.clone()),
        _ => None,
    });
    assert_eq!(pending.as_deref(), Some("b-own v1 did not place it within the tenant's grant this cycle"));
    let placed = placements(&composed, &f);
    assert_eq!(placed.iter().filter(|(n, _, _)| n.starts_with("a-")).count(), 2, "{placed:?}");
}

#[test]
fn the_database_refusing_one_scope_gives_the_builtin_its_place() {
    let runtime = wasm();
    let f = fleet();
    let uploaded = module(&runtime, "platform-own", airtime_builtin_policies::PRIORITY_BEST_FIT, "{}", false);
    let levels = Levels { platform: uploaded.clone(), tenants: vec![] };
    let mut decided = block_on(cycle::decide(&runtime, &f, levels)).expect("decides");
    assert_eq!(decided.uploaded().iter().map(|p| p.name).collect::<Vec<_>>(), vec!["platform-own"]);

    let composed = block_on(decided.exclude(&runtime, &f, &[uploaded], "a trigger said no")).expect("recomposes");
    assert!(composed.accepted.iter().all(|(_, d)| d.policy_name == "priority-best-fit v1"));
    assert_eq!(placements(&composed, &f).len(), 3);
    let (culprit, failure) = decided.notes.failures.last().expect("noted");
    assert_eq!((culprit.name, failure.kind), ("platform-own", "apply_failed"));
    assert!(decided.notes.successes.iter().all(|s| s.name != "platform-own"));
}
