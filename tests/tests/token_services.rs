//! Inference priced per token, story by story: real control plane and agent processes, real
//! PostgreSQL, and replicas that are real processes serving HTTP — the test server that speaks
//! vLLM's metric format (`tests/src/bin/vllm-format-server.rs`; no real inference server installs
//! here). The agent reads each replica's `/health` and `/metrics` beside it; nothing reports load.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::path::Path;
use std::time::Duration;

use airtime_tests::{Fleet, bin, eventually};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

/// The traffic a load balancer sends the service: `rate` requests a second, split over the ready
/// replicas (each brings 200 prompt tokens and asks for 300).
fn set_rate(traffic: &Path, rate: f64) {
    std::fs::write(traffic.join("rate"), rate.to_string()).unwrap();
}

fn server(traffic: &Path, extra: &[&str]) -> Vec<String> {
    let mut command =
        vec![bin("vllm-format-server").display().to_string(), "--dir".into(), traffic.display().to_string()];
    command.extend(extra.iter().map(|s| (*s).to_owned()));
    command
}

async fn detail(f: &Fleet, service: &str) -> Value {
    f.api.ok(&format!("/api/v1/services/{service}")).await.unwrap()
}

/// Waits until `check` holds of the service's detail, and returns it.
async fn service_until(f: &Fleet, service: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let (api, path) = (f.api.clone(), format!("/api/v1/services/{service}"));
    let check = &check;
    let last = std::sync::Mutex::new(Value::Null);
    let last_seen = &last;
    eventually(what, WAIT, || {
        let (api, path) = (api.clone(), path.clone());
        async move {
            let s = api.ok(&path).await?;
            let done = check(&s);
            *last_seen.lock().unwrap() = s.clone();
            Ok(done.then_some(s))
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; the service last: {}", last.lock().unwrap()))
}

fn variant<'a>(s: &'a Value, name: &str) -> &'a Value {
    s["serving_report"]["variants"].as_array().unwrap().iter().find(|v| v["variant"] == name).unwrap()
}

fn runs(s: &Value, gpu: i64, cpu: i64) -> bool {
    s["running_gpu_replicas"] == gpu
        && s["running_cpu_replicas"] == cpu
        && s["pending_replicas"] == 0
        && s["desired_gpu_replicas"] == gpu
        && s["desired_cpu_replicas"] == cpu
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_priced_service_scales_on_its_replicas_queue_counts_a_replica_once_it_answers_and_prices_its_tokens() {
    // One GPU node at 2 an hour for its two GPUs: a GPU-hour costs 1.
    let f = Fleet::start(&[("gpu-node", &["--simulate-gpus", "2:L4:24576", "--cost-per-hour", "2"])]).await;
    let traffic = f.dir.join("chat-traffic");
    std::fs::create_dir_all(&traffic).unwrap();
    set_rate(&traffic, 0.5);
    // A replica serves 1,000 tokens a second at most and takes 4 s to load its model.
    let created = f
        .api
        .created(
            "/api/v1/services",
            &json!({"name": "chat", "class": "realtime_inference", "capacity": 1000.0,
                    "min_replicas": 1, "max_replicas": 2,
                    "behavior": {"scale_up_window_s": 0, "scale_down_window_s": 0, "stale_after_s": 10},
                    "serving": {"objective": {"ttft_p95_ms": 1000.0, "tpot_p95_ms": 100.0}},
                    "replica": {"command": server(&traffic, &["--capacity-tokens-per-s", "1000", "--ready-after-ms", "4000"]),
                                "resources": {"gpu_count": 1}}}),
        )
        .await
        .unwrap();
    assert_eq!(created["metric"], "tokens_per_second", "{created}");
    let chat = created["id"].as_str().unwrap().to_owned();

    // Its replica runs, but is not counted as serving before its readiness endpoint answers.
    let starting = service_until(&f, &chat, "the first replica running", |s| s["running_gpu_replicas"] == 1).await;
    let gpu = variant(&starting, "gpu");
    assert_eq!((gpu["replicas"].clone(), gpu["ready_replicas"].clone()), (json!(1), json!(0)), "{starting}");
    let ready = service_until(&f, &chat, "the replica ready", |s| variant(s, "gpu")["ready_replicas"] == 1).await;
    assert_eq!(ready["serving_report"]["objective"]["ttft_p95_ms"], 1000.0);

    // 5 requests a second of 500 tokens (2,500 tokens/s) queue on one replica: a second starts.
    set_rate(&traffic, 5.0);
    let up = service_until(&f, &chat, "a second replica for the queue", |s| runs(s, 2, 0)).await;
    let reason = up["scale_events"][0]["reason"].as_str().unwrap();
    assert!(reason.starts_with("scale up: demand") && reason.contains("tokens/s"), "{up}");
    let serving = service_until(&f, &chat, "tokens read from both replicas", |s| {
        variant(s, "gpu")["ready_replicas"] == 2 && variant(s, "gpu")["tokens_per_s"].as_f64().unwrap() > 500.0
    })
    .await;
    assert!(variant(&serving, "gpu")["ttft_p95_ms"].as_f64().is_some(), "{serving}");

    // The traffic stops: the replicas go idle and the service scales back to its minimum.
    set_rate(&traffic, 0.0);
    service_until(&f, &chat, "back to one replica when idle", |s| runs(s, 1, 0)).await;

    // Cost per token in the API is the hand computation from the usage rows: the GPU replicas'
    // grants over the last hour at a GPU-hour of 1, over the tokens their reads counted. The cost
    // grows while the replica holds its GPU, so the API's answer lies between two hand
    // computations made just before and just after it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pool = f.pool().await;
    let hand = || async {
        let (cost, tokens): (f64, f64) = sqlx::query_as(
            "SELECT (SELECT COALESCE(sum(extract(epoch FROM least(COALESCE(h.released_at, now()), now()) \
                        - greatest(h.granted_at, now() - interval '1 hour')) / 3600.0 * h.milli / 1000.0 * 1.0), 0) \
                     FROM gpu_grant_history h JOIN workloads w ON w.id = h.workload_id WHERE w.service_id = $1)::float8, \
                    (SELECT COALESCE(sum(prompt_tokens + generation_tokens), 0) FROM replica_samples \
                     WHERE service_id = $1)::float8",
        )
        .bind(uuid::Uuid::parse_str(&chat).unwrap())
        .fetch_one(&pool)
        .await
        .unwrap();
        (cost, tokens)
    };
    let before = hand().await;
    let priced = detail(&f, &chat).await;
    let after = hand().await;
    assert_eq!(before.1, after.1, "no tokens were served meanwhile");
    assert!(before.1 > 1000.0, "tokens were served: {before:?}");
    let api_cost = priced["serving_report"]["cost"].as_f64().unwrap();
    assert!(before.0 - 1e-9 <= api_cost && api_cost <= after.0 + 1e-9, "{before:?} ≤ {api_cost} ≤ {after:?}");
    assert_eq!(priced["serving_report"]["tokens"].as_f64().unwrap(), before.1);
    let per_million = priced["serving_report"]["cost_per_million_tokens"].as_f64().unwrap();
    assert!(
        before.0 / before.1 * 1e6 - 1e-9 <= per_million && per_million <= after.0 / after.1 * 1e6 + 1e-9,
        "{per_million} per million tokens against {before:?} and {after:?}"
    );
    assert!(priced["serving_report"]["gpu_only_cost_per_million_tokens"].as_f64().is_some(), "{priced}");
    assert_eq!(priced["serving_report"]["history"].as_array().unwrap().len(), 12, "five-minute points over the hour");

    // Prometheus sees the tokens, the objective and the price.
    let metrics = f.cp.metrics(true).await.unwrap();
    for series in [
        r#"airtime_service_tokens_per_second{service="chat",tenant="default",variant="gpu"}"#,
        r#"airtime_service_objective_p95_seconds{service="chat",tenant="default",kind="ttft"} 1"#,
        r#"airtime_service_cost_per_million_tokens{service="chat",tenant="default",variant="all"}"#,
    ] {
        assert!(metrics.contains(series), "{series} in {metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_settles_on_its_cheaper_cpu_variant_while_it_holds_the_objective_and_moves_to_a_quarter_gpu_when_it_breaks()
 {
    // A CPU node at 0.4 an hour; a GPU node at 8 an hour for its one time-sliced GPU.
    let f = Fleet::start(&[
        ("cpu-node", &["--no-nvml", "--cost-per-hour", "0.4"]),
        ("gpu-node", &["--simulate-gpus", "1:L4:24576", "--gpu-sharing", "time-slicing", "--cost-per-hour", "8"]),
    ])
    .await;
    let nodes = f.api.ok("/api/v1/nodes").await.unwrap();
    let cpu_node = nodes.as_array().unwrap().iter().find(|n| n["name"] == "cpu-node").unwrap().clone();
    let half = cpu_node["cpu_millis"].as_i64().unwrap() / 2;
    let traffic = f.dir.join("embed-traffic");
    std::fs::create_dir_all(&traffic).unwrap();
    set_rate(&traffic, 0.4);
    let cpu_slowdown = traffic.join("cpu-slowdown");
    // A CPU replica (half the CPU node: 0.1 an hour) serves 300 tokens/s; a quarter of the GPU
    // (2 an hour) serves 1,000. Per token the CPU is cheaper.
    let embed = f
        .api
        .created(
            "/api/v1/services",
            &json!({"name": "embed", "class": "realtime_inference", "capacity": 1000.0,
                    "min_replicas": 1, "max_replicas": 2,
                    "behavior": {"scale_up_window_s": 0, "scale_down_window_s": 0, "stale_after_s": 10},
                    "serving": {"objective": {"ttft_p95_ms": 1000.0, "tpot_p95_ms": 100.0}},
                    "replica": {"command": server(&traffic, &["--capacity-tokens-per-s", "1000"]),
                                "resources": {"gpu_count": 1, "gpu_milli": 250, "gpu_memory_mb": 4096}},
                    "cpu_variant": {"command": server(&traffic, &["--capacity-tokens-per-s", "300",
                                                                  "--slowdown-file", &cpu_slowdown.display().to_string()]),
                                    "cpu_millis": half, "memory_mb": 64, "capacity": 300.0}}),
        )
        .await
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // 200 tokens/s: one CPU replica holds the objective; the GPU stays free.
    let settled = service_until(&f, &embed, "one CPU replica serving", |s| {
        runs(s, 0, 1)
            && variant(s, "cpu")["ready_replicas"] == 1
            && variant(s, "cpu")["tokens_per_s"].as_f64().unwrap() > 0.0
    })
    .await;
    assert!(variant(&settled, "cpu")["pressure"].as_f64().is_none_or(|p| p <= 1.0), "the CPU holds it: {settled}");

    // The CPU replica slows down twentyfold (a longer model): its latency breaks the objective,
    // what it sustains at the objective is learned to be little, and per token it is now dearer
    // than a quarter GPU: a GPU replica starts, and the CPU replica drains once it serves.
    std::fs::write(&cpu_slowdown, "20").unwrap();
    let moved = service_until(&f, &embed, "the service moved to a quarter GPU", |s| runs(s, 1, 0)).await;
    let cpu = variant(&moved, "cpu");
    assert!(
        cpu["capacity"]["basis"].as_str().unwrap().starts_with("below the least served while breaking the objective"),
        "{moved}"
    );
    assert!(cpu["capacity"]["tokens_per_s"].as_f64().unwrap() < 300.0, "{moved}");
    let replicas = f.api.ok(&format!("/api/v1/workloads?service_id={embed}&state=running")).await.unwrap();
    assert_eq!(replicas[0]["replica_variant"], "gpu", "{replicas}");
}
