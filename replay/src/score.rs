//! What a replay scores: how much of the owned GPU time was allocated and busy, what the idle time
//! cost, how fragmented the free capacity was, whether real-time demand had its capacity, how long
//! each class queued, what was completed and what preemption wasted, how fairly tenants were served
//! against their guarantees, and how fast the core decided; for elastic inference services, how
//! much of the time their serving replicas carried their demand and what replicas they ran.
//!
//! Time-weighted quantities are integrated exactly between events over the trace's span (the same
//! window for every policy, so they compare); fragmentation and the time series are sampled.

use std::time::Duration;

use airtime_protocol::service::ReplicaVariant;
use airtime_protocol::workload::{NodeState, WorkloadClass};
use serde::Serialize;

use crate::engine::{Gpu, Job, Phase, World};

#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Percentiles {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    /// How many values (workloads that started).
    pub count: usize,
}

impl Percentiles {
    pub fn of(mut values: Vec<f64>) -> Percentiles {
        if values.is_empty() {
            return Percentiles::default();
        }
        values.sort_by(f64::total_cmp);
        let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
        Percentiles { p50: at(0.50), p95: at(0.95), p99: at(0.99), count: values.len() }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Sample {
    pub t_s: u64,
    pub allocated_gpus: f64,
    pub busy_gpus: f64,
    pub idle_gpus: f64,
    pub pending: usize,
    /// Free GPUs on ready nodes where no waiting GPU workload fits.
    pub fragmented_gpus: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ClassDelay {
    pub class: WorkloadClass,
    pub start_delay_s: Percentiles,
    /// Workloads of the class that never started.
    pub never_started: usize,
}

/// GPU-hours of one class's work that ran to completion.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ClassHours {
    pub class: WorkloadClass,
    pub gpu_hours: f64,
}

/// A service at one sample of the time series.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ServiceSample {
    pub t_s: u64,
    /// The latest report.
    pub demand: f64,
    /// What its serving replicas carry.
    pub capacity: f64,
    /// Replicas placed (holding their resources), by variant, and waiting.
    pub gpu_replicas: u32,
    pub cpu_replicas: u32,
    pub pending: u32,
}

/// What one elastic inference service got.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ServiceScore {
    pub name: String,
    pub class: WorkloadClass,
    /// Share of its live time (in the window) that its serving replicas' capacity was at least
    /// its demand.
    pub slo_attainment: f64,
    /// Share of its demand (load × time) its serving replicas carried.
    pub demand_served: f64,
    pub mean_demand: f64,
    pub peak_demand: f64,
    /// Hours of placed replicas in the window, by variant.
    pub gpu_replica_hours: f64,
    pub cpu_replica_hours: f64,
    pub peak_gpu_replicas: u32,
    pub peak_cpu_replicas: u32,
    pub replicas_started: u32,
    /// Replicas the autoscaler stopped: pending ones cancelled, placed ones drained.
    pub replicas_drained: u32,
    /// From a replica's creation to its first placement.
    pub start_delay_s: Percentiles,
    pub series: Vec<ServiceSample>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TenantScore {
    pub name: String,
    pub guaranteed_gpus: u32,
    /// GPUs held on average over the span.
    pub mean_gpus: f64,
    /// GPUs its work asked for on average (offered GPU-seconds over the span).
    pub mean_demand_gpus: f64,
    /// Held against what it was due: min(demand, guarantee); 1 means it got its guarantee or all it asked.
    pub guarantee_met: f64,
}

/// The scores of one replay.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Scores {
    pub policy: String,
    /// How the services were run (`crate::services::ServiceMode`); empty without services.
    pub mode: String,
    pub seed: u64,
    pub span_s: u64,
    pub gpus: usize,
    pub owned_gpu_hours: f64,
    pub allocated_gpu_hours: f64,
    pub busy_gpu_hours: f64,
    pub allocated_share: f64,
    pub busy_share: f64,
    /// Owned GPU-hours not busy, and what they cost at the nodes' prices.
    pub idle_gpu_hours: f64,
    pub idle_cost: f64,
    /// Of those, the hours a GPU was held but not busy (a fraction holding a whole GPU, a
    /// preempted workload in its grace period).
    pub held_idle_gpu_hours: f64,
    pub fragmented_gpus_mean: f64,
    /// Fragmented GPUs as a share of free GPUs, over samples with GPU work waiting.
    pub fragmented_share_of_free: f64,
    /// Share of real-time demand (replica-seconds wanted) that was served.
    pub realtime_slo_attainment: f64,
    pub realtime_start_delay_s: Percentiles,
    pub queue_delay: Vec<ClassDelay>,
    /// GPU-hours of non-real-time work that ran to completion.
    pub completed_gpu_hours: f64,
    /// The same by class.
    pub completed_by_class: Vec<ClassHours>,
    pub completed_workloads: usize,
    pub unfinished_workloads: usize,
    pub preemptions: usize,
    /// GPU-hours of runs lost to preemption or node loss (not checkpointable).
    pub wasted_gpu_hours: f64,
    pub requeued_by_node_loss: usize,
    pub tenants: Vec<TenantScore>,
    /// The elastic inference services, in trace order.
    pub services: Vec<ServiceScore>,
    /// Of the real-time services together: the share of their live time their serving capacity
    /// was at least their demand (1 without any).
    pub service_slo_attainment: f64,
    /// Hours of placed service replicas in the window, GPU and CPU.
    pub gpu_replica_hours: f64,
    pub cpu_replica_hours: f64,
    /// Jain's index of the tenants' `guarantee_met` (1: all equally served).
    pub fairness: f64,
    pub cycles: usize,
    pub decisions: usize,
    pub refused: usize,
    pub policy_failures: usize,
    pub wall_s: f64,
    /// Of the wall time, the cycles' (fleet view, policies, checks).
    pub cycle_wall_s: f64,
    pub decisions_per_s: f64,
    pub series: Vec<Sample>,
}

/// Integrates the world as the replay advances.
pub(crate) struct Recorder {
    span: u64,
    last: u64,
    half_life_s: f64,
    held_gpus: f64,
    busy_gpus: f64,
    busy_cost_per_s: f64,
    total_cost_per_s: f64,
    allocated_gpu_s: f64,
    busy_gpu_s: f64,
    busy_cost: f64,
    tenant_gpu_s: Vec<f64>,
    realtime_wanted_s: f64,
    realtime_served_s: f64,
    completed_gpu_s: f64,
    completed_by_class: Vec<f64>,
    completed: usize,
    services: Vec<ServiceRec>,
    wasted_gpu_s: f64,
    preemptions: usize,
    requeued_by_node_loss: usize,
    cycles: usize,
    decisions: usize,
    refused: usize,
    failures: usize,
    cycle_wall: Duration,
    series: Vec<Sample>,
    /// (free GPUs, fragmented GPUs) at each sample with GPU work waiting.
    free_when_waiting: Vec<(f64, f64)>,
}

impl Recorder {
    pub fn new(world: &World, span: u64, half_life_hours: f64) -> Recorder {
        Recorder {
            span,
            last: 0,
            half_life_s: half_life_hours.max(1e-3) * 3600.0,
            held_gpus: 0.0,
            busy_gpus: 0.0,
            busy_cost_per_s: 0.0,
            total_cost_per_s: world.gpus.iter().map(|g| g.cost_per_s).sum(),
            allocated_gpu_s: 0.0,
            busy_gpu_s: 0.0,
            busy_cost: 0.0,
            tenant_gpu_s: vec![0.0; world.tenants.len()],
            realtime_wanted_s: 0.0,
            realtime_served_s: 0.0,
            completed_gpu_s: 0.0,
            completed_by_class: vec![0.0; WorkloadClass::ALL.len()],
            completed: 0,
            services: world.services.iter().map(|_| ServiceRec::default()).collect(),
            wasted_gpu_s: 0.0,
            preemptions: 0,
            requeued_by_node_loss: 0,
            cycles: 0,
            decisions: 0,
            refused: 0,
            failures: 0,
            cycle_wall: Duration::ZERO,
            series: Vec::new(),
            free_when_waiting: Vec::new(),
        }
    }

    /// Integrates from the last event to `t` (within the span) and decays the tenants' usage.
    pub fn advance(&mut self, world: &mut World, t: u64) {
        if t <= self.last {
            return;
        }
        let dt = (t - self.last) as f64;
        let in_span = (t.min(self.span).saturating_sub(self.last.min(self.span))) as f64;
        let (service_busy, service_cost) = service_busy(world);
        self.allocated_gpu_s += self.held_gpus * in_span;
        self.busy_gpu_s += (self.busy_gpus + service_busy) * in_span;
        self.busy_cost += (self.busy_cost_per_s + service_cost) * in_span;
        for (s, acc) in self.services.iter_mut().enumerate() {
            let service = &world.services[s];
            let (gpu, cpu, _) = replicas(world, s);
            acc.peak_gpu = acc.peak_gpu.max(gpu);
            acc.peak_cpu = acc.peak_cpu.max(cpu);
            acc.gpu_replica_s += f64::from(gpu) * in_span;
            acc.cpu_replica_s += f64::from(cpu) * in_span;
            if service.started && !service.ended && in_span > 0.0 {
                let capacity = world.serving_capacity(s);
                let demand = service.demand;
                acc.live_s += in_span;
                acc.demand += demand * in_span;
                acc.served += demand.min(capacity) * in_span;
                if capacity + 1e-9 >= demand {
                    acc.met_s += in_span;
                }
            }
        }
        let decay = 0.5f64.powf(dt / self.half_life_s);
        for (i, tenant) in world.tenants.iter_mut().enumerate() {
            let held = f64::from(tenant.held_milli) / 1000.0;
            self.tenant_gpu_s[i] += held * in_span;
            tenant.decayed_gpu_hours = tenant.decayed_gpu_hours * decay + held * dt / 3600.0;
        }
        self.last = t;
    }

    /// A job was granted `granted` thousandths of `gpu` (1000: all of it) and keeps `busy`
    /// thousandths of it busy (its `gpu_milli`; no more than it holds).
    pub fn placed(&mut self, gpu: &Gpu, granted: u32, busy: u32) {
        self.change(gpu, granted, busy, 1.0);
    }

    pub fn released(&mut self, gpu: &Gpu, granted: u32, busy: u32) {
        self.change(gpu, granted, busy, -1.0);
    }

    fn change(&mut self, gpu: &Gpu, granted: u32, busy: u32, sign: f64) {
        let held = f64::from(granted) / 1000.0;
        let busy = f64::from(busy.min(granted)) / 1000.0;
        self.held_gpus += sign * held * gpu.capacity;
        self.busy_gpus += sign * busy * gpu.capacity;
        self.busy_cost_per_s += sign * busy * gpu.cost_per_s;
    }

    /// An attempt stops running at `t` (ended, stopped, lost): real-time service time is counted.
    pub fn ran(&mut self, job: &Job, t: u64) {
        if job.is_realtime_demand() {
            let end = t.min(self.span);
            self.realtime_served_s += end.saturating_sub(job.since.min(end)) as f64;
        }
    }

    pub fn completed(&mut self, job: &Job) {
        if job.spec.class != WorkloadClass::RealtimeInference && job.replica.is_none() {
            self.completed += 1;
            let gpu_s = gpu_demand(job) * job.spec.duration_s as f64;
            self.completed_gpu_s += gpu_s;
            if let Some(c) = WorkloadClass::ALL.iter().position(|&c| c == job.spec.class) {
                self.completed_by_class[c] += gpu_s;
            }
        }
    }

    /// A workload is done (or the replay ends): its real-time demand in the window is counted.
    pub fn finished(&mut self, job: &Job) {
        if job.is_realtime_demand() {
            let end = (job.spec.arrive_s + job.spec.duration_s).min(self.span);
            self.realtime_wanted_s += end.saturating_sub(job.spec.arrive_s.min(end)) as f64;
        }
    }

    pub fn wasted(&mut self, job: &Job, ran: u64) {
        self.wasted_gpu_s += gpu_demand(job) * ran as f64;
    }

    pub fn lost_to_node(&mut self) {
        self.requeued_by_node_loss += 1;
    }

    pub fn preempted(&mut self) {
        self.preemptions += 1;
    }

    pub fn cycle(&mut self, accepted: usize, refused: usize, failures: usize, wall: Duration) {
        self.cycles += 1;
        self.decisions += accepted + refused;
        self.refused += refused;
        self.failures += failures;
        self.cycle_wall += wall;
    }

    /// Samples the series and the fragmentation: free GPU capacity (thousandths of GPUs, summed)
    /// that no waiting GPU workload could use where it is — a GPU's free share too small for every
    /// waiting share, a partly held GPU for whole-GPU work, a node without the CPU or the GPUs a
    /// waiting shape needs. MIG instances count by their share of a GPU.
    pub fn sample(&mut self, world: &World) {
        // The distinct shapes of waiting GPU work.
        let mut shapes: Vec<Shape> = world
            .active
            .iter()
            .map(|&j| &world.jobs[j])
            .filter(|j| j.phase == Phase::Waiting && j.spec.gpus > 0)
            .map(|j| Shape {
                gpus: j.spec.gpus,
                milli: if j.spec.gpus == 1 && j.spec.mig_profile.is_none() { j.spec.gpu_milli } else { 1000 },
                models: j.spec.gpu_models.join(","),
                gpu_memory_mb: j.spec.gpu_memory_mb,
                mig_profile: j.spec.mig_profile.clone().unwrap_or_default().to_ascii_lowercase(),
                cpu_millis: j.spec.cpu_millis,
                memory_mb: j.spec.memory_mb,
            })
            .collect();
        shapes.sort_by(|a, b| a.key().cmp(&b.key()));
        shapes.dedup_by(|a, b| a.key() == b.key());
        let mut fragmented = 0.0;
        let mut free = 0.0;
        if !shapes.is_empty() {
            for node in world.nodes.iter().filter(|n| n.state == NodeState::Ready && n.gpu_count > 0) {
                let gpus = &world.gpus[node.gpu_first..node.gpu_first + node.gpu_count];
                for (i, gpu) in gpus.iter().enumerate() {
                    let left = gpu.free_milli();
                    if left == 0 {
                        continue;
                    }
                    let capacity = f64::from(left) / 1000.0 * gpu.capacity;
                    free += capacity;
                    let usable = shapes.iter().any(|shape| shape.can_use(node, gpus, i));
                    if !usable {
                        fragmented += capacity;
                    }
                }
            }
        }
        let pending = world.active.iter().filter(|&&j| world.jobs[j].phase == Phase::Waiting).count();
        let busy = self.busy_gpus + service_busy(world).0;
        for (s, acc) in self.services.iter_mut().enumerate() {
            let (gpu_replicas, cpu_replicas, pending) = replicas(world, s);
            acc.series.push(ServiceSample {
                t_s: world.now,
                demand: world.services[s].demand,
                capacity: world.serving_capacity(s),
                gpu_replicas,
                cpu_replicas,
                pending,
            });
        }
        self.series.push(Sample {
            t_s: world.now,
            allocated_gpus: self.held_gpus,
            busy_gpus: busy,
            idle_gpus: world.gpus.iter().map(|g| g.capacity).sum::<f64>() - busy,
            pending,
            fragmented_gpus: fragmented,
        });
        if !shapes.is_empty() {
            self.free_when_waiting.push((free, fragmented));
        }
    }
    pub fn finish(mut self, world: &World, policy: &str, seed: u64, wall: Duration) -> Scores {
        // Real-time demand still running at the end (its deadline past the stop) counts to the span.
        for job in world.active.iter().map(|&j| &world.jobs[j]) {
            if job.is_realtime_demand() {
                if matches!(job.phase, Phase::Running | Phase::Stopping) {
                    self.ran(job, self.last);
                }
                self.finished(job);
            }
        }
        for job in
            world.jobs.iter().filter(|j| j.phase == Phase::NotYet && j.spec.class == WorkloadClass::RealtimeInference)
        {
            self.finished(job);
        }
        let span_h = self.span as f64 / 3600.0;
        // Physical GPUs: a MIG instance counts as its share of one.
        let gpus: f64 = world.gpus.iter().map(|g| g.capacity).sum();
        let owned = gpus * span_h;
        let allocated = self.allocated_gpu_s / 3600.0;
        let busy = self.busy_gpu_s / 3600.0;
        let delays = |class: WorkloadClass| {
            let of_class =
                world.jobs.iter().filter(|j| j.spec.class == class && j.phase != Phase::NotYet && j.replica.is_none());
            let (started, never): (Vec<&Job>, Vec<&Job>) = of_class.partition(|j| j.first_start.is_some());
            let values =
                started.iter().map(|j| j.first_start.unwrap_or(0).saturating_sub(j.spec.arrive_s) as f64).collect();
            (Percentiles::of(values), never.len())
        };
        let queue_delay = WorkloadClass::ALL
            .iter()
            .filter(|&&c| world.jobs.iter().any(|j| j.spec.class == c && j.replica.is_none()))
            .map(|&class| {
                let (start_delay_s, never_started) = delays(class);
                ClassDelay { class, start_delay_s, never_started }
            })
            .collect();
        let mut demand = vec![0.0; world.tenants.len()];
        for j in &world.jobs {
            let start = j.spec.arrive_s.min(self.span);
            // A replica was wanted from its creation until it ended (or the window closed).
            let until =
                if j.replica.is_some() { j.ended_at.unwrap_or(self.span) } else { j.spec.arrive_s + j.spec.duration_s };
            let end = until.min(self.span).max(start);
            demand[j.tenant] += f64::from(j.spec.gpus) * (end - start) as f64;
        }
        let tenants: Vec<TenantScore> = world
            .tenants
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mean_gpus = self.tenant_gpu_s[i] / self.span as f64;
                let mean_demand_gpus = demand[i] / self.span as f64;
                let due = mean_demand_gpus.min(f64::from(t.guaranteed_gpus));
                TenantScore {
                    name: t.name.clone(),
                    guaranteed_gpus: t.guaranteed_gpus,
                    mean_gpus,
                    mean_demand_gpus,
                    guarantee_met: if due > 0.0 { (mean_gpus / due).min(1.0) } else { 1.0 },
                }
            })
            .collect();
        let met: Vec<f64> = tenants
            .iter()
            .filter(|t| t.mean_demand_gpus > 0.0 && t.guaranteed_gpus > 0)
            .map(|t| t.guarantee_met)
            .collect();
        let fairness = if met.is_empty() {
            1.0
        } else {
            let sum: f64 = met.iter().sum();
            let squares: f64 = met.iter().map(|x| x * x).sum();
            if squares > 0.0 { sum * sum / (met.len() as f64 * squares) } else { 0.0 }
        };
        let waiting: Vec<&(f64, f64)> = self.free_when_waiting.iter().filter(|(free, _)| *free > 0.0).collect();
        let fragmented_share_of_free = if waiting.is_empty() {
            0.0
        } else {
            waiting.iter().map(|(free, frag)| frag / free).sum::<f64>() / waiting.len() as f64
        };
        let fragmented_gpus_mean = if self.series.is_empty() {
            0.0
        } else {
            self.series.iter().map(|s| s.fragmented_gpus).sum::<f64>() / self.series.len() as f64
        };
        let unfinished = world
            .jobs
            .iter()
            .filter(|j| {
                j.phase != Phase::Done && j.spec.class != WorkloadClass::RealtimeInference && j.replica.is_none()
            })
            .count();
        // The real-time services together, each weighted by its live time.
        let (met, live) = self
            .services
            .iter()
            .enumerate()
            .filter(|(s, _)| world.services[*s].spec.class == WorkloadClass::RealtimeInference)
            .fold((0.0, 0.0), |(met, live), (_, acc)| (met + acc.met_s, live + acc.live_s));
        let service_slo_attainment = if live > 0.0 { met / live } else { 1.0 };
        let services: Vec<ServiceScore> = std::mem::take(&mut self.services)
            .into_iter()
            .enumerate()
            .map(|(s, acc)| {
                let service = &world.services[s];
                let (peak_demand, _) = service.spec.peak_and_mean();
                let delays = world
                    .jobs
                    .iter()
                    .filter(|j| j.replica.is_some_and(|r| r.service == s))
                    .filter_map(|j| j.first_start.map(|f| f.saturating_sub(j.spec.arrive_s) as f64))
                    .collect();
                ServiceScore {
                    name: service.spec.name.clone(),
                    class: service.spec.class,
                    slo_attainment: if acc.live_s > 0.0 { acc.met_s / acc.live_s } else { 1.0 },
                    demand_served: if acc.demand > 0.0 { acc.served / acc.demand } else { 1.0 },
                    mean_demand: if acc.live_s > 0.0 { acc.demand / acc.live_s } else { 0.0 },
                    peak_demand,
                    gpu_replica_hours: acc.gpu_replica_s / 3600.0,
                    cpu_replica_hours: acc.cpu_replica_s / 3600.0,
                    peak_gpu_replicas: acc.peak_gpu,
                    peak_cpu_replicas: acc.peak_cpu,
                    replicas_started: service.created.iter().sum(),
                    replicas_drained: service.drained,
                    start_delay_s: Percentiles::of(delays),
                    series: acc.series,
                }
            })
            .collect();
        let idle_cost = self.total_cost_per_s * self.span as f64 - self.busy_cost;
        let wall_s = wall.as_secs_f64();
        Scores {
            policy: policy.to_owned(),
            mode: String::new(),
            seed,
            span_s: self.span,
            gpus: gpus.round() as usize,
            owned_gpu_hours: owned,
            allocated_gpu_hours: allocated,
            busy_gpu_hours: busy,
            allocated_share: if owned > 0.0 { allocated / owned } else { 0.0 },
            busy_share: if owned > 0.0 { busy / owned } else { 0.0 },
            idle_gpu_hours: owned - busy,
            idle_cost,
            held_idle_gpu_hours: allocated - busy,
            fragmented_gpus_mean,
            fragmented_share_of_free,
            realtime_slo_attainment: if self.realtime_wanted_s > 0.0 {
                (self.realtime_served_s / self.realtime_wanted_s).min(1.0)
            } else {
                1.0
            },
            realtime_start_delay_s: delays(WorkloadClass::RealtimeInference).0,
            queue_delay,
            completed_gpu_hours: self.completed_gpu_s / 3600.0,
            completed_by_class: WorkloadClass::ALL
                .iter()
                .zip(&self.completed_by_class)
                .filter(|(_, h)| **h > 0.0)
                .map(|(&class, h)| ClassHours { class, gpu_hours: h / 3600.0 })
                .collect(),
            completed_workloads: self.completed,
            unfinished_workloads: unfinished,
            preemptions: self.preemptions,
            wasted_gpu_hours: self.wasted_gpu_s / 3600.0,
            requeued_by_node_loss: self.requeued_by_node_loss,
            tenants,
            gpu_replica_hours: services.iter().map(|s| s.gpu_replica_hours).sum(),
            cpu_replica_hours: services.iter().map(|s| s.cpu_replica_hours).sum(),
            services,
            service_slo_attainment,
            fairness,
            cycles: self.cycles,
            decisions: self.decisions,
            refused: self.refused,
            policy_failures: self.failures,
            wall_s,
            cycle_wall_s: self.cycle_wall.as_secs_f64(),
            decisions_per_s: if wall_s > 0.0 { self.decisions as f64 / wall_s } else { 0.0 },
            series: self.series,
        }
    }
}

/// What the recorder integrates for one service.
#[derive(Default)]
struct ServiceRec {
    live_s: f64,
    met_s: f64,
    /// Load × seconds wanted, and carried.
    demand: f64,
    served: f64,
    gpu_replica_s: f64,
    cpu_replica_s: f64,
    peak_gpu: u32,
    peak_cpu: u32,
    series: Vec<ServiceSample>,
}

/// A service's replicas now: placed GPU and CPU replicas (holding their resources, draining ones
/// included), and waiting ones.
fn replicas(world: &World, s: usize) -> (u32, u32, u32) {
    let (mut gpu, mut cpu, mut pending) = (0, 0, 0);
    for &j in &world.services[s].replicas {
        let job = &world.jobs[j];
        match (job.phase, job.replica.map(|r| r.variant)) {
            (Phase::Waiting, _) => pending += 1,
            (Phase::Running | Phase::Stopping, Some(ReplicaVariant::Cpu)) => cpu += 1,
            (Phase::Running | Phase::Stopping, _) => gpu += 1,
            _ => {}
        }
    }
    (gpu, cpu, pending)
}

/// GPUs the services' serving replicas keep busy now, and what that busy time costs a second: each
/// serving replica's GPUs busy for the share of its capacity its service's demand takes.
fn service_busy(world: &World) -> (f64, f64) {
    let (mut gpus, mut cost) = (0.0, 0.0);
    for (s, service) in world.services.iter().enumerate() {
        if service.replicas.is_empty() {
            continue;
        }
        let utilisation = world.service_utilisation(s);
        if utilisation <= 0.0 {
            continue;
        }
        for &j in service.replicas.iter().filter(|&&j| world.serves(j)) {
            let job = &world.jobs[j];
            let share = f64::from(job.spec.gpu_milli) / 1000.0 * utilisation;
            for &g in &job.gpus {
                gpus += share * world.gpus[g].capacity;
                cost += share * world.gpus[g].cost_per_s;
            }
        }
    }
    (gpus, cost)
}

/// GPUs a job asks for, counting a share as its fraction.
fn gpu_demand(job: &Job) -> f64 {
    if job.spec.gpus == 1 && job.spec.gpu_milli < 1000 {
        f64::from(job.spec.gpu_milli) / 1000.0
    } else {
        f64::from(job.spec.gpus)
    }
}

/// One shape of waiting GPU work, for the fragmentation sample.
struct Shape {
    gpus: u32,
    /// Thousandths of one GPU for a share; 1000 otherwise.
    milli: u32,
    models: String,
    gpu_memory_mb: u64,
    mig_profile: String,
    cpu_millis: u32,
    memory_mb: u64,
}

impl Shape {
    fn key(&self) -> (u32, u32, &str, u64, &str, u32, u64) {
        (self.gpus, self.milli, &self.models, self.gpu_memory_mb, &self.mig_profile, self.cpu_millis, self.memory_mb)
    }

    /// Whether this shape could use GPU `i` of `node` (its GPUs `gpus`) as the fleet is now,
    /// by the core's rules: a share on a shared GPU with its thousandths and slice free, anything
    /// else on fully free devices of the right kind, with the node's CPU and memory.
    fn can_use(&self, node: &crate::engine::Node, gpus: &[Gpu], i: usize) -> bool {
        if node.cpu_free < self.cpu_millis || node.memory_free < self.memory_mb {
            return false;
        }
        let kind_fits = |g: &Gpu| {
            airtime_policy_sdk::model_allowed(&self.models, &g.model)
                && (g.mig_profile.is_empty() == self.mig_profile.is_empty())
                && (self.mig_profile.is_empty() || g.mig_profile.eq_ignore_ascii_case(&self.mig_profile))
        };
        let gpu = &gpus[i];
        if !kind_fits(gpu) {
            return false;
        }
        if self.milli < 1000 && gpu.sharing.is_shared() {
            let memory_left = gpu.memory_mb.saturating_sub(gpu.reserved_mb());
            return gpu.free_milli() >= self.milli && memory_left >= self.gpu_memory_mb;
        }
        let whole = |g: &Gpu| g.holders.is_empty() && kind_fits(g) && g.memory_mb >= self.gpu_memory_mb;
        whole(gpu) && gpus.iter().filter(|g| whole(g)).count() >= self.gpus as usize
    }
}
