//! Container workloads, story by story: a real control plane, real agents and a real container
//! engine (Debian's Podman, installed by `scripts/prerequisites.sh --for-tests`), with an image
//! built in the test from the host's `busybox-static` (no registry is reachable here). Podman runs
//! with `runc` and the `cgroupfs` manager, given as the agent's `--container-engine-arg`s, and a
//! `containers.conf` with `default_ulimits = []` (this machine's cgroups v1 layout refuses crun and
//! the default ulimits).

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use airtime_tests::{Api, ControlPlane, NodeAgent, eventually, fresh_control_plane, nodes_ready, workload_reaches};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(90);
const IMAGE: &str = "localhost/airtime-test-busybox:1";
const ENGINE_ARGS: [&str; 2] =
    ["--container-engine-arg=--runtime=runc", "--container-engine-arg=--cgroup-manager=cgroupfs"];

/// The containers.conf the engine runs with, written once.
fn containers_conf() -> PathBuf {
    let path = std::env::temp_dir().join("airtime-tests-containers.conf");
    if !path.exists() {
        let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
        std::fs::write(&tmp, "[containers]\ndefault_ulimits = []\n").unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    }
    path
}

/// Runs Podman as the agent does; panics with its stderr when it fails.
fn podman(args: &[&str]) -> String {
    let out = std::process::Command::new("podman")
        .args(["--runtime=runc", "--cgroup-manager=cgroupfs"])
        .args(args)
        .env("CONTAINERS_CONF", containers_conf())
        .output()
        .unwrap_or_else(|e| {
            panic!("podman is not installed ({e}): run scripts/prerequisites.sh --for-tests (Debian's podman, runc, busybox-static)")
        });
    assert!(out.status.success(), "podman {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The test image: a root filesystem of busybox's applets, imported once per test process.
fn test_image() -> &'static str {
    static BUILT: Mutex<bool> = Mutex::new(false);
    let mut built = BUILT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if !*built {
        let busybox = ["/bin/busybox", "/usr/bin/busybox"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.exists())
            .expect("busybox is not installed: run scripts/prerequisites.sh --for-tests (Debian's busybox-static)");
        let root = tempfile::tempdir().unwrap();
        let bin = root.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::copy(busybox, bin.join("busybox")).unwrap();
        let applets = std::process::Command::new(busybox).arg("--list").output().unwrap();
        for applet in String::from_utf8_lossy(&applets.stdout).lines().filter(|a| !a.is_empty() && *a != "busybox") {
            std::os::unix::fs::symlink("busybox", bin.join(applet)).unwrap();
        }
        for dir in ["tmp", "etc", "proc", "sys", "dev"] {
            std::fs::create_dir_all(root.path().join(dir)).unwrap();
        }
        let tar = root.path().with_extension("tar");
        let status = std::process::Command::new("tar")
            .arg("-C")
            .arg(root.path())
            .arg("-cf")
            .arg(&tar)
            .arg(".")
            .status()
            .unwrap();
        assert!(status.success());
        podman(&["import", "--change", "CMD [\"/bin/sh\"]", tar.to_str().unwrap(), IMAGE]);
        let _ = std::fs::remove_file(tar);
        *built = true;
    }
    IMAGE
}

/// An agent with Podman as its container engine. The stories run at once against one engine, and an
/// agent ends what an earlier agent *of its node name* left, so each story names its node uniquely.
async fn container_agent(cp: &ControlPlane, name: &str, extra: &[&str]) -> NodeAgent {
    test_image();
    let conf = containers_conf();
    let mut args = vec!["--no-nvml", "--container-engine", "podman", "--container-pull", "never"];
    args.extend(ENGINE_ARGS);
    args.extend(extra);
    NodeAgent::start_with_env(cp, name, &args, &[("CONTAINERS_CONF", conf.to_str().unwrap())]).await.unwrap()
}

async fn submit_container(api: &Api, name: &str, image: &str, script: &str, grace_extra: Value) -> String {
    let mut body = json!({
        "name": name, "class": "evaluation", "command": ["-c", script],
        "container": {"image": image, "entrypoint": ["/bin/sh"]},
        "resources": {"gpu_count": 0, "cpu_millis": 500, "memory_mb": 128}
    });
    if let (Some(b), Some(extra)) = (body.as_object_mut(), grace_extra.as_object()) {
        b.extend(extra.clone());
    }
    api.created("/api/v1/workloads", &body).await.unwrap()["id"].as_str().unwrap().to_owned()
}

fn texts(logs: &Value) -> Vec<String> {
    logs["lines"].as_array().unwrap().iter().map(|l| l["text"].as_str().unwrap().to_owned()).collect()
}

async fn logs_with(api: &Api, id: &str, line: &str) -> Vec<String> {
    eventually(&format!("the line {line:?} in the logs"), WAIT, || {
        let (api, path, line) = (api.clone(), format!("/api/v1/workloads/{id}/logs"), line.to_owned());
        async move {
            let lines = texts(&api.ok(&path).await?);
            Ok(lines.contains(&line).then_some(lines))
        }
    })
    .await
    .unwrap()
}

/// Containers of a workload on this host (any attempt), by the labels the agent sets.
fn containers_of(id: &str) -> Vec<String> {
    podman(&["ps", "--all", "--filter", &format!("label=airtime.workload={id}"), "--format", "{{.Names}}"])
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_job_runs_in_its_image_within_its_limits_and_only_where_an_engine_is() {
    let (_db, cp) = fresh_control_plane(&[]).await.unwrap();
    let api = cp.api();
    // A node without an engine comes first in name order; the container work must skip it.
    let _bare = NodeAgent::start(&cp, "a-bare", &["--no-nvml", "--container-engine", "none"]).await.unwrap();
    let _engine = container_agent(&cp, "b-podman", &[]).await;
    let nodes = nodes_ready(&api, 2).await.unwrap();
    let engine_of =
        |name: &str| nodes.as_array().unwrap().iter().find(|n| n["name"] == name).unwrap()["container_engine"].clone();
    assert_eq!(engine_of("a-bare"), Value::Null);
    assert_eq!(engine_of("b-podman")["kind"], "podman", "{nodes}");

    let image = test_image();
    let id = submit_container(
        &api,
        "eval-in-a-box",
        image,
        "echo hello from the image; echo \"gpus=[$NVIDIA_VISIBLE_DEVICES] id=$AIRTIME_WORKLOAD_ID\"; \
         echo mem=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max); \
         echo oops >&2; exit 7",
        json!({}),
    )
    .await;
    let w = workload_reaches(&api, &id, "failed", WAIT).await.unwrap();
    assert_eq!(w["exit_code"], 7, "{w}");
    assert_eq!(w["container"]["image"], image);
    let placed_on = w["last_node_id"].as_str().unwrap().to_owned();
    let podman_node = nodes.as_array().unwrap().iter().find(|n| n["name"] == "b-podman").unwrap()["id"].clone();
    assert_eq!(placed_on, podman_node.as_str().unwrap(), "placed on the node with an engine");

    let lines = logs_with(&api, &id, "oops").await;
    assert!(lines.contains(&"hello from the image".to_owned()), "{lines:?}");
    assert!(lines.contains(&format!("gpus=[void] id={id}")), "{lines:?}");
    // The profile's memory became the container's limit.
    assert!(lines.contains(&format!("mem={}", 128 * 1024 * 1024)), "{lines:?}");
    assert!(containers_of(&id).is_empty(), "the container was removed");

    // An image the node does not have (and may not pull) fails with the engine's reason.
    let missing = submit_container(&api, "no-such-image", "localhost/airtime-no-such-image:1", "true", json!({})).await;
    let w = workload_reaches(&api, &missing, "failed", WAIT).await.unwrap();
    let message = w["message"].as_str().unwrap_or_default();
    assert!(message.contains("could not run the container (exit 125)") && message.contains("image not known"), "{w}");

    // A mount outside what the platform allows is refused at submission, and nothing is queued.
    let refused = api
        .post(
            "/api/v1/workloads",
            &json!({"name": "sneaky", "class": "evaluation", "command": [],
                    "container": {"image": image, "mounts": [{"source": "/etc", "target": "/host-etc"}]},
                    "resources": {"cpu_millis": 100}}),
        )
        .await
        .unwrap();
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert!(refused.body["error"]["message"].as_str().unwrap().contains("allows no host mounts"), "{}", refused.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_the_container_within_its_grace_period() {
    let (_db, cp) = fresh_control_plane(&[]).await.unwrap();
    let api = cp.api();
    let _engine = container_agent(&cp, "cancel-node", &[]).await;
    nodes_ready(&api, 1).await.unwrap();

    // The container's main process saves its work on SIGTERM and exits.
    let id = submit_container(
        &api,
        "checkpointing",
        test_image(),
        "trap 'echo saving checkpoint; exit 0' TERM; echo started; while true; do sleep 0.2; done",
        json!({"checkpointable": true}),
    )
    .await;
    workload_reaches(&api, &id, "running", WAIT).await.unwrap();
    logs_with(&api, &id, "started").await;
    assert_eq!(containers_of(&id).len(), 1, "it runs as one container");

    let asked = Instant::now();
    let answer = api.post(&format!("/api/v1/workloads/{id}/cancel"), &json!({})).await.unwrap();
    assert!(answer.status < 300, "{}", answer.body);
    workload_reaches(&api, &id, "cancelled", WAIT).await.unwrap();
    let took = asked.elapsed();
    let settings = api.ok("/api/v1/settings/priorities").await.unwrap();
    let grace_s = settings["grace_period_s"].as_u64().unwrap();
    assert!(took < Duration::from_secs(grace_s), "stopped in {took:?}, within the {grace_s} s grace period");
    logs_with(&api, &id, "saving checkpoint").await;
    assert!(containers_of(&id).is_empty(), "the container is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_agents_container_is_found_by_label_and_ended_when_it_restarts() {
    let (_db, cp) = fresh_control_plane(&[]).await.unwrap();
    let api = cp.api();
    // Untethered (`--on-lost-contact keep`): this story is the container that outlives its
    // agent and its engine client, which a tether would have stopped with the agent.
    let agent = container_agent(&cp, "crash-node", &["--on-lost-contact", "keep"]).await;
    nodes_ready(&api, 1).await.unwrap();

    let id = submit_container(
        &api,
        "long-eval",
        test_image(),
        "trap 'exit 0' TERM; echo attempt $AIRTIME_ATTEMPT; while true; do sleep 0.2; done",
        json!({}),
    )
    .await;
    workload_reaches(&api, &id, "running", WAIT).await.unwrap();
    logs_with(&api, &id, "attempt 1").await;

    // A crash: the agent dies, and the engine's client with it (an OOM kill of both, say); the
    // container runs on under the engine's monitor.
    agent.kill().await;
    let client = format!("--name=airtime-{id}-1");
    let killed = std::process::Command::new("pkill").args(["-KILL", "-f", "--", &client]).status().unwrap();
    assert!(killed.success(), "the engine's client for attempt 1 was running");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(containers_of(&id), [format!("airtime-{id}-1")], "the container outlived its agent");

    // The restarted agent ends what the dead one left, and the workload runs again, once.
    let _agent = container_agent(&cp, "crash-node", &[]).await;
    logs_with(&api, &id, "attempt 2").await;
    let running = containers_of(&id);
    assert_eq!(running, [format!("airtime-{id}-2")], "only the new attempt's container runs");
    let detail = api.ok(&format!("/api/v1/workloads/{id}")).await.unwrap();
    assert_eq!(detail["state"], "running", "{detail}");
    assert_eq!(detail["attempt"], 2, "{detail}");
    let cancel = api.post(&format!("/api/v1/workloads/{id}/cancel"), &json!({})).await.unwrap();
    assert!(cancel.status < 300, "{}", cancel.body);
    workload_reaches(&api, &id, "cancelled", WAIT).await.unwrap();
    assert!(containers_of(&id).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_100_mb_log_flood_from_a_container_is_capped_and_the_api_stays_responsive() {
    let (db, cp) = fresh_control_plane(&["--log-bytes-per-workload", "1048576"]).await.unwrap();
    let api = cp.api();
    let _engine = container_agent(&cp, "flood-node", &[]).await;
    nodes_ready(&api, 1).await.unwrap();

    let id = submit_container(
        &api,
        "flood",
        test_image(),
        "yes 'a line of output that floods the log, again and again' | head -c 100000000; echo; echo flood over",
        json!({}),
    )
    .await;
    workload_reaches(&api, &id, "running", WAIT).await.unwrap();
    // While it floods, the API answers promptly.
    let mut slowest = Duration::ZERO;
    let began = Instant::now();
    loop {
        let asked = Instant::now();
        let w = api.ok(&format!("/api/v1/workloads/{id}")).await.unwrap();
        slowest = slowest.max(asked.elapsed());
        if w["state"] != "running" || began.elapsed() > WAIT {
            assert_eq!(w["state"], "succeeded", "{w}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(slowest < Duration::from_secs(2), "slowest read during the flood: {slowest:?}");
    let logs = eventually("the flood's last line to be stored", WAIT, || {
        let (api, path) = (api.clone(), format!("/api/v1/workloads/{id}/logs?tail=1"));
        async move {
            let logs = api.ok(&path).await?;
            Ok((texts(&logs) == ["flood over"]).then_some(logs))
        }
    })
    .await
    .unwrap();
    let (stored,): (i64,) =
        sqlx::query_as("SELECT COALESCE(sum(bytes), 0)::bigint FROM workload_logs WHERE workload_id = $1::uuid")
            .bind(&id)
            .fetch_one(&db.pool().await.unwrap())
            .await
            .unwrap();
    assert!(stored <= 1_048_576, "kept {stored} bytes, within the limit");
    assert!(
        logs["dropped_bytes"].as_i64().unwrap() + logs["lost_lines"].as_i64().unwrap() > 0,
        "the flood was capped: {logs}"
    );
    let kept = stored;
    println!("flood: slowest read {slowest:?}, {kept} bytes kept, {logs}");
}

/// A shared library that, loaded into any process, appends that process's name to `marker`: what a
/// tenant's `LD_PRELOAD` would run. Built with the host's `cc`.
fn marker_library(dir: &Path, marker: &Path) -> PathBuf {
    let source = dir.join("marker.c");
    std::fs::write(
        &source,
        format!(
            "#include <fcntl.h>\n#include <string.h>\n#include <unistd.h>\n\
             __attribute__((constructor)) static void mark(void) {{\n\
               char name[256] = {{0}}; int fd = open(\"/proc/self/comm\", O_RDONLY);\n\
               if (fd >= 0) {{ read(fd, name, sizeof name - 1); close(fd); }}\n\
               fd = open(\"{}\", O_WRONLY | O_CREAT | O_APPEND, 0644);\n\
               if (fd >= 0) {{ write(fd, name, strlen(name)); close(fd); }}\n\
             }}\n",
            marker.display()
        ),
    )
    .unwrap();
    let library = dir.join("libmarker.so");
    let status = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&source)
        .status()
        .expect("cc is installed");
    assert!(status.success(), "building the marker library");
    library
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_containers_env_reaches_the_container_and_nothing_on_the_agents_side() {
    let (_db, cp) = fresh_control_plane(&[]).await.unwrap();
    let api = cp.api();
    let agent = container_agent(&cp, "env-node", &[]).await;
    nodes_ready(&api, 1).await.unwrap();

    // A library that marks every process it is loaded into, and a `podman` that marks its own
    // start before running the real one: a tenant's LD_PRELOAD and PATH aimed at the host.
    let host = tempfile::tempdir().unwrap();
    let preloaded = host.path().join("preloaded");
    let library = marker_library(host.path(), &preloaded);
    let evil_bin = host.path().join("bin");
    std::fs::create_dir(&evil_bin).unwrap();
    let path_marker = host.path().join("evil-podman-ran");
    let evil_podman = evil_bin.join("podman");
    std::fs::write(
        &evil_podman,
        format!("#!/bin/sh\necho ran >> {}\nexec /usr/bin/podman \"$@\"\n", path_marker.display()),
    )
    .unwrap();
    std::fs::set_permissions(&evil_podman, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();

    let id = submit_container(
        &api,
        "hostile-env",
        test_image(),
        "echo \"preload=$LD_PRELOAD path=$PATH conf=$CONTAINERS_CONF note=$NOTE\"",
        json!({"env": {"LD_PRELOAD": library.to_str().unwrap(), "PATH": evil_bin.to_str().unwrap(),
                       "CONTAINERS_CONF": "/nonexistent.conf", "NOTE": "a value with spaces = and more"}}),
    )
    .await;
    let w = eventually("the workload to end", WAIT, || {
        let (api, path) = (api.clone(), format!("/api/v1/workloads/{id}"));
        async move {
            let w = api.ok(&path).await?;
            Ok(["succeeded", "failed"].contains(&w["state"].as_str().unwrap_or_default()).then_some(w))
        }
    })
    .await
    .unwrap();
    // No host process the agent started ran the tenant's library or its podman…
    let preloaded_into = std::fs::read_to_string(&preloaded).unwrap_or_default();
    assert!(preloaded_into.is_empty(), "the tenant's LD_PRELOAD ran on the host, in: {preloaded_into:?} ({w})");
    assert!(!path_marker.exists(), "the tenant's PATH chose the podman the agent ran ({w})");
    // …nor did its CONTAINERS_CONF steer the engine: the container ran, with its whole environment.
    assert_eq!(w["state"], "succeeded", "{w}");
    let line = format!(
        "preload={} path={} conf=/nonexistent.conf note=a value with spaces = and more",
        library.display(),
        evil_bin.display()
    );
    logs_with(&api, &id, &line).await;
    // The environment file the engine read is gone with the container.
    let left: Vec<_> = std::fs::read_dir(agent.state_dir().join("run"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "environment files left behind: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_planted_by_one_container_carries_no_other_containers_mount_out_of_the_prefix() {
    let host = tempfile::tempdir().unwrap();
    let allowed = host.path().join("allowed");
    let shared = allowed.join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::write(host.path().join("host-secret"), "the host's own secret\n").unwrap();
    let (_db, cp) = fresh_control_plane(&["--container-mount-prefix", allowed.to_str().unwrap()]).await.unwrap();
    let api = cp.api();
    let _agent = container_agent(&cp, "mount-node", &[]).await;
    nodes_ready(&api, 1).await.unwrap();
    let mounted = |source: &Path, target: &str, read_only: bool| {
        json!({"container": {"image": test_image(), "entrypoint": ["/bin/sh"],
                             "mounts": [{"source": source.to_str().unwrap(), "target": target, "read_only": read_only}]}})
    };

    // The first container has its writable mount, as allowed, and plants a link to the host's /.
    let planter = submit_container(
        &api,
        "planter",
        test_image(),
        "ln -s / /shared/rootlink && echo planted",
        mounted(&shared, "/shared", false),
    )
    .await;
    workload_reaches(&api, &planter, "succeeded", WAIT).await.unwrap();
    assert!(std::fs::symlink_metadata(shared.join("rootlink")).unwrap().file_type().is_symlink());

    // The second mounts the link: the text is under the prefix, what it names is the host's /.
    let secret = host.path().join("host-secret");
    let reader = submit_container(
        &api,
        "reader",
        test_image(),
        &format!("cat /host{}", secret.display()),
        mounted(&shared.join("rootlink"), "/host", true),
    )
    .await;
    let w = workload_reaches(&api, &reader, "failed", WAIT).await;
    let logs = api.ok(&format!("/api/v1/workloads/{reader}/logs")).await.unwrap();
    assert!(!texts(&logs).iter().any(|l| l.contains("the host's own secret")), "the host's file was read: {logs}");
    let w = w.unwrap();
    let message = w["message"].as_str().unwrap_or_default();
    assert!(message.contains("symbolic link") && message.contains("rootlink"), "{w}");

    // A target carrying engine options (`:U` chowns the source, `:O` overlays it) is refused.
    let refused = api
        .post(
            "/api/v1/workloads",
            &json!({"name": "chown-it", "class": "evaluation", "command": [],
                    "container": {"image": test_image(), "mounts": [{"source": shared.to_str().unwrap(), "target": "/data:U"}]},
                    "resources": {"cpu_millis": 100}}),
        )
        .await
        .unwrap();
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert!(refused.body["error"]["message"].as_str().unwrap().contains("':'"), "{}", refused.body);
}
