//! GPU sharing on the node, against the fake control plane: real HTTP, real child processes,
//! simulated GPUs in each sharing mode (`--gpu-sharing`, `--mig-layout`).

mod support;

use airtime_node_agent::protocol::{GpuSharing, ShareSample};
use serde_json::json;
use uuid::Uuid;

use support::{TestResult, WRITE_ENV_AND_SLEEP, child_env, run, start_agent, start_fake};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simulated_mig_node_registers_one_device_per_instance_and_runs_on_one() -> TestResult {
    let (cp, url) = start_fake().await?;
    let dir = tempfile::tempdir()?;
    let agent = start_agent(
        &url,
        dir.path(),
        &["--simulate-gpus", "1:H100:81920", "--gpu-sharing", "mig", "--mig-layout", "3g.40gb,2g.20gb,1g.10gb,1g.10gb"],
    )?;

    let registration = cp.wait_for("registration", |cp| cp.recorded().registrations.first().cloned()).await;
    // As the control plane receives them: one device per instance, with its profile and parent.
    let instance = |slot: u32, profile: &str, memory_mb: u64| {
        json!({"index": slot, "uuid": format!("MIG-SIM-test-node-0-{slot}"), "model": "H100",
               "memory_mb": memory_mb, "nvlink_group": null, "simulated": true, "sharing": "mig",
               "mig_profile": profile, "parent_index": 0})
    };
    assert_eq!(
        serde_json::to_value(&registration.gpus)?,
        json!([
            instance(0, "3g.40gb", 40960),
            instance(1, "2g.20gb", 20480),
            instance(2, "1g.10gb", 10240),
            instance(3, "1g.10gb", 10240),
        ])
    );
    assert!(registration.gpus.iter().all(|g| g.simulated && g.sharing_note.is_none()));
    assert_eq!(airtime_protocol::agent::check_registration(&registration), Ok(()));

    // A workload placed on slot 2 sees that MIG instance, by its uuid.
    let workload = Uuid::new_v4();
    let out = dir.path().join("mig.env");
    let mut assignment = run(workload, WRITE_ENV_AND_SLEEP, &[2], 1000);
    assignment.env.insert("OUT_FILE".into(), out.display().to_string());
    cp.set_desired(vec![assignment]);
    let env = child_env(&cp, &out).await;
    assert_eq!(env.get("CUDA_VISIBLE_DEVICES").map(String::as_str), Some("MIG-SIM-test-node-0-2"));
    assert_eq!(env.get("AIRTIME_GPU_SHARING").map(String::as_str), Some("mig"));
    assert_eq!(env.get("AIRTIME_GPU_MILLI").map(String::as_str), Some("1000"));

    // Its instance reads busy, the others idle.
    cp.wait_for("the instance busy in telemetry", |cp| {
        cp.recorded().telemetry.iter().rev().find_map(|t| {
            let busy = t.gpus.iter().find(|g| g.index == 2)?.util? > 0.9;
            let idle = t.gpus.iter().filter(|g| g.index != 2).all(|g| g.util == Some(0.0));
            (busy && idle && t.shares.len() == 1 && t.shares[0].workload_id == workload).then_some(())
        })
    })
    .await;
    agent.shut_down().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mps_share_runs_a_real_child_with_its_share_of_the_gpu() -> TestResult {
    let (cp, url) = start_fake().await?;
    let dir = tempfile::tempdir()?;
    let agent = start_agent(&url, dir.path(), &["--simulate-gpus", "2:H100:81920", "--gpu-sharing", "mps"])?;
    let registration = cp.wait_for("registration", |cp| cp.recorded().registrations.first().cloned()).await;
    let modes: Vec<(u32, GpuSharing, bool)> =
        registration.gpus.iter().map(|g| (g.index, g.sharing, g.mig_profile.is_none())).collect();
    assert_eq!(modes, vec![(0, GpuSharing::Mps, true), (1, GpuSharing::Mps, true)]);
    assert!(registration.gpus.iter().all(|g| g.sharing_note.is_none()), "simulated MPS needs no daemon");

    let workload = Uuid::new_v4();
    let out = dir.path().join("mps.env");
    let mut share = run(workload, WRITE_ENV_AND_SLEEP, &[1], 1000);
    share.gpu_milli = Some(250);
    share.gpu_memory_mb = Some(20480);
    share.env.insert("OUT_FILE".into(), out.display().to_string());
    // The assignment's env cannot give it more of the GPU than its share.
    share.env.insert("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".into(), "100".into());
    share.env.insert("CUDA_VISIBLE_DEVICES".into(), "0,1".into());
    cp.set_desired(vec![share]);
    let env = child_env(&cp, &out).await;
    let get = |key: &str| env.get(key).map(String::as_str);
    assert_eq!(get("CUDA_VISIBLE_DEVICES"), Some("1"));
    assert_eq!(get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), Some("25"));
    assert_eq!(get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), Some("0=20480M"));
    assert_eq!(get("AIRTIME_GPU_MILLI"), Some("250"));
    assert_eq!(get("AIRTIME_GPU_SHARING"), Some("mps"));
    assert_eq!(get("MODEL"), Some("llama"));
    // Simulated MPS starts no daemon, so there is no pipe directory to join.
    assert_eq!(get("CUDA_MPS_PIPE_DIRECTORY"), None);
    let started = cp.wait_for_event(workload, "started").await;
    assert_eq!(started["attempt"], 1);
    agent.shut_down().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_quarter_shares_of_a_simulated_mps_gpu_report_two_share_samples() -> TestResult {
    let (cp, url) = start_fake().await?;
    let dir = tempfile::tempdir()?;
    let agent = start_agent(
        &url,
        dir.path(),
        &["--simulate-gpus", "1:H100:81920", "--gpu-sharing", "mps", "--heartbeat-ms", "100"],
    )?;
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let quarter = |id: Uuid, memory_mb: Option<u64>| {
        let mut share = run(id, "exec sleep 30", &[0], 1000);
        share.gpu_milli = Some(250);
        share.gpu_memory_mb = memory_mb;
        share
    };
    cp.set_desired(vec![quarter(a, Some(20480)), quarter(b, Some(10240))]);
    cp.wait_for_event(a, "started").await;
    cp.wait_for_event(b, "started").await;

    let report = cp
        .wait_for("a report with both shares", |cp| {
            cp.recorded().telemetry.iter().rev().find(|t| t.shares.len() == 2).cloned()
        })
        .await;
    let gpu_util = report.gpus.first().and_then(|g| g.util).ok_or("GPU 0 has no utilisation")?;
    // Half of the 0.92..0.98 busy level.
    assert!((0.45..=0.5).contains(&gpu_util), "{gpu_util}");
    let share_of = |id: Uuid| report.shares.iter().find(|s| s.workload_id == id).cloned();
    let (Some(share_a), Some(share_b)) = (share_of(a), share_of(b)) else {
        return Err(format!("both workloads' shares: {:?}", report.shares).into());
    };
    for share in [&share_a, &share_b] {
        let util = share.util.ok_or("a share without utilisation")?;
        assert!((util * 2.0 - gpu_util).abs() < 1e-3, "{share:?} is half of {gpu_util}");
        assert_eq!(share.gpu_index, 0);
    }
    assert_eq!(share_a.memory_used_mb, Some(20480));
    assert_eq!(share_b.memory_used_mb, Some(10240));
    assert_eq!(report.gpus[0].memory_used_mb, Some(30720));
    assert_eq!(airtime_protocol::agent::check_telemetry(&report), Ok(()));

    // When one share ends, only the other is reported.
    cp.set_desired(vec![quarter(b, Some(10240))]);
    cp.wait_for_event(a, "exited").await;
    let reports_before = cp.recorded().telemetry.len();
    let after: Vec<ShareSample> = cp
        .wait_for("a report with one share", |cp| {
            let recorded = cp.recorded();
            recorded.telemetry[reports_before..].iter().find(|t| t.shares.len() == 1).map(|t| t.shares.clone())
        })
        .await;
    assert_eq!(after[0].workload_id, b);
    agent.shut_down().await?;
    Ok(())
}
