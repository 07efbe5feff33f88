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

#[macro_use]
pub mod layout;
mod decode;
mod encode;
mod error;
#[cfg(not(target_arch = "wasm32"))]
pub mod generate;

pub use decode::{decode_decisions, decode_snapshot, validate_decisions};
pub use encode::{encode_decisions, encode_snapshot, try_encode_decisions, try_encode_snapshot};
pub use error::{AbiError, BufferKind, Location, Table};

/// The ABI version this SDK speaks; a module's `airtime_abi_version` export returns it.
pub const ABI_VERSION: u32 = 1;
/// The minor version of this SDK's records (1.9: the shapes of work the scope was asked for
/// lately, the arrivals table, so placement knows what typically comes next from a cycle's
/// first placement on; 1.8: a service's load may be measured in tokens per
/// second; 1.7: a tenant's GPU limit; 1.6: gangs across nodes — a workload's gang, its
/// rank and size; 1.5: the preemption rules a policy needs to propose
/// only what the host accepts — a workload's preemptions in the last hour and checkpointable-only;
/// 1.4: container workloads and the nodes that run them,
/// as flag bits; 1.3: elastic inference services). Minor versions only append fields or flag bits
/// (tables carry their stride; 1.3 appends the services table's descriptor after the 88 header
/// bytes earlier guests read), so guests built for 1.0 to 1.5 keep working.
pub const ABI_MINOR_VERSION: u32 = 9;
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
pub const SNAPSHOT_HEADER_SIZE: usize = SNAPSHOT_HEADER.size;
/// Size of the header guests before ABI 1.3 read.
pub const SNAPSHOT_HEADER_SIZE_1_2: usize = 88;
/// Size of a tenant record (the minimum stride of the tenants table).
pub const TENANT_SIZE: usize = Tenant::LAYOUT.size;
/// Size of a node record.
pub const NODE_SIZE: usize = Node::LAYOUT.size;
/// Size of a GPU record.
pub const GPU_SIZE: usize = Gpu::LAYOUT.size;
/// Size of a workload record.
pub const WORKLOAD_SIZE: usize = Workload::LAYOUT.size;
/// Size of the settings record.
pub const SETTINGS_SIZE: usize = Settings::LAYOUT.size;
/// Size of a service record (ABI 1.3).
pub const SERVICE_SIZE: usize = Service::LAYOUT.size;
/// Size of an arrival record (ABI 1.9).
pub const ARRIVAL_SIZE: usize = Arrival::LAYOUT.size;
/// Size of the decision buffer header (magic and count).
pub const DECISIONS_HEADER_SIZE: usize = 8;
/// Size of a decision record.
pub const DECISION_SIZE: usize = DECISION.size;

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
    /// The shapes of work the scope was asked for lately and how often (ABI 1.9): the host's
    /// record of arrivals, which outlives the queue — what placement by fragmentation weighs
    /// ([`crate::frag::Workmix::of`]). Empty from hosts that keep none.
    pub arrivals: Vec<Arrival<'a>>,
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
            arrivals: Vec::new(),
        }
    }
}

abi_records! {
    /// A team with a GPU quota.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Tenant<'a> {
        table: Tenants, size: 40, c: "TENANT" "tenant",
        owned: OwnedTenant as_tenant,
        caption: "Tenant, {size} bytes (1.0 and 1.1 guests read the first 32)",
        reserved: [],
    } {
        name: str @ 0,
        guaranteed_gpus: u32 @ 8,
        weight: u32 @ 12,
        /// GPUs its running workloads hold now.
        running_gpus: u32 @ 16,
        /// Higher is more important.
        tier: i32 @ 20,
        /// Usage history, half-life decayed.
        decayed_gpu_hours: f32 @ 24,
        /// May borrow idle capacity beyond `guaranteed_gpus`.
        may_borrow: bit(0) @ 28,
        /// ABI 1.2: what its running workloads hold now, in thousandths of a GPU (a quarter share
        /// counts 250, a MIG instance its share of the GPU's seven compute slices, 142 for `1g`);
        /// `running_gpus` is this rounded up, for guests that count whole GPUs.
        running_gpu_milli: u32 @ 32,
        /// ABI 1.7: the most GPUs its work may hold at once, borrowed or not; 0 for no limit
        /// (what hosts before 1.7 leave here). The host's checker refuses a placement past it.
        gpu_limit: u32 @ 36,
    }

    /// A server.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Node<'a> {
        table: Nodes, size: 48, c: "NODE" "node",
        owned: OwnedNode as_node,
        validate: gpu_range_fits,
        caption: "Node, {size} bytes",
        reserved: [],
    } {
        name: ustr @ 0,
        /// Whether it takes work (draining: cordoned or drained by an operator, and the host
        /// refuses a placement there).
        state: code(NodeState) @ 8,
        /// Total CPU, in thousandths of a core.
        cpu_millis: u32 @ 12,
        /// CPU not reserved by running workloads.
        cpu_millis_free: u32 @ 16,
        /// Total memory, MiB.
        memory_mb: u32 @ 20,
        memory_mb_free: u32 @ 24,
        /// Index of its first GPU in the gpus table.
        gpu_first: u32 @ 28,
        /// Number of GPUs; they are `gpu_first .. gpu_first + gpu_count`.
        gpu_count: u32 @ 32,
        /// USD per hour.
        cost_per_hour: f32 @ 36,
        /// Live CPU utilisation, 0..1.
        cpu_util: f32 @ 40,
        /// Its GPUs are simulated.
        simulated: bit(0) @ 44,
        /// ABI 1.4: it has a container engine, so it can run container workloads.
        containers: bit(1) @ 44,
    }

    /// One GPU, or one MIG instance of a GPU (ABI 1.2: `sharing` is [`Sharing::Mig`]).
    #[derive(Debug, Clone, PartialEq)]
    pub struct Gpu<'a> {
        table: Gpus, size: 64, c: "GPU" "gpu",
        owned: OwnedGpu as_gpu,
        caption: "GPU, {size} bytes (1.0 and 1.1 guests read the first 40). A record is a whole GPU or a MIG instance",
        reserved: [],
    } {
        /// Index of its node in the nodes table.
        node: to(Nodes) @ 0,
        /// Position on its node, as `CUDA_VISIBLE_DEVICES` counts.
        device_index: u32 @ 4,
        model: str @ 8,
        /// Total memory, MiB.
        memory_mb: u32 @ 16,
        /// Memory in use now (live telemetry), MiB.
        memory_used_mb: u32 @ 20,
        /// Live utilisation, 0..1.
        util: f32 @ 24,
        /// GPUs with the same value share an NVLink domain; `NONE` when unknown.
        nvlink_group: opt @ 28,
        /// The workload (index) holding it; `NONE` when free. A GPU shared by several workloads
        /// names the first of them, so a guest that knows nothing of sharing sees it as held.
        holder: index(Workloads) @ 32,
        /// Simulated.
        simulated: bit(0) @ 36,
        /// ABI 1.2: how it is shared.
        sharing: code(Sharing) @ 40,
        /// ABI 1.2: thousandths of it no workload holds (1000 when free, 0 when held whole).
        free_milli: u32 @ 44 = WHOLE_GPU_MILLI,
        /// ABI 1.2: GPU memory reserved by the memory slices of the workloads sharing it, MiB.
        memory_reserved_mb: u32 @ 48,
        /// ABI 1.2: how many workloads hold a share of it.
        sharers: u32 @ 52,
        /// ABI 1.2: a MIG instance's profile (`1g.10gb`); empty for a whole GPU.
        mig_profile: str @ 56,
    }

    /// A pending or running workload.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Workload<'a> {
        table: Workloads, size: 128, c: "WORKLOAD" "workload",
        owned: OwnedWorkload as_workload,
        caption: "Workload, {size} bytes (pending and running workloads of the scope; 1.0 and 1.1 guests read 88, 1.2 guests 104, 1.3 to 1.5 guests 112)",
        reserved: [reserved_2 @ 100],
    } {
        /// UUID text.
        id: ustr @ 0,
        name: ustr @ 8,
        /// Index of its tenant in the tenants table.
        tenant: to(Tenants) @ 16,
        class: code(WorkloadClass) @ 20 as "class_",
        /// Where it is (running: or scheduled; stopping: being preempted or cancelled, still
        /// holding its GPUs).
        state: code(WorkloadState) @ 24,
        /// Higher first.
        priority: i32 @ 28,
        gpu_count: u32 @ 32,
        /// GPU memory needed on each GPU, MiB.
        gpu_memory_mb: u32 @ 36,
        /// Comma-separated allowed GPU models; empty allows any. See [`Workload::allows_model`].
        gpu_models: str @ 40,
        /// Host CPU needed on the node by any placement, GPU or CPU, in thousandths of a core.
        cpu_millis: u32 @ 48,
        /// Host memory needed, MiB.
        memory_mb: u32 @ 52,
        /// Unix ms.
        submitted_ms: u64 @ 56,
        /// Unix ms; 0 when not running.
        started_ms: u64 @ 64,
        /// The node it runs on (running only; `NONE` otherwise).
        node: index(Nodes) @ 72,
        /// May be preempted.
        preemptible: bit(0) @ 76,
        /// Can checkpoint and resume.
        checkpointable: bit(1) @ 76,
        /// Can run on CPU only.
        cpu_capable: bit(2) @ 76,
        /// All its GPUs must be on one node (it asks for more than one): every placement names one
        /// node, so every placement satisfies it. A workload spanning nodes is a gang of members
        /// instead (`gang_size`, ABI 1.6).
        gang: bit(3) @ 76,
        /// Expected duration in seconds; 0 when unknown.
        expected_duration_s: u32 @ 80,
        /// ABI 1.2: its share of each GPU, in thousandths: 1000 for whole GPUs, less for a fraction
        /// of one GPU (then `gpu_count` is 1 and `gpu_memory_mb` is its memory slice).
        gpu_milli: u32 @ 88 = WHOLE_GPU_MILLI,
        /// ABI 1.2: the MIG profile it must run on (`1g.10gb`); empty when it asks for none.
        mig_profile: str @ 92,
        /// ABI 1.3: the service (index into the services table) it is a replica of; `NONE` for a
        /// job.
        service: index(Services) @ 104,
        /// ABI 1.3: which of its service's templates a replica runs; `none` for a job.
        replica_variant: code(ReplicaVariant) @ 108,
        /// ABI 1.4: runs in an OCI image, so only a node with its `containers` bit can take it.
        container: bit(4) @ 76,
        /// ABI 1.5: times it was preempted in the last hour: at the settings'
        /// `max_preemptions_per_hour` the host refuses to preempt it again (0 from older hosts).
        preemptions_last_hour: u32 @ 84,
        /// ABI 1.6: members of the gang across nodes it belongs to (0 or 1: it runs on one node).
        /// Each member is a workload of its own asking for the same resources; the host accepts a
        /// member's placement only when every member of the gang is placed in the same
        /// evaluation, each on a node of its own (all or none).
        gang_size: u32 @ 112,
        /// ABI 1.6: its rank in its gang, `0 .. gang_size`.
        gang_rank: u32 @ 116,
        /// ABI 1.6: its gang's id (the rank-0 member's workload id); empty when not in a gang.
        gang_id: str @ 120,
    }

    /// An elastic inference service (ABI 1.3): a tenant's inference that runs as replicas, with what
    /// the host's autoscaler plans for it this cycle. The host has already started the replicas the
    /// plan adds (they are pending workloads of this snapshot) and drained those it removes; a policy
    /// places the pending ones like any workload, its own way, and the host checks those placements
    /// like any other.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Service<'a> {
        table: Services, size: 80, c: "SERVICE" "service",
        owned: OwnedService as_service,
        caption: "Service, {size} bytes (1.3; the scope's elastic inference services, with the autoscaler's plan for this cycle; a tenant's scope holds only its own)",
        reserved: [reserved @ 76],
    } {
        name: str @ 0,
        /// Index of its tenant in the tenants table.
        tenant: to(Tenants) @ 8,
        /// The class of its replicas.
        class: code(WorkloadClass) @ 12 as "class_",
        /// What its load reports measure.
        metric: code(LoadMetric) @ 16,
        min_replicas: u32 @ 20,
        max_replicas: u32 @ 24,
        /// Load one GPU replica carries at the latency target, in the service's metric.
        capacity: f32 @ 28,
        /// Load one CPU replica carries; 0 when it has no CPU variant.
        cpu_capacity: f32 @ 32,
        /// The load the autoscaler provisions for (stabilised, with burst headroom); 0 while the
        /// reports are stale or the service drains.
        demand: f32 @ 36,
        /// The newest report's load; 0 when none has come.
        latest: f32 @ 40,
        /// GPU replicas the autoscaler wants.
        desired_gpu: u32 @ 44,
        /// CPU replicas the autoscaler wants.
        desired_cpu: u32 @ 48,
        /// GPU replicas placed now (scheduled or running).
        placed_gpu: u32 @ 52,
        /// CPU replicas placed now.
        placed_cpu: u32 @ 56,
        /// GPU replicas waiting for a place.
        pending_gpu: u32 @ 60,
        /// CPU replicas waiting for a place.
        pending_cpu: u32 @ 64,
        /// Thousandths of a GPU one GPU replica holds (1000 a whole GPU, 250 a quarter share).
        gpu_milli_per_replica: u32 @ 68,
        /// It has a CPU variant.
        has_cpu_variant: bit(0) @ 72 as "CPU_VARIANT",
        /// Deleted: every replica drains.
        draining: bit(1) @ 72,
        /// No load report recent enough to act on: the autoscaler holds the replicas as they are.
        stale: bit(2) @ 72,
    }

    /// A shape of work and how many workloads of it were submitted lately (ABI 1.9).
    #[derive(Debug, Clone, PartialEq)]
    pub struct Arrival<'a> {
        table: Arrivals, size: 24, c: "ARRIVAL" "arrival",
        owned: OwnedArrival as_arrival,
        caption: "Arrival, {size} bytes (1.9; the shapes of work the scope was asked for lately, e.g. the last week's submissions, most frequent first)",
        reserved: [],
    } {
        /// Thousandths of each GPU: 1000 for whole GPUs, less for a share of one; 0 without GPUs.
        gpu_milli: u32 @ 0,
        /// GPUs, all on one node; 0 for work without GPUs.
        gpu_count: u32 @ 4,
        /// Host CPU, thousandths of a core.
        cpu_millis: u32 @ 8,
        /// How many workloads of this shape were submitted.
        count: u32 @ 12,
        /// The GPU models it may use, comma-separated; empty for any.
        gpu_models: str @ 16,
    }

    /// The platform's priority settings.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
    #[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
    pub struct Settings {
        table: Settings, size: 32, c: "SETTINGS" "settings",
        caption: "Settings, {size} bytes (the platform's priority settings; see the scheduling model)",
        reserved: [reserved @ 28],
    } {
        /// GPUs kept free for real-time inference.
        burst_reserve_gpus: u32 @ 0,
        /// Customer-facing inference outranks training.
        realtime_first: flag @ 4,
        /// Seconds a workload runs before it may be preempted.
        min_runtime_s: u32 @ 8,
        grace_period_s: u32 @ 12,
        max_preemptions_per_hour: u32 @ 16,
        /// Priority added to training and fine-tuning now: the host resolves the platform's night
        /// window, so this is 0 outside it.
        night_training_bonus: i32 @ 20,
        /// ABI 1.5: only checkpointable work may be preempted.
        checkpointable_only: bit(0) @ 24,
    }
}

abi_layout! {
    /// The snapshot header: the tables, the time and the scope. 1.3 appended the services table's
    /// descriptor and a reserved word after the 88 bytes earlier guests read; 1.9 the arrivals
    /// table's and another reserved word after the 104 bytes 1.3 to 1.8 guests read.
    pub const SNAPSHOT_HEADER = "Snapshot header" {
        size: 120, c: "SNAP" "AIRTIME_SNAPSHOT_HEADER_SIZE",
        caption: "Header, {size} bytes (1.0 to 1.2 guests read the first 88, 1.3 to 1.8 the first 104)",
    } {
        /// `"ATSN"`.
        magic: magic @ 0,
        /// = 1.
        abi_version: u32 @ 4,
        /// Unix ms, given by the host (the guest has no clock).
        now_ms: u64 @ 8,
        tenants: table(Tenants) @ 16,
        nodes: table(Nodes) @ 28,
        gpus: table(Gpus) @ 40,
        workloads: table(Workloads) @ 52,
        /// 0 or 1 record.
        settings: table(Settings) @ 64,
        /// The policy's JSON configuration, `{}` when none.
        params: str @ 76,
        /// The tenant (index) this evaluation is for; `NONE` for the platform scope.
        scope_tenant: index(Tenants) @ 84,
        /// ABI 1.3: elastic inference services.
        services: table(Services) @ 88,
        /// 0; keeps the tables 8-aligned.
        reserved: reserved @ 100,
        /// ABI 1.9: the shapes of work asked for lately.
        arrivals: table(Arrivals) @ 104,
        /// 0; keeps the tables 8-aligned.
        reserved_1_9: reserved @ 116,
    }
}

abi_layout! {
    /// A decision record, after the decision buffer's 8-byte header (magic `"ATDC"`, count).
    pub const DECISION = "Decision" {
        size: 32, c: "DECISION" "AIRTIME_DECISION_SIZE",
        caption: "Header, 8 bytes: magic `\"ATDC\"`, then `count: u32`. Then `count` records of {size} bytes",
    } {
        /// 1 place, 2 preempt, 3 keep pending.
        kind: u32 @ 0,
        /// Index into the snapshot's workloads.
        workload: u32 @ 4,
        /// Node index; place only, else `NONE`.
        node: u32 @ 8,
        /// 0.
        reserved: reserved @ 12,
        /// `{offset, len}` of a `u32` array of GPU indexes (into the gpus table) in this buffer; `len`
        /// counts GPUs, not bytes. Empty for a CPU placement.
        gpus: u32list @ 16,
        /// Why, in words a tenant reads ("best fit: 40 GB free on h200-3").
        reason: str @ 24,
    }
}

/// Every record of the snapshot, in header order, then the decision record: what the C header's
/// layout section and the document's tables are generated from.
pub const LAYOUTS: [&layout::RecordLayout; 9] = [
    &SNAPSHOT_HEADER,
    &Tenant::LAYOUT,
    &Node::LAYOUT,
    &Gpu::LAYOUT,
    &Workload::LAYOUT,
    &Settings::LAYOUT,
    &Service::LAYOUT,
    &Arrival::LAYOUT,
    &DECISION,
];

/// Every enumeration the records carry.
pub const ENUMS: [&layout::EnumLayout; 6] = [
    &NodeState::LAYOUT,
    &WorkloadState::LAYOUT,
    &WorkloadClass::LAYOUT,
    &Sharing::LAYOUT,
    &LoadMetric::LAYOUT,
    &ReplicaVariant::LAYOUT,
];

/// A node's GPU range lies inside the gpus table (checked when a node is decoded).
fn gpu_range_fits(node: &Node<'_>, index: u32, counts: &layout::Counts) -> Result<(), AbiError> {
    if u64::from(node.gpu_first) + u64::from(node.gpu_count) > counts.gpus as u64 {
        return Err(AbiError::GpuRangeOutOfRange {
            node: index,
            gpu_first: node.gpu_first,
            gpu_count: node.gpu_count,
            gpus: counts.gpus,
        });
    }
    Ok(())
}

macro_rules! code_enum {
    (
        $(#[doc = $doc:literal])*
        pub enum $name:ident (c $c_name:literal $c_prefix:literal, default $default:ident) {
            $( $(#[doc = $vdoc:literal])* $variant:ident = $code:literal => $text:literal, )*
        }
    ) => {
        $(#[doc = $doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
        #[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
        pub enum $name {
            $( $(#[doc = $vdoc])* $variant, )*
            /// A code this SDK does not know (sent by a newer host); policies should treat it
            /// conservatively.
            #[cfg_attr(feature = "serde", serde(untagged))]
            Unknown(u32),
        }

        impl Default for $name {
            fn default() -> Self {
                $name::$default
            }
        }

        impl $name {
            /// Every known value, in code order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// Its declaration: codes, names and documentation of its values.
            pub const LAYOUT: layout::EnumLayout = layout::EnumLayout {
                name: stringify!($name),
                doc: concat!($($doc, "\n"),*),
                c_name: $c_name,
                c_prefix: $c_prefix,
                values: &[$(($code, $text, concat!($($vdoc, "\n"),*))),*],
            };

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
    pub enum WorkloadClass (c "airtime_workload_class" "CLASS", default BatchInference) {
        /// Customer-facing, latency above all.
        RealtimeInference = 0 => "realtime_inference",
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
    pub enum WorkloadState (c "airtime_workload_state" "WORKLOAD", default Pending) {
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
    pub enum Sharing (c "airtime_sharing" "SHARING", default None) {
        /// Not shared: one workload holds it whole (a fractional workload placed here gets it all).
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
    pub enum LoadMetric (c "airtime_load_metric" "METRIC", default RequestsPerSecond) {
        /// Requests per second arriving at the service.
        RequestsPerSecond = 0 => "requests_per_second",
        /// Requests in flight at once.
        ConcurrentRequests = 1 => "concurrent_requests",
        /// Tokens per second, prompt and generated (ABI 1.8: a service priced per token).
        TokensPerSecond = 2 => "tokens_per_second",
    }
}

code_enum! {
    /// Which of its service's templates a replica runs (ABI 1.3).
    pub enum ReplicaVariant (c "airtime_replica_variant" "REPLICA", default None) {
        /// Not a replica: a job.
        None = 0 => "none",
        /// The main template, on GPUs.
        Gpu = 1 => "gpu",
        /// The CPU variant.
        Cpu = 2 => "cpu",
    }
}

code_enum! {
    /// Whether a node takes work.
    pub enum NodeState (c "airtime_node_state" "NODE", default Ready) {
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
