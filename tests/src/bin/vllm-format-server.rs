//! A test server that speaks vLLM's metric format — not an inference server. No real model serves
//! here (none installs on the test machines), so this stands in for one replica of vLLM's OpenAI
//! server as far as Airtime can see it: `GET /health` (503 until `--ready-after-ms`, then 200) and
//! `GET /metrics` in vLLM's series and bucket bounds, driven by a queueing model of the traffic a
//! load balancer would send it.
//!
//! The traffic is the test's: `<dir>/rate` holds the requests per second arriving at the whole
//! service, split evenly over the ready replicas (each ready replica touches `<dir>/replicas/<port>`
//! every 200 ms and counts the fresh ones), and `<dir>/slowdown` (default 1) multiplies its
//! latencies, not its throughput — a slower model behind the same batcher. Each request brings `--prompt-tokens` and asks for
//! `--output-tokens`; the replica serves `--capacity-tokens-per-s` tokens a second at most, runs at
//! most `--max-running` requests at once and queues the rest. Its time to first token is
//! `--ttft-ms` plus the wait in the queue; its time per output token is `--tpot-ms`, growing with
//! how busy it is (× (1 + utilisation)), both times the slowdown.
//!
//! Usage: `vllm-format-server --dir D [--capacity-tokens-per-s 1000] [--prompt-tokens 200]
//! [--output-tokens 300] [--max-running 8] [--ttft-ms 100] [--tpot-ms 20] [--ready-after-ms 0]
//! [--slowdown-file F]`;
//! it listens on `127.0.0.1:$PORT` (the agent gives the port).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const TTFT_BUCKETS: [f64; 16] =
    [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0];
const TPOT_BUCKETS: [f64; 13] = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5];
const E2E_BUCKETS: [f64; 15] = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0];
const MODEL: &str = "airtime/vllm-format-test-model";
const TICK: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
struct Args {
    dir: PathBuf,
    capacity: f64,
    prompt_tokens: f64,
    output_tokens: f64,
    max_running: f64,
    ttft_ms: f64,
    tpot_ms: f64,
    ready_after: Duration,
    /// Where the slowdown is read (default `<dir>/slowdown`): one variant's replicas may be slowed
    /// apart from another's.
    slowdown_file: Option<PathBuf>,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        dir: PathBuf::new(),
        capacity: 1000.0,
        prompt_tokens: 200.0,
        output_tokens: 300.0,
        max_running: 8.0,
        ttft_ms: 100.0,
        tpot_ms: 20.0,
        ready_after: Duration::ZERO,
        slowdown_file: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || value.parse::<f64>().map_err(|_| format!("{flag}: not a number: {value}"));
        match flag.as_str() {
            "--dir" => a.dir = PathBuf::from(&value),
            "--capacity-tokens-per-s" => a.capacity = number()?,
            "--prompt-tokens" => a.prompt_tokens = number()?,
            "--output-tokens" => a.output_tokens = number()?,
            "--max-running" => a.max_running = number()?,
            "--ttft-ms" => a.ttft_ms = number()?,
            "--tpot-ms" => a.tpot_ms = number()?,
            "--ready-after-ms" => a.ready_after = Duration::from_millis(number()? as u64),
            "--slowdown-file" => a.slowdown_file = Some(PathBuf::from(&value)),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if a.dir.as_os_str().is_empty() {
        return Err("--dir is required".into());
    }
    Ok(a)
}

/// A histogram as vLLM exposes it.
#[derive(Debug, Clone)]
struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self { bounds, counts: vec![0; bounds.len()], sum: 0.0, count: 0 }
    }

    fn observe(&mut self, seconds: f64) {
        for (i, le) in self.bounds.iter().enumerate() {
            if seconds <= *le {
                self.counts[i] += 1;
            }
        }
        self.sum += seconds;
        self.count += 1;
    }

    fn write(&self, out: &mut String, name: &str) {
        use std::fmt::Write as _;
        let _ = writeln!(out, "# TYPE {name} histogram");
        for (le, c) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\",model_name=\"{MODEL}\"}} {c}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\",model_name=\"{MODEL}\"}} {}", self.count);
        let _ = writeln!(out, "{name}_count{{model_name=\"{MODEL}\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum{{model_name=\"{MODEL}\"}} {}", self.sum);
    }
}

/// The replica's state: its queue, counters and histograms.
#[derive(Debug)]
struct Replica {
    backlog: f64,
    finished: f64,
    observed: u64,
    prompt_total: f64,
    generation_total: f64,
    ttft: Histogram,
    tpot: Histogram,
    e2e: Histogram,
}

impl Replica {
    fn running(&self, a: &Args) -> f64 {
        if self.backlog < 0.01 { 0.0 } else { self.backlog.min(a.max_running).ceil() }
    }

    fn waiting(&self, a: &Args) -> f64 {
        (self.backlog - a.max_running).max(0.0).floor()
    }

    /// One tick of `dt` seconds with `rate` requests per second arriving here.
    fn step(&mut self, a: &Args, rate: f64, slowdown: f64, dt: f64) {
        let per_request = a.prompt_tokens + a.output_tokens;
        let served_rate = a.capacity / per_request.max(1.0);
        self.backlog += rate * dt;
        let done = self.backlog.min(served_rate * dt);
        self.backlog -= done;
        self.finished += done;
        self.prompt_total += done * a.prompt_tokens;
        self.generation_total += done * a.output_tokens;
        let utilisation = (rate / served_rate.max(1e-9)).min(1.0);
        let queue_wait = self.waiting(a) / served_rate.max(1e-9);
        let ttft = (a.ttft_ms / 1000.0 + queue_wait) * slowdown;
        let tpot = a.tpot_ms / 1000.0 * (1.0 + utilisation) * slowdown;
        while self.observed < self.finished.floor() as u64 {
            self.observed += 1;
            self.ttft.observe(ttft);
            self.tpot.observe(tpot);
            self.e2e.observe(ttft + tpot * a.output_tokens);
        }
    }

    fn exposition(&self, a: &Args) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let gauge = |out: &mut String, name: &str, v: f64| {
            let _ = writeln!(out, "# TYPE {name} gauge\n{name}{{model_name=\"{MODEL}\"}} {v}");
        };
        gauge(&mut out, "vllm:num_requests_running", self.running(a));
        gauge(&mut out, "vllm:num_requests_waiting", self.waiting(a));
        gauge(&mut out, "vllm:gpu_cache_usage_perc", (self.running(a) / a.max_running.max(1.0)).min(1.0));
        let _ = writeln!(
            out,
            "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{{model_name=\"{MODEL}\"}} {}",
            self.prompt_total.floor()
        );
        let _ = writeln!(
            out,
            "# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{{model_name=\"{MODEL}\"}} {}",
            self.generation_total.floor()
        );
        self.ttft.write(&mut out, "vllm:time_to_first_token_seconds");
        self.tpot.write(&mut out, "vllm:time_per_output_token_seconds");
        self.e2e.write(&mut out, "vllm:e2e_request_latency_seconds");
        out
    }
}

fn read_number(path: &Path, default: f64) -> f64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .filter(|v: &f64| v.is_finite())
        .unwrap_or(default)
}

/// Ready replicas: those that touched their file in the last second.
fn ready_replicas(dir: &Path) -> usize {
    let fresh = |e: &std::fs::DirEntry| {
        e.metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .is_some_and(|age| age < Duration::from_secs(1))
    };
    std::fs::read_dir(dir.join("replicas")).map_or(0, |d| d.flatten().filter(fresh).count())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(m) => {
            eprintln!("vllm-format-server: {m}");
            std::process::exit(2);
        }
    };
    let port: u16 = match std::env::var("PORT").ok().and_then(|p| p.parse().ok()) {
        Some(p) => p,
        None => {
            eprintln!("vllm-format-server: PORT is not set (the agent sets it for a serving replica)");
            std::process::exit(2);
        }
    };
    let listener = match TcpListener::bind(("127.0.0.1", port)).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("vllm-format-server: cannot listen on 127.0.0.1:{port}: {e}");
            std::process::exit(1);
        }
    };
    let _ = std::fs::create_dir_all(a.dir.join("replicas"));
    let started = Instant::now();
    let replica = Arc::new(Mutex::new(Replica {
        backlog: 0.0,
        finished: 0.0,
        observed: 0,
        prompt_total: 0.0,
        generation_total: 0.0,
        ttft: Histogram::new(&TTFT_BUCKETS),
        tpot: Histogram::new(&TPOT_BUCKETS),
        e2e: Histogram::new(&E2E_BUCKETS),
    }));
    {
        let (a, replica) = (a.clone(), Arc::clone(&replica));
        tokio::spawn(async move {
            let mine = a.dir.join("replicas").join(port.to_string());
            let mut ticker = tokio::time::interval(TICK);
            loop {
                ticker.tick().await;
                let ready = started.elapsed() >= a.ready_after;
                // Only a ready replica is in the balancer's pool and takes traffic.
                let rate = if ready {
                    let _ = std::fs::File::create(&mine).and_then(|mut f| f.write_all(b"ready"));
                    read_number(&a.dir.join("rate"), 0.0) / ready_replicas(&a.dir).max(1) as f64
                } else {
                    0.0
                };
                let slowdown =
                    read_number(a.slowdown_file.as_deref().unwrap_or(&a.dir.join("slowdown")), 1.0).max(1e-3);
                replica.lock().unwrap_or_else(|p| p.into_inner()).step(&a, rate, slowdown, TICK.as_secs_f64());
            }
        });
    }
    loop {
        let Ok((mut stream, _)) = listener.accept().await else { continue };
        let (a, replica) = (a.clone(), Arc::clone(&replica));
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let n = stream.read(&mut buf).await.unwrap_or(0);
            let request = String::from_utf8_lossy(&buf[..n]);
            let path = request.split_whitespace().nth(1).unwrap_or("/");
            let (status, body) = match path {
                "/health" if started.elapsed() >= a.ready_after => ("200 OK", String::new()),
                "/health" => ("503 Service Unavailable", "loading the model\n".to_owned()),
                "/metrics" => ("200 OK", replica.lock().unwrap_or_else(|p| p.into_inner()).exposition(&a)),
                _ => ("404 Not Found", String::new()),
            };
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}
