//! A policy written in C against `sdk/c/airtime_policy.h` (`policies/c-first-fit/first_fit.c`),
//! built by `scripts/build-c-policy.sh`, run in the host on the fixtures the Rust policies run on:
//! proof that a C author can implement the ABI from the header alone.
//!
//! Needs clang's wasm32 target and wasm-ld (`apt-get install -y clang lld`); without them the
//! build script exits 2 and every test here says it is skipped and passes.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use airtime_policy_host::{EvaluationRequest, PolicyLimits};
use airtime_policy_sdk::abi::{Action, NodeState, Snapshot, decode_snapshot};
use airtime_policy_sdk::check::check_decisions;
use airtime_policy_sdk::guest::LogLevel;
use airtime_policy_sdk::model_allowed;
use airtime_policy_sdk::testing::SnapshotFixture;

use crate::support::{runtime, small_fleet};

/// `source` (relative to the repository) built by `scripts/build-c-policy.sh` into a temporary
/// directory; `Err` holds the script's skip message when the toolchain is missing (exit 2). Any
/// other failure panics with the script's stderr.
fn build(source: &str) -> Result<Vec<u8>, String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let stem = source.rsplit('/').next().unwrap_or(source).trim_end_matches(".c");
    let dir = std::env::temp_dir().join(format!("airtime-c-policy-{}-{stem}-{nanos}", std::process::id()));
    let out = dir.join(format!("{stem}.wasm"));
    let script = root.join("scripts/build-c-policy.sh");
    let output = Command::new("bash")
        .arg(&script)
        .arg(&out)
        .arg(root.join(source))
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    let result = match output.status.code() {
        Some(0) => std::fs::read(&out).map_err(|e| format!("reading {}: {e}", out.display())),
        Some(2) => Err(stderr),
        status => Err(format!("{} {source} failed ({status:?}):\n{stderr}", script.display())),
    };
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Err(message) if output.status.code() != Some(2) => panic!("{message}"),
        result => result,
    }
}

/// The first-fit module, built once per test binary.
fn c_first_fit() -> Result<&'static [u8], &'static str> {
    static MODULE: OnceLock<Result<Vec<u8>, String>> = OnceLock::new();
    MODULE.get_or_init(|| build("policies/c-first-fit/first_fit.c")).as_ref().map(Vec::as_slice).map_err(String::as_str)
}

/// The field-by-field echo module (`sdk/c/tests/abi_echo.c`), built once per test binary.
fn c_abi_echo() -> Result<&'static [u8], &'static str> {
    static MODULE: OnceLock<Result<Vec<u8>, String>> = OnceLock::new();
    MODULE.get_or_init(|| build("sdk/c/tests/abi_echo.c")).as_ref().map(Vec::as_slice).map_err(String::as_str)
}

/// What one evaluation of the C policy produced, after the host's and the SDK's checks.
struct Run {
    decisions: Vec<(u32, Action, String)>,
    logs: Vec<(LogLevel, String)>,
}

/// Compiles and evaluates the C policy on `fixture`; asserts that its decisions decode and pass
/// `check_decisions` with no problem, and that it decides exactly what a first fit decides.
/// `None` when the toolchain is missing (the test is skipped).
fn run(fixture: &SnapshotFixture) -> Option<Run> {
    let module = match c_first_fit() {
        Ok(module) => module,
        Err(skip) => {
            eprintln!("{skip}");
            return None;
        }
    };
    let policy = runtime().compile(module).expect("the C policy passes the upload checks");
    let bytes = fixture.encode();
    let evaluation = runtime()
        .evaluate(EvaluationRequest::new(&policy, &bytes, &PolicyLimits::default()))
        .into_result()
        .expect("the C policy evaluates");
    let decisions = evaluation.decisions().expect("its decision buffer decodes");
    let snapshot = decode_snapshot(&bytes).expect("valid fixture");
    assert_eq!(check_decisions(&snapshot, &decisions), vec![], "the host accepts every decision");
    let actions: Vec<(u32, Action)> = decisions.iter().map(|d| (d.workload, d.action.clone())).collect();
    assert_eq!(actions, reference_first_fit(&snapshot), "the C policy decides as a first fit");
    Some(Run {
        decisions: decisions.into_iter().map(|d| (d.workload, d.action, d.reason.into_owned())).collect(),
        logs: evaluation.logs.into_iter().map(|l| (l.level, l.message)).collect(),
    })
}

/// First fit, written again in Rust from the rule (not from the C): each pending workload of the
/// scope in snapshot order on the first ready node with its CPU and memory free and its GPUs
/// (the node's lowest-numbered free, untaken ones of an allowed model with enough free memory);
/// kept pending otherwise.
fn reference_first_fit(snapshot: &Snapshot<'_>) -> Vec<(u32, Action)> {
    let mut cpu_free: Vec<u32> = snapshot.nodes.iter().map(|n| n.cpu_millis_free).collect();
    let mut memory_free: Vec<u32> = snapshot.nodes.iter().map(|n| n.memory_mb_free).collect();
    let mut taken = vec![false; snapshot.gpus.len()];
    let mut decisions = Vec::new();
    for (index, workload) in snapshot.workloads.iter().enumerate() {
        if !workload.is_pending() || snapshot.scope_tenant.is_some_and(|t| t != workload.tenant) {
            continue;
        }
        let choice = snapshot.nodes.iter().enumerate().find_map(|(n, node)| {
            if !node.is_ready()
                || !node.can_run(workload)
                || cpu_free[n] < workload.cpu_millis
                || memory_free[n] < workload.memory_mb
            {
                return None;
            }
            let gpus: Vec<u32> = (node.gpu_first..node.gpu_first + node.gpu_count)
                .filter(|&g| {
                    let gpu = &snapshot.gpus[g as usize];
                    gpu.holder.is_none()
                        && !taken[g as usize]
                        && model_allowed(workload.gpu_models, gpu.model)
                        && gpu.memory_free_mb() >= workload.gpu_memory_mb
                })
                .take(workload.gpu_count as usize)
                .collect();
            (gpus.len() == workload.gpu_count as usize).then_some((n, gpus))
        });
        let action = match choice {
            Some((n, gpus)) => {
                for &g in &gpus {
                    taken[g as usize] = true;
                }
                cpu_free[n] -= workload.cpu_millis;
                memory_free[n] -= workload.memory_mb;
                Action::Place { node: n as u32, gpus }
            }
            None => Action::KeepPending,
        };
        decisions.push((index as u32, action));
    }
    decisions
}

fn place(workload: u32, node: u32, gpus: &[u32], reason: &str) -> (u32, Action, String) {
    (workload, Action::Place { node, gpus: gpus.to_vec() }, reason.to_owned())
}

fn keep_pending(workload: u32, reason: &str) -> (u32, Action, String) {
    (workload, Action::KeepPending, reason.to_owned())
}

#[test]
fn the_c_policy_places_the_small_fleet_first_fit() {
    let Some(run) = run(&small_fleet()) else { return };
    // Workload 0 (`serving`) runs on gpu-a device 1, so gpu-a has 3 free GPUs: the 4-GPU job goes
    // to gpu-b (GPU indexes 4..8 are its devices 0..4), the 1-GPU job to gpu-a device 0, and the
    // 16-GPU job fits no node.
    assert_eq!(
        run.decisions,
        vec![
            place(1, 1, &[4, 5, 6, 7], "first fit on gpu-b: GPUs 0,1,2,3 (A100)"),
            place(2, 0, &[0], "first fit on gpu-a: GPU 0 (H100)"),
            keep_pending(3, "no ready node has 16 free GPUs with ≥ 1024 MiB and 1000 mCPU, 4096 MiB free"),
        ]
    );
    assert_eq!(run.logs, vec![(LogLevel::Info, "c-first-fit: placed 2 of 3 pending workloads".to_owned())]);
}

#[test]
fn the_c_policy_decides_a_synthetic_fleet() {
    let fixture = SnapshotFixture::synthetic_fleet(40, 8, 500, 3);
    let Some(run) = run(&fixture) else { return };
    // One decision per pending workload (all 500 are pending), in snapshot order.
    let workloads: Vec<u32> = run.decisions.iter().map(|d| d.0).collect();
    assert_eq!(workloads, (0..500).collect::<Vec<u32>>());
    let placed = run.decisions.iter().filter(|d| matches!(d.1, Action::Place { .. })).count();
    let cpu_placements = run.decisions.iter().filter(|d| matches!(&d.1, Action::Place { gpus, .. } if gpus.is_empty()));
    assert!(placed > 0 && placed < 500, "{placed} placed");
    assert!(cpu_placements.count() > 0, "CPU-only work is placed too");
    assert!(run.decisions.iter().all(|d| !d.2.is_empty()), "every decision has a reason");
    assert_eq!(run.logs[0].1, format!("c-first-fit: placed {placed} of 500 pending workloads"));
}

#[test]
fn the_c_policy_matches_gpu_models_ignoring_case_and_spaces() {
    let fixture = SnapshotFixture::new()
        .node_with("drain-sxm", 8, "H100-SXM", 81920, |n| n.state = NodeState::Draining)
        .node("a100-node", 2, "A100", 40960)
        .node("h100-node", 4, " h100-SXM ", 81920)
        .gpu("h100-node", 0, |g| g.memory_used_mb = 70000)
        .cpu_node("cpu-node", 8000, 32768)
        .pending_with("sxm", 2, 20000, |w| w.gpu_models = "H100-sxm , B200".into())
        .pending_with("no-models-named", 1, 40960, |w| w.gpu_models = ",, ".into())
        .pending_with("two-a100", 2, 10000, |w| w.gpu_models = "a100".into())
        .pending_with("small-sxm", 1, 10000, |w| w.gpu_models = "h100-SXM".into())
        .pending_with("b200", 1, 1, |w| w.gpu_models = "B200".into())
        .pending("cpu", 0, 0)
        .pending_with("cpu-huge", 0, 0, |w| w.cpu_millis = 100_000);
    let Some(run) = run(&fixture) else { return };
    // GPUs: drain-sxm 0..8, a100-node 8..10, h100-node 10..14 (device 0, index 10, has 11920 MiB
    // free by telemetry).
    assert_eq!(
        run.decisions,
        vec![
            place(0, 2, &[11, 12], "first fit on h100-node: GPUs 1,2 (h100-SXM)"),
            place(1, 1, &[8], "first fit on a100-node: GPU 0 (A100)"),
            keep_pending(2, "no ready node has 2 free GPUs with ≥ 10000 MiB (a100) and 1000 mCPU, 4096 MiB free"),
            place(3, 2, &[10], "first fit on h100-node: GPU 0 (h100-SXM)"),
            keep_pending(4, "no ready node has 1 free GPU with ≥ 1 MiB (B200) and 1000 mCPU, 4096 MiB free"),
            place(5, 1, &[], "first fit on a100-node: CPU only"),
            keep_pending(6, "no ready node has 100000 mCPU, 4096 MiB free"),
        ]
    );
}

#[test]
fn the_c_policy_counts_cpu_and_memory_taken_earlier_in_the_cycle() {
    let fixture = SnapshotFixture::new()
        .node_with("small", 4, "A100", 40960, |n| n.memory_mb_free = 24_000)
        .node("big-1", 4, "A100", 40960)
        .node("big-2", 4, "A100", 40960)
        .pending_with("cores-1", 1, 1024, |w| w.cpu_millis = 40_000)
        .pending_with("cores-2", 1, 1024, |w| w.cpu_millis = 40_000)
        .pending_with("memory-1", 1, 1024, |w| w.memory_mb = 16_000)
        .pending_with("memory-2", 1, 1024, |w| w.memory_mb = 16_000)
        .pending_with("cores-3", 1, 1024, |w| w.cpu_millis = 40_000)
        .pending_with("cores-4", 1, 1024, |w| w.cpu_millis = 40_000);
    let Some(run) = run(&fixture) else { return };
    let placements: Vec<(u32, Option<u32>)> = run
        .decisions
        .iter()
        .map(|(w, action, _)| match action {
            Action::Place { node, .. } => (*w, Some(*node)),
            _ => (*w, None),
        })
        .collect();
    // 64 cores a node: one 40-core job each; `small` has 24000 MiB free: one
    // 16000-MiB job besides the 4096 MiB of `cores-1`.
    assert_eq!(placements, vec![(0, Some(0)), (1, Some(1)), (2, Some(0)), (3, Some(1)), (4, Some(2)), (5, None)]);
}

#[test]
fn the_c_policy_decides_only_its_tenants_workloads_in_a_tenant_scope() {
    // small_fleet's `train-ünïcode-训练` (workload 1) is acme's; the rest are `default`'s.
    let Some(acme) = run(&small_fleet().scope_tenant("acme")) else { return };
    assert_eq!(acme.decisions, vec![place(1, 1, &[4, 5, 6, 7], "first fit on gpu-b: GPUs 0,1,2,3 (A100)")]);
    assert_eq!(acme.logs, vec![(LogLevel::Info, "c-first-fit: placed 1 of 1 pending workload".to_owned())]);

    let fixture = SnapshotFixture::synthetic_fleet(8, 8, 300, 11).scope_tenant("tenant-03");
    let Some(tenant_03) = run(&fixture) else { return };
    let snapshot_bytes = fixture.encode();
    let snapshot = decode_snapshot(&snapshot_bytes).expect("valid");
    let scope = snapshot.scope_tenant.expect("a tenant scope");
    let theirs = snapshot.workloads.iter().filter(|w| w.tenant == scope).count();
    assert!(theirs > 0 && theirs < 300, "{theirs}");
    assert_eq!(tenant_03.decisions.len(), theirs);
    assert!(tenant_03.decisions.iter().all(|d| snapshot.workloads[d.0 as usize].tenant == scope));
}

#[test]
fn the_c_policy_trims_model_names_as_the_sdk_does() {
    // `str::trim`, which the SDK's rule uses, removes Unicode white space (a no-break space, an
    // ideographic space), not only ASCII spaces; case is folded for ASCII letters only.
    let fixture = SnapshotFixture::new()
        .node("odd-names", 2, "\u{a0}Ä100\u{3000}", 40960)
        .node("plain", 2, "A100", 40960)
        .pending_with("wide-spaces", 1, 1024, |w| w.gpu_models = "\u{2003}a100\u{205f}, ".into())
        .pending_with("exact-umlaut", 1, 1024, |w| w.gpu_models = " Ä100".into())
        .pending_with("other-case-umlaut", 1, 1024, |w| w.gpu_models = "ä100".into());
    let Some(run) = run(&fixture) else { return };
    assert_eq!(
        run.decisions,
        vec![
            place(0, 1, &[2], "first fit on plain: GPU 0 (A100)"),
            place(1, 0, &[0], "first fit on odd-names: GPU 0 (Ä100)"),
            keep_pending(2, "no ready node has 1 free GPU with ≥ 1024 MiB (ä100) and 1000 mCPU, 4096 MiB free"),
        ]
    );
}

/// The lines `sdk/c/tests/abi_echo.c` writes, from the SDK's decoding of the same bytes, for a
/// buffer whose tables have strides `extra` bytes larger than the record sizes.
fn echo_lines(s: &Snapshot<'_>, extra: usize) -> Vec<String> {
    use airtime_policy_sdk::abi::{
        ARRIVAL_SIZE, GPU_SIZE, NODE_SIZE, NONE, SERVICE_SIZE, SETTINGS_SIZE, TENANT_SIZE, WORKLOAD_SIZE,
    };
    let index = |i: Option<u32>| i.unwrap_or(NONE);
    let mut lines = vec![format!(
        "header 0 now_ms={} params=[{}] scope={} tenants={}x{} nodes={}x{} gpus={}x{} workloads={}x{} settings={}x{} \
         services={}x{} arrivals={}x{}",
        s.now_ms,
        s.params,
        index(s.scope_tenant),
        s.tenants.len(),
        TENANT_SIZE + extra,
        s.nodes.len(),
        NODE_SIZE + extra,
        s.gpus.len(),
        GPU_SIZE + extra,
        s.workloads.len(),
        WORKLOAD_SIZE + extra,
        usize::from(s.settings.is_some()),
        SETTINGS_SIZE + extra,
        s.services.len(),
        SERVICE_SIZE + extra,
        s.arrivals.len(),
        ARRIVAL_SIZE + extra,
    )];
    if let Some(t) = &s.settings {
        lines.push(format!(
            "settings 0 burst_reserve_gpus={} realtime_first={} min_runtime_s={} grace_period_s={} \
             max_preemptions_per_hour={} night_training_bonus={} flags={}",
            t.burst_reserve_gpus,
            u32::from(t.realtime_first),
            t.min_runtime_s,
            t.grace_period_s,
            t.max_preemptions_per_hour,
            t.night_training_bonus,
            u32::from(t.checkpointable_only)
        ));
    }
    for (i, t) in s.tenants.iter().enumerate() {
        lines.push(format!(
            "tenant {i} name=[{}] guaranteed_gpus={} weight={} running_gpus={} tier={} decayed_gpu_hours={} flags={} \
             running_gpu_milli={}",
            t.name,
            t.guaranteed_gpus,
            t.weight,
            t.running_gpus,
            t.tier,
            t.decayed_gpu_hours.to_bits(),
            u32::from(t.may_borrow),
            t.running_gpu_milli
        ));
    }
    for (i, n) in s.nodes.iter().enumerate() {
        lines.push(format!(
            "node {i} name=[{}] state={} cpu_millis={} cpu_millis_free={} memory_mb={} memory_mb_free={} gpu_first={} \
             gpu_count={} cost_per_hour={} cpu_util={} flags={}",
            n.name,
            n.state.code(),
            n.cpu_millis,
            n.cpu_millis_free,
            n.memory_mb,
            n.memory_mb_free,
            n.gpu_first,
            n.gpu_count,
            n.cost_per_hour.to_bits(),
            n.cpu_util.to_bits(),
            u32::from(n.simulated)
        ));
    }
    for (i, g) in s.gpus.iter().enumerate() {
        lines.push(format!(
            "gpu {i} node={} device_index={} model=[{}] memory_mb={} memory_used_mb={} memory_free_mb={} util={} \
             nvlink_group={} holder={} flags={} sharing={} free_milli={} memory_reserved_mb={} sharers={} \
             mig_profile=[{}]",
            g.node,
            g.device_index,
            g.model,
            g.memory_mb,
            g.memory_used_mb,
            g.memory_free_mb(),
            g.util.to_bits(),
            index(g.nvlink_group),
            index(g.holder),
            u32::from(g.simulated),
            g.sharing.code(),
            g.free_milli,
            g.memory_reserved_mb,
            g.sharers,
            g.mig_profile
        ));
    }
    for (i, w) in s.workloads.iter().enumerate() {
        let flags = u32::from(w.preemptible)
            | u32::from(w.checkpointable) << 1
            | u32::from(w.cpu_capable) << 2
            | u32::from(w.gang) << 3;
        lines.push(format!(
            "workload {i} id=[{}] name=[{}] tenant={} class={} state={} priority={} gpu_count={} gpu_memory_mb={} \
             gpu_models=[{}] cpu_millis={} memory_mb={} submitted_ms={} started_ms={} node={} flags={flags} \
             expected_duration_s={} in_scope={} gpu_milli={} mig_profile=[{}] service={} replica_variant={} \
             preemptions_last_hour={}",
            w.id,
            w.name,
            w.tenant,
            w.class.code(),
            w.state.code(),
            w.priority,
            w.gpu_count,
            w.gpu_memory_mb,
            w.gpu_models,
            w.cpu_millis,
            w.memory_mb,
            w.submitted_ms,
            w.started_ms,
            index(w.node),
            w.expected_duration_s,
            u32::from(s.scope_tenant.is_none_or(|t| t == w.tenant)),
            w.gpu_milli,
            w.mig_profile,
            index(w.service),
            w.replica_variant.code(),
            w.preemptions_last_hour
        ));
    }
    for (i, v) in s.services.iter().enumerate() {
        let flags = u32::from(v.has_cpu_variant) | u32::from(v.draining) << 1 | u32::from(v.stale) << 2;
        lines.push(format!(
            "service {i} name=[{}] tenant={} class={} metric={} min_replicas={} max_replicas={} capacity={} \
             cpu_capacity={} demand={} latest={} desired_gpu={} desired_cpu={} placed_gpu={} placed_cpu={} \
             pending_gpu={} pending_cpu={} gpu_milli_per_replica={} flags={flags}",
            v.name,
            v.tenant,
            v.class.code(),
            v.metric.code(),
            v.min_replicas,
            v.max_replicas,
            v.capacity.to_bits(),
            v.cpu_capacity.to_bits(),
            v.demand.to_bits(),
            v.latest.to_bits(),
            v.desired_gpu,
            v.desired_cpu,
            v.placed_gpu,
            v.placed_cpu,
            v.pending_gpu,
            v.pending_cpu,
            v.gpu_milli_per_replica
        ));
    }
    for (i, a) in s.arrivals.iter().enumerate() {
        lines.push(format!(
            "arrival {i} gpu_milli={} gpu_count={} cpu_millis={} count={} gpu_models=[{}]",
            a.gpu_milli, a.gpu_count, a.cpu_millis, a.count, a.gpu_models
        ));
    }
    lines
}

/// Every field a snapshot can carry, with values that show a wrong offset, width or sign.
fn every_field() -> SnapshotFixture {
    use airtime_policy_sdk::abi::{Settings, WorkloadClass, WorkloadState};
    small_fleet()
        .params(r#"{"spread": "ü", "max": 3}"#)
        .now_ms(0x0123_4567_89AB_CDEF)
        .settings(Settings {
            burst_reserve_gpus: 2,
            realtime_first: true,
            min_runtime_s: 300,
            grace_period_s: 30,
            max_preemptions_per_hour: 7,
            night_training_bonus: -5,
            checkpointable_only: true,
        })
        .tenant_with("beta", |t| {
            t.guaranteed_gpus = 8;
            t.weight = 3;
            t.running_gpus = 1;
            t.tier = -2;
            t.decayed_gpu_hours = 12.375;
            t.may_borrow = false;
            t.running_gpu_milli = 1250;
        })
        .node_with("sim", 2, "L4", 24576, |n| {
            n.state = NodeState::Lost;
            n.cost_per_hour = 3.25;
            n.cpu_util = 0.625;
            n.simulated = true;
            n.cpu_millis_free = 1234;
            n.memory_mb_free = 5678;
        })
        .gpu("sim", 1, |g| {
            g.memory_used_mb = 30000; // more than it has: free memory saturates at 0
            g.util = 0.5;
            g.nvlink_group = Some(7);
            g.simulated = true;
            g.sharing = airtime_policy_sdk::abi::Sharing::Mig;
            g.mig_profile = "3g.40gb".into();
        })
        .running_with("stopping", "sim", &[0], |w| {
            w.state = WorkloadState::Stopping;
            w.class = WorkloadClass::Evaluation;
            w.priority = -7;
            w.preemptible = true;
            w.checkpointable = true;
            w.cpu_capable = true;
            w.expected_duration_s = 3600;
            w.preemptions_last_hour = 0xFFFF_FFFD;
            w.submitted_ms = u64::MAX - 1;
            w.gpu_milli = 375;
        })
        .workload_tenant("stopping", "beta")
        // ABI 1.3: services, one with every field set, and replicas of each variant.
        .service_with("chat", |v| {
            v.class = WorkloadClass::Embeddings;
            v.metric = airtime_policy_sdk::abi::LoadMetric::ConcurrentRequests;
            v.min_replicas = 2;
            v.max_replicas = 0xFFFF_FFFE;
            v.capacity = 15.5;
            v.cpu_capacity = 4.25;
            v.demand = 1.0e-3;
            v.latest = -0.0;
            v.desired_gpu = 3;
            v.desired_cpu = 4;
            v.placed_gpu = 5;
            v.placed_cpu = 6;
            v.pending_gpu = 7;
            v.pending_cpu = 8;
            v.gpu_milli_per_replica = 250;
            v.has_cpu_variant = true;
            v.draining = true;
            v.stale = true;
        })
        .service_with("future", |v| v.metric = airtime_policy_sdk::abi::LoadMetric::Unknown(9))
        .service_tenant("chat", "beta")
        .replica_of("stopping", "chat", airtime_policy_sdk::abi::ReplicaVariant::Cpu)
        .pending("replica", 1, 1024)
        .replica_of("replica", "future", airtime_policy_sdk::abi::ReplicaVariant::Gpu)
        .edit(|doc| doc.workloads[0].replica_variant = airtime_policy_sdk::abi::ReplicaVariant::Unknown(7))
        .scope_tenant("beta")
        // ABI 1.9: the week's arrivals.
        .edit(|doc| {
            doc.arrivals = vec![
                airtime_policy_sdk::owned::OwnedArrival {
                    gpu_milli: 250,
                    gpu_count: 1,
                    cpu_millis: 4000,
                    count: 0xFFFF_FFFE,
                    gpu_models: String::new(),
                },
                airtime_policy_sdk::owned::OwnedArrival {
                    gpu_milli: 1000,
                    gpu_count: 8,
                    cpu_millis: 64_000,
                    count: 3,
                    gpu_models: "H100, A100".to_owned(),
                },
            ]
        })
}

/// `bytes` re-laid with every table's stride `extra` bytes larger (a later minor version's records,
/// the extra bytes junk) and the string heap moved after them: what a reader that steps by stride
/// and skips bytes it does not know must read as before.
fn widen_strides(bytes: &[u8], extra: u32) -> Vec<u8> {
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
    let put = |b: &mut Vec<u8>, at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_le_bytes());
    // (header offset of the table, string fields in its records)
    let tables: [(usize, &[usize]); 7] =
        [(16, &[0]), (28, &[0]), (40, &[8, 56]), (52, &[0, 8, 40, 92]), (64, &[]), (88, &[0]), (104, &[16])];
    let records: u32 = tables.iter().map(|&(at, _)| u32_at(bytes, at + 4)).sum();
    let heap_start =
        tables.iter().map(|&(at, _)| u32_at(bytes, at) + u32_at(bytes, at + 4) * u32_at(bytes, at + 8)).max();
    let heap_start = heap_start.unwrap_or(120) as usize;
    let shift = records * extra;
    let moved = |offset: u32, len: u32| if len == 0 { offset } else { offset + shift };
    let mut out = bytes[..120].to_vec();
    let params = (u32_at(bytes, 76), u32_at(bytes, 80));
    put(&mut out, 76, moved(params.0, params.1));
    for (at, strings) in tables {
        let (offset, count, stride) = (u32_at(bytes, at), u32_at(bytes, at + 4), u32_at(bytes, at + 8));
        let start = out.len() as u32;
        put(&mut out, at, start);
        put(&mut out, at + 8, stride + extra);
        for r in 0..count {
            let start = (offset + r * stride) as usize;
            let mut record = bytes[start..start + stride as usize].to_vec();
            for &field in strings {
                let (o, l) = (u32_at(&record, field), u32_at(&record, field + 4));
                put(&mut record, field, moved(o, l));
            }
            record.extend(std::iter::repeat_n(0xA5, extra as usize));
            out.extend_from_slice(&record);
        }
    }
    assert_eq!(out.len(), heap_start + shift as usize);
    out.extend_from_slice(&bytes[heap_start..]);
    out
}

/// Runs the echo module on `bytes` and returns its lines; `None` when skipped.
fn echo(bytes: &[u8]) -> Option<Vec<String>> {
    let module = match c_abi_echo() {
        Ok(module) => module,
        Err(skip) => {
            eprintln!("{skip}");
            return None;
        }
    };
    let policy = runtime().compile(module).expect("the echo module passes the upload checks");
    let evaluation = runtime()
        .evaluate(EvaluationRequest::new(&policy, bytes, &PolicyLimits::default()))
        .into_result()
        .expect("the echo module evaluates");
    let decisions = evaluation.decisions().expect("its decision buffer decodes");
    Some(decisions.iter().map(|d| d.reason.to_string()).collect())
}

#[test]
fn the_c_header_reads_every_field_as_the_sdk_decodes_it() {
    for fixture in [every_field(), small_fleet(), SnapshotFixture::synthetic_fleet(6, 4, 40, 5)] {
        let bytes = fixture.encode();
        let Some(lines) = echo(&bytes) else { return };
        assert_eq!(lines, echo_lines(&decode_snapshot(&bytes).expect("valid"), 0));
    }
}

#[test]
fn the_c_header_steps_by_stride_and_skips_fields_it_does_not_know() {
    let fixture = every_field();
    let bytes = fixture.encode();
    let wide = widen_strides(&bytes, 8);
    let snapshot = decode_snapshot(&bytes).expect("valid");
    let wide_snapshot = decode_snapshot(&wide).expect("the SDK reads the wider records");
    assert_eq!(wide_snapshot, snapshot);
    let Some(lines) = echo(&wide) else { return };
    assert_eq!(lines, echo_lines(&snapshot, 8));

    // And the first fit decides on the wider records as on the originals.
    let Ok(module) = c_first_fit() else { return };
    let policy = runtime().compile(module).expect("compiles");
    let small = small_fleet().encode();
    let narrow = runtime()
        .evaluate(EvaluationRequest::new(&policy, &small, &PolicyLimits::default()))
        .into_result()
        .expect("evaluates");
    let wide = runtime()
        .evaluate(EvaluationRequest::new(&policy, &widen_strides(&small, 12), &PolicyLimits::default()))
        .into_result()
        .expect("evaluates");
    assert_eq!(wide.decisions().expect("decodes"), narrow.decisions().expect("decodes"));
}
