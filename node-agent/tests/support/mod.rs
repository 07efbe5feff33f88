//! A small fake control plane speaking `docs/agent-protocol.md`, shared by the agent's tests.

// Each test binary uses part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::{Path as UrlPath, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use uuid::Uuid;

use airtime_node_agent::Config;
use airtime_node_agent::protocol::{Assignment, AssignmentAction, DesiredState, Registration, TelemetryReport};

pub type TestResult = Result<(), Box<dyn std::error::Error>>;

pub const NODE_ID: &str = "0190a6a4-0000-7000-8000-0000000000aa";
/// The one enrolment token the fake accepts, and the credential it gives for it.
pub const ENROLMENT_TOKEN: &str = "et_fake-enrolment-token";
pub const CREDENTIAL: &str = "nc_fake-node-credential";

#[derive(Default)]
pub struct Recorded {
    pub registrations: Vec<Registration>,
    pub telemetry: Vec<TelemetryReport>,
    /// (workload id, event body as received, when it arrived)
    pub events: Vec<(Uuid, Value, SystemTime)>,
    /// Answer the next telemetry with 404 node_not_found.
    pub forget_node: bool,
    /// Answer this many event posts with 503 first.
    pub failing_events: u32,
    /// When the answer carrying each desired-state version left the server.
    pub answered: BTreeMap<u64, SystemTime>,
    /// Enrolments accepted.
    pub enrolments: u32,
    /// Calls refused for a missing or wrong credential.
    pub unauthorized: u32,
}

#[derive(Clone)]
pub struct FakeControlPlane {
    pub recorded: Arc<Mutex<Recorded>>,
    pub desired: Arc<watch::Sender<DesiredState>>,
}

impl FakeControlPlane {
    pub fn recorded(&self) -> MutexGuard<'_, Recorded> {
        self.recorded.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Publishes a new desired state (the version goes up by one) and returns its version.
    pub fn set_desired(&self, assignments: Vec<Assignment>) -> u64 {
        let mut version = 0;
        self.desired.send_modify(|state| {
            state.version += 1;
            state.assignments = assignments;
            version = state.version;
        });
        version
    }

    pub fn events_of(&self, workload_id: Uuid) -> Vec<Value> {
        self.recorded()
            .events
            .iter()
            .filter(|(id, _, _)| *id == workload_id)
            .map(|(_, event, _)| event.clone())
            .collect()
    }

    pub async fn wait_for<T>(&self, what: &str, mut check: impl FnMut(&Self) -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(found) = check(self) {
                return found;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub async fn wait_for_event(&self, workload_id: Uuid, name: &str) -> Value {
        self.wait_for(&format!("{name} of {workload_id}"), |cp| {
            cp.events_of(workload_id).into_iter().find(|e| e["event"] == name)
        })
        .await
    }
}

pub fn error(status: StatusCode, code: &str) -> Response {
    (status, Json(json!({"error": {"code": code, "message": code}}))).into_response()
}

pub async fn register(State(cp): State<FakeControlPlane>, Json(body): Json<Value>) -> Response {
    // The control plane denies unknown fields: the agent must send exactly the documented ones.
    let mut fields: Vec<&str> = body.as_object().map(|o| o.keys().map(String::as_str).collect()).unwrap_or_default();
    // Present exactly when the node has a container engine (this host may have one), and when
    // the agent adopted running work.
    fields.retain(|f| *f != "container_engine" && *f != "running");
    fields.sort_unstable();
    let documented = [
        "agent_version",
        "cost_per_hour",
        "cpu_millis",
        "gpu_source",
        "gpus",
        "hostname",
        "labels",
        "memory_mb",
        "name",
        "protocol",
    ];
    if fields != documented {
        return error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request");
    }
    let Ok(request) = serde_json::from_value::<Registration>(body) else {
        return error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request");
    };
    cp.recorded().registrations.push(request);
    // An extra field the agent does not know must not bother it.
    Json(json!({"node_id": NODE_ID, "heartbeat_interval_ms": 100, "new_field": 1})).into_response()
}

pub async fn telemetry(
    State(cp): State<FakeControlPlane>,
    UrlPath(node_id): UrlPath<Uuid>,
    Json(report): Json<TelemetryReport>,
) -> Response {
    let mut recorded = cp.recorded();
    if recorded.forget_node || node_id.to_string() != NODE_ID {
        recorded.forget_node = false;
        return error(StatusCode::NOT_FOUND, "node_not_found");
    }
    recorded.telemetry.push(report);
    StatusCode::NO_CONTENT.into_response()
}

#[derive(Deserialize)]
pub struct PollQuery {
    after: u64,
    wait_ms: u64,
}

pub async fn assignments(State(cp): State<FakeControlPlane>, Query(query): Query<PollQuery>) -> Response {
    assert!(query.wait_ms <= 30_000, "wait_ms {} over the cap", query.wait_ms);
    let mut desired = cp.desired.subscribe();
    let wait =
        tokio::time::timeout(Duration::from_millis(query.wait_ms), desired.wait_for(|d| d.version > query.after));
    let _ = wait.await;
    let state = desired.borrow().clone();
    cp.recorded().answered.entry(state.version).or_insert_with(SystemTime::now);
    Json(state).into_response()
}

pub async fn event(
    State(cp): State<FakeControlPlane>,
    UrlPath((_node_id, workload_id)): UrlPath<(Uuid, Uuid)>,
    Json(body): Json<Value>,
) -> Response {
    let mut recorded = cp.recorded();
    if recorded.failing_events > 0 {
        recorded.failing_events -= 1;
        return error(StatusCode::SERVICE_UNAVAILABLE, "unavailable");
    }
    recorded.events.push((workload_id, body, SystemTime::now()));
    StatusCode::NO_CONTENT.into_response()
}

/// `POST /api/v1/agent/enrol`: [`ENROLMENT_TOKEN`] buys [`CREDENTIAL`].
pub async fn enrol(State(cp): State<FakeControlPlane>, Json(body): Json<Value>) -> Response {
    if body["enrolment_token"] != ENROLMENT_TOKEN || !body["name"].is_string() {
        return error(StatusCode::UNAUTHORIZED, "unauthorized");
    }
    cp.recorded().enrolments += 1;
    Json(json!({"credential": CREDENTIAL, "credential_id": Uuid::new_v4(), "node_name": body["name"]})).into_response()
}

/// Every call but the enrolment must carry the node credential, as the real control plane requires.
async fn require_credential(State(cp): State<FakeControlPlane>, request: Request, next: Next) -> Response {
    let expected = format!("Bearer {CREDENTIAL}");
    let given = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    if !request.uri().path().ends_with("/enrol") && given != Some(expected.as_str()) {
        cp.recorded().unauthorized += 1;
        return error(StatusCode::UNAUTHORIZED, "unauthorized");
    }
    next.run(request).await
}

pub async fn start_fake() -> Result<(FakeControlPlane, String), std::io::Error> {
    let cp = FakeControlPlane {
        recorded: Arc::default(),
        desired: Arc::new(watch::channel(DesiredState { version: 0, assignments: vec![] }).0),
    };
    let app = Router::new()
        .route("/api/v1/agent/enrol", post(enrol))
        .route("/api/v1/agent/register", post(register))
        .route("/api/v1/agent/nodes/{node_id}/telemetry", post(telemetry))
        .route("/api/v1/agent/nodes/{node_id}/assignments", get(assignments))
        .route("/api/v1/agent/nodes/{node_id}/workloads/{workload_id}/events", post(event))
        .layer(middleware::from_fn_with_state(cp.clone(), require_credential))
        .with_state(cp.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((cp, url))
}

pub fn run(workload_id: Uuid, command: &str, gpus: &[u32], grace_ms: u64) -> Assignment {
    Assignment {
        workload_id,
        attempt: 1,
        action: AssignmentAction::Run,
        reason: None,
        command: vec!["sh".into(), "-c".into(), command.into()],
        env: BTreeMap::from([("MODEL".into(), "llama".into())]),
        gpu_indices: gpus.to_vec(),
        grace_period_ms: grace_ms,
        gpu_milli: None,
        gpu_memory_mb: None,
        container: None,
        cpu_millis: None,
        memory_mb: None,
        attempt_token: None,
        gang: None,
        serving: None,
    }
}

pub fn stop(run: &Assignment, reason: &str, grace_ms: u64) -> Assignment {
    Assignment { action: AssignmentAction::Stop, reason: Some(reason.into()), grace_period_ms: grace_ms, ..run.clone() }
}

pub fn unix_nanos(time: SystemTime) -> u128 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

/// The agent running in this test process (its library, not its binary).
pub struct RunningAgent {
    stop: mpsc::Sender<()>,
    done: tokio::task::JoinHandle<Result<(), airtime_node_agent::agent::AgentError>>,
}

impl RunningAgent {
    pub async fn shut_down(self) -> TestResult {
        self.stop.send(()).await?;
        tokio::time::timeout(Duration::from_secs(20), self.done).await???;
        Ok(())
    }
}

/// Starts the agent as node `test-node` against the fake at `url`, without NVML, working in
/// `work_dir`, with `extra` flags.
pub fn start_agent(url: &str, work_dir: &Path, extra: &[&str]) -> Result<RunningAgent, Box<dyn std::error::Error>> {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "airtime_node_agent=debug".into()),
        )
        .try_init();
    let state_dir = work_dir.join(".state").display().to_string();
    let work_dir = work_dir.display().to_string();
    let mut args = vec![
        "airtime-node-agent",
        "--enrolment-token",
        ENROLMENT_TOKEN,
        "--state-dir",
        &state_dir,
        "--control-plane",
        url,
        "--name",
        "test-node",
        "--label",
        "zone=a",
        "--no-nvml",
        "--work-dir",
        &work_dir,
    ];
    args.extend_from_slice(extra);
    let config = Config::from_args(args, Some("test-host".into()))?;
    let (stop, stop_rx) = mpsc::channel(4);
    let done = tokio::spawn(airtime_node_agent::run(config, stop_rx));
    Ok(RunningAgent { stop, done })
}

/// Reads a file of `env` output (`KEY=VALUE` lines) once the workload wrote it whole.
pub async fn child_env(cp: &FakeControlPlane, path: &Path) -> BTreeMap<String, String> {
    let done = path.with_extension("done");
    cp.wait_for(&format!("{} written", path.display()), |_| done.exists().then_some(())).await;
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
}

/// A command that writes its environment to `$OUT_FILE` (then `$OUT_FILE.done`) and sleeps.
pub const WRITE_ENV_AND_SLEEP: &str = "env > \"$OUT_FILE\"; : > \"${OUT_FILE%.*}.done\"; exec sleep 30";
