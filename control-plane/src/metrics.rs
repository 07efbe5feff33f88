//! Prometheus text exposition. The loop's own numbers (cycle durations, failures) are kept in
//! memory; fleet and queue gauges are read from PostgreSQL at scrape time, so they are never stale.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sqlx::PgPool;

use crate::model::{NodeState, WorkloadState};

/// Upper bounds of the cycle duration histogram, in seconds.
const BUCKETS: [f64; 12] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

#[derive(Default)]
pub struct Metrics {
    cycles: Mutex<Histogram>,
    cycle_failures: AtomicU64,
    /// Cycles failed in a row, and why the last one did: `/readyz` reports a stalled loop.
    failures_in_a_row: AtomicU64,
    last_failure: Mutex<Option<String>>,
    queue_depth: AtomicU64,
}

/// Cycles that may fail in a row before `/readyz` says the loop is stalled.
pub const STALLED_AFTER_FAILURES: u64 = 3;

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Metrics {
    pub fn cycle_finished(&self, elapsed: Duration) {
        if let Ok(mut h) = self.cycles.lock() {
            let secs = elapsed.as_secs_f64();
            for (i, bound) in BUCKETS.iter().enumerate() {
                if secs <= *bound {
                    h.counts[i] += 1;
                }
            }
            h.count += 1;
            h.sum += secs;
        }
    }

    pub fn cycle_failed(&self, error: &str) {
        self.cycle_failures.fetch_add(1, Ordering::Relaxed);
        self.failures_in_a_row.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut last) = self.last_failure.lock() {
            *last = Some(error.chars().take(500).collect());
        }
    }

    /// A cycle that ran to its end (or found nothing to decide): the loop is not stalled.
    pub fn cycle_succeeded(&self) {
        self.failures_in_a_row.store(0, Ordering::Relaxed);
    }

    /// Why the scheduling loop is stalled, if it has failed [`STALLED_AFTER_FAILURES`] cycles in a
    /// row on this replica.
    pub fn stalled(&self) -> Option<String> {
        let n = self.failures_in_a_row.load(Ordering::Relaxed);
        if n < STALLED_AFTER_FAILURES {
            return None;
        }
        let last = self.last_failure.lock().ok().and_then(|l| l.clone()).unwrap_or_default();
        Some(format!("the scheduling loop failed {n} cycles in a row; the last: {last}"))
    }

    pub fn set_queue_depth(&self, depth: usize) {
        self.queue_depth.store(depth as u64, Ordering::Relaxed);
    }

    /// The exposition; `named`: with the figures that name tenants and services (the caller gave
    /// the `--metrics-token`), else fleet-wide figures only.
    pub async fn render(&self, db: &PgPool, named: bool, hold: std::time::Duration) -> sqlx::Result<String> {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP airtime_scheduling_cycle_duration_seconds Time of one scheduling cycle, read to commit."
        );
        let _ = writeln!(out, "# TYPE airtime_scheduling_cycle_duration_seconds histogram");
        if let Ok(h) = self.cycles.lock() {
            for (i, bound) in BUCKETS.iter().enumerate() {
                let _ =
                    writeln!(out, "airtime_scheduling_cycle_duration_seconds_bucket{{le=\"{bound}\"}} {}", h.counts[i]);
            }
            let _ = writeln!(out, "airtime_scheduling_cycle_duration_seconds_bucket{{le=\"+Inf\"}} {}", h.count);
            let _ = writeln!(out, "airtime_scheduling_cycle_duration_seconds_sum {}", h.sum);
            let _ = writeln!(out, "airtime_scheduling_cycle_duration_seconds_count {}", h.count);
        }
        let _ = writeln!(out, "# HELP airtime_scheduling_cycle_failures_total Cycles that failed and were retried.");
        let _ = writeln!(out, "# TYPE airtime_scheduling_cycle_failures_total counter");
        let _ =
            writeln!(out, "airtime_scheduling_cycle_failures_total {}", self.cycle_failures.load(Ordering::Relaxed));

        let by_state: Vec<(String, i64)> =
            sqlx::query_as("SELECT state, count(*) FROM workloads GROUP BY state").fetch_all(db).await?;
        let pending = by_state.iter().find(|(s, _)| s == "pending").map(|(_, n)| *n).unwrap_or(0);
        let _ = writeln!(out, "# HELP airtime_queue_depth Workloads waiting for placement.");
        let _ = writeln!(out, "# TYPE airtime_queue_depth gauge");
        let _ = writeln!(out, "airtime_queue_depth {pending}");
        let _ = writeln!(out, "# HELP airtime_workloads Workloads by state.");
        let _ = writeln!(out, "# TYPE airtime_workloads gauge");
        for state in WorkloadState::ALL {
            let n = by_state.iter().find(|(s, _)| s == state.as_str()).map(|(_, n)| *n).unwrap_or(0);
            let _ = writeln!(out, "airtime_workloads{{state=\"{}\"}} {n}", state.as_str());
        }

        let nodes: Vec<(String, i64)> =
            sqlx::query_as("SELECT node_shown_state(state, cordon), count(*) FROM nodes GROUP BY 1")
                .fetch_all(db)
                .await?;
        let _ = writeln!(out, "# HELP airtime_nodes Nodes by state (cordoned and draining: held by an operator).");
        let _ = writeln!(out, "# TYPE airtime_nodes gauge");
        for state in NodeState::ALL {
            let n = nodes.iter().find(|(s, _)| s == state.as_str()).map(|(_, n)| *n).unwrap_or(0);
            let _ = writeln!(out, "airtime_nodes{{state=\"{}\"}} {n}", state.as_str());
        }
        let (gpus, granted, held_milli): (i64, i64, i64) = sqlx::query_as(
            "SELECT count(*), count(gr.milli), COALESCE(sum(gr.milli), 0)::bigint FROM gpus g \
             JOIN nodes n ON n.id = g.node_id \
             LEFT JOIN (SELECT gpu_id, sum(milli) AS milli FROM gpu_grants GROUP BY gpu_id) gr ON gr.gpu_id = g.id \
             WHERE g.present AND n.state <> 'lost'",
        )
        .fetch_one(db)
        .await?;
        let _ = writeln!(out, "# HELP airtime_gpus GPUs on live nodes, by whether a workload holds them.");
        let _ = writeln!(out, "# TYPE airtime_gpus gauge");
        let _ = writeln!(out, "airtime_gpus{{held=\"true\"}} {granted}");
        let _ = writeln!(out, "airtime_gpus{{held=\"false\"}} {}", gpus - granted);
        let _ = writeln!(
            out,
            "# HELP airtime_gpus_allocated GPUs held by workloads, counting shares as fractions (0.25 for a quarter)."
        );
        let _ = writeln!(out, "# TYPE airtime_gpus_allocated gauge");
        let _ = writeln!(out, "airtime_gpus_allocated {}", held_milli as f64 / 1000.0);
        let faulty: Vec<(String, i32)> = sqlx::query_as(
            "SELECT n.name, g.device_index FROM gpus g JOIN nodes n ON n.id = g.node_id \
             WHERE g.present AND g.fault IS NOT NULL ORDER BY n.name, g.device_index",
        )
        .fetch_all(db)
        .await?;
        let _ = writeln!(
            out,
            "# HELP airtime_gpus_faulty GPUs quarantined for a fault (XID, ECC, retired pages, off the bus)."
        );
        let _ = writeln!(out, "# TYPE airtime_gpus_faulty gauge");
        let _ = writeln!(out, "airtime_gpus_faulty {}", faulty.len());
        if named && !faulty.is_empty() {
            let _ = writeln!(out, "# HELP airtime_gpu_faulty 1 for each quarantined GPU, by node and index.");
            let _ = writeln!(out, "# TYPE airtime_gpu_faulty gauge");
            for (node, index) in &faulty {
                let _ = writeln!(out, "airtime_gpu_faulty{{node=\"{}\",gpu=\"{index}\"}} 1", label(node));
            }
        }
        // Slowed clocks are a warning, not a fault: counted apart, the GPUs keep their work. The
        // reasons are the agent's latest report's (fresh within a heartbeat).
        let throttled: Vec<(String, i32, String)> = sqlx::query_as(
            "SELECT n.name, g.device_index, g.throttle FROM gpus g JOIN nodes n ON n.id = g.node_id \
             WHERE g.present AND g.throttle IS NOT NULL AND n.state <> 'lost' ORDER BY n.name, g.device_index",
        )
        .fetch_all(db)
        .await?;
        let _ = writeln!(out, "# HELP airtime_gpus_throttled GPUs whose clocks are held down for heat or power now.");
        let _ = writeln!(out, "# TYPE airtime_gpus_throttled gauge");
        let _ = writeln!(out, "airtime_gpus_throttled {}", throttled.len());
        if named && !throttled.is_empty() {
            let _ = writeln!(
                out,
                "# HELP airtime_gpu_throttled 1 for each reason a GPU's clocks are held down, by node, index and reason."
            );
            let _ = writeln!(out, "# TYPE airtime_gpu_throttled gauge");
            for (node, index, reasons) in &throttled {
                for reason in crate::fleet::telemetry::throttle_of(Some(reasons)) {
                    let _ = writeln!(
                        out,
                        "airtime_gpu_throttled{{node=\"{}\",gpu=\"{index}\",reason=\"{}\"}} 1",
                        label(node),
                        reason.as_str()
                    );
                }
            }
        }
        if named {
            render_services(&mut out, db).await?;
            render_gpu_seconds(&mut out, db).await?;
            render_budgets(&mut out, db, hold).await?;
        } else {
            let _ = writeln!(
                out,
                "# Tenant and service figures: send the control plane's --metrics-token as a bearer token."
            );
        }
        Ok(out)
    }
}

/// A label value in the exposition format: backslash, quote and newline escaped.
fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Each budget's GPU-hours and what its tenant used of them this period, by tenant and period.
async fn render_budgets(out: &mut String, db: &PgPool, hold: std::time::Duration) -> sqlx::Result<()> {
    let budgets = crate::budgets::standing(db, None, hold).await?;
    let _ = writeln!(out, "# HELP airtime_tenant_budget_gpu_hours A tenant's GPU-hour budget for the period.");
    let _ = writeln!(out, "# TYPE airtime_tenant_budget_gpu_hours gauge");
    for b in &budgets {
        let _ = writeln!(
            out,
            "airtime_tenant_budget_gpu_hours{{tenant=\"{}\",period=\"{}\"}} {}",
            label(&b.tenant),
            b.period.as_str(),
            b.gpu_hours
        );
    }
    let _ =
        writeln!(out, "# HELP airtime_tenant_budget_used_gpu_hours GPU-hours a tenant used this period, as billed.");
    let _ = writeln!(out, "# TYPE airtime_tenant_budget_used_gpu_hours gauge");
    for b in &budgets {
        let _ = writeln!(
            out,
            "airtime_tenant_budget_used_gpu_hours{{tenant=\"{}\",period=\"{}\"}} {}",
            label(&b.tenant),
            b.period.as_str(),
            b.used_gpu_hours
        );
    }
    Ok(())
}

/// GPU-seconds by state (owned, allocated, busy, idle), tenant and class, from the hourly roll-up
/// (`crate::usage`): counters that advance once an hour closes, so `rate()` over a few hours, or
/// `increase()` over a day, gives GPU-hours as `GET /api/v1/usage` does. GPU-time nobody held has
/// tenant and class `""`.
async fn render_gpu_seconds(out: &mut String, db: &PgPool) -> sqlx::Result<()> {
    let rows: Vec<(String, String, f64, f64, f64, f64)> = sqlx::query_as(
        "SELECT COALESCE(t.name, ''), COALESCE(u.class, ''), sum(u.owned_s), sum(u.allocated_s), sum(u.busy_s), \
                sum(GREATEST(u.owned_s - u.busy_s, 0)) \
         FROM gpu_usage_hourly u LEFT JOIN tenants t ON t.id = u.tenant_id GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .fetch_all(db)
    .await?;
    let _ = writeln!(
        out,
        "# HELP airtime_gpu_seconds_total GPU-seconds by state, tenant and class (closed hours; a share counts its fraction)."
    );
    let _ = writeln!(out, "# TYPE airtime_gpu_seconds_total counter");
    for (tenant, class, owned, allocated, busy, idle) in rows {
        let (tenant, class) = (label(&tenant), label(&class));
        for (state, value) in [("owned", owned), ("allocated", allocated), ("busy", busy), ("idle", idle)] {
            let _ = writeln!(
                out,
                "airtime_gpu_seconds_total{{state=\"{state}\",tenant=\"{tenant}\",class=\"{class}\"}} {value}"
            );
        }
    }
    Ok(())
}

/// The services' replicas (desired and running, by variant), provisioned demand and latest load.
async fn render_services(out: &mut String, db: &PgPool) -> sqlx::Result<()> {
    #[allow(clippy::type_complexity)]
    let rows: Vec<(String, String, i32, i32, i64, i64, Option<f64>, Option<f64>)> = sqlx::query_as(
        "SELECT s.name, t.name, s.desired_gpu, s.desired_cpu, \
                (SELECT count(*) FROM workloads w WHERE w.service_id = s.id AND w.replica_variant = 'gpu' \
                   AND w.state IN ('scheduled', 'running')), \
                (SELECT count(*) FROM workloads w WHERE w.service_id = s.id AND w.replica_variant = 'cpu' \
                   AND w.state IN ('scheduled', 'running')), \
                s.demand, \
                (SELECT l.value FROM service_loads l WHERE l.service_id = s.id ORDER BY l.at DESC LIMIT 1) \
         FROM services s JOIN tenants t ON t.id = s.tenant_id WHERE s.state <> 'deleted' ORDER BY t.name, s.name",
    )
    .fetch_all(db)
    .await?;
    let _ =
        writeln!(out, "# HELP airtime_service_replicas A service's replicas: desired by the autoscaler, running now.");
    let _ = writeln!(out, "# TYPE airtime_service_replicas gauge");
    for (service, tenant, desired_gpu, desired_cpu, running_gpu, running_cpu, _, _) in &rows {
        let (service, tenant) = (label(service), label(tenant));
        for (kind, variant, n) in [
            ("desired", "gpu", i64::from(*desired_gpu)),
            ("desired", "cpu", i64::from(*desired_cpu)),
            ("running", "gpu", *running_gpu),
            ("running", "cpu", *running_cpu),
        ] {
            let _ = writeln!(
                out,
                "airtime_service_replicas{{service=\"{service}\",tenant=\"{tenant}\",variant=\"{variant}\",kind=\"{kind}\"}} {n}"
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP airtime_service_demand The load a service is provisioned for (stabilised, with burst headroom), in its metric."
    );
    let _ = writeln!(out, "# TYPE airtime_service_demand gauge");
    for (service, tenant, _, _, _, _, demand, _) in &rows {
        if let Some(demand) = demand {
            let _ = writeln!(
                out,
                "airtime_service_demand{{service=\"{}\",tenant=\"{}\"}} {demand}",
                label(service),
                label(tenant)
            );
        }
    }
    let _ = writeln!(out, "# HELP airtime_service_load The latest load a service reported, in its metric.");
    let _ = writeln!(out, "# TYPE airtime_service_load gauge");
    for (service, tenant, _, _, _, _, _, load) in &rows {
        if let Some(load) = load {
            let _ = writeln!(
                out,
                "airtime_service_load{{service=\"{}\",tenant=\"{}\"}} {load}",
                label(service),
                label(tenant)
            );
        }
    }
    render_token_services(out, db).await
}

/// Services priced per token: tokens per second, p95 latencies against the objective and the cost
/// of a million tokens over the last hour, per variant, and what GPUs alone would have cost.
async fn render_token_services(out: &mut String, db: &PgPool) -> sqlx::Result<()> {
    #[allow(clippy::type_complexity)]
    let rows: Vec<(
        uuid::Uuid,
        String,
        String,
        sqlx::types::Json<crate::services::serving::ServingSpec>,
        sqlx::types::Json<serde_json::Value>,
        Option<sqlx::types::Json<serde_json::Value>>,
        f64,
    )> = sqlx::query_as(
        "SELECT s.id, s.name, t.name, s.serving, s.template, s.cpu_variant, s.capacity \
         FROM services s JOIN tenants t ON t.id = s.tenant_id \
         WHERE s.state <> 'deleted' AND s.serving IS NOT NULL ORDER BY t.name, s.name",
    )
    .fetch_all(db)
    .await?;
    if rows.is_empty() {
        return Ok(());
    }
    let mut tokens = String::new();
    let mut latency = String::new();
    let mut objective = String::new();
    let mut cost = String::new();
    let mut gpu_only = String::new();
    for (id, service, tenant, spec, template, cpu_variant, capacity) in &rows {
        let report = crate::services::serving::report_for(
            db,
            *id,
            &spec.0,
            &template.0,
            cpu_variant.as_ref().map(|c| &c.0),
            *capacity,
            false,
        )
        .await?;
        let (service, tenant) = (label(service), label(tenant));
        let o = report.objective;
        for (kind, target) in [("ttft", o.ttft_p95_ms), ("tpot", o.tpot_p95_ms), ("request", o.request_p95_ms)] {
            if let Some(ms) = target {
                let _ = writeln!(
                    objective,
                    "airtime_service_objective_p95_seconds{{service=\"{service}\",tenant=\"{tenant}\",kind=\"{kind}\"}} {}",
                    ms / 1000.0
                );
            }
        }
        for v in &report.variants {
            let variant = v.variant.as_str();
            let _ = writeln!(
                tokens,
                "airtime_service_tokens_per_second{{service=\"{service}\",tenant=\"{tenant}\",variant=\"{variant}\"}} {}",
                v.tokens_per_s
            );
            for (kind, seen) in [("ttft", v.ttft_p95_ms), ("tpot", v.tpot_p95_ms), ("request", v.request_p95_ms)] {
                if let Some(ms) = seen {
                    let _ = writeln!(
                        latency,
                        "airtime_service_latency_p95_seconds{{service=\"{service}\",tenant=\"{tenant}\",variant=\"{variant}\",kind=\"{kind}\"}} {}",
                        ms / 1000.0
                    );
                }
            }
            if let Some(c) = v.cost_per_million_tokens {
                let _ = writeln!(
                    cost,
                    "airtime_service_cost_per_million_tokens{{service=\"{service}\",tenant=\"{tenant}\",variant=\"{variant}\"}} {c}"
                );
            }
        }
        if let Some(c) = report.cost_per_million_tokens {
            let _ = writeln!(
                cost,
                "airtime_service_cost_per_million_tokens{{service=\"{service}\",tenant=\"{tenant}\",variant=\"all\"}} {c}"
            );
        }
        if let Some(c) = report.gpu_only_cost_per_million_tokens {
            let _ = writeln!(
                gpu_only,
                "airtime_service_gpu_only_cost_per_million_tokens{{service=\"{service}\",tenant=\"{tenant}\"}} {c}"
            );
        }
    }
    for (name, help, body) in [
        (
            "airtime_service_tokens_per_second",
            "Tokens per second a service's replicas serve now (prompt and generated), by variant.",
            tokens,
        ),
        (
            "airtime_service_latency_p95_seconds",
            "The worst p95 latency of a service's replicas' latest reads, by variant and kind (ttft, tpot, request).",
            latency,
        ),
        (
            "airtime_service_objective_p95_seconds",
            "A service's objective: the p95 latency it promises, by kind.",
            objective,
        ),
        (
            "airtime_service_cost_per_million_tokens",
            "What a million tokens cost over the last hour, by variant (all: the service).",
            cost,
        ),
        (
            "airtime_service_gpu_only_cost_per_million_tokens",
            "What a million tokens of the last hour would have cost on GPU replicas only.",
            gpu_only,
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        out.push_str(&body);
    }
    Ok(())
}
