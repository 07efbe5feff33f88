//! Serving replicas on the wire (protocol 1.3): where a service replica's inference server answers,
//! and what the agent read there — the replica's readiness and its load, tokens and latency in the
//! terms vLLM's Prometheus endpoint uses (`vllm:num_requests_running`, `vllm:num_requests_waiting`,
//! `vllm:gpu_cache_usage_perc`, the time-to-first-token and time-per-output-token histograms, the
//! prompt and generation token counters). The agent reads them beside the replica, so no gateway
//! sits in the request path; the control plane turns them into the service's load, the capacity a
//! replica sustains at the objective and the cost of a token (`docs/token-services.md`).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The most replica samples one heartbeat carries.
pub const MAX_REPLICA_SAMPLES: usize = 1024;

/// Longest endpoint path, in characters.
pub const MAX_PATH_CHARS: usize = 200;

/// Where a replica's server answers on the node: `http://127.0.0.1:$PORT{path}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ServingEndpoints {
    /// Answers 200 once the replica can serve (vLLM: `/health`).
    #[serde(default = "default_ready_path")]
    pub ready_path: String,
    /// Prometheus text in vLLM's metric names (vLLM: `/metrics`).
    #[serde(default = "default_metrics_path")]
    pub metrics_path: String,
}

fn default_ready_path() -> String {
    "/health".into()
}

fn default_metrics_path() -> String {
    "/metrics".into()
}

impl Default for ServingEndpoints {
    fn default() -> Self {
        Self { ready_path: default_ready_path(), metrics_path: default_metrics_path() }
    }
}

impl ServingEndpoints {
    /// Paths are absolute and plain: they are appended to `http://127.0.0.1:PORT`.
    pub fn check(&self) -> Result<(), String> {
        for (name, path) in [("ready_path", &self.ready_path), ("metrics_path", &self.metrics_path)] {
            let ok = path.starts_with('/')
                && path.len() <= MAX_PATH_CHARS
                && path.chars().all(|c| c.is_ascii_graphic() && !matches!(c, '#' | '\\'));
            if !ok {
                return Err(format!(
                    "{name} must be a path starting with '/' (at most {MAX_PATH_CHARS} printable characters), not {path:?}"
                ));
            }
        }
        Ok(())
    }
}

/// What a service promises, at the 95th percentile; any of them may be absent, at least one is set.
#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ServingObjective {
    /// Time to first token, p95, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_p95_ms: Option<f64>,
    /// Time per output token, p95, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_p95_ms: Option<f64>,
    /// Whole-request latency, p95, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_p95_ms: Option<f64>,
}

impl ServingObjective {
    pub fn check(&self) -> Result<(), String> {
        let all = [
            ("ttft_p95_ms", self.ttft_p95_ms),
            ("tpot_p95_ms", self.tpot_p95_ms),
            ("request_p95_ms", self.request_p95_ms),
        ];
        if all.iter().all(|(_, v)| v.is_none()) {
            return Err("objective must set ttft_p95_ms, tpot_p95_ms or request_p95_ms".into());
        }
        for (name, v) in all {
            if let Some(v) = v
                && !(v.is_finite() && v > 0.0 && v <= 3_600_000.0)
            {
                return Err(format!("objective.{name} must be above 0 ms and at most an hour"));
            }
        }
        Ok(())
    }

    /// How far a window's latencies are from the objective: the worst of observed ÷ target over the
    /// targets set and observed (1 or less: held). `None` when nothing it targets was observed.
    pub fn pressure(&self, m: &ServingMetrics) -> Option<f64> {
        [(self.ttft_p95_ms, m.ttft_p95_ms), (self.tpot_p95_ms, m.tpot_p95_ms), (self.request_p95_ms, m.request_p95_ms)]
            .into_iter()
            .filter_map(|(target, seen)| Some(seen? / target?))
            .reduce(f64::max)
    }
}

/// One serving replica, as the agent read it since its last heartbeat.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ReplicaSample {
    pub workload_id: Uuid,
    /// Its readiness endpoint answered 200.
    pub ready: bool,
    /// What its metrics endpoint said; absent when it did not answer or said nothing in vLLM's terms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<ServingMetrics>,
}

impl ReplicaSample {
    pub fn check(&self) -> Result<(), String> {
        self.metrics.as_ref().map_or(Ok(()), ServingMetrics::check)
    }
}

/// A replica's serving over one window (between two reads of its metrics endpoint): gauges as last
/// read, counters as the window's increase, latencies as the window's 95th percentile from the
/// histograms' bucket increases.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ServingMetrics {
    /// Seconds the window covers.
    pub window_s: f64,
    /// `vllm:num_requests_running`.
    pub requests_running: f64,
    /// `vllm:num_requests_waiting`.
    pub requests_waiting: f64,
    /// `vllm:gpu_cache_usage_perc` (0..1), when served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache_usage: Option<f64>,
    /// Increase of `vllm:prompt_tokens_total` over the window.
    pub prompt_tokens: f64,
    /// Increase of `vllm:generation_tokens_total` over the window.
    pub generation_tokens: f64,
    /// Requests finished in the window (the request-latency histogram's count).
    #[serde(default)]
    pub requests_finished: f64,
    /// p95 of `vllm:time_to_first_token_seconds` over the window, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_p95_ms: Option<f64>,
    /// p95 of `vllm:time_per_output_token_seconds` (vLLM 0.10+: `vllm:inter_token_latency_seconds`)
    /// over the window, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_p95_ms: Option<f64>,
    /// p95 of `vllm:e2e_request_latency_seconds` over the window, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_p95_ms: Option<f64>,
}

impl ServingMetrics {
    /// Prompt and generated tokens per second over the window.
    pub fn tokens_per_s(&self) -> f64 {
        if self.window_s > 0.0 { (self.prompt_tokens + self.generation_tokens) / self.window_s } else { 0.0 }
    }

    /// Waiting requests or a full KV cache: the replica serves all it can.
    pub fn saturated(&self) -> bool {
        self.requests_waiting >= 1.0 || self.kv_cache_usage.is_some_and(|u| u >= 0.9)
    }

    pub fn check(&self) -> Result<(), String> {
        let counts = [
            ("requests_running", self.requests_running),
            ("requests_waiting", self.requests_waiting),
            ("prompt_tokens", self.prompt_tokens),
            ("generation_tokens", self.generation_tokens),
            ("requests_finished", self.requests_finished),
        ];
        for (name, v) in counts {
            if !(v.is_finite() && (0.0..=1e15).contains(&v)) {
                return Err(format!("{name} must be a finite number from 0"));
            }
        }
        if !(self.window_s.is_finite() && self.window_s > 0.0 && self.window_s <= 3600.0) {
            return Err("window_s must be above 0 and at most 3600".into());
        }
        if self.kv_cache_usage.is_some_and(|u| !(u.is_finite() && (0.0..=1.0).contains(&u))) {
            return Err("kv_cache_usage must be between 0 and 1".into());
        }
        for (name, v) in [
            ("ttft_p95_ms", self.ttft_p95_ms),
            ("tpot_p95_ms", self.tpot_p95_ms),
            ("request_p95_ms", self.request_p95_ms),
        ] {
            if v.is_some_and(|v| !(v.is_finite() && (0.0..=1e9).contains(&v))) {
                return Err(format!("{name} must be a finite number from 0"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pressure_is_the_worst_observed_target() {
        let objective = ServingObjective { ttft_p95_ms: Some(500.0), tpot_p95_ms: Some(50.0), request_p95_ms: None };
        let m =
            ServingMetrics { ttft_p95_ms: Some(250.0), tpot_p95_ms: Some(75.0), window_s: 2.0, ..Default::default() };
        assert_eq!(objective.pressure(&m), Some(1.5));
        let quiet = ServingMetrics { window_s: 2.0, ..Default::default() };
        assert_eq!(objective.pressure(&quiet), None);
        assert!(ServingObjective::default().check().is_err());
    }

    #[test]
    fn endpoints_are_plain_absolute_paths() {
        assert!(ServingEndpoints::default().check().is_ok());
        for bad in ["health", "/a b", "/x#y", ""] {
            let e = ServingEndpoints { ready_path: bad.into(), ..Default::default() };
            assert!(e.check().is_err(), "{bad:?}");
        }
    }
}
