//! PostgreSQL that fails over, as `docs/operations.md` ("Database high availability") lays it out:
//! Patroni with etcd managing a primary and a synchronous streaming replica, and the control plane
//! reaching whichever is primary through a router that asks Patroni's REST API (`GET /primary`),
//! as HAProxy with Patroni's health checks does in production (sqlx, the control plane's driver,
//! takes one host per URL: no multi-host `target_session_attrs=read-write` URL).
//!
//! The story: two control plane replicas and an agent with work running, a stream of submissions;
//! the primary's machine dies (its Patroni and its PostgreSQL SIGKILLed at once). The replica is
//! promoted once the leader key's TTL runs out; the control plane answers again on its own (no
//! restart, no configuration change); every submission it answered 2xx exists and runs, once;
//! the running work runs on, its first attempt; no two committed scheduling cycles overlap (one
//! scheduler throughout). It prints the pause: the kill to the first cycle committed on the new
//! primary (BENCHMARKS.md).
//!
//! Needs root, Debian's `patroni` and `etcd-server` (`scripts/prerequisites.sh --for-tests`), and
//! PostgreSQL's server binaries; every process it starts is killed when it ends, pass or fail.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use airtime_tests::{
    Api, ControlPlane, NodeAgent, TestDb, eventually, lease_held, nodes_ready, overlapping_cycles, running_trainers,
    workload_reaches,
};
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

const WAIT: Duration = Duration::from_secs(60);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A child process killed (SIGKILL) when dropped, and waited for.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(command: &mut std::process::Command, log: &Path) -> Killed {
    let out = std::fs::File::create(log).unwrap();
    let err = out.try_clone().unwrap();
    let what = format!("{command:?}");
    Killed(command.stdout(out).stderr(err).spawn().unwrap_or_else(|e| panic!("starting {what}: {e}")))
}

/// The `postgres` user's uid and gid: Patroni runs PostgreSQL, which refuses to run as root.
fn postgres_ids() -> (u32, u32) {
    let id = |flag: &str| {
        let out = std::process::Command::new("id").args([flag, "postgres"]).output().unwrap();
        assert!(out.status.success(), "no postgres user: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().parse::<u32>().unwrap()
    };
    (id("-u"), id("-g"))
}

/// The newest PostgreSQL's server binaries.
fn pg_bin_dir() -> PathBuf {
    let mut versions: Vec<u32> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL's server binaries under /usr/lib/postgresql")
        .filter_map(|e| e.ok()?.file_name().into_string().ok()?.parse().ok())
        .collect();
    versions.sort_unstable();
    PathBuf::from(format!("/usr/lib/postgresql/{}/bin", versions.last().expect("a PostgreSQL version")))
}

/// One Patroni member: its Patroni process (as `postgres`), its data directory, its ports.
struct Member {
    name: String,
    dir: PathBuf,
    pg_port: u16,
    rest_port: u16,
    patroni: Option<Killed>,
}

impl Member {
    fn start(root: &Path, name: &str, scope: &str, etcd_port: u16) -> Member {
        let (uid, gid) = postgres_ids();
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let (pg_port, rest_port) = (free_port(), free_port());
        // Failover within seconds: the leader key lives 10 s (Patroni's default is 30 s) and each
        // member looks every second. Synchronous replication: a commit the primary acknowledged is
        // on the replica, so a failover loses nothing answered (Patroni promotes only the
        // synchronous standby).
        let config = format!(
            r#"scope: {scope}
name: {name}
restapi:
  listen: 127.0.0.1:{rest_port}
  connect_address: 127.0.0.1:{rest_port}
etcd3:
  hosts: 127.0.0.1:{etcd_port}
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 3
    synchronous_mode: true
    postgresql:
      use_pg_rewind: false
      parameters:
        max_wal_senders: 5
        max_replication_slots: 5
        wal_keep_size: 128MB
  initdb:
    - encoding: UTF8
    - auth: trust
  pg_hba:
    - local all all trust
    - host replication all 127.0.0.1/32 trust
    - host all all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:{pg_port}
  connect_address: 127.0.0.1:{pg_port}
  data_dir: {dir}/data
  bin_dir: {bin}
  pgpass: {dir}/pgpass
  authentication:
    replication:
      username: postgres
    superuser:
      username: postgres
  parameters:
    unix_socket_directories: {dir}
"#,
            dir = dir.display(),
            bin = pg_bin_dir().display(),
        );
        let file = dir.join("patroni.yml");
        std::fs::write(&file, config).unwrap();
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).unwrap();
        std::os::unix::fs::chown(&file, Some(uid), Some(gid)).unwrap();
        use std::os::unix::process::CommandExt as _;
        let patroni = spawn(
            std::process::Command::new("patroni").arg(&file).uid(uid).gid(gid).env("HOME", &dir).stdin(Stdio::null()),
            &root.join(format!("{name}.log")),
        );
        Member { name: name.to_owned(), dir, pg_port, rest_port, patroni: Some(patroni) }
    }

    /// Its postmaster's pid, from `postmaster.pid`.
    fn postmaster(&self) -> Option<i32> {
        let pid = std::fs::read_to_string(self.dir.join("data/postmaster.pid")).ok()?;
        pid.lines().next()?.trim().parse().ok()
    }

    /// The machine dies: Patroni and PostgreSQL SIGKILLed at once (its backends exit when they see
    /// their postmaster gone). The leader key stays in etcd until its TTL runs out.
    fn crash(&mut self) {
        let postmaster = self.postmaster();
        drop(self.patroni.take());
        if let Some(pid) = postmaster {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }

    /// Patroni's answer to `GET path` (`/primary` is 200 only on the primary).
    async fn rest(&self, http: &reqwest::Client, path: &str) -> Option<(u16, serde_json::Value)> {
        let answer = http.get(format!("http://127.0.0.1:{}{path}", self.rest_port)).send().await.ok()?;
        let status = answer.status().as_u16();
        Some((status, answer.json().await.unwrap_or_default()))
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.crash();
    }
}

/// A router to the primary, as HAProxy with Patroni's health checks is: every 100 ms it asks each
/// member's `GET /primary`; a new connection goes to the one that answers 200 (refused while none
/// does), and connections to a member that is no longer the primary are cut.
struct Router {
    port: u16,
    task: tokio::task::JoinHandle<()>,
    checks: tokio::task::JoinHandle<()>,
}

impl Router {
    async fn start(members: Vec<(u16, u16)>) -> Router {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tell, primary) = watch::channel::<Option<u16>>(None);
        let checks = tokio::spawn(async move {
            let http = reqwest::Client::builder().timeout(Duration::from_millis(500)).build().unwrap();
            loop {
                let mut found = None;
                for (rest, pg) in &members {
                    let url = format!("http://127.0.0.1:{rest}/primary");
                    if http.get(url).send().await.is_ok_and(|a| a.status() == 200) {
                        found = Some(*pg);
                        break;
                    }
                }
                tell.send_if_modified(|p| std::mem::replace(p, found) != found);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        // Ready once it knows the primary.
        primary.clone().wait_for(Option::is_some).await.unwrap();
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let mut primary = primary.clone();
                let Some(pg) = *primary.borrow_and_update() else { continue };
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(("127.0.0.1", pg)).await else { return };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = primary.wait_for(|p| *p != Some(pg)) => {}
                    }
                });
            }
        });
        Router { port, task, checks }
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        self.task.abort();
        self.checks.abort();
    }
}

/// What one submission of the stream got back.
struct Submitted {
    name: String,
    /// The workload's id when the answer was 2xx.
    id: Option<String>,
    at: Instant,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_primary_dies_under_submissions_and_running_work_and_the_replica_takes_over_losing_nothing() {
    let root = tempfile::tempdir().unwrap();
    let (uid, gid) = postgres_ids();
    std::os::unix::fs::chown(root.path(), Some(uid), Some(gid)).unwrap();
    let (client, peer) = (free_port(), free_port());
    let etcd_dir = root.path().join("etcd");
    let _etcd = spawn(
        std::process::Command::new("etcd")
            .args(["--name", "airtime-test", "--data-dir"])
            .arg(&etcd_dir)
            .args(["--listen-client-urls", &format!("http://127.0.0.1:{client}")])
            .args(["--advertise-client-urls", &format!("http://127.0.0.1:{client}")])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
            .args(["--initial-advertise-peer-urls", &format!("http://127.0.0.1:{peer}")])
            .args(["--initial-cluster", &format!("airtime-test=http://127.0.0.1:{peer}")])
            .stdin(Stdio::null()),
        &root.path().join("etcd.log"),
    );
    let scope = format!("airtime-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let http = reqwest::Client::builder().timeout(Duration::from_secs(2)).build().unwrap();

    // The first member bootstraps the cluster and leads; the second clones it and follows,
    // synchronously.
    let mut first = Member::start(root.path(), "pg-a", &scope, client);
    eventually("pg-a to lead", WAIT, || {
        let (first, http) = (&first, http.clone());
        async move { Ok(first.rest(&http, "/primary").await.is_some_and(|(s, _)| s == 200).then_some(())) }
    })
    .await
    .unwrap();
    let second = Member::start(root.path(), "pg-b", &scope, client);
    eventually("pg-b to be the synchronous standby", WAIT, || {
        let (first, http) = (&first, http.clone());
        async move {
            let Some((_, cluster)) = first.rest(&http, "/cluster").await else { return Ok(None) };
            let members = cluster["members"].as_array().cloned().unwrap_or_default();
            Ok(members.iter().any(|m| m["name"] == "pg-b" && m["role"] == "sync_standby").then_some(()))
        }
    })
    .await
    .unwrap();

    let router = Router::start(vec![(first.rest_port, first.pg_port), (second.rest_port, second.pg_port)]).await;
    let admin = format!("postgres://postgres@127.0.0.1:{}/postgres", router.port);
    let db = TestDb::create_on(&admin).await.unwrap();

    // Two control plane replicas on the router, an agent, work running.
    let lease = ["--leader-lease-ms", "5000"];
    let one = ControlPlane::start(&db, &lease).await.unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(&db.url).await.unwrap();
    lease_held(&pool, None).await.unwrap();
    pool.close().await;
    let two = ControlPlane::start(&db, &lease).await.unwrap();
    let api = one.api();
    let _agent = NodeAgent::start(&two, "steady", &["--simulate-gpus", "2:A100:40960"]).await.unwrap();
    nodes_ready(&api, 1).await.unwrap();
    let running = running_trainers(&api, &["trainer-a", "trainer-b"], WAIT).await.unwrap();

    // A stream of submissions, alternating between the replicas, through the failover.
    let submitted = Arc::new(Mutex::new(Vec::<Submitted>::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stream = {
        let (apis, submitted, stop) = ([one.api(), two.api()], Arc::clone(&submitted), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut i = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let name = format!("stream-{i}");
                let body = json!({"name": name, "class": "evaluation", "resources": {"cpu_millis": 10},
                                  "command": ["sh", "-c", "sleep 0.2"]});
                let api: &Api = &apis[i % 2];
                let answer = tokio::time::timeout(Duration::from_secs(10), api.post("/api/v1/workloads", &body)).await;
                let id = match answer {
                    Ok(Ok(a)) if (200..300).contains(&a.status) => a.body["id"].as_str().map(str::to_owned),
                    _ => None,
                };
                submitted.lock().unwrap().push(Submitted { name, id, at: Instant::now() });
                i += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;

    // The primary's machine dies.
    let killed_at = chrono::Utc::now();
    let killed = Instant::now();
    first.crash();
    eprintln!("killed {} (Patroni and its postmaster)", first.name);

    // The replica is promoted.
    eventually("pg-b to be promoted", WAIT, || {
        let (second, http) = (&second, http.clone());
        async move { Ok(second.rest(&http, "/primary").await.is_some_and(|(s, _)| s == 200).then_some(())) }
    })
    .await
    .unwrap();
    let promoted = killed.elapsed();
    // The control plane answers a submission again, on its own.
    let answered = eventually("a submission answered after the kill", WAIT, || {
        let submitted = Arc::clone(&submitted);
        async move { Ok(submitted.lock().unwrap().iter().find(|s| s.at > killed && s.id.is_some()).map(|s| s.at)) }
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    stream.await.unwrap();

    // The first cycle committed on the new primary: the pause.
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(&db.url).await.unwrap();
    let first_cycle: (Option<chrono::DateTime<chrono::Utc>>,) =
        sqlx::query_as("SELECT min(finished_at) FROM scheduling_cycles WHERE started_at > $1")
            .bind(killed_at)
            .fetch_one(&pool)
            .await
            .unwrap();
    let first_cycle = first_cycle.0.expect("a cycle committed on the new primary");
    let pause = (first_cycle - killed_at).to_std().unwrap();
    eprintln!(
        "failover: replica promoted {:.1} s after the kill; first submission answered {:.1} s; first cycle committed on the new primary {:.1} s",
        promoted.as_secs_f64(),
        (answered - killed).as_secs_f64(),
        pause.as_secs_f64()
    );

    // Nothing answered is lost, and everything answered runs once.
    let submitted = std::mem::take(&mut *submitted.lock().unwrap());
    let answered: Vec<&Submitted> = submitted.iter().filter(|s| s.id.is_some()).collect();
    let refused = submitted.len() - answered.len();
    eprintln!("{} submissions: {} answered 2xx, {refused} not", submitted.len(), answered.len());
    assert!(answered.iter().any(|s| s.at < killed) && answered.iter().any(|s| s.at > killed), "answers on both sides");
    for s in &answered {
        let id = s.id.as_deref().unwrap();
        let w = workload_reaches(&api, id, "succeeded", WAIT).await.unwrap_or_else(|e| panic!("{}: {e:#}", s.name));
        assert_eq!(w["attempt"], 1, "{} ran more than once: {w}", s.name);
    }
    // The work that ran through the failover runs on, its first attempt.
    for id in &running {
        let w = api.ok(&format!("/api/v1/workloads/{id}")).await.unwrap();
        assert_eq!((w["state"].clone(), w["attempt"].clone()), (json!("running"), json!(1)), "{w}");
    }
    // One scheduler throughout.
    assert_eq!(overlapping_cycles(&pool).await.unwrap(), vec![], "cycles of two schedulers overlapped");
    pool.close().await;
    two.stop().await;
    one.stop().await;
    drop(db);
    drop(second);
}
