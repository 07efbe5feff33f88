//! `airtime`: the command line of Airtime's control plane. Every command is one or a few calls of
//! the REST API at `<url>/api/v1` (the OpenAPI document at `/api/v1/openapi.json` describes
//! them); tables for people by default, the API's JSON with `-o json`. Exit codes: see
//! [`args::EXIT_CODES`] (and docs/cli.md).

mod args;
mod client;
mod config;
mod error;
mod nodes;
mod output;
mod policies;
mod services;
mod tenants;
mod units;
mod workloads;

use std::io::BufRead as _;
use std::process::ExitCode;

use airtime_protocol::settings::PrioritySettings;
use clap::Parser as _;
use serde_json::{Value, json};

use crate::args::{Cli, Command, LoginArgs, Output, PriorityCommand, PrioritySetArgs};
use crate::client::Client;
use crate::config::Config;
use crate::error::Failure;

fn main() -> ExitCode {
    // clap exits 2 on a usage error (0 for --help and --version).
    let cli = Cli::parse();
    let logging_in = matches!(cli.command, Command::Login(_));
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            output::err(&format!("airtime: cannot start: {err}\n"));
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            let hint = failure.hint().filter(|_| !logging_in).map(|h| format!(" ({h})")).unwrap_or_default();
            output::err(&format!("airtime: {failure}{hint}\n"));
            ExitCode::from(failure.exit_code())
        }
    }
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let config_path = config::path(cli.config.as_deref())?;
    let stored = config::load(&config_path)?;
    let url = cli.url.clone().or_else(|| stored.url.clone());
    let out = cli.output;
    if let Command::Login(args) = &cli.command {
        return login(&config_path, url, cli.token.clone(), args, out).await;
    }
    if let Command::Logout = &cli.command {
        let had = stored.token.is_some();
        config::save(&config_path, &Config { token: None, ..stored })?;
        output::line(if had { "logged out: the stored token is forgotten" } else { "no token was stored" });
        return Ok(());
    }
    let Some(url) = url else {
        return Err(Failure::Usage(
            "no control plane configured: run `airtime login --url URL …`, or set AIRTIME_URL or --url".into(),
        ));
    };
    let token = cli.token.clone().or(stored.token);
    if token.is_none() {
        return Err(Failure::Usage("not logged in: run `airtime login`, or set AIRTIME_TOKEN or --token".into()));
    }
    let client = Client::new(&url, token)?;
    match &cli.command {
        Command::Login(_) | Command::Logout => Ok(()),
        Command::Whoami => whoami(&client, out).await.map(|_| ()),
        Command::Submit(args) => workloads::submit(&client, args, out).await,
        Command::Get { id } => workloads::get(&client, id, out).await,
        Command::List(args) => workloads::list(&client, args, out).await,
        Command::Logs(args) => workloads::logs(&client, args, out).await,
        Command::Cancel { id } => workloads::cancel(&client, id, out).await,
        Command::Nodes(args) => nodes::run(&client, args.command.as_ref(), out).await,
        Command::Tenants(args) => tenants::run(&client, args.command.as_ref(), out).await,
        Command::Services(args) => services::run(&client, args.command.as_ref(), out).await,
        Command::Policies(command) => policies::run(&client, command, out).await,
        Command::Priorities(command) => priorities(&client, command, out).await,
        Command::Usage(args) => usage(&client, args, out).await,
    }
}

/// Logs in (a password, or a token given) and stores the URL and token once the API accepted them.
async fn login(
    config_path: &std::path::Path,
    url: Option<String>,
    token: Option<String>,
    args: &LoginArgs,
    out: Output,
) -> Result<(), Failure> {
    let Some(url) = url else {
        return Err(Failure::Usage("name the control plane: airtime login --url http://airtime:8080 …".into()));
    };
    let url = client::normalize_url(&url)?;
    let token = match (&args.email, token) {
        // A token given and no login name: store that token.
        (None, Some(token)) => token,
        (email, _) => {
            let email = match email {
                Some(email) => email.clone(),
                None => prompt("login name: ")?,
            };
            let password = if args.password_stdin {
                let mut line = String::new();
                std::io::stdin()
                    .lock()
                    .read_line(&mut line)
                    .map_err(|err| Failure::Usage(format!("cannot read the password from standard input: {err}")))?;
                line.trim_end_matches(['\r', '\n']).to_owned()
            } else {
                rpassword::prompt_password("password: ").map_err(|err| {
                    Failure::Usage(format!("cannot read a password ({err}); use --password-stdin or --token"))
                })?
            };
            let anonymous = Client::new(&url, None)?;
            let mut body = json!({"email": email, "password": password});
            if let Some(tenant) = &args.tenant {
                body["tenant"] = tenant.clone().into();
            }
            let session = anonymous.post("/auth/login", &body).await?;
            let session_token = session["token"]
                .as_str()
                .ok_or_else(|| Failure::Unreachable("the login answer holds no token".into()))?
                .to_owned();
            match &args.api_token {
                None => session_token,
                Some(name) => {
                    let session_client = Client::new(&url, Some(session_token))?;
                    let mut body = json!({"name": name});
                    if let Some(days) = args.expires_in_days {
                        body["expires_in_days"] = days.into();
                    }
                    let created = session_client.post("/tokens", &body).await?;
                    created["token"]
                        .as_str()
                        .ok_or_else(|| Failure::Unreachable("the token answer holds no token".into()))?
                        .to_owned()
                }
            }
        }
    };
    // Checked before it is saved: a wrong token or URL is refused here, not at the next command.
    let client = Client::new(&url, Some(token.clone()))?;
    let me = client.get("/auth/me").await?;
    config::save(config_path, &Config { url: Some(url.clone()), token: Some(token) })?;
    if out == Output::Json {
        output::json(&me);
    } else {
        output::line(&format!(
            "logged in to {url} as {} ({}{}, {}); saved in {}",
            output::cell(&me["email"]),
            output::cell(&me["role"]),
            me["tenant"].as_str().map(|t| format!(" in {t}")).unwrap_or_default(),
            match me["credential"].as_str() {
                Some("session") => "a session: valid for an hour; --api-token NAME keeps one longer",
                _ => "an API token",
            },
            config_path.display()
        ));
    }
    Ok(())
}

fn prompt(question: &str) -> Result<String, Failure> {
    output::err(question);
    let mut line = String::new();
    let read = std::io::stdin().lock().read_line(&mut line);
    match read {
        Ok(n) if n > 0 && !line.trim().is_empty() => Ok(line.trim().to_owned()),
        _ => Err(Failure::Usage("no login name: give --email (or --token to store a token)".into())),
    }
}

async fn whoami(client: &Client, out: Output) -> Result<Value, Failure> {
    let me = client.get("/auth/me").await?;
    if out == Output::Json {
        output::json(&me);
    } else {
        output::print(&output::fields(vec![
            ("server", client.root().to_owned()),
            ("user", output::cell(&me["email"])),
            ("role", output::cell(&me["role"])),
            ("tenant", output::cell(&me["tenant"])),
            ("credential", output::cell(&me["credential"])),
        ]));
    }
    Ok(me)
}

async fn usage(client: &Client, args: &args::UsageArgs, out: Output) -> Result<(), Failure> {
    let to = chrono::Utc::now();
    let from = to - chrono::TimeDelta::seconds(i64::try_from(args.since).unwrap_or(i64::MAX / 2));
    // One step for the whole range: the totals by group are what a table shows.
    let step = args.since.clamp(60, 86_400 * 366);
    let path = format!(
        "/usage?from={}&to={}&step_s={step}&group_by={}",
        from.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        to.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        args.by
    );
    let report = client.get(&path).await?;
    if out == Output::Json {
        output::json(&report);
        return Ok(());
    }
    let hours = |v: &Value| v.as_f64().map_or_else(|| "-".into(), |h| format!("{h:.2}"));
    let money = |v: &Value| v.as_f64().map_or_else(|| "-".into(), |c| format!("${c:.2}"));
    let mut t = output::table(&["GROUP", "OWNED GPU-H", "ALLOCATED", "BUSY", "IDLE", "IDLE COST", "COST"]);
    let rows = report["groups"].as_array().into_iter().flatten().map(|g| (output::cell(&g["group"]), g));
    for (group, g) in rows.chain(std::iter::once(("TOTAL".to_owned(), &report["totals"]))) {
        t.add_row(vec![
            group,
            hours(&g["owned_gpu_hours"]),
            hours(&g["allocated_gpu_hours"]),
            hours(&g["busy_gpu_hours"]),
            hours(&g["idle_gpu_hours"]),
            money(&g["idle_cost"]),
            money(&g["owned_cost"]),
        ]);
    }
    output::print(&t);
    Ok(())
}

async fn priorities(client: &Client, command: &PriorityCommand, out: Output) -> Result<(), Failure> {
    let settings = match command {
        PriorityCommand::Get => read_priorities(&client.get("/settings/priorities").await?)?,
        PriorityCommand::Set(args) => {
            let mut settings = read_priorities(&client.get("/settings/priorities").await?)?;
            if !apply(&mut settings, args) {
                return Err(Failure::Usage(
                    "name at least one setting to change (airtime priorities set --help)".into(),
                ));
            }
            let body = serde_json::to_value(&settings).map_err(|err| Failure::Local(err.to_string()))?;
            read_priorities(&client.put("/settings/priorities", &body).await?)?
        }
    };
    if out == Output::Json {
        output::json(&serde_json::to_value(&settings).map_err(|err| Failure::Local(err.to_string()))?);
        return Ok(());
    }
    let s = &settings;
    output::print(&output::fields(vec![
        ("burst_reserve_gpus", s.burst_reserve_gpus.to_string()),
        ("realtime_first", s.realtime_first.to_string()),
        ("min_runtime_s", s.min_runtime_s.to_string()),
        ("grace_period_s", s.grace_period_s.to_string()),
        ("max_preemptions_per_hour", s.max_preemptions_per_hour.to_string()),
        ("checkpointable_only", s.checkpointable_only.to_string()),
        ("night_training_bonus", s.night_training_bonus.to_string()),
        ("night_start_hour", s.night_start_hour.to_string()),
        ("night_end_hour", s.night_end_hour.to_string()),
    ]));
    Ok(())
}

fn read_priorities(value: &Value) -> Result<PrioritySettings, Failure> {
    serde_json::from_value(value.clone()).map_err(|err| {
        Failure::Unreachable(format!("the priority settings the control plane answered are not understood: {err}"))
    })
}

/// Sets the settings named on the command line; false when none was.
fn apply(s: &mut PrioritySettings, a: &PrioritySetArgs) -> bool {
    let mut changed = false;
    let mut set = |field: &mut i32, value: Option<i32>| {
        if let Some(v) = value {
            *field = v;
            changed = true;
        }
    };
    set(&mut s.burst_reserve_gpus, a.burst_reserve_gpus);
    set(&mut s.min_runtime_s, a.min_runtime_s);
    set(&mut s.grace_period_s, a.grace_period_s);
    set(&mut s.max_preemptions_per_hour, a.max_preemptions_per_hour);
    set(&mut s.night_training_bonus, a.night_training_bonus);
    set(&mut s.night_start_hour, a.night_start_hour);
    set(&mut s.night_end_hour, a.night_end_hour);
    if let Some(v) = a.realtime_first {
        s.realtime_first = v;
        changed = true;
    }
    if let Some(v) = a.checkpointable_only {
        s.checkpointable_only = v;
        changed = true;
    }
    changed
}
