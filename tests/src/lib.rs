//! The harness for Airtime's end-to-end and scenario tests: a fresh PostgreSQL database per test,
//! the real `airtime-control-plane` and `airtime-node-agent` binaries as child processes, and a
//! small HTTP client that explains its failures.
//!
//! The binaries are the ones `cargo test --workspace` (or `cargo build --workspace --bins`) leaves
//! in the target directory. `AIRTIME_BIN_DIR` points elsewhere.
//!
//! Access control: [`ControlPlane::start`] bootstraps a platform admin ([`ADMIN_EMAIL`]) with the
//! binary's `--bootstrap-admin`, logs in, and [`ControlPlane::api`] acts as that admin;
//! [`ControlPlane::anonymous`] sends no credential. [`NodeAgent::start`] gives each agent a
//! one-time enrolment token made for its name and a state directory of its own.

#![allow(clippy::unwrap_used)]

pub mod agents;
pub mod balancer;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The server tests create their databases on; `AIRTIME_TEST_DATABASE_URL` overrides it.
pub fn admin_url() -> String {
    std::env::var("AIRTIME_TEST_DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// A database of its own for one test, dropped when the test ends.
pub struct TestDb {
    pub name: String,
    pub url: String,
    /// The server's maintenance database, where it was created and is dropped.
    admin: String,
}

impl TestDb {
    /// A database on the tests' server ([`admin_url`]).
    pub async fn create() -> anyhow::Result<TestDb> {
        Self::create_on(&admin_url()).await
    }

    /// A database on the server whose maintenance database is `admin` (a [`PgCluster`]'s).
    pub async fn create_on(admin: &str) -> anyhow::Result<TestDb> {
        let name = format!("airtime_test_{}", uuid::Uuid::new_v4().simple());
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(admin)
            .await
            .with_context(|| format!("connecting to PostgreSQL at {admin} (is it running?)"))?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut conn).await?;
        let base = admin.rsplit_once('/').map_or(admin, |(b, _)| b);
        Ok(TestDb { url: format!("{base}/{name}"), name, admin: admin.to_owned() })
    }

    pub async fn pool(&self) -> anyhow::Result<sqlx::PgPool> {
        Ok(sqlx::postgres::PgPoolOptions::new().max_connections(2).connect(&self.url).await?)
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let (name, admin) = (self.name.clone(), self.admin.clone());
        // Drop runs outside async; a short-lived thread with its own runtime does the cleanup.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            rt.block_on(async {
                if let Ok(mut conn) = <sqlx::PgConnection as sqlx::Connection>::connect(&admin).await {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
                        .execute(&mut conn)
                        .await;
                }
            });
        })
        .join();
    }
}

/// A network namespace of a test's own, joined to this host by a veth pair on a /30 of its own:
/// an agent started in it ([`NodeAgent::start_in`]) reaches the control plane only through the
/// pair, so taking the host's end down partitions it from the control plane (which keeps running,
/// and keeps hearing every other agent) and bringing it up heals it. Needs root and `ip`
/// (iproute2). Deleted when dropped.
pub struct Netns {
    pub name: String,
    host_link: String,
    /// The host's end of the pair, where the namespace reaches the control plane.
    pub host_address: String,
    /// The namespace's own address (its end of the pair).
    pub address: String,
}

impl Netns {
    pub async fn create() -> anyhow::Result<Netns> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let bytes = uuid::Uuid::new_v4().into_bytes();
        // 10.x.y.0/30 in 10.128.0.0/9: the host's end .1, the namespace's .2.
        let (x, y) = (128 | (bytes[0] & 0x7f), bytes[1] & 0xfc);
        let ns = Netns {
            name: format!("airtime-{}", &id[..8]),
            host_link: format!("ath{}", &id[8..16]),
            host_address: format!("10.{x}.{y}.1"),
            address: format!("10.{x}.{y}.2"),
        };
        let inner = format!("atn{}", &id[8..16]);
        let ns_address = format!("10.{x}.{y}.2/30");
        let host_cidr = format!("{}/30", ns.host_address);
        let (name, link) = (ns.name.as_str(), ns.host_link.as_str());
        ns.ip(&["netns", "add", name]).await?;
        ns.ip(&["link", "add", link, "type", "veth", "peer", "name", inner.as_str()]).await?;
        ns.ip(&["link", "set", inner.as_str(), "netns", name]).await?;
        ns.ip(&["addr", "add", host_cidr.as_str(), "dev", link]).await?;
        ns.ip(&["link", "set", link, "up"]).await?;
        let inside: [&[&str]; 3] = [
            &["addr", "add", ns_address.as_str(), "dev", inner.as_str()],
            &["link", "set", inner.as_str(), "up"],
            &["link", "set", "lo", "up"],
        ];
        for args in inside {
            let mut command = vec!["netns", "exec", ns.name.as_str(), "ip"];
            command.extend_from_slice(args);
            ns.ip(&command).await?;
        }
        Ok(ns)
    }

    /// Namespaces that reach each other through this host, as servers of one cluster do: each
    /// routes everything through its host end, and the host forwards between them.
    pub async fn joined(count: usize) -> anyhow::Result<Vec<Netns>> {
        let out = Command::new("sysctl").args(["-w", "net.ipv4.ip_forward=1"]).output().await.context("sysctl")?;
        anyhow::ensure!(out.status.success(), "enabling forwarding: {}", String::from_utf8_lossy(&out.stderr));
        let mut all = Vec::with_capacity(count);
        for _ in 0..count {
            let ns = Netns::create().await?;
            let via = ns.host_address.clone();
            ns.ip(&["netns", "exec", ns.name.as_str(), "ip", "route", "add", "default", "via", via.as_str()]).await?;
            all.push(ns);
        }
        Ok(all)
    }

    /// Cuts the namespace off: the host's end of the pair goes down, so nothing passes either way.
    pub async fn partition(&self) -> anyhow::Result<()> {
        self.ip(&["link", "set", self.host_link.as_str(), "down"]).await
    }

    /// Joins it again.
    pub async fn heal(&self) -> anyhow::Result<()> {
        self.ip(&["link", "set", self.host_link.as_str(), "up"]).await
    }

    async fn ip(&self, args: &[&str]) -> anyhow::Result<()> {
        let out = Command::new("ip").args(args).output().await.context("running ip (iproute2; needs root)")?;
        anyhow::ensure!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
        Ok(())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // The host's end goes with its peer, which goes with the namespace.
        let steps: [[&str; 3]; 2] = [["link", "del", self.host_link.as_str()], ["netns", "del", self.name.as_str()]];
        for args in steps {
            let _ = std::process::Command::new("ip").args(args).stdout(Stdio::null()).stderr(Stdio::null()).status();
        }
    }
}

/// A PostgreSQL cluster of a test's own, for the stories that restart or stop the database: made
/// with Debian's `pg_createcluster` on a free port with trust authentication, stopped and deleted
/// when dropped. The tests' shared server is never restarted (other tests use it at the same time).
pub struct PgCluster {
    version: String,
    name: String,
    pub port: u16,
}

impl PgCluster {
    /// Creates and starts the cluster (the newest PostgreSQL installed, as `/etc/postgresql` lists).
    pub async fn create() -> anyhow::Result<PgCluster> {
        let mut versions: Vec<String> = std::fs::read_dir("/etc/postgresql")
            .context("listing /etc/postgresql (a Debian PostgreSQL with postgresql-common is needed)")?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        versions.sort_by_key(|v| v.parse::<u32>().unwrap_or(0));
        let version = versions.pop().context("no PostgreSQL version under /etc/postgresql")?;
        // A free port: bound and let go (another process could take it meanwhile: then the
        // creation fails and says so).
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let name = format!("airtime_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let cluster = PgCluster { version, name, port };
        cluster.run("pg_createcluster", &["-p", &port.to_string(), "--start", "--", "--auth=trust"]).await?;
        Ok(cluster)
    }

    /// Its maintenance database, for [`TestDb::create_on`].
    pub fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Stops it, ending every connection at once (`-m fast`).
    pub async fn stop(&self) -> anyhow::Result<()> {
        self.run("pg_ctlcluster", &["stop", "-m", "fast"]).await
    }

    pub async fn start(&self) -> anyhow::Result<()> {
        self.run("pg_ctlcluster", &["start"]).await
    }

    /// Restarts it, ending every connection at once (`-m fast`).
    pub async fn restart(&self) -> anyhow::Result<()> {
        self.run("pg_ctlcluster", &["restart", "-m", "fast"]).await
    }

    async fn run(&self, program: &str, args: &[&str]) -> anyhow::Result<()> {
        let out = Command::new(program)
            .args([&self.version, &self.name])
            .args(args)
            .output()
            .await
            .with_context(|| format!("running {program} (Debian's postgresql-common)"))?;
        anyhow::ensure!(
            out.status.success(),
            "{program} {} {} {args:?}: {}{}",
            self.version,
            self.name,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = std::process::Command::new("pg_dropcluster")
            .args([&self.version, &self.name, "--stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

pub fn bin(name: &str) -> PathBuf {
    let dir = std::env::var_os("AIRTIME_BIN_DIR").map(PathBuf::from).unwrap_or_else(|| {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
        target.join("debug")
    });
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: run the workspace's tests (`cargo test --workspace`, as `make test` does) or `cargo build --workspace --bins` first",
        path.display()
    );
    path
}

/// The session signing secret every test control plane runs with (unless a test passes its own).
pub const TEST_JWT_SECRET: &str = "airtime-test-signing-secret-0123456789abcdef";
/// The `--metrics-token` every test control plane runs with: `/metrics` names tenants and services
/// only to a caller that sends it ([`ControlPlane::metrics`]).
pub const TEST_METRICS_TOKEN: &str = "airtime-test-metrics-token";
/// The platform admin the harness bootstraps, and its password.
pub const ADMIN_EMAIL: &str = "admin@airtime.test";
pub const ADMIN_PASSWORD: &str = "harness admin password 0f the tests";

/// A running control plane on a free port, killed when dropped.
pub struct ControlPlane {
    pub url: String,
    child: Child,
    /// The bootstrapped platform admin's session token.
    pub admin_token: String,
    /// Everything the control plane wrote to stdout (its log) so far.
    logs: Arc<Mutex<Vec<String>>>,
}

impl ControlPlane {
    /// Bootstraps the platform admin (once per database), starts the control plane and logs in.
    pub async fn start(db: &TestDb, extra: &[&str]) -> anyhow::Result<ControlPlane> {
        Self::start_with_env(db, extra, &[]).await
    }

    /// [`ControlPlane::start`] with extra environment variables (e.g. `RUST_LOG`).
    pub async fn start_with_env(db: &TestDb, extra: &[&str], env: &[(&str, &str)]) -> anyhow::Result<ControlPlane> {
        // Refused (and harmless) when a platform admin exists already: a restart on the same database.
        Command::new(bin("airtime-control-plane"))
            .args(["--database-url", &db.url, "--bootstrap-admin", ADMIN_EMAIL])
            .env("AIRTIME_BOOTSTRAP_PASSWORD", ADMIN_PASSWORD)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .status()
            .await
            .context("bootstrapping the platform admin")?;
        let secret_given = extra.iter().any(|a| a.starts_with("--jwt-secret"));
        let secret: &[&str] = if secret_given { &[] } else { &["--jwt-secret", TEST_JWT_SECRET] };
        let metrics: &[&str] = if extra.iter().any(|a| a.starts_with("--metrics-token")) {
            &[]
        } else {
            &["--metrics-token", TEST_METRICS_TOKEN]
        };
        // A restart on the same address passes its own --listen; otherwise any free port.
        let listen: &[&str] =
            if extra.iter().any(|a| a.starts_with("--listen")) { &[] } else { &["--listen", "127.0.0.1:0"] };
        // A test that sets its own tick passes --tick-ms; otherwise a fast one.
        let tick: &[&str] = if extra.iter().any(|a| a.starts_with("--tick-ms")) { &[] } else { &["--tick-ms", "200"] };
        // A test that sets the heartbeat passes --heartbeat-interval-ms and --node-lost-after-ms;
        // otherwise fast ones, so a silent node is lost within seconds.
        let beat: &[&str] = if extra.iter().any(|a| a.starts_with("--heartbeat-interval-ms")) {
            &[]
        } else {
            &["--heartbeat-interval-ms", "500", "--node-lost-after-ms", "3000"]
        };
        let mut child = Command::new(bin("airtime-control-plane"))
            .args(listen)
            .args(tick)
            .args(["--database-url", &db.url])
            .args(beat)
            .args(secret)
            .args(metrics)
            .args(extra)
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "info,sqlx=warn".into()))
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("starting airtime-control-plane")?;
        let stdout = child.stdout.take().context("control plane stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let logs = Arc::new(Mutex::new(Vec::new()));
        let url = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await? {
                if let Some(url) = line.strip_prefix("airtime control plane listening on ") {
                    return Ok::<_, anyhow::Error>(url.trim().to_owned());
                }
                logs.lock().unwrap_or_else(PoisonError::into_inner).push(line);
            }
            bail!("the control plane exited before listening")
        })
        .await
        .context("the control plane did not start listening within 60 s")??;
        // Keep draining stdout (kept as the log) so the child never blocks on a full pipe; its
        // errors also go to the test's output, where a 500 an agent saw can be explained.
        let sink = Arc::clone(&logs);
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                if line.contains("ERROR") {
                    eprintln!("control plane: {line}");
                }
                sink.lock().unwrap_or_else(PoisonError::into_inner).push(line);
            }
        });
        let session = Api::new(&url)
            .post("/api/v1/auth/login", &json!({"email": ADMIN_EMAIL, "password": ADMIN_PASSWORD}))
            .await?;
        anyhow::ensure!(session.status == 200, "the platform admin cannot log in: {} {}", session.status, session.body);
        let admin_token = session.body["token"].as_str().context("no session token")?.to_owned();
        Ok(ControlPlane { url, child, admin_token, logs })
    }

    /// Its process id (to pause it, as a stalled machine would).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// `/metrics`, with the metrics token (tenants and services named) or as anyone.
    pub async fn metrics(&self, with_token: bool) -> anyhow::Result<String> {
        let mut request = reqwest::Client::new().get(format!("{}/metrics", self.url));
        if with_token {
            request = request.header("authorization", format!("Bearer {TEST_METRICS_TOKEN}"));
        }
        Ok(request.send().await?.error_for_status()?.text().await?)
    }

    /// A client acting as the bootstrapped platform admin.
    pub fn api(&self) -> Api {
        Api::new(&self.url).with_token(&self.admin_token)
    }

    /// A client that sends no credential.
    pub fn anonymous(&self) -> Api {
        Api::new(&self.url)
    }

    /// A client acting with `token` (a session or an API token).
    pub fn api_as(&self, token: &str) -> Api {
        Api::new(&self.url).with_token(token)
    }

    /// The control plane's log lines so far.
    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// A one-time enrolment token for a node of this name (it replaces the node's credential).
    pub async fn enrolment_token(&self, node_name: &str) -> anyhow::Result<String> {
        let created = self.api().created("/api/v1/enrolment-tokens", &json!({"node_name": node_name})).await?;
        Ok(created["token"].as_str().context("no enrolment token")?.to_owned())
    }

    /// Creates a user with `role` in `tenant` (creating the tenant when missing) and returns a
    /// session token for them.
    pub async fn user(&self, tenant: &str, email: &str, role: &str) -> anyhow::Result<String> {
        let api = self.api();
        let exists = api.get("/api/v1/tenants").await?;
        let known = exists.body.as_array().is_some_and(|ts| ts.iter().any(|t| t["name"] == tenant));
        if !known {
            api.created("/api/v1/tenants", &json!({"name": tenant})).await?;
        }
        let password = format!("{email} long password");
        api.created("/api/v1/users", &json!({"email": email, "password": password, "tenant": tenant, "role": role}))
            .await?;
        let session =
            self.anonymous().created("/api/v1/auth/login", &json!({"email": email, "password": password})).await?;
        Ok(session["token"].as_str().context("no token")?.to_owned())
    }

    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }

    /// Stops the replica as a rolling restart does (SIGTERM) and waits for it to exit: it answers
    /// what it is answering, hands back the scheduling lease if it holds it, and exits.
    pub async fn terminate(mut self) -> anyhow::Result<std::process::ExitStatus> {
        send_signal(self.child.id(), nix::sys::signal::Signal::SIGTERM)?;
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .context("the control plane did not exit within 30 s of SIGTERM")?
            .context("waiting for the control plane")
    }
}

/// An agent's log lines, kept as they come.
type KeptLog = Arc<Mutex<Vec<String>>>;

/// How an agent reaches its control plane.
enum Route<'a> {
    /// At the control plane's own address.
    Direct,
    /// At another address (a balancer in front of the replicas).
    Via(String),
    /// From inside a network namespace, at the host's address there.
    Netns(&'a Netns, String),
}

/// A running node agent, killed when dropped.
pub struct NodeAgent {
    pub name: String,
    child: Child,
    /// Its `--state-dir`, where it keeps its credential.
    state: tempfile::TempDir,
    logs: Option<KeptLog>,
    /// Killed as a crash would ([`NodeAgent::kill`]): its workloads are left for a restarted agent.
    crashed: bool,
    /// How it was started (control plane URL, extra arguments, environment), to start it again.
    launch: (String, Vec<String>, Vec<(String, String)>),
}

impl NodeAgent {
    /// Starts an agent enrolled with a fresh enrolment token made for its name.
    pub async fn start(cp: &ControlPlane, name: &str, extra: &[&str]) -> anyhow::Result<NodeAgent> {
        Self::spawn(cp, name, extra, false).await
    }

    /// [`NodeAgent::start`], keeping the agent's log (stderr) for [`NodeAgent::logs`].
    pub async fn start_logged(cp: &ControlPlane, name: &str, extra: &[&str]) -> anyhow::Result<NodeAgent> {
        Self::spawn(cp, name, extra, true).await
    }

    /// [`NodeAgent::start`] with `env` added to the agent's environment (a container engine's
    /// configuration, say).
    pub async fn start_with_env(
        cp: &ControlPlane,
        name: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<NodeAgent> {
        Self::spawn_with(cp, name, extra, false, env).await
    }

    /// [`NodeAgent::start`] reaching the control plane at `url` (a balancer in front of its
    /// replicas) instead of at `cp`'s own address; `cp` makes the enrolment token.
    pub async fn start_via(cp: &ControlPlane, url: &str, name: &str, extra: &[&str]) -> anyhow::Result<NodeAgent> {
        Self::spawn_as(cp, name, extra, false, &[], Route::Via(url.to_owned())).await
    }

    /// [`NodeAgent::start`] inside a network namespace of its own ([`Netns`]), reaching the
    /// control plane (which must listen on every address: `--listen 0.0.0.0:0`) through it.
    pub async fn start_in(cp: &ControlPlane, netns: &Netns, name: &str, extra: &[&str]) -> anyhow::Result<NodeAgent> {
        let port = cp.url.rsplit_once(':').and_then(|(_, p)| p.trim_end_matches('/').parse::<u16>().ok());
        let url = format!("http://{}:{}", netns.host_address, port.context("the control plane's port")?);
        Self::spawn_as(cp, name, extra, false, &[], Route::Netns(netns, url)).await
    }

    async fn spawn(cp: &ControlPlane, name: &str, extra: &[&str], keep_logs: bool) -> anyhow::Result<NodeAgent> {
        Self::spawn_with(cp, name, extra, keep_logs, &[]).await
    }

    async fn spawn_with(
        cp: &ControlPlane,
        name: &str,
        extra: &[&str],
        keep_logs: bool,
        env: &[(&str, &str)],
    ) -> anyhow::Result<NodeAgent> {
        Self::spawn_as(cp, name, extra, keep_logs, env, Route::Direct).await
    }

    async fn spawn_as(
        cp: &ControlPlane,
        name: &str,
        extra: &[&str],
        keep_logs: bool,
        env: &[(&str, &str)],
        route: Route<'_>,
    ) -> anyhow::Result<NodeAgent> {
        let token = cp.enrolment_token(name).await?;
        let state = tempfile::tempdir()?;
        let (mut command, url) = match route {
            Route::Netns(ns, url) => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", ns.name.as_str()]).arg(bin("airtime-node-agent"));
                (command, url)
            }
            Route::Via(url) => (Command::new(bin("airtime-node-agent")), url),
            Route::Direct => (Command::new(bin("airtime-node-agent")), cp.url.clone()),
        };
        let launch = (
            url.clone(),
            extra.iter().map(|a| (*a).to_owned()).collect(),
            env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        );
        command.envs(env.iter().copied()).env("AIRTIME_ENROLMENT_TOKEN", &token);
        let (child, logs) = Self::launch(command, name, &url, state.path(), extra, keep_logs)?;
        Ok(NodeAgent { name: name.to_owned(), child, state, logs, crashed: false, launch })
    }

    fn launch(
        mut command: Command,
        name: &str,
        url: &str,
        state: &std::path::Path,
        extra: &[&str],
        keep_logs: bool,
    ) -> anyhow::Result<(Child, Option<KeptLog>)> {
        let mut child = command
            .args(["--control-plane", url, "--name", name])
            .arg("--state-dir")
            .arg(state)
            .args(extra)
            // A kept log is read for what it must not contain: keep all of it.
            .env(
                "RUST_LOG",
                if keep_logs { "debug".into() } else { std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()) },
            )
            .stdout(Stdio::inherit())
            .stderr(if keep_logs { Stdio::piped() } else { Stdio::inherit() })
            .kill_on_drop(true)
            .spawn()
            .context("starting airtime-node-agent")?;
        let logs = match child.stderr.take() {
            Some(stderr) => {
                let logs = Arc::new(Mutex::new(Vec::new()));
                let sink = Arc::clone(&logs);
                let mut lines = BufReader::new(stderr).lines();
                tokio::spawn(async move {
                    while let Ok(Some(line)) = lines.next_line().await {
                        sink.lock().unwrap_or_else(PoisonError::into_inner).push(line);
                    }
                });
                Some(logs)
            }
            None => None,
        };
        Ok((child, logs))
    }

    /// Stops the agent as `systemctl stop` would (SIGTERM) and waits for it to exit; its
    /// workloads' tethers keep them for the next agent process (`--on-stop leave`).
    pub async fn terminate(&mut self) -> anyhow::Result<std::process::ExitStatus> {
        let pid = self.child.id().context("the agent has exited already")?;
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM)?;
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .context("the agent did not exit within 30 s of SIGTERM")?
            .context("waiting for the agent")
    }

    /// Kills the agent at once (SIGKILL), as a crash would, and waits for it to be gone; its
    /// state directory stays, for [`NodeAgent::restart`].
    pub async fn crash(&mut self) {
        let _ = self.child.kill().await;
    }

    /// Starts the agent again as it was started, on the same state directory (its stored
    /// credential, its workloads' records): the next agent process of the node, same binary.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        let (url, extra, env) = self.launch.clone();
        let mut command = Command::new(bin("airtime-node-agent"));
        command.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let (child, logs) = Self::launch(command, &self.name, &url, self.state.path(), &extra, self.logs.is_some())?;
        self.child = child;
        self.logs = logs;
        Ok(())
    }

    /// The node credential the agent stored after enrolling (waits up to 30 s for it).
    pub async fn credential(&self) -> anyhow::Result<String> {
        let file = self.state.path().join("node-credential");
        eventually("the agent's stored credential", Duration::from_secs(30), || {
            let file = file.clone();
            async move { Ok(std::fs::read_to_string(&file).ok().map(|c| c.trim().to_owned())) }
        })
        .await
    }

    /// Its `--state-dir`.
    pub fn state_dir(&self) -> &std::path::Path {
        self.state.path()
    }

    /// The agent's log lines so far (agents started with [`NodeAgent::start_logged`]).
    pub fn logs(&self) -> Vec<String> {
        self.logs.as_ref().map(|l| l.lock().unwrap_or_else(PoisonError::into_inner).clone()).unwrap_or_default()
    }

    /// Kills the agent at once (SIGKILL), as a lost host would, and drops its state directory
    /// with it: its workloads' tethers, their lease file gone, stop them with their grace period
    /// (`airtime_node_agent::tether`); an agent started with `--on-lost-contact keep` leaves them
    /// running, for a new agent of the same name to find and end (`runner::orphans`). To restart
    /// an agent on its state, see [`NodeAgent::crash`] and [`NodeAgent::restart`].
    pub async fn kill(mut self) {
        self.crashed = true;
        let _ = self.child.kill().await;
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }
}

impl Drop for NodeAgent {
    /// A test that ends drops its agents, and their workloads end with them. The runner starts
    /// each workload in a process group of its own, so killing the agent alone (`kill_on_drop`)
    /// left them running after the test — a shell of a preempted job's second attempt outlived
    /// its test, holding the test binary's pipes and a core. Once the agent is gone they are
    /// orphans by the agent's own rule (`runner::orphans`), and each group is killed.
    fn drop(&mut self) {
        if self.crashed {
            return;
        }
        let _ = self.child.start_kill();
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline && !matches!(self.child.try_wait(), Ok(Some(_))) {
            std::thread::sleep(Duration::from_millis(10));
        }
        for orphan in airtime_node_agent::runner::orphans::find(&self.name) {
            let Ok(pid) = i32::try_from(orphan.pid) else { continue };
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// A thin JSON client whose errors say which request failed and what came back.
#[derive(Clone)]
pub struct Api {
    base: String,
    http: reqwest::Client,
    /// Sent as `Authorization: Bearer` when set.
    token: Option<String>,
}

pub struct Answer {
    pub status: u16,
    pub body: Value,
}

impl Api {
    pub fn new(base: &str) -> Api {
        Api { base: base.trim_end_matches('/').to_owned(), http: reqwest::Client::new(), token: None }
    }

    /// The same client, authenticating with `token`.
    pub fn with_token(&self, token: &str) -> Api {
        Api { token: Some(token.to_owned()), ..self.clone() }
    }

    /// The bearer token this client sends, if any.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// Any method, with an optional JSON body.
    pub async fn request(&self, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<Answer> {
        let method = reqwest::Method::from_bytes(method.as_bytes())?;
        let mut req = self.http.request(method, self.url(path));
        if let Some(body) = body {
            req = req.json(body);
        }
        self.send(req).await
    }

    pub async fn delete(&self, path: &str) -> anyhow::Result<Answer> {
        self.send(self.http.delete(self.url(path))).await
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

    pub async fn put(&self, path: &str, body: &Value) -> anyhow::Result<Answer> {
        self.send(self.http.put(self.url(path)).json(body)).await
    }

    pub async fn post_raw(&self, path: &str, content_type: &str, body: Vec<u8>) -> anyhow::Result<Answer> {
        self.send(self.http.post(self.url(path)).header("content-type", content_type).body(body)).await
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> anyhow::Result<Answer> {
        let req = match &self.token {
            Some(token) => req.bearer_auth(token),
            None => req,
        };
        let resp = req.send().await?;
        let status = resp.status().as_u16();
        let text = resp.text().await?;
        let body =
            if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
        Ok(Answer { status, body })
    }

    /// GET that must answer 200.
    pub async fn ok(&self, path: &str) -> anyhow::Result<Value> {
        let answer = self.get(path).await?;
        anyhow::ensure!(answer.status == 200, "GET {path} answered {}: {}", answer.status, answer.body);
        Ok(answer.body)
    }

    /// POST that must answer 2xx.
    pub async fn created(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let answer = self.post(path, body).await?;
        anyhow::ensure!((200..300).contains(&answer.status), "POST {path} answered {}: {}", answer.status, answer.body);
        Ok(answer.body)
    }
}

/// The `airtime` command line, run as its user would: a home and a config file of its own (in a
/// temporary directory), none of the caller's `AIRTIME_*` environment.
pub struct Cli {
    home: tempfile::TempDir,
}

/// What one `airtime` run did.
#[derive(Debug)]
pub struct CliRun {
    pub args: Vec<String>,
    /// The exit code (-1 when it was killed by a signal).
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Cli {
    pub fn new() -> anyhow::Result<Cli> {
        Ok(Cli { home: tempfile::tempdir()? })
    }

    /// Its home directory, where a test may write spec files and modules.
    pub fn dir(&self) -> &std::path::Path {
        self.home.path()
    }

    /// The config file `airtime login` writes (`AIRTIME_CONFIG`).
    pub fn config_path(&self) -> PathBuf {
        self.home.path().join(".config/airtime/config.toml")
    }

    /// Runs `airtime args…` to its end (at most a minute).
    pub async fn run(&self, args: &[&str]) -> anyhow::Result<CliRun> {
        self.run_with_stdin(args, "").await
    }

    /// Runs `airtime args…` with `stdin` as its standard input.
    pub async fn run_with_stdin(&self, args: &[&str], stdin: &str) -> anyhow::Result<CliRun> {
        use tokio::io::AsyncWriteExt as _;
        let mut child = Command::new(bin("airtime"))
            .args(args)
            .env_remove("AIRTIME_URL")
            .env_remove("AIRTIME_TOKEN")
            .env_remove("XDG_CONFIG_HOME")
            .env("AIRTIME_CONFIG", self.config_path())
            .env("HOME", self.home.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting airtime")?;
        if let Some(mut input) = child.stdin.take() {
            input.write_all(stdin.as_bytes()).await?;
        }
        let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .with_context(|| format!("airtime {args:?} did not end within 60 s"))??;
        Ok(CliRun {
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }
}

impl CliRun {
    /// Itself if it exited 0; otherwise an error showing what it printed.
    pub fn ok(self) -> anyhow::Result<CliRun> {
        anyhow::ensure!(
            self.code == 0,
            "airtime {:?} exited {}\nstdout: {}\nstderr: {}",
            self.args,
            self.code,
            self.stdout,
            self.stderr
        );
        Ok(self)
    }

    /// Its standard output as JSON (`-o json`).
    pub fn json(&self) -> anyhow::Result<Value> {
        serde_json::from_str(&self.stdout)
            .with_context(|| format!("airtime {:?} printed no JSON: {}", self.args, self.stdout))
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

/// Submits a one-GPU training job (`sleep 600`) per name and waits until each runs: the work a
/// fault story keeps running through its fault. Answers their ids, in order.
pub async fn running_trainers(api: &Api, names: &[&str], timeout: Duration) -> anyhow::Result<Vec<String>> {
    let mut ids = Vec::new();
    for name in names {
        let w = api
            .created(
                "/api/v1/workloads",
                &json!({"name": name, "class": "training", "resources": {"gpu_count": 1}, "command": ["sleep", "600"]}),
            )
            .await?;
        let id = w["id"].as_str().context("a workload id")?.to_owned();
        workload_reaches(api, &id, "running", timeout).await?;
        ids.push(id);
    }
    Ok(ids)
}

/// Waits until the workload is in `state` and returns its detail.
pub async fn workload_reaches(api: &Api, id: &str, state: &str, timeout: Duration) -> anyhow::Result<Value> {
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

/// Pairs of committed scheduling cycles that overlapped in time (ids), in the database at `pool`:
/// none while one scheduler runs. A cycle is recorded in its own transaction, begun after the
/// replica's previous cycle committed, so one leader's cycles never overlap; two leaders' would.
pub async fn overlapping_cycles(pool: &sqlx::PgPool) -> anyhow::Result<Vec<(i64, i64)>> {
    let cycles: Vec<(i64, chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>)> =
        sqlx::query_as("SELECT id, started_at, finished_at FROM scheduling_cycles ORDER BY started_at, id")
            .fetch_all(pool)
            .await?;
    Ok(cycles.windows(2).filter(|p| p[1].1 < p[0].2).map(|p| (p[0].0, p[1].0)).collect())
}

/// Waits until a replica other than `other_than` holds the scheduling lease, and returns its
/// holder and epoch as the database has them.
pub async fn lease_held(pool: &sqlx::PgPool, other_than: Option<uuid::Uuid>) -> anyhow::Result<(uuid::Uuid, i64)> {
    eventually("a replica to hold the scheduling lease", Duration::from_secs(40), || {
        let pool = pool.clone();
        async move {
            let lease: Option<(uuid::Uuid, i64)> =
                sqlx::query_as("SELECT holder, epoch FROM scheduler_lease").fetch_optional(&pool).await?;
            Ok(lease.filter(|(holder, _)| Some(*holder) != other_than))
        }
    })
    .await
}

/// Sends `signal` to process `pid` (a child the harness started): `SIGSTOP` and `SIGCONT` pause
/// and resume it, as a stalled machine would.
pub fn send_signal(pid: Option<u32>, signal: nix::sys::signal::Signal) -> anyhow::Result<()> {
    let pid = i32::try_from(pid.context("the process has exited")?)?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal)?;
    Ok(())
}

/// Waits until `count` nodes are registered and ready.
pub async fn nodes_ready(api: &Api, count: usize) -> anyhow::Result<Value> {
    eventually(&format!("{count} ready nodes"), Duration::from_secs(30), || {
        let api = api.clone();
        async move {
            let nodes = api.ok("/api/v1/nodes").await?;
            let ready = nodes.as_array().map(|a| a.iter().filter(|n| n["state"] == "ready").count()).unwrap_or(0);
            Ok((ready >= count).then_some(nodes))
        }
    })
    .await
}

/// How most stories begin: a fresh database and a control plane on it, started with `extra`.
///
/// Bind both, the database first (`let (db, cp) = …`): the database is dropped with its
/// [`TestDb`], and bindings drop in reverse order, so the control plane goes before its database.
pub async fn fresh_control_plane(extra: &[&str]) -> anyhow::Result<(TestDb, ControlPlane)> {
    let db = TestDb::create().await?;
    let cp = ControlPlane::start(&db, extra).await?;
    Ok((db, cp))
}

/// [`fresh_control_plane`] with default flags and one agent, `name` started with `extra`,
/// registered and ready: the one-node fleet of most stories. Bind all three in this order
/// (`let (db, cp, agent) = …`) so the agent drops first and the database last.
pub async fn one_node_fleet(name: &str, extra: &[&str]) -> anyhow::Result<(TestDb, ControlPlane, NodeAgent)> {
    let (db, cp) = fresh_control_plane(&[]).await?;
    let agent = NodeAgent::start(&cp, name, extra).await?;
    nodes_ready(&cp.api(), 1).await?;
    Ok((db, cp, agent))
}

/// A control plane on a fresh database with its node agents registered and ready, and a scratch
/// folder for what the stories' commands write: the fleet the scenario stories start from. Its
/// story steps panic with what they waited for, as a story's `unwrap` would.
///
/// Its fields drop in declaration order: the agents, then the control plane, then the database.
/// An agent that outlived its control plane, or a control plane its database, would log failures
/// (an agent's telemetry answered 500) that are the harness's, not the product's.
pub struct Fleet {
    pub api: Api,
    pub agents: Vec<NodeAgent>,
    pub cp: ControlPlane,
    _db: TestDb,
    /// A folder of this fleet's own under the system's temporary folder (left for a failure's
    /// post-mortem, as the agents' state folders are).
    pub dir: PathBuf,
}

impl Fleet {
    /// How long a story step waits for the fleet to get somewhere.
    pub const WAIT: Duration = Duration::from_secs(40);

    /// A control plane with default flags, and an agent for each (name, extra flags), all ready.
    pub async fn start(agents: &[(&str, &[&str])]) -> Fleet {
        let (db, cp) = fresh_control_plane(&[]).await.unwrap();
        let api = cp.api();
        let mut started = Vec::new();
        for (name, flags) in agents {
            started.push(NodeAgent::start(&cp, name, flags).await.unwrap());
        }
        nodes_ready(&api, agents.len()).await.unwrap();
        let dir = std::env::temp_dir().join(format!("airtime-fleet-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        Fleet { api, agents: started, cp, _db: db, dir }
    }

    /// A connection pool to the fleet's database, for a story's hand computation.
    pub async fn pool(&self) -> sqlx::PgPool {
        self._db.pool().await.unwrap()
    }

    /// Makes a tenant with `guaranteed_gpus`.
    pub async fn tenant(&self, name: &str, guaranteed_gpus: u32) {
        self.api.created("/api/v1/tenants", &json!({"name": name, "guaranteed_gpus": guaranteed_gpus})).await.unwrap();
    }

    /// Submits a workload as the platform admin and returns its id.
    pub async fn submit(&self, body: Value) -> String {
        let w = self.api.created("/api/v1/workloads", &body).await.unwrap();
        w["id"].as_str().unwrap().to_owned()
    }

    /// The workload's detail.
    pub async fn workload(&self, id: &str) -> Value {
        self.api.ok(&format!("/api/v1/workloads/{id}")).await.unwrap()
    }

    /// Waits until the workload is in `state` and returns its detail.
    pub async fn reaches(&self, id: &str, state: &str) -> Value {
        workload_reaches(&self.api, id, state, Self::WAIT).await.unwrap()
    }

    /// Waits until the workload is pending with a reason that contains `needle`.
    pub async fn pending_because(&self, id: &str, needle: &str) -> Value {
        let (api, path) = (self.api.clone(), format!("/api/v1/workloads/{id}"));
        eventually(&format!("{id} pending because {needle:?}"), Self::WAIT, || {
            let (api, path) = (api.clone(), path.clone());
            async move {
                let w = api.ok(&path).await?;
                let reason = w["pending_reason"].as_str().unwrap_or_default();
                Ok((w["state"] == "pending" && reason.contains(needle)).then_some(w))
            }
        })
        .await
        .unwrap()
    }
}

/// Hand-built policy modules for hostile-tenant stories: each is a few lines of WAT, so what it
/// does to the host is plain to read.
pub mod policies {
    /// `airtime_alloc` as a bump allocator over a mutable global `$heap`, growing the memory as
    /// needed: what every hand-written test policy needs to receive its snapshot.
    pub const BUMP_ALLOC: &str = r#"(func (export "airtime_alloc") (param $len i32) (result i32)
    (local $ptr i32) (local $end i32) (local $size i32)
    (local.set $ptr (global.get $heap))
    (local.set $end (i32.add (local.get $ptr) (local.get $len)))
    (local.set $size (i32.mul (memory.size) (i32.const 65536)))
    (if (i32.gt_u (local.get $end) (local.get $size))
      (then (drop (memory.grow (i32.div_u (i32.add (i32.sub (local.get $end) (local.get $size)) (i32.const 65535)) (i32.const 65536))))))
    (global.set $heap (local.get $end))
    (local.get $ptr))"#;

    /// A policy that behaves (decides nothing) on the control plane's trial snapshot at upload, and
    /// runs `body` once live: the trial snapshot's clock is in 2023, the live one is not. This is how a
    /// hostile module gets past upload checks, and why evaluation must be sandboxed every cycle.
    pub fn time_bomb(body: &str, extra_funcs: &str) -> Vec<u8> {
        wat::parse_str(format!(
            r#"(module
      (memory (export "memory") 2)
      (global $heap (mut i32) (i32.const 65536))
      (data (i32.const 16) "XXXXXXXXXXXXXXXX")
      (func (export "airtime_abi_version") (result i32) (i32.const 1))
      {BUMP_ALLOC}
      (func $pack (param $ptr i32) (param $len i32) (result i64)
        (i64.or (i64.shl (i64.extend_i32_u (local.get $ptr)) (i64.const 32)) (i64.extend_i32_u (local.get $len))))
      {extra_funcs}
      (func (export "airtime_evaluate") (param $snap i32) (param $len i32) (result i64)
        (i32.store (i32.const 1024) (i32.const 0x43445441))
        (i32.store (i32.const 1028) (i32.const 0))
        (if (i64.gt_u (i64.load offset=8 (local.get $snap)) (i64.const 1750000000000))
          (then {body}))
        (call $pack (i32.const 1024) (i32.const 8))))"#
        ))
        .unwrap()
    }

    /// A policy that places its scope's first workload on the first node's first GPU with
    /// `reason` (any bytes: a NUL, escape sequences, megabytes), after logging `log`, and, with
    /// `fail`, gives up through `airtime.fail` with that message instead of deciding — once live
    /// only, like [`time_bomb`], so the upload's trial passes.
    pub fn deciding(reason: &[u8], log: &[u8], fail: Option<&[u8]>) -> Vec<u8> {
        const BUF: usize = 1024;
        const REASON: usize = 44; // after the header, one 32-byte record and a one-GPU list
        let mut decisions = Vec::new();
        let word = |v: usize, out: &mut Vec<u8>| out.extend_from_slice(&(v as u32).to_le_bytes());
        word(0x4344_5441, &mut decisions); // the decisions' magic
        word(1, &mut decisions);
        for v in [1, 0, 0, 0, 40, 1, REASON, reason.len()] {
            word(v, &mut decisions); // place workload 0 on node 0, GPU list at 40, reason at 44
        }
        word(0, &mut decisions); // GPU 0
        decisions.extend_from_slice(reason);
        let escaped = |bytes: &[u8]| bytes.iter().map(|b| format!("\\{b:02x}")).collect::<String>();
        let fail_call = match fail {
            Some(message) => format!(
                "(if (i64.gt_u (i64.load offset=8 (local.get $snap)) (i64.const 1750000000000)) \
                   (then (call $fail (i32.const 196608) (i32.const {})) (return (i64.const 0))))",
                message.len()
            ),
            None => String::new(),
        };
        // Decisions at 1024 (under 128 KiB), the log line at 128 KiB, the failure at 192 KiB, the
        // snapshot copied in from 256 KiB.
        assert!(BUF + decisions.len() < 131072 && log.len() < 65536, "a reason under 128 KiB");
        let pages = 5;
        wat::parse_str(format!(
            r#"(module
  (import "airtime" "log" (func $log (param i32 i32 i32)))
  (import "airtime" "fail" (func $fail (param i32 i32)))
  (memory (export "memory") {pages})
  (global $heap (mut i32) (i32.const {heap}))
  (data (i32.const {BUF}) "{decisions}")
  (data (i32.const 131072) "{log}")
  (data (i32.const 196608) "{fail}")
  (func (export "airtime_abi_version") (result i32) (i32.const 1))
  {BUMP_ALLOC}
  (func (export "airtime_evaluate") (param $snap i32) (param $len i32) (result i64)
    (call $log (i32.const 2) (i32.const 131072) (i32.const {log_len}))
    {fail_call}
    (i64.or (i64.shl (i64.const {BUF}) (i64.const 32)) (i64.const {total}))))"#,
            heap = 262144,
            decisions = escaped(&decisions),
            log = escaped(log),
            fail = escaped(fail.unwrap_or(b"")),
            log_len = log.len(),
            total = decisions.len(),
        ))
        .expect("a well-formed module")
    }

    /// A module of `count` functions that does nothing else (the ABI's exports aside): what an
    /// upload that costs minutes of compilation looks like.
    pub fn many_functions(count: usize) -> Vec<u8> {
        let mut funcs = String::with_capacity(count * 40);
        for i in 0..count {
            funcs.push_str(&format!("(func $f{i} (result i32) (i32.const {i}))\n"));
        }
        wat::parse_str(format!(
            r#"(module
  (memory (export "memory") 1)
  {funcs}
  (func (export "airtime_abi_version") (result i32) (i32.const 1))
  (func (export "airtime_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "airtime_evaluate") (param i32 i32) (result i64)
    (i32.store (i32.const 0) (i32.const 0x43445441))
    (i32.store (i32.const 4) (i32.const 0))
    (i64.const 8)))"#
        ))
        .expect("a well-formed module")
    }
}
