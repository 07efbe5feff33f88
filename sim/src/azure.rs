//! Azure's public LLM inference arrivals (Splitwise, ISCA '24: `TIMESTAMP,ContextTokens,
//! GeneratedTokens`, about an hour of requests) as real-time inference demand in our trace format.
//!
//! The requests are counted per window; the hour is repeated to fill the days asked for, each hour
//! of the day scaled by a diurnal shape (a cosine peaking at `peak_hour`, its trough `1 − amplitude`
//! of its peak) and by `scale`. Each window's rate becomes the replicas that serve it at
//! `rps_per_replica` with `headroom`, scaled up at once and down only after `scale_down_s` below
//! (the Kubernetes HPA's stabilisation window). Every replica's life — from the window that needed
//! it to the window that let it go — is one `realtime_inference` workload: the demand is then the
//! trace, whatever the policy does with it (a replica started late served less of its window).
//!
//! [`to_service`] reads the same arrivals as an elastic inference **service**'s demand instead: the
//! requests per second of each report interval (15 s by default, a replica's report interval),
//! repeated and shaped the same way, which the replay's autoscaler (the core's, as in the control
//! plane) turns into replicas.

use std::path::Path;

use airtime_protocol::workload::WorkloadClass;
use chrono::NaiveDateTime;

use crate::format::{CpuVariantSpec, Demand, InputError, ReplicaTemplate, Trace, TraceService, TraceWorkload};

#[derive(Debug, Clone)]
pub struct Options {
    /// Requests per second one replica serves at its latency target.
    pub rps_per_replica: f64,
    /// Extra capacity kept over the measured rate (0.2: 20%).
    pub headroom: f64,
    pub window_s: u64,
    pub scale_down_s: u64,
    pub min_replicas: u32,
    pub days: u32,
    pub amplitude: f64,
    pub peak_hour: f64,
    pub scale: f64,
    pub tenant: String,
    pub gpus: u32,
    pub gpu_models: Vec<String>,
    pub cpu_millis: u32,
    pub memory_mb: u64,
    pub priority: i32,
    /// Prefix of the workloads' ids (several services in one trace need distinct ones).
    pub id_prefix: String,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            rps_per_replica: 1.0,
            headroom: 0.2,
            window_s: 60,
            scale_down_s: 300,
            min_replicas: 1,
            days: 1,
            amplitude: 0.5,
            peak_hour: 14.0,
            scale: 1.0,
            tenant: "serving".into(),
            gpus: 1,
            gpu_models: Vec::new(),
            cpu_millis: 4000,
            memory_mb: 16384,
            priority: 100,
            id_prefix: "azure".into(),
        }
    }
}

/// Request counts per window of the file, from its first request.
pub fn arrivals(path: &Path, window_s: u64) -> Result<Vec<u32>, InputError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| InputError::new(&name, 0, format!("cannot read: {e}")))?;
    let mut lines = text.lines().enumerate();
    let header = lines.next().map(|(_, l)| l.trim()).unwrap_or("");
    if !header.starts_with("TIMESTAMP") {
        return Err(InputError::new(
            &name,
            1,
            format!("the header is {header:?}, not TIMESTAMP,ContextTokens,GeneratedTokens"),
        ));
    }
    let mut first: Option<NaiveDateTime> = None;
    let mut counts: Vec<u32> = Vec::new();
    let window = window_s.max(1) as i64;
    for (i, line) in lines {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let stamp = line.split(',').next().unwrap_or("");
        let at = NaiveDateTime::parse_from_str(stamp, "%Y-%m-%d %H:%M:%S%.f").map_err(|e| {
            InputError::new(
                &name,
                i + 1,
                format!("field `TIMESTAMP`: {stamp:?} is not a time like 2023-11-16 18:15:46.68 ({e})"),
            )
        })?;
        let start = *first.get_or_insert(at);
        let offset = (at - start).num_milliseconds();
        if offset < 0 {
            return Err(InputError::new(
                &name,
                i + 1,
                "field `TIMESTAMP`: earlier than the first request (the file must be in time order)",
            ));
        }
        let slot = (offset / 1000 / window) as usize;
        if counts.len() <= slot {
            counts.resize(slot + 1, 0);
        }
        counts[slot] += 1;
    }
    if counts.is_empty() {
        return Err(InputError::new(&name, 0, "no requests"));
    }
    Ok(counts)
}

/// The diurnal factor at `t` seconds (1 at the peak hour, `1 − amplitude` twelve hours later).
pub fn diurnal(t: u64, amplitude: f64, peak_hour: f64) -> f64 {
    let hour = (t % 86_400) as f64 / 3600.0;
    let cos = (2.0 * std::f64::consts::PI * (hour - peak_hour) / 24.0).cos();
    1.0 - amplitude.clamp(0.0, 1.0) * (1.0 - cos) / 2.0
}

/// Replicas wanted in each window of the whole span (before stabilisation).
pub fn replicas_needed(counts: &[u32], options: &Options) -> Vec<u32> {
    let window = options.window_s.max(1);
    let windows = (u64::from(options.days.max(1)) * 86_400).div_ceil(window);
    (0..windows)
        .map(|i| {
            let base = f64::from(counts[(i as usize) % counts.len()]) / window as f64;
            let rate = base * diurnal(i * window, options.amplitude, options.peak_hour) * options.scale;
            let needed = (rate * (1.0 + options.headroom) / options.rps_per_replica.max(1e-9)).ceil();
            (needed as u32).max(options.min_replicas)
        })
        .collect()
}

/// The demand as replica workloads: up at once, down after the stabilisation window.
pub fn to_trace(counts: &[u32], options: &Options) -> Trace {
    let window = options.window_s.max(1);
    let needed = replicas_needed(counts, options);
    let hold = (options.scale_down_s / window) as usize;
    let mut started: Vec<u64> = Vec::new(); // replica level k started at started[k]
    let mut workloads = Vec::new();
    let emit = |level: usize, from: u64, to: u64, workloads: &mut Vec<TraceWorkload>| {
        workloads.push(TraceWorkload {
            mig_profile: None,
            id: format!("{}-r{level}-{from}", options.id_prefix),
            tenant: options.tenant.clone(),
            class: WorkloadClass::RealtimeInference,
            arrive_s: from,
            duration_s: (to - from).max(1),
            gpus: options.gpus,
            gpu_milli: 1000,
            gpu_memory_mb: 0,
            gpu_models: options.gpu_models.clone(),
            cpu_millis: options.cpu_millis,
            memory_mb: options.memory_mb,
            priority: options.priority,
            preemptible: false,
            checkpointable: false,
            cpu_capable: false,
        });
    };
    for (i, _) in needed.iter().enumerate() {
        let t = i as u64 * window;
        let from = i.saturating_sub(hold);
        let target = needed[from..=i].iter().copied().max().unwrap_or(0) as usize;
        while started.len() < target {
            started.push(t);
        }
        while started.len() > target {
            let level = started.len() - 1;
            let from = started.pop().unwrap_or(t);
            emit(level, from, t, &mut workloads);
        }
    }
    let end = needed.len() as u64 * window;
    while let Some(from) = started.pop() {
        emit(started.len(), from, end, &mut workloads);
    }
    workloads.sort_by(|a, b| a.arrive_s.cmp(&b.arrive_s).then_with(|| a.id.cmp(&b.id)));
    Trace { workloads, ..Trace::default() }
}

/// The Azure arrivals as a service's demand.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    pub name: String,
    pub tenant: String,
    pub class: WorkloadClass,
    /// Seconds between two load reports (the counting window).
    pub every_s: u32,
    pub days: u32,
    pub amplitude: f64,
    pub peak_hour: f64,
    pub scale: f64,
    /// Requests per second one GPU replica carries.
    pub capacity: f64,
    pub min_replicas: u32,
    /// The most replicas (0: half again the replicas the peak needs).
    pub max_replicas: u32,
    pub replica: ReplicaTemplate,
    pub cpu_variant: Option<CpuVariantSpec>,
    pub scale_up_window_s: u32,
    pub scale_down_window_s: u32,
    pub stale_after_s: u32,
    pub startup_s: u32,
}

impl Default for ServiceOptions {
    fn default() -> Self {
        ServiceOptions {
            name: "azure".into(),
            tenant: "serving".into(),
            class: WorkloadClass::RealtimeInference,
            every_s: 15,
            days: 1,
            amplitude: 0.5,
            peak_hour: 14.0,
            scale: 1.0,
            capacity: 1.0,
            min_replicas: 1,
            max_replicas: 0,
            replica: ReplicaTemplate {
                gpus: 1,
                gpu_milli: 1000,
                gpu_memory_mb: 0,
                gpu_models: Vec::new(),
                cpu_millis: 4000,
                memory_mb: 16384,
                priority: 100,
            },
            cpu_variant: None,
            scale_up_window_s: 0,
            scale_down_window_s: 300,
            stale_after_s: 60,
            startup_s: 0,
        }
    }
}

/// Requests per second in each report interval of the whole span: the file's counts per interval
/// (its last, partial interval left out, so the repeated hour has no dip at its seam), repeated,
/// each scaled by the diurnal shape at its time and by `scale`. The same counts give the same
/// demand on every machine.
pub fn demand(counts: &[u32], options: &ServiceOptions) -> Vec<f64> {
    let every = u64::from(options.every_s.max(1));
    let counts = if counts.len() > 1 { &counts[..counts.len() - 1] } else { counts };
    let intervals = (u64::from(options.days.max(1)) * 86_400).div_ceil(every);
    (0..intervals)
        .map(|i| {
            let base = f64::from(counts[(i as usize) % counts.len()]) / every as f64;
            base * diurnal(i * every, options.amplitude, options.peak_hour) * options.scale
        })
        .collect()
}

/// The arrivals (`arrivals(path, options.every_s)`) as one service record.
pub fn to_service(counts: &[u32], options: &ServiceOptions) -> TraceService {
    let values = demand(counts, options);
    let peak = values.iter().copied().fold(0.0, f64::max);
    let max_replicas = if options.max_replicas > 0 {
        options.max_replicas
    } else {
        crate::services::replicas_for(peak * 1.5, options.capacity)
    };
    TraceService {
        name: options.name.clone(),
        tenant: options.tenant.clone(),
        class: options.class,
        min_replicas: options.min_replicas.min(max_replicas),
        max_replicas,
        metric: Default::default(),
        capacity: options.capacity,
        replica: options.replica.clone(),
        cpu_variant: options.cpu_variant.clone(),
        scale_up_window_s: options.scale_up_window_s,
        scale_down_window_s: options.scale_down_window_s,
        stale_after_s: options.stale_after_s,
        startup_s: options.startup_s,
        start_s: 0,
        demand: Demand { every_s: options.every_s, values },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arrivals_become_a_services_demand_in_requests_per_second_over_a_diurnal_day() {
        // 30, 60 and 15 requests in three 15 s intervals, the last one partial.
        let counts = [30, 60, 15];
        let options = ServiceOptions { amplitude: 0.5, scale: 2.0, capacity: 4.0, ..ServiceOptions::default() };
        let service = to_service(&counts, &options);
        let values = &service.demand.values;
        assert_eq!(values.len(), 86_400 / 15);
        // 2 and 4 req/s, then 2 again: the partial interval is left out, so the hour repeats.
        let shape = |t: u64| diurnal(t, 0.5, 14.0) * 2.0;
        assert!((values[0] - 2.0 * shape(0)).abs() < 1e-9, "{}", values[0]);
        assert!((values[1] - 4.0 * shape(15)).abs() < 1e-9, "{}", values[1]);
        assert!((values[2] - 2.0 * shape(30)).abs() < 1e-9, "{}", values[2]);
        let at_peak = values[14 * 240];
        assert!((at_peak - 4.0).abs() < 1e-9, "{at_peak}");
        // The peak is 8 req/s (the second interval at 14:00): 12 with half again, 3 replicas of 4.
        assert_eq!(service.max_replicas, 3);
        service.check().expect("a valid service");
    }

    #[test]
    fn the_day_peaks_at_the_peak_hour() {
        assert!((diurnal(14 * 3600, 0.5, 14.0) - 1.0).abs() < 1e-9);
        assert!((diurnal(2 * 3600, 0.5, 14.0) - 0.5).abs() < 1e-9);
        assert!((diurnal(86_400 + 14 * 3600, 0.5, 14.0) - 1.0).abs() < 1e-9, "every day alike");
    }

    #[test]
    fn replicas_scale_up_at_once_and_down_after_the_window() {
        let options =
            Options { days: 1, amplitude: 0.0, headroom: 0.0, window_s: 60, scale_down_s: 120, ..Options::default() };
        // 1, 3, 1, 1, 1 requests/s then repeating: three replicas from minute 1, kept to minute 4.
        let counts = [60, 180, 60, 60, 60];
        let trace = to_trace(&counts, &options);
        let at = |t: u64| trace.workloads.iter().filter(|w| w.arrive_s <= t && t < w.arrive_s + w.duration_s).count();
        assert_eq!([at(0), at(60), at(120), at(180), at(240)], [1, 3, 3, 3, 1]);
        assert!(trace.workloads.iter().all(|w| w.class == WorkloadClass::RealtimeInference && !w.preemptible));
        let ids: std::collections::HashSet<&str> = trace.workloads.iter().map(|w| w.id.as_str()).collect();
        assert_eq!(ids.len(), trace.workloads.len(), "ids are unique");
        assert_eq!(trace.span_s(), 86_400);
    }

    #[test]
    fn a_bad_timestamp_names_its_line() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("a.csv");
        std::fs::write(
            &path,
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,1,1\nyesterday,1,1\n",
        )
        .expect("write");
        let err = arrivals(&path, 60).expect_err("bad time").to_string();
        assert!(err.contains("line 3: field `TIMESTAMP`: \"yesterday\""), "{err}");
        std::fs::write(
            &path,
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,1,1\n2023-11-16 18:17:00.1,1,1\n",
        )
        .expect("write");
        assert_eq!(arrivals(&path, 60).expect("reads"), vec![1, 1]);
    }
}
