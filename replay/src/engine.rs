//! The replay: a trace on a fleet in virtual time, every scheduling cycle decided by the production
//! core (`airtime_scheduler::cycle`: both policy levels, the host's checks, the preemption rules,
//! the priority settings) with real Wasm policies.
//!
//! Events drive cycles as they drive the control plane's loop: an arrival, an end, a preempted
//! workload stopping after its grace period, a node lost or back. A cycle runs when something
//! changed and work is pending, no sooner than `min_cycle_interval_s` after the last; while work
//! stays pending a retry cycle follows `retry_s` later (doubling, up to an hour, while cycles change
//! nothing — the control plane's tick re-decides every second, which in virtual time would only
//! repeat the same answer).
//!
//! What the engine models, stated: a placed workload starts at once (no image pull or agent
//! latency); a preempted workload holds its GPUs for the grace period, then requeues — with its
//! progress when checkpointable (it checkpointed on the signal), from the start otherwise (the run
//! is counted as wasted); a lost node's work requeues the same way, its running attempt's progress
//! lost unless checkpointable. A GPU a workload holds is busy in proportion to its `gpu_milli`
//! (the trace's fraction: a fractional workload holds a whole GPU until GPU sharing lands).
//!
//! **Elastic inference services** (`crate::services`): each service reports its demand every
//! `demand.every_s` seconds, and each report is a reason for a cycle, so scaling happens with no
//! arrival at all. Every cycle is the core's one cycle (`airtime_scheduler::cycle::run`, as the
//! control plane's loop runs it): the core's autoscaler plans the live services, the replay queues
//! the replicas it starts, cancels the pending replicas it drops and drains the placed ones (they
//! stop after the grace period and end: they are not requeued), the core keeps
//! `services::burst_reserve` GPUs free (the fleet file's `burst_reserve_gpus` the floor), then
//! decides as above on the fleet with the new replicas in it. A placed replica serves from `startup_s` after it
//! starts; its GPUs are busy in proportion to the share of its capacity the demand takes (the load
//! spread over the serving replicas by their capacity).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, HashSet, VecDeque};
use std::ops::ControlFlow;
use std::time::Instant;

use airtime_protocol::sharing::{GpuSharing, WHOLE_GPU_MILLI};
use airtime_protocol::workload::{NodeState, WorkloadClass, WorkloadState};
use airtime_scheduler::check::Proposal;
use airtime_scheduler::cycle::{self, Composed, Levels, Turn};
use airtime_scheduler::fleet::{
    ARRIVALS_WINDOW_DAYS, ArrivalEntry, FleetView, GpuEntry, Holder, NodeEntry, ReplicaOf, TenantEntry, WorkloadEntry,
};
use airtime_scheduler::services::ScalePlan;
use anyhow::{Context, bail};
use chrono::{DateTime, Utc};
use rand::{Rng, SeedableRng};
use uuid::Uuid;

use crate::format::{FleetSpec, Trace, TraceWorkload};
use crate::policy::{Catalog, SimPolicy};
use crate::score::{Recorder, Scores};
use crate::services::Service;

/// How the replay runs.
#[derive(Debug, Clone)]
pub struct Config {
    pub min_cycle_interval_s: u64,
    pub retry_s: u64,
    /// Seconds between samples of the time series (0: the window / 240).
    pub sample_s: u64,
    /// Each workload's arrival is delayed by a uniform `0..jitter_s` drawn from the seed.
    pub jitter_s: u64,
    pub seed: u64,
    /// The scored window, from 0 (0: up to the trace's last arrival).
    pub window_s: u64,
    /// Stop at this virtual time (0: the window, then as long again — at least the longest workload,
    /// up to a day — for the queue to drain).
    pub until_s: u64,
    /// Half-life of the decayed usage fair-share weighs (the control plane's default: 24 h).
    pub usage_half_life_hours: f64,
    /// The shapes of work submitted before the replay starts, as the control plane would have
    /// counted them over the week before (ABI 1.9's arrivals): the fill experiment gives its pod
    /// list here, as Weng et al. give FGD the typical pods of the whole workload. Arrivals during
    /// the replay are added as they come and leave the count after a week.
    pub history: Vec<ArrivalEntry>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            min_cycle_interval_s: 5,
            retry_s: 60,
            sample_s: 0,
            jitter_s: 0,
            seed: 1,
            window_s: 0,
            until_s: 0,
            usage_half_life_hours: 24.0,
            history: Vec::new(),
        }
    }
}

/// What the control plane's arrivals count holds: the shapes of work submitted in the last
/// [`ARRIVALS_WINDOW_DAYS`] days, with the replay's prior history.
#[derive(Debug, Clone, Default)]
pub struct Arrivals {
    counts: BTreeMap<ArrivalKey, u32>,
    /// Arrivals during the replay, oldest first, to leave the count a week on.
    recent: VecDeque<(u64, ArrivalKey)>,
    /// [`entries`](Self::entries) as of the last change: cycles between two arrivals share it.
    listed: std::cell::OnceCell<std::sync::Arc<Vec<ArrivalEntry>>>,
}

/// (thousandths of each GPU, GPUs, host CPU, allowed models).
type ArrivalKey = (u32, u32, u32, String);

/// A workload's shape as the arrivals count it (as the control plane's `read_arrivals` does):
/// whole GPUs as 1000 thousandths each, none without GPUs; `None` for a MIG request.
fn arrival_key(spec: &TraceWorkload) -> Option<ArrivalKey> {
    if spec.mig_profile.is_some() {
        return None;
    }
    let milli = match spec.gpus {
        0 => 0,
        1 => spec.gpu_milli.min(WHOLE_GPU_MILLI),
        _ => WHOLE_GPU_MILLI,
    };
    Some((milli, spec.gpus, spec.cpu_millis, spec.gpu_models.join(",")))
}

impl Arrivals {
    fn new(history: &[ArrivalEntry]) -> Arrivals {
        let mut counts = BTreeMap::new();
        for a in history {
            let slot: &mut u32 =
                counts.entry((a.gpu_milli, a.gpu_count, a.cpu_millis, a.gpu_models.clone())).or_default();
            *slot = slot.saturating_add(a.count);
        }
        Arrivals { counts, recent: VecDeque::new(), listed: std::cell::OnceCell::new() }
    }

    /// A workload of `spec` arrived at `now`; what arrived more than the window ago leaves.
    fn arrive(&mut self, now: u64, spec: &TraceWorkload) {
        let window = u64::from(ARRIVALS_WINDOW_DAYS) * 86_400;
        while let Some((at, _)) = self.recent.front()
            && at + window <= now
        {
            self.listed.take();
            if let Some((_, key)) = self.recent.pop_front()
                && let Some(n) = self.counts.get_mut(&key)
            {
                *n -= 1;
                if *n == 0 {
                    self.counts.remove(&key);
                }
            }
        }
        let Some(key) = arrival_key(spec) else { return };
        self.listed.take();
        *self.counts.entry(key.clone()).or_default() += 1;
        self.recent.push_back((now, key));
    }

    /// The count of `specs` as arrivals: what `fill` gives as the week before its experiment.
    pub fn history_of<'t>(specs: impl IntoIterator<Item = &'t TraceWorkload>) -> Vec<ArrivalEntry> {
        let mut arrivals = Arrivals::default();
        for key in specs.into_iter().filter_map(arrival_key) {
            *arrivals.counts.entry(key).or_default() += 1;
        }
        arrivals.list().as_ref().clone()
    }

    /// The count, most frequent first (listed again only after it changed).
    fn entries(&self) -> std::sync::Arc<Vec<ArrivalEntry>> {
        std::sync::Arc::clone(self.listed.get_or_init(|| self.list()))
    }

    fn list(&self) -> std::sync::Arc<Vec<ArrivalEntry>> {
        let mut out: Vec<ArrivalEntry> = self
            .counts
            .iter()
            .map(|((gpu_milli, gpu_count, cpu_millis, models), &count)| ArrivalEntry {
                gpu_milli: *gpu_milli,
                gpu_count: *gpu_count,
                cpu_millis: *cpu_millis,
                gpu_models: models.clone(),
                count,
            })
            .collect();
        out.sort_by_key(|a| std::cmp::Reverse(a.count));
        std::sync::Arc::new(out)
    }
}

/// Virtual time 0 is this instant (a Monday, midnight UTC), so the night window and time of day
/// in the priority settings apply as they would.
pub fn epoch() -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp(1_767_571_200, 0).unwrap_or_default() // 2026-01-05T00:00:00Z
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Arrive(usize),
    /// A realtime workload's demand ends, whatever it is doing.
    Deadline(usize),
    /// A running attempt finishes its work.
    End {
        job: usize,
        attempt: u32,
    },
    /// A preempted attempt's grace period is over: it stops.
    Stopped {
        job: usize,
        attempt: u32,
    },
    NodeDown {
        node: usize,
        for_s: Option<u64>,
    },
    NodeUp(usize),
    /// A service's replicas report its demand: the `n`th value of its series.
    Report {
        service: usize,
        n: usize,
    },
    /// A service's demand has ended: it is deleted.
    ServiceEnd(usize),
    /// A placed replica has loaded its model and serves.
    Ready {
        job: usize,
        attempt: u32,
    },
    Cycle,
    Sample,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    NotYet,
    Waiting,
    Running,
    Stopping,
    Done,
}

pub struct Job {
    pub spec: TraceWorkload,
    pub tenant: usize,
    id: Uuid,
    id_text: std::sync::Arc<str>,
    /// The trace's id, the workload's name in the fleet model (shared with every cycle's model).
    name: std::sync::Arc<str>,
    pub phase: Phase,
    pub node: Option<usize>,
    pub gpus: Vec<usize>,
    /// When the current attempt started.
    pub since: u64,
    /// Compute still needed (non-realtime).
    pub remaining_s: u64,
    pub first_start: Option<u64>,
    attempt: u32,
    preemptions: Vec<u64>,
    pub reason: Option<std::sync::Arc<str>>,
    /// The service (index in the world's services) it is a replica of, and its variant.
    pub replica: Option<ReplicaOf>,
    /// A replica the autoscaler drained: it ends when it stops.
    pub draining: bool,
    /// When a replica ended (drained, or cancelled before it was placed).
    pub ended_at: Option<u64>,
}

impl Job {
    fn new(spec: TraceWorkload, tenant: usize, index: usize) -> Job {
        let id = Uuid::from_u128(index as u128 + 1);
        Job {
            remaining_s: spec.duration_s,
            name: std::sync::Arc::from(spec.id.as_str()),
            spec,
            tenant,
            id,
            id_text: id.to_string().into(),
            phase: Phase::NotYet,
            node: None,
            gpus: Vec::new(),
            since: 0,
            first_start: None,
            attempt: 0,
            preemptions: Vec::new(),
            reason: None,
            replica: None,
            draining: false,
            ended_at: None,
        }
    }

    /// Thousandths of its GPUs a job keeps busy by itself: its `gpu_milli`; none for a replica,
    /// whose busy share follows its service's demand.
    pub fn base_busy_milli(&self) -> u32 {
        if self.replica.is_some() { 0 } else { self.spec.gpu_milli }
    }

    /// Whether it is a workload of the trace whose class is real-time inference (a service's
    /// replicas are scored with their service instead).
    pub fn is_realtime_demand(&self) -> bool {
        self.replica.is_none() && self.spec.class == WorkloadClass::RealtimeInference
    }
}

pub struct Node {
    pub name: std::sync::Arc<str>,
    pub state: NodeState,
    pub cpu_millis: u32,
    pub memory_mb: u64,
    pub cpu_free: u32,
    pub memory_free: u64,
    pub cost_per_hour: f64,
    pub gpu_first: usize,
    pub gpu_count: usize,
    id: Uuid,
}

pub struct Gpu {
    pub node: usize,
    index: u32,
    pub model: std::sync::Arc<str>,
    pub memory_mb: u64,
    /// The jobs holding it: one holding it whole, or several sharing it.
    pub holders: Vec<Share>,
    pub sharing: GpuSharing,
    /// A MIG instance's profile; empty for a whole GPU.
    pub mig_profile: String,
    /// How much of a physical GPU it is: 1, or a MIG instance's share of the compute slices.
    pub capacity: f64,
    /// Dollars per second this GPU costs (its node's price shared by its GPUs).
    pub cost_per_s: f64,
    id: Uuid,
}

/// A job's hold on a GPU: the thousandths of the device it occupies (1000: all of it), what it is
/// billed in thousandths of a physical GPU (a MIG instance is its share of the GPU), and its memory
/// slice.
#[derive(Debug, Clone, Copy)]
pub struct Share {
    pub job: usize,
    pub milli: u32,
    pub billed: u32,
    pub memory_mb: u64,
}

impl Gpu {
    /// Thousandths no job holds.
    pub fn free_milli(&self) -> u32 {
        WHOLE_GPU_MILLI.saturating_sub(self.holders.iter().map(|h| h.milli).sum())
    }

    /// Memory its shares have reserved, MiB.
    pub fn reserved_mb(&self) -> u64 {
        self.holders.iter().map(|h| h.memory_mb).sum()
    }
}

pub struct Tenant {
    pub name: String,
    pub guaranteed_gpus: u32,
    weight: u32,
    tier: i32,
    may_borrow: bool,
    gpu_limit: Option<u32>,
    /// Thousandths of a GPU its jobs hold.
    pub held_milli: u32,
    pub decayed_gpu_hours: f64,
    id: Uuid,
}

/// The simulated world.
pub struct World {
    pub now: u64,
    pub tenants: Vec<Tenant>,
    pub nodes: Vec<Node>,
    pub gpus: Vec<Gpu>,
    pub jobs: Vec<Job>,
    /// Jobs waiting, running or stopping, by index.
    pub active: BTreeSet<usize>,
    pub settings: airtime_protocol::settings::PrioritySettings,
    pub services: Vec<Service>,
    /// The burst reserve the policies kept the last cycle: the settings' floor or the services' need.
    pub burst_reserve_gpus: i32,
    /// The shapes of work submitted in the last week.
    pub arrivals: Arrivals,
}

impl World {
    pub fn build(fleet: &FleetSpec, trace: &Trace, config: &Config) -> anyhow::Result<World> {
        let tenants: Vec<Tenant> = fleet
            .tenants
            .iter()
            .map(|t| Tenant {
                name: t.name.clone(),
                guaranteed_gpus: t.guaranteed_gpus,
                weight: t.weight,
                tier: t.tier,
                may_borrow: t.may_borrow,
                gpu_limit: t.gpu_limit,
                held_milli: 0,
                decayed_gpu_hours: 0.0,
                id: Uuid::new_v4(),
            })
            .collect();
        let mut nodes = Vec::new();
        let mut gpus = Vec::new();
        for kind in &fleet.node_types {
            for n in 0..kind.count {
                let node = nodes.len();
                nodes.push(Node {
                    name: format!("{}-{n}", kind.name).into(),
                    state: NodeState::Ready,
                    cpu_millis: kind.cpu_millis,
                    memory_mb: kind.memory_mb,
                    cpu_free: kind.cpu_millis,
                    memory_free: kind.memory_mb,
                    cost_per_hour: kind.cost_per_hour,
                    gpu_first: gpus.len(),
                    gpu_count: kind.gpus as usize,
                    id: Uuid::new_v4(),
                });
                // Each GPU, or each of its MIG instances (priced by its share of the compute).
                let devices = kind.devices_per_gpu();
                let slices: u32 = devices.iter().map(|(p, _)| p.as_ref().map_or(7, |p| p.compute_slices())).sum();
                let mut index = 0;
                for _ in 0..kind.gpus {
                    for (profile, memory_mb) in &devices {
                        let share = match profile {
                            Some(p) => f64::from(p.compute_slices()) / f64::from(slices.max(1)),
                            None => 1.0,
                        };
                        gpus.push(Gpu {
                            node,
                            index,
                            model: kind.gpu_model.as_str().into(),
                            memory_mb: *memory_mb,
                            holders: Vec::new(),
                            sharing: kind.gpu_sharing,
                            mig_profile: profile.as_ref().map(|p| p.to_string()).unwrap_or_default(),
                            capacity: share,
                            cost_per_s: kind.cost_per_hour / f64::from(kind.gpus) / 3600.0 * share,
                            id: Uuid::new_v4(),
                        });
                        index += 1;
                    }
                }
                nodes[node].gpu_count = (index) as usize;
            }
        }
        let tenant_index: HashMap<&str, usize> =
            tenants.iter().enumerate().map(|(i, t)| (t.name.as_str(), i)).collect();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(config.seed);
        let mut jobs = Vec::with_capacity(trace.workloads.len());
        let mut ids = HashSet::new();
        for w in &trace.workloads {
            let Some(&tenant) = tenant_index.get(w.tenant.as_str()) else {
                bail!(
                    "workload {}: tenant {} is not in the fleet (it has {})",
                    w.id,
                    w.tenant,
                    fleet.tenants.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
                );
            };
            if !ids.insert(w.id.as_str()) {
                bail!("workload {} appears twice in the traces", w.id);
            }
            let mut spec = w.clone();
            if config.jitter_s > 0 {
                spec.arrive_s += rng.random_range(0..config.jitter_s);
            }
            let index = jobs.len();
            jobs.push(Job::new(spec, tenant, index));
        }
        let mut services = Vec::new();
        let mut names = HashSet::new();
        for s in &trace.services {
            let Some(&tenant) = tenant_index.get(s.tenant.as_str()) else {
                bail!("service {}: tenant {} is not in the fleet", s.name, s.tenant);
            };
            if !names.insert(s.name.as_str()) {
                bail!("service {} appears twice in the traces", s.name);
            }
            let index = services.len();
            services.push(Service::new(s.clone(), tenant, index));
        }
        Ok(World {
            now: 0,
            tenants,
            nodes,
            gpus,
            jobs,
            active: BTreeSet::new(),
            burst_reserve_gpus: fleet.settings.burst_reserve_gpus,
            settings: fleet.settings.clone(),
            services,
            arrivals: Arrivals::new(&config.history),
        })
    }

    /// The share of its capacity a service's serving replicas are busy with: its demand over
    /// their capacity, at most all of it.
    pub fn service_utilisation(&self, s: usize) -> f64 {
        let capacity = self.serving_capacity(s);
        if capacity <= 0.0 { 0.0 } else { (self.services[s].demand / capacity).min(1.0) }
    }

    /// Whether a replica serves now: placed, running and past its model's loading time.
    pub fn serves(&self, j: usize) -> bool {
        let job = &self.jobs[j];
        let startup = job.replica.map_or(0, |r| u64::from(self.services[r.service].spec.startup_s));
        job.phase == Phase::Running && job.since + startup <= self.now
    }

    /// The load a service's serving replicas carry at their latency target.
    pub fn serving_capacity(&self, s: usize) -> f64 {
        let service = &self.services[s];
        service
            .replicas
            .iter()
            .filter(|&&j| self.serves(j))
            .filter_map(|&j| self.jobs[j].replica)
            .map(|r| service.capacity_of(r.variant))
            .fold(0.0, |a, b| a + b)
    }

    /// Thousandths of each of its GPUs a job keeps busy now.
    fn busy_milli(&self, j: usize) -> u32 {
        let job = &self.jobs[j];
        match job.replica {
            Some(r) if self.serves(j) => {
                (f64::from(job.spec.gpu_milli) * self.service_utilisation(r.service)).round() as u32
            }
            Some(_) => 0,
            None => job.spec.gpu_milli,
        }
    }

    fn pending(&self) -> usize {
        self.active.iter().filter(|&&j| self.jobs[j].phase == Phase::Waiting).count()
    }

    /// The fleet as the core reads it this cycle (the settings' burst reserve: the core derives the
    /// services' from it), and the job behind each of its workloads.
    fn view(&self) -> (FleetView, Vec<usize>) {
        let now = epoch() + chrono::Duration::seconds(self.now as i64);
        let at = |s: u64| epoch() + chrono::Duration::seconds(s as i64);
        let order: Vec<usize> = self.active.iter().copied().collect();
        let position: HashMap<usize, usize> = order.iter().enumerate().map(|(i, &j)| (j, i)).collect();
        // The services the autoscaler sees, and where each world service is among them.
        let in_fleet: Vec<usize> = (0..self.services.len()).filter(|&s| self.services[s].in_fleet()).collect();
        let service_pos = |s: usize| in_fleet.iter().position(|&x| x == s);
        let workloads = order
            .iter()
            .map(|&j| {
                let job = &self.jobs[j];
                let s = &job.spec;
                let hour_ago = self.now.saturating_sub(3600);
                WorkloadEntry {
                    id: job.id,
                    id_text: job.id_text.clone(),
                    name: job.name.clone(),
                    tenant: job.tenant,
                    class: s.class,
                    state: match job.phase {
                        Phase::Running => WorkloadState::Running,
                        Phase::Stopping if job.draining => WorkloadState::Cancelling,
                        Phase::Stopping => WorkloadState::Preempting,
                        _ => WorkloadState::Pending,
                    },
                    priority: s.priority,
                    gpu_count: s.gpus,
                    gpu_memory_mb: s.gpu_memory_mb,
                    gpu_models: s.gpu_models.join(","),
                    cpu_millis: s.cpu_millis,
                    memory_mb: s.memory_mb,
                    cpu_capable: s.cpu_capable,
                    preemptible: s.preemptible,
                    checkpointable: s.checkpointable,
                    expected_duration_s: u32::try_from(job.remaining_s).unwrap_or(u32::MAX),
                    submitted_at: at(s.arrive_s),
                    started_at: matches!(job.phase, Phase::Running | Phase::Stopping).then(|| at(job.since)),
                    node: job.node,
                    pending_reason: job.reason.clone(),
                    shortfall: None,
                    preemptions_last_hour: job.preemptions.iter().filter(|&&p| p > hour_ago).count() as u32,
                    gpu_milli: s.gpu_milli,
                    mig_profile: s.mig_profile.clone().unwrap_or_default(),
                    replica_of: job.replica.and_then(|r| {
                        Some(ReplicaOf { service: service_pos(r.service)?, variant: r.variant, ready: r.ready })
                    }),
                    container: false,
                    gang: None,
                }
            })
            .collect();
        let view = FleetView {
            now,
            settings: self.settings.clone(),
            tenants: self
                .tenants
                .iter()
                .map(|t| TenantEntry {
                    id: t.id,
                    name: t.name.clone(),
                    guaranteed_gpus: t.guaranteed_gpus,
                    weight: t.weight,
                    tier: t.tier,
                    may_borrow: t.may_borrow,
                    gpu_limit: t.gpu_limit,
                    running_gpu_milli: t.held_milli,
                    decayed_gpu_hours: t.decayed_gpu_hours,
                })
                .collect(),
            nodes: self
                .nodes
                .iter()
                .map(|n| NodeEntry {
                    id: n.id,
                    name: n.name.clone(),
                    state: n.state,
                    cpu_millis: n.cpu_millis,
                    memory_mb: n.memory_mb,
                    cpu_millis_free: n.cpu_free,
                    memory_mb_free: n.memory_free,
                    cost_per_hour: n.cost_per_hour,
                    cpu_util: if n.cpu_millis == 0 { 0.0 } else { 1.0 - n.cpu_free as f32 / n.cpu_millis as f32 },
                    simulated: true,
                    // The simulator does not model container engines: every node runs any work.
                    containers: true,
                    gpu_first: n.gpu_first,
                    gpu_count: n.gpu_count,
                })
                .collect(),
            gpus: self
                .gpus
                .iter()
                .map(|g| {
                    // What its holders use: their memory (their slice, or their share of the GPU)
                    // and their share of its time.
                    let used: u64 = g
                        .holders
                        .iter()
                        .map(|h| {
                            let j = &self.jobs[h.job];
                            if j.spec.gpu_memory_mb > 0 {
                                j.spec.gpu_memory_mb
                            } else {
                                g.memory_mb * u64::from(j.spec.gpu_milli) / 1000
                            }
                        })
                        .sum();
                    let util: u32 = g.holders.iter().map(|h| self.busy_milli(h.job).min(h.milli.max(1))).sum();
                    GpuEntry {
                        id: g.id,
                        node: g.node,
                        device_index: g.index,
                        model: g.model.clone(),
                        memory_mb: g.memory_mb,
                        memory_used_mb: used.min(g.memory_mb),
                        util: (util.min(WHOLE_GPU_MILLI) as f32) / 1000.0,
                        nvlink_group: None,
                        holders: g
                            .holders
                            .iter()
                            .map(|h| Holder {
                                workload: position.get(&h.job).copied().unwrap_or(usize::MAX),
                                milli: h.billed,
                                memory_mb: h.memory_mb,
                            })
                            .collect(),
                        simulated: true,
                        sharing: g.sharing,
                        mig_profile: g.mig_profile.clone(),
                    }
                })
                .collect(),
            workloads,
            services: in_fleet.iter().map(|&s| self.services[s].entry(self.now, at)).collect(),
            arrivals: self.arrivals.entries(),
        };
        (view, order)
    }

    fn release(&mut self, j: usize, rec: &mut Recorder) {
        let job = &mut self.jobs[j];
        if let Some(node) = job.node.take() {
            let n = &mut self.nodes[node];
            n.cpu_free += job.spec.cpu_millis;
            n.memory_free += job.spec.memory_mb;
        }
        let gpus = std::mem::take(&mut job.gpus);
        let busy = job.base_busy_milli();
        let mut held = 0;
        for &g in &gpus {
            let gpu = &mut self.gpus[g];
            if let Some(at) = gpu.holders.iter().position(|h| h.job == j) {
                let share = gpu.holders.remove(at);
                held += share.billed;
                rec.released(gpu, share.milli, busy);
            }
        }
        let tenant = &mut self.tenants[job.tenant];
        tenant.held_milli = tenant.held_milli.saturating_sub(held);
    }
}

/// Where a replay is, for a watcher ([`run_watched`]).
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Virtual seconds replayed.
    pub now_s: u64,
    /// Where the replay stops.
    pub until_s: u64,
}

impl Progress {
    /// The share replayed, 0 to 1.
    pub fn share(&self) -> f64 {
        if self.until_s == 0 { 1.0 } else { (self.now_s as f64 / self.until_s as f64).min(1.0) }
    }
}

/// One policy's replay of a trace.
pub fn run(
    catalog: &Catalog,
    fleet: &FleetSpec,
    trace: &Trace,
    platform: &SimPolicy,
    tenant_policies: &[(usize, SimPolicy)],
    config: &Config,
) -> anyhow::Result<Scores> {
    run_watched(catalog, fleet, trace, platform, tenant_policies, config, &mut |_| ControlFlow::Continue(()))
}

/// [`run`], telling `watch` where it is before every cycle; the replay stops with an error (the
/// watcher's reason) when the watcher breaks — how a caller bounds it in time or cancels it.
pub fn run_watched(
    catalog: &Catalog,
    fleet: &FleetSpec,
    trace: &Trace,
    platform: &SimPolicy,
    tenant_policies: &[(usize, SimPolicy)],
    config: &Config,
    watch: &mut dyn FnMut(Progress) -> ControlFlow<String>,
) -> anyhow::Result<Scores> {
    replay(catalog, fleet, trace, platform, tenant_policies, config, watch, &mut |_| {}).map(|(scores, _)| scores)
}

/// [`run_watched`], also calling `after_cycle` with the world after each cycle's decisions are
/// applied, and returning the world as the replay left it (the fill experiment reads both).
#[allow(clippy::too_many_arguments)]
pub fn replay(
    catalog: &Catalog,
    fleet: &FleetSpec,
    trace: &Trace,
    platform: &SimPolicy,
    tenant_policies: &[(usize, SimPolicy)],
    config: &Config,
    watch: &mut dyn FnMut(Progress) -> ControlFlow<String>,
    after_cycle: &mut dyn FnMut(&World),
) -> anyhow::Result<(Scores, World)> {
    let mut world = World::build(fleet, trace, config)?;
    // The scored window: what the trace offers arrives in it (its last arrival, or the end of a
    // service's demand, closes it), so every policy is measured over the same owned GPU-hours
    // however long the tail runs.
    let last_arrival = world
        .jobs
        .iter()
        .map(|j| j.spec.arrive_s)
        .chain(trace.node_downs.iter().map(|d| d.at_s))
        .chain(world.services.iter().map(|s| s.spec.end_s()))
        .max()
        .unwrap_or(0);
    let span = if config.window_s > 0 { config.window_s } else { last_arrival.max(1) };
    let longest = world.jobs.iter().map(|j| j.spec.duration_s).max().unwrap_or(0);
    let until = if config.until_s > 0 { config.until_s } else { span + span.max(longest.min(86_400)) };
    let sample_s = if config.sample_s > 0 { config.sample_s } else { (span / 240).max(60) };
    let node_index: HashMap<&str, usize> = world.nodes.iter().enumerate().map(|(i, n)| (&*n.name, i)).collect();

    let mut events: BinaryHeap<Reverse<(u64, u64, Event)>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |events: &mut BinaryHeap<Reverse<(u64, u64, Event)>>, at: u64, event: Event| {
        seq += 1;
        events.push(Reverse((at, seq, event)));
    };
    for (j, job) in world.jobs.iter().enumerate() {
        push(&mut events, job.spec.arrive_s, Event::Arrive(j));
    }
    for (s, service) in world.services.iter().enumerate() {
        push(&mut events, service.spec.start_s, Event::Report { service: s, n: 0 });
    }
    for down in &trace.node_downs {
        let Some(&node) = node_index.get(down.node.as_str()) else {
            bail!("node_down at {} s: no node {} in the fleet (nodes are named <node type>-<n>)", down.at_s, down.node);
        };
        push(&mut events, down.at_s, Event::NodeDown { node, for_s: down.for_s });
    }
    push(&mut events, 0, Event::Sample);

    let mut rec = Recorder::new(&world, span, config.usage_half_life_hours);
    let started = Instant::now();
    let mut last_cycle: Option<u64> = None;
    let mut cycle_at: Option<u64> = None;
    let mut retry = config.retry_s.max(1);
    let mut dirty = false;
    // A load report arrived (or a service ended) since the last cycle: the autoscaler runs.
    let mut scale_due = false;

    while let Some(Reverse((t, _, _))) = events.peek().copied() {
        if t > until {
            break;
        }
        rec.advance(&mut world, t);
        world.now = t;
        while let Some(Reverse((at, _, event))) = events.peek().copied() {
            if at != t {
                break;
            }
            events.pop();
            match event {
                Event::Arrive(j) => {
                    world.arrivals.arrive(t, &world.jobs[j].spec);
                    world.jobs[j].phase = Phase::Waiting;
                    world.active.insert(j);
                    if world.jobs[j].spec.class == WorkloadClass::RealtimeInference {
                        let deadline = world.jobs[j].spec.arrive_s + world.jobs[j].spec.duration_s;
                        push(&mut events, deadline, Event::Deadline(j));
                    }
                    dirty = true;
                }
                Event::Deadline(j) => {
                    if matches!(world.jobs[j].phase, Phase::Running | Phase::Stopping) {
                        rec.ran(&world.jobs[j], t);
                        world.release(j, &mut rec);
                    }
                    world.jobs[j].phase = Phase::Done;
                    world.active.remove(&j);
                    rec.finished(&world.jobs[j]);
                    dirty = true;
                }
                Event::End { job: j, attempt } => {
                    let job = &world.jobs[j];
                    if job.attempt == attempt && matches!(job.phase, Phase::Running | Phase::Stopping) {
                        rec.ran(job, t);
                        rec.completed(job);
                        world.release(j, &mut rec);
                        world.jobs[j].phase = Phase::Done;
                        world.active.remove(&j);
                        rec.finished(&world.jobs[j]);
                        dirty = true;
                    }
                }
                Event::Stopped { job: j, attempt } => {
                    if world.jobs[j].attempt == attempt && world.jobs[j].phase == Phase::Stopping {
                        if world.jobs[j].draining {
                            end_replica(&mut world, j, t, &mut rec);
                        } else {
                            requeue(&mut world, j, t, &mut rec);
                        }
                        dirty = true;
                    }
                }
                Event::NodeDown { node, for_s } => {
                    world.nodes[node].state = NodeState::Lost;
                    let on_node: Vec<usize> =
                        world.active.iter().copied().filter(|&j| world.jobs[j].node == Some(node)).collect();
                    for j in on_node {
                        rec.lost_to_node();
                        if world.jobs[j].draining {
                            end_replica(&mut world, j, t, &mut rec);
                        } else {
                            requeue(&mut world, j, t, &mut rec);
                        }
                    }
                    if let Some(for_s) = for_s {
                        push(&mut events, t + for_s, Event::NodeUp(node));
                    }
                    dirty = true;
                }
                Event::NodeUp(node) => {
                    world.nodes[node].state = NodeState::Ready;
                    dirty = true;
                }
                Event::Report { service: s, n } => {
                    let service = &mut world.services[s];
                    let value = service.spec.demand.values[n];
                    service.report(t, value);
                    let next = t + u64::from(service.spec.demand.every_s);
                    if n + 1 < service.spec.demand.values.len() {
                        push(&mut events, next, Event::Report { service: s, n: n + 1 });
                    } else {
                        push(&mut events, next, Event::ServiceEnd(s));
                    }
                    scale_due = true;
                }
                Event::ServiceEnd(s) => {
                    world.services[s].end();
                    scale_due = true;
                }
                // The replica's capacity counts from now on: the recorder has integrated up to here.
                Event::Ready { .. } => {}
                Event::Cycle => {
                    cycle_at = None;
                    dirty = true;
                }
                Event::Sample => {
                    rec.sample(&world);
                    if t + sample_s <= span {
                        push(&mut events, t + sample_s, Event::Sample);
                    }
                }
            }
        }
        let services_live = world.services.iter().any(Service::in_fleet);
        let wanted = scale_due || (dirty && (world.pending() > 0 || services_live));
        if !wanted {
            continue;
        }
        let earliest = last_cycle.map_or(0, |c| c + config.min_cycle_interval_s);
        if t < earliest {
            if cycle_at.is_none_or(|c| c > earliest) {
                cycle_at = Some(earliest);
                push(&mut events, earliest, Event::Cycle);
            }
            continue;
        }
        if let ControlFlow::Break(why) = watch(Progress { now_s: t, until_s: until }) {
            bail!("the replay stopped at {t} s of {until} s: {why}");
        }
        let began = Instant::now();
        let mut schedule = |at: u64, event: Event| push(&mut events, at, event);
        let mut adapter = ReplayCycle {
            world: &mut world,
            schedule: &mut schedule,
            platform,
            tenant_policies,
            dirty,
            order: Vec::new(),
            services_live: false,
            scaled: false,
        };
        let turn =
            futures::executor::block_on(cycle::run(&mut adapter, catalog)).context("the cycle had no decisions")?;
        let order = std::mem::take(&mut adapter.order);
        match turn {
            Turn::Decided { fleet, decided, composed } => {
                rec.cycle(
                    composed.accepted.len(),
                    composed.refused.len(),
                    decided.notes.failures.len(),
                    began.elapsed(),
                );
                let changed = apply(&mut world, (&fleet, &order), composed, &mut rec, &mut schedule);
                after_cycle(&world);
                retry = if changed { config.retry_s.max(1) } else { (retry * 2).min(3600) };
                if world.pending() > 0 && cycle_at.is_none() {
                    cycle_at = Some(t + retry);
                    push(&mut events, t + retry, Event::Cycle);
                }
            }
            Turn::Idle(_) => rec.cycle(0, 0, 0, began.elapsed()),
        }
        last_cycle = Some(t);
        dirty = false;
        scale_due = false;
    }
    let end = until.min(span).max(world.now);
    rec.advance(&mut world, end);
    let scores = rec.finish(&world, &platform.name, config.seed, started.elapsed());
    Ok((scores, world))
}

/// The replay's side of a cycle (`airtime_scheduler::cycle::Adapter`): the fleet read from the
/// world, the autoscaler's plans applied to it, and when to decide.
struct ReplayCycle<'a> {
    world: &'a mut World,
    schedule: &'a mut dyn FnMut(u64, Event),
    platform: &'a SimPolicy,
    tenant_policies: &'a [(usize, SimPolicy)],
    /// Something happened since the last cycle.
    dirty: bool,
    /// The job behind each workload of the fleet last read.
    order: Vec<usize>,
    /// The fleet had live services when read: the burst reserve follows their demand.
    services_live: bool,
    /// The autoscaler changed the fleet, or the burst reserve moved.
    scaled: bool,
}

impl cycle::Adapter for ReplayCycle<'_> {
    type Policy = SimPolicy;
    type Error = anyhow::Error;

    async fn read(&mut self) -> anyhow::Result<FleetView> {
        let (view, order) = self.world.view();
        self.order = order;
        self.services_live = !view.services.is_empty();
        Ok(view)
    }

    async fn scale(&mut self, _fleet: &FleetView, plans: &[ScalePlan]) -> anyhow::Result<Option<FleetView>> {
        if !scale(self.world, plans, &self.order, self.schedule) {
            return Ok(None);
        }
        self.scaled = true;
        let (view, order) = self.world.view();
        self.order = order;
        Ok(Some(view))
    }

    /// When work waits and something changed: an event, the autoscaler, the burst reserve. While
    /// a replica waits for a place, every cycle re-decides, as the control plane's loop does every
    /// tick; other waiting work is retried with the replay's backoff.
    fn decides(&mut self, fleet: &FleetView) -> bool {
        let reserve = fleet.settings.burst_reserve_gpus;
        if self.services_live && reserve != self.world.burst_reserve_gpus {
            self.scaled = true;
        }
        self.world.burst_reserve_gpus = reserve;
        let world = &*self.world;
        let replica_waiting =
            world.active.iter().any(|&j| world.jobs[j].replica.is_some() && world.jobs[j].phase == Phase::Waiting);
        world.pending() > 0 && (self.dirty || self.scaled || replica_waiting)
    }

    async fn levels(&mut self, fleet: &FleetView) -> anyhow::Result<Levels<SimPolicy>> {
        let with_pending = fleet.tenants_with_pending();
        let tenants = self.tenant_policies.iter().filter(|(t, _)| with_pending.contains(t)).cloned().collect();
        Ok(Levels { platform: self.platform.clone(), tenants })
    }
}

/// The autoscaler's plans applied to the world: new replicas queued, drains applied (a pending
/// replica cancelled at once, a placed one stopped with the grace period). Returns whether they
/// changed the fleet (the policies then decide on the fleet rebuilt).
fn scale(world: &mut World, plans: &[ScalePlan], order: &[usize], schedule: &mut dyn FnMut(u64, Event)) -> bool {
    let now = world.now;
    let in_fleet: Vec<usize> = (0..world.services.len()).filter(|&s| world.services[s].in_fleet()).collect();
    let mut changed = false;
    for plan in plans {
        let s = in_fleet[plan.service];
        for &variant in &plan.start {
            let spec = world.services[s].replica(variant, now);
            let j = world.jobs.len();
            let mut job = Job::new(spec, world.services[s].tenant, j);
            job.replica = Some(ReplicaOf { service: s, variant, ready: true });
            job.phase = Phase::Waiting;
            job.reason = Some(plan.reason.as_str().into());
            world.jobs.push(job);
            world.active.insert(j);
            world.services[s].replicas.push(j);
        }
        for &w in &plan.drain {
            let j = order[w];
            let job = &mut world.jobs[j];
            match job.phase {
                Phase::Waiting => {
                    job.phase = Phase::Done;
                    job.ended_at = Some(now);
                    world.active.remove(&j);
                    world.services[s].replicas.retain(|&r| r != j);
                }
                Phase::Running => {
                    job.phase = Phase::Stopping;
                    job.draining = true;
                    job.reason = Some(plan.reason.as_str().into());
                    let grace = world.settings.grace_period_s.max(0) as u64;
                    schedule(now + grace, Event::Stopped { job: j, attempt: job.attempt });
                }
                _ => continue,
            }
            world.services[s].drained += 1;
        }
        changed |= plan.changes();
    }
    changed
}

/// A drained replica has stopped: it ends (it is not requeued).
fn end_replica(world: &mut World, j: usize, t: u64, rec: &mut Recorder) {
    world.release(j, rec);
    let job = &mut world.jobs[j];
    job.phase = Phase::Done;
    job.ended_at = Some(t);
    world.active.remove(&j);
    if let Some(r) = job.replica {
        world.services[r.service].replicas.retain(|&x| x != j);
    }
}

/// A stopped or lost attempt goes back to the queue: with its progress when checkpointable.
fn requeue(world: &mut World, j: usize, t: u64, rec: &mut Recorder) {
    let ran = t.saturating_sub(world.jobs[j].since);
    rec.ran(&world.jobs[j], t);
    world.release(j, rec);
    let job = &mut world.jobs[j];
    if job.spec.checkpointable {
        job.remaining_s = job.remaining_s.saturating_sub(ran).max(1);
    } else if job.spec.class != WorkloadClass::RealtimeInference && job.replica.is_none() {
        rec.wasted(job, ran);
        job.remaining_s = job.spec.duration_s;
    }
    job.attempt += 1;
    job.phase = Phase::Waiting;
}

/// A cycle's composed decisions on `fleet` (the world as `World::view` built it, `order` the job
/// behind each workload) applied to the world. Returns whether anything was placed or preempted.
fn apply(
    world: &mut World,
    (fleet, order): (&FleetView, &[usize]),
    composed: Composed,
    rec: &mut Recorder,
    schedule: &mut dyn FnMut(u64, Event),
) -> bool {
    let now = world.now;
    let mut changed = false;
    for (refusal, _) in &composed.refused {
        if let Some(w) = refusal.workload {
            set_reason(&mut world.jobs[order[w]].reason, &refusal.reason);
        }
    }
    for (proposal, _) in composed.accepted {
        match proposal {
            Proposal::Place { workload, node, gpus, reason } => {
                let j = order[workload];
                let job = &mut world.jobs[j];
                if job.phase != Phase::Waiting {
                    continue;
                }
                job.phase = Phase::Running;
                job.node = Some(node);
                job.since = now;
                job.first_start.get_or_insert(now);
                job.reason = Some(reason.into());
                job.gpus = gpus.clone();
                let (cpu, memory, tenant, busy) =
                    (job.spec.cpu_millis, job.spec.memory_mb, job.tenant, job.base_busy_milli());
                match job.replica {
                    // A replica runs until it is drained, serving once its model is loaded.
                    Some(r) => {
                        let startup = u64::from(world.services[r.service].spec.startup_s);
                        if startup > 0 {
                            schedule(now + startup, Event::Ready { job: j, attempt: job.attempt });
                        }
                    }
                    None if job.spec.class != WorkloadClass::RealtimeInference => {
                        schedule(now + job.remaining_s, Event::End { job: j, attempt: job.attempt });
                    }
                    None => {}
                }
                let n = &mut world.nodes[node];
                n.cpu_free = n.cpu_free.saturating_sub(cpu);
                n.memory_free = n.memory_free.saturating_sub(memory);
                // What the core grants: the share on a shared GPU, the whole GPU anywhere else.
                let mut held = 0;
                for &g in &gpus {
                    let (billed, slice) = fleet.gpus[g].grant_for(&fleet.workloads[workload]);
                    let gpu = &mut world.gpus[g];
                    // The device is occupied by the share on a shared GPU, whole otherwise (the
                    // recorder scales a MIG instance by its capacity).
                    let occupied = if gpu.sharing.is_shared() { billed } else { WHOLE_GPU_MILLI };
                    gpu.holders.push(Share { job: j, milli: occupied, billed, memory_mb: slice });
                    held += billed;
                    rec.placed(gpu, occupied, busy);
                }
                world.tenants[tenant].held_milli += held;
                changed = true;
            }
            Proposal::Preempt { workload, reason } => {
                let j = order[workload];
                let job = &mut world.jobs[j];
                if job.phase != Phase::Running {
                    continue;
                }
                job.phase = Phase::Stopping;
                job.preemptions.push(now);
                job.reason = Some(reason.into());
                let grace = world.settings.grace_period_s.max(0) as u64;
                schedule(now + grace, Event::Stopped { job: j, attempt: job.attempt });
                rec.preempted();
                changed = true;
            }
            Proposal::KeepPending { workload, reason } => {
                set_reason(&mut world.jobs[order[workload]].reason, &reason);
            }
        }
    }
    changed
}

/// Sets a job's reason, keeping the shared text when it is unchanged (a waiting job is told the
/// same every cycle): each cycle's fleet view then clones a pointer, and nothing is copied here.
fn set_reason(slot: &mut Option<std::sync::Arc<str>>, reason: &str) {
    if slot.as_deref() != Some(reason) {
        *slot = Some(reason.into());
    }
}
