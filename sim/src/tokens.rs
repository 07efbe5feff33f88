//! The cost of a token over a diurnal week (`airtime-sim tokens`): Azure's LLM inference arrivals,
//! with their context and generated tokens, as a service's demand in tokens per second, served
//! three ways and priced at the same replica-hour prices:
//!
//! - **gpu-only**: GPU replicas alone, autoscaled;
//! - **fixed hybrid**: a fixed pool of CPU replicas always on, GPU replicas autoscaled for the rest
//!   (how a platform team splits by hand);
//! - **airtime**: the CPU variant and GPU replicas as Airtime's autoscaler mixes them — CPU nodes
//!   first while a token costs no more there, GPU replicas for the rest, the dearer variant drained
//!   first.
//!
//! Every 15 s the demand of the interval is reported and the scheduling core's cycle
//! (`airtime_scheduler::cycle::run`, its autoscaler the control plane's and the replay's rules:
//! stabilisation windows, burst headroom, bounds, no drain below the demand, only ready replicas
//! carrying load) plans the replicas; this adapter places them at once and decides nothing else;
//! what it starts is ready after its variant's start-up time, what it drains stops at once. The
//! capacities are what a replica serves *at the objective*, so an interval holds the objective when
//! the ready replicas' capacity covers its demand; tokens past it are counted as served late.
//! Cost is every replica's time alive (starting included) at its variant's price.
//!
//! The simplification: the service is alone on its nodes (the GPU node never runs out; the CPU
//! nodes hold `cpu_slots` replicas), capacities are known rather than learned, and latency inside a
//! replica's capacity is taken to hold the objective.

use std::path::Path;

use airtime_protocol::service::{LoadMetric, ReplicaVariant};
use airtime_protocol::workload::{NodeState, WorkloadClass, WorkloadState};
use airtime_scheduler::cycle::{self, Adapter, BuiltinFailed, Levels, NoPolicy};
use airtime_scheduler::fleet::{FleetView, NodeEntry, ReplicaOf, TenantEntry, WorkloadEntry};
use airtime_scheduler::services::{CpuVariant, LoadSample, ScalePlan, ServiceEntry, VariantCosts};
use chrono::{DateTime, Duration, TimeZone, Utc};
use uuid::Uuid;

use crate::format::InputError;

/// Seconds between two load reports.
pub const EVERY_S: u64 = 15;

/// One variant of the served model: what a replica serves at the objective, what it costs and how
/// long it takes to start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Variant {
    pub tokens_per_s: f64,
    pub cost_per_hour: f64,
    pub startup_s: u64,
}

/// The week to serve and the hardware to serve it on.
#[derive(Debug, Clone)]
pub struct Options {
    pub days: u32,
    pub amplitude: f64,
    pub peak_hour: f64,
    /// Weekends (days 6 and 7) carry this share of a weekday's traffic.
    pub weekend: f64,
    pub scale: f64,
    pub gpu: Variant,
    pub cpu: Variant,
    /// CPU replicas the CPU nodes hold.
    pub cpu_slots: u32,
    /// The fixed hybrid's CPU replicas.
    pub fixed_cpu: u32,
    pub min_replicas: u32,
    pub max_replicas: u32,
    pub scale_down_window_s: u32,
}

/// Tokens (context and generated) arriving in each 15 s interval of the file, from its first
/// request; its last, partial interval left out.
pub fn token_arrivals(path: &Path) -> Result<Vec<f64>, InputError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| InputError::new(&name, 0, format!("cannot read: {e}")))?;
    let mut lines = text.lines().enumerate();
    let header = lines.next().map(|(_, l)| l.trim()).unwrap_or("");
    if header != "TIMESTAMP,ContextTokens,GeneratedTokens" {
        return Err(InputError::new(
            &name,
            1,
            format!("the header is {header:?}, not TIMESTAMP,ContextTokens,GeneratedTokens"),
        ));
    }
    let mut first = None;
    let mut tokens: Vec<f64> = Vec::new();
    for (i, line) in lines {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(',').collect();
        let [stamp, context, generated] = fields[..] else {
            return Err(InputError::new(&name, i + 1, format!("{} fields, not 3", fields.len())));
        };
        let at = chrono::NaiveDateTime::parse_from_str(stamp, "%Y-%m-%d %H:%M:%S%.f")
            .map_err(|e| InputError::new(&name, i + 1, format!("field `TIMESTAMP`: {stamp:?} is not a time ({e})")))?;
        let count = |field: &str, v: &str| {
            v.trim()
                .parse::<u32>()
                .map_err(|_| InputError::new(&name, i + 1, format!("field `{field}`: {v:?} is not a token count")))
        };
        let n = f64::from(count("ContextTokens", context)?) + f64::from(count("GeneratedTokens", generated)?);
        let offset = (at - *first.get_or_insert(at)).num_milliseconds();
        if offset < 0 {
            return Err(InputError::new(&name, i + 1, "field `TIMESTAMP`: earlier than the first request"));
        }
        let slot = (offset / 1000) as usize / EVERY_S as usize;
        if tokens.len() <= slot {
            tokens.resize(slot + 1, 0.0);
        }
        tokens[slot] += n;
    }
    if tokens.len() < 2 {
        return Err(InputError::new(&name, 0, "fewer than two 15 s intervals of requests"));
    }
    tokens.pop();
    Ok(tokens)
}

/// Tokens per second in each interval of the week: the file's hour repeated, shaped by the diurnal
/// cosine and the weekend's share, times `scale`.
pub fn week(tokens: &[f64], o: &Options) -> Vec<f64> {
    let intervals = (u64::from(o.days.max(1)) * 86_400) / EVERY_S;
    (0..intervals)
        .map(|i| {
            let t = i * EVERY_S;
            let weekend = if (t / 86_400) % 7 >= 5 { o.weekend } else { 1.0 };
            tokens[i as usize % tokens.len()] / EVERY_S as f64
                * crate::azure::diurnal(t, o.amplitude, o.peak_hour)
                * weekend
                * o.scale
        })
        .collect()
}

/// How a strategy served the week.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub strategy: &'static str,
    pub tokens: f64,
    /// Tokens served within the ready replicas' capacity (at the objective).
    pub tokens_at_objective: f64,
    /// Intervals whose demand the ready replicas covered, of all.
    pub intervals_held: f64,
    pub gpu_replica_hours: f64,
    pub cpu_replica_hours: f64,
    pub cost: f64,
}

impl Outcome {
    pub fn cost_per_million_tokens(&self) -> f64 {
        if self.tokens > 0.0 { self.cost / self.tokens * 1e6 } else { 0.0 }
    }

    pub fn attainment(&self) -> f64 {
        if self.tokens > 0.0 { self.tokens_at_objective / self.tokens } else { 1.0 }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    GpuOnly,
    FixedHybrid,
    Airtime,
}

impl Strategy {
    pub const ALL: [Strategy; 3] = [Strategy::GpuOnly, Strategy::FixedHybrid, Strategy::Airtime];

    pub fn name(self) -> &'static str {
        match self {
            Strategy::GpuOnly => "gpu-only",
            Strategy::FixedHybrid => "fixed hybrid",
            Strategy::Airtime => "airtime",
        }
    }
}

struct Replica {
    variant: ReplicaVariant,
    started: u64,
    ready_at: u64,
}

fn origin() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 5, 0, 0, 0).single().unwrap_or_default()
}

/// Serves `demand` (tokens per second per interval) with `strategy`.
pub fn serve(demand: &[f64], o: &Options, strategy: Strategy) -> Outcome {
    let fixed_cpu = if strategy == Strategy::FixedHybrid { o.fixed_cpu } else { 0 };
    let fixed_capacity = f64::from(fixed_cpu) * o.cpu.tokens_per_s;
    let service = ServiceEntry {
        id: Uuid::nil(),
        name: "llm".into(),
        tenant: 0,
        class: WorkloadClass::RealtimeInference,
        metric: LoadMetric::TokensPerSecond,
        min_replicas: if fixed_cpu > 0 { 0 } else { o.min_replicas },
        max_replicas: o.max_replicas,
        capacity: o.gpu.tokens_per_s,
        gpu_milli_per_replica: 1000,
        cpu_variant: (strategy == Strategy::Airtime).then_some(CpuVariant {
            capacity: o.cpu.tokens_per_s,
            cpu_millis: 1000,
            memory_mb: 1024,
        }),
        scale_up_window_s: 0,
        scale_down_window_s: o.scale_down_window_s,
        stale_after_s: 60,
        draining: false,
        loads: Vec::new(),
        recent_peak: None,
        replica_cost_per_hour: (strategy == Strategy::Airtime)
            .then_some(VariantCosts { gpu: o.gpu.cost_per_hour, cpu: o.cpu.cost_per_hour }),
    };
    let keep = u64::from(o.scale_down_window_s).max(airtime_scheduler::services::BURST_WINDOW_S as u64) + EVERY_S;
    let mut loads: std::collections::VecDeque<(u64, f64)> = std::collections::VecDeque::new();
    let mut replicas: Vec<Replica> = Vec::new();
    let mut out = Outcome {
        strategy: strategy.name(),
        tokens: 0.0,
        tokens_at_objective: 0.0,
        intervals_held: 0.0,
        gpu_replica_hours: 0.0,
        cpu_replica_hours: 0.0,
        cost: 0.0,
    };
    let at = |t: u64| origin() + Duration::seconds(t as i64);
    for (i, &d) in demand.iter().enumerate() {
        let t = i as u64 * EVERY_S;
        // The autoscaler sees what the fixed pool does not carry.
        loads.push_back((t, (d - fixed_capacity).max(0.0)));
        while loads.front().is_some_and(|(s, _)| s + keep < t) {
            loads.pop_front();
        }
        let cpu_placed = replicas.iter().filter(|r| r.variant == ReplicaVariant::Cpu).count() as u32;
        let mut gpu_node = NodeEntry::ready("gpu", 0, 0);
        gpu_node.gpu_count = 1;
        let mut cpu_node = NodeEntry::ready("cpu", 0, 0);
        cpu_node.cpu_millis = o.cpu_slots * 1000;
        cpu_node.cpu_millis_free = o.cpu_slots.saturating_sub(cpu_placed) * 1000;
        cpu_node.memory_mb_free = u64::from(o.cpu_slots) * 1024;
        cpu_node.state = NodeState::Ready;
        let workloads = replicas
            .iter()
            .enumerate()
            .map(|(k, r)| WorkloadEntry {
                class: WorkloadClass::RealtimeInference,
                state: WorkloadState::Running,
                started_at: Some(at(r.started)),
                node: Some(if r.variant == ReplicaVariant::Cpu { 1 } else { 0 }),
                replica_of: Some(ReplicaOf { service: 0, variant: r.variant, ready: t >= r.ready_at }),
                ..WorkloadEntry::pending(
                    &format!("llm-{k}"),
                    0,
                    u32::from(r.variant == ReplicaVariant::Gpu),
                    at(r.started),
                )
            })
            .collect();
        let fleet = FleetView {
            now: at(t),
            tenants: vec![TenantEntry::named("serving")],
            nodes: vec![gpu_node, cpu_node],
            workloads,
            services: vec![ServiceEntry {
                loads: loads.iter().map(|&(s, value)| LoadSample { at: at(s), value }).collect(),
                ..service.clone()
            }],
            ..FleetView::default()
        };
        let mut week = Week { fleet, plans: Vec::new() };
        // The cycle only scales here: no work waits, so no policy decides.
        let ran = futures::executor::block_on(cycle::run(&mut week, &NoPolicy)).is_ok();
        if let Some(decided) = week.plans.into_iter().next().filter(|_| ran) {
            let mut drained = decided.drain.clone();
            drained.sort_unstable_by(|a, b| b.cmp(a));
            for k in drained {
                replicas.remove(k);
            }
            for variant in decided.start {
                let startup = if variant == ReplicaVariant::Cpu { o.cpu.startup_s } else { o.gpu.startup_s };
                replicas.push(Replica { variant, started: t, ready_at: t + startup });
            }
        }
        // The interval, served by what is ready, paid for by what is alive.
        let ready_capacity: f64 = fixed_capacity
            + replicas
                .iter()
                .filter(|r| t >= r.ready_at)
                .map(|r| if r.variant == ReplicaVariant::Cpu { o.cpu.tokens_per_s } else { o.gpu.tokens_per_s })
                .sum::<f64>();
        let dt = EVERY_S as f64;
        out.tokens += d * dt;
        out.tokens_at_objective += d.min(ready_capacity) * dt;
        if ready_capacity + 1e-9 >= d {
            out.intervals_held += 1.0;
        }
        let cpu = replicas.iter().filter(|r| r.variant == ReplicaVariant::Cpu).count() as f64 + f64::from(fixed_cpu);
        let gpu = replicas.iter().filter(|r| r.variant == ReplicaVariant::Gpu).count() as f64;
        out.cpu_replica_hours += cpu * dt / 3600.0;
        out.gpu_replica_hours += gpu * dt / 3600.0;
        out.cost += (cpu * o.cpu.cost_per_hour + gpu * o.gpu.cost_per_hour) * dt / 3600.0;
    }
    out.intervals_held /= demand.len().max(1) as f64;
    out
}

/// The week's adapter of the core's cycle: the fleet of this interval in, the autoscaler's plans
/// out (the caller applies them).
struct Week {
    fleet: FleetView,
    plans: Vec<ScalePlan>,
}

impl Adapter for Week {
    type Policy = NoPolicy;
    type Error = BuiltinFailed;

    async fn read(&mut self) -> Result<FleetView, BuiltinFailed> {
        Ok(self.fleet.clone())
    }

    async fn scale(&mut self, _: &FleetView, plans: &[ScalePlan]) -> Result<Option<FleetView>, BuiltinFailed> {
        self.plans = plans.to_vec();
        Ok(None)
    }

    fn decides(&mut self, _: &FleetView) -> bool {
        false
    }

    async fn levels(&mut self, _: &FleetView) -> Result<Levels<NoPolicy>, BuiltinFailed> {
        Ok(Levels { platform: NoPolicy, tenants: Vec::new() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(gpu: Variant, cpu: Variant) -> Options {
        Options {
            days: 1,
            amplitude: 0.6,
            peak_hour: 14.0,
            weekend: 0.6,
            scale: 1.0,
            gpu,
            cpu,
            cpu_slots: 8,
            fixed_cpu: 2,
            min_replicas: 1,
            max_replicas: 64,
            scale_down_window_s: 300,
        }
    }

    #[test]
    fn cheaper_cpu_tokens_are_served_on_cpu_first_and_dearer_ones_on_gpus() {
        let demand: Vec<f64> = (0..2000).map(|i| 1500.0 + 1000.0 * ((i as f64) / 300.0).sin()).collect();
        let gpu = Variant { tokens_per_s: 2000.0, cost_per_hour: 2.0, startup_s: 60 };
        // CPU tokens at 0.1/h per 300 tokens/s: a third of a GPU's price per token.
        let cheap = options(gpu, Variant { tokens_per_s: 300.0, cost_per_hour: 0.1, startup_s: 15 });
        let [only, fixed, mixed] = Strategy::ALL.map(|s| serve(&demand, &cheap, s));
        assert!(mixed.cpu_replica_hours > 0.0, "{mixed:?}");
        assert!(mixed.cost_per_million_tokens() < only.cost_per_million_tokens(), "{mixed:?} {only:?}");
        assert!(mixed.cost_per_million_tokens() <= fixed.cost_per_million_tokens() + 1e-9, "{mixed:?} {fixed:?}");
        assert!(mixed.attainment() > 0.95 && only.attainment() > 0.95, "{mixed:?} {only:?}");
        // At 1.0/h the CPU's tokens cost three times a GPU's: Airtime serves on GPUs only.
        let dear = options(gpu, Variant { tokens_per_s: 300.0, cost_per_hour: 1.0, startup_s: 15 });
        let mixed = serve(&demand, &dear, Strategy::Airtime);
        assert_eq!(mixed.cpu_replica_hours, 0.0, "{mixed:?}");
        assert!((mixed.cost - serve(&demand, &dear, Strategy::GpuOnly).cost).abs() < 1e-9);
    }
}
