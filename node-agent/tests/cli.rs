//! The `airtime-node-agent` binary: environment variables, NVML absence, signals, and a
//! restart after the agent was killed.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use uuid::Uuid;

use support::{TestResult, run, start_fake};

fn agent() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_airtime-node-agent"));
    // Only what each test sets, whatever the environment running the tests holds.
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("AIRTIME_") {
            command.env_remove(key);
        }
    }
    command.env("RUST_LOG", "info");
    command
}

#[test]
fn a_bad_simulate_gpus_variable_is_refused_with_a_precise_error() -> TestResult {
    let output = agent()
        .env("AIRTIME_CONTROL_PLANE", "http://127.0.0.1:1")
        .env("AIRTIME_SIMULATE_GPUS", "8:H100-SXM")
        .output()?;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--simulate-gpus"), "{stderr}");
    assert!(stderr.contains("expected COUNT:MODEL:MEMORY_MIB (e.g. 8:H100-SXM:81920), got 2 field(s)"), "{stderr}");
    Ok(())
}

#[test]
fn a_bad_mig_layout_is_refused_with_a_precise_message() -> TestResult {
    let output = agent()
        .args(["--control-plane", "http://127.0.0.1:1", "--simulate-gpus", "1:H100:81920"])
        .args(["--gpu-sharing", "mig", "--mig-layout", "4g.40gb,4g.40gb"])
        .output()?;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--mig-layout 4g.40gb,4g.40gb: the compute slices add up to 8, more than the 7 of a GPU"),
        "{stderr}"
    );

    let output = agent()
        .env("AIRTIME_CONTROL_PLANE", "http://127.0.0.1:1")
        .env("AIRTIME_SIMULATE_GPUS", "1:A100:40960")
        .env("AIRTIME_GPU_SHARING", "mig")
        .env("AIRTIME_MIG_LAYOUT", "3g.40gb,2g.20gb")
        .output()?;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "its instances need 61440 MiB (60 GB × 1024 MiB), more than the 40960 MiB of each simulated A100 GPU"
        ),
        "{stderr}"
    );
    Ok(())
}

/// The flags the control plane's own tests start agents with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_registers_a_shared_node_from_its_flags() -> TestResult {
    let (cp, url) = start_fake().await?;
    let work_dir = tempfile::tempdir()?;
    let runs = [
        ("mps-node", &["--gpu-sharing", "mps"][..]),
        ("mig-node", &["--gpu-sharing", "mig", "--mig-layout", "3g.40gb,2g.20gb,1g.10gb,1g.10gb"][..]),
    ];
    for (name, sharing) in runs {
        let mut agent = tokio::process::Command::from(agent())
            .args(["--control-plane", &url, "--name", name, "--no-nvml", "--simulate-gpus", "1:H100:81920"])
            .args(sharing)
            .args(["--enrolment-token", support::ENROLMENT_TOKEN])
            .arg("--state-dir")
            .arg(work_dir.path().join(name))
            .arg("--work-dir")
            .arg(work_dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let registration = cp
            .wait_for("the registration", |cp| cp.recorded().registrations.iter().find(|r| r.name == name).cloned())
            .await;
        let modes: Vec<String> = registration.gpus.iter().map(|g| g.sharing.to_string()).collect();
        if name == "mps-node" {
            assert_eq!(modes, vec!["mps"]);
        } else {
            assert_eq!(modes, vec!["mig"; 4]);
        }
        kill(Pid::from_raw(i32::try_from(agent.id().ok_or("no pid")?)?), Signal::SIGTERM)?;
        let status = tokio::time::timeout(Duration::from_secs(15), agent.wait()).await??;
        assert!(status.success(), "{status}");
    }
    Ok(())
}

/// An agent configured through its environment (the enrolment token a secret among it) starts
/// workloads without that environment: a workload sees only the AIRTIME_ variables set for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_never_sees_the_agents_enrolment_token_or_configuration() -> TestResult {
    let (cp, url) = start_fake().await?;
    let work_dir = tempfile::tempdir()?;
    let mut agent = tokio::process::Command::from(agent())
        .env("AIRTIME_CONTROL_PLANE", &url)
        .env("AIRTIME_NODE_NAME", "env-test")
        .env("AIRTIME_NO_NVML", "true")
        .env("AIRTIME_ENROLMENT_TOKEN", support::ENROLMENT_TOKEN)
        .env("AIRTIME_STATE_DIR", work_dir.path().join("state"))
        .env("AIRTIME_WORK_DIR", work_dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let workload = Uuid::new_v4();
    let out = work_dir.path().join("env.txt");
    cp.set_desired(vec![run(workload, &format!("env > {}", out.display()), &[], 1000)]);
    cp.wait_for_event(workload, "exited").await;
    let env = std::fs::read_to_string(&out)?;
    assert!(!env.contains(support::ENROLMENT_TOKEN), "the token leaked into the workload: {env}");
    let airtime: Vec<&str> =
        env.lines().filter(|l| l.starts_with("AIRTIME_")).map(|l| l.split('=').next().unwrap_or(l)).collect();
    for leaked in ["AIRTIME_ENROLMENT_TOKEN", "AIRTIME_CONTROL_PLANE", "AIRTIME_STATE_DIR", "AIRTIME_WORK_DIR"] {
        assert!(!airtime.contains(&leaked), "{leaked} reached the workload: {airtime:?}");
    }
    assert!(airtime.contains(&"AIRTIME_WORKLOAD_ID") && airtime.contains(&"AIRTIME_NODE_NAME"), "{airtime:?}");
    kill(Pid::from_raw(i32::try_from(agent.id().ok_or("no pid")?)?), Signal::SIGTERM)?;
    let status = tokio::time::timeout(Duration::from_secs(15), agent.wait()).await??;
    assert!(status.success(), "{status}");
    Ok(())
}

#[test]
fn the_control_plane_is_required() -> TestResult {
    let output = agent().output()?;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--control-plane"), "{stderr}");
    Ok(())
}

/// With no control plane to answer, the agent keeps trying to register, says how it reads GPUs,
/// and exits cleanly on SIGTERM.
#[test]
fn waits_for_the_control_plane_and_stops_on_sigterm() -> TestResult {
    let work_dir = tempfile::tempdir()?;
    let mut child = agent()
        .env("AIRTIME_CONTROL_PLANE", "http://127.0.0.1:1")
        .env("AIRTIME_NODE_NAME", "cli-test")
        .env("AIRTIME_LABELS", "zone=a,rack=r1")
        .env("AIRTIME_WORK_DIR", work_dir.path())
        .env("AIRTIME_STATE_DIR", work_dir.path().join("state"))
        .env("AIRTIME_ENROLMENT_TOKEN", support::ENROLMENT_TOKEN)
        .env("AIRTIME_LOG_FORMAT", "json")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let (lines_tx, lines_rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });

    let mut log = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !log.iter().any(|l: &String| l.contains("cannot register yet")) {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines_rx.recv_timeout(left) {
            Ok(line) => log.push(line),
            Err(_) => {
                let _ = child.kill();
                return Err(format!("no registration attempt logged:\n{}", log.join("\n")).into());
            }
        }
    }
    for line in &log {
        // Every record is JSON with --log-format json.
        serde_json::from_str::<serde_json::Value>(line)?;
    }
    let all = log.join("\n");
    assert!(all.contains("\"name\":\"cli-test\""), "{all}");
    assert!(!all.contains(support::ENROLMENT_TOKEN), "the enrolment token must never be logged");
    // This test machine may or may not have NVIDIA GPUs; either way the agent says which.
    assert!(
        all.contains("NVML not available (") && all.contains("); running as a CPU node") || all.contains("NVML loaded"),
        "{all}"
    );

    kill(Pid::from_raw(i32::try_from(child.id())?), Signal::SIGTERM)?;
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err("the agent did not exit after SIGTERM".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    Ok(())
}

/// An agent killed with SIGKILL cannot stop its workloads, and need not: their tethers keep them
/// (here regardless of the lease, `--on-lost-contact keep`). The next agent for the node adopts
/// them: it lists the attempt as running when it registers, reports it started again (the same
/// process), never starts it a second time, and stops it like its own once it is no longer
/// wanted. (An agent that stays down: `tests/tests/agent_restarts.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_adopts_what_a_killed_one_left_running() -> TestResult {
    let (cp, url) = start_fake().await?;
    let work_dir = tempfile::tempdir()?;
    let name = format!("crash-test-{}", Uuid::new_v4());
    let spawn_agent = || {
        let mut command = tokio::process::Command::from(agent());
        command
            .args(["--control-plane", &url, "--name", &name, "--no-nvml", "--on-lost-contact", "keep"])
            .args(["--enrolment-token", support::ENROLMENT_TOKEN])
            .arg("--state-dir")
            .arg(work_dir.path().join("state"))
            .arg("--work-dir")
            .arg(work_dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        command.spawn()
    };

    let mut first = spawn_agent()?;
    let workload = Uuid::new_v4();
    cp.set_desired(vec![run(workload, "exec sleep 30", &[], 1000)]);
    let started = cp.wait_for_event(workload, "started").await;
    let pid = i32::try_from(started["pid"].as_u64().ok_or("no pid")?)?;

    first.start_kill()?;
    first.wait().await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(alive(pid), "the workload should outlive a SIGKILLed agent");

    let mut second = spawn_agent()?;
    // The restarted agent reads back its stored credential: one enrolment in all.
    cp.wait_for("the second registration", |cp| (cp.recorded().registrations.len() >= 2).then_some(())).await;
    let registered = cp.recorded().registrations[1].clone();
    assert_eq!(
        registered.running.iter().map(|a| (a.workload_id, a.attempt)).collect::<Vec<_>>(),
        [(workload, 1)],
        "it says it runs the adopted attempt"
    );
    // The desired state still lists attempt 1: it is adopted, reported started (the same
    // process), and never started twice.
    cp.wait_for("the adopted attempt reported", |cp| {
        (cp.events_of(workload).iter().filter(|e| e["event"] == "started").count() == 2).then_some(())
    })
    .await;
    let events = cp.events_of(workload);
    assert!(events.iter().filter(|e| e["event"] == "started").all(|e| e["pid"] == pid), "{events:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(alive(pid), "the adopted workload runs on");
    assert_eq!(cp.events_of(workload).iter().filter(|e| e["event"] == "started").count(), 2);
    // No longer wanted, it is stopped as the agent's own work is.
    cp.set_desired(vec![]);
    let exited = cp.wait_for_event(workload, "exited").await;
    assert_eq!(exited["message"], "stopped: no longer assigned to this node", "{exited}");
    assert!(!alive(pid), "the adopted workload is still running");
    assert_eq!(cp.recorded().enrolments, 1, "the second agent reused the stored credential");
    assert_eq!(cp.recorded().unauthorized, 0, "every call carried the credential");

    kill(Pid::from_raw(i32::try_from(second.id().ok_or("no pid")?)?), Signal::SIGTERM)?;
    let status = tokio::time::timeout(Duration::from_secs(15), second.wait()).await??;
    assert!(status.success(), "{status}");
    Ok(())
}

/// Without a stored credential or an enrolment token, the agent says how to enrol and exits.
#[test]
fn an_agent_without_a_credential_says_how_to_enrol() -> TestResult {
    let dir = tempfile::tempdir()?;
    let output = agent()
        .args(["--control-plane", "http://127.0.0.1:1", "--name", "n", "--no-nvml"])
        .arg("--state-dir")
        .arg(dir.path())
        .arg("--work-dir")
        .arg(dir.path())
        .output()?;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--enrolment-token"), "{stderr}");
    Ok(())
}

/// A refused enrolment token stops the agent with a message saying what to do, and is never logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_enrolment_token_stops_the_agent() -> TestResult {
    let (cp, url) = start_fake().await?;
    let dir = tempfile::tempdir()?;
    let output = tokio::process::Command::from(agent())
        .args(["--control-plane", &url, "--name", "n", "--no-nvml"])
        .args(["--enrolment-token", "et_not-the-right-one"])
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("--work-dir")
        .arg(dir.path())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(20), output).await??;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("refused the enrolment token"), "{stderr}");
    assert!(!stderr.contains("et_not-the-right-one"), "{stderr}");
    assert_eq!(cp.recorded().enrolments, 0);
    assert!(cp.recorded().registrations.is_empty());
    assert!(!dir.path().join("state/node-credential").exists());
    Ok(())
}

/// Running and not a zombie.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z')))
}
