//! The harness for Airtime's end-to-end and scenario tests: a fresh PostgreSQL database per test,
//! the real `airtime-control-plane` and `airtime-node-agent` binaries as child processes, and a
//! small HTTP client that explains its failures.
//!
//! The binaries are the ones `cargo build --workspace --bins` leaves in the target directory (the
//! test command in the README builds them first). `AIRTIME_BIN_DIR` points elsewhere.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The server tests create their databases on; `AIRTIME_TEST_DATABASE_URL` overrides it.
pub fn admin_url() -> String {
    std::env::var("AIRTIME_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// A database of its own for one test, dropped when the test ends.
pub struct TestDb {
    pub name: String,
    pub url: String,
}

impl TestDb {
    pub async fn create() -> anyhow::Result<TestDb> {
        let admin = admin_url();
        let name = format!("airtime_test_{}", uuid::Uuid::new_v4().simple());
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin)
            .await
            .with_context(|| format!("connecting to PostgreSQL at {admin} (is it running?)"))?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await?;
        let base = admin
            .rsplit_once('/')
            .map(|(b, _)| b.to_owned())
            .unwrap_or(admin);
        Ok(TestDb {
            url: format!("{base}/{name}"),
            name,
        })
    }

    pub async fn pool(&self) -> anyhow::Result<sqlx::PgPool> {
        Ok(sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .connect(&self.url)
            .await?)
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Drop runs outside async; a short-lived thread with its own runtime does the cleanup.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                if let Ok(mut conn) =
                    <sqlx::PgConnection as sqlx::Connection>::connect(&admin_url()).await
                {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .execute(&mut conn)
                    .await;
                }
            });
        })
        .join();
    }
}

pub fn bin(name: &str) -> PathBuf {
    let dir = std::env::var_os("AIRTIME_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
            target.join("debug")
        });
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace --bins` first (`make test` does)",
        path.display()
    );
    path
}

/// A running control plane on a free port, killed when dropped.
pub struct ControlPlane {
    pub url: String,
    child: Child,
}

impl ControlPlane {
    pub async fn start(db: &TestDb, extra: &[&str]) -> anyhow::Result<ControlPlane> {
        let mut child = Command::new(bin("airtime-control-plane"))
            .args([
                "--listen",
                "127.0.0.1:0",
                "--database-url",
                &db.url,
                "--tick-ms",
                "200",
            ])
            .args([
                "--heartbeat-interval-ms",
                "500",
                "--node-lost-after-ms",
                "3000",
                "--grace-period-ms",
                "2000",
            ])
            .args(extra)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info,sqlx=warn".into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("starting airtime-control-plane")?;
        let stdout = child.stdout.take().context("control plane stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let url = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await? {
                if let Some(url) = line.strip_prefix("airtime control plane listening on ") {
                    return Ok::<_, anyhow::Error>(url.trim().to_owned());
                }
            }
            bail!("the control plane exited before listening")
        })
        .await
        .context("the control plane did not start listening within 60 s")??;
        // Keep draining stdout so the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(ControlPlane { url, child })
    }

    pub fn api(&self) -> Api {
        Api::new(&self.url)
    }

    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// A running node agent, killed when dropped.
pub struct NodeAgent {
    pub name: String,
    child: Child,
}

impl NodeAgent {
    pub async fn start(cp: &ControlPlane, name: &str, extra: &[&str]) -> anyhow::Result<NodeAgent> {
        let child = Command::new(bin("airtime-node-agent"))
            .args(["--control-plane", &cp.url, "--name", name])
            .args(extra)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("starting airtime-node-agent")?;
        Ok(NodeAgent {
            name: name.to_owned(),
            child,
        })
    }

    /// Kills the agent at once (SIGKILL), as a crash or a lost host would.
    pub async fn kill(mut self) {
        let _ = self.child.kill().await;
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }
}

/// A thin JSON client whose errors say which request failed and what came back.
#[derive(Clone)]
pub struct Api {
    base: String,
    http: reqwest::Client,
}

pub struct Answer {
    pub status: u16,
    pub body: Value,
}

impl Api {
    pub fn new(base: &str) -> Api {
        Api {
            base: base.trim_end_matches('/').to_owned(),
            http: reqwest::Client::new(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<Answer> {
        self.send(self.http.get(self.url(path))).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> anyhow::Result<Answer> {
        self.send(self.http.post(self.url(path)).json(body)).await
    }

    pub async fn post_raw(
        &self,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> anyhow::Result<Answer> {
        self.send(
            self.http
                .post(self.url(path))
                .header("content-type", content_type)
                .body(body),
        )
        .await
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> anyhow::Result<Answer> {
        let resp = req.send().await?;
        let status = resp.status().as_u16();
        let text = resp.text().await?;
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Ok(Answer { status, body })
    }

    /// GET that must answer 200.
    pub async fn ok(&self, path: &str) -> anyhow::Result<Value> {
        let answer = self.get(path).await?;
        anyhow::ensure!(
            answer.status == 200,
            "GET {path} answered {}: {}",
            answer.status,
            answer.body
        );
        Ok(answer.body)
    }

    /// POST that must answer 2xx.
    pub async fn created(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let answer = self.post(path, body).await?;
        anyhow::ensure!(
            (200..300).contains(&answer.status),
            "POST {path} answered {}: {}",
            answer.status,
            answer.body
        );
        Ok(answer.body)
    }
}

/// Polls `probe` until it returns Some, or fails after `timeout` naming what it waited for.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let start = Instant::now();
    let mut last_error = None;
    loop {
        match probe().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => {}
            Err(err) => last_error = Some(err),
        }
        if start.elapsed() > timeout {
            match last_error {
                Some(err) => {
                    bail!("timed out after {timeout:?} waiting for {what}; last error: {err:#}")
                }
                None => bail!("timed out after {timeout:?} waiting for {what}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the workload is in `state` and returns its detail.
pub async fn workload_reaches(
    api: &Api,
    id: &str,
    state: &str,
    timeout: Duration,
) -> anyhow::Result<Value> {
    let path = format!("/api/v1/workloads/{id}");
    eventually(&format!("workload {id} to be {state}"), timeout, || {
        let api = api.clone();
        let path = path.clone();
        async move {
            let w = api.ok(&path).await?;
            Ok((w["state"] == state).then_some(w))
        }
    })
    .await
}

/// Waits until `count` nodes are registered and ready.
pub async fn nodes_ready(api: &Api, count: usize) -> anyhow::Result<Value> {
    eventually(
        &format!("{count} ready nodes"),
        Duration::from_secs(30),
        || {
            let api = api.clone();
            async move {
                let nodes = api.ok("/api/v1/nodes").await?;
                let ready = nodes
                    .as_array()
                    .map(|a| a.iter().filter(|n| n["state"] == "ready").count())
                    .unwrap_or(0);
                Ok((ready >= count).then_some(nodes))
            }
        },
    )
    .await
}
