//! Hostile tenants against the real control plane: what one tenant does must never stop scheduling
//! for the others, show it their data, or exhaust the control plane. Each story runs an attack
//! while another tenant's work is submitted, and that work must keep being placed within a bounded
//! delay.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use airtime_tests::policies::{deciding, many_functions, time_bomb};
use airtime_tests::{
    Api, ControlPlane, NodeAgent, TestDb, eventually, fresh_control_plane, nodes_ready, one_node_fleet,
    workload_reaches,
};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(40);

fn fixture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/wat").join(name);
    wat::parse_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

async fn submit(api: &Api, tenant: &str, name: &str, gpus: u32) -> String {
    let body = json!({"name": name, "tenant": tenant, "class": "batch_inference", "command": ["sleep", "60"],
                      "resources": {"gpu_count": gpus}});
    api.created("/api/v1/workloads", &body).await.unwrap()["id"].as_str().unwrap().to_owned()
}

/// Uploads and activates a tenant's own policy; returns its id.
async fn activate_own(tenant_admin: &Api, name: &str, wasm: Vec<u8>) -> String {
    let uploaded =
        tenant_admin.post_raw(&format!("/api/v1/policies?name={name}"), "application/wasm", wasm).await.unwrap();
    assert_eq!(uploaded.status, 201, "{}", uploaded.body);
    let id = uploaded.body["id"].as_str().unwrap().to_owned();
    tenant_admin.created(&format!("/api/v1/policies/{id}/activate"), &json!({})).await.unwrap();
    id
}

async fn ready(cp: &ControlPlane) -> (u16, Value) {
    let answer = cp.anonymous().get("/readyz").await.unwrap();
    (answer.status, answer.body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_writing_nul_bytes_and_megabytes_of_text_stops_no_one_and_sees_no_neighbour() {
    let (_db, cp, _agent) = one_node_fleet("shared", &["--simulate-gpus", "4:H100-SXM:81920"]).await.unwrap();
    let admin = cp.api();
    let mallory = cp.api_as(&cp.user("mallory", "admin@mallory.test", "tenant_admin").await.unwrap());
    cp.user("alice", "admin@alice.test", "tenant_admin").await.unwrap();

    // Mallory's policy gives a reason with a NUL, a terminal escape and 8,000 more characters, and
    // logs a line with a NUL: PostgreSQL's text cannot hold a NUL, so unchecked, every cycle would
    // roll back for everyone.
    let mut reason = b"placed\0\x1b[2J".to_vec();
    reason.extend(std::iter::repeat_n(b'A', 8000));
    let policy = activate_own(&mallory, "nul-writer", deciding(&reason, b"log\0line", None)).await;
    let hers = submit(&admin, "mallory", "mallory-job", 1).await;
    let alices = submit(&admin, "alice", "alice-job", 1).await;
    workload_reaches(&admin, &alices, "running", WAIT).await.unwrap();
    let detail = workload_reaches(&admin, &hers, "running", WAIT).await.unwrap();

    // Her reason was kept, cleaned (the NUL and the escape visible as U+FFFD) and cut to 500
    // characters, in the decision, the event and the workload's answer alike.
    let place = detail["decisions"].as_array().unwrap().iter().find(|d| d["kind"] == "place").unwrap().clone();
    assert_eq!(place["policy_name"], "nul-writer v1", "{place}");
    let kept = place["reason"].as_str().unwrap();
    assert!(kept.starts_with("placed\u{FFFD}\u{FFFD}[2J"), "{kept:?}");
    assert_eq!(kept.chars().count(), 500, "{kept:?}");
    assert!(
        detail.to_string().len() < 16 * 1024,
        "the workload's detail stays small: {} bytes",
        detail.to_string().len()
    );
    let logs = mallory.ok(&format!("/api/v1/policies/{policy}/logs")).await.unwrap();
    assert!(logs.to_string().contains("log\u{FFFD}line"), "{logs}");

    // A new version that gives up through airtime.fail with a NUL in its message: the failure is
    // recorded (cleaned), Mallory's work gets the platform's decision, Alice's is placed as ever.
    let v2 = mallory
        .post_raw("/api/v1/policies?name=nul-writer", "application/wasm", deciding(b"-", b"", Some(b"gave\0up")))
        .await
        .unwrap();
    assert_eq!(v2.status, 201, "{}", v2.body);
    mallory.created(&format!("/api/v1/policies/{policy}/activate"), &json!({"version": 2})).await.unwrap();
    let hers = submit(&admin, "mallory", "mallory-second", 1).await;
    let alices = submit(&admin, "alice", "alice-second", 1).await;
    workload_reaches(&admin, &alices, "running", WAIT).await.unwrap();
    workload_reaches(&admin, &hers, "running", WAIT).await.unwrap();
    let failures = mallory.ok(&format!("/api/v1/policies/{policy}/failures")).await.unwrap();
    assert!(failures.to_string().contains("gave\u{FFFD}up"), "{failures}");
    assert_eq!(ready(&cp).await.0, 200);

    // Mallory's exported snapshot (what her own policy is given) names her tenant alone: no
    // other tenant's name, guarantee, weight, tier or usage.
    let snapshot = mallory.ok("/api/v1/scheduler/snapshot").await.unwrap();
    let tenants = snapshot["tenants"].as_array().unwrap();
    assert_eq!(tenants.len(), 1, "{tenants:?}");
    assert_eq!(tenants[0]["name"], "mallory");
    assert!(!snapshot.to_string().contains("alice"), "{snapshot}");
    cp.stop().await;
}

/// Refuses, from inside PostgreSQL, any workload event whose message holds `marker`: a stand-in
/// for whatever a database may refuse of what a policy wrote.
async fn refuse_events_containing(db: &TestDb, marker: &str) {
    let pool = db.pool().await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE FUNCTION refuse_marked() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
           IF NEW.detail LIKE '%{marker}%' THEN RAISE EXCEPTION 'refused by the test''s trigger'; END IF; \
           RETURN NEW; END $$"
    )))
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "CREATE TRIGGER refuse_marked BEFORE INSERT ON workload_events FOR EACH ROW EXECUTE FUNCTION refuse_marked()",
    )
    .execute(&pool)
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_database_refuses_one_tenants_decisions_only_that_tenant_falls_back() {
    let (db, cp, _agent) = one_node_fleet("shared", &["--simulate-gpus", "4:H100-SXM:81920"]).await.unwrap();
    let admin = cp.api();
    let mallory = cp.api_as(&cp.user("mallory", "admin@mallory.test", "tenant_admin").await.unwrap());
    let alice = cp.api_as(&cp.user("alice", "admin@alice.test", "tenant_admin").await.unwrap());
    refuse_events_containing(&db, "POISON").await;

    let hostile = activate_own(&mallory, "poison", deciding(b"POISON", b"", None)).await;
    let innocent = activate_own(&alice, "alice-order", deciding(b"alice's own order", b"", None)).await;
    let hers = submit(&admin, "mallory", "mallory-job", 1).await;
    let alices = submit(&admin, "alice", "alice-job", 1).await;

    // Alice's policy still decides for Alice; Mallory's work is placed by the platform's decision.
    let alice_detail = workload_reaches(&admin, &alices, "running", WAIT).await.unwrap();
    let place = alice_detail["decisions"].as_array().unwrap().iter().find(|d| d["kind"] == "place").unwrap().clone();
    assert_eq!(place["policy_name"], "alice-order v1", "{place}");
    let mallory_detail = workload_reaches(&admin, &hers, "running", WAIT).await.unwrap();
    let place = mallory_detail["decisions"].as_array().unwrap().iter().find(|d| d["kind"] == "place").unwrap().clone();
    assert_ne!(place["policy_name"], "poison v1", "{place}");

    // The refusal is Mallory's failure alone, named as such; Alice's policy is not charged.
    let failures = mallory.ok(&format!("/api/v1/policies/{hostile}/failures")).await.unwrap();
    assert!(failures.as_array().unwrap().iter().any(|f| f["kind"] == "apply_failed"), "{failures}");
    let innocent_failures = alice.ok(&format!("/api/v1/policies/{innocent}/failures")).await.unwrap();
    assert_eq!(innocent_failures, json!([]));
    assert_eq!(ready(&cp).await.0, 200);
    cp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduling_loop_that_cannot_commit_makes_readyz_say_so_until_it_recovers() {
    let (db, cp, _agent) = one_node_fleet("shared", &["--simulate-gpus", "1:L4:24576"]).await.unwrap();
    let admin = cp.api();
    let pool = db.pool().await.unwrap();
    sqlx::query(
        "CREATE FUNCTION refuse_cycles() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
           RAISE EXCEPTION 'the cycle table refuses writes'; END $$",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "CREATE TRIGGER refuse_cycles BEFORE INSERT ON scheduling_cycles FOR EACH ROW EXECUTE FUNCTION refuse_cycles()",
    )
    .execute(&pool)
    .await
    .unwrap();
    let job = submit(&admin, "default", "waits", 1).await;

    let stalled = eventually("readyz reports the stalled loop", WAIT, || {
        let cp = &cp;
        async move {
            let (status, body) = ready(cp).await;
            Ok((status == 503).then_some(body))
        }
    })
    .await
    .unwrap();
    let message = stalled["error"]["message"].as_str().unwrap();
    assert!(message.contains("scheduling loop failed") && message.contains("refuses writes"), "{message}");

    sqlx::query("DROP TRIGGER refuse_cycles ON scheduling_cycles").execute(&pool).await.unwrap();
    workload_reaches(&admin, &job, "running", WAIT).await.unwrap();
    assert_eq!(ready(&cp).await.0, 200);
    cp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_tenant_policy_delays_no_one_else_and_stays_suspended_when_reactivated() {
    let (_db, cp) = fresh_control_plane(&["--policy-suspend-after", "2"]).await.unwrap();
    let admin = cp.api();
    let _agent = NodeAgent::start(&cp, "shared", &["--simulate-gpus", "2:H100-SXM:81920"]).await.unwrap();
    nodes_ready(&admin, 1).await.unwrap();
    let mallory = cp.api_as(&cp.user("mallory", "admin@mallory.test", "tenant_admin").await.unwrap());
    cp.user("alice", "admin@alice.test", "tenant_admin").await.unwrap();

    // Live, Mallory's policy loops until its deadline, which the platform team allowed to be 10 s.
    let uploaded = mallory
        .post_raw("/api/v1/policies?name=hang", "application/wasm", time_bomb("(loop $forever (br $forever))", ""))
        .await
        .unwrap();
    assert_eq!(uploaded.status, 201, "{}", uploaded.body);
    let policy = uploaded.body["id"].as_str().unwrap().to_owned();
    admin.put(&format!("/api/v1/policies/{policy}/limits"), &json!({"deadline_ms": 10000})).await.unwrap();
    mallory.created(&format!("/api/v1/policies/{policy}/activate"), &json!({})).await.unwrap();
    // Work of hers that never fits keeps her scope evaluated every cycle.
    submit(&admin, "mallory", "never-fits", 8).await;
    tokio::time::sleep(Duration::from_millis(600)).await;

    // Alice's work is placed within the cycle budget and a tick, not after Mallory's 10 s.
    let asked = Instant::now();
    let alices = submit(&admin, "alice", "alice-job", 1).await;
    workload_reaches(&admin, &alices, "running", WAIT).await.unwrap();
    let waited = asked.elapsed();
    assert!(waited < Duration::from_secs(6), "Alice waited {waited:?} behind Mallory's hanging policy");

    let suspended = |expect: &'static str| {
        let mallory = mallory.clone();
        let path = format!("/api/v1/policies/{policy}");
        eventually(expect, WAIT, move || {
            let mallory = mallory.clone();
            let path = path.clone();
            async move {
                let view = mallory.ok(&path).await?;
                Ok(view["suspended_reason"].as_str().map(|_| view.clone()))
            }
        })
    };
    let first = suspended("the hanging policy is suspended").await.unwrap();
    assert!(first["suspended_reason"].as_str().unwrap().contains("timeout"), "{first}");

    // Re-activating the same version keeps its history: its next failure suspends it again.
    let failures_before = mallory.ok(&format!("/api/v1/policies/{policy}/failures")).await.unwrap();
    let count_before = failures_before.as_array().unwrap().len();
    let again = mallory.created(&format!("/api/v1/policies/{policy}/activate"), &json!({})).await.unwrap();
    assert!(again["consecutive_failures"].as_i64().unwrap() >= 2, "the count survives: {again}");
    suspended("suspended again at its next failure").await.unwrap();
    let failures_after = mallory.ok(&format!("/api/v1/policies/{policy}/failures")).await.unwrap();
    assert!(failures_after.as_array().unwrap().len() <= count_before + 2, "{failures_after}");

    // And Mallory can take her policy out of service herself; turning it off and on again does not
    // clear its record either.
    let off = mallory.post(&format!("/api/v1/policies/{policy}/deactivate"), &json!({})).await.unwrap();
    assert_eq!(off.status, 200, "{}", off.body);
    assert!(off.body["active_version"].is_null(), "{}", off.body);
    let on = mallory.created(&format!("/api/v1/policies/{policy}/activate"), &json!({})).await.unwrap();
    assert!(on["consecutive_failures"].as_i64().unwrap() >= 2, "deactivation reset the count: {on}");
    cp.stop().await;
}

/// What the control plane exposes of its compiled-module cache.
async fn modules_compiled(cp: &ControlPlane) -> f64 {
    let text = reqwest::get(cp.anonymous().url("/metrics")).await.unwrap().text().await.unwrap();
    let line = text.lines().find(|l| l.starts_with("airtime_policy_modules_compiled ")).expect("the metric");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_of_too_many_functions_is_refused_before_it_costs_any_compilation() {
    let (_db, cp) = fresh_control_plane(&[]).await.unwrap();
    let mallory = cp.api_as(&cp.user("mallory", "admin@mallory.test", "tenant_admin").await.unwrap());
    let started = Instant::now();
    let refused =
        mallory.post_raw("/api/v1/policies?name=heavy", "application/wasm", many_functions(25_000)).await.unwrap();
    assert_eq!(refused.status, 422, "{}", refused.body);
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("functions; a policy may define at most 20000"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(5), "refused in {:?}", started.elapsed());
    cp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_are_bounded_in_cpu_memory_and_concurrency() {
    let (_db, cp) = fresh_control_plane(&["--policy-compile-timeout-ms", "300"]).await.unwrap();
    let admin = cp.api();
    let mallory = cp.api_as(&cp.user("mallory", "admin@mallory.test", "tenant_admin").await.unwrap());
    let upload = |wasm: Vec<u8>| {
        let mallory = mallory.clone();
        async move { mallory.post_raw("/api/v1/policies?name=heavy", "application/wasm", wasm).await.unwrap() }
    };

    // Within the count but slower to compile than the deadline: refused when the deadline passes,
    // and its compilation stopped there: the control plane's cores are idle a moment later.
    let slow = upload(many_functions(19_000)).await;
    assert_eq!(slow.status, 422, "{}", slow.body);
    assert!(slow.body["error"]["message"].as_str().unwrap().contains("compile_timeout"), "{}", slow.body);
    let cpu = || {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", cp.pid().unwrap())).unwrap();
        let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
        // utime, stime, and the waited-for children's, in clock ticks (100 a second).
        fields[11..15].iter().map(|f| f.parse::<u64>().unwrap()).sum::<u64>()
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = cpu();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let busy_ticks = cpu() - before;
    assert!(busy_ticks < 50, "the control plane kept {busy_ticks} ticks of CPU busy in the second after the deadline");

    // Nor does it hold Mallory's compile slot: her next upload is compiled at once. A module
    // refused at its trial is never kept compiled: the cache does not grow.
    let cached = modules_compiled(&cp).await;
    let failing = upload(fixture("fail_with_message.wat")).await;
    assert_eq!(failing.status, 422, "{}", failing.body);
    assert!(failing.body["error"]["message"].as_str().unwrap().contains("no GPUs of model B300"), "{}", failing.body);
    assert_eq!(modules_compiled(&cp).await, cached, "a refused module stays out of the cache");
    let stored = admin.ok("/api/v1/policies").await.unwrap();
    assert!(!stored.to_string().contains("\"heavy\""), "nothing refused was stored: {stored}");
    cp.stop().await;
}

/// Submits a process workload (no container) of `tenant` running `script` in `sh`.
async fn submit_script(api: &Api, tenant: &str, name: &str, script: &str) -> String {
    let body = json!({"name": name, "tenant": tenant, "class": "evaluation", "command": ["sh", "-c", script],
                      "resources": {"gpu_count": 0, "cpu_millis": 100}});
    api.created("/api/v1/workloads", &body).await.unwrap()["id"].as_str().unwrap().to_owned()
}

async fn log_lines(api: &Api, id: &str, last: &str) -> Vec<String> {
    eventually(&format!("the line {last:?} in the logs"), WAIT, || {
        let (api, path, last) = (api.clone(), format!("/api/v1/workloads/{id}/logs"), last.to_owned());
        async move {
            let logs = api.ok(&path).await?;
            let lines: Vec<String> =
                logs["lines"].as_array().unwrap().iter().map(|l| l["text"].as_str().unwrap().to_owned()).collect();
            Ok(lines.contains(&last).then_some(lines))
        }
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_workload_runs_as_another_user_and_cannot_read_the_node_credential() {
    let (_db, cp) = fresh_control_plane(&[]).await.unwrap();
    let admin = cp.api();
    let work = tempfile::tempdir().unwrap();
    let agent = NodeAgent::start(
        &cp,
        "users",
        &["--no-nvml", "--process-user", "nobody", "--work-dir", work.path().to_str().unwrap()],
    )
    .await
    .unwrap();
    nodes_ready(&admin, 1).await.unwrap();
    cp.user("mallory", "admin@mallory.test", "tenant_admin").await.unwrap();
    let credential = agent.state_dir().join("node-credential");
    agent.credential().await.unwrap();

    // Mallory's process tries the node's credential, the agent's state directory, and escalating
    // through a set-user-id program; then says who and where it is.
    let script = format!(
        "cat {cred} && echo CREDENTIAL-READ; ls {state} && echo STATE-LISTED; \
         echo uid=$(id -u) gid=$(id -g) groups=$(id -G); echo dir=$(pwd) home=$HOME; \
         grep NoNewPrivs /proc/self/status | tr -s '\\t ' ' '; echo done",
        cred = credential.display(),
        state = agent.state_dir().display()
    );
    let id = submit_script(&admin, "mallory", "snoop", &script).await;
    let lines = log_lines(&admin, &id, "done").await;
    workload_reaches(&admin, &id, "succeeded", WAIT).await.unwrap();
    assert!(!lines.iter().any(|l| l.contains("CREDENTIAL-READ") || l.contains("STATE-LISTED")), "{lines:?}");
    assert!(lines.iter().any(|l| l.contains("Permission denied")), "{lines:?}");
    assert!(lines.contains(&"uid=65534 gid=65534 groups=65534".to_owned()), "{lines:?}");
    let dir = work.path().join(format!("airtime-{id}-1"));
    assert!(lines.contains(&format!("dir={0} home={0}", dir.display())), "{lines:?}");
    assert!(lines.contains(&"NoNewPrivs: 1".to_owned()), "{lines:?}");
    // Its directory went with it.
    eventually("the workload's directory removed", WAIT, || {
        let dir = dir.clone();
        async move { Ok((!dir.exists()).then_some(())) }
    })
    .await
    .unwrap();
    cp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_only_node_refuses_process_work_and_a_stolen_credential_forges_no_event() {
    let (_db, cp) = fresh_control_plane(&[]).await.unwrap();
    let admin = cp.api();
    cp.user("mallory", "admin@mallory.test", "tenant_admin").await.unwrap();
    cp.user("alice", "admin@alice.test", "tenant_admin").await.unwrap();

    // A node that takes container work only refuses a process, saying why.
    let _containers_only =
        NodeAgent::start(&cp, "containers-only", &["--no-nvml", "--workloads", "containers"]).await.unwrap();
    nodes_ready(&admin, 1).await.unwrap();
    let hers = submit_script(&admin, "mallory", "on-the-host", "echo on the host").await;
    let w = workload_reaches(&admin, &hers, "failed", WAIT).await.unwrap();
    assert!(w["message"].as_str().unwrap_or_default().contains("container workloads only"), "{w}");

    // Alice's work runs on a node of GPUs; Mallory holds that node's credential (as a process of
    // hers on it once could read it).
    let agent = NodeAgent::start(&cp, "shared", &["--simulate-gpus", "1:L4:24576"]).await.unwrap();
    let nodes = nodes_ready(&admin, 2).await.unwrap();
    let node_id =
        nodes.as_array().unwrap().iter().find(|n| n["name"] == "shared").unwrap()["id"].as_str().unwrap().to_owned();
    let alices = submit(&admin, "alice", "alice-job", 1).await;
    workload_reaches(&admin, &alices, "running", WAIT).await.unwrap();
    let stolen = cp.anonymous().with_token(&agent.credential().await.unwrap());
    let events = format!("/api/v1/agent/nodes/{node_id}/workloads/{alices}/events");
    for forged in [
        json!({"attempt": 1, "event": "exited", "exit_code": 1, "message": "forged"}),
        json!({"attempt": 1, "event": "exited", "exit_code": 1, "attempt_token": uuid::Uuid::new_v4().to_string()}),
        json!({"attempt": 1, "event": "failed_to_start", "message": "forged", "attempt_token": "not-a-token"}),
    ] {
        let answer = stolen.post(&events, &forged).await.unwrap();
        assert_eq!(answer.status, 409, "{forged} → {}", answer.body);
        assert_eq!(answer.body["error"]["code"], "attempt_token_mismatch", "{}", answer.body);
    }
    let detail = admin.ok(&format!("/api/v1/workloads/{alices}")).await.unwrap();
    assert_eq!(detail["state"], "running", "a forged event changed Alice's work: {detail}");
    assert!(!detail.to_string().contains("forged"), "{detail}");
    // The agent's own events still count: Alice's cancellation ends her work as ever.
    admin.post(&format!("/api/v1/workloads/{alices}/cancel"), &json!({})).await.unwrap();
    workload_reaches(&admin, &alices, "cancelled", WAIT).await.unwrap();
    cp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_one_tenant_admin_invited_first_never_collects_another_tenants_invitation() {
    let (_db, cp) = fresh_control_plane(&[]).await.unwrap();
    let mallory = cp.api_as(&cp.user("mallory", "admin@mallory.test", "tenant_admin").await.unwrap());
    let alice = cp.api_as(&cp.user("alice", "admin@alice.test", "tenant_admin").await.unwrap());
    let tenants = cp.api().ok("/api/v1/tenants").await.unwrap();
    let alice_id =
        tenants.as_array().unwrap().iter().find(|t| t["name"] == "alice").unwrap()["id"].as_str().unwrap().to_owned();

    // Mallory pre-claims a name Alice will invite, with a password of her choosing, and logs in.
    let name = "bob@shared.test";
    let password = "mallory chose this password";
    let invited =
        mallory.post("/api/v1/users", &json!({"email": name, "password": password, "role": "viewer"})).await.unwrap();
    assert_eq!(invited.status, 202, "{}", invited.body);
    let session =
        cp.anonymous().created("/api/v1/auth/login", &json!({"email": name, "password": password})).await.unwrap();
    let bob = cp.api_as(session["token"].as_str().unwrap());

    // Alice invites that name as her tenant's admin: the same answer as ever, pending on her side.
    let asked = alice
        .post(
            "/api/v1/users",
            &json!({"email": name, "password": "alice's own choice of password", "role": "tenant_admin"}),
        )
        .await
        .unwrap();
    assert_eq!(asked.status, 202, "{}", asked.body);
    assert_eq!(asked.body["status"], "invited");
    let pending = alice.ok(&format!("/api/v1/tenants/{alice_id}/invitations")).await.unwrap();
    assert!(pending.to_string().contains(name), "{pending}");

    // The account Mallory controls never sees it, cannot accept it, and is no member of Alice's.
    let mine = bob.ok("/api/v1/auth/invitations").await.unwrap();
    assert_eq!(mine, json!([]), "the held invitation is offered to the pre-claimed account");
    let accepted = bob.post("/api/v1/auth/invitations/accept", &json!({"tenant": "alice"})).await.unwrap();
    assert_eq!(accepted.status, 422, "Mallory's account joined Alice's tenant: {}", accepted.body);
    let login = cp
        .anonymous()
        .post("/api/v1/auth/login", &json!({"email": name, "password": password, "tenant": "alice"}))
        .await
        .unwrap();
    assert!(login.status >= 400, "{}", login.body);
    cp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_policy_storage_is_bounded_and_checked_before_any_compilation() {
    let db = TestDb::create().await.unwrap();
    let cp = ControlPlane::start(
        &db,
        &[
            "--policy-versions-per-tenant",
            "3",
            "--policy-bytes-per-tenant",
            "4000000",
            "--policy-compile-timeout-ms",
            "300",
        ],
    )
    .await
    .unwrap();
    let mallory = cp.api_as(&cp.user("mallory", "admin@mallory.test", "tenant_admin").await.unwrap());
    let upload = |name: &'static str, wasm: Vec<u8>| {
        let mallory = mallory.clone();
        async move { mallory.post_raw(&format!("/api/v1/policies?name={name}"), "application/wasm", wasm).await.unwrap() }
    };

    // A bad name is refused before the module is compiled (this one is slower than the deadline).
    let started = Instant::now();
    let bad = upload("Not-A-Name", many_functions(19_000)).await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert_eq!(bad.body["error"]["code"], "invalid_name", "{}", bad.body);
    assert!(started.elapsed() < Duration::from_millis(300), "answered after {:?}", started.elapsed());

    // The same bytes again store nothing: the policy as it was, one version.
    let module = deciding(b"first", b"", None);
    assert_eq!(upload("storm", module.clone()).await.status, 201);
    for _ in 0..5 {
        let again = upload("storm", module.clone()).await;
        assert_eq!(again.status, 200, "{}", again.body);
        assert_eq!(again.body["versions"].as_array().unwrap().len(), 1, "{}", again.body);
    }
    // New bytes count, up to the tenant's most versions; past it, refused before compiling.
    assert_eq!(upload("storm", deciding(b"second", b"", None)).await.status, 201);
    assert_eq!(upload("other", deciding(b"third", b"", None)).await.status, 201);
    let started = Instant::now();
    let full = upload("storm", many_functions(19_000)).await;
    assert_eq!(full.status, 409, "{}", full.body);
    assert_eq!(full.body["error"]["code"], "policy_quota", "{}", full.body);
    assert!(started.elapsed() < Duration::from_millis(300), "answered after {:?}", started.elapsed());
    let (versions, bytes): (i64, i64) = sqlx::query_as(
        "SELECT count(*), COALESCE(sum(octet_length(wasm)), 0)::bigint FROM policy_versions v \
         JOIN policies p ON p.id = v.policy_id JOIN tenants t ON t.id = p.tenant_id WHERE t.name = 'mallory'",
    )
    .fetch_one(&db.pool().await.unwrap())
    .await
    .unwrap();
    assert!(versions == 3 && bytes < 4_000_000, "{versions} versions, {bytes} bytes stored");
    cp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_what_if_flood_is_capped_and_another_tenants_run_takes_its_turn() {
    let (db, cp) = fresh_control_plane(&["--what-if-runs-per-tenant", "4"]).await.unwrap();
    let _agent = NodeAgent::start(&cp, "shared", &["--simulate-gpus", "2:L4:24576"]).await.unwrap();
    nodes_ready(&cp.api(), 1).await.unwrap();
    let mallory = cp.api_as(&cp.user("mallory", "admin@mallory.test", "tenant_admin").await.unwrap());
    let alice = cp.api_as(&cp.user("alice", "admin@alice.test", "tenant_admin").await.unwrap());
    let hers = activate_own(&mallory, "flood", deciding(b"mallory", b"", None)).await;
    let alices = activate_own(&alice, "mine", deciding(b"alice", b"", None)).await;
    let ask = |api: &Api, policy: &str| {
        let (api, path) = (api.clone(), format!("/api/v1/policies/{policy}/what-if"));
        async move { api.post(&path, &json!({"hours": 168})).await.unwrap() }
    };

    // Mallory queues a week's replay over and over: past her cap, refused.
    let mut runs = Vec::new();
    for _ in 0..4 {
        let queued = ask(&mallory, &hers).await;
        assert_eq!(queued.status, 202, "{}", queued.body);
        runs.push(queued.body["id"].as_str().unwrap().to_owned());
    }
    let refused = ask(&mallory, &hers).await;
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert_eq!(refused.body["error"]["code"], "what_if_limit", "{}", refused.body);

    // Alice's one run is taken in its turn, not after all of Mallory's.
    let queued = ask(&alice, &alices).await;
    assert_eq!(queued.status, 202, "{}", queued.body);
    let finished = |api: &Api, id: String| {
        let (api, path) = (api.clone(), format!("/api/v1/what-if/{id}"));
        eventually("the what-if run to finish", Duration::from_secs(120), move || {
            let (api, path) = (api.clone(), path.clone());
            async move {
                let run = api.ok(&path).await?;
                Ok(matches!(run["state"].as_str(), Some("succeeded" | "failed")).then_some(run))
            }
        })
    };
    let alices_run = queued.body["id"].as_str().unwrap().to_owned();
    let run = finished(&alice, alices_run.clone()).await.unwrap();
    assert_eq!(run["state"], "succeeded", "{run}");
    for id in &runs {
        finished(&mallory, id.clone()).await.unwrap();
    }
    let (before,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM what_if_runs m WHERE m.id = ANY($1::uuid[]) \
         AND m.started_at < (SELECT a.started_at FROM what_if_runs a WHERE a.id = $2::uuid)",
    )
    .bind(&runs)
    .bind(&alices_run)
    .fetch_one(&db.pool().await.unwrap())
    .await
    .unwrap();
    let timeline: Vec<(String, String, String)> =
        sqlx::query_as("SELECT id::text, created_at::text, started_at::text FROM what_if_runs ORDER BY started_at")
            .fetch_all(&db.pool().await.unwrap())
            .await
            .unwrap();
    assert!(before <= 2, "Alice's run ({alices_run}) started after {before} of Mallory's 4: {timeline:?}");
    cp.stop().await;
}
