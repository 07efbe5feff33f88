//! Quotas a platform team can change (issue 40): a tenant's guarantee raised with the CLI lets its
//! waiting work start at the next cycle — previewed first, audited with what it was and what it
//! became — and lowered again, reclaims nothing by itself: what runs keeps running while nobody
//! needs its GPUs. Real control plane, agent, CLI and PostgreSQL.

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
