//! The scheduler's picture of the world for one cycle: tenants, nodes with their GPUs and live
//! telemetry, and every pending or placed workload. Positions in these vectors are the indexes the
//! policy ABI speaks in. An adapter fills it: the control plane from PostgreSQL in one
//! repeatable-read transaction, the simulator from its virtual fleet.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use uuid::Uuid;

pub use airtime_protocol::settings::PrioritySettings;
pub use airtime_protocol::sharing::{GpuSharing, WHOLE_GPU_MILLI};
use airtime_protocol::workload::{NodeState, WorkloadClass, WorkloadState};

pub use crate::services::{ReplicaVariant, ServiceEntry};

#[derive(Debug, Clone)]
pub struct TenantEntry {
    pub id: Uuid,
    pub name: String,
    pub guaranteed_gpus: u32,
    pub weight: u32,
    pub tier: i32,
    pub may_borrow: bool,
    /// The most GPUs its work may hold at once, borrowed or not; `None` for no limit.
    pub gpu_limit: Option<u32>,
    /// What its placed work holds, in thousandths of a GPU (a quarter share counts 250).
    pub running_gpu_milli: u32,
    /// GPU-hours used, decayed with a half-life (fair share).
    pub decayed_gpu_hours: f64,
}

impl TenantEntry {
    /// A tenant called `name` with a fresh id, no guarantee, weight 1, tier 0, free to borrow and
    /// using nothing yet: what tests and fixtures start from.
    pub fn named(name: &str) -> TenantEntry {
        TenantEntry {
            id: Uuid::new_v4(),
            name: name.into(),
            guaranteed_gpus: 0,
            weight: 1,
            tier: 0,
            may_borrow: true,
            gpu_limit: None,
            running_gpu_milli: 0,
            decayed_gpu_hours: 0.0,
        }
    }
}

#[derive(Debug, Clone)]
pub struct NodeEntry {
    pub id: Uuid,
    /// Shared, not copied, by the tenants' views (as a GPU's model and a workload's id and name).
    pub name: Arc<str>,
    pub state: NodeState,
    pub cpu_millis: u32,
    pub memory_mb: u64,
    pub cpu_millis_free: u32,
    pub memory_mb_free: u64,
    pub cost_per_hour: f64,
    pub cpu_util: f32,
    pub simulated: bool,
    /// Its agent has a container engine: it can run container workloads.
    pub containers: bool,
    pub gpu_first: usize,
    pub gpu_count: usize,
}

impl NodeEntry {
    /// A ready, simulated node called `name` with a container engine, 8 idle cores, 64 GiB free,
    /// $1 an hour, and the `gpu_count` GPUs from index `gpu_first` of the fleet's: what tests and
    /// fixtures start from.
    pub fn ready(name: &str, gpu_first: usize, gpu_count: usize) -> NodeEntry {
        NodeEntry {
            id: Uuid::new_v4(),
            name: name.into(),
            state: NodeState::Ready,
            cpu_millis: 8000,
            memory_mb: 65536,
            cpu_millis_free: 8000,
            memory_mb_free: 65536,
            cost_per_hour: 1.0,
            cpu_util: 0.0,
            simulated: true,
            containers: true,
            gpu_first,
            gpu_count,
        }
    }
}

#[derive(Debug, Clone)]
pub struct GpuEntry {
    pub id: Uuid,
    pub node: usize,
    pub device_index: u32,
    pub model: Arc<str>,
    pub memory_mb: u64,
    pub memory_used_mb: u64,
    pub util: f32,
    pub nvlink_group: Option<u32>,
    /// The workloads holding it (one, or several sharing it), in grant order.
    pub holders: Vec<Holder>,
    pub simulated: bool,
    pub sharing: GpuSharing,
    /// A MIG instance's profile (`"1g.10gb"`), empty for a whole GPU.
    pub mig_profile: String,
}

/// One workload's hold on a GPU: the whole of it, or its share and memory slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder {
    pub workload: usize,
    /// Thousandths of the GPU (1000: whole).
    pub milli: u32,
    /// Memory slice reserved, MiB (0: none).
    pub memory_mb: u64,
}

impl GpuEntry {
    /// The first of its holders (what the ABI's `holder` names); `None` when free.
    pub fn holder(&self) -> Option<usize> {
        self.holders.first().map(|h| h.workload)
    }

    /// Thousandths of this device its holders occupy: their shares on a shared GPU, all of it
    /// (1000) for any holder of a GPU that is not shared or of a MIG instance.
    pub fn held_milli(&self) -> u32 {
        if self.holders.is_empty() {
            0
        } else if self.sharing.is_shared() {
            self.holders.iter().map(|h| h.milli).sum::<u32>().min(WHOLE_GPU_MILLI)
        } else {
            WHOLE_GPU_MILLI
        }
    }

    /// How much of a physical GPU this device is, in thousandths: 1000, or a MIG instance's
    /// share of the GPU's seven compute slices (a `1g.10gb` instance is 142).
    pub fn capacity_milli(&self) -> u32 {
        if self.sharing != GpuSharing::Mig {
            return WHOLE_GPU_MILLI;
        }
        let slices = airtime_protocol::sharing::MigProfile::parse(&self.mig_profile).map_or(7, |p| p.compute_slices());
        (WHOLE_GPU_MILLI * slices.min(7) / 7).max(1)
    }

    /// Memory reserved by its holders' slices, MiB.
    pub fn reserved_memory_mb(&self) -> u64 {
        self.holders.iter().map(|h| h.memory_mb).sum()
    }

    /// What `workload` is granted of it when placed there, in thousandths of a physical GPU (what
    /// quotas, usage and the accounting count) and MiB of memory slice: its share and slice on a
    /// shared GPU, the whole device anywhere else — a MIG instance being its share of the GPU.
    pub fn grant_for(&self, workload: &WorkloadEntry) -> (u32, u64) {
        if workload.is_share() && self.sharing.is_shared() {
            (workload.gpu_milli, workload.gpu_memory_mb)
        } else {
            (self.capacity_milli(), 0)
        }
    }
}

#[derive(Debug, Clone)]
pub struct WorkloadEntry {
    pub id: Uuid,
    pub id_text: Arc<str>,
    pub name: Arc<str>,
    pub tenant: usize,
    pub class: WorkloadClass,
    pub state: WorkloadState,
    pub priority: i32,
    pub gpu_count: u32,
    pub gpu_memory_mb: u64,
    /// Comma-separated, as the ABI carries it.
    pub gpu_models: String,
    pub cpu_millis: u32,
    pub memory_mb: u64,
    pub cpu_capable: bool,
    pub preemptible: bool,
    pub checkpointable: bool,
    pub expected_duration_s: u32,
    pub submitted_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub node: Option<usize>,
    /// Why it waited last cycle, shared with the adapter's copy (the loop's cached rows, the
    /// simulator's jobs): a cycle's model clones a pointer, not the text, for each waiting workload.
    pub pending_reason: Option<Arc<str>>,
    /// What the last cycle recorded it is short of (a cycle writes only what changed).
    pub shortfall: Option<Arc<str>>,
    /// Times it was preempted in the last hour (the cap in the priority settings).
    pub preemptions_last_hour: u32,
    /// Its share of each GPU, thousandths (1000: whole GPUs).
    pub gpu_milli: u32,
    /// The MIG profile it asks for; empty for none.
    pub mig_profile: String,
    /// The service it is a replica of, and which of its templates it runs; `None` for a job.
    pub replica_of: Option<ReplicaOf>,
    /// Runs in an OCI image: only a node with a container engine can take it.
    pub container: bool,
    /// Its place in a gang across nodes; `None` for work on one node.
    pub gang: Option<GangOf>,
}

/// A workload that is one member of a gang across nodes (`docs/gangs.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GangOf {
    /// The gang's id (its rank-0 member's workload id), as the ABI carries it.
    pub id: Arc<str>,
    pub rank: u32,
    /// Members of the gang.
    pub size: u32,
}

/// A workload that is a service's replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaOf {
    /// Index in the fleet's services.
    pub service: usize,
    pub variant: ReplicaVariant,
    /// It serves: for a service whose replicas' readiness its agents read, once the endpoint has
    /// answered for this attempt; for any other, whenever it is placed. Only ready replicas count
    /// as carrying load when the autoscaler decides what may drain.
    pub ready: bool,
}

impl WorkloadEntry {
    /// A pending training job called `name` of the fleet's tenant `tenant`, submitted at
    /// `submitted_at`, asking for `gpu_count` whole GPUs of any model and size, a core and 1 GiB,
    /// with every flag off: what tests and fixtures start from.
    pub fn pending(name: &str, tenant: usize, gpu_count: u32, submitted_at: DateTime<Utc>) -> WorkloadEntry {
        let id = Uuid::new_v4();
        WorkloadEntry {
            id,
            id_text: id.to_string().into(),
            name: name.into(),
            tenant,
            class: WorkloadClass::Training,
            state: WorkloadState::Pending,
            priority: 0,
            gpu_count,
            gpu_memory_mb: 0,
            gpu_models: String::new(),
            cpu_millis: 1000,
            memory_mb: 1024,
            cpu_capable: false,
            preemptible: false,
            checkpointable: false,
            expected_duration_s: 0,
            submitted_at,
            started_at: None,
            node: None,
            pending_reason: None,
            shortfall: None,
            preemptions_last_hour: 0,
            gpu_milli: WHOLE_GPU_MILLI,
            mig_profile: String::new(),
            replica_of: None,
            container: false,
            gang: None,
        }
    }

    /// The SDK's rule (`airtime_policy_sdk::model_allowed`): the host refuses exactly what a
    /// policy's own tests refuse.
    pub fn allows_model(&self, model: &str) -> bool {
        airtime_policy_sdk::model_allowed(&self.gpu_models, model)
    }

    /// A fraction of one GPU (the SDK's `Workload::is_share`).
    pub fn is_share(&self) -> bool {
        self.gpu_count == 1 && self.gpu_milli < WHOLE_GPU_MILLI && self.mig_profile.is_empty()
    }
}

#[derive(Debug, Clone, Default)]
pub struct FleetView {
    pub now: DateTime<Utc>,
    pub settings: PrioritySettings,
    pub tenants: Vec<TenantEntry>,
    pub nodes: Vec<NodeEntry>,
    pub gpus: Vec<GpuEntry>,
    pub workloads: Vec<WorkloadEntry>,
    /// Elastic inference services (`crate::services`), with their recent load.
    pub services: Vec<ServiceEntry>,
    /// The shapes of work submitted lately, most frequent first (ABI 1.9's arrivals): what
    /// placement by fragmentation takes as the work that typically arrives. Fleet-wide, so a
    /// tenant's view carries none. Shared: adapters keep it for minutes, not one cycle.
    pub arrivals: std::sync::Arc<Vec<ArrivalEntry>>,
}

/// A shape of work and how many workloads of it were submitted in the window the adapter keeps
/// (the control plane: [`ARRIVALS_WINDOW_DAYS`] days of submissions).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct ArrivalEntry {
    /// Thousandths of each GPU (1000 for whole GPUs; 0 without GPUs).
    pub gpu_milli: u32,
    pub gpu_count: u32,
    pub cpu_millis: u32,
    /// Allowed GPU models, comma-separated; empty for any.
    pub gpu_models: String,
    pub count: u32,
}

/// How far back the control plane counts submissions for [`FleetView::arrivals`]: a week, so a
/// weekday's and a weekend's mix both count, and the mix outlives any queue.
pub const ARRIVALS_WINDOW_DAYS: u32 = 7;

impl FleetView {
    pub fn pending_count(&self) -> usize {
        self.workloads.iter().filter(|w| w.state == WorkloadState::Pending).count()
    }

    /// The tenants with pending work, in tenant order: the scopes whose own policy may decide this
    /// cycle.
    pub fn tenants_with_pending(&self) -> Vec<usize> {
        let mut has = vec![false; self.tenants.len()];
        for w in self.workloads.iter().filter(|w| w.state == WorkloadState::Pending) {
            if let Some(slot) = has.get_mut(w.tenant) {
                *slot = true;
            }
        }
        (0..self.tenants.len()).filter(|&t| has[t]).collect()
    }

    /// Thousandths of a GPU each tenant holds now (grants of its placed work), by tenant index.
    pub fn held_milli(&self) -> Vec<u32> {
        self.tenants.iter().map(|t| t.running_gpu_milli).collect()
    }

    /// The room the fleet has once `placed` — (workload, node, GPUs) by index — hold what they were
    /// given: their nodes' CPU and memory taken, their GPUs (or shares) granted. Only `nodes` and
    /// `gpus` are filled (the rest is empty): what [`crate::shortfall`] judges room by, so that what a
    /// waiting workload is told it lacks is true of the fleet the cycle leaves, not the one it read.
    pub fn room_after(&self, placed: &[(usize, usize, &[usize])]) -> FleetView {
        let mut nodes = self.nodes.clone();
        let mut gpus = self.gpus.clone();
        for &(workload, node, on) in placed {
            let (Some(w), Some(n)) = (self.workloads.get(workload), nodes.get_mut(node)) else { continue };
            n.cpu_millis_free = n.cpu_millis_free.saturating_sub(w.cpu_millis);
            n.memory_mb_free = n.memory_mb_free.saturating_sub(w.memory_mb);
            for &g in on {
                if let Some(gpu) = gpus.get_mut(g) {
                    let (milli, memory_mb) = gpu.grant_for(w);
                    gpu.holders.push(Holder { workload, milli, memory_mb });
                }
            }
        }
        FleetView { now: self.now, settings: self.settings.clone(), nodes, gpus, ..FleetView::default() }
    }
}

/// Each tenant's workloads and the GPUs its work holds, by index in the fleet, in fleet order
/// ([`FleetView::tenant_parts`]).
#[derive(Debug, Clone, Default)]
pub struct TenantParts {
    workloads: Vec<Vec<usize>>,
    held_gpus: Vec<Vec<usize>>,
}

/// A tenant's part of the fleet: what its own policy may see and use this cycle (its workloads
/// without their last pending reasons and shortfalls, which no policy is shown).
#[derive(Debug)]
pub struct TenantView {
    pub view: FleetView,
    /// Index in the tenant view → index in the full view.
    pub workloads: Vec<usize>,
    pub nodes: Vec<usize>,
    pub gpus: Vec<usize>,
}

impl TenantView {
    /// The tenant's index in its own view: the view holds that tenant alone.
    pub const SCOPE_TENANT: usize = 0;
}

impl FleetView {
    /// The part of the fleet a tenant's policy works in: the tenant's own workloads (no other
    /// tenant's work is visible to it), the GPUs the platform granted it this cycle plus those its
    /// running work holds, and the nodes those GPUs are on (or that it was given CPU placements on).
    pub fn tenant_view(&self, tenant: usize, granted_gpus: &[usize], granted_nodes: &[usize]) -> TenantView {
        self.tenant_view_in(&self.tenant_parts(), tenant, granted_gpus, granted_nodes)
    }

    /// Every tenant's workloads and the GPUs its work holds, by index, in one pass over the fleet:
    /// what [`FleetView::tenant_view_in`] starts from, so a cycle's twenty views cost one pass over
    /// 15,000 workloads and 8,000 GPUs, not twenty.
    pub fn tenant_parts(&self) -> TenantParts {
        let mut workloads = vec![Vec::new(); self.tenants.len()];
        for (w, entry) in self.workloads.iter().enumerate() {
            if let Some(mine) = workloads.get_mut(entry.tenant) {
                mine.push(w);
            }
        }
        let mut held_gpus: Vec<Vec<usize>> = vec![Vec::new(); self.tenants.len()];
        for (g, gpu) in self.gpus.iter().enumerate() {
            for holder in &gpu.holders {
                let Some(held) = self.workloads.get(holder.workload).and_then(|w| held_gpus.get_mut(w.tenant)) else {
                    continue;
                };
                if held.last() != Some(&g) {
                    held.push(g);
                }
            }
        }
        TenantParts { workloads, held_gpus }
    }

    /// [`FleetView::tenant_view`], from the fleet's [`TenantParts`].
    pub fn tenant_view_in(
        &self,
        parts: &TenantParts,
        tenant: usize,
        granted_gpus: &[usize],
        granted_nodes: &[usize],
    ) -> TenantView {
        // Positions in the tenant's view by index in the full one (`usize::MAX`: not in it).
        const ABSENT: usize = usize::MAX;
        let workloads: Vec<usize> = parts.workloads.get(tenant).cloned().unwrap_or_default();
        let mut workload_at = vec![ABSENT; self.workloads.len()];
        for (i, &w) in workloads.iter().enumerate() {
            workload_at[w] = i;
        }
        let held: &[usize] = parts.held_gpus.get(tenant).map_or(&[], Vec::as_slice);
        let gpu_set: std::collections::BTreeSet<usize> =
            granted_gpus.iter().chain(held).copied().filter(|&g| g < self.gpus.len()).collect();
        let node_set: std::collections::BTreeSet<usize> =
            gpu_set.iter().map(|&g| self.gpus[g].node).chain(granted_nodes.iter().copied()).collect();
        let nodes: Vec<usize> = node_set.into_iter().collect();
        let mut node_at = vec![ABSENT; self.nodes.len()];
        for (i, &n) in nodes.iter().enumerate() {
            if let Some(slot) = node_at.get_mut(n) {
                *slot = i;
            }
        }
        // GPUs grouped by node, in node order, so each node's GPUs stay one contiguous run.
        let mut gpus: Vec<usize> = gpu_set.into_iter().collect();
        gpus.sort_by_key(|&g| (self.gpus[g].node, g));
        let services: Vec<usize> = (0..self.services.len()).filter(|&s| self.services[s].tenant == tenant).collect();
        let service_pos = |s: usize| services.iter().position(|&x| x == s);
        let node_pos = |n: usize| node_at.get(n).copied().filter(|&p| p != ABSENT);
        let workload_pos = |w: usize| workload_at.get(w).copied().filter(|&p| p != ABSENT);
        let mut view = FleetView {
            now: self.now,
            settings: self.settings.clone(),
            // Only this tenant: a tenant's policy (and a tenant's exported snapshot) never sees
            // another tenant's name, guarantee, weight, tier or usage.
            tenants: vec![self.tenants[tenant].clone()],
            nodes: nodes.iter().map(|&n| NodeEntry { gpu_first: 0, gpu_count: 0, ..self.nodes[n].clone() }).collect(),
            gpus: gpus
                .iter()
                .filter_map(|&g| {
                    let gpu = &self.gpus[g];
                    // Another tenant's share stays held capacity, without naming its workload.
                    let mut holders: Vec<Holder> = gpu
                        .holders
                        .iter()
                        .map(|h| Holder { workload: workload_pos(h.workload).unwrap_or(usize::MAX), ..*h })
                        .collect();
                    holders.sort_by_key(|h| h.workload == usize::MAX);
                    Some(GpuEntry { node: node_pos(gpu.node)?, holders, ..gpu.clone() })
                })
                .collect(),
            workloads: workloads
                .iter()
                .map(|&w| {
                    let entry = &self.workloads[w];
                    WorkloadEntry {
                        id: entry.id,
                        id_text: entry.id_text.clone(),
                        name: entry.name.clone(),
                        tenant: TenantView::SCOPE_TENANT,
                        class: entry.class,
                        state: entry.state,
                        priority: entry.priority,
                        gpu_count: entry.gpu_count,
                        gpu_memory_mb: entry.gpu_memory_mb,
                        gpu_models: entry.gpu_models.clone(),
                        cpu_millis: entry.cpu_millis,
                        memory_mb: entry.memory_mb,
                        cpu_capable: entry.cpu_capable,
                        preemptible: entry.preemptible,
                        checkpointable: entry.checkpointable,
                        expected_duration_s: entry.expected_duration_s,
                        submitted_at: entry.submitted_at,
                        started_at: entry.started_at,
                        node: entry.node.and_then(node_pos),
                        // Why it waited last cycle is the record's, not a policy's input (no
                        // snapshot carries it): not copied into every tenant's view each cycle,
                        // the longest strings of the copy.
                        pending_reason: None,
                        shortfall: None,
                        preemptions_last_hour: entry.preemptions_last_hour,
                        gpu_milli: entry.gpu_milli,
                        mig_profile: entry.mig_profile.clone(),
                        replica_of: entry
                            .replica_of
                            .and_then(|r| Some(ReplicaOf { service: service_pos(r.service)?, ..r })),
                        container: entry.container,
                        gang: entry.gang.clone(),
                    }
                })
                .collect(),
            // Only its own services.
            services: services
                .iter()
                .map(|&s| ServiceEntry { tenant: TenantView::SCOPE_TENANT, ..self.services[s].clone() })
                .collect(),
            // The fleet's arrivals would tell a tenant the shapes of everyone's work.
            arrivals: Default::default(),
        };
        for (i, gpu) in view.gpus.iter().enumerate() {
            let node = &mut view.nodes[gpu.node];
            if node.gpu_count == 0 {
                node.gpu_first = i;
            }
            node.gpu_count += 1;
        }
        TenantView { view, workloads, nodes, gpus }
    }
}
