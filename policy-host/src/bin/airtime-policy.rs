//! `airtime-policy`: run, check and benchmark policy modules locally, with the same runtime and the
//! same checks as the control plane.
//!
//! ```text
//! airtime-policy check my_policy.wasm
//! airtime-policy run my_policy.wasm --snapshot snapshot.json [--params '{"max_placements": 5}'] [--json]
//! airtime-policy run my_policy.wasm --snapshot snapshot.json --repeat 200     # timing
//! airtime-policy synth --nodes 1000 --pending 10000 > big.json                # a synthetic fleet
//! ```
//!
//! A snapshot file is the JSON form (`airtime_policy_sdk::owned::OwnedSnapshot`; `params` may be a
//! JSON object or a string) or the binary form the control plane sends (starting with `ATSN`), so a
//! production cycle can be replayed byte for byte.

use std::fmt::Write as _;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use airtime_policy_host::{
    CompiledPolicy, EvaluationRecord, EvaluationRequest, PolicyLimits, PolicyLog, PolicyRuntime, RuntimeConfig,
};
use airtime_policy_sdk::abi::{self, Action, SNAPSHOT_MAGIC, Snapshot};
use airtime_policy_sdk::check::check_decisions;
use airtime_policy_sdk::owned::OwnedSnapshot;
use airtime_policy_sdk::testing::SnapshotFixture;
use clap::{Parser, Subcommand};
use serde_json::{Value, json};

#[derive(Parser)]
#[command(name = "airtime-policy", version, about = "Run, check and benchmark Airtime policy modules locally.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check a module as the control plane does at upload (imports, exports, ABI version).
    Check {
        /// The policy module (.wasm).
        module: PathBuf,
    },
    /// Evaluate a module on a snapshot; print its decisions, what the host would refuse, and logs.
    Run(RunArgs),
    /// Write a synthetic fleet snapshot (JSON, or binary with --binary) to try policies on.
    Synth {
        #[arg(long, default_value_t = 100)]
        nodes: u32,
        #[arg(long, default_value_t = 8)]
        gpus_per_node: u32,
        #[arg(long, default_value_t = 1000)]
        pending: u32,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Write the binary form instead of JSON.
        #[arg(long)]
        binary: bool,
        /// Write here instead of standard output.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
}

#[derive(clap::Args)]
struct RunArgs {
    /// The policy module (.wasm).
    module: PathBuf,
    /// The snapshot: JSON, or the binary ABI form.
    #[arg(long)]
    snapshot: PathBuf,
    /// The policy's params (JSON), replacing the snapshot's.
    #[arg(long)]
    params: Option<String>,
    /// A JSON file of limits, as the control plane stores them per policy.
    #[arg(long)]
    limits: Option<PathBuf>,
    /// The deadline in milliseconds, overriding the limits.
    #[arg(long)]
    deadline_ms: Option<u64>,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
    /// Evaluate this many times and report timing (decisions are printed once).
    #[arg(long, default_value_t = 1)]
    repeat: u32,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check { module } => check(&module),
        Command::Run(args) => run(&args),
        Command::Synth { nodes, gpus_per_node, pending, seed, binary, output } => {
            synth(nodes, gpus_per_node, pending, seed, binary, output.as_deref())
        }
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("airtime-policy: {message}");
            ExitCode::from(2)
        }
    }
}

type CliResult = Result<ExitCode, String>;

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))
}

fn out(text: &str) -> Result<(), String> {
    io::stdout().lock().write_all(text.as_bytes()).map_err(|e| format!("writing output: {e}"))
}

fn runtime() -> Result<PolicyRuntime, String> {
    PolicyRuntime::new(RuntimeConfig::default()).map_err(|e| e.to_string())
}

/// Compiles, reporting the time; `Err(exit code)` after printing why it was refused.
fn compile(runtime: &PolicyRuntime, path: &Path) -> Result<Result<(CompiledPolicy, Duration), ExitCode>, String> {
    let wasm = read(path)?;
    let started = Instant::now();
    match runtime.compile(&wasm) {
        Ok(policy) => Ok(Ok((policy, started.elapsed()))),
        Err(error) => {
            eprintln!("{}: refused ({}): {error}", path.display(), error.kind());
            Ok(Err(ExitCode::FAILURE))
        }
    }
}

fn check(path: &Path) -> CliResult {
    let runtime = runtime()?;
    let (policy, took) = match compile(&runtime, path)? {
        Ok(compiled) => compiled,
        Err(code) => return Ok(code),
    };
    out(&format!(
        "{}: ok: ABI version {}, {} bytes, sha256 {}, compiled in {}\n",
        path.display(),
        abi::ABI_VERSION,
        policy.module_len(),
        policy.sha256_hex(),
        ms(took)
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// Reads a snapshot file: binary if it starts with the magic, else JSON.
fn load_snapshot(path: &Path, params: Option<&str>) -> Result<OwnedSnapshot, String> {
    let bytes = read(path)?;
    let mut doc = if bytes.starts_with(&SNAPSHOT_MAGIC) {
        let snapshot = abi::decode_snapshot(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        OwnedSnapshot::from(&snapshot)
    } else {
        let mut value: Value = serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        // `params` may be written as JSON rather than as a string holding JSON.
        if let Some(params) = value.get_mut("params")
            && !params.is_string()
        {
            *params = Value::String(params.to_string());
        }
        serde_json::from_value(value).map_err(|e| format!("{}: {e}", path.display()))?
    };
    if let Some(params) = params {
        serde_json::from_str::<Value>(params).map_err(|e| format!("--params is not JSON: {e}"))?;
        doc.params = params.to_owned();
    }
    Ok(doc)
}

fn run(args: &RunArgs) -> CliResult {
    let mut limits = match &args.limits {
        Some(path) => serde_json::from_slice(&read(path)?).map_err(|e| format!("{}: {e}", path.display()))?,
        None => PolicyLimits::default(),
    };
    if let Some(deadline_ms) = args.deadline_ms {
        limits.deadline_ms = deadline_ms;
    }
    let doc = load_snapshot(&args.snapshot, args.params.as_deref())?;
    let snapshot = doc.as_snapshot();
    let bytes = abi::try_encode_snapshot(&snapshot).map_err(|e| e.to_string())?;
    // The host never sends a snapshot it could not decode; neither do we.
    abi::decode_snapshot(&bytes).map_err(|e| format!("{}: invalid snapshot: {e}", args.snapshot.display()))?;

    let runtime = runtime()?;
    let (policy, compile_time) = match compile(&runtime, &args.module)? {
        Ok(compiled) => compiled,
        Err(code) => return Ok(code),
    };
    let mut times = Vec::with_capacity(args.repeat as usize);
    let mut guest_times = Vec::with_capacity(args.repeat as usize);
    let request = EvaluationRequest::new(&policy, &bytes, &limits);
    let mut record = runtime.evaluate(request);
    times.push(record.elapsed);
    guest_times.push(record.phases.guest);
    for _ in 1..args.repeat {
        record = runtime.evaluate(request);
        times.push(record.elapsed);
        guest_times.push(record.phases.guest);
    }
    guest_times.sort();
    let guest_median = guest_times.get(guest_times.len() / 2).copied().unwrap_or_default();
    let report = Report {
        args,
        policy: &policy,
        compile_time,
        snapshot: &snapshot,
        bytes: bytes.len(),
        record: &record,
        times,
        guest_median,
    };
    if args.json { report.json() } else { report.text() }
}

struct Report<'a> {
    args: &'a RunArgs,
    policy: &'a CompiledPolicy,
    compile_time: Duration,
    snapshot: &'a Snapshot<'a>,
    bytes: usize,
    record: &'a EvaluationRecord,
    times: Vec<Duration>,
    /// Median time inside `airtime_evaluate` (the rest is the sandbox: instantiate, copies, checks).
    guest_median: Duration,
}

impl Report<'_> {
    fn node_name(&self, node: u32) -> &str {
        self.snapshot.node(node).map_or("?", |n| n.name)
    }

    fn workload_name(&self, workload: u32) -> &str {
        self.snapshot.workload(workload).map_or("?", |w| w.name)
    }

    fn devices(&self, gpus: &[u32]) -> Vec<u32> {
        gpus.iter().map(|&g| self.snapshot.gpu(g).map_or(u32::MAX, |g| g.device_index)).collect()
    }

    fn timing(&self) -> Option<(Duration, Duration, Duration, Duration)> {
        let mut sorted = self.times.clone();
        sorted.sort();
        let at = |q: f64| sorted.get(((sorted.len() - 1) as f64 * q).round() as usize).copied();
        Some((at(0.0)?, at(0.5)?, at(0.99)?, at(1.0)?))
    }

    fn text(&self) -> CliResult {
        let s = self.snapshot;
        let mut text = String::new();
        let _ = writeln!(
            text,
            "module    {}  {} bytes  sha256 {}  compiled in {}",
            self.args.module.display(),
            self.policy.module_len(),
            &self.policy.sha256_hex()[..16],
            ms(self.compile_time)
        );
        let _ = writeln!(
            text,
            "snapshot  {} nodes, {} GPUs, {} workloads ({} pending), {} tenants; {} bytes",
            s.nodes.len(),
            s.gpus.len(),
            s.workloads.len(),
            s.pending().count(),
            s.tenants.len(),
            self.bytes
        );
        let record = self.record;
        let code = match &record.result {
            Ok(output) => {
                let decisions = abi::decode_decisions(output).map_err(|e| e.to_string())?;
                let _ = writeln!(
                    text,
                    "evaluated in {}  memory {:.1} MiB  {} decisions ({} bytes)\n",
                    ms(record.elapsed),
                    record.memory_bytes as f64 / (1 << 20) as f64,
                    decisions.len(),
                    output.len()
                );
                let width = decisions.iter().map(|d| self.workload_name(d.workload).chars().count()).max().unwrap_or(0);
                for d in &decisions {
                    let name = self.workload_name(d.workload);
                    let (what, target) = match &d.action {
                        Action::Place { node, gpus } if gpus.is_empty() => {
                            ("place", format!("{} (CPU)", self.node_name(*node)))
                        }
                        Action::Place { node, gpus } => {
                            ("place", format!("{} GPUs {:?}", self.node_name(*node), self.devices(gpus)))
                        }
                        Action::Preempt => ("preempt", String::new()),
                        Action::KeepPending => ("keep", String::new()),
                    };
                    let _ = writeln!(
                        text,
                        "  {what:<8} {name:<width$}  {target}{}{}",
                        if target.is_empty() { "" } else { "  " },
                        d.reason
                    );
                }
                let problems = check_decisions(s, &decisions);
                if !problems.is_empty() {
                    let _ = writeln!(text, "\nthe control plane would refuse {} decisions:", problems.len());
                    for problem in &problems {
                        let _ = writeln!(text, "  {problem}");
                    }
                }
                if problems.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
            }
            Err(error) => {
                let _ = writeln!(text, "failed after {} ({}): {error}", ms(record.elapsed), error.kind());
                ExitCode::FAILURE
            }
        };
        let _ = writeln!(text, "\nlogs: {} lines, {} dropped", record.logs.len(), record.logs_dropped);
        for PolicyLog { level, message } in &record.logs {
            let _ = writeln!(text, "  {level:<5}  {message}");
        }
        if self.times.len() > 1
            && let Some((min, median, p99, max)) = self.timing()
        {
            let _ = writeln!(
                text,
                "\n{} evaluations: min {}  median {}  p99 {}  max {}  (median inside the policy {})",
                self.times.len(),
                ms(min),
                ms(median),
                ms(p99),
                ms(max),
                ms(self.guest_median)
            );
        }
        out(&text)?;
        Ok(code)
    }

    fn json(&self) -> CliResult {
        let record = self.record;
        let mut doc = json!({
            "module": {
                "path": self.args.module.display().to_string(),
                "sha256": self.policy.sha256_hex(),
                "bytes": self.policy.module_len(),
                "compile_us": self.compile_time.as_micros() as u64,
            },
            "elapsed_us": record.elapsed.as_micros() as u64,
            "memory_bytes": record.memory_bytes,
            "logs": record.logs,
            "logs_dropped": record.logs_dropped,
        });
        let code = match &record.result {
            Ok(output) => {
                let decisions = abi::decode_decisions(output).map_err(|e| e.to_string())?;
                let list: Vec<Value> = decisions
                    .iter()
                    .map(|d| {
                        let mut entry = json!({
                            "workload": d.workload,
                            "workload_name": self.workload_name(d.workload),
                            "action": d.action.as_str(),
                            "reason": d.reason,
                        });
                        if let Action::Place { node, gpus } = &d.action {
                            entry["node"] = json!(node);
                            entry["node_name"] = json!(self.node_name(*node));
                            entry["gpus"] = json!(gpus);
                            entry["devices"] = json!(self.devices(gpus));
                        }
                        entry
                    })
                    .collect();
                let problems: Vec<String> =
                    check_decisions(self.snapshot, &decisions).iter().map(ToString::to_string).collect();
                doc["decisions"] = json!(list);
                let code = if problems.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE };
                doc["problems"] = json!(problems);
                code
            }
            Err(error) => {
                doc["error"] = json!({ "kind": error.kind(), "message": error.to_string() });
                ExitCode::FAILURE
            }
        };
        if self.times.len() > 1
            && let Some((min, median, p99, max)) = self.timing()
        {
            doc["timing_us"] = json!({
                "runs": self.times.len(),
                "min": min.as_micros() as u64,
                "median": median.as_micros() as u64,
                "p99": p99.as_micros() as u64,
                "max": max.as_micros() as u64,
                "guest_median": self.guest_median.as_micros() as u64,
            });
        }
        let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
        out(&format!("{text}\n"))?;
        Ok(code)
    }
}

fn synth(nodes: u32, gpus_per_node: u32, pending: u32, seed: u64, binary: bool, output: Option<&Path>) -> CliResult {
    let fixture = SnapshotFixture::synthetic_fleet(nodes, gpus_per_node, pending, seed);
    let bytes = if binary {
        fixture.encode()
    } else {
        let mut text = serde_json::to_vec_pretty(fixture.document()).map_err(|e| e.to_string())?;
        text.push(b'\n');
        text
    };
    match output {
        Some(path) => std::fs::write(path, &bytes).map_err(|e| format!("writing {}: {e}", path.display()))?,
        None => io::stdout().lock().write_all(&bytes).map_err(|e| format!("writing output: {e}"))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// "1.234 ms".
fn ms(duration: Duration) -> String {
    format!("{:.3} ms", duration.as_secs_f64() * 1000.0)
}
