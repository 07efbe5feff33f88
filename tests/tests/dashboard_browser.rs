//! The dashboard in a real browser: `tests/browser/dashboard.mjs` drives headless Chromium with
//! Playwright (`playwright-core`, from web/node_modules) against the real control plane, a node
//! agent with two simulated GPUs and PostgreSQL started here. The story: sign in (and a wrong
//! password refused); the fleet's GPU tiles; a submitted workload waits with its reason, then runs
//! once the workload holding the GPUs is cancelled from the page, without a reload; its state
//! history and output; a node's page with its GPUs and CPU/memory history, drained (what is left on
//! it shown) and uncordoned from its Maintenance section; a tenant's quota previewed and changed; a
//! priority setting
//! changed and saved; a policy module dropped on the page, uploaded, dry-run, shadowed (a
//! comparison opened to its differences), replayed in a what-if run (both score sets side by side)
//! and activated; an inference service's replicas against demand; an API token created and
//! revoked; the users; and a member of another tenant who sees none of that work, nor the users
//! page.
//! Every page passes axe-core (no serious or critical violation) in light and dark and is saved
//! under target/screenshots/.
//!
//! Needs Node.js with web/node_modules installed (`make web`) and Chromium at /usr/bin/chromium
//! (`apt-get install -y chromium`). Without them this test fails: it does not skip.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use airtime_tests::{ADMIN_EMAIL, ADMIN_PASSWORD, NodeAgent, fresh_control_plane, nodes_ready, workload_reaches};
use serde_json::{Value, json};

const CHROMIUM: &str = "/usr/bin/chromium";
const SHOWN: Duration = Duration::from_secs(30);
/// The whole browser story, all pages in both themes.
const STORY: Duration = Duration::from_secs(420);

fn root() -> PathBuf {
    let tests = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    tests.parent().map(Path::to_path_buf).unwrap_or(tests)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_runs_the_fleet_in_a_real_browser() {
    let web = root().join("web");
    assert!(Path::new(CHROMIUM).exists(), "{CHROMIUM} is missing: apt-get install -y chromium");
    assert!(
        web.join("node_modules/playwright-core").is_dir() && web.join("node_modules/axe-core").is_dir(),
        "web/node_modules has no playwright-core or axe-core: run `make web` (npm ci in web/)"
    );

    let (_db, cp) = fresh_control_plane(&[]).await.unwrap();
    let api = cp.api();
    let agent = NodeAgent::start(&cp, "sim-dash-1", &["--simulate-gpus", "2:H100:81920", "--cost-per-hour", "8"])
        .await
        .unwrap();
    nodes_ready(&api, 1).await.unwrap();

    // A member of team-b, and a team-a workload (too big to ever place) they must never see.
    let member_email = "bo@team-b.test";
    cp.user("team-b", member_email, "tenant_member").await.unwrap();
    cp.user("team-a", "al@team-a.test", "tenant_admin").await.unwrap();
    let hidden = api
        .created(
            "/api/v1/workloads",
            &json!({"name": "team-a-secret-training", "class": "training", "tenant": "team-a",
                    "resources": {"gpu_count": 8}, "command": ["true"]}),
        )
        .await
        .unwrap();
    // Holds both GPUs until the page cancels it, so the page's submission waits first.
    let hog = api
        .created(
            "/api/v1/workloads",
            &json!({"name": "dash-gpu-hog", "class": "training", "priority": 50,
                    "resources": {"gpu_count": 2}, "command": ["sleep", "600"]}),
        )
        .await
        .unwrap();
    workload_reaches(&api, hog["id"].as_str().unwrap(), "running", SHOWN).await.unwrap();

    // An inference service of CPU replicas that scaled up once for reported load (3 replicas'
    // worth, at most 3), for the services pages.
    let service = api
        .created(
            "/api/v1/services",
            &json!({"name": "dash-chat", "class": "realtime_inference", "capacity": 10.0,
                    "min_replicas": 1, "max_replicas": 3,
                    "behavior": {"scale_up_window_s": 0, "scale_down_window_s": 600, "stale_after_s": 600},
                    "replica": {"command": ["sleep", "600"], "resources": {"gpu_count": 0, "cpu_millis": 10}}}),
        )
        .await
        .unwrap();
    let service_id = service["id"].as_str().unwrap().to_owned();
    let load =
        api.post(&format!("/api/v1/services/{service_id}/load"), &json!({"requests_per_s": 25.0})).await.unwrap();
    assert!(load.status < 300, "{} {}", load.status, load.body);
    airtime_tests::eventually("the service scaled to 3 replicas", SHOWN, || {
        let (api, path) = (api.clone(), format!("/api/v1/services/{service_id}"));
        async move {
            let s = api.ok(&path).await?;
            let wanted =
                s["desired_gpu_replicas"].as_i64().unwrap_or(0) + s["desired_cpu_replicas"].as_i64().unwrap_or(0);
            Ok((wanted == 3).then_some(()))
        }
    })
    .await
    .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let wasm = dir.path().join("browser-policy.wasm");
    std::fs::write(&wasm, airtime_builtin_policies::TEMPLATE).unwrap();
    let shots = root().join("target/screenshots");

    let started = Instant::now();
    let mut script = tokio::process::Command::new("node");
    script
        .arg(root().join("tests/browser/dashboard.mjs"))
        .env("AIRTIME_URL", &cp.url)
        .env("ADMIN_EMAIL", ADMIN_EMAIL)
        .env("ADMIN_PASSWORD", ADMIN_PASSWORD)
        .env("MEMBER_EMAIL", member_email)
        .env("MEMBER_PASSWORD", format!("{member_email} long password"))
        .env("HIDDEN_WORKLOAD", "team-a-secret-training")
        .env("HOG_WORKLOAD", "dash-gpu-hog")
        .env("SERVICE", "dash-chat")
        .env("POLICY_WASM", &wasm)
        .env("SCREENSHOT_DIR", &shots)
        .env("WEB_DIR", &web)
        .env("CHROMIUM", CHROMIUM)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let run = tokio::time::timeout(STORY, script.status()).await;
    let status = match run {
        Ok(status) => status.expect("starting node (is Node.js installed? see scripts/prerequisites.sh)"),
        Err(_) => panic!("the browser story ran past {STORY:?}; screenshots so far in {}", shots.display()),
    };
    assert!(status.success(), "the browser story failed ({status}); see its output above and {}", shots.display());
    eprintln!(
        "dashboard story in the browser: {:.1} s; screenshots in {}",
        started.elapsed().as_secs_f64(),
        shots.display()
    );

    // What the page did, as the API sees it: the setting saved, the policy active, the hog cancelled.
    let priorities = api.ok("/api/v1/settings/priorities").await.unwrap();
    assert_eq!(priorities["burst_reserve_gpus"], 1, "{priorities}");
    let policies = api.ok("/api/v1/policies").await.unwrap();
    let uploaded = policies.as_array().unwrap().iter().find(|p| p["name"] == "browser-policy").unwrap();
    assert_eq!(uploaded["active_version"], 1, "{uploaded}");
    let team_b = api.ok("/api/v1/tenants").await.unwrap();
    let team_b = team_b.as_array().unwrap().iter().find(|t| t["name"] == "team-b").unwrap();
    assert_eq!(team_b["guaranteed_gpus"], 1, "the page's quota change did not land: {team_b}");
    let drains = api.ok("/api/v1/audit?action=node.drain").await.unwrap();
    assert!(drains.to_string().contains("browser drain drill"), "{drains}");
    let node = api.ok("/api/v1/nodes").await.unwrap()[0].clone();
    assert_eq!(node["state"], "ready", "the page's uncordon did not land: {node}");
    let hog_now = api.ok(&format!("/api/v1/workloads/{}", hog["id"].as_str().unwrap())).await.unwrap();
    assert_eq!(hog_now["state"], "cancelled", "{}", hog_now["state"]);
    let hidden_now = api.ok(&format!("/api/v1/workloads/{}", hidden["id"].as_str().unwrap())).await.unwrap();
    assert_eq!(hidden_now["tenant"], "team-a");
    let mine = api.ok("/api/v1/workloads?state=running").await.unwrap();
    for w in mine.as_array().unwrap() {
        let id = w["id"].as_str().unwrap();
        api.created(&format!("/api/v1/workloads/{id}/cancel"), &Value::Null).await.unwrap();
    }
    // Deleted: its replicas drain.
    assert_eq!(api.delete(&format!("/api/v1/services/{service_id}")).await.unwrap().status, 202);
    agent.kill().await;
    cp.stop().await;
}
