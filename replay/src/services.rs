//! Elastic inference services in the replay: the simulator as the core's second adapter of the
//! autoscaler (`airtime_scheduler::services`), and the baselines it is measured against.
//!
//! A service of the trace (`format::TraceService`) is created at its `start_s`; from then on its
//! replicas report its demand, one value every `demand.every_s` seconds of virtual time, as a
//! replica or a gateway reports load to the control plane. Every cycle the engine hands the core
//! each live service with its recent reports ([`Service::entry`]: the reports within the longest
//! scaling window or the burst window, whichever is longer, and the highest report of the last
//! hour), applies what `services::plan` returns — new replicas queued, pending ones cancelled,
//! placed ones drained with the grace period — and keeps `services::burst_reserve` GPUs free
//! through the effective settings, exactly as the control plane does. No scaling rule lives here.
//!
//! The baselines ([`ServiceMode`]) are the same services with other bounds: a fixed reserve is a
//! service whose `min_replicas` and `max_replicas` are the replicas its peak (or its mean) demand
//! needs, so the same autoscaler holds it there.

use std::collections::VecDeque;

use airtime_protocol::service::ReplicaVariant;
use airtime_scheduler::services::{BURST_WINDOW_S, CpuVariant, LoadSample, ServiceEntry};
use anyhow::bail;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::format::{Trace, TraceService, TraceWorkload};

/// How the services of a trace are run: as the trace gives them, or as one of the four baselines
/// the comparison of elastic services measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceMode {
    /// As the trace says.
    AsGiven,
    /// A fixed reserve sized for the peak: the replicas the highest demand needs, always (GPU
    /// replicas only).
    FixedPeak,
    /// A fixed reserve sized for the mean: the replicas the mean demand needs, always (GPU only).
    FixedMean,
    /// Elastic between the service's bounds, GPU replicas only (its CPU variant removed).
    Elastic,
    /// Elastic with the service's CPU variant: CPU nodes first, GPU replicas for what they cannot
    /// carry. A service without a CPU variant is refused.
    CpuFirst,
}

impl ServiceMode {
    /// The four modes of the comparison, in the order the issue lists them.
    pub const COMPARED: [ServiceMode; 4] =
        [ServiceMode::FixedPeak, ServiceMode::FixedMean, ServiceMode::Elastic, ServiceMode::CpuFirst];

    pub fn name(self) -> &'static str {
        match self {
            ServiceMode::AsGiven => "as-given",
            ServiceMode::FixedPeak => "fixed-peak",
            ServiceMode::FixedMean => "fixed-mean",
            ServiceMode::Elastic => "elastic",
            ServiceMode::CpuFirst => "cpu-first",
        }
    }

    pub fn parse(text: &str) -> Result<ServiceMode, String> {
        [ServiceMode::AsGiven]
            .into_iter()
            .chain(ServiceMode::COMPARED)
            .find(|m| m.name() == text)
            .ok_or_else(|| format!("{text:?} is none of as-given, fixed-peak, fixed-mean, elastic, cpu-first"))
    }
}

/// Replicas of `capacity` that carry `load`: at least one.
pub fn replicas_for(load: f64, capacity: f64) -> u32 {
    ((load / capacity.max(1e-9) - 1e-9).ceil().max(1.0) as u32).min(crate::format::MAX_REPLICAS)
}

/// The trace with its services run as `mode` says.
pub fn with_mode(trace: &Trace, mode: ServiceMode) -> anyhow::Result<Trace> {
    let mut trace = trace.clone();
    for s in &mut trace.services {
        match mode {
            ServiceMode::AsGiven => {}
            ServiceMode::FixedPeak | ServiceMode::FixedMean => {
                let (peak, mean) = s.peak_and_mean();
                let n = replicas_for(if mode == ServiceMode::FixedPeak { peak } else { mean }, s.capacity);
                s.min_replicas = n;
                s.max_replicas = n;
                s.cpu_variant = None;
            }
            ServiceMode::Elastic => s.cpu_variant = None,
            ServiceMode::CpuFirst => {
                if s.cpu_variant.is_none() {
                    bail!("service {} has no CPU variant to run CPU-first (give it `cpu_variant`)", s.name);
                }
            }
        }
    }
    Ok(trace)
}

/// A service as the replay runs it.
pub struct Service {
    pub spec: TraceService,
    pub tenant: usize,
    id: Uuid,
    /// Reports of the last hour, oldest first: (virtual second, value).
    reports: VecDeque<(u64, f64)>,
    /// The demand now: the latest report (0 before the service starts and after its demand ends).
    pub demand: f64,
    pub started: bool,
    /// Its demand has ended: it is deleted and its replicas drain.
    pub ended: bool,
    /// Its replicas that have not ended (job indexes).
    pub replicas: Vec<usize>,
    /// Replicas created, by variant (they are numbered by it).
    pub created: [u32; 2],
    /// Replicas stopped: pending ones cancelled and placed ones drained.
    pub drained: u32,
}

impl Service {
    pub fn new(spec: TraceService, tenant: usize, index: usize) -> Service {
        Service {
            spec,
            tenant,
            id: Uuid::from_u128(0x5e5_0000_0000 + index as u128),
            reports: VecDeque::new(),
            demand: 0.0,
            started: false,
            ended: false,
            replicas: Vec::new(),
            created: [0, 0],
            drained: 0,
        }
    }

    /// Whether the autoscaler sees it: created, and not yet gone (deleted with every replica ended).
    pub fn in_fleet(&self) -> bool {
        self.started && !(self.ended && self.replicas.is_empty())
    }

    /// A load report at virtual second `t`; reports older than an hour are forgotten.
    pub fn report(&mut self, t: u64, value: f64) {
        self.started = true;
        self.demand = value;
        self.reports.push_back((t, value));
        while self.reports.front().is_some_and(|&(at, _)| at + 3600 < t) {
            self.reports.pop_front();
        }
    }

    /// The demand has ended: the service is deleted.
    pub fn end(&mut self) {
        self.ended = true;
        self.demand = 0.0;
    }

    /// Load one replica of `variant` carries.
    pub fn capacity_of(&self, variant: ReplicaVariant) -> f64 {
        match (variant, &self.spec.cpu_variant) {
            (ReplicaVariant::Cpu, Some(cpu)) => cpu.capacity,
            _ => self.spec.capacity,
        }
    }

    /// The service in the core's model at virtual second `t`: the reports of the last longest
    /// scaling window or burst window, and the highest report of the last hour (what the control
    /// plane reads from its `service_loads`).
    pub fn entry(&self, t: u64, at: impl Fn(u64) -> DateTime<Utc>) -> ServiceEntry {
        let s = &self.spec;
        let keep = u64::from(s.scale_up_window_s.max(s.scale_down_window_s)).max(BURST_WINDOW_S as u64);
        let loads = self
            .reports
            .iter()
            .filter(|&&(r, _)| r + keep > t)
            .map(|&(r, value)| LoadSample { at: at(r), value })
            .collect();
        let recent_peak = self.reports.iter().filter(|&&(r, _)| r + 3600 > t).map(|&(_, v)| v).reduce(f64::max);
        ServiceEntry {
            id: self.id,
            name: s.name.clone(),
            tenant: self.tenant,
            class: s.class,
            metric: s.metric,
            min_replicas: s.min_replicas,
            max_replicas: s.max_replicas,
            capacity: s.capacity,
            gpu_milli_per_replica: s.gpu_milli_per_replica(),
            cpu_variant: s.cpu_variant.as_ref().map(|c| CpuVariant {
                capacity: c.capacity,
                cpu_millis: c.cpu_millis,
                memory_mb: c.memory_mb,
            }),
            scale_up_window_s: s.scale_up_window_s,
            scale_down_window_s: s.scale_down_window_s,
            stale_after_s: s.stale_after_s,
            draining: self.ended,
            loads,
            recent_peak,
            replica_cost_per_hour: None,
        }
    }

    /// A new replica of `variant` submitted at virtual second `t`: the main template or the CPU
    /// variant, of the service's class, never preemptible, running until it is drained.
    pub fn replica(&mut self, variant: ReplicaVariant, t: u64) -> TraceWorkload {
        let s = &self.spec;
        let slot = usize::from(variant == ReplicaVariant::Cpu);
        let n = self.created[slot];
        self.created[slot] += 1;
        let r = &s.replica;
        let (gpus, gpu_milli, gpu_memory_mb, gpu_models, cpu_millis, memory_mb) = match (&s.cpu_variant, variant) {
            (Some(cpu), ReplicaVariant::Cpu) => (0, 1000, 0, Vec::new(), cpu.cpu_millis, cpu.memory_mb),
            _ => (r.gpus, r.gpu_milli, r.gpu_memory_mb, r.gpu_models.clone(), r.cpu_millis, r.memory_mb),
        };
        TraceWorkload {
            id: format!("{}-{}-{n}", s.name, variant.as_str()),
            tenant: s.tenant.clone(),
            class: s.class,
            arrive_s: t,
            // A replica has no length of its own: it runs until the autoscaler drains it.
            duration_s: 0,
            gpus,
            gpu_milli,
            mig_profile: None,
            gpu_memory_mb,
            gpu_models,
            cpu_millis,
            memory_mb,
            priority: r.priority,
            preemptible: false,
            checkpointable: false,
            cpu_capable: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{CpuVariantSpec, Demand, ReplicaTemplate};

    pub(crate) fn chat() -> TraceService {
        TraceService {
            name: "chat".into(),
            tenant: "serving".into(),
            class: airtime_protocol::workload::WorkloadClass::RealtimeInference,
            min_replicas: 1,
            max_replicas: 20,
            metric: Default::default(),
            capacity: 10.0,
            replica: ReplicaTemplate {
                gpus: 1,
                gpu_milli: 1000,
                gpu_memory_mb: 0,
                gpu_models: Vec::new(),
                cpu_millis: 2000,
                memory_mb: 8192,
                priority: 100,
            },
            cpu_variant: Some(CpuVariantSpec { capacity: 2.0, cpu_millis: 8000, memory_mb: 16384 }),
            scale_up_window_s: 0,
            scale_down_window_s: 300,
            stale_after_s: 60,
            startup_s: 0,
            start_s: 0,
            demand: Demand { every_s: 15, values: vec![10.0, 35.0, 61.0, 20.0] },
        }
    }

    #[test]
    fn the_fixed_baselines_are_the_replicas_for_the_peak_and_the_mean_held_by_their_bounds() {
        let trace = Trace { services: vec![chat()], ..Trace::default() };
        let peak = with_mode(&trace, ServiceMode::FixedPeak).expect("peak");
        assert_eq!((peak.services[0].min_replicas, peak.services[0].max_replicas), (7, 7), "61 req/s at 10 each");
        assert!(peak.services[0].cpu_variant.is_none());
        let mean = with_mode(&trace, ServiceMode::FixedMean).expect("mean");
        assert_eq!(mean.services[0].max_replicas, 4, "a mean of 31.5 req/s");
        let elastic = with_mode(&trace, ServiceMode::Elastic).expect("elastic");
        assert_eq!((elastic.services[0].max_replicas, elastic.services[0].cpu_variant.is_none()), (20, true));
        let cpu_first = with_mode(&trace, ServiceMode::CpuFirst).expect("cpu-first");
        assert_eq!(cpu_first.services[0], chat());
        let mut gpu_only = trace.clone();
        gpu_only.services[0].cpu_variant = None;
        let err = with_mode(&gpu_only, ServiceMode::CpuFirst).expect_err("no CPU variant").to_string();
        assert!(err.contains("service chat has no CPU variant"), "{err}");
        assert_eq!(ServiceMode::parse("cpu-first"), Ok(ServiceMode::CpuFirst));
        assert!(ServiceMode::parse("cpu").is_err());
    }

    #[test]
    fn the_core_sees_the_reports_of_the_longest_window_and_the_hours_peak() {
        let mut s = Service::new(chat(), 0, 0);
        for (i, v) in [90.0, 5.0, 6.0].iter().enumerate() {
            s.report(i as u64 * 1200, *v);
        }
        let at = |t: u64| crate::engine::epoch() + chrono::Duration::seconds(t as i64);
        // Reports at 0, 1200, 2400: the window (600 s, the burst window) holds only the last.
        let entry = s.entry(2400, at);
        assert_eq!(entry.loads.len(), 1);
        assert_eq!(entry.recent_peak, Some(90.0), "the report 40 minutes ago is in the hour");
        s.report(3600, 7.0);
        assert_eq!(s.entry(3600, at).recent_peak, Some(7.0), "an hour later it is not");
        s.report(4800, 8.0);
        assert_eq!(s.entry(4800, at).recent_peak, Some(8.0));
        let replica = s.replica(ReplicaVariant::Cpu, 4800);
        assert_eq!((replica.id.as_str(), replica.gpus, replica.cpu_millis), ("chat-cpu-0", 0, 8000));
        assert!(!replica.preemptible);
    }
}
