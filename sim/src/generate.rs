//! A synthetic mix of the workload classes Airtime schedules, reproducible from a seed: a fleet of
//! 8-GPU nodes (and a few CPU nodes) and a trace whose offered GPU load is `load` of the fleet.
//!
//! - real-time inference: a service per tenant `serving` whose replicas follow a diurnal day (the
//!   Azure converter's shape, with Poisson noise per window);
//! - batch inference (1 GPU, tens of minutes), training gangs (2–8 GPUs, hours, checkpointable),
//!   fine-tuning (1–4 GPUs), evaluation and quantization (1 GPU, minutes) from tenants `batch` and
//!   `research`, arriving as Poisson processes with lognormal durations.
//!
//! The shares of GPU-hours per class are fixed ([`MIX`]); durations and arrivals come from the seed
//! (ChaCha8, so a seed gives the same trace on every machine and version of this crate).

use airtime_protocol::settings::PrioritySettings;
use airtime_protocol::workload::WorkloadClass;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::format::{FleetSpec, NodeType, TenantSpec, Trace, TraceWorkload};

#[derive(Debug, Clone)]
pub struct Options {
    pub seed: u64,
    pub hours: u32,
    /// GPU nodes of 8 GPUs each.
    pub gpu_nodes: u32,
    pub cpu_nodes: u32,
    /// Offered GPU-hours as a share of the fleet's.
    pub load: f64,
}

impl Default for Options {
    fn default() -> Self {
        Options { seed: 1, hours: 24, gpu_nodes: 16, cpu_nodes: 4, load: 0.9 }
    }
}

/// (class, tenant, share of the offered GPU-hours, GPUs low..=high, median duration s, priority,
/// preemptible, checkpointable).
type Mix = (WorkloadClass, &'static str, f64, (u32, u32), f64, i32, bool, bool);

pub const MIX: [Mix; 6] = [
    (WorkloadClass::RealtimeInference, "serving", 0.30, (1, 1), 0.0, 100, false, false),
    (WorkloadClass::BatchInference, "batch", 0.20, (1, 1), 1800.0, 50, true, false),
    (WorkloadClass::Training, "research", 0.30, (2, 8), 4.0 * 3600.0, 0, true, true),
    (WorkloadClass::FineTuning, "research", 0.12, (1, 4), 3600.0, 10, true, true),
    (WorkloadClass::Evaluation, "batch", 0.05, (1, 1), 600.0, 20, true, false),
    (WorkloadClass::Quantization, "batch", 0.03, (1, 1), 900.0, 20, true, false),
];

/// A fleet and a trace for `options`.
pub fn generate(options: &Options) -> (FleetSpec, Trace) {
    let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
    let gpus = u64::from(options.gpu_nodes) * 8;
    let span = u64::from(options.hours.max(1)) * 3600;
    let offered = gpus as f64 * span as f64 * options.load.clamp(0.0, 4.0);
    let mut workloads = Vec::new();
    for (class, tenant, share, (low, high), median, priority, preemptible, checkpointable) in MIX {
        let budget = offered * share;
        if class == WorkloadClass::RealtimeInference {
            realtime(&mut rng, budget, span, tenant, priority, &mut workloads);
            continue;
        }
        let mut used = 0.0;
        let mut n = 0;
        while used < budget {
            let gang = if high > low { 1u32 << rng.random_range(low.ilog2()..=high.ilog2()) } else { low };
            let duration = lognormal(&mut rng, median, 0.8).clamp(60.0, span as f64) as u64;
            let arrive = rng.random_range(0..span);
            used += f64::from(gang) * duration as f64;
            workloads.push(TraceWorkload {
                mig_profile: None,
                id: format!("{}-{n}", class_slug(class)),
                tenant: tenant.into(),
                class,
                arrive_s: arrive,
                duration_s: duration.max(1),
                gpus: gang,
                gpu_milli: 1000,
                gpu_memory_mb: 0,
                gpu_models: Vec::new(),
                cpu_millis: 4000 * gang,
                memory_mb: 32768 * u64::from(gang),
                priority,
                preemptible,
                checkpointable,
                cpu_capable: false,
            });
            n += 1;
        }
    }
    workloads.sort_by(|a, b| a.arrive_s.cmp(&b.arrive_s).then_with(|| a.id.cmp(&b.id)));
    let guarantee = |share: f64| (gpus as f64 * share).floor() as u32;
    let fleet = FleetSpec {
        tenants: vec![
            TenantSpec {
                name: "serving".into(),
                guaranteed_gpus: guarantee(0.35),
                weight: 2,
                tier: 1,
                may_borrow: true,
                gpu_limit: None,
                policy: None,
            },
            TenantSpec {
                name: "batch".into(),
                guaranteed_gpus: guarantee(0.25),
                weight: 1,
                tier: 0,
                may_borrow: true,
                gpu_limit: None,
                policy: None,
            },
            TenantSpec {
                name: "research".into(),
                guaranteed_gpus: guarantee(0.40),
                weight: 1,
                tier: 0,
                may_borrow: true,
                gpu_limit: None,
                policy: None,
            },
        ],
        node_types: vec![
            NodeType {
                name: "h100x8".into(),
                count: options.gpu_nodes,
                gpus: 8,
                gpu_model: "H100".into(),
                gpu_memory_mb: 81920,
                cpu_millis: 192_000,
                memory_mb: 2_048_000,
                cost_per_hour: 8.0 * 2.5,
                gpu_sharing: Default::default(),
                mig_layout: Vec::new(),
            },
            NodeType {
                name: "cpu".into(),
                count: options.cpu_nodes,
                gpus: 0,
                gpu_model: String::new(),
                gpu_memory_mb: 0,
                cpu_millis: 64_000,
                memory_mb: 262_144,
                cost_per_hour: 2.5,
                gpu_sharing: Default::default(),
                mig_layout: Vec::new(),
            },
        ],
        settings: PrioritySettings { min_runtime_s: 300, ..PrioritySettings::default() },
    };
    (fleet, Trace { workloads, ..Trace::default() })
}

/// A service's replicas over the span: a diurnal rate with noise per 5-minute window, replicas up
/// at once and down after 10 minutes, each replica's life one workload.
fn realtime(rng: &mut ChaCha8Rng, budget: f64, span: u64, tenant: &str, priority: i32, out: &mut Vec<TraceWorkload>) {
    const WINDOW: u64 = 300;
    let windows = span.div_ceil(WINDOW) as usize;
    // The mean of the diurnal factor is 1 − amplitude/2 = 0.75: scale the peak so the day's
    // replica-hours meet the budget.
    let mean_replicas = budget / span as f64;
    let peak = mean_replicas / 0.75;
    let needed: Vec<u32> = (0..windows)
        .map(|i| {
            let base = peak * crate::azure::diurnal(i as u64 * WINDOW, 0.5, 14.0);
            let noise: f64 = rng.random_range(0.85..1.15);
            (base * noise).round().max(1.0) as u32
        })
        .collect();
    let mut started: Vec<u64> = Vec::new();
    let mut n = 0;
    let mut emit = |from: u64, to: u64, out: &mut Vec<TraceWorkload>| {
        out.push(TraceWorkload {
            mig_profile: None,
            id: format!("realtime-{n}"),
            tenant: tenant.into(),
            class: WorkloadClass::RealtimeInference,
            arrive_s: from,
            duration_s: (to - from).max(1),
            gpus: 1,
            gpu_milli: 1000,
            gpu_memory_mb: 0,
            gpu_models: Vec::new(),
            cpu_millis: 4000,
            memory_mb: 32768,
            priority,
            preemptible: false,
            checkpointable: false,
            cpu_capable: false,
        });
        n += 1;
    };
    for i in 0..windows {
        let t = i as u64 * WINDOW;
        let target = needed[i.saturating_sub(2)..=i].iter().copied().max().unwrap_or(1) as usize;
        while started.len() < target {
            started.push(t);
        }
        while started.len() > target {
            let from = started.pop().unwrap_or(t);
            emit(from, t, out);
        }
    }
    while let Some(from) = started.pop() {
        emit(from, span, out);
    }
}

fn lognormal(rng: &mut ChaCha8Rng, median: f64, sigma: f64) -> f64 {
    // Box–Muller for one standard normal.
    let u1: f64 = rng.random_range(f64::EPSILON..1.0);
    let u2: f64 = rng.random_range(0.0..1.0);
    let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
    median * (sigma * z).exp()
}

fn class_slug(class: WorkloadClass) -> &'static str {
    match class {
        WorkloadClass::RealtimeInference => "realtime",
        WorkloadClass::BatchInference => "batch",
        WorkloadClass::Training => "training",
        WorkloadClass::FineTuning => "fine-tuning",
        WorkloadClass::Quantization => "quantization",
        WorkloadClass::Embeddings => "embeddings",
        WorkloadClass::Evaluation => "evaluation",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_the_same_mix_and_another_seed_another() {
        let a = generate(&Options { seed: 7, hours: 6, ..Options::default() });
        let b = generate(&Options { seed: 7, hours: 6, ..Options::default() });
        let c = generate(&Options { seed: 8, hours: 6, ..Options::default() });
        assert_eq!(a, b);
        assert_ne!(a.1, c.1);
        a.0.check().expect("the fleet is valid");
        for w in &a.1.workloads {
            w.check().expect("every workload is valid");
            assert!(w.arrive_s < 6 * 3600);
        }
    }

    #[test]
    fn the_offered_load_is_what_was_asked() {
        let (fleet, trace) = generate(&Options { seed: 3, hours: 24, load: 0.8, ..Options::default() });
        let offered: f64 = trace.workloads.iter().map(|w| f64::from(w.gpus) * w.duration_s as f64).sum();
        let capacity = fleet.gpu_count() as f64 * 86_400.0;
        let ratio = offered / capacity;
        assert!((0.7..0.95).contains(&ratio), "offered {ratio:.2} of the fleet");
        for class in [WorkloadClass::RealtimeInference, WorkloadClass::Training, WorkloadClass::BatchInference] {
            assert!(trace.workloads.iter().any(|w| w.class == class), "{class:?} is in the mix");
        }
    }
}
