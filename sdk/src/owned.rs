//! Snapshot records that own their strings: the JSON form of a snapshot (with the `serde` feature)
//! and the storage behind [`crate::testing::SnapshotFixture`].
//!
//! The borrowed [`Snapshot`] is what crosses the ABI; an [`OwnedSnapshot`] turns into one with
//! [`OwnedSnapshot::as_snapshot`] and is made from one with `From<&Snapshot>`. Host tools read and
//! write this form (`airtime-policy run --snapshot snapshot.json`); guests never need it.

use crate::abi::{
    Gpu, LoadMetric, Node, NodeState, ReplicaVariant, Service, Settings, Snapshot, Tenant, Workload, WorkloadClass,
    WorkloadState,
};

/// A [`Snapshot`] that owns its strings.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct OwnedSnapshot {
    pub now_ms: u64,
    pub tenants: Vec<OwnedTenant>,
    pub nodes: Vec<OwnedNode>,
    pub gpus: Vec<OwnedGpu>,
    pub workloads: Vec<OwnedWorkload>,
    pub settings: Option<Settings>,
    /// JSON text.
    pub params: String,
    pub scope_tenant: Option<u32>,
    /// ABI 1.3.
    pub services: Vec<OwnedService>,
}

impl Default for OwnedSnapshot {
    fn default() -> Self {
        OwnedSnapshot {
            now_ms: 0,
            tenants: Vec::new(),
            nodes: Vec::new(),
            gpus: Vec::new(),
            workloads: Vec::new(),
            settings: None,
            params: "{}".to_owned(),
            scope_tenant: None,
            services: Vec::new(),
        }
    }
}

/// A [`Tenant`] that owns its name.
#[derive(Debug, Clone, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct OwnedTenant {
    pub name: String,
    pub guaranteed_gpus: u32,
    pub weight: u32,
    pub running_gpus: u32,
    pub tier: i32,
    pub decayed_gpu_hours: f32,
    pub may_borrow: bool,
    pub running_gpu_milli: u32,
}

/// A [`Node`] that owns its name.
#[derive(Debug, Clone, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct OwnedNode {
    pub name: String,
    pub state: NodeState,
    pub cpu_millis: u32,
    pub cpu_millis_free: u32,
    pub memory_mb: u32,
    pub memory_mb_free: u32,
    pub gpu_first: u32,
    pub gpu_count: u32,
    pub cost_per_hour: f32,
    pub cpu_util: f32,
    pub simulated: bool,
    pub containers: bool,
}

/// A [`Gpu`] that owns its model name. Fields a file leaves out take [`Gpu::default`]'s values
/// (a whole GPU, free, not shared).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct OwnedGpu {
    pub node: u32,
    pub device_index: u32,
    pub model: String,
    pub memory_mb: u32,
    pub memory_used_mb: u32,
    pub util: f32,
    pub nvlink_group: Option<u32>,
    pub holder: Option<u32>,
    pub simulated: bool,
    pub sharing: crate::abi::Sharing,
    pub free_milli: u32,
    pub memory_reserved_mb: u32,
    pub sharers: u32,
    pub mig_profile: String,
}

impl Default for OwnedGpu {
    fn default() -> Self {
        OwnedGpu::from(&Gpu::default())
    }
}

/// A [`Workload`] that owns its strings. Fields a file leaves out take [`Workload::default`]'s
/// values (whole GPUs, no MIG profile).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct OwnedWorkload {
    pub id: String,
    pub name: String,
    pub tenant: u32,
    pub class: WorkloadClass,
    pub state: WorkloadState,
    pub priority: i32,
    pub gpu_count: u32,
    pub gpu_memory_mb: u32,
    pub gpu_models: String,
    pub cpu_millis: u32,
    pub memory_mb: u32,
    pub submitted_ms: u64,
    pub started_ms: u64,
    pub node: Option<u32>,
    pub preemptible: bool,
    pub checkpointable: bool,
    pub cpu_capable: bool,
    pub gang: bool,
    pub expected_duration_s: u32,
    pub gpu_milli: u32,
    pub mig_profile: String,
    pub service: Option<u32>,
    pub replica_variant: ReplicaVariant,
    pub container: bool,
    pub preemptions_last_hour: u32,
}

impl Default for OwnedWorkload {
    fn default() -> Self {
        OwnedWorkload::from(&Workload::default())
    }
}

/// A [`Service`] that owns its name (ABI 1.3).
#[derive(Debug, Clone, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct OwnedService {
    pub name: String,
    pub tenant: u32,
    pub class: WorkloadClass,
    pub metric: LoadMetric,
    pub min_replicas: u32,
    pub max_replicas: u32,
    pub capacity: f32,
    pub cpu_capacity: f32,
    pub demand: f32,
    pub latest: f32,
    pub desired_gpu: u32,
    pub desired_cpu: u32,
    pub placed_gpu: u32,
    pub placed_cpu: u32,
    pub pending_gpu: u32,
    pub pending_cpu: u32,
    pub gpu_milli_per_replica: u32,
    pub has_cpu_variant: bool,
    pub draining: bool,
    pub stale: bool,
}

impl OwnedSnapshot {
    /// The borrowed form, ready for [`crate::abi::encode_snapshot`].
    pub fn as_snapshot(&self) -> Snapshot<'_> {
        Snapshot {
            now_ms: self.now_ms,
            tenants: self.tenants.iter().map(OwnedTenant::as_tenant).collect(),
            nodes: self.nodes.iter().map(OwnedNode::as_node).collect(),
            gpus: self.gpus.iter().map(OwnedGpu::as_gpu).collect(),
            workloads: self.workloads.iter().map(OwnedWorkload::as_workload).collect(),
            settings: self.settings,
            params: &self.params,
            scope_tenant: self.scope_tenant,
            services: self.services.iter().map(OwnedService::as_service).collect(),
        }
    }
}

impl OwnedTenant {
    pub fn as_tenant(&self) -> Tenant<'_> {
        Tenant {
            name: &self.name,
            guaranteed_gpus: self.guaranteed_gpus,
            weight: self.weight,
            running_gpus: self.running_gpus,
            tier: self.tier,
            decayed_gpu_hours: self.decayed_gpu_hours,
            may_borrow: self.may_borrow,
            running_gpu_milli: self.running_gpu_milli,
        }
    }
}

impl OwnedNode {
    pub fn as_node(&self) -> Node<'_> {
        Node {
            name: &self.name,
            state: self.state,
            cpu_millis: self.cpu_millis,
            cpu_millis_free: self.cpu_millis_free,
            memory_mb: self.memory_mb,
            memory_mb_free: self.memory_mb_free,
            gpu_first: self.gpu_first,
            gpu_count: self.gpu_count,
            cost_per_hour: self.cost_per_hour,
            cpu_util: self.cpu_util,
            simulated: self.simulated,
            containers: self.containers,
        }
    }
}

impl OwnedGpu {
    pub fn as_gpu(&self) -> Gpu<'_> {
        Gpu {
            node: self.node,
            device_index: self.device_index,
            model: &self.model,
            memory_mb: self.memory_mb,
            memory_used_mb: self.memory_used_mb,
            util: self.util,
            nvlink_group: self.nvlink_group,
            holder: self.holder,
            simulated: self.simulated,
            sharing: self.sharing,
            free_milli: self.free_milli,
            memory_reserved_mb: self.memory_reserved_mb,
            sharers: self.sharers,
            mig_profile: &self.mig_profile,
        }
    }
}

impl OwnedWorkload {
    pub fn as_workload(&self) -> Workload<'_> {
        Workload {
            id: &self.id,
            name: &self.name,
            tenant: self.tenant,
            class: self.class,
            state: self.state,
            priority: self.priority,
            gpu_count: self.gpu_count,
            gpu_memory_mb: self.gpu_memory_mb,
            gpu_models: &self.gpu_models,
            cpu_millis: self.cpu_millis,
            memory_mb: self.memory_mb,
            submitted_ms: self.submitted_ms,
            started_ms: self.started_ms,
            node: self.node,
            preemptible: self.preemptible,
            checkpointable: self.checkpointable,
            cpu_capable: self.cpu_capable,
            gang: self.gang,
            expected_duration_s: self.expected_duration_s,
            gpu_milli: self.gpu_milli,
            mig_profile: &self.mig_profile,
            service: self.service,
            replica_variant: self.replica_variant,
            container: self.container,
            preemptions_last_hour: self.preemptions_last_hour,
        }
    }
}

impl OwnedService {
    pub fn as_service(&self) -> Service<'_> {
        Service {
            name: &self.name,
            tenant: self.tenant,
            class: self.class,
            metric: self.metric,
            min_replicas: self.min_replicas,
            max_replicas: self.max_replicas,
            capacity: self.capacity,
            cpu_capacity: self.cpu_capacity,
            demand: self.demand,
            latest: self.latest,
            desired_gpu: self.desired_gpu,
            desired_cpu: self.desired_cpu,
            placed_gpu: self.placed_gpu,
            placed_cpu: self.placed_cpu,
            pending_gpu: self.pending_gpu,
            pending_cpu: self.pending_cpu,
            gpu_milli_per_replica: self.gpu_milli_per_replica,
            has_cpu_variant: self.has_cpu_variant,
            draining: self.draining,
            stale: self.stale,
        }
    }
}

impl From<&Snapshot<'_>> for OwnedSnapshot {
    fn from(s: &Snapshot<'_>) -> Self {
        OwnedSnapshot {
            now_ms: s.now_ms,
            tenants: s.tenants.iter().map(OwnedTenant::from).collect(),
            nodes: s.nodes.iter().map(OwnedNode::from).collect(),
            gpus: s.gpus.iter().map(OwnedGpu::from).collect(),
            workloads: s.workloads.iter().map(OwnedWorkload::from).collect(),
            settings: s.settings,
            params: s.params.to_owned(),
            scope_tenant: s.scope_tenant,
            services: s.services.iter().map(OwnedService::from).collect(),
        }
    }
}

impl From<&Tenant<'_>> for OwnedTenant {
    fn from(t: &Tenant<'_>) -> Self {
        OwnedTenant {
            name: t.name.to_owned(),
            guaranteed_gpus: t.guaranteed_gpus,
            weight: t.weight,
            running_gpus: t.running_gpus,
            tier: t.tier,
            decayed_gpu_hours: t.decayed_gpu_hours,
            may_borrow: t.may_borrow,
            running_gpu_milli: t.running_gpu_milli,
        }
    }
}

impl From<&Node<'_>> for OwnedNode {
    fn from(n: &Node<'_>) -> Self {
        OwnedNode {
            name: n.name.to_owned(),
            state: n.state,
            cpu_millis: n.cpu_millis,
            cpu_millis_free: n.cpu_millis_free,
            memory_mb: n.memory_mb,
            memory_mb_free: n.memory_mb_free,
            gpu_first: n.gpu_first,
            gpu_count: n.gpu_count,
            cost_per_hour: n.cost_per_hour,
            cpu_util: n.cpu_util,
            simulated: n.simulated,
            containers: n.containers,
        }
    }
}

impl From<&Gpu<'_>> for OwnedGpu {
    fn from(g: &Gpu<'_>) -> Self {
        OwnedGpu {
            node: g.node,
            device_index: g.device_index,
            model: g.model.to_owned(),
            memory_mb: g.memory_mb,
            memory_used_mb: g.memory_used_mb,
            util: g.util,
            nvlink_group: g.nvlink_group,
            holder: g.holder,
            simulated: g.simulated,
            sharing: g.sharing,
            free_milli: g.free_milli,
            memory_reserved_mb: g.memory_reserved_mb,
            sharers: g.sharers,
            mig_profile: g.mig_profile.to_owned(),
        }
    }
}

impl From<&Workload<'_>> for OwnedWorkload {
    fn from(w: &Workload<'_>) -> Self {
        OwnedWorkload {
            id: w.id.to_owned(),
            name: w.name.to_owned(),
            tenant: w.tenant,
            class: w.class,
            state: w.state,
            priority: w.priority,
            gpu_count: w.gpu_count,
            gpu_memory_mb: w.gpu_memory_mb,
            gpu_models: w.gpu_models.to_owned(),
            cpu_millis: w.cpu_millis,
            memory_mb: w.memory_mb,
            submitted_ms: w.submitted_ms,
            started_ms: w.started_ms,
            node: w.node,
            preemptible: w.preemptible,
            checkpointable: w.checkpointable,
            cpu_capable: w.cpu_capable,
            gang: w.gang,
            expected_duration_s: w.expected_duration_s,
            gpu_milli: w.gpu_milli,
            mig_profile: w.mig_profile.to_owned(),
            service: w.service,
            replica_variant: w.replica_variant,
            container: w.container,
            preemptions_last_hour: w.preemptions_last_hour,
        }
    }
}

impl From<&Service<'_>> for OwnedService {
    fn from(s: &Service<'_>) -> Self {
        OwnedService {
            name: s.name.to_owned(),
            tenant: s.tenant,
            class: s.class,
            metric: s.metric,
            min_replicas: s.min_replicas,
            max_replicas: s.max_replicas,
            capacity: s.capacity,
            cpu_capacity: s.cpu_capacity,
            demand: s.demand,
            latest: s.latest,
            desired_gpu: s.desired_gpu,
            desired_cpu: s.desired_cpu,
            placed_gpu: s.placed_gpu,
            placed_cpu: s.placed_cpu,
            pending_gpu: s.pending_gpu,
            pending_cpu: s.pending_cpu,
            gpu_milli_per_replica: s.gpu_milli_per_replica,
            has_cpu_variant: s.has_cpu_variant,
            draining: s.draining,
            stale: s.stale,
        }
    }
}
