//! Elastic inference services, story by story: real control plane and agent processes (simulated
//! GPUs, a CPU-only node), real PostgreSQL, the built-in `slo-first` as Wasm. A reporter task posts
//! the service's load every half second with the service's own token, as a gateway would.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use airtime_tests::{Api, Fleet, eventually, workload_reaches};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

/// What the service stories ask of a fleet beyond the common steps.
trait ServiceSteps {
    /// Creates a service and returns its id.
    async fn service(&self, body: Value) -> String;
    /// A gateway token for the service.
    async fn token(&self, service: &str) -> String;
    /// Waits until the service runs exactly `gpu` GPU and `cpu` CPU replicas with nothing pending,
    /// and returns it.
    async fn runs(&self, service: &str, gpu: i64, cpu: i64) -> Value;
    /// The service's replicas in `state`.
    async fn replicas(&self, service: &str, state: &str) -> Vec<Value>;
}

impl ServiceSteps for Fleet {
    async fn service(&self, body: Value) -> String {
        let s = self.api.created("/api/v1/services", &body).await.unwrap();
        s["id"].as_str().unwrap().to_owned()
    }

    async fn token(&self, service: &str) -> String {
        let t =
            self.api.created(&format!("/api/v1/services/{service}/tokens"), &json!({"name": "gateway"})).await.unwrap();
        t["token"].as_str().unwrap().to_owned()
    }

    async fn runs(&self, service: &str, gpu: i64, cpu: i64) -> Value {
        let (api, path) = (self.api.clone(), format!("/api/v1/services/{service}"));
        eventually(&format!("service {service} running {gpu} GPU and {cpu} CPU replicas"), WAIT, || {
            let (api, path) = (api.clone(), path.clone());
            async move {
                let s = api.ok(&path).await?;
                let done = s["running_gpu_replicas"] == gpu
                    && s["running_cpu_replicas"] == cpu
                    && s["pending_replicas"] == 0
                    && s["desired_gpu_replicas"] == gpu
                    && s["desired_cpu_replicas"] == cpu;
                Ok(done.then_some(s))
            }
        })
        .await
        .unwrap()
    }

    async fn replicas(&self, service: &str, state: &str) -> Vec<Value> {
        let list = self.api.ok(&format!("/api/v1/workloads?service_id={service}&state={state}")).await.unwrap();
        list.as_array().unwrap().clone()
    }
}

/// Posts `load` (requests/s) for a service every half second until dropped; `set` changes it.
struct Reporter {
    load: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Reporter {
    fn start(api: Api, service: &str, load: f64) -> Reporter {
        let shared = Arc::new(AtomicU64::new(load.to_bits()));
        let value = shared.clone();
        let path = format!("/api/v1/services/{service}/load");
        let task = tokio::spawn(async move {
            loop {
                let rps = f64::from_bits(value.load(Ordering::SeqCst));
                let answer = api.post(&path, &json!({"requests_per_s": rps, "p95_latency_ms": 120.0})).await;
                assert!(answer.as_ref().is_ok_and(|a| a.status == 202), "a load report was refused");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        Reporter { load: shared, task }
    }

    fn set(&self, load: f64) {
        self.load.store(load.to_bits(), Ordering::SeqCst);
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn sleeper(name: &str) -> Vec<String> {
    vec!["sh".into(), "-c".into(), format!("exec sleep 600 # {name}")]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rising_traffic_scales_a_service_up_by_preempting_training_which_resumes_when_traffic_falls() {
    let f = Fleet::start(&[("gpu-node", &["--simulate-gpus", "2:H100:81920"])]).await;
    let training = f
        .api
        .created(
            "/api/v1/workloads",
            &json!({"name": "finetune", "class": "fine_tuning", "command": sleeper("finetune"),
                    "preemptible": true, "checkpointable": true, "resources": {"gpu_count": 1}}),
        )
        .await
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    workload_reaches(&f.api, &training, "running", WAIT).await.unwrap();

    // A chat service: one replica serves 10 req/s; it starts with its minimum on the free GPU.
    let chat = f
        .service(json!({"name": "chat", "class": "realtime_inference", "capacity": 10.0,
                        "min_replicas": 1, "max_replicas": 2,
                        "behavior": {"scale_up_window_s": 0, "scale_down_window_s": 2, "stale_after_s": 10},
                        "replica": {"command": sleeper("chat"), "resources": {"gpu_count": 1}}}))
        .await;
    let reporter = Reporter::start(f.api.with_token(&f.token(&chat).await), &chat, 6.0);
    f.runs(&chat, 1, 0).await;

    // Traffic rises to 15 req/s: a second replica, on the GPU the fine-tuning job held.
    reporter.set(15.0);
    let up = f.runs(&chat, 2, 0).await;
    assert_eq!(
        up["scale_reason"], "hold: demand 15 req/s over 2 replicas at 10 req/s each",
        "the latest word explains the replicas: {up}"
    );
    let detail = f.api.ok(&format!("/api/v1/services/{chat}")).await.unwrap();
    let event = &detail["scale_events"][0];
    assert_eq!(event["reason"], "scale up: demand 15 req/s over 2 replicas at 10 req/s each", "{detail}");
    assert_eq!((event["from_gpu"].clone(), event["to_gpu"].clone()), (json!(1), json!(2)));
    let preempted = f.api.ok(&format!("/api/v1/workloads/{training}")).await.unwrap();
    assert!(
        preempted["state"] == "pending" || preempted["state"] == "preempting",
        "the checkpointable job gave its GPU to the customer-facing burst: {preempted}"
    );
    assert!(preempted["preempted_reason"].as_str().unwrap_or_default().contains("real-time inference"), "{preempted}");

    // Traffic falls: the newest replica drains and the fine-tuning job resumes on its GPU.
    reporter.set(4.0);
    f.runs(&chat, 1, 0).await;
    let resumed = workload_reaches(&f.api, &training, "running", WAIT).await.unwrap();
    assert_eq!(resumed["attempt"], 2, "{resumed}");
    let drained = f.replicas(&chat, "cancelled").await;
    assert_eq!(drained.len(), 1, "{drained:?}");
    let history = f.api.ok(&format!("/api/v1/workloads/{}", drained[0]["id"].as_str().unwrap())).await.unwrap();
    let last = history["history"].as_array().unwrap().last().unwrap().clone();
    assert!(last["detail"].as_str().unwrap_or_default().contains("scale down"), "{history}");

    // Prometheus sees the replicas and the demand.
    let metrics = f.cp.metrics(true).await.unwrap();
    assert!(
        metrics.contains(r#"airtime_service_replicas{service="chat",tenant="default",variant="gpu",kind="desired"} 1"#),
        "{metrics}"
    );
    assert!(metrics.contains(r#"airtime_service_load{service="chat",tenant="default"} 4"#), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_light_model_serves_from_cpu_nodes_spills_to_a_gpu_only_at_the_peak_and_comes_back() {
    let f = Fleet::start(&[("cpu-node", &["--no-nvml"]), ("gpu-node", &["--simulate-gpus", "1:L4:24576"])]).await;
    // Two CPU replicas fill the CPU node, whatever its size.
    let nodes = f.api.ok("/api/v1/nodes").await.unwrap();
    let cpu_node = nodes.as_array().unwrap().iter().find(|n| n["name"] == "cpu-node").unwrap().clone();
    let half = cpu_node["cpu_millis"].as_i64().unwrap() / 2;
    let embed = f
        .service(json!({"name": "embed", "class": "realtime_inference", "capacity": 20.0,
                        "min_replicas": 1, "max_replicas": 4,
                        "behavior": {"scale_up_window_s": 0, "scale_down_window_s": 0, "stale_after_s": 10},
                        "replica": {"command": sleeper("embed-gpu"), "resources": {"gpu_count": 1}},
                        "cpu_variant": {"command": sleeper("embed-cpu"), "cpu_millis": half, "memory_mb": 64,
                                        "capacity": 5.0}}))
        .await;
    let reporter = Reporter::start(f.api.with_token(&f.token(&embed).await), &embed, 8.0);

    // 8 req/s: two CPU replicas carry it, on the CPU node; the GPU stays free.
    f.runs(&embed, 0, 2).await;
    for replica in f.replicas(&embed, "running").await {
        assert_eq!(replica["node_id"], cpu_node["id"], "{replica}");
        assert_eq!(replica["replica_variant"], "cpu");
    }

    // The peak, 20 req/s: the CPU node holds no third replica, so one GPU replica takes the rest.
    reporter.set(20.0);
    let peak = f.runs(&embed, 1, 2).await;
    assert!(
        peak["scale_reason"].as_str().unwrap().contains("2 CPU replicas at 5 req/s each and 1 GPU replica at 20 req/s"),
        "{peak}"
    );

    // Back to 8 req/s: the GPU replica drains, the CPU replicas carry it again.
    reporter.set(8.0);
    f.runs(&embed, 0, 2).await;
    // The drained replica stops within its grace period, and its GPU is free again.
    let api = f.api.clone();
    eventually("the GPU to be free again", WAIT, || {
        let api = api.clone();
        async move {
            let gpus = api.ok("/api/v1/gpus").await?;
            Ok(gpus.as_array().unwrap().iter().all(|g| g["held_milli"] == 0).then_some(()))
        }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_never_drops_below_its_minimum_and_holds_its_replicas_when_reports_stop() {
    let f = Fleet::start(&[("gpu-node", &["--simulate-gpus", "4:A100:40960"])]).await;
    let search = f
        .service(json!({"name": "search", "class": "realtime_inference", "capacity": 10.0,
                        "min_replicas": 2, "max_replicas": 4,
                        "behavior": {"scale_up_window_s": 0, "scale_down_window_s": 0, "stale_after_s": 5},
                        "replica": {"command": sleeper("search"), "resources": {"gpu_count": 1}}}))
        .await;
    // No report yet: its minimum runs.
    let first = f.runs(&search, 2, 0).await;
    assert!(first["scale_reason"].as_str().unwrap().starts_with("no load report yet: holding 2 replicas"), "{first}");

    let reporter = Reporter::start(f.api.with_token(&f.token(&search).await), &search, 30.0);
    f.runs(&search, 3, 0).await;
    // The last report said 1 req/s, then the reports stopped: held at 3, never drained on silence.
    reporter.set(1.0);
    tokio::time::sleep(Duration::from_millis(700)).await;
    drop(reporter);
    let path = format!("/api/v1/services/{search}");
    let held = eventually("the stale reports to be noticed", WAIT, || {
        let (api, path) = (f.api.clone(), path.clone());
        async move {
            let s = api.ok(&path).await?;
            Ok(s["scale_reason"].as_str().unwrap_or_default().starts_with("no load report for").then_some(s))
        }
    })
    .await
    .unwrap();
    assert!(held["demand"].is_null(), "{held}");
    let replicas = held["running_gpu_replicas"].as_i64().unwrap();
    assert!(replicas >= 2, "never below the minimum: {held}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let later = f.api.ok(&path).await.unwrap();
    assert_eq!(later["running_gpu_replicas"], replicas, "held while silent: {later}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicas_token_reports_its_own_service_and_can_do_nothing_else() {
    let f = Fleet::start(&[]).await;
    let spec = |name: &str| {
        json!({"name": name, "class": "batch_inference", "capacity": 10.0, "min_replicas": 0, "max_replicas": 2,
               "replica": {"command": sleeper(name), "resources": {"gpu_count": 1}}})
    };
    let mine = f.service(spec("summarise")).await;
    let other = f.service(spec("translate")).await;
    let token = f.token(&mine).await;
    assert!(token.starts_with("st_"), "{token}");
    let replica = f.api.with_token(&token);

    let ok = replica.post(&format!("/api/v1/services/{mine}/load"), &json!({"requests_per_s": 3.0})).await.unwrap();
    assert_eq!(ok.status, 202, "{}", ok.body);
    assert_eq!(ok.body["value"], 3.0);

    // Another service (even of the same tenant) is not found; everything else is forbidden.
    let theirs =
        replica.post(&format!("/api/v1/services/{other}/load"), &json!({"requests_per_s": 3.0})).await.unwrap();
    assert_eq!(theirs.status, 404, "{}", theirs.body);
    for path in ["/api/v1/services", "/api/v1/workloads", &format!("/api/v1/services/{mine}"), "/api/v1/nodes"] {
        let answer = replica.get(path).await.unwrap();
        assert_eq!(answer.status, 403, "GET {path}: {}", answer.body);
        assert!(answer.body["error"]["message"].as_str().unwrap().contains("only report its service's load"));
    }
    let submit = replica
        .post("/api/v1/workloads", &json!({"name": "x", "class": "evaluation", "command": ["true"]}))
        .await
        .unwrap();
    assert_eq!(submit.status, 403, "{}", submit.body);

    // A report in the wrong metric is refused and nothing is written.
    let wrong =
        replica.post(&format!("/api/v1/services/{mine}/load"), &json!({"concurrent_requests": 3.0})).await.unwrap();
    assert_eq!(wrong.status, 422, "{}", wrong.body);
    assert!(wrong.body["error"]["message"].as_str().unwrap().contains("send requests_per_s"), "{}", wrong.body);

    // Another tenant's member cannot report for it either, and does not learn it exists.
    let outsider = f.cp.user("other-team", "eve@other.test", "tenant_admin").await.unwrap();
    let outsider = f.api.with_token(&outsider);
    let hidden =
        outsider.post(&format!("/api/v1/services/{mine}/load"), &json!({"requests_per_s": 1.0})).await.unwrap();
    assert_eq!(hidden.status, 404, "{}", hidden.body);
    assert_eq!(outsider.get(&format!("/api/v1/services/{mine}")).await.unwrap().status, 404);

    // Deleting the service revokes its tokens at once.
    let deleted = f.api.delete(&format!("/api/v1/services/{mine}")).await.unwrap();
    assert_eq!(deleted.status, 202, "{}", deleted.body);
    let after = replica.post(&format!("/api/v1/services/{mine}/load"), &json!({"requests_per_s": 1.0})).await.unwrap();
    assert_eq!(after.status, 401, "{}", after.body);
}
