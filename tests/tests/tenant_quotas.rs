//! Quotas a platform team can change (issue 40): a tenant's guarantee raised with the CLI lets its
//! waiting work start at the next cycle — previewed first, audited with what it was and what it
//! became — and lowered again, reclaims nothing by itself: what runs keeps running while nobody
//! needs its GPUs. A limit caps a team that may borrow; an archived team's work ends and it admits
//! nothing new, its history kept; a GPU-hour budget that runs out refuses, lowers or only flags new
//! work as its action says. Real control plane, agent, CLI and PostgreSQL.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use airtime_tests::{Cli, one_node_fleet, workload_reaches};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_raised_with_the_cli_lets_waiting_work_start_at_the_next_cycle_and_lowering_it_reclaims_nothing_by_itself()
 {
    let (_db, cp, _agent) = one_node_fleet("quota-node", &["--simulate-gpus", "2:H100-SXM:81920"]).await.unwrap();
    let api = cp.api();
    let cli = Cli::new().unwrap();
    let airtime = |args: &[&str]| {
        let mut all = vec!["--url", cp.url.as_str(), "--token", cp.admin_token.as_str()];
        all.extend_from_slice(args);
        all.into_iter().map(str::to_owned).collect::<Vec<String>>()
    };
    let run = |args: Vec<String>| {
        let cli = &cli;
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            cli.run(&args).await.unwrap().ok().unwrap()
        }
    };

    // A team with no guarantee that may not borrow: its job waits, and says why.
    run(airtime(&["tenants", "create", "research", "--guaranteed-gpus", "0", "--may-borrow", "false"])).await;
    let job = api
        .created(
            "/api/v1/workloads",
            &json!({"name": "research-eval", "tenant": "research", "class": "evaluation",
                    "resources": {"gpu_count": 2}, "command": ["sleep", "600"]}),
        )
        .await
        .unwrap();
    let id = job["id"].as_str().unwrap().to_owned();
    let waiting = airtime_tests::eventually("the job waiting for quota", WAIT, || {
        let (api, id) = (api.clone(), id.clone());
        async move {
            let w = api.ok(&format!("/api/v1/workloads/{id}")).await?;
            let reason = w["pending_reason"].as_str().unwrap_or_default().to_owned();
            Ok(reason.contains("quota used up").then_some(reason))
        }
    })
    .await
    .unwrap();
    assert!(waiting.contains("tenant research"), "{waiting}");

    // Previewed first: the next cycle would place it. Nothing changes yet.
    let preview = run(airtime(&["tenants", "set", "research", "--guaranteed-gpus", "2", "--preview"])).await;
    assert!(preview.stdout.contains("would place 1 (now 0)"), "{}", preview.stdout);
    assert!(preview.stdout.contains("research-eval"), "{}", preview.stdout);
    assert!(preview.stdout.contains("place on quota-node"), "{}", preview.stdout);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(api.ok(&format!("/api/v1/workloads/{id}")).await.unwrap()["state"], "pending");

    // Raised: the job starts at the next cycle. The change is audited with before and after.
    let set = run(airtime(&["tenants", "set", "research", "--guaranteed-gpus", "2"])).await;
    assert!(set.stdout.contains("guaranteed_gpus: 2"), "{}", set.stdout);
    workload_reaches(&api, &id, "running", WAIT).await.unwrap();
    let audit = api.ok("/api/v1/audit?action=tenant.quota").await.unwrap();
    let entry = &audit[0];
    assert_eq!(entry["detail"]["before"]["guaranteed_gpus"], 0, "{audit}");
    assert_eq!(entry["detail"]["after"]["guaranteed_gpus"], 2, "{audit}");
    let listed = run(airtime(&["tenants"])).await;
    let row = listed.stdout.lines().find(|l| l.starts_with("research")).unwrap_or_default().to_owned();
    assert!(row.split_whitespace().nth(1) == Some("2"), "{}", listed.stdout);

    // Lowered again: nobody waits for its GPUs, so nothing is reclaimed — the job runs on.
    run(airtime(&["tenants", "set", "research", "--guaranteed-gpus", "0"])).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let still = api.ok(&format!("/api/v1/workloads/{id}")).await.unwrap();
    assert_eq!((still["state"].as_str(), still["attempt"].as_i64()), (Some("running"), Some(1)), "{still}");

    // Bad input changes nothing: a weight of 0 and an empty change are refused with the reason.
    let bad = cli
        .run(&airtime(&["tenants", "set", "research", "--weight", "0"]).iter().map(String::as_str).collect::<Vec<_>>())
        .await
        .unwrap();
    assert_ne!(bad.code, 0, "{bad:?}");
    assert!(bad.stderr.contains("weight 1..=10000"), "{bad:?}");
    let tenants = api.ok("/api/v1/tenants").await.unwrap();
    let research = tenants.as_array().unwrap().iter().find(|t| t["name"] == "research").unwrap();
    assert_eq!(research["weight"], 1, "{research}");
    cp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_caps_a_team_that_may_borrow_and_an_archived_team_ends_its_work_and_admits_nothing_new() {
    let (_db, cp, _agent) = one_node_fleet("limit-node", &["--simulate-gpus", "4:H100-SXM:81920"]).await.unwrap();
    let api = cp.api();
    let cli = Cli::new().unwrap();
    let run = |args: &[&str]| {
        let mut all = vec!["--url", cp.url.as_str(), "--token", cp.admin_token.as_str()];
        all.extend_from_slice(args);
        let args: Vec<String> = all.into_iter().map(str::to_owned).collect();
        let cli = &cli;
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            cli.run(&args).await.unwrap().ok().unwrap()
        }
    };
    let submit = |name: &str| {
        let api = api.clone();
        let body = json!({"name": name, "tenant": "vision", "class": "training",
                          "resources": {"gpu_count": 1}, "command": ["sleep", "600"]});
        async move { api.post("/api/v1/workloads", &body).await.unwrap() }
    };

    // Four GPUs are free and the team may borrow, but its limit is one GPU: one job runs, the
    // other waits and says why.
    let created = run(&["tenants", "create", "vision", "--gpu-limit", "1"]).await;
    let limit = created.stdout.lines().find(|l| l.starts_with("gpu_limit:")).unwrap_or_default().to_owned();
    assert_eq!(limit.split_whitespace().nth(1), Some("1"), "{}", created.stdout);
    let first = submit("vision-a").await.body["id"].as_str().unwrap().to_owned();
    workload_reaches(&api, &first, "running", WAIT).await.unwrap();
    let second = submit("vision-b").await.body["id"].as_str().unwrap().to_owned();
    let reason = airtime_tests::eventually("the second job held at the limit", WAIT, || {
        let (api, id) = (api.clone(), second.clone());
        async move {
            let w = api.ok(&format!("/api/v1/workloads/{id}")).await?;
            let reason = w["pending_reason"].as_str().unwrap_or_default().to_owned();
            Ok(reason.contains("at its limit").then_some(reason))
        }
    })
    .await
    .unwrap();
    assert!(reason.contains("tenant vision holds 1 of at most 1 GPUs"), "{reason}");

    // Raised: it starts at the next cycle; the change is audited.
    run(&["tenants", "set", "vision", "--gpu-limit", "2"]).await;
    workload_reaches(&api, &second, "running", WAIT).await.unwrap();
    let audit = api.ok("/api/v1/audit?action=tenant.quota").await.unwrap();
    assert_eq!(audit[0]["detail"]["after"]["gpu_limit"], 2, "{audit}");

    // Archived: both jobs stop, nothing new is admitted, and its history stays readable.
    let archived = run(&["tenants", "archive", "vision"]).await;
    assert!(archived.stdout.contains("0 pending workloads cancelled, 2 stopping"), "{}", archived.stdout);
    for id in [&first, &second] {
        workload_reaches(&api, id, "cancelled", WAIT).await.unwrap();
    }
    let refused = submit("vision-c").await;
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert_eq!(refused.body["error"]["code"], "tenant_archived", "{}", refused.body);
    let history = api.ok(&format!("/api/v1/workloads/{first}")).await.unwrap();
    assert_eq!(history["name"], "vision-a");
    let again = api.post(&format!("/api/v1/tenants/{}/archive", archived_id(&api, "vision").await), &json!({})).await;
    assert_eq!(again.unwrap().status, 409);
    let audit = api.ok("/api/v1/audit?action=tenant.archive").await.unwrap();
    assert_eq!(audit[0]["detail"]["stopping"], 2, "{audit}");
    cp.stop().await;
}

async fn archived_id(api: &airtime_tests::Api, name: &str) -> String {
    let tenants = api.ok("/api/v1/tenants").await.unwrap();
    let tenant = tenants.as_array().unwrap().iter().find(|t| t["name"] == name).unwrap();
    assert!(tenant["archived_at"].is_string(), "{tenant}");
    tenant["id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_that_runs_out_refuses_new_work_in_stop_mode_lowers_it_in_best_effort_mode_and_only_flags_it_in_warn_mode()
 {
    let (_db, cp, _agent) = one_node_fleet("budget-node", &["--simulate-gpus", "4:H100-SXM:81920"]).await.unwrap();
    let api = cp.api();
    let team = api.created("/api/v1/tenants", &json!({"name": "batch"})).await.unwrap();
    let team = team["id"].as_str().unwrap().to_owned();
    let submit = |name: &str| {
        let api = api.clone();
        let body = json!({"name": name, "tenant": "batch", "class": "batch_inference", "priority": 40,
                          "resources": {"gpu_count": 1}, "command": ["sleep", "600"]});
        async move { api.post("/api/v1/workloads", &body).await.unwrap() }
    };

    // A job holds a GPU for a few seconds: a budget of 0.001 GPU-hours (3.6 GPU-seconds) is spent.
    let first = submit("batch-a").await.body["id"].as_str().unwrap().to_owned();
    workload_reaches(&api, &first, "running", WAIT).await.unwrap();
    let path = format!("/api/v1/tenants/{team}/budgets/month");
    let set = api.put(&path, &json!({"gpu_hours": 0.001, "action": "stop"})).await.unwrap();
    assert_eq!(set.status, 200, "{}", set.body);
    airtime_tests::eventually("the budget used up", WAIT, || {
        let api = api.clone();
        let team = team.clone();
        async move {
            let budgets = api.ok(&format!("/api/v1/tenants/budgets?tenant={team}")).await?;
            Ok((budgets[0]["exhausted"] == true).then_some(()))
        }
    })
    .await
    .unwrap();

    // Stop: new work is refused with the reason; what runs keeps running.
    let refused = submit("batch-b").await;
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert_eq!(refused.body["error"]["code"], "budget_exhausted", "{}", refused.body);
    let message = refused.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("tenant batch used") && message.contains("this month"), "{message}");
    assert_eq!(api.ok(&format!("/api/v1/workloads/{first}")).await.unwrap()["state"], "running");
    // The budget and its use are on /metrics for the scraper that may see tenants.
    let metrics = cp.metrics(true).await.unwrap();
    assert!(metrics.contains("airtime_tenant_budget_gpu_hours{tenant=\"batch\",period=\"month\"} 0.001"), "{metrics}");
    assert!(metrics.contains("airtime_tenant_budget_used_gpu_hours{tenant=\"batch\",period=\"month\"}"), "{metrics}");

    // Best effort: admitted, preemptible at priority 0, and its first event says why.
    api.put(&path, &json!({"gpu_hours": 0.001, "action": "best_effort"})).await.unwrap();
    let lowered = submit("batch-c").await;
    assert_eq!(lowered.status, 201, "{}", lowered.body);
    assert_eq!((lowered.body["priority"].as_i64(), lowered.body["preemptible"].as_bool()), (Some(0), Some(true)));
    let detail = api.ok(&format!("/api/v1/workloads/{}", lowered.body["id"].as_str().unwrap())).await.unwrap();
    let first_event = detail["history"][0]["detail"].as_str().unwrap_or_default().to_owned();
    assert!(first_event.contains("admitted as best effort"), "{detail}");

    // Warn: admitted as asked, flagged.
    api.put(&path, &json!({"gpu_hours": 0.001, "action": "warn"})).await.unwrap();
    let warned = submit("batch-d").await;
    assert_eq!((warned.status, warned.body["priority"].as_i64()), (201, Some(40)), "{}", warned.body);
    let detail = api.ok(&format!("/api/v1/workloads/{}", warned.body["id"].as_str().unwrap())).await.unwrap();
    assert!(detail["history"][0]["detail"].as_str().unwrap_or_default().contains("budget exceeded"), "{detail}");

    // Bad input changes nothing; removing the budget admits work plainly again.
    let bad = api.put(&path, &json!({"gpu_hours": -1, "action": "stop"})).await.unwrap();
    assert_eq!(bad.status, 422, "{}", bad.body);
    let day = format!("/api/v1/tenants/{team}/budgets/day");
    let bad = api.put(&day, &json!({"gpu_hours": 1, "action": "stop"})).await.unwrap();
    assert_eq!(bad.status, 422, "{}", bad.body);
    assert_eq!(api.delete(&path).await.unwrap().status, 204);
    let plain = submit("batch-e").await;
    assert_eq!((plain.status, plain.body["priority"].as_i64()), (201, Some(40)), "{}", plain.body);
    cp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_notebook_is_warned_then_stopped_under_its_teams_rule_and_its_gpu_goes_to_the_job_that_waits() {
    let (_db, cp) = airtime_tests::fresh_control_plane(&["--idle-reclaim-warning-s", "2"]).await.unwrap();
    let api = cp.api();
    let _agent = airtime_tests::NodeAgent::start(&cp, "idle-node", &["--simulate-gpus", "1:H100:81920"]).await.unwrap();
    airtime_tests::nodes_ready(&api, 1).await.unwrap();
    // The team's rule: GPUs held idle for 2 s are reclaimed (after a 2 s warning).
    let too_long =
        api.post("/api/v1/tenants", &json!({"name": "lazy", "idle_reclaim_after_s": 700_000})).await.unwrap();
    assert_eq!(too_long.status, 422, "{}", too_long.body);
    assert!(api.ok("/api/v1/tenants").await.unwrap().as_array().unwrap().iter().all(|t| t["name"] != "lazy"));
    let team = api.created("/api/v1/tenants", &json!({"name": "notebooks", "idle_reclaim_after_s": 2})).await.unwrap();
    assert_eq!(team["idle_reclaim_after_s"], 2, "{team}");
    // A notebook holds the only GPU and does not use it (the simulated GPU reads 1 %).
    let notebook = api
        .created(
            "/api/v1/workloads",
            &json!({"name": "forgotten-notebook", "tenant": "notebooks", "class": "evaluation",
                    "env": {"SIMULATED_GPU_UTIL": "0.01"}, "resources": {"gpu_count": 1}, "command": ["sleep", "600"]}),
        )
        .await
        .unwrap();
    let notebook = notebook["id"].as_str().unwrap().to_owned();
    workload_reaches(&api, &notebook, "running", WAIT).await.unwrap();
    let job = api
        .created(
            "/api/v1/workloads",
            &json!({"name": "waiting-job", "tenant": "notebooks", "class": "training",
                    "resources": {"gpu_count": 1}, "command": ["sleep", "600"]}),
        )
        .await
        .unwrap();
    let job = job["id"].as_str().unwrap().to_owned();

    // Warned first, then stopped with the reason; the waiting job gets the GPU.
    let stopped = workload_reaches(&api, &notebook, "cancelled", WAIT).await.unwrap();
    let detail = api.ok(&format!("/api/v1/workloads/{notebook}")).await.unwrap();
    let events: Vec<&str> = detail["history"].as_array().unwrap().iter().filter_map(|e| e["detail"].as_str()).collect();
    let warned = events.iter().position(|e| e.contains("its GPUs are released in 2 s unless used"));
    let reclaimed = events.iter().position(|e| e.starts_with("reclaimed, idle: its 1 GPU read below 5 %"));
    assert!(warned.is_some() && reclaimed.is_some() && warned < reclaimed, "{events:?} ({stopped})");
    workload_reaches(&api, &job, "running", WAIT).await.unwrap();
    let audit = api.ok("/api/v1/audit?action=workload.idle_reclaim").await.unwrap();
    assert_eq!(audit[0]["detail"]["name"], "forgotten-notebook", "{audit}");

    // A busy job under the same rule is never warned.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let busy = api.ok(&format!("/api/v1/workloads/{job}")).await.unwrap();
    assert_eq!(busy["state"], "running");
    assert!(!busy["history"].to_string().contains("unless used"), "{busy}");
    cp.stop().await;
}
