//! The dashboard in a real browser: headless Chromium, driven over WebDriver (chromedriver), against
//! the real control plane and a node agent with simulated GPUs. The story: a platform engineer
//! signs in and sees the fleet, a running workload on a simulated GPU, and why a workload waits;
//! signs out; and a wrong password is refused with a message.
//!
//! Needs Chromium and chromedriver (`apt-get install -y chromium chromium-driver`;
//! `scripts/prerequisites.sh` installs them). Without them this test fails: it does not skip.

#![allow(clippy::unwrap_used)]

use std::future::Future;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use airtime_tests::{ADMIN_EMAIL, ADMIN_PASSWORD, ControlPlane, NodeAgent, TestDb, nodes_ready, workload_reaches};
use anyhow::{Context as _, bail};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

const CHROMIUM: &str = "/usr/bin/chromium";
const INSTALL_HINT: &str = "run `apt-get install -y chromium chromium-driver` (or scripts/prerequisites.sh)";
/// How long the page may take to show what the API already says (it refreshes every 3 s).
const SHOWN: Duration = Duration::from_secs(30);

/// chromedriver on a free port with its own process group, killed (with the browser it started)
/// when dropped; the browser's profile is a fresh temporary directory.
struct Chromedriver {
    child: std::process::Child,
    url: String,
    profile: tempfile::TempDir,
}

impl Chromedriver {
    async fn start() -> anyhow::Result<Chromedriver> {
        let driver = find_on_path("chromedriver")
            .or_else(|| Some(PathBuf::from("/usr/bin/chromedriver")).filter(|p| p.exists()))
            .with_context(|| format!("chromedriver is not installed: {INSTALL_HINT}"))?;
        anyhow::ensure!(Path::new(CHROMIUM).exists(), "{CHROMIUM} is not installed: {INSTALL_HINT}");
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = std::process::Command::new(&driver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group, so dropping it takes the browser with it.
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {}", driver.display()))?;
        let cd = Chromedriver { child, url: format!("http://127.0.0.1:{port}"), profile: tempfile::tempdir()? };
        let status = format!("{}/status", cd.url);
        let http = reqwest::Client::new();
        until("chromedriver to answer", Duration::from_secs(20), || {
            let request = http.get(&status).send();
            async move { Ok(request.await.ok().filter(|r| r.status().is_success()).map(|_| ())) }
        })
        .await?;
        Ok(cd)
    }

    /// A headless Chromium session.
    async fn browser(&self) -> anyhow::Result<Client> {
        let args = [
            "--headless".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            "--no-first-run".to_owned(),
            "--window-size=1280,1600".to_owned(),
            format!("--user-data-dir={}", self.profile.path().display()),
        ];
        let caps = json!({"goog:chromeOptions": {"binary": CHROMIUM, "args": args}});
        let serde_json::Value::Object(caps) = caps else { unreachable!() };
        ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&self.url)
            .await
            .with_context(|| format!("starting headless {CHROMIUM} through chromedriver"))
    }
}

impl Drop for Chromedriver {
    fn drop(&mut self) {
        // The whole group: chromedriver and the Chromium processes it started.
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|dir| dir.join(name)).find(|p| p.is_file())
}

/// Polls `probe` until it returns Some; on timeout says what it waited for and the last thing seen.
async fn until<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let start = Instant::now();
    let mut last = String::new();
    loop {
        match probe().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => {}
            Err(err) => last = format!("; last error: {err:#}"),
        }
        if start.elapsed() > timeout {
            bail!("timed out after {timeout:?} waiting for {what}{last}");
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// The visible text of each cell of each row of a table's body, as the user sees it.
async fn rows(browser: &Client, table: &str) -> anyhow::Result<Vec<Vec<String>>> {
    let mut out = Vec::new();
    for row in browser.find_all(Locator::Css(&format!("#{table} tbody tr"))).await? {
        let mut cells = Vec::new();
        for cell in row.find_all(Locator::Css("td")).await? {
            cells.push(cell.text().await?.trim().to_owned());
        }
        out.push(cells);
    }
    Ok(out)
}

/// Waits until some row of `table` satisfies `matches`, and returns it; a timeout shows the rows.
async fn row_where(
    browser: &Client,
    table: &str,
    what: &str,
    matches: impl Fn(&[String]) -> bool,
) -> anyhow::Result<Vec<String>> {
    let start = Instant::now();
    loop {
        // The page replaces its rows on every refresh: a stale row is just "look again".
        let seen = rows(browser, table).await;
        if let Ok(seen) = &seen
            && let Some(hit) = seen.iter().find(|r| matches(r))
        {
            return Ok(hit.clone());
        }
        if start.elapsed() > SHOWN {
            let seen = seen.map_or_else(|e| format!("(unreadable: {e:#})"), |r| format!("{r:?}"));
            bail!("timed out after {SHOWN:?} waiting for {what}; the {table} table shows {seen}");
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// The fleet summary's cards as (label, value).
async fn summary(browser: &Client) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for card in browser.find_all(Locator::Css("#summary > div")).await? {
        let label = card.find(Locator::Css("dt")).await?.text().await?;
        let value = card.find(Locator::Css("dd")).await?.text().await?;
        out.push((label.trim().to_owned(), value.trim().to_owned()));
    }
    Ok(out)
}

async fn displayed(browser: &Client, css: &str) -> anyhow::Result<bool> {
    Ok(browser.find(Locator::Css(css)).await?.is_displayed().await?)
}

/// Waits until the element is shown (`true`) or hidden (`false`).
async fn wait_displayed(browser: &Client, css: &str, shown: bool) -> anyhow::Result<()> {
    let what = format!("{css} to be {}", if shown { "shown" } else { "hidden" });
    until(&what, SHOWN, || {
        let now = displayed(browser, css);
        async move { Ok((now.await? == shown).then_some(())) }
    })
    .await
}

async fn sign_in(browser: &Client, email: &str, password: &str) -> anyhow::Result<()> {
    for (css, value) in [("#email", email), ("#password", password)] {
        let field = browser.find(Locator::Css(css)).await?;
        field.clear().await?;
        field.send_keys(value).await?;
    }
    browser.find(Locator::Css("#login-form button[type=submit]")).await?.click().await?;
    Ok(())
}

async fn session_token(browser: &Client) -> anyhow::Result<Value> {
    Ok(browser.execute("return sessionStorage.getItem('airtime.session');", vec![]).await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_platform_engineer_signs_in_and_sees_the_fleet_a_running_workload_and_why_another_waits() {
    // The browser first: a machine without it fails here, before anything else starts.
    let driver = Chromedriver::start().await.unwrap();

    let db = TestDb::create().await.unwrap();
    let cp = ControlPlane::start(&db, &[]).await.unwrap();
    let api = cp.api();
    let agent = NodeAgent::start(&cp, "sim-dash-1", &["--simulate-gpus", "2:H100-SXM:81920", "--cost-per-hour", "8"])
        .await
        .unwrap();
    nodes_ready(&api, 1).await.unwrap();

    // One workload runs on a simulated GPU; one asks for more GPUs than any node has and waits.
    let running = api
        .created(
            "/api/v1/workloads",
            &json!({"name": "dash-eval-running", "class": "evaluation", "priority": 10,
                    "resources": {"gpu_count": 1}, "command": ["sleep", "60"]}),
        )
        .await
        .unwrap();
    let waiting = api
        .created(
            "/api/v1/workloads",
            &json!({"name": "dash-train-waits", "class": "training", "priority": 10,
                    "resources": {"gpu_count": 4}, "command": ["true"]}),
        )
        .await
        .unwrap();
    workload_reaches(&api, running["id"].as_str().unwrap(), "running", SHOWN).await.unwrap();
    let waiting_path = format!("/api/v1/workloads/{}", waiting["id"].as_str().unwrap());
    // The policy's reason, not the placeholder a submission carries until its first cycle.
    let reason = until("the 4-GPU workload's pending reason", SHOWN, || {
        let w = api.ok(&waiting_path);
        async move {
            let w = w.await?;
            let decided =
                |r: &&str| w["state"] == "pending" && !r.is_empty() && *r != "waiting for the next scheduling cycle";
            Ok(w["pending_reason"].as_str().filter(decided).map(str::to_owned))
        }
    })
    .await
    .unwrap();

    let browser = driver.browser().await.unwrap();
    let started = Instant::now();
    let outcome = story(&browser, &cp.url, &reason).await;
    if let Err(err) = outcome {
        let shot = std::env::temp_dir().join(format!("airtime-dashboard-{}.png", uuid::Uuid::new_v4().simple()));
        let saved = match browser.screenshot().await {
            Ok(png) => std::fs::write(&shot, png).map(|()| format!("screenshot: {}", shot.display())),
            Err(e) => Ok(format!("no screenshot: {e}")),
        };
        let _ = browser.close().await;
        panic!("{err:#}\n{}", saved.unwrap_or_else(|e| format!("no screenshot: {e}")));
    }
    browser.close().await.unwrap();
    eprintln!("dashboard story in the browser: {:.1} s", started.elapsed().as_secs_f64());
    // Leave no `sleep 60` behind.
    let running_id = running["id"].as_str().unwrap();
    api.created(&format!("/api/v1/workloads/{running_id}/cancel"), &Value::Null).await.unwrap();
    workload_reaches(&api, running_id, "cancelled", SHOWN).await.unwrap();
    agent.kill().await;
    cp.stop().await;
}

async fn story(browser: &Client, url: &str, reason: &str) -> anyhow::Result<()> {
    // Signed out, the page asks to sign in and shows no fleet.
    browser.goto(url).await?;
    wait_displayed(browser, "#login-form", true).await?;
    anyhow::ensure!(!displayed(browser, "#dashboard").await?, "the fleet shows before signing in");

    sign_in(browser, ADMIN_EMAIL, ADMIN_PASSWORD).await?;
    wait_displayed(browser, "#dashboard", true).await?;
    anyhow::ensure!(!displayed(browser, "#login-form").await?, "the sign-in form stays after signing in");
    anyhow::ensure!(displayed(browser, "#logout").await?, "no sign-out button once signed in");

    // The node, marked as having simulated GPUs.
    let node = row_where(browser, "nodes", "the node in the nodes table", |r| {
        r.first().is_some_and(|name| name.starts_with("sim-dash-1")) && r.get(1).is_some_and(|s| s == "ready")
    })
    .await?;
    let badge = browser.find(Locator::Css("#nodes tbody tr td:first-child .badge.simulated")).await?;
    let badge_text = badge.text().await?;
    anyhow::ensure!(
        badge.is_displayed().await? && badge_text.contains("simulated"),
        "the node row {node:?} has no visible simulated badge (badge text {badge_text:?})"
    );

    // A simulated GPU held by the running workload, the other one free.
    row_where(browser, "gpus", "a GPU held by dash-eval-running", |r| {
        r.first().is_some_and(|n| n == "sim-dash-1")
            && r.get(2).is_some_and(|m| m.contains("H100-SXM") && m.contains("simulated"))
            && r.get(6).is_some_and(|h| h == "dash-eval-running")
    })
    .await?;
    row_where(browser, "gpus", "a free GPU", |r| r.get(6).is_some_and(|h| h == "free")).await?;

    // Both workloads, and why the big one waits: the reason the API gives, word for word.
    row_where(browser, "workloads", "dash-eval-running shown running", |r| {
        r.first().is_some_and(|n| n == "dash-eval-running") && r.get(3).is_some_and(|s| s == "running")
    })
    .await?;
    row_where(browser, "workloads", &format!("dash-train-waits shown pending because {reason:?}"), |r| {
        r.first().is_some_and(|n| n == "dash-train-waits")
            && r.get(3).is_some_and(|s| s == "pending")
            && r.get(4).is_some_and(|g| g == "4")
            && r.get(5).is_some_and(|why| why == reason)
    })
    .await?;

    // The fleet summary: one of the two GPUs busy, the other one's share of the node's $8/hour idle.
    let want = [("GPUs busy", "1 / 2"), ("Idle GPU cost", "$4.00 / hour")];
    let start = Instant::now();
    loop {
        let seen = summary(browser).await;
        if let Ok(cards) = &seen
            && want.iter().all(|(k, v)| cards.iter().any(|(ck, cv)| ck == k && cv == v))
        {
            break;
        }
        if start.elapsed() > SHOWN {
            bail!("timed out after {SHOWN:?} waiting for {want:?} in the fleet summary; it shows {seen:?}");
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }

    // Sign out: the sign-in form again, the fleet hidden, the session gone from the tab.
    browser.find(Locator::Css("#logout")).await?.click().await?;
    wait_displayed(browser, "#login-form", true).await?;
    anyhow::ensure!(!displayed(browser, "#dashboard").await?, "the fleet still shows after signing out");
    anyhow::ensure!(session_token(browser).await?.is_null(), "the session token outlives signing out");
    // And it stays signed out past the page's next refresh.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    anyhow::ensure!(
        displayed(browser, "#login-form").await? && !displayed(browser, "#dashboard").await?,
        "the fleet came back after signing out"
    );

    // A wrong password: an error under the form, still signed out.
    sign_in(browser, ADMIN_EMAIL, "not the admin password").await?;
    let error = until("the sign-in error", SHOWN, move || async move {
        let text = browser.find(Locator::Css("#login-error")).await?.text().await?;
        Ok(Some(text).filter(|t| !t.is_empty()))
    })
    .await?;
    anyhow::ensure!(error == "Wrong email or password.", "the sign-in error reads {error:?}");
    anyhow::ensure!(displayed(browser, "#login-form").await?, "the sign-in form went away after a wrong password");
    anyhow::ensure!(!displayed(browser, "#dashboard").await?, "the fleet shows after a wrong password");
    anyhow::ensure!(session_token(browser).await?.is_null(), "a wrong password left a session token");
    Ok(())
}
