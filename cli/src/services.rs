//! `airtime services`: elastic inference services over `/api/v1/services` — the caller's services
//! with their replicas and load, one service with its definition, replicas, demand and latest
//! scale events (and, for a service priced per token, its serving: the objective, each variant
//! against it, the capacity learned and what a million tokens cost), and creating one from a spec
//! file.

use airtime_protocol::service::LoadMetric;
use serde_json::Value;

use crate::args::{Output, ServiceCommand};
use crate::client::{self, Client};
use crate::error::Failure;
use crate::{output, workloads};

/// The scale events `show` lists, newest first (the API answers up to 50).
const SCALE_EVENTS_SHOWN: usize = 5;

pub async fn run(client: &Client, command: Option<&ServiceCommand>, out: Output) -> Result<(), Failure> {
    match command {
        None | Some(ServiceCommand::List) => list(client, out).await,
        Some(ServiceCommand::Show { service }) => {
            let id = resolve(client, service).await?;
            show(&client.get(&format!("/services/{id}")).await?, out);
            Ok(())
        }
        Some(ServiceCommand::Create { file }) => {
            let body = workloads::read_spec_of(file, "one service")?;
            let created = client.post("/services", &body).await?;
            if out == Output::Json {
                output::json(&created);
            } else {
                output::line(&format!("service {} created", output::cell(&created["id"])));
                output::print(&output::fields(definition(&created)));
            }
            Ok(())
        }
    }
}

/// A service's id: the argument itself when it is one, else the service of that name (a name
/// several visible services share, in different tenants, is refused).
async fn resolve(client: &Client, service: &str) -> Result<uuid::Uuid, Failure> {
    if let Ok(id) = client::id("service", service) {
        return Ok(id);
    }
    let list = client.get("/services").await?;
    let named: Vec<&Value> = list.as_array().into_iter().flatten().filter(|s| s["name"] == service.trim()).collect();
    match named.as_slice() {
        [] => Err(Failure::NotFound(format!("no service named {service:?}"))),
        [one] => one["id"]
            .as_str()
            .and_then(|id| uuid::Uuid::parse_str(id).ok())
            .ok_or_else(|| Failure::Unreachable("the control plane listed a service without an id".into())),
        several => {
            let owners: Vec<String> = several
                .iter()
                .map(|s| format!("{} ({})", output::cell(&s["id"]), output::cell(&s["tenant"])))
                .collect();
            Err(Failure::Usage(format!("several services are named {service:?}: use an id: {}", owners.join(", "))))
        }
    }
}

/// Every service, one line each.
async fn list(client: &Client, out: Output) -> Result<(), Failure> {
    let list = client.get("/services").await?;
    if out == Output::Json {
        output::json(&list);
        return Ok(());
    }
    let mut t = output::table(&[
        "NAME",
        "TENANT",
        "CLASS",
        "METRIC",
        "RUNNING GPU/CPU",
        "DESIRED GPU/CPU",
        "PENDING",
        "LOAD",
        "SCALE REASON",
    ]);
    for s in list.as_array().into_iter().flatten() {
        let name = match s["state"].as_str() {
            Some("active") | None => output::cell(&s["name"]),
            Some(state) => format!("{} ({state})", output::cell(&s["name"])),
        };
        t.add_row(vec![
            name,
            output::cell(&s["tenant"]),
            output::cell(&s["class"]),
            output::cell(&s["metric"]),
            format!("{}/{}", output::cell(&s["running_gpu_replicas"]), output::cell(&s["running_cpu_replicas"])),
            format!("{}/{}", output::cell(&s["desired_gpu_replicas"]), output::cell(&s["desired_cpu_replicas"])),
            output::cell(&s["pending_replicas"]),
            with_unit(&s["latest_load"], &unit(&s["metric"])),
            output::one_line(&output::cell(&s["scale_reason"]), 100),
        ]);
    }
    output::print(&t);
    Ok(())
}

/// One service as `GET /services/{id}` answers it: its definition, replicas and demand, its latest
/// scale events, and its serving when it is priced per token.
fn show(service: &Value, out: Output) {
    if out == Output::Json {
        output::json(service);
        return;
    }
    output::print(&output::fields(definition(service)));
    if let Some(events) = service["scale_events"].as_array().filter(|e| !e.is_empty()) {
        output::line(&format!(
            "\nScale events (the latest {} of {}):",
            events.len().min(SCALE_EVENTS_SHOWN),
            events.len()
        ));
        output::print(&scale_events(&events[..events.len().min(SCALE_EVENTS_SHOWN)], &unit(&service["metric"])));
    }
    if let Some(block) = serving_block(&service["serving_report"]) {
        output::line("");
        output::line(&block);
    }
}

/// A service's fields: what it is, how it scales, and where it stands now.
fn definition(s: &Value) -> Vec<(&'static str, String)> {
    let unit = unit(&s["metric"]);
    let mut rows = vec![
        ("id", output::cell(&s["id"])),
        ("name", output::cell(&s["name"])),
        ("tenant", output::cell(&s["tenant"])),
        ("state", output::cell(&s["state"])),
        ("class", output::cell(&s["class"])),
        ("metric", format!("{} ({unit})", output::cell(&s["metric"]))),
        ("capacity", format!("{} per replica", with_unit(&s["capacity"], &unit))),
        ("latency target", with_unit(&s["latency_target_ms"], "ms")),
        ("replicas", format!("min {}, max {}", output::cell(&s["min_replicas"]), output::cell(&s["max_replicas"]))),
        (
            "behaviour",
            format!(
                "scale up over {}s, down over {}s; held after {}s without a load report",
                output::cell(&s["scale_up_window_s"]),
                output::cell(&s["scale_down_window_s"]),
                output::cell(&s["stale_after_s"])
            ),
        ),
        ("replica", workloads::resources(&s["replica"])),
        ("command", workloads::command_line(&s["replica"])),
    ];
    if let Some(image) = s["replica"]["container"]["image"].as_str() {
        rows.push(("image", image.to_owned()));
    }
    let cpu = &s["cpu_variant"];
    if cpu.is_object() {
        rows.push((
            "cpu variant",
            format!(
                "{} CPU, {}, {} per replica",
                output::cpu(&cpu["cpu_millis"]),
                output::mib(&cpu["memory_mb"]),
                with_unit(&cpu["capacity"], &unit)
            ),
        ));
        rows.push(("cpu command", workloads::command_line(cpu)));
    }
    // A detail's `serving_report` says it in the serving block; otherwise `serving`, the spec, does.
    if s["serving"].is_object() && serving_block(&s["serving_report"]).is_none() {
        rows.push(("objective", objective(&s["serving"]["objective"])));
    }
    rows.extend([
        (
            "running",
            format!(
                "{} GPU, {} CPU ({} pending)",
                output::cell(&s["running_gpu_replicas"]),
                output::cell(&s["running_cpu_replicas"]),
                output::cell(&s["pending_replicas"])
            ),
        ),
        (
            "desired",
            format!(
                "{} GPU, {} CPU",
                output::cell(&s["desired_gpu_replicas"]),
                output::cell(&s["desired_cpu_replicas"])
            ),
        ),
        ("demand", with_unit(&s["demand"], &unit)),
        (
            "latest load",
            match s["latest_load"] {
                Value::Null => "-".into(),
                ref load => format!("{}, {} ago", with_unit(load, &unit), output::age(&s["latest_load_at"])),
            },
        ),
        ("scale reason", output::one_line(&output::cell(&s["scale_reason"]), 200)),
        ("scaled", output::cell(&s["scaled_at"])),
        ("created", output::cell(&s["created_at"])),
    ]);
    rows
}

/// Scale decisions, replicas as GPU/CPU.
fn scale_events(events: &[Value], unit: &str) -> comfy_table::Table {
    let mut t = output::table(&["AT", "FROM GPU/CPU", "TO GPU/CPU", "STARTED", "DRAINED", "DEMAND", "REASON"]);
    for e in events {
        t.add_row(vec![
            output::cell(&e["at"]),
            format!("{}/{}", output::cell(&e["from_gpu"]), output::cell(&e["from_cpu"])),
            format!("{}/{}", output::cell(&e["to_gpu"]), output::cell(&e["to_cpu"])),
            output::cell(&e["started"]),
            output::cell(&e["drained"]),
            with_unit(&e["demand"], unit),
            output::one_line(&output::cell(&e["reason"]), 120),
        ]);
    }
    t
}

/// The serving of a service priced per token, as `show` prints it: the objective, a line per
/// variant against it, then the totals of the window. `None` unless `serving` is the report of a
/// service's detail (a list's or a creation's `serving` is its spec, without variants).
fn serving_block(serving: &Value) -> Option<String> {
    let variants = serving["variants"].as_array()?;
    let window = duration(&serving["window_s"]);
    let mut text = vec![
        format!("Serving (the last {window}):"),
        output::render(&output::fields(vec![
            ("objective", objective(&serving["objective"])),
            (
                "endpoints",
                format!(
                    "ready {}, metrics {}",
                    output::cell(&serving["ready_path"]),
                    output::cell(&serving["metrics_path"])
                ),
            ),
        ])),
        String::new(),
    ];
    let mut t = output::table(&[
        "VARIANT",
        "READY",
        "TOKENS/S",
        "TTFT P95 MS",
        "TPOT P95 MS",
        "REQUEST P95 MS",
        "OBJECTIVE",
        "CAPACITY TOKENS/S",
        "COST/1M TOKENS",
        "CAPACITY BASIS",
    ]);
    for v in variants {
        t.add_row(vec![
            output::cell(&v["variant"]),
            format!("{}/{}", output::cell(&v["ready_replicas"]), output::cell(&v["replicas"])),
            number(&v["tokens_per_s"]),
            number(&v["ttft_p95_ms"]),
            number(&v["tpot_p95_ms"]),
            number(&v["request_p95_ms"]),
            holds(&v["pressure"]),
            number(&v["capacity"]["tokens_per_s"]),
            money(&v["cost_per_million_tokens"]),
            output::one_line(&output::cell(&v["capacity"]["basis"]), 100),
        ]);
    }
    text.push(output::render(&t));
    text.push(String::new());
    let gpu_only = &serving["gpu_only_cost_per_million_tokens"];
    let versus = match saving(&serving["cost_per_million_tokens"], gpu_only) {
        Some(s) if s.round() == 0.0 => " (no saving)".to_owned(),
        Some(s) if s > 0.0 => format!(" ({s:.0}% saved)"),
        Some(s) => format!(" ({:.0}% more spent)", -s),
        None => String::new(),
    };
    text.push(output::render(&output::fields(vec![
        ("tokens/s", number(&serving["tokens_per_s"])),
        ("tokens", format!("{} over the last {window}", count(&serving["tokens"]))),
        ("cost", money(&serving["cost"])),
        ("cost per 1M tokens", money(&serving["cost_per_million_tokens"])),
        ("GPU only, per 1M tokens", format!("{}{versus}", money(gpu_only))),
    ])));
    Some(text.join("\n"))
}

/// What serving the tokens this way saves against GPU replicas only, in percent of the GPU-only
/// cost (negative: it costs more); `None` when either is unknown or GPU-only is free.
fn saving(actual: &Value, gpu_only: &Value) -> Option<f64> {
    let (actual, gpu_only) = (actual.as_f64()?, gpu_only.as_f64()?);
    (gpu_only > 0.0).then(|| (gpu_only - actual) / gpu_only * 100.0)
}

/// Whether a variant holds the objective by its pressure (the worst observed p95 ÷ its target):
/// `holds (0.80)`, `broken (2.50)`, `unknown` (nothing it targets was observed).
fn holds(pressure: &Value) -> String {
    match pressure.as_f64() {
        Some(p) if p <= 1.0 => format!("holds ({p:.2})"),
        Some(p) => format!("broken ({p:.2})"),
        None => "unknown".into(),
    }
}

/// An objective in words: `TTFT p95 ≤ 800 ms, TPOT p95 ≤ 60 ms`.
fn objective(o: &Value) -> String {
    let parts: Vec<String> = [("ttft_p95_ms", "TTFT"), ("tpot_p95_ms", "TPOT"), ("request_p95_ms", "request")]
        .into_iter()
        .filter_map(|(key, label)| o[key].as_f64().map(|ms| format!("{label} p95 ≤ {} ms", amount(ms))))
        .collect();
    if parts.is_empty() { "no latency target".into() } else { parts.join(", ") }
}

/// The unit of a service's metric (`req/s`, `concurrent requests`, `tokens/s`); the metric's
/// name for one this CLI does not know.
fn unit(metric: &Value) -> String {
    serde_json::from_value::<LoadMetric>(metric.clone()).map_or_else(|_| output::cell(metric), |m| m.unit().to_owned())
}

/// A load or capacity with its unit: `42 req/s`; `-` when absent.
fn with_unit(value: &Value, unit: &str) -> String {
    value.as_f64().map_or_else(|| "-".into(), |x| format!("{} {unit}", amount(x)))
}

/// A number from the API: `2500`, `42.5`, `0.25`; `-` when absent.
fn number(value: &Value) -> String {
    value.as_f64().map_or_else(|| "-".into(), amount)
}

/// A quantity as people read it: three significant digits or the whole part, trailing zeros
/// dropped (`2500`, `42.5`, `0.25`).
fn amount(x: f64) -> String {
    let a = x.abs();
    let text = if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    };
    if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.').to_owned() } else { text }
}

/// A cost in dollars, as `airtime usage` and the dashboard print costs (the nodes' `--cost-per-hour`), two decimals: `$0.42`, `<$0.01`
/// for one too small to show, `-` when unknown (no tokens served, or no priced node).
fn money(value: &Value) -> String {
    match value.as_f64() {
        None => "-".into(),
        Some(x) if x > 0.0 && x < 0.005 => "<$0.01".into(),
        Some(x) => format!("${x:.2}"),
    }
}

/// A count of tokens: `950`, `12.5K`, `15.6M`, `2.1B`.
fn count(value: &Value) -> String {
    let Some(x) = value.as_f64() else { return "-".into() };
    match x.abs() {
        a if a >= 1e9 => format!("{}B", amount(x / 1e9)),
        a if a >= 1e6 => format!("{}M", amount(x / 1e6)),
        a if a >= 1e3 => format!("{}K", amount(x / 1e3)),
        _ => format!("{x:.0}"),
    }
}

/// Seconds as a span: `1h`, `5m`, `90s`.
fn duration(value: &Value) -> String {
    let Some(secs) = value.as_f64().filter(|s| s.is_finite() && *s >= 0.0) else { return "-".into() };
    let secs = secs.round() as u64;
    match secs {
        s if s > 0 && s % 3600 == 0 => format!("{}h", s / 3600),
        s if s > 0 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{Cli, Command};
    use clap::Parser as _;
    use serde_json::json;

    /// A service priced per token over the last hour: the GPU variant holds the objective, the
    /// CPU variant breaks it.
    fn serving() -> Value {
        json!({
            "objective": {"ttft_p95_ms": 800.0, "tpot_p95_ms": 60.0},
            "ready_path": "/health",
            "metrics_path": "/metrics",
            "window_s": 3600.0,
            "tokens_per_s": 4330.0,
            "tokens": 15_600_000.0,
            "cost": 1.234,
            "cost_per_million_tokens": 0.079,
            "gpu_only_cost_per_million_tokens": 0.127,
            "variants": [
                {"variant": "gpu", "replicas": 2, "ready_replicas": 2, "tokens_per_s": 4210.0,
                 "ttft_p95_ms": 640.0, "tpot_p95_ms": 48.5, "request_p95_ms": null, "pressure": 0.808,
                 "capacity": {"tokens_per_s": 2500.0, "declared_tokens_per_s": 2500.0, "basis": "declared",
                              "samples": 120, "saturated_samples": 0},
                 "tokens": 15_100_000.0, "cost": 1.1, "cost_per_million_tokens": 0.0728},
                {"variant": "cpu", "replicas": 2, "ready_replicas": 1, "tokens_per_s": 120.0,
                 "ttft_p95_ms": 2100.0, "tpot_p95_ms": 95.0, "request_p95_ms": null, "pressure": 2.6,
                 "capacity": {"tokens_per_s": 41.1, "declared_tokens_per_s": 300.0,
                              "basis": "below the least served while breaking the objective, scaled to it (46 tokens/s)",
                              "samples": 60, "saturated_samples": 0},
                 "tokens": 500_000.0, "cost": 0.134, "cost_per_million_tokens": null}
            ],
            "history": []
        })
    }

    /// The words of the line that starts with `first`.
    fn words<'a>(text: &'a str, first: &str) -> Vec<&'a str> {
        let line = text.lines().find(|l| l.split_whitespace().next() == Some(first));
        line.unwrap_or_else(|| panic!("no line {first:?} in\n{text}")).split_whitespace().collect()
    }

    #[test]
    fn the_serving_block_shows_each_variant_against_the_objective() {
        let text = serving_block(&serving()).unwrap();
        assert!(text.starts_with("Serving (the last 1h):\n"), "{text}");
        assert!(text.contains("objective: TTFT p95 ≤ 800 ms, TPOT p95 ≤ 60 ms\n"), "{text}");
        assert!(text.contains("endpoints: ready /health, metrics /metrics\n"), "{text}");
        assert_eq!(
            words(&text, "VARIANT"),
            [
                "VARIANT",
                "READY",
                "TOKENS/S",
                "TTFT",
                "P95",
                "MS",
                "TPOT",
                "P95",
                "MS",
                "REQUEST",
                "P95",
                "MS",
                "OBJECTIVE",
                "CAPACITY",
                "TOKENS/S",
                "COST/1M",
                "TOKENS",
                "CAPACITY",
                "BASIS"
            ]
        );
        assert_eq!(
            words(&text, "gpu"),
            ["gpu", "2/2", "4210", "640", "48.5", "-", "holds", "(0.81)", "2500", "$0.07", "declared"]
        );
        let cpu = words(&text, "cpu");
        assert_eq!(cpu[..9], ["cpu", "1/2", "120", "2100", "95", "-", "broken", "(2.60)", "41.1"]);
        assert_eq!(cpu[9], "-", "no tokens priced: no cost per 1M tokens");
        assert_eq!(
            cpu[10..].join(" "),
            "below the least served while breaking the objective, scaled to it (46 tokens/s)"
        );
        // Then the totals, each on its line.
        let totals: Vec<&str> = text.lines().skip_while(|l| !l.starts_with("tokens/s:")).collect();
        assert_eq!(
            totals,
            [
                "tokens/s:                4330",
                "tokens:                  15.6M over the last 1h",
                "cost:                    $1.23",
                "cost per 1M tokens:      $0.08",
                "GPU only, per 1M tokens: $0.13 (38% saved)",
            ]
        );
    }

    #[test]
    fn a_serving_block_needs_a_report() {
        // A list's or a creation's `serving` is the spec: the objective, no variants.
        let spec =
            json!({"objective": {"request_p95_ms": 2000.0}, "ready_path": "/health", "metrics_path": "/metrics"});
        assert_eq!(serving_block(&spec), None);
        assert_eq!(serving_block(&Value::Null), None);
        let service = json!({"metric": "tokens_per_second", "capacity": 2500.0, "serving": spec});
        let rows = definition(&service);
        let find = |key: &str| rows.iter().find(|(k, _)| *k == key).map(|(_, v)| v.clone());
        assert_eq!(find("objective").as_deref(), Some("request p95 ≤ 2000 ms"));
        assert_eq!(find("capacity").as_deref(), Some("2500 tokens/s per replica"));
        // A detail's report says it in its own block instead.
        let detail = json!({"metric": "tokens_per_second", "serving": spec, "serving_report": serving()});
        assert_eq!(definition(&detail).iter().find(|(k, _)| *k == "objective"), None);
    }

    #[test]
    fn serving_numbers_read_as_people_write_them() {
        assert_eq!(holds(&json!(1.0)), "holds (1.00)");
        assert_eq!(holds(&json!(1.2)), "broken (1.20)");
        assert_eq!(holds(&Value::Null), "unknown");
        assert_eq!(objective(&json!({})), "no latency target");
        assert_eq!(money(&json!(0.001)), "<$0.01");
        assert_eq!(money(&json!(0.0)), "$0.00");
        assert_eq!(money(&Value::Null), "-");
        assert_eq!(count(&json!(950.0)), "950");
        assert_eq!(count(&json!(12_500.0)), "12.5K");
        assert_eq!(count(&json!(2_100_000_000.0)), "2.1B");
        assert_eq!(duration(&json!(3600.0)), "1h");
        assert_eq!(duration(&json!(300)), "5m");
        assert_eq!(duration(&json!(90)), "90s");
        assert_eq!(amount(0.25), "0.25");
        assert_eq!(amount(15.0), "15");
        assert_eq!(saving(&json!(0.15), &json!(0.1)).map(f64::round), Some(-50.0));
        assert_eq!(saving(&Value::Null, &json!(0.1)), None);
        assert_eq!(saving(&json!(0.1), &json!(0.0)), None);
        assert_eq!(unit(&json!("requests_per_second")), "req/s");
        assert_eq!(unit(&json!("concurrent_requests")), "concurrent requests");
        assert_eq!(with_unit(&json!(42), "req/s"), "42 req/s");
        assert_eq!(with_unit(&Value::Null, "req/s"), "-");
    }

    #[test]
    fn a_service_shows_its_definition_and_where_it_stands() {
        let service = json!({
            "id": "0190c4e2-0000-7000-8000-000000000001", "name": "chat", "tenant": "research", "state": "active",
            "class": "realtime_inference", "metric": "requests_per_second", "capacity": 15.0,
            "latency_target_ms": 200, "min_replicas": 1, "max_replicas": 8,
            "scale_up_window_s": 0, "scale_down_window_s": 300, "stale_after_s": 60,
            "replica": {"command": ["sh", "-c", "exec serve"], "resources": {"gpu_count": 1, "cpu_millis": 1000,
                        "memory_mb": 1024}},
            "cpu_variant": {"command": ["cpu-serve"], "cpu_millis": 2000, "memory_mb": 1024, "capacity": 4.0},
            "serving": null,
            "desired_gpu_replicas": 3, "desired_cpu_replicas": 1, "running_gpu_replicas": 2,
            "running_cpu_replicas": 1, "pending_replicas": 1, "demand": 42.0, "latest_load": null,
            "scale_reason": "scale up: demand 42 req/s over 3 replicas at 15 req/s each"
        });
        let rows = definition(&service);
        let find = |key: &str| rows.iter().find(|(k, _)| *k == key).map(|(_, v)| v.as_str()).unwrap_or("absent");
        assert_eq!(find("metric"), "requests_per_second (req/s)");
        assert_eq!(find("latency target"), "200 ms");
        assert_eq!(find("replicas"), "min 1, max 8");
        assert_eq!(find("replica"), "1 GPU, 1 CPU, 1Gi");
        assert_eq!(find("command"), "sh -c 'exec serve'");
        assert_eq!(find("cpu variant"), "2 CPU, 1Gi, 4 req/s per replica");
        assert_eq!(find("running"), "2 GPU, 1 CPU (1 pending)");
        assert_eq!(find("desired"), "3 GPU, 1 CPU");
        assert_eq!(find("demand"), "42 req/s");
        assert_eq!(find("latest load"), "-");
        assert_eq!(find("objective"), "absent");
        let events = [json!({"at": "2026-05-01T10:00:00Z", "from_gpu": 2, "from_cpu": 1, "to_gpu": 3, "to_cpu": 1,
                             "started": 1, "drained": 0, "demand": 42.0, "reason": "scale up"})];
        let text = output::render(&scale_events(&events, "req/s"));
        assert_eq!(
            words(&text, "2026-05-01T10:00:00Z"),
            ["2026-05-01T10:00:00Z", "2/1", "3/1", "1", "0", "42", "req/s", "scale", "up"]
        );
    }

    #[test]
    fn services_lists_by_default_and_shows_and_creates() {
        let parse = |args: &[&str]| match Cli::try_parse_from(args).unwrap().command {
            Command::Services(s) => s.command,
            _ => unreachable!(),
        };
        assert!(parse(&["airtime", "services"]).is_none());
        assert!(matches!(parse(&["airtime", "services", "ls"]), Some(ServiceCommand::List)));
        assert!(
            matches!(parse(&["airtime", "services", "show", "chat"]), Some(ServiceCommand::Show { service }) if service == "chat")
        );
        let Some(ServiceCommand::Create { file }) = parse(&["airtime", "services", "create", "-f", "chat.yaml"]) else {
            panic!("not create")
        };
        assert_eq!(file, std::path::Path::new("chat.yaml"));
        assert!(Cli::try_parse_from(["airtime", "services", "create"]).is_err(), "a spec file");
    }

    #[test]
    fn a_service_spec_that_is_not_a_mapping_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chat.json");
        std::fs::write(&path, "[1]").unwrap();
        let f = workloads::read_spec_of(&path, "one service").unwrap_err();
        assert_eq!(f.exit_code(), 2);
        assert!(f.to_string().contains("must be one service"), "{f}");
        let yaml = dir.path().join("chat.yaml");
        std::fs::write(&yaml, "name: chat\nclass: realtime_inference\ncapacity: 2500\nmax_replicas: 4\n").unwrap();
        assert_eq!(workloads::read_spec_of(&yaml, "one service").unwrap()["capacity"], json!(2500));
    }
}
