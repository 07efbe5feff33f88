//! The host/guest contract: record types and both directions of the byte encoding.
//!
//! This module is the Rust form of `docs/policy-abi.md`; the two change together. The control plane
//! builds a [`Snapshot`] by borrowing its own strings and calls [`encode_snapshot`]; the guest calls
//! [`decode_snapshot`] on the buffer the host copied into its memory and borrows every string from
//! that buffer (no copy). Decisions travel back the same way through [`encode_decisions`] and
//! [`decode_decisions`].
//!
//! The decoders are **structural**: magic, version, bounds, strides, UTF-8 and cross-table indexes
//! (so helpers can index without panicking). Whether a decision makes sense (the workload is pending,
//! the GPUs are free, the tenant may use them) is judged by the host; [`crate::check`] has the checks
//! any host wants. Decoders never panic, whatever the bytes: they return an [`AbiError`] that says
//! where and what ("decision 3: gpu list at 0x1200+32 runs past the 4096-byte buffer").
//!
//! Reads are alignment-free (`from_le_bytes` on byte slices), so a buffer at any address decodes.

use std::borrow::Cow;

mod decode;
mod encode;
mod error;

pub use decode::{decode_decisions, decode_snapshot, validate_decisions};
pub use encode::{encode_decisions, encode_snapshot, try_encode_decisions, try_encode_snapshot};
pub use error::{AbiError, BufferKind, Location, Table};

/// The ABI version this SDK speaks; a module's `airtime_abi_version` export returns it.
pub const ABI_VERSION: u32 = 1;
/// The minor version of this SDK's records (1.5: the preemption rules a policy needs to propose
/// only what the host accepts — a workload's preemptions in the last hour and checkpointable-only;
/// 1.4: container workloads and the nodes that run them,
/// as flag bits; 1.3: elastic inference services). Minor versions only append fields or flag bits
/// (tables carry their stride; 1.3 appends the services table's descriptor after the 88 header
/// bytes earlier guests read), so guests built for 1.0 to 1.4 keep working.
pub const ABI_MINOR_VERSION: u32 = 5;
/// A whole GPU, in thousandths: the unit of [`Workload::gpu_milli`] and [`Gpu::free_milli`].
pub const WHOLE_GPU_MILLI: u32 = 1000;
/// First four bytes of a snapshot buffer.
pub const SNAPSHOT_MAGIC: [u8; 4] = *b"ATSN";
/// First four bytes of a decision buffer.
pub const DECISIONS_MAGIC: [u8; 4] = *b"ATDC";
/// An absent index (`u32::MAX`). `Option<u32>` fields encode `None` as this value, so the index
/// `u32::MAX` itself can never name a record.
pub const NONE: u32 = u32::MAX;

/// Size of the snapshot header, in bytes (1.3; it was 88 before the services table's descriptor
/// and a reserved word were appended, and a 1.0 to 1.2 guest reads only those first 88).
pub const SNAPSHOT_HEADER_SIZE: usize = 104;
/// Size of the header guests before ABI 1.3 read.
pub const SNAPSHOT_HEADER_SIZE_1_2: usize = 88;
/// Size of a tenant record (the minimum stride of the tenants table).
pub const TENANT_SIZE: usize = 40;
/// Size of a node record.
pub const NODE_SIZE: usize = 48;
/// Size of a GPU record.
pub const GPU_SIZE: usize = 64;
/// Size of a workload record.
pub const WORKLOAD_SIZE: usize = 112;
/// Size of the settings record.
pub const SETTINGS_SIZE: usize = 32;
/// Size of a service record (ABI 1.3).
pub const SERVICE_SIZE: usize = 80;
/// Size of the decision buffer header (magic and count).
pub const DECISIONS_HEADER_SIZE: usize = 8;
/// Size of a decision record.
pub const DECISION_SIZE: usize = 32;

/// Decision kind code: place.
pub const KIND_PLACE: u32 = 1;
/// Decision kind code: preempt.
pub const KIND_PREEMPT: u32 = 2;
/// Decision kind code: keep pending.
pub const KIND_KEEP_PENDING: u32 = 3;

/// Everything a policy sees in one evaluation. Indexes are positions in these tables, valid for
/// this snapshot only.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot<'a> {
    /// Unix time in milliseconds, given by the host (the guest has no clock).
    pub now_ms: u64,
    pub tenants: Vec<Tenant<'a>>,
    /// Nodes; a node's GPUs are `gpus[gpu_first .. gpu_first + gpu_count]`.
    pub nodes: Vec<Node<'a>>,
    pub gpus: Vec<Gpu<'a>>,
    /// Pending and running workloads of the scope.
    pub workloads: Vec<Workload<'a>>,
    /// The platform's priority settings; absent when the platform has none.
    pub settings: Option<Settings>,
    /// The policy's JSON configuration, `{}` when it has none. Read it with
    /// [`crate::guest::Context::params`].
    pub params: &'a str,
    /// The tenant (index) this evaluation is for; `None` for the platform scope.
    pub scope_tenant: Option<u32>,
    /// Elastic inference services of the scope, with the autoscaler's plan for each (ABI 1.3).
    /// Their replicas are ordinary workloads naming their service ([`Workload::service`]).
    pub services: Vec<Service<'a>>,
}

impl Default for Snapshot<'_> {
    fn default() -> Self {
        Snapshot {
            now_ms: 0,
            tenants: Vec::new(),
            nodes: Vec::new(),
            gpus: Vec::new(),
            workloads: Vec::new(),
            settings: None,
            params: "{}",
            scope_tenant: None,
            services: Vec::new(),
        }
    }
}

/// A team with a GPU quota.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Tenant<'a> {
    pub name: &'a str,
    pub guaranteed_gpus: u32,
    pub weight: u32,
    /// GPUs its running workloads hold now.
    pub running_gpus: u32,
    /// Higher is more important.
    pub tier: i32,
    /// Usage history, half-life decayed.
    pub decayed_gpu_hours: f32,
    /// May borrow idle capacity beyond `guaranteed_gpus` (flag bit 0).
    pub may_borrow: bool,
    /// What its running workloads hold now, in thousandths of a GPU (a quarter-GPU share counts
    /// 250); ABI 1.2. `running_gpus` is this rounded up, for guests that count whole GPUs.
    pub running_gpu_milli: u32,
}

/// A server.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Node<'a> {
    pub name: &'a str,
    pub state: NodeState,
    /// Total CPU, in thousandths of a core.
    pub cpu_millis: u32,
    /// CPU not reserved by running workloads.
    pub cpu_millis_free: u32,
    pub memory_mb: u32,
    pub memory_mb_free: u32,
    /// Index of its first GPU in [`Snapshot::gpus`].
    pub gpu_first: u32,
    /// Number of GPUs; they are `gpu_first .. gpu_first + gpu_count`.
    pub gpu_count: u32,
    /// USD per hour.
    pub cost_per_hour: f32,
    /// Live CPU utilisation, 0..1.
    pub cpu_util: f32,
    /// Its GPUs are simulated (flag bit 0).
    pub simulated: bool,
    /// It has a container engine, so it can run container workloads (flag bit 1; ABI 1.4).
    pub containers: bool,
}

/// One GPU, or one MIG instance of a GPU (ABI 1.2: `sharing` is [`Sharing::Mig`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Gpu<'a> {
    /// Index of its node in [`Snapshot::nodes`].
    pub node: u32,
    /// Position on its node, as `CUDA_VISIBLE_DEVICES` counts.
    pub device_index: u32,
    pub model: &'a str,
    /// Total memory, MiB.
    pub memory_mb: u32,
    /// Memory in use now (live telemetry), MiB.
    pub memory_used_mb: u32,
    /// Live utilisation, 0..1.
    pub util: f32,
    /// GPUs with the same value share an NVLink domain; `None` when unknown.
    pub nvlink_group: Option<u32>,
    /// The workload (index) holding it; `None` when free. A GPU shared by several workloads names
    /// the first of them, so a guest that knows nothing of sharing sees it as held.
    pub holder: Option<u32>,
    /// Simulated (flag bit 0).
    pub simulated: bool,
    /// How it is shared (ABI 1.2).
    pub sharing: Sharing,
    /// Thousandths of it no workload holds (1000 when free, 0 when held whole; ABI 1.2).
    pub free_milli: u32,
    /// GPU memory reserved by the memory slices of the workloads sharing it, MiB (ABI 1.2).
    pub memory_reserved_mb: u32,
    /// How many workloads hold a share of it (ABI 1.2).
    pub sharers: u32,
    /// A MIG instance's profile (`"1g.10gb"`); empty for a whole GPU (ABI 1.2).
    pub mig_profile: &'a str,
}

impl Default for Gpu<'_> {
    fn default() -> Self {
        Gpu {
            node: 0,
            device_index: 0,
            model: "",
            memory_mb: 0,
            memory_used_mb: 0,
            util: 0.0,
            nvlink_group: None,
            holder: None,
            simulated: false,
            sharing: Sharing::None,
            free_milli: WHOLE_GPU_MILLI,
            memory_reserved_mb: 0,
            sharers: 0,
            mig_profile: "",
        }
    }
}

/// A pending or running workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload<'a> {
    /// UUID text.
    pub id: &'a str,
    pub name: &'a str,
    /// Index of its tenant in [`Snapshot::tenants`].
    pub tenant: u32,
    pub class: WorkloadClass,
    pub state: WorkloadState,
    /// Higher first.
    pub priority: i32,
    pub gpu_count: u32,
    /// GPU memory needed on each GPU, MiB.
    pub gpu_memory_mb: u32,
    /// Comma-separated allowed GPU models; empty allows any. See [`Workload::allows_model`].
    pub gpu_models: &'a str,
    /// CPU needed, thousandths of a core (for a CPU placement, on the node).
    pub cpu_millis: u32,
    /// Memory needed, MiB.
    pub memory_mb: u32,
    /// Unix ms.
    pub submitted_ms: u64,
    /// Unix ms; 0 when not running.
    pub started_ms: u64,
    /// The node it runs on (running only).
    pub node: Option<u32>,
    /// May be preempted (flag bit 0).
    pub preemptible: bool,
    /// Can checkpoint and resume (flag bit 1).
    pub checkpointable: bool,
    /// Can run on CPU only (flag bit 2).
    pub cpu_capable: bool,
    /// All its GPUs must be on one node (flag bit 3). In ABI version 1 every placement names one
    /// node, so every placement satisfies it; the flag exists for multi-node placements later.
    pub gang: bool,
    /// Expected duration in seconds; 0 when unknown.
    pub expected_duration_s: u32,
    /// Its share of each GPU, in thousandths: 1000 for whole GPUs, less for a fraction of one GPU
    /// (then `gpu_count` is 1 and `gpu_memory_mb` is its memory slice); ABI 1.2.
    pub gpu_milli: u32,
    /// The MIG profile it must run on (`"1g.10gb"`); empty when it asks for none (ABI 1.2).
    pub mig_profile: &'a str,
    /// The service (index into [`Snapshot::services`]) it is a replica of; `None` for a job
    /// (ABI 1.3).
    pub service: Option<u32>,
    /// Which of its service's templates a replica runs; [`ReplicaVariant::None`] for a job
    /// (ABI 1.3).
    pub replica_variant: ReplicaVariant,
    /// Runs in an OCI image: only a node with [`Node::containers`] can take it (flag bit 4;
    /// ABI 1.4).
    pub container: bool,
    /// Times it was preempted in the last hour: at the settings' `max_preemptions_per_hour` the
    /// host refuses to preempt it again (ABI 1.5; 0 from older hosts).
    pub preemptions_last_hour: u32,
}

impl Default for Workload<'_> {
    fn default() -> Self {
        Workload {
            id: "",
            name: "",
            tenant: 0,
            class: WorkloadClass::default(),
            state: WorkloadState::default(),
            priority: 0,
            gpu_count: 0,
            gpu_memory_mb: 0,
            gpu_models: "",
            cpu_millis: 0,
            memory_mb: 0,
            submitted_ms: 0,
            started_ms: 0,
            node: None,
            preemptible: false,
            checkpointable: false,
            cpu_capable: false,
            gang: false,
            expected_duration_s: 0,
            gpu_milli: WHOLE_GPU_MILLI,
            mig_profile: "",
            service: None,
            replica_variant: ReplicaVariant::None,
            container: false,
            preemptions_last_hour: 0,
        }
    }
}

/// An elastic inference service (ABI 1.3): a tenant's inference that runs as replicas, with what
/// the host's autoscaler plans for it this cycle. The host has already started the replicas the
/// plan adds (they are pending workloads of this snapshot) and drained those it removes; a policy
/// places the pending ones like any workload, its own way, and the host checks those placements
/// like any other.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Service<'a> {
    pub name: &'a str,
    /// Index of its tenant in [`Snapshot::tenants`].
    pub tenant: u32,
    /// The class of its replicas.
    pub class: WorkloadClass,
    /// What its load reports measure.
    pub metric: LoadMetric,
    pub min_replicas: u32,
    pub max_replicas: u32,
    /// Load one GPU replica carries at the latency target, in the service's metric.
    pub capacity: f32,
    /// Load one CPU replica carries; 0 when it has no CPU variant.
    pub cpu_capacity: f32,
    /// The load the autoscaler provisions for (stabilised, with burst headroom); 0 while the
    /// reports are stale or the service drains.
    pub demand: f32,
    /// The newest report's load; 0 when none has come.
    pub latest: f32,
    /// Replicas the autoscaler wants, by variant.
    pub desired_gpu: u32,
    pub desired_cpu: u32,
    /// Replicas placed now (scheduled or running), by variant.
    pub placed_gpu: u32,
    pub placed_cpu: u32,
    /// Replicas waiting for a place, by variant.
    pub pending_gpu: u32,
    pub pending_cpu: u32,
    /// Thousandths of a GPU one GPU replica holds (1000 a whole GPU, 250 a quarter share).
    pub gpu_milli_per_replica: u32,
    /// It has a CPU variant (flag bit 0).
    pub has_cpu_variant: bool,
    /// Deleted: every replica drains (flag bit 1).
    pub draining: bool,
    /// No load report recent enough to act on: the autoscaler holds the replicas as they are
    /// (flag bit 2).
    pub stale: bool,
}

/// The platform's priority settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct Settings {
    /// GPUs kept free for real-time inference.
    pub burst_reserve_gpus: u32,
    /// Customer-facing inference outranks training.
    pub realtime_first: bool,
    /// Seconds a workload runs before it may be preempted.
    pub min_runtime_s: u32,
    pub grace_period_s: u32,
    pub max_preemptions_per_hour: u32,
    /// Priority added to training and fine-tuning now: the host resolves the platform's night
    /// window, so this is 0 outside it.
    pub night_training_bonus: i32,
    /// Only checkpointable work may be preempted (flag bit 0 at offset 24; ABI 1.5).
    pub checkpointable_only: bool,
}

macro_rules! code_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident { $( $(#[$vmeta:meta])* $variant:ident = $code:literal => $text:literal, )* }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
        #[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )*
            /// A code this SDK does not know (sent by a newer host); policies should treat it
            /// conservatively.
            #[cfg_attr(feature = "serde", serde(untagged))]
            Unknown(u32),
        }

        impl $name {
            /// Every known value, in code order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// The code on the wire.
            pub const fn code(self) -> u32 {
                match self {
                    $($name::$variant => $code,)*
                    $name::Unknown(code) => code,
                }
            }

            /// The value for a wire code; unknown codes become `Unknown(code)`.
            pub const fn from_code(code: u32) -> Self {
                match code {
                    $($code => $name::$variant,)*
                    other => $name::Unknown(other),
                }
            }

            /// The name used in documents and logs (`"realtime_inference"`); `"unknown"` for
            /// unknown codes.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                    $name::Unknown(_) => "unknown",
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self {
                    $name::Unknown(code) => write!(f, "unknown ({code})"),
                    known => f.write_str(known.as_str()),
                }
            }
        }
    };
}

code_enum! {
    /// What kind of work a workload is.
    #[derive(Default)]
    pub enum WorkloadClass {
        /// Customer-facing, latency above all.
        RealtimeInference = 0 => "realtime_inference",
        #[default]
        BatchInference = 1 => "batch_inference",
        Training = 2 => "training",
        FineTuning = 3 => "fine_tuning",
        Quantization = 4 => "quantization",
        Embeddings = 5 => "embeddings",
        Evaluation = 6 => "evaluation",
    }
}

code_enum! {
    /// Where a workload is, as a policy sees it.
    #[derive(Default)]
    pub enum WorkloadState {
        #[default]
        Pending = 0 => "pending",
        /// Running or scheduled: it holds its resources.
        Running = 1 => "running",
        /// Being preempted or cancelled: it still holds its resources and will release them within
        /// the grace period. Preempting it again changes nothing.
        Stopping = 2 => "stopping",
    }
}

code_enum! {
    /// How a GPU is shared (ABI 1.2), as the node's agent reports it.
    #[derive(Default)]
    pub enum Sharing {
        /// Not shared: one workload holds it whole (a fractional workload placed here gets it all).
        #[default]
        None = 0 => "none",
        /// Shared without isolation.
        TimeSlicing = 1 => "time_slicing",
        /// Shared through CUDA MPS: each workload gets its share of the SMs and a memory limit.
        Mps = 2 => "mps",
        /// A MIG instance: only work asking for its profile runs on it, alone.
        Mig = 3 => "mig",
    }
}

code_enum! {
    /// What a service's load reports measure (ABI 1.3).
    #[derive(Default)]
    pub enum LoadMetric {
        /// Requests per second arriving at the service.
        #[default]
        RequestsPerSecond = 0 => "requests_per_second",
        /// Requests in flight at once.
        ConcurrentRequests = 1 => "concurrent_requests",
    }
}

code_enum! {
    /// Which of its service's templates a replica runs (ABI 1.3).
    #[derive(Default)]
    pub enum ReplicaVariant {
        /// Not a replica: a job.
        #[default]
        None = 0 => "none",
        /// The main template, on GPUs.
        Gpu = 1 => "gpu",
        /// The CPU variant.
        Cpu = 2 => "cpu",
    }
}

code_enum! {
    /// Whether a node takes work.
    #[derive(Default)]
    pub enum NodeState {
        #[default]
        Ready = 0 => "ready",
        /// Finishing its work; takes none.
        Draining = 1 => "draining",
        /// Not heard from; its work is being requeued.
        Lost = 2 => "lost",
    }
}

/// What a policy decided for one workload.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Decision<'a> {
    /// Index into the snapshot's workloads.
    pub workload: u32,
    pub action: Action,
    /// Why, in words the tenant reads ("best fit: 40 GB free on h200-3").
    pub reason: Cow<'a, str>,
}

/// The three things a policy can decide.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case", tag = "kind"))]
pub enum Action {
    /// Run it on `node`, on these GPUs (indexes into the snapshot's gpus). An empty list is a CPU
    /// placement.
    Place { node: u32, gpus: Vec<u32> },
    /// Stop it (it is requeued).
    Preempt,
    /// Leave it waiting; the reason answers "why is my job pending?".
    KeepPending,
}

impl Action {
    /// The kind code on the wire.
    pub const fn code(&self) -> u32 {
        match self {
            Action::Place { .. } => KIND_PLACE,
            Action::Preempt => KIND_PREEMPT,
            Action::KeepPending => KIND_KEEP_PENDING,
        }
    }

    /// `"place"`, `"preempt"` or `"keep_pending"`.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Action::Place { .. } => "place",
            Action::Preempt => "preempt",
            Action::KeepPending => "keep_pending",
        }
    }
}

impl<'a> Decision<'a> {
    /// Place `workload` on `node` using `gpus` (empty: a CPU placement).
    pub fn place(workload: u32, node: u32, gpus: Vec<u32>, reason: impl Into<Cow<'a, str>>) -> Self {
        Decision { workload, action: Action::Place { node, gpus }, reason: reason.into() }
    }

    /// Preempt `workload`.
    pub fn preempt(workload: u32, reason: impl Into<Cow<'a, str>>) -> Self {
        Decision { workload, action: Action::Preempt, reason: reason.into() }
    }

    /// Keep `workload` pending.
    pub fn keep_pending(workload: u32, reason: impl Into<Cow<'a, str>>) -> Self {
        Decision { workload, action: Action::KeepPending, reason: reason.into() }
    }

    /// The same decision, owning its reason.
    pub fn into_owned(self) -> Decision<'static> {
        Decision { workload: self.workload, action: self.action, reason: Cow::Owned(self.reason.into_owned()) }
    }
}
