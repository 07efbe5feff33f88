//! The `airtime` command line, story by story: the real binary as a subprocess, against a real
//! control plane, agent and PostgreSQL. A user logs in once and works from the terminal; scripts
//! get the API's JSON and exit codes they can rely on (1 refused, 2 usage, 3 unreachable, 4 not
//! found).

#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

use airtime_tests::{
    ADMIN_EMAIL, ADMIN_PASSWORD, Cli, eventually, fresh_control_plane, one_node_fleet, workload_reaches,
};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_logs_in_submits_a_spec_follows_its_logs_and_cancels_what_cannot_run() {
    let (_db, cp, _agent) = one_node_fleet("cpu-node", &["--no-nvml"]).await.unwrap();
    let api = cp.api();
    cp.user("research", "ann@research.test", "tenant_member").await.unwrap();
    let ann = Cli::new().unwrap();

    // A wrong password is the API's refusal, word for word, and nothing is saved.
    let wrong = ann
        .run_with_stdin(&["--url", &cp.url, "login", "--email", "ann@research.test", "--password-stdin"], "guess\n")
        .await
        .unwrap();
    assert_eq!((wrong.code, wrong.stderr.trim()), (1, "airtime: invalid login name or password"), "{wrong:?}");
    assert!(!ann.config_path().exists());

    // Ann logs in once: the config file keeps the server and her session, readable by her alone.
    let login = ann
        .run_with_stdin(
            &["--url", &cp.url, "login", "--email", "ann@research.test", "--password-stdin"],
            "ann@research.test long password\n",
        )
        .await
        .unwrap()
        .ok()
        .unwrap();
    assert!(login.stdout.contains("logged in") && login.stdout.contains("research"), "{login:?}");
    let mode = std::fs::metadata(ann.config_path()).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert!(std::fs::read_to_string(ann.config_path()).unwrap().contains(&cp.url));

    // She sees the fleet.
    let nodes = ann.run(&["nodes"]).await.unwrap().ok().unwrap();
    assert!(nodes.stdout.lines().any(|l| l.contains("cpu-node") && l.contains("ready")), "{}", nodes.stdout);
    // And what the GPU-hours cost, by class (nothing has run yet: the totals are there, at zero).
    let usage = ann.run(&["usage", "--since", "2h", "--by", "class"]).await.unwrap().ok().unwrap();
    assert!(usage.stdout.lines().any(|l| l.starts_with("TOTAL") && l.contains("$0.00")), "{}", usage.stdout);
    let usage = ann.run(&["usage", "--since", "2h", "-o", "json"]).await.unwrap().ok().unwrap();
    let report: Value = serde_json::from_str(&usage.stdout).unwrap();
    assert_eq!(report["group_by"], "tenant", "{report}");

    // She submits from a YAML spec; a retry with the same idempotency key is the same workload.
    let spec = ann.dir().join("hello.yaml");
    std::fs::write(
        &spec,
        "name: hello-yaml\nclass: evaluation\nresources:\n  cpu_millis: 100\n\
         command: [sh, -c, 'echo hello from yaml; sleep 1; echo all done >&2']\n",
    )
    .unwrap();
    let spec = spec.to_str().unwrap();
    let submit = ["submit", "-f", spec, "--idempotency-key", "hello-1", "-o", "json"];
    let first = ann.run(&submit).await.unwrap().ok().unwrap().json().unwrap();
    assert_eq!((&first["tenant"], &first["name"]), (&json!("research"), &json!("hello-yaml")));
    let retry = ann.run(&submit).await.unwrap().ok().unwrap().json().unwrap();
    assert_eq!(retry["id"], first["id"], "a retried submission is one workload");
    let id = first["id"].as_str().unwrap();

    // `logs -f` prints the output as it comes (stderr's lines on stderr) and ends with the workload.
    let logs = ann.run(&["logs", id, "-f"]).await.unwrap().ok().unwrap();
    assert_eq!(logs.stdout, "hello from yaml\n");
    assert_eq!(logs.stderr, "all done\n");
    let done = ann.run(&["get", id, "-o", "json"]).await.unwrap().ok().unwrap().json().unwrap();
    assert_eq!(done["state"], "succeeded", "logs -f ended only once the workload had");

    // Work that cannot fit (four GPUs on a CPU-only fleet) waits, and `list` says why.
    let needs_gpus =
        ["submit", "--name", "needs-gpus", "--class", "training", "--gpus", "4", "--cpu", "1", "-o", "json"];
    let no_command = ann.run(&needs_gpus).await.unwrap();
    assert_eq!(no_command.code, 2, "no command: a usage error before anything is sent: {no_command:?}");
    let big =
        ann.run(&[&needs_gpus[..], &["--", "sleep", "600"]].concat()).await.unwrap().ok().unwrap().json().unwrap();
    let big_id = big["id"].as_str().unwrap().to_owned();
    let reason = eventually("a pending reason for the GPU job", WAIT, || {
        let (api, path) = (api.clone(), format!("/api/v1/workloads/{big_id}"));
        async move {
            let reason = api.ok(&path).await?["pending_reason"].as_str().map(str::to_owned);
            Ok(reason.filter(|r| r.contains("4 GPUs")))
        }
    })
    .await
    .unwrap();
    let list = ann.run(&["list", "--state", "pending"]).await.unwrap().ok().unwrap();
    let row = list.stdout.lines().find(|l| l.contains(&big_id)).unwrap_or_else(|| panic!("{}", list.stdout));
    let reason_start: String = reason.chars().take(40).collect();
    assert!(row.contains("needs-gpus") && row.contains("pending") && row.contains(&reason_start), "{row}");
    let all = ann.run(&["list"]).await.unwrap().ok().unwrap();
    assert!(all.stdout.lines().any(|l| l.contains("hello-yaml") && l.contains("succeeded")), "{}", all.stdout);
    let as_json = ann.run(&["list", "-o", "json"]).await.unwrap().ok().unwrap().json().unwrap();
    assert_eq!(as_json.as_array().unwrap().len(), 2, "{as_json}");

    // She cancels it; cancelling it again is refused with the API's own message (exit 1).
    let cancel = ann.run(&["cancel", &big_id]).await.unwrap().ok().unwrap();
    assert!(cancel.stdout.contains("cancelled"), "{cancel:?}");
    workload_reaches(&api, &big_id, "cancelled", WAIT).await.unwrap();
    let again = ann.run(&["cancel", &big_id]).await.unwrap();
    let refusal = api.post(&format!("/api/v1/workloads/{big_id}/cancel"), &json!({})).await.unwrap();
    let message = refusal.body["error"]["message"].as_str().unwrap();
    assert_eq!((again.code, again.stderr.trim().to_owned()), (1, format!("airtime: {message}")), "{again:?}");

    // What does not exist is exit 4; what her role may not do is the API's refusal, exit 1.
    let missing = ann.run(&["get", &uuid::Uuid::new_v4().to_string()]).await.unwrap();
    assert_eq!(missing.code, 4, "{missing:?}");
    assert!(missing.stderr.starts_with("airtime: ") && missing.stderr.contains("not found"), "{missing:?}");
    let forbidden = ann.run(&["priorities", "set", "--grace-period-s", "5"]).await.unwrap();
    assert_eq!(forbidden.code, 1, "{forbidden:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_pushes_a_policy_tries_it_shadows_it_activates_it_rolls_it_back_and_sets_priorities() {
    let (_db, cp) = fresh_control_plane(&[]).await.unwrap();
    let admin = Cli::new().unwrap();

    // An existing token is stored once the API accepted it.
    let bad = admin.run(&["--url", &cp.url, "--token", "at_not_a_token", "login"]).await.unwrap();
    assert_eq!(bad.code, 1, "{bad:?}");
    admin.run(&["--url", &cp.url, "--token", &cp.admin_token, "login"]).await.unwrap().ok().unwrap();
    let me = admin.run(&["whoami", "-o", "json"]).await.unwrap().ok().unwrap().json().unwrap();
    assert_eq!(me["role"], "platform_admin");
    // Or a password login that keeps a long-lived API token rather than the hour's session.
    let args = ["login", "--email", ADMIN_EMAIL, "--password-stdin", "--api-token", "ci-laptop"];
    admin.run_with_stdin(&args, &format!("{ADMIN_PASSWORD}\n")).await.unwrap().ok().unwrap();
    let me = admin.run(&["whoami", "-o", "json"]).await.unwrap().ok().unwrap().json().unwrap();
    assert_eq!((&me["role"], &me["credential"]), (&json!("platform_admin"), &json!("api_token")));

    // Two versions of a policy that decides nothing, named after its file.
    let v1 = admin.dir().join("quiet_policy.wasm");
    std::fs::write(&v1, airtime_tests::policies::time_bomb("", "")).unwrap();
    let v2 = admin.dir().join("v2.wasm");
    std::fs::write(&v2, airtime_tests::policies::time_bomb("", "(func $unused)")).unwrap();
    let pushed = admin.run(&["policies", "push", v1.to_str().unwrap()]).await.unwrap().ok().unwrap();
    assert!(pushed.stdout.contains("policy quiet-policy") && pushed.stdout.contains("version 1 stored"), "{pushed:?}");
    let pushed = admin.run(&["policies", "push", v2.to_str().unwrap(), "--name", "quiet-policy"]).await.unwrap();
    assert!(pushed.ok().unwrap().stdout.contains("version 2 stored"));
    let list = admin.run(&["policies", "list"]).await.unwrap().ok().unwrap();
    assert!(list.stdout.lines().any(|l| l.contains("quiet-policy") && l.contains("platform")), "{}", list.stdout);
    assert!(list.stdout.contains("slo-first"), "the built-ins are listed too: {}", list.stdout);

    // Tried on the live fleet (nothing applied), shadowed, then activated and rolled back, by name.
    let dry = admin.run(&["policies", "dry-run", "quiet-policy"]).await.unwrap().ok().unwrap();
    assert!(dry.stdout.contains("nothing applied"), "{dry:?}");
    let unstored = admin.run(&["policies", "dry-run", "--file", v1.to_str().unwrap(), "-o", "json"]).await.unwrap();
    assert!(unstored.ok().unwrap().json().unwrap()["decisions"].is_array());
    let shadow = admin.run(&["policies", "shadow", "quiet-policy", "--version", "1"]).await.unwrap().ok().unwrap();
    assert!(shadow.stdout.contains("in shadow"), "{shadow:?}");
    admin.run(&["policies", "shadow", "quiet-policy", "--stop"]).await.unwrap().ok().unwrap();
    admin.run(&["policies", "activate", "quiet-policy", "--version", "1"]).await.unwrap().ok().unwrap();
    admin.run(&["policies", "activate", "quiet-policy", "--params", r#"{"any": 1}"#]).await.unwrap().ok().unwrap();
    let active = admin.run(&["policies", "get", "quiet-policy", "-o", "json"]).await.unwrap().ok().unwrap();
    assert_eq!(active.json().unwrap()["active_version"], 2);
    let back = admin.run(&["policies", "rollback", "quiet-policy"]).await.unwrap().ok().unwrap();
    assert!(back.stdout.contains("active version 1"), "{back:?}");
    let unknown = admin.run(&["policies", "activate", "no-such-policy"]).await.unwrap();
    assert_eq!(unknown.code, 4, "{unknown:?}");
    let not_wasm =
        admin.run(&["policies", "push", admin.config_path().to_str().unwrap(), "--name", "x"]).await.unwrap();
    assert_eq!(not_wasm.code, 2, "{not_wasm:?}");

    // Priorities: one setting changed, the others kept; an out-of-range one is the API's message.
    admin
        .run(&["priorities", "set", "--grace-period-s", "45", "--night-training-bonus", "-5"])
        .await
        .unwrap()
        .ok()
        .unwrap();
    let now = admin.run(&["priorities", "get", "-o", "json"]).await.unwrap().ok().unwrap().json().unwrap();
    assert_eq!(
        (&now["grace_period_s"], &now["night_training_bonus"], &now["realtime_first"]),
        (&json!(45), &json!(-5), &json!(true))
    );
    let refused = admin.run(&["priorities", "set", "--grace-period-s", "99999"]).await.unwrap();
    assert_eq!(
        (refused.code, refused.stderr.trim()),
        (1, "airtime: grace_period_s must be between 0 and 3600"),
        "{refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_bad_usage_and_no_login_have_exit_codes_of_their_own() {
    let cli = Cli::new().unwrap();
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}");
    let down = cli.run(&["--url", &url, "--token", "t", "list"]).await.unwrap();
    assert_eq!(down.code, 3, "{down:?}");
    assert!(down.stderr.starts_with(&format!("airtime: cannot reach the control plane at {url}")), "{down:?}");
    let down = cli.run(&["--url", &url, "login", "--email", "a@b.test", "--password-stdin"]).await.unwrap();
    assert_eq!(down.code, 3, "{down:?}");

    let not_logged_in = cli.run(&["list"]).await.unwrap();
    assert_eq!(not_logged_in.code, 2, "{not_logged_in:?}");
    assert!(not_logged_in.stderr.contains("airtime login"), "{not_logged_in:?}");
    for usage in [
        vec!["submit", "--name", "x", "--class", "gaming", "--", "true"],
        vec!["--url", &url, "--token", "t", "get", "not-an-id"],
        vec!["--url", &url, "--token", "t", "submit", "-f", "/no/such/spec.yaml"],
        vec!["--url", "localhost:8080", "--token", "t", "nodes"],
        vec!["logs"],
        vec!["--url", &url, "--token", "t", "usage", "--since", "10s"],
    ] {
        let run = cli.run(&usage).await.unwrap();
        assert_eq!(run.code, 2, "{run:?}");
        assert!(!run.stderr.contains("panicked"), "{run:?}");
    }
    let help = cli.run(&["--help"]).await.unwrap().ok().unwrap();
    assert!(help.stdout.contains("Exit codes:") && help.stdout.contains("4  not found"), "{}", help.stdout);
}
