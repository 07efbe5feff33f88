//! Serving replicas read beside them (protocol 1.3): every heartbeat the agent asks each serving
//! replica's readiness endpoint whether it serves and reads its Prometheus endpoint in vLLM's
//! metric names, and turns two consecutive reads into a window ([`ServingMetrics`]): gauges as
//! read, counters as their increase, latencies as the 95th percentile of the histograms' bucket
//! increases. No gateway sits in the request path.
//!
//! The text format is read by [`Exposition::parse`], which keeps only the series below (summed over
//! their labels: one replica may label by model). It is a few dozen lines because the agent needs
//! five families; a general parser (`prometheus-parse`) would add `regex` to the agent's build.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::protocol::{ReplicaSample, ServingEndpoints, ServingMetrics};

/// vLLM's series, by the names of its v0 and v1 engines.
const RUNNING: &str = "vllm:num_requests_running";
const WAITING: &str = "vllm:num_requests_waiting";
const KV_CACHE: [&str; 2] = ["vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc"];
const PROMPT_TOKENS: &str = "vllm:prompt_tokens_total";
const GENERATION_TOKENS: &str = "vllm:generation_tokens_total";
const TTFT: &str = "vllm:time_to_first_token_seconds";
const TPOT: [&str; 2] = ["vllm:time_per_output_token_seconds", "vllm:inter_token_latency_seconds"];
const REQUEST: &str = "vllm:e2e_request_latency_seconds";

/// How long one endpoint may take to answer.
pub const READ_TIMEOUT: Duration = Duration::from_millis(800);

/// A serving replica the runner supervises, and where it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServingTarget {
    pub workload_id: Uuid,
    pub attempt: u32,
    pub port: u16,
    pub endpoints: ServingEndpoints,
}

/// The series of one read that matter, summed over their labels.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exposition {
    pub gauges: HashMap<String, f64>,
    /// Per histogram: its cumulative buckets by upper bound (`+Inf` last) and its count.
    pub histograms: HashMap<String, Histogram>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// Upper bound (seconds) → cumulative count, `f64::INFINITY` for `+Inf`.
    pub buckets: Vec<(f64, f64)>,
    pub count: f64,
}

impl Exposition {
    /// Reads the text format, keeping vLLM's series; lines it does not understand are skipped (a
    /// replica's other series are none of the agent's business).
    pub fn parse(text: &str) -> Self {
        let mut gauges: HashMap<String, f64> = HashMap::new();
        let mut buckets: HashMap<String, BTreeMap<OrdF64, f64>> = HashMap::new();
        let mut counts: HashMap<String, f64> = HashMap::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || !line.starts_with("vllm:") {
                continue;
            }
            let Some((name, labels, value)) = sample(line) else { continue };
            if !value.is_finite() {
                continue;
            }
            if let Some(family) = name.strip_suffix("_bucket") {
                let Some(le) = label(labels, "le").and_then(|le| match le {
                    "+Inf" => Some(f64::INFINITY),
                    le => le.parse::<f64>().ok(),
                }) else {
                    continue;
                };
                *buckets.entry(family.to_owned()).or_default().entry(OrdF64(le)).or_default() += value;
            } else if let Some(family) = name.strip_suffix("_count") {
                *counts.entry(family.to_owned()).or_default() += value;
            } else if !name.ends_with("_sum") && !name.ends_with("_created") {
                *gauges.entry(name.to_owned()).or_default() += value;
            }
        }
        let histograms = buckets
            .into_iter()
            .map(|(family, b)| {
                let count = counts.get(&family).copied().unwrap_or_else(|| b.values().last().copied().unwrap_or(0.0));
                (family, Histogram { buckets: b.into_iter().map(|(le, c)| (le.0, c)).collect(), count })
            })
            .collect();
        Self { gauges, histograms }
    }

    fn gauge(&self, names: &[&str]) -> Option<f64> {
        names.iter().find_map(|n| self.gauges.get(*n).copied())
    }

    fn histogram(&self, names: &[&str]) -> Option<&Histogram> {
        names.iter().find_map(|n| self.histograms.get(*n))
    }

    /// Whether it speaks vLLM's metrics at all.
    pub fn is_vllm(&self) -> bool {
        self.gauges.contains_key(RUNNING) || self.gauges.contains_key(GENERATION_TOKENS)
    }
}

/// `name{labels} value [timestamp]` → (name, labels, value).
fn sample(line: &str) -> Option<(&str, &str, f64)> {
    let (name, labels, rest) = match line.find('{') {
        Some(open) => {
            let close = open + line[open..].find('}')?;
            (&line[..open], &line[open + 1..close], &line[close + 1..])
        }
        None => {
            let space = line.find(char::is_whitespace)?;
            (&line[..space], "", &line[space..])
        }
    };
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some((name.trim(), labels, value))
}

/// The value of label `key` in `a="x",le="0.5"` (values without escaped quotes, as vLLM writes them).
fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    let mut rest = labels;
    while let Some(eq) = rest.find('=') {
        let name = rest[..eq].trim().trim_start_matches(',').trim();
        let after = rest[eq + 1..].trim_start().strip_prefix('"')?;
        let end = after.find('"')?;
        if name == key {
            return Some(&after[..end]);
        }
        rest = &after[end + 1..];
    }
    None
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct OrdF64(f64);
impl Eq for OrdF64 {}
impl PartialOrd for OrdF64 {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for OrdF64 {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// The 95th percentile of the observations between two reads of a histogram, ms: the bucket
/// increases, linearly interpolated inside the bucket the 95th observation falls in (as
/// Prometheus' `histogram_quantile` does; in the `+Inf` bucket, the highest finite bound).
/// `None` without observations in the window, or after a reset (the server restarted).
pub fn window_p95_ms(before: Option<&Histogram>, now: &Histogram) -> Option<f64> {
    let earlier = |le: f64| before.map_or(0.0, |b| b.buckets.iter().find(|(l, _)| *l == le).map_or(0.0, |(_, c)| *c));
    let increases: Vec<(f64, f64)> = now.buckets.iter().map(|&(le, c)| (le, c - earlier(le))).collect();
    let total = increases.last()?.1;
    if total <= 0.0 || increases.iter().any(|(_, d)| *d < 0.0) {
        return None;
    }
    let rank = 0.95 * total;
    let mut lower = (0.0, 0.0);
    for &(le, cumulative) in &increases {
        if cumulative >= rank {
            if le.is_infinite() {
                return Some(lower.0 * 1000.0);
            }
            let within = (cumulative - lower.1).max(1e-12);
            let seconds = lower.0 + (le - lower.0) * (rank - lower.1) / within;
            return Some(seconds * 1000.0);
        }
        lower = (le, cumulative);
    }
    None
}

/// One read of a replica, and when.
#[derive(Debug, Clone)]
struct Read {
    at: Instant,
    exposition: Exposition,
}

/// Reads every serving replica each heartbeat, keeping each one's previous read.
pub struct Reader {
    client: reqwest::Client,
    previous: HashMap<(Uuid, u32), Read>,
}

impl Default for Reader {
    fn default() -> Self {
        Self::new()
    }
}

impl Reader {
    pub fn new() -> Self {
        let client = reqwest::Client::builder()
            .timeout(READ_TIMEOUT)
            .no_proxy()
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
        Self { client, previous: HashMap::new() }
    }

    /// One sample per target: ready when its readiness endpoint answers 2xx; metrics once two reads
    /// make a window. Targets that left are forgotten.
    pub async fn read(&mut self, targets: &[ServingTarget]) -> Vec<ReplicaSample> {
        self.previous.retain(|key, _| targets.iter().any(|t| (t.workload_id, t.attempt) == *key));
        let mut reads = tokio::task::JoinSet::new();
        for (i, t) in targets.iter().cloned().enumerate() {
            let client = self.client.clone();
            reads.spawn(async move {
                let base = format!("http://127.0.0.1:{}", t.port);
                let ready = client
                    .get(format!("{base}{}", t.endpoints.ready_path))
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success());
                let text = match client.get(format!("{base}{}", t.endpoints.metrics_path)).send().await {
                    Ok(r) if r.status().is_success() => r.text().await.ok(),
                    _ => None,
                };
                (i, ready, text.map(|t| Exposition::parse(&t)).filter(Exposition::is_vllm))
            });
        }
        let mut answers: Vec<(bool, Option<Exposition>)> = vec![(false, None); targets.len()];
        while let Some(done) = reads.join_next().await {
            if let Ok((i, ready, exposition)) = done {
                answers[i] = (ready, exposition);
            }
        }
        let now = Instant::now();
        let mut samples = Vec::with_capacity(targets.len());
        for (target, (ready, exposition)) in targets.iter().zip(answers) {
            let key = (target.workload_id, target.attempt);
            let metrics = exposition.as_ref().and_then(|e| {
                let before = self.previous.get(&key)?;
                window(before, now, e)
            });
            if let Some(exposition) = exposition {
                self.previous.insert(key, Read { at: now, exposition });
            }
            samples.push(ReplicaSample { workload_id: target.workload_id, ready, metrics });
        }
        samples
    }
}

/// The window between two reads; `None` when the counters went back (the server restarted: the
/// next read starts a new window).
fn window(before: &Read, at: Instant, now: &Exposition) -> Option<ServingMetrics> {
    let window_s = at.duration_since(before.at).as_secs_f64();
    if window_s <= 0.0 {
        return None;
    }
    let increase = |name: &str| {
        let d = now.gauge(&[name]).unwrap_or(0.0) - before.exposition.gauge(&[name]).unwrap_or(0.0);
        (d >= 0.0).then_some(d)
    };
    let prompt_tokens = increase(PROMPT_TOKENS)?;
    let generation_tokens = increase(GENERATION_TOKENS)?;
    let p95 = |names: &[&str]| {
        let now = now.histogram(names)?;
        window_p95_ms(before.exposition.histogram(names), now)
    };
    let finished = now
        .histogram(&[REQUEST])
        .map_or(0.0, |h| (h.count - before.exposition.histogram(&[REQUEST]).map_or(0.0, |b| b.count)).max(0.0));
    Some(ServingMetrics {
        window_s,
        requests_running: now.gauge(&[RUNNING]).unwrap_or(0.0).max(0.0),
        requests_waiting: now.gauge(&[WAITING]).unwrap_or(0.0).max(0.0),
        kv_cache_usage: now.gauge(&KV_CACHE).map(|u| u.clamp(0.0, 1.0)),
        prompt_tokens,
        generation_tokens,
        requests_finished: finished,
        ttft_p95_ms: p95(&[TTFT]),
        tpot_p95_ms: p95(&TPOT),
        request_p95_ms: p95(&[REQUEST]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What vLLM 0.6's `/metrics` serves (abridged to its series the agent reads, with the
    /// labels and bucket bounds it uses).
    fn vllm_text(running: f64, waiting: f64, prompt: f64, generated: f64, ttft: [f64; 4]) -> String {
        format!(
            r#"# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{model_name="meta-llama/Llama-3.1-8B-Instruct"}} {running}
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{model_name="meta-llama/Llama-3.1-8B-Instruct"}} {waiting}
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{{model_name="meta-llama/Llama-3.1-8B-Instruct"}} 0.42
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{{model_name="meta-llama/Llama-3.1-8B-Instruct"}} {prompt}
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{model_name="meta-llama/Llama-3.1-8B-Instruct"}} {generated}
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{le="0.1",model_name="meta-llama/Llama-3.1-8B-Instruct"}} {}
vllm:time_to_first_token_seconds_bucket{{le="0.25",model_name="meta-llama/Llama-3.1-8B-Instruct"}} {}
vllm:time_to_first_token_seconds_bucket{{le="0.5",model_name="meta-llama/Llama-3.1-8B-Instruct"}} {}
vllm:time_to_first_token_seconds_bucket{{le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"}} {}
vllm:time_to_first_token_seconds_count{{model_name="meta-llama/Llama-3.1-8B-Instruct"}} {}
vllm:time_to_first_token_seconds_sum{{model_name="meta-llama/Llama-3.1-8B-Instruct"}} 12.5
python_gc_objects_collected_total{{generation="0"}} 1234
"#,
            ttft[0], ttft[1], ttft[2], ttft[3], ttft[3]
        )
    }

    #[test]
    fn the_exposition_keeps_vllms_series_summed_over_labels() {
        let e = Exposition::parse(&vllm_text(3.0, 1.0, 100.0, 200.0, [1.0, 2.0, 3.0, 4.0]));
        assert!(e.is_vllm());
        assert_eq!(e.gauge(&[RUNNING]), Some(3.0));
        assert_eq!(e.gauge(&KV_CACHE), Some(0.42));
        assert_eq!(e.gauges.get("python_gc_objects_collected_total"), None);
        let h = &e.histograms[TTFT];
        assert_eq!(h.buckets, vec![(0.1, 1.0), (0.25, 2.0), (0.5, 3.0), (f64::INFINITY, 4.0)]);
        assert_eq!(h.count, 4.0);
        assert!(!Exposition::parse("# nothing\nprocess_cpu_seconds_total 3\n").is_vllm());
    }

    #[test]
    fn a_window_is_the_increase_between_two_reads() {
        let t0 = Instant::now();
        let before = Read { at: t0, exposition: Exposition::parse(&vllm_text(2.0, 0.0, 100.0, 200.0, [0.0; 4])) };
        // 20 requests' first tokens in the window: 10 under 100 ms, 18 under 250 ms, 20 under 500 ms.
        let now = Exposition::parse(&vllm_text(4.0, 2.0, 1100.0, 2200.0, [10.0, 18.0, 20.0, 20.0]));
        let w = window(&before, t0 + Duration::from_secs(2), &now).expect("a window");
        assert_eq!((w.window_s, w.prompt_tokens, w.generation_tokens), (2.0, 1000.0, 2000.0));
        assert_eq!((w.requests_running, w.requests_waiting, w.kv_cache_usage), (4.0, 2.0, Some(0.42)));
        assert_eq!(w.tokens_per_s(), 1500.0);
        assert!(w.saturated());
        // The 19th of 20 observations falls halfway into the 250–500 ms bucket: 375 ms.
        let p95 = w.ttft_p95_ms.expect("p95");
        assert!((p95 - 375.0).abs() < 1e-6, "{p95}");
        // A restarted server's counters went back: no window.
        let restarted = Exposition::parse(&vllm_text(0.0, 0.0, 5.0, 5.0, [0.0; 4]));
        assert_eq!(window(&before, t0 + Duration::from_secs(4), &restarted), None);
    }

    #[test]
    fn the_p95_past_the_last_bound_is_the_last_finite_bound() {
        let h = Histogram { buckets: vec![(0.1, 0.0), (0.5, 1.0), (f64::INFINITY, 10.0)], count: 10.0 };
        assert_eq!(window_p95_ms(None, &h), Some(500.0));
        assert_eq!(window_p95_ms(Some(&h), &h), None, "no observation in the window");
    }
}
