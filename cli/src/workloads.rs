//! `submit`, `get`, `list`, `logs` and `cancel`: workloads over `/api/v1/workloads`.

use std::path::Path;
use std::time::Duration;

use airtime_protocol::agent::LogStream;
use airtime_protocol::workload::WorkloadState;
use reqwest::Method;
use serde_json::{Map, Value, json};

use crate::args::{ListArgs, LogsArgs, Output, SubmitArgs};
use crate::client::{self, Client};
use crate::error::Failure;
use crate::output;

/// Reads a workload's spec file (or standard input for `-`): JSON or YAML, by its extension, else
/// whichever parses.
pub fn read_spec(path: &Path) -> Result<Value, Failure> {
    read_spec_of(path, "one workload")
}

/// Reads a spec file of `what` ("one workload", "one service"), as [`read_spec`]: a mapping of
/// its fields.
pub fn read_spec_of(path: &Path, what: &str) -> Result<Value, Failure> {
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
            .map_err(|err| Failure::Usage(format!("cannot read the spec from standard input: {err}")))?
    } else {
        std::fs::read_to_string(path)
            .map_err(|err| Failure::Usage(format!("cannot read the spec {}: {err}", path.display())))?
    };
    let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    let json = || serde_json::from_str::<Value>(&text).map_err(|e| e.to_string());
    let yaml = || serde_norway::from_str::<Value>(&text).map_err(|e| e.to_string());
    let parsed = match ext.as_deref() {
        Some("json") => json(),
        Some("yaml" | "yml") => yaml(),
        _ => json().or_else(|_| yaml()),
    };
    let value = parsed.map_err(|err| Failure::Usage(format!("the spec {} is not valid: {err}", path.display())))?;
    if !value.is_object() {
        return Err(Failure::Usage(format!("the spec {} must be {what}: a mapping of its fields", path.display())));
    }
    Ok(value)
}

/// The submission as the API takes it: the spec file's, with every flag given set over it.
pub fn submission(args: &SubmitArgs) -> Result<Value, Failure> {
    let mut spec = match &args.file {
        Some(path) => read_spec(path)?,
        None => json!({}),
    };
    let Some(body) = spec.as_object_mut() else {
        return Err(Failure::Usage("the spec must be a mapping of a workload's fields".into()));
    };
    let mut set = |key: &str, value: Option<Value>| {
        if let Some(value) = value {
            body.insert(key.to_owned(), value);
        }
    };
    set("name", args.name.clone().map(Value::from));
    set("class", args.class.map(|c| json!(c)));
    set("tenant", args.tenant.clone().map(Value::from));
    set("priority", args.priority.map(Value::from));
    set("preemptible", args.preemptible.then_some(Value::Bool(true)));
    set("checkpointable", args.checkpointable.then_some(Value::Bool(true)));
    set("expected_duration_s", args.expected_duration.map(Value::from));
    set("nodes", args.nodes.map(Value::from));
    if !args.command.is_empty() {
        set("command", Some(json!(args.command)));
    }

    let object = |body: &mut Map<String, Value>, key: &str| -> Result<Map<String, Value>, Failure> {
        match body.remove(key) {
            None | Some(Value::Null) => Ok(Map::new()),
            Some(Value::Object(map)) => Ok(map),
            Some(_) => Err(Failure::Usage(format!("the spec's {key} must be a mapping"))),
        }
    };
    let mut resources = object(body, "resources")?;
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(value) = value {
            resources.insert(key.to_owned(), value);
        }
    };
    put("gpu_count", args.gpus.map(Value::from));
    put("gpu_memory_mb", args.gpu_memory.map(Value::from));
    put("gpu_models", (!args.gpu_model.is_empty()).then(|| json!(args.gpu_model)));
    put("gpu_milli", args.gpu_milli.map(Value::from));
    put("mig_profile", args.mig_profile.clone().map(Value::from));
    put("cpu_millis", args.cpu.map(Value::from));
    put("memory_mb", args.memory.map(Value::from));
    put("cpu_capable", args.cpu_capable.then_some(Value::Bool(true)));
    if !resources.is_empty() {
        body.insert("resources".into(), Value::Object(resources));
    }

    let mut slo = object(body, "slo")?;
    if let Some(latency) = args.latency_ms {
        slo.insert("latency_ms".into(), latency.into());
    }
    if let Some(deadline) = &args.deadline {
        chrono::DateTime::parse_from_rfc3339(deadline).map_err(|_| {
            Failure::Usage(format!("--deadline {deadline:?} is not an RFC 3339 time (2026-12-01T06:00:00Z)"))
        })?;
        slo.insert("deadline".into(), deadline.clone().into());
    }
    if !slo.is_empty() {
        body.insert("slo".into(), Value::Object(slo));
    }

    let mut env = object(body, "env")?;
    for (name, value) in &args.env {
        env.insert(name.clone(), value.clone().into());
    }
    if !env.is_empty() {
        body.insert("env".into(), Value::Object(env));
    }

    if let Some(image) = &args.image {
        let mut container = object(body, "container")?;
        container.insert("image".into(), image.clone().into());
        body.insert("container".into(), Value::Object(container));
    }
    let has_command = body.get("command").and_then(Value::as_array).is_some_and(|c| !c.is_empty());
    if !has_command {
        if body.get("container").is_some_and(Value::is_object) {
            // In a container, no arguments runs the image's own command.
            body.entry("command").or_insert_with(|| json!([]));
        } else if args.file.is_none() {
            return Err(Failure::Usage(
                "give the command to run after `--` (airtime submit --name … --class … -- python train.py), or --image"
                    .into(),
            ));
        }
    }
    Ok(spec)
}

/// A workload's resources in a few words: `2 GPU (20Gi), 500m CPU, 1Gi`.
pub fn resources(w: &Value) -> String {
    let r = &w["resources"];
    let mut parts = Vec::new();
    match r["gpu_count"].as_i64().unwrap_or(0) {
        0 => {}
        n => {
            let share = match r["gpu_milli"].as_i64() {
                Some(m) if m < 1000 => format!(" ×{m}/1000"),
                _ => String::new(),
            };
            let mig = r["mig_profile"].as_str().map(|p| format!(" {p}")).unwrap_or_default();
            let memory = match output::mib(&r["gpu_memory_mb"]).as_str() {
                "-" => String::new(),
                m => format!(" ({m})"),
            };
            let per_node = match w["gang_size"].as_i64() {
                Some(size) if size > 1 => {
                    format!(" per node × {size} nodes (rank {})", w["gang_rank"].as_i64().unwrap_or(0))
                }
                _ => String::new(),
            };
            parts.push(format!("{n} GPU{share}{mig}{memory}{per_node}"));
        }
    }
    if r["cpu_millis"].as_i64().unwrap_or(0) > 0 {
        parts.push(format!("{} CPU", output::cpu(&r["cpu_millis"])));
    }
    if r["memory_mb"].as_i64().unwrap_or(0) > 0 {
        parts.push(output::mib(&r["memory_mb"]));
    }
    if parts.is_empty() { "-".into() } else { parts.join(", ") }
}

/// Why it is where it is: the pending reason, the exit, the preemption or the message.
fn why(w: &Value) -> String {
    let text = match w["state"].as_str() {
        Some("pending") => w["pending_reason"].as_str().or(w["preempted_reason"].as_str()).map(str::to_owned),
        Some("succeeded" | "failed") => match (&w["exit_code"], w["message"].as_str()) {
            (Value::Number(code), Some(message)) => Some(format!("exit {code}: {message}")),
            (Value::Number(code), None) => Some(format!("exit {code}")),
            (_, message) => message.map(str::to_owned),
        },
        _ => w["message"].as_str().or(w["preempted_reason"].as_str()).map(str::to_owned),
    };
    text.map_or_else(|| "-".into(), |t| output::one_line(&t, 120))
}

pub fn command_line(w: &Value) -> String {
    let words: Vec<String> = w["command"]
        .as_array()
        .map(|c| c.iter().map(|a| quote(a.as_str().unwrap_or_default())).collect())
        .unwrap_or_default();
    output::one_line(&words.join(" "), 200)
}

/// An argument as a shell would need it: plain words as they are, others in single quotes.
fn quote(word: &str) -> String {
    let plain = !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain { word.to_owned() } else { format!("'{}'", word.replace('\'', "'\\''")) }
}

pub async fn submit(client: &Client, args: &SubmitArgs, out: Output) -> Result<(), Failure> {
    let body = submission(args)?;
    let key = args.idempotency_key.clone().unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    // The key makes a retry safe: a submission whose answer was lost is answered again, never
    // queued twice. So retry when the control plane could not be reached or failed.
    let mut delays = [Duration::from_millis(300), Duration::from_secs(1)].into_iter();
    let resp = loop {
        let req = client.request(Method::POST, "/workloads").header("idempotency-key", &key).json(&body);
        match client.send(req).await {
            Ok(resp) => break resp,
            Err(Failure::Unreachable(message)) => match delays.next() {
                Some(delay) => {
                    output::err(&format!("airtime: {message}; retrying\n"));
                    tokio::time::sleep(delay).await;
                }
                None => return Err(Failure::Unreachable(message)),
            },
            Err(other) => return Err(other),
        }
    };
    let replayed = resp.headers().get("idempotent-replayed").is_some_and(|v| v == "true");
    let text = resp.text().await.map_err(|err| client.unreachable(&err))?;
    let w: Value = serde_json::from_str(&text)
        .map_err(|err| Failure::Unreachable(format!("the control plane's answer is not JSON: {err}")))?;
    if out == Output::Json {
        output::json(&w);
        return Ok(());
    }
    let note = if replayed { " (an earlier submission with this idempotency key)" } else { "" };
    output::line(&format!("workload {} submitted{note}", output::cell(&w["id"])));
    output::print(&output::fields(vec![
        ("name", output::cell(&w["name"])),
        ("tenant", output::cell(&w["tenant"])),
        ("state", output::cell(&w["state"])),
        ("why", why(&w)),
    ]));
    Ok(())
}

pub async fn get(client: &Client, id: &str, out: Output) -> Result<(), Failure> {
    let id = client::id("workload", id)?;
    let w = client.get(&format!("/workloads/{id}")).await?;
    if out == Output::Json {
        output::json(&w);
        return Ok(());
    }
    let mut rows = vec![
        ("id", output::cell(&w["id"])),
        ("name", output::cell(&w["name"])),
        ("tenant", output::cell(&w["tenant"])),
        ("class", output::cell(&w["class"])),
        ("priority", output::cell(&w["priority"])),
        ("state", output::cell(&w["state"])),
        ("why", why(&w)),
        ("attempt", output::cell(&w["attempt"])),
        ("resources", resources(&w)),
        ("command", command_line(&w)),
    ];
    if let Some(image) = w["container"]["image"].as_str() {
        rows.push(("image", image.to_owned()));
    }
    rows.extend([
        ("node", output::cell(if w["node_id"].is_null() { &w["last_node_id"] } else { &w["node_id"] })),
        ("submitted", output::cell(&w["submitted_at"])),
        ("started", output::cell(&w["started_at"])),
        ("finished", output::cell(&w["finished_at"])),
    ]);
    output::print(&output::fields(rows));
    if let Some(history) = w["history"].as_array().filter(|h| !h.is_empty()) {
        output::line("\nHistory:");
        let mut t = output::table(&["AT", "FROM", "TO", "ATTEMPT", "DETAIL"]);
        for e in history {
            t.add_row(vec![
                output::cell(&e["at"]),
                output::cell(&e["from_state"]),
                output::cell(&e["to_state"]),
                output::cell(&e["attempt"]),
                output::one_line(e["detail"].as_str().unwrap_or("-"), 120),
            ]);
        }
        output::print(&t);
    }
    if let Some(decisions) = w["decisions"].as_array().filter(|d| !d.is_empty()) {
        output::line("\nDecisions:");
        let mut t = output::table(&["AT", "KIND", "NODE", "POLICY", "REASON"]);
        for d in decisions {
            t.add_row(vec![
                output::cell(&d["decided_at"]),
                output::cell(&d["kind"]),
                output::cell(&d["node_name"]),
                output::cell(&d["policy_name"]),
                output::one_line(d["reason"].as_str().unwrap_or("-"), 120),
            ]);
        }
        output::print(&t);
    }
    if let Some(lines) = w["last_output"].as_array().filter(|l| !l.is_empty()) {
        output::line("\nLast output:");
        for l in lines {
            output::line(&format!("  {}", l.as_str().unwrap_or_default()));
        }
    }
    Ok(())
}

pub async fn list(client: &Client, args: &ListArgs, out: Output) -> Result<(), Failure> {
    let mut query: Vec<(&str, String)> = Vec::new();
    if let Some(state) = args.state {
        query.push(("state", state.as_str().to_owned()));
    }
    if let Some(class) = args.class {
        query.push(("class", output::cell(&json!(class))));
    }
    if let Some(tenant) = &args.tenant {
        query.push(("tenant", tenant.clone()));
    }
    if let Some(node) = &args.node {
        query.push(("node_id", client::id("node", node)?.to_string()));
    }
    if let Some(service) = &args.service {
        query.push(("service_id", client::id("service", service)?.to_string()));
    }
    if let Some(limit) = args.limit {
        query.push(("limit", limit.to_string()));
    }
    let list = client.json(client.request(Method::GET, "/workloads").query(&query)).await?;
    if out == Output::Json {
        output::json(&list);
        return Ok(());
    }
    let mut t = output::table(&["ID", "NAME", "TENANT", "CLASS", "STATE", "PRIO", "RESOURCES", "AGE", "WHY"]);
    for w in list.as_array().into_iter().flatten() {
        t.add_row(vec![
            output::cell(&w["id"]),
            output::one_line(w["name"].as_str().unwrap_or("-"), 40),
            output::cell(&w["tenant"]),
            output::cell(&w["class"]),
            output::cell(&w["state"]),
            output::cell(&w["priority"]),
            resources(w),
            output::age(&w["submitted_at"]),
            why(w),
        ]);
    }
    output::print(&t);
    Ok(())
}

pub async fn cancel(client: &Client, id: &str, out: Output) -> Result<(), Failure> {
    let id = client::id("workload", id)?;
    let w = client.post(&format!("/workloads/{id}/cancel"), &json!({})).await?;
    if out == Output::Json {
        output::json(&w);
    } else {
        output::line(&format!("workload {id}: {}", output::cell(&w["state"])));
    }
    Ok(())
}

/// Where one read of the output left off.
struct Reader {
    /// The last chunk read: the next read asks for what came after it.
    cursor: Option<i64>,
    out: Output,
}

impl Reader {
    /// Prints one line: its text on the stream it came from (or JSON Lines with `-o json`).
    fn print(&mut self, line: &Value) {
        if let Some(cursor) = line["cursor"].as_i64() {
            self.cursor = Some(self.cursor.map_or(cursor, |c| c.max(cursor)));
        }
        if self.out == Output::Json {
            output::line(&line.to_string());
            return;
        }
        let text = format!("{}\n", line["text"].as_str().unwrap_or_default());
        if line["stream"] == "stderr" { output::err(&text) } else { output::out(&text) }
    }
}

fn log_query(args: &LogsArgs, cursor: Option<i64>, follow: bool) -> Vec<(&'static str, String)> {
    let mut query = Vec::new();
    if let Some(attempt) = args.attempt {
        query.push(("attempt", attempt.to_string()));
    }
    if let Some(stream) = args.stream {
        query.push(("stream", if stream == LogStream::Stderr { "stderr" } else { "stdout" }.to_owned()));
    }
    match cursor {
        // What came since: a tail applies only to the first read.
        Some(cursor) => query.push(("after", cursor.to_string())),
        None => {
            if let Some(tail) = args.tail {
                query.push(("tail", tail.to_string()));
            }
        }
    }
    if follow {
        query.push(("follow", "true".into()));
    }
    query
}

/// Reads the output there is now, after the reader's cursor; `only`: the one read of `logs`
/// without -f, which prints the API's answer with `-o json` and says what retention dropped.
async fn read_once(
    client: &Client,
    path: &str,
    args: &LogsArgs,
    reader: &mut Reader,
    only: bool,
) -> Result<(), Failure> {
    let logs = client.json(client.request(Method::GET, path).query(&log_query(args, reader.cursor, false))).await?;
    if reader.out == Output::Json && only {
        // Read once: the API's answer as it is.
        output::json(&logs);
        return Ok(());
    }
    for line in logs["lines"].as_array().into_iter().flatten() {
        reader.print(line);
    }
    if let Some(cursor) = logs["cursor"].as_i64() {
        reader.cursor = Some(reader.cursor.map_or(cursor, |c| c.max(cursor)));
    }
    if only {
        let dropped = logs["dropped_bytes"].as_i64().unwrap_or(0);
        if dropped > 0 {
            output::err(&format!(
                "airtime: {dropped} bytes of the earliest output were dropped by the retention limit\n"
            ));
        }
        let lost = logs["lost_lines"].as_i64().unwrap_or(0);
        if lost > 0 {
            output::err(&format!("airtime: {lost} lines were lost before they reached the control plane\n"));
        }
    }
    Ok(())
}

pub async fn logs(client: &Client, args: &LogsArgs, out: Output) -> Result<(), Failure> {
    let id = client::id("workload", &args.id)?;
    let path = format!("/workloads/{id}/logs");
    let mut reader = Reader { cursor: None, out };
    if !args.follow {
        return read_once(client, &path, args, &mut reader, true).await;
    }
    // Follow: the answer is JSON Lines, each line as it arrives. The server ends it when the
    // workload has ended and its output is in, or after its longest wait; then follow on from
    // the last cursor until the workload has ended.
    let mut broken = 0;
    loop {
        let req = client.streaming(&path).query(&log_query(args, reader.cursor, true));
        let mut resp = client.send(req).await?;
        let mut pending: Vec<u8> = Vec::new();
        let ended_cleanly = loop {
            match resp.chunk().await {
                Ok(Some(bytes)) => {
                    pending.extend_from_slice(&bytes);
                    while let Some(newline) = pending.iter().position(|&b| b == b'\n') {
                        let raw: Vec<u8> = pending.drain(..=newline).collect();
                        match serde_json::from_slice::<Value>(&raw) {
                            Ok(line) => reader.print(&line),
                            Err(_) if raw.iter().all(u8::is_ascii_whitespace) => {}
                            Err(err) => {
                                return Err(Failure::Unreachable(format!("a followed log line is not JSON: {err}")));
                            }
                        }
                    }
                }
                Ok(None) => break true,
                Err(_) => break false,
            }
        };
        if ended_cleanly {
            broken = 0;
        } else {
            broken += 1;
            if broken >= 5 {
                return Err(Failure::Unreachable("the followed log kept breaking off".into()));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let w = client.get(&format!("/workloads/{id}")).await?;
        let ended = w["state"].as_str().and_then(state).is_some_and(WorkloadState::is_terminal);
        if ended {
            // Whatever came in after the stream's last read.
            return read_once(client, &path, args, &mut reader, false).await;
        }
    }
}

fn state(name: &str) -> Option<WorkloadState> {
    WorkloadState::ALL.into_iter().find(|s| s.as_str() == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{Cli, Command};
    use clap::Parser as _;

    fn submit_args(args: &[&str]) -> SubmitArgs {
        let mut all = vec!["airtime", "submit"];
        all.extend_from_slice(args);
        match Cli::try_parse_from(all).unwrap().command {
            Command::Submit(s) => s,
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_gang_across_nodes_is_nodes_times_gpus_per_node() {
        let body = submission(&submit_args(&[
            "--name",
            "llama-70b",
            "--class",
            "training",
            "--nodes",
            "4",
            "--gpus-per-node",
            "8",
            "--",
            "torchrun",
            "train.py",
        ]))
        .unwrap();
        assert_eq!(body["nodes"], json!(4));
        assert_eq!(body["resources"]["gpu_count"], json!(8));
        let member = json!({"resources": {"gpu_count": 8}, "gang_size": 4, "gang_rank": 0});
        assert_eq!(resources(&member), "8 GPU per node × 4 nodes (rank 0)");
    }

    #[test]
    fn flags_make_the_apis_submission() {
        let body = submission(&submit_args(&[
            "--name",
            "train",
            "--class",
            "training",
            "--gpus",
            "2",
            "--gpu-memory",
            "40Gi",
            "--cpu",
            "4",
            "--memory",
            "16Gi",
            "--checkpointable",
            "-e",
            "EPOCHS=3",
            "--image",
            "registry.example/t:1",
            "--",
            "python",
            "train.py",
        ]))
        .unwrap();
        assert_eq!(
            body,
            json!({"name": "train", "class": "training", "checkpointable": true,
                   "command": ["python", "train.py"], "env": {"EPOCHS": "3"},
                   "container": {"image": "registry.example/t:1"},
                   "resources": {"gpu_count": 2, "gpu_memory_mb": 40960, "cpu_millis": 4000, "memory_mb": 16384}})
        );
        let image_only = submission(&submit_args(&["--name", "n", "--class", "evaluation", "--image", "i"])).unwrap();
        assert_eq!(image_only["command"], json!([]), "the image's own command");
        let Err(f) = submission(&submit_args(&["--name", "n", "--class", "evaluation"])) else { panic!() };
        assert_eq!(f.exit_code(), 2);
        assert!(f.to_string().contains("after `--`"), "{f}");
    }

    #[test]
    fn flags_override_a_spec_file_and_keep_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spec.yaml");
        std::fs::write(
            &path,
            "name: nightly\nclass: evaluation\nresources:\n  cpu_millis: 100\n  memory_mb: 64\ncommand: [sh, -c, 'echo hi']\n\
             container:\n  image: old\n  working_dir: /work\n",
        )
        .unwrap();
        let file = path.to_str().unwrap();
        let body =
            submission(&submit_args(&["-f", file, "--cpu", "250m", "--priority", "7", "--image", "new"])).unwrap();
        assert_eq!(body["name"], "nightly");
        assert_eq!(body["priority"], 7);
        assert_eq!(body["resources"], json!({"cpu_millis": 250, "memory_mb": 64}));
        assert_eq!(body["command"], json!(["sh", "-c", "echo hi"]));
        assert_eq!(body["container"], json!({"image": "new", "working_dir": "/work"}));
    }

    #[test]
    fn a_bad_spec_file_is_a_usage_error_that_says_where() {
        let dir = tempfile::tempdir().unwrap();
        let yaml = dir.path().join("spec.yaml");
        std::fs::write(&yaml, "name: [unclosed\n").unwrap();
        let Err(f) = read_spec(&yaml) else { panic!() };
        assert_eq!(f.exit_code(), 2);
        assert!(f.to_string().contains("is not valid"), "{f}");
        let list = dir.path().join("spec.json");
        std::fs::write(&list, "[1, 2]").unwrap();
        assert!(read_spec(&list).unwrap_err().to_string().contains("must be one workload"));
        let missing = dir.path().join("missing.yaml");
        assert!(read_spec(&missing).unwrap_err().to_string().contains("cannot read the spec"));
    }

    #[test]
    fn a_workload_says_why_it_is_where_it_is() {
        let pending = json!({"state": "pending", "pending_reason": "no node has 4 free GPUs"});
        assert_eq!(why(&pending), "no node has 4 free GPUs");
        assert_eq!(why(&json!({"state": "failed", "exit_code": 3, "message": null})), "exit 3");
        assert_eq!(why(&json!({"state": "running"})), "-");
        let w = json!({"resources": {"gpu_count": 1, "gpu_milli": 250, "gpu_memory_mb": 10240, "cpu_millis": 500,
                                     "memory_mb": 0, "mig_profile": null}});
        assert_eq!(resources(&w), "1 GPU ×250/1000 (10Gi), 500m CPU");
        let w = json!({"command": ["sh", "-c", "echo it's done", "--flag=1", ""]});
        assert_eq!(command_line(&w), r#"sh -c 'echo it'\''s done' --flag=1 ''"#);
    }
}
