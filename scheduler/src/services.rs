//! Elastic inference services: demand in, replicas out (`ARCHITECTURE.md`, "Services").
//!
//! Every cycle, before the policies decide, [`plan`] turns each service's load reports into the
//! replicas it should have and the changes that get it there:
//!
//! 1. **Demand, stabilised** as the Kubernetes HPA stabilises its recommendations: it scales up
//!    only to what every report in the scale-up window asked for (the window's minimum), and down
//!    only to what no report in the scale-down window exceeded (the window's maximum), so a spike
//!    does not add replicas it will shed a minute later and a dip does not drain replicas the next
//!    burst needs.
//! 2. **Headroom for the observed burstiness**: two standard deviations of the report-to-report
//!    noise of the last ten minutes on top — a smooth service gets little, a bursty one more, and
//!    a trend or a step is not mistaken for noise.
//! 3. **Variants, CPU first**: a service with a CPU variant fills the CPU nodes' free room with CPU
//!    replicas and spills to GPU replicas only for the load the CPUs cannot carry; when the CPUs
//!    can carry it again, the GPU replicas drain.
//! 4. **Bounds**: never below `min_replicas`, never above `max_replicas`; when the reports stop
//!    (none for `stale_after_s`) the current replicas are held (and `min_replicas` kept).
//! 5. **No capacity dip**: new replicas start at once; a placed replica drains only while the
//!    placed replicas left behind still carry the demand, so a move from GPU to CPU waits for the
//!    CPU replicas to run. Pending replicas are cancelled first (they never served).
//! 6. **Replaced before moved**: a replica on a draining node (an operator's drain) counts for the
//!    desired replicas but not as one that stays, so its replacement starts elsewhere at once; it
//!    drains only once the running replicas that stay carry what the service should have. Only on
//!    fresh load reports: while they are stale every replica is held, replaced or not.
//!
//! Replicas are workloads of the service's class: the policies place them like any other work
//! (real-time inference outranks training and batch work, and may preempt lendable work under the
//! preemption rules), the host checks them, a drained one stops with the grace period. [`burst_reserve`]
//! derives the GPUs to keep free for the services' recent peaks.
//!
//! Pure functions of the fleet: the control plane and the simulator scale by the same rules.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use uuid::Uuid;

pub use airtime_protocol::service::{LoadMetric, ReplicaVariant};
use airtime_protocol::sharing::WHOLE_GPU_MILLI;
use airtime_protocol::workload::{NodeState, WorkloadClass, WorkloadState};

use crate::fleet::FleetView;

/// Seconds of reports whose spread sets the burst headroom.
pub const BURST_WINDOW_S: i64 = 600;
/// Standard deviations of headroom.
pub const BURST_SIGMAS: f64 = 2.0;

/// One load report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadSample {
    pub at: DateTime<Utc>,
    /// In the service's metric.
    pub value: f64,
}

/// A service's CPU variant, as the autoscaler needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuVariant {
    /// Load one CPU replica carries at the latency target.
    pub capacity: f64,
    pub cpu_millis: u32,
    pub memory_mb: u64,
}

/// A service in the fleet model.
#[derive(Debug, Clone)]
pub struct ServiceEntry {
    pub id: Uuid,
    pub name: String,
    pub tenant: usize,
    pub class: WorkloadClass,
    pub metric: LoadMetric,
    pub min_replicas: u32,
    pub max_replicas: u32,
    /// Load one replica of the main (GPU) template carries at the latency target.
    pub capacity: f64,
    /// GPUs one main replica holds, in thousandths (a whole GPU 1000, two 2000, a quarter 250).
    pub gpu_milli_per_replica: u32,
    pub cpu_variant: Option<CpuVariant>,
    pub scale_up_window_s: u32,
    pub scale_down_window_s: u32,
    /// Reports older than this hold the replicas as they are.
    pub stale_after_s: u32,
    /// Deleted: every replica drains.
    pub draining: bool,
    /// Reports, oldest first, covering at least the longest window.
    pub loads: Vec<LoadSample>,
    /// The highest report of the last hour (the burst reserve keeps room for it).
    pub recent_peak: Option<f64>,
    /// What one replica of each variant costs an hour at the fleet's prices (a GPU replica its
    /// share of GPUs, as billed; a CPU replica its share of a CPU node), when the fleet prices
    /// them: the split uses a CPU replica only while its load costs no more there than on GPUs,
    /// and a scale-down removes the variant that costs most per unit of load first.
    pub replica_cost_per_hour: Option<VariantCosts>,
}

/// An hour of one replica of each variant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VariantCosts {
    pub gpu: f64,
    pub cpu: f64,
}

impl ServiceEntry {
    fn capacity_of(&self, variant: ReplicaVariant) -> f64 {
        match (variant, &self.cpu_variant) {
            (ReplicaVariant::Cpu, Some(cpu)) => cpu.capacity,
            _ => self.capacity,
        }
    }

    /// What a unit of load costs an hour on a replica of `variant`, when the fleet prices both.
    pub fn cost_per_load_hour(&self, variant: ReplicaVariant) -> Option<f64> {
        let costs = self.replica_cost_per_hour?;
        let cost = if variant == ReplicaVariant::Cpu { costs.cpu } else { costs.gpu };
        Some(cost / self.capacity_of(variant).max(1e-9))
    }

    /// A CPU replica's load costs more than a GPU replica's: the CPU variant is not used (its
    /// capacity, learned at the objective, may have fallen so far that it barely serves).
    fn cpu_dearer(&self) -> bool {
        match (self.cost_per_load_hour(ReplicaVariant::Cpu), self.cost_per_load_hour(ReplicaVariant::Gpu)) {
            (Some(cpu), Some(gpu)) => cpu > gpu * (1.0 + 1e-9),
            _ => false,
        }
    }

    /// The newest report, if it is recent enough to act on.
    fn fresh_latest(&self, now: DateTime<Utc>) -> Option<&LoadSample> {
        self.loads.last().filter(|s| (now - s.at).num_milliseconds() <= i64::from(self.stale_after_s) * 1000)
    }

    fn values_since(&self, since: DateTime<Utc>) -> impl Iterator<Item = f64> + '_ {
        self.loads.iter().filter(move |s| s.at >= since).map(|s| s.value)
    }
}

/// Replicas of each variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Replicas {
    pub gpu: u32,
    pub cpu: u32,
}

impl Replicas {
    pub fn total(self) -> u32 {
        self.gpu + self.cpu
    }

    fn of(self, variant: ReplicaVariant) -> u32 {
        match variant {
            ReplicaVariant::Gpu => self.gpu,
            ReplicaVariant::Cpu => self.cpu,
        }
    }

    fn capacity(self, service: &ServiceEntry) -> f64 {
        f64::from(self.gpu) * service.capacity_of(ReplicaVariant::Gpu)
            + f64::from(self.cpu) * service.capacity_of(ReplicaVariant::Cpu)
    }
}

/// What one service should do this cycle.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalePlan {
    /// Index in the fleet's services.
    pub service: usize,
    /// The replicas it should have.
    pub desired: Replicas,
    /// Replicas placed now (scheduled or running), those on draining nodes included.
    pub placed: Replicas,
    /// Replicas waiting for a place.
    pub pending: Replicas,
    /// The load it provisions for (stabilised, with headroom); `None` while the reports are stale.
    pub demand: Option<f64>,
    /// The newest report's load.
    pub latest: Option<f64>,
    /// New replicas to create.
    pub start: Vec<ReplicaVariant>,
    /// Replicas (workload indexes) to stop: pending ones are cancelled, placed ones drain.
    pub drain: Vec<usize>,
    /// Why, in words: "demand 42 req/s (+6 for bursts) over 4 GPU replicas at 15 req/s each".
    pub reason: String,
}

impl ScalePlan {
    /// Whether it changes anything.
    pub fn changes(&self) -> bool {
        !self.start.is_empty() || !self.drain.is_empty()
    }
}

/// The services' scale plans for this cycle, one per service, in service order.
pub fn plan(fleet: &FleetView) -> Vec<ScalePlan> {
    (0..fleet.services.len()).map(|s| plan_one(fleet, s)).collect()
}

/// A service's replicas now, by state: placed (scheduled, running) on nodes that stay, placed on
/// draining nodes (leaving), and pending, as workload indexes newest first. Work being preempted
/// or cancelled is on its way out and counts for none.
struct Current {
    placed: Vec<(usize, ReplicaVariant)>,
    pending: Vec<(usize, ReplicaVariant)>,
    /// On a draining node: replaced elsewhere first, then drained.
    leaving: Vec<(usize, ReplicaVariant)>,
}

fn current(fleet: &FleetView, service: usize) -> Current {
    let mut placed = Vec::new();
    let mut pending = Vec::new();
    let mut leaving = Vec::new();
    for (i, w) in fleet.workloads.iter().enumerate() {
        let Some(replica) = w.replica_of.filter(|r| r.service == service) else { continue };
        match w.state {
            WorkloadState::Pending => pending.push((i, replica.variant)),
            WorkloadState::Scheduled | WorkloadState::Running
                if w.node.and_then(|n| fleet.nodes.get(n)).is_some_and(|n| n.state == NodeState::Draining) =>
            {
                leaving.push((i, replica.variant));
            }
            WorkloadState::Scheduled | WorkloadState::Running => placed.push((i, replica.variant)),
            _ => {}
        }
    }
    // Newest first: the last started drains first, the last queued is cancelled first.
    let started = |i: &usize| fleet.workloads[*i].started_at.unwrap_or(fleet.workloads[*i].submitted_at);
    placed.sort_by(|a, b| started(&b.0).cmp(&started(&a.0)).then(b.0.cmp(&a.0)));
    leaving.sort_by(|a, b| started(&b.0).cmp(&started(&a.0)).then(b.0.cmp(&a.0)));
    pending
        .sort_by(|a, b| fleet.workloads[b.0].submitted_at.cmp(&fleet.workloads[a.0].submitted_at).then(b.0.cmp(&a.0)));
    Current { placed, pending, leaving }
}

/// Whether replica `w` serves (its readiness answered, or its service reads none).
fn ready(fleet: &FleetView, w: usize) -> bool {
    fleet.workloads[w].replica_of.is_some_and(|r| r.ready)
}

fn count(replicas: &[(usize, ReplicaVariant)]) -> Replicas {
    let mut r = Replicas::default();
    for (_, v) in replicas {
        match v {
            ReplicaVariant::Gpu => r.gpu += 1,
            ReplicaVariant::Cpu => r.cpu += 1,
        }
    }
    r
}

fn plan_one(fleet: &FleetView, s: usize) -> ScalePlan {
    let service = &fleet.services[s];
    let now = fleet.now;
    let cur = current(fleet, s);
    let placed = count(&cur.placed);
    let pending = count(&cur.pending);
    let leaving = count(&cur.leaving);
    // The replicas that stay; with the leaving ones, what the service has now (the desired count
    // is worked out from that, so a drain neither raises nor lowers it).
    let have = Replicas { gpu: placed.gpu + pending.gpu, cpu: placed.cpu + pending.cpu };
    let have_all = Replicas { gpu: have.gpu + leaving.gpu, cpu: have.cpu + leaving.cpu };
    let unit = service.metric.unit();
    let cpu_room = cpu_room(fleet, service);

    let latest = service.loads.last().map(|l| l.value);
    let (desired, demand, reason) = if service.draining {
        (Replicas::default(), None, "the service was deleted: its replicas drain".to_string())
    } else if let Some(latest_sample) = service.fresh_latest(now) {
        let at = |secs: u32| now - chrono::Duration::seconds(i64::from(secs));
        let up: f64 = service.values_since(at(service.scale_up_window_s)).fold(f64::INFINITY, f64::min);
        let up = if up.is_finite() { up } else { latest_sample.value };
        let down: f64 = service.values_since(at(service.scale_down_window_s)).fold(latest_sample.value, f64::max);
        let headroom = headroom(service, now);
        let for_up = split(service, up + headroom, placed.cpu + cpu_room);
        let for_down = split(service, down + headroom, placed.cpu + cpu_room);
        let have_capacity = have_all.capacity(service);
        let (desired, provisioned, verb) = if for_up.capacity(service) > have_capacity + 1e-9 {
            (for_up, up + headroom, "scale up")
        } else if for_down.capacity(service) + 1e-9 < have_capacity || for_down.total() < have_all.total() {
            (for_down, down + headroom, "scale down")
        } else {
            (have_all, down + headroom, "hold")
        };
        let desired = bound(service, desired, cpu_room + placed.cpu);
        let mut reason = format!("{verb}: demand {} {unit}", number(latest_sample.value));
        if (provisioned - headroom - latest_sample.value).abs() > 1e-9 {
            let window = if verb == "scale up" { service.scale_up_window_s } else { service.scale_down_window_s };
            let _ = write!(reason, " ({} over the last {window} s)", number(provisioned - headroom));
        }
        if headroom > 0.0 {
            let _ = write!(reason, " +{} for bursts", number(headroom));
        }
        let _ = write!(reason, " over {}", in_words(service, desired));
        if service.cpu_variant.is_some() && desired.gpu > 0 {
            let _ = write!(reason, "; CPU nodes have room for {} CPU replicas", placed.cpu + cpu_room);
        }
        (desired, Some(provisioned), reason)
    } else {
        let held = bound(service, have_all, cpu_room + placed.cpu);
        let silence = match service.loads.last() {
            Some(l) => format!("no load report for {} s", (now - l.at).num_seconds()),
            None => "no load report yet".to_string(),
        };
        let reason = format!(
            "{silence}: holding {} (min {}, max {})",
            in_words(service, held),
            service.min_replicas,
            service.max_replicas
        );
        (held, None, reason)
    };

    // Replicas on draining nodes are replaced only on a known demand (or stopped with a deleted
    // service): holding on stale reports cannot tell a replacement from a replica that was there,
    // so it holds them all, and the drain's deadline stops and requeues what is left.
    let replaces = demand.is_some() || service.draining;
    let (start, mut drain) = changes(fleet, service, &cur, if replaces { have } else { have_all }, desired, demand);
    let mut reason = reason;
    if !cur.leaving.is_empty() {
        if replaces {
            let moved = leaving_drains(fleet, service, &cur, desired);
            let _ = write!(
                reason,
                "; {} on draining nodes, {} replaced and stopping",
                in_words(service, leaving),
                moved.len()
            );
            drain.extend(moved);
        } else {
            let _ = write!(
                reason,
                "; {} on draining nodes, not replaced without fresh load reports",
                in_words(service, leaving)
            );
        }
    }
    let placed = Replicas { gpu: placed.gpu + leaving.gpu, cpu: placed.cpu + leaving.cpu };
    ScalePlan { service: s, desired, placed, pending, demand, latest, start, drain, reason }
}

/// The replicas on draining nodes that may stop now: all of a deleted service's; otherwise, newest
/// first, each while the running replicas that stay, with the leaving ones still kept, carry the
/// capacity of the desired replicas — so a replica stops only once its replacement runs.
fn leaving_drains(fleet: &FleetView, service: &ServiceEntry, cur: &Current, desired: Replicas) -> Vec<usize> {
    if service.draining {
        return cur.leaving.iter().map(|(w, _)| *w).collect();
    }
    let running: f64 = cur
        .placed
        .iter()
        .filter(|(w, _)| fleet.workloads[*w].state == WorkloadState::Running && ready(fleet, *w))
        .map(|(_, v)| service.capacity_of(*v))
        .sum();
    let mut kept: f64 = cur.leaving.iter().map(|(_, v)| service.capacity_of(*v)).sum();
    let needed = desired.capacity(service);
    let mut drain = Vec::new();
    for &(w, v) in &cur.leaving {
        let after = kept - service.capacity_of(v);
        if running + after + 1e-9 >= needed {
            kept = after;
            drain.push(w);
        }
    }
    drain
}

/// Two standard deviations of the report-to-report noise in the burst window (none with fewer
/// than three reports). The deviation is estimated robustly from successive differences (their
/// median absolute value, as for a normal noise), so a trend or one step in demand is not taken for
/// burstiness while a load that swings between reports is.
fn headroom(service: &ServiceEntry, now: DateTime<Utc>) -> f64 {
    let values: Vec<f64> = service.values_since(now - chrono::Duration::seconds(BURST_WINDOW_S)).collect();
    if values.len() < 3 {
        return 0.0;
    }
    let mut deltas: Vec<f64> = values.windows(2).map(|w| (w[1] - w[0]).abs()).collect();
    deltas.sort_by(f64::total_cmp);
    let median = deltas[deltas.len() / 2];
    // For independent normal noise of deviation σ, a difference has deviation σ·√2 and its median
    // absolute value is 0.6745 of that.
    BURST_SIGMAS * median / (0.6745 * std::f64::consts::SQRT_2)
}

/// The replicas that carry `load`: CPU replicas first (up to `cpu_limit`, what the CPU nodes hold),
/// GPU replicas for the rest; within `max_replicas`, trading CPU replicas for GPU ones (which carry
/// more) when the count would exceed it.
pub fn split(service: &ServiceEntry, load: f64, cpu_limit: u32) -> Replicas {
    let max = service.max_replicas;
    let need =
        |capacity: f64, load: f64| if load <= 1e-9 { 0 } else { (load / capacity.max(1e-9) - 1e-9).ceil() as u32 };
    let Some(cpu) = service.cpu_variant.as_ref().filter(|_| !service.cpu_dearer()) else {
        return Replicas { gpu: need(service.capacity, load).min(max), cpu: 0 };
    };
    let mut n_cpu = need(cpu.capacity, load).min(cpu_limit).min(max);
    loop {
        let rest = load - f64::from(n_cpu) * cpu.capacity;
        let n_gpu = need(service.capacity, rest);
        if n_cpu + n_gpu <= max || n_cpu == 0 {
            return Replicas { gpu: n_gpu.min(max - n_cpu), cpu: n_cpu };
        }
        n_cpu -= 1;
    }
}

/// Within the bounds: at least `min_replicas` (CPU ones while the CPU nodes have room), at most
/// `max_replicas` (GPU ones kept first: they carry more).
fn bound(service: &ServiceEntry, mut r: Replicas, cpu_limit: u32) -> Replicas {
    let (min, max) = (service.min_replicas, service.max_replicas.max(service.min_replicas));
    while r.total() < min {
        if service.cpu_variant.is_some() && !service.cpu_dearer() && r.cpu < cpu_limit {
            r.cpu += 1;
        } else {
            r.gpu += 1;
        }
    }
    while r.total() > max {
        if r.cpu > 0 && (r.gpu > 0 || service.capacity >= service.capacity_of(ReplicaVariant::Cpu)) {
            r.cpu -= 1;
        } else {
            r.gpu -= 1;
        }
    }
    if service.cpu_variant.is_none() {
        r.gpu += r.cpu;
        r.cpu = 0;
    }
    r
}

/// How many more CPU replicas the CPU nodes (ready nodes without GPUs) have room for: the room its
/// pending CPU replicas will take, and any beyond.
fn cpu_room(fleet: &FleetView, service: &ServiceEntry) -> u32 {
    let Some(cpu) = &service.cpu_variant else { return 0 };
    let mut room: u32 = 0;
    for node in fleet.nodes.iter().filter(|n| n.gpu_count == 0 && n.state == NodeState::Ready) {
        let by_cpu = node.cpu_millis_free.checked_div(cpu.cpu_millis).unwrap_or(u32::MAX);
        let by_mem =
            node.memory_mb_free.checked_div(cpu.memory_mb).map_or(u32::MAX, |n| n.min(u64::from(u32::MAX)) as u32);
        room = room.saturating_add(by_cpu.min(by_mem).min(1024));
    }
    room
}

/// The starts and drains that move `have` to `desired` without a dip below `demand`.
fn changes(
    fleet: &FleetView,
    service: &ServiceEntry,
    cur: &Current,
    have: Replicas,
    desired: Replicas,
    demand: Option<f64>,
) -> (Vec<ReplicaVariant>, Vec<usize>) {
    let mut start = Vec::new();
    let mut drain = Vec::new();
    for variant in [ReplicaVariant::Cpu, ReplicaVariant::Gpu] {
        for _ in have.of(variant)..desired.of(variant) {
            start.push(variant);
        }
    }
    // Pending replicas above the desired count never served: cancel them first.
    let excess = |variant: ReplicaVariant| have.of(variant).saturating_sub(desired.of(variant));
    let mut excess_of = [excess(ReplicaVariant::Gpu), excess(ReplicaVariant::Cpu)];
    let slot = |v: ReplicaVariant| if v == ReplicaVariant::Gpu { 0 } else { 1 };
    for &(w, v) in &cur.pending {
        if excess_of[slot(v)] > 0 {
            excess_of[slot(v)] -= 1;
            drain.push(w);
        }
    }
    // Then placed ones, newest first, GPU replicas before CPU ones, while what stays placed still
    // carries the demand (and the deleted service's, or a lowered maximum's, at once).
    // Only ready replicas carry load: one whose server has not answered yet serves nothing.
    let carrying = |w: usize, v: ReplicaVariant| if ready(fleet, w) { service.capacity_of(v) } else { 0.0 };
    let mut placed_capacity: f64 = cur.placed.iter().map(|&(w, v)| carrying(w, v)).sum();
    let must = service.draining || have.total() > service.max_replicas.max(service.min_replicas);
    let mut ordered: Vec<&(usize, ReplicaVariant)> = cur.placed.iter().collect();
    // The dearest per unit of load first where the fleet prices both; otherwise GPU replicas first.
    let dearer_first =
        match (service.cost_per_load_hour(ReplicaVariant::Gpu), service.cost_per_load_hour(ReplicaVariant::Cpu)) {
            (Some(gpu), Some(cpu)) if cpu > gpu => [ReplicaVariant::Cpu, ReplicaVariant::Gpu],
            _ => [ReplicaVariant::Gpu, ReplicaVariant::Cpu],
        };
    ordered.sort_by_key(|(_, v)| dearer_first.iter().position(|d| d == v));
    for &&(w, v) in &ordered {
        if excess_of[slot(v)] == 0 {
            continue;
        }
        let after = placed_capacity - carrying(w, v);
        let carries = demand.is_none_or(|d| after + 1e-9 >= d);
        if must || carries {
            excess_of[slot(v)] -= 1;
            placed_capacity = after;
            drain.push(w);
        }
    }
    (start, drain)
}

/// "3 GPU replicas at 15 req/s each", "2 CPU replicas at 8 req/s each and 1 GPU replica at 30 req/s".
fn in_words(service: &ServiceEntry, r: Replicas) -> String {
    let unit = service.metric.unit();
    let part = |n: u32, kind: &str, capacity: f64| {
        let plural = if n == 1 { "" } else { "s" };
        let each = if n == 1 { "" } else { " each" };
        format!("{n} {kind}replica{plural} at {} {unit}{each}", number(capacity))
    };
    match (&service.cpu_variant, r.cpu) {
        (None, _) => part(r.gpu, "", service.capacity),
        (Some(_), 0) => part(r.gpu, "GPU ", service.capacity),
        (Some(cpu), n_cpu) if r.gpu == 0 => part(n_cpu, "CPU ", cpu.capacity),
        (Some(cpu), n_cpu) => {
            format!("{} and {}", part(n_cpu, "CPU ", cpu.capacity), part(r.gpu, "GPU ", service.capacity))
        }
    }
}

fn number(v: f64) -> String {
    if (v - v.round()).abs() < 0.05 { format!("{:.0}", v.round()) } else { format!("{v:.1}") }
}

/// GPUs to keep free for the services' bursts this cycle: for each service, the GPUs its GPU
/// replicas would need to carry its peak of the last hour beyond what its desired replicas carry
/// (a share counted as its part of a GPU, rounded up over the fleet). The platform's fixed
/// `burst_reserve_gpus` is the floor.
pub fn burst_reserve(fleet: &FleetView, plans: &[ScalePlan]) -> u32 {
    let mut milli: u64 = 0;
    for plan in plans {
        let service = &fleet.services[plan.service];
        let (Some(peak), Some(demand)) = (service.recent_peak, plan.demand) else { continue };
        if service.draining || peak <= demand {
            continue;
        }
        let cpu_limit = plan.desired.cpu.max(plan.placed.cpu);
        let at_peak = split(service, peak + headroom(service, fleet.now), cpu_limit);
        let extra =
            at_peak.gpu.saturating_sub(plan.desired.gpu).min(service.max_replicas.saturating_sub(plan.desired.total()));
        milli += u64::from(extra) * u64::from(service.gpu_milli_per_replica);
    }
    milli.div_ceil(u64::from(WHOLE_GPU_MILLI)).min(u64::from(u32::MAX)) as u32
}

#[cfg(test)]
impl ServiceEntry {
    /// The tests' service: real-time, 15 req/s a GPU replica, 1 to 10 replicas, scaling up at once
    /// and down over five minutes, no reports yet.
    pub(crate) fn fixture(name: &str, tenant: usize) -> ServiceEntry {
        ServiceEntry {
            id: Uuid::new_v4(),
            name: name.into(),
            tenant,
            class: WorkloadClass::RealtimeInference,
            metric: LoadMetric::RequestsPerSecond,
            min_replicas: 1,
            max_replicas: 10,
            capacity: 15.0,
            gpu_milli_per_replica: 1000,
            cpu_variant: None,
            scale_up_window_s: 0,
            scale_down_window_s: 300,
            stale_after_s: 60,
            draining: false,
            loads: Vec::new(),
            recent_peak: None,
            replica_cost_per_hour: None,
        }
    }
}

#[cfg(test)]
mod tests;
