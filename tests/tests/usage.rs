//! GPU-time accounting against a hand computation: known telemetry and grants in (written into
//! the real database, at known times in a past hour), exact owned, allocated, busy and idle
//! GPU-hours and their cost out of `GET /api/v1/usage` — from the raw rows, and again from the
//! hourly roll-up after a control plane restart rolls that hour up.

#![allow(clippy::unwrap_used, clippy::float_cmp)]

use std::time::Duration;

use airtime_tests::{ControlPlane, NodeAgent, fresh_control_plane, nodes_ready, one_node_fleet};
use chrono::{DurationRound, TimeDelta, Utc};
use serde_json::{Value, json};

fn close(actual: &Value, expected_s: f64, what: &str) {
    let hours = actual.as_f64().unwrap_or(f64::NAN);
    assert!((hours - expected_s / 3600.0).abs() < 1e-9, "{what}: {hours} GPU-hours, expected {expected_s} s");
}

fn usd(actual: &Value, expected: f64, what: &str) {
    let v = actual.as_f64().unwrap_or(f64::NAN);
    assert!((v - expected).abs() < 1e-9, "{what}: {v} USD, expected {expected}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_hours_and_cost_match_a_hand_computation_raw_and_rolled_up() {
    let (db, cp) = fresh_control_plane(&[]).await.unwrap();
    let api = cp.api();
    // One node, one GPU at 8 USD an hour.
    let agent =
        NodeAgent::start(&cp, "gpu-1", &["--simulate-gpus", "1:H100:81920", "--cost-per-hour", "8"]).await.unwrap();
    nodes_ready(&api, 1).await.unwrap();
    let pool = db.pool().await.unwrap();
    let (gpu_id, tenant_id): (uuid::Uuid, uuid::Uuid) =
        sqlx::query_as("SELECT g.id, (SELECT id FROM tenants WHERE name = 'default') FROM gpus g")
            .fetch_one(&pool)
            .await
            .unwrap();
    let job = |name: &str| json!({"name": name, "class": "training", "command": ["true"], "resources": {"gpu_count": 0, "cpu_millis": 10}});
    let a = api.created("/api/v1/workloads", &job("whole")).await.unwrap()["id"].as_str().unwrap().to_owned();
    let b = api.created("/api/v1/workloads", &job("quarter")).await.unwrap()["id"].as_str().unwrap().to_owned();

    // Three hours ago, from five minutes past the hour: a sample every 2 s for 30 minutes, 50 %
    // busy for the first 15 minutes and 100 % after. The last sample stands for the time an agent
    // may be silent before its node is lost (the harness's --node-lost-after-ms: 3 s).
    let hour = Utc::now().duration_trunc(TimeDelta::hours(1)).unwrap() - TimeDelta::hours(3);
    let t0 = hour + TimeDelta::minutes(5);
    sqlx::query(
        "INSERT INTO gpu_telemetry (gpu_id, at, util) \
         SELECT $1, $2 + make_interval(secs => k * 2), CASE WHEN k < 450 THEN 0.5 ELSE 1.0 END \
         FROM generate_series(0, 900) AS k",
    )
    .bind(gpu_id)
    .bind(t0)
    .execute(&pool)
    .await
    .unwrap();
    // A whole-GPU grant of 90 s (started and ended inside the hour), and a quarter share of 300 s.
    let grant = |workload: &str, milli: i32, from_s: i64, to_s: i64| {
        sqlx::query(
            "INSERT INTO gpu_grant_history (gpu_id, workload_id, tenant_id, class, milli, granted_at, released_at) \
             VALUES ($1, $2::uuid, $3, 'training', $4, $5, $6)",
        )
        .bind(gpu_id)
        .bind(workload.to_owned())
        .bind(tenant_id)
        .bind(milli)
        .bind(t0 + TimeDelta::seconds(from_s))
        .bind(t0 + TimeDelta::seconds(to_s))
    };
    grant(&a, 1000, 600, 690).execute(&pool).await.unwrap();
    grant(&b, 250, 1200, 1500).execute(&pool).await.unwrap();

    // By hand: owned 900 × 2 s + 3 s = 1803 s; busy 450 × 2 × 0.5 + (450 × 2 + 3) × 1.0 = 1353 s;
    // allocated 90 + 300 × 0.25 = 165 s, of which busy 90 × 0.5 + 300 × 1.0 × 0.25 = 120 s;
    // idle 1803 − 1353 = 450 s; cost 1803 s and 450 s at 8 USD an hour.
    let check = |report: &Value| {
        let t = &report["totals"];
        close(&t["owned_gpu_hours"], 1803.0, "owned");
        close(&t["busy_gpu_hours"], 1353.0, "busy");
        close(&t["allocated_gpu_hours"], 165.0, "allocated");
        close(&t["idle_gpu_hours"], 450.0, "idle");
        usd(&t["owned_cost"], 1803.0 / 3600.0 * 8.0, "owned cost");
        usd(&t["idle_cost"], 1.0, "idle cost");
        let group =
            |name: &str| report["groups"].as_array().unwrap().iter().find(|g| g["group"] == name).unwrap().clone();
        let held = group("default");
        close(&held["allocated_gpu_hours"], 165.0, "the tenant's allocated");
        close(&held["busy_gpu_hours"], 120.0, "the tenant's busy");
        close(&held["idle_gpu_hours"], 45.0, "the tenant's held but idle");
        usd(&held["idle_cost"], 0.1, "the tenant's idle cost");
        let unheld = group("(unallocated)");
        close(&unheld["owned_gpu_hours"], 1638.0, "nobody's");
        close(&unheld["idle_gpu_hours"], 405.0, "nobody's idle");
    };
    let range = |step: u32| {
        format!(
            "/api/v1/usage?from={}&to={}&step_s={step}&group_by=tenant",
            hour.to_rfc3339_opts(chrono::SecondsFormat::Secs, true).replace('+', "%2B"),
            (hour + TimeDelta::hours(1)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true).replace('+', "%2B")
        )
    };
    // From the raw rows, in 5-minute steps: the series adds up to the totals.
    let raw = api.ok(&range(300)).await.unwrap();
    check(&raw);
    let series_owned: f64 =
        raw["series"].as_array().unwrap().iter().map(|p| p["owned_gpu_hours"].as_f64().unwrap()).sum();
    assert!((series_owned - 1803.0 / 3600.0).abs() < 1e-9, "{series_owned}");

    // The hour is rolled up by the next control plane's first pass (here: one that starts with the
    // roll-up's progress set back to that hour), and answers the same from the roll-up.
    sqlx::query("UPDATE gpu_usage_progress SET rolled_until = $1").bind(hour).execute(&pool).await.unwrap();
    drop(agent);
    cp.stop().await;
    let cp = ControlPlane::start(&db, &[]).await.unwrap();
    let api = cp.api();
    let rolled = airtime_tests::eventually("the hour to be rolled up", Duration::from_secs(30), || {
        let pool = pool.clone();
        async move {
            let (rows,): (i64,) = sqlx::query_as("SELECT count(*) FROM gpu_usage_hourly WHERE hour = $1")
                .bind(hour)
                .fetch_one(&pool)
                .await?;
            Ok((rows > 0).then_some(rows))
        }
    })
    .await
    .unwrap();
    assert_eq!(rolled, 2, "one row for the tenant and class that held it (both grants), one for the unheld time");
    let from_rollup = api.ok(&range(3600)).await.unwrap();
    check(&from_rollup);
    // Prometheus has the same GPU-seconds as counters, for a scraper holding the metrics token;
    // anyone else sees no tenant's name there.
    let outsider = cp.metrics(false).await.unwrap();
    assert!(!outsider.contains("tenant="), "/metrics names tenants to anyone:\n{outsider}");
    let metrics = cp.metrics(true).await.unwrap();
    for line in [
        r#"airtime_gpu_seconds_total{state="allocated",tenant="default",class="training"} 165"#,
        r#"airtime_gpu_seconds_total{state="busy",tenant="default",class="training"} 120"#,
        r#"airtime_gpu_seconds_total{state="owned",tenant="",class=""} 1638"#,
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} not in:\n{metrics}");
    }

    // A tenant member sees the other tenants' GPU-time only in aggregate; a bad range is refused.
    let member = api.with_token(&cp.user("tenant-b", "b@b.test", "tenant_member").await.unwrap());
    let theirs = member.ok(&range(3600)).await.unwrap();
    let names: Vec<&str> = theirs["groups"].as_array().unwrap().iter().map(|g| g["group"].as_str().unwrap()).collect();
    assert!(names.contains(&"(other tenants)") && !names.contains(&"default"), "{names:?}");
    let bad = api.get("/api/v1/usage?step_s=10").await.unwrap();
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body["error"]["message"].as_str().unwrap().contains("at least 60"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_holding_gpus_it_does_not_use_is_listed_with_what_it_costs() {
    let (_db, cp) = fresh_control_plane(&["--idle-after-s", "2"]).await.unwrap();
    let api = cp.api();
    let _agent =
        NodeAgent::start(&cp, "gpu-1", &["--simulate-gpus", "2:H100:81920", "--cost-per-hour", "16"]).await.unwrap();
    nodes_ready(&api, 1).await.unwrap();
    let submit = |name: &str, env: Value| {
        json!({"name": name, "class": "training", "command": ["sleep", "120"], "env": env,
               "resources": {"gpu_count": 1, "cpu_millis": 10}})
    };
    // A simulated GPU can be told to model a held-but-idle workload.
    let idle = api
        .created("/api/v1/workloads", &submit("forgotten-notebook", json!({"SIMULATED_GPU_UTIL": "0.01"})))
        .await
        .unwrap();
    let busy = api.created("/api/v1/workloads", &submit("training", json!({}))).await.unwrap();
    for w in [&idle, &busy] {
        airtime_tests::workload_reaches(&api, w["id"].as_str().unwrap(), "running", Duration::from_secs(30))
            .await
            .unwrap();
    }
    let listed = airtime_tests::eventually("the idle workload to be listed", Duration::from_secs(30), || {
        let api = api.clone();
        async move {
            let list = api.ok("/api/v1/fleet/held-idle").await?;
            Ok(list.as_array().filter(|l| !l.is_empty()).cloned())
        }
    })
    .await
    .unwrap();
    assert_eq!(listed.len(), 1, "only the idle one: {listed:?}");
    let entry = &listed[0];
    assert_eq!(entry["workload_id"], idle["id"]);
    assert_eq!((entry["gpus"].as_i64(), entry["tenant"].as_str()), (Some(1), Some("default")));
    assert!(entry["idle_for_s"].as_f64().unwrap() >= 2.0, "{entry}");
    // 16 USD an hour for the node's two GPUs: 8 an hour for this one, for the seconds it held it.
    let held_s = entry["cost_so_far"].as_f64().unwrap() / 8.0 * 3600.0;
    assert!(held_s > 1.0 && held_s < 120.0, "{entry}");
    // Another tenant's member sees none of it.
    let stranger = api.with_token(&cp.user("tenant-b", "b@b.test", "tenant_member").await.unwrap());
    assert_eq!(stranger.ok("/api/v1/fleet/held-idle").await.unwrap(), json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_opens_a_gpus_history_and_sees_its_telemetry_bucketed_by_the_step_asked_for() {
    let (db, cp, _agent) = one_node_fleet("gpu-1", &["--simulate-gpus", "1:H100:81920"]).await.unwrap();
    let api = cp.api();
    let pool = db.pool().await.unwrap();
    let (gpu_id,): (uuid::Uuid,) = sqlx::query_as("SELECT id FROM gpus").fetch_one(&pool).await.unwrap();

    // Two hours ago, on a minute boundary: a sample every 2 s for two minutes — the first minute
    // 20 % busy at 60 °C using 1000 MB, the second 80 % at 70 °C using up to 3000 MB.
    let t0 = Utc::now().duration_trunc(TimeDelta::minutes(1)).unwrap() - TimeDelta::hours(2);
    sqlx::query(
        "INSERT INTO gpu_telemetry (gpu_id, at, util, memory_used_mb, temperature_c, power_w) \
         SELECT $1, $2 + make_interval(secs => k * 2), \
                CASE WHEN k < 30 THEN 0.2 ELSE 0.8 END, CASE WHEN k < 30 THEN 1000 ELSE 2000 + k END, \
                CASE WHEN k < 30 THEN 60 ELSE 70 END, 300 \
         FROM generate_series(0, 59) AS k",
    )
    .bind(gpu_id)
    .bind(t0)
    .execute(&pool)
    .await
    .unwrap();
    let range = |from: chrono::DateTime<Utc>, to: chrono::DateTime<Utc>| {
        format!(
            "from={}&to={}",
            from.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            to.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        )
        .replace('+', "%2B")
    };
    let path = format!(
        "/api/v1/gpus/{gpu_id}/history?{}&step_s=60",
        range(t0 - TimeDelta::minutes(1), t0 + TimeDelta::minutes(3))
    );
    let history = api.ok(&path).await.unwrap();
    assert_eq!(history["step_s"], 60);
    let points = history["points"].as_array().unwrap();
    assert_eq!(points.len(), 2, "one point per minute that has samples: {history}");
    for (p, util, temp, memory) in [(&points[0], 0.2, 60.0, 1000), (&points[1], 0.8, 70.0, 2059)] {
        assert_eq!(p["samples"], 30, "{p}");
        assert!((p["util"].as_f64().unwrap() - util).abs() < 1e-6, "{p}");
        assert!((p["temperature_c"].as_f64().unwrap() - temp).abs() < 1e-6, "{p}");
        assert_eq!(p["memory_used_mb"], memory, "the most memory used in the minute: {p}");
        assert!((p["power_w"].as_f64().unwrap() - 300.0).abs() < 1e-6, "{p}");
    }
    let first = chrono::DateTime::parse_from_rfc3339(points[0]["at"].as_str().unwrap()).unwrap();
    assert_eq!(first, t0, "a point is the start of its bucket");

    // The live GPU's own samples arrive too, without asking for a range.
    airtime_tests::eventually("the agent's telemetry in the last hour", Duration::from_secs(20), || {
        let (api, path) = (api.clone(), format!("/api/v1/gpus/{gpu_id}/history"));
        async move { Ok(api.ok(&path).await?["points"].as_array().is_some_and(|p| !p.is_empty()).then_some(())) }
    })
    .await
    .unwrap();

    // What cannot be answered is refused with a reason; an unknown GPU is not found.
    let empty = api.get(&format!("/api/v1/gpus/{gpu_id}/history?{}", range(t0, t0))).await.unwrap();
    assert_eq!(empty.status, 400, "{}", empty.body);
    let fine = api.get(&format!("/api/v1/gpus/{gpu_id}/history?step_s=1")).await.unwrap();
    assert_eq!(fine.status, 400, "{}", fine.body);
    assert!(fine.body["error"]["message"].as_str().unwrap_or_default().contains("widen step_s"), "{}", fine.body);
    let unknown = api.get(&format!("/api/v1/gpus/{}/history", uuid::Uuid::nil())).await.unwrap();
    assert_eq!(unknown.status, 404, "{}", unknown.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_opens_a_nodes_history_and_sees_its_cpu_and_memory_bucketed_by_the_step_asked_for() {
    let (db, cp, _agent) = one_node_fleet("gpu-1", &["--simulate-gpus", "2:H100:81920"]).await.unwrap();
    let api = cp.api();
    let pool = db.pool().await.unwrap();
    let (node_id, cpu_millis, memory_mb): (uuid::Uuid, i32, i64) =
        sqlx::query_as("SELECT id, cpu_millis, memory_mb FROM nodes").fetch_one(&pool).await.unwrap();

    // Two hours ago, on a minute boundary: a sample every 2 s for two minutes — the first minute
    // at 10 % CPU using 4000 MB, the second at 10 % .. 39 % (k - 20 %) using 8000 + k MB.
    let t0 = Utc::now().duration_trunc(TimeDelta::minutes(1)).unwrap() - TimeDelta::hours(2);
    sqlx::query(
        "INSERT INTO node_telemetry (node_id, at, cpu_util, memory_used_mb) \
         SELECT $1, $2 + make_interval(secs => k * 2), \
                CASE WHEN k < 30 THEN 0.1 ELSE (k - 20) / 100.0 END, CASE WHEN k < 30 THEN 4000 ELSE 8000 + k END \
         FROM generate_series(0, 59) AS k",
    )
    .bind(node_id)
    .bind(t0)
    .execute(&pool)
    .await
    .unwrap();
    let range = |from: chrono::DateTime<Utc>, to: chrono::DateTime<Utc>| {
        format!(
            "from={}&to={}",
            from.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            to.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        )
        .replace('+', "%2B")
    };
    let path = format!(
        "/api/v1/nodes/{node_id}/history?{}&step_s=60",
        range(t0 - TimeDelta::minutes(1), t0 + TimeDelta::minutes(3))
    );
    // A tenant's member reads the fleet's telemetry as every fleet read allows.
    let member = api.with_token(&cp.user("tenant-b", "b@b.test", "tenant_member").await.unwrap());
    let history = member.ok(&path).await.unwrap();
    assert_eq!(history["step_s"], 60);
    assert_eq!(history["cpu_millis"], cpu_millis);
    assert_eq!(history["memory_mb"], memory_mb);
    let points = history["points"].as_array().unwrap();
    assert_eq!(points.len(), 2, "one point per minute that has samples: {history}");
    // By hand: minute two's CPU is the mean of (k - 20) % for k = 30..59, (10 + 39) / 2 = 24.5 %;
    // its memory peaks at 8059 MB and averages 8000 + 44.5.
    for (p, cpu, peak, mean) in [(&points[0], 0.1, 4000, 4000.0), (&points[1], 0.245, 8059, 8044.5)] {
        assert_eq!(p["samples"], 30, "{p}");
        assert!((p["cpu_util"].as_f64().unwrap() - cpu).abs() < 1e-6, "{p}");
        assert_eq!(p["memory_used_mb"], peak, "the most memory used in the minute: {p}");
        assert!((p["memory_used_mean_mb"].as_f64().unwrap() - mean).abs() < 1e-6, "{p}");
    }
    let first = chrono::DateTime::parse_from_rfc3339(points[0]["at"].as_str().unwrap()).unwrap();
    assert_eq!(first, t0, "a point is the start of its bucket");
    // The live node's own samples arrive too, without asking for a range.
    airtime_tests::eventually("the agent's node telemetry in the last hour", Duration::from_secs(20), || {
        let (api, path) = (api.clone(), format!("/api/v1/nodes/{node_id}/history"));
        async move { Ok(api.ok(&path).await?["points"].as_array().is_some_and(|p| !p.is_empty()).then_some(())) }
    })
    .await
    .unwrap();

    // The node's GPUs come with the node alone, not with the whole fleet.
    let node = api.ok(&format!("/api/v1/nodes/{node_id}")).await.unwrap();
    assert_eq!(node["gpus"].as_array().unwrap().len(), 2, "{node}");

    // What cannot be answered is refused with a reason; an unknown node is not found.
    let empty = api.get(&format!("/api/v1/nodes/{node_id}/history?{}", range(t0, t0))).await.unwrap();
    assert_eq!(empty.status, 400, "{}", empty.body);
    let fine = api.get(&format!("/api/v1/nodes/{node_id}/history?step_s=1")).await.unwrap();
    assert_eq!(fine.status, 400, "{}", fine.body);
    assert!(fine.body["error"]["message"].as_str().unwrap_or_default().contains("widen step_s"), "{}", fine.body);
    let junk = api.get(&format!("/api/v1/nodes/{node_id}/history?step_s=ten")).await.unwrap();
    assert_eq!(junk.status, 400, "{}", junk.body);
    let unknown = api.get(&format!("/api/v1/nodes/{}/history", uuid::Uuid::nil())).await.unwrap();
    assert_eq!(unknown.status, 404, "{}", unknown.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_summary_counts_as_allocated_only_the_gpus_a_workload_holds() {
    let (_db, cp) = fresh_control_plane(&[]).await.unwrap();
    let api = cp.api();
    // Two GPUs at 8 USD an hour for the node: 4 USD each.
    let _agent =
        NodeAgent::start(&cp, "gpu-1", &["--simulate-gpus", "2:H100:81920", "--cost-per-hour", "8"]).await.unwrap();
    nodes_ready(&api, 1).await.unwrap();
    let idle = api.ok("/api/v1/fleet/summary").await.unwrap();
    assert_eq!((idle["gpus"].as_i64(), idle["gpus_held"].as_i64()), (Some(2), Some(0)), "{idle}");
    assert_eq!(idle["gpus_allocated"], 0.0, "nothing holds a GPU: {idle}");
    usd(&idle["unallocated_cost_per_hour"], 8.0, "both GPUs unheld");

    // One workload holds one of them.
    let job = json!({"name": "one", "class": "training", "command": ["sleep", "600"], "resources": {"gpu_count": 1}});
    let id = api.created("/api/v1/workloads", &job).await.unwrap()["id"].as_str().unwrap().to_owned();
    airtime_tests::workload_reaches(&api, &id, "running", Duration::from_secs(30)).await.unwrap();
    let held = api.ok("/api/v1/fleet/summary").await.unwrap();
    assert_eq!(held["gpus_held"], 1, "{held}");
    assert_eq!(held["gpus_allocated"], 1.0, "{held}");
    usd(&held["unallocated_cost_per_hour"], 4.0, "one GPU unheld");
    usd(&held["cost_per_hour"], 8.0, "the node");
    api.created(&format!("/api/v1/workloads/{id}/cancel"), &Value::Null).await.unwrap();
}
