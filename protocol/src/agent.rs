//! The agent protocol's messages, both ways: enrolment, registration, telemetry (the heartbeat),
//! the desired state (the assignments long-poll) and workload events. What the control plane
//! receives refuses unknown fields; what the agent receives tolerates them (a newer control plane
//! may add fields, and an assignment action an agent does not know is [`AssignmentAction::Unknown`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::container::{ContainerEngine, ContainerSpec};
use crate::model::GpuModel;
use crate::sharing::{GpuSharing, MigProfile, WHOLE_GPU_MILLI};

/// The agent protocol's version, `major.minor`. A control plane accepts agents of its own
/// version and of every earlier minor version ([`accepts_protocol`]), so a fleet upgrades node by
/// node after its control planes. 1.0: agents before versioning (they send none). 1.1: a
/// registration lists the attempts the agent runs ([`Registration::running`]), which the control
/// plane keeps instead of requeueing. 1.2: gangs — a registration may advertise the node's
/// address ([`Registration::address`]), and a gang member's assignment carries its rendezvous
/// ([`Assignment::gang`]), held until every member's node has it. 1.3: serving replicas — a
/// service replica's assignment says where its server answers ([`Assignment::serving`]), and the
/// heartbeat carries what the agent read there ([`TelemetryReport::replicas`]).
pub const PROTOCOL_VERSION: (u32, u32) = (1, 3);

/// The protocol version as the agent sends it.
pub fn protocol_version() -> String {
    format!("{}.{}", PROTOCOL_VERSION.0, PROTOCOL_VERSION.1)
}

/// Whether this control plane speaks with an agent of `version` (absent: 1.0): any earlier minor
/// version of its major (every minor only adds optional fields, so the control plane keeps
/// speaking each older dialect), never a newer one. The refusal says which side to upgrade.
pub fn accepts_protocol(version: Option<&str>) -> Result<(u32, u32), String> {
    let (major, minor) = match version {
        None => (1, 0),
        // Only the canonical text (`1.1`, no sign, no leading zeros), which is what is stored.
        Some(v) => v
            .split_once('.')
            .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)))
            .filter(|(a, b)| format!("{a}.{b}") == v)
            .ok_or_else(|| format!("protocol must be MAJOR.MINOR, not {v:?}"))?,
    };
    let (our_major, our_minor) = PROTOCOL_VERSION;
    if major != our_major || minor > our_minor {
        return Err(format!(
            "this control plane speaks agent protocol {our_major}.{our_minor} and the agent {major}.{minor}: \
             upgrade the control plane first"
        ));
    }
    Ok((major, minor))
}

/// An attempt an agent runs, as it tells the control plane when it registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RunningAttempt {
    pub workload_id: Uuid,
    pub attempt: u32,
}

/// Where a node's GPU inventory came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "sqlx", derive(sqlx::Type), sqlx(type_name = "text", rename_all = "snake_case"))]
#[serde(rename_all = "snake_case")]
pub enum GpuSource {
    Nvml,
    /// Advertised by `--simulate-gpus`: for demos and load tests, never real hardware.
    Simulated,
    None,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Registration {
    pub name: String,
    pub hostname: String,
    pub cpu_millis: u32,
    pub memory_mb: u64,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub cost_per_hour: Option<f64>,
    pub agent_version: String,
    pub gpu_source: GpuSource,
    #[serde(default)]
    pub gpus: Vec<GpuInventory>,
    /// The container engine the agent runs container workloads with; absent: the node runs no
    /// container work (the scheduler places none there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_engine: Option<ContainerEngine>,
    /// The agent protocol the agent speaks (`major.minor`, [`PROTOCOL_VERSION`]); absent: 1.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// The attempts the agent runs as it registers: workloads an earlier agent process of the
    /// node started and this one adopted. The control plane keeps those of them it still
    /// places on this node and requeues the node's other work. (Protocol 1.1.)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub running: Vec<RunningAttempt>,
    /// Where the other members of a gang reach this node: an IP address or a host name (the
    /// agent's `--advertise-address`). Absent: the node's `hostname`. (Protocol 1.2.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

/// Longest advertised address kept, in characters.
pub const MAX_ADDRESS_CHARS: usize = 255;

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GpuInventory {
    pub index: u32,
    #[serde(default)]
    pub uuid: Option<String>,
    pub model: GpuModel,
    pub memory_mb: u64,
    #[serde(default)]
    pub nvlink_group: Option<u32>,
    pub simulated: bool,
    /// How this device is shared (absent: not shared, as agents before GPU sharing report).
    #[serde(default)]
    pub sharing: GpuSharing,
    /// The MIG instance's profile; set exactly when `sharing` is `mig`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_profile: Option<MigProfile>,
    /// The physical GPU a MIG instance is carved from (its NVML index).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_index: Option<u32>,
    /// Why the node could not honour the sharing mode it was asked for ("MPS control daemon not
    /// found: GPUs are time-sliced"), said once at registration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharing_note: Option<String>,
}

/// Longest sharing note kept, in characters.
pub const MAX_SHARING_NOTE_CHARS: usize = 500;

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TelemetryReport {
    pub cpu_util: f32,
    pub memory_used_mb: u64,
    #[serde(default)]
    pub gpus: Vec<GpuSample>,
    /// Per workload and GPU, from the GPU's per-process accounting (NVML) or the simulation: what
    /// each share of a shared GPU uses, so its busy time is attributed to the workloads on it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shares: Vec<ShareSample>,
    /// Per serving replica on the node: whether its readiness endpoint answers and what its
    /// metrics endpoint says (vLLM's format), read by the agent since the last heartbeat.
    /// (Protocol 1.3.)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<crate::serving::ReplicaSample>,
}

/// What one workload's processes use of one GPU.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ShareSample {
    pub workload_id: Uuid,
    /// The GPU's index in the node's inventory.
    pub gpu_index: u32,
    /// SM utilisation of its processes, 0..1.
    #[serde(default)]
    pub util: Option<f32>,
    #[serde(default)]
    pub memory_used_mb: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GpuSample {
    pub index: u32,
    #[serde(default)]
    pub util: Option<f32>,
    #[serde(default)]
    pub memory_used_mb: Option<u64>,
    #[serde(default)]
    pub temperature_c: Option<f32>,
    #[serde(default)]
    pub power_w: Option<f32>,
    #[serde(default)]
    pub ecc_errors: Option<u64>,
    /// What NVML says is wrong with the device now (absent: nothing). Any fault quarantines the
    /// GPU: it takes no new work and its workloads are stopped and requeued. (Protocol 1.1.)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<GpuFault>,
    /// Why the device's clocks are held down now, of the reasons that mean heat or power (absent:
    /// none). A warning, not a fault: the GPU keeps its work, slower. (Protocol 1.1.)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub throttle: Vec<GpuThrottle>,
}

/// Why a GPU's clocks are held down (NVML's clock-event reasons that mean heat or power; the idle,
/// application-clock and sync-boost reasons are not warnings and are not reported).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum GpuThrottle {
    /// The board's power limit (the software power cap).
    PowerCap,
    /// The driver slows the clocks for heat.
    SwThermal,
    /// The hardware slows the clocks for heat.
    HwThermal,
    /// The hardware power brake (an external signal, such as the power supply's).
    HwPowerBrake,
    /// The hardware slows the clocks (heat or power), the cause not told apart.
    HwSlowdown,
}

impl GpuThrottle {
    pub const ALL: [GpuThrottle; 5] =
        [Self::PowerCap, Self::SwThermal, Self::HwThermal, Self::HwPowerBrake, Self::HwSlowdown];

    /// Its name on the wire, in the database and in metrics' labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PowerCap => "power_cap",
            Self::SwThermal => "sw_thermal",
            Self::HwThermal => "hw_thermal",
            Self::HwPowerBrake => "hw_power_brake",
            Self::HwSlowdown => "hw_slowdown",
        }
    }

    pub fn parse(name: &str) -> Option<GpuThrottle> {
        Self::ALL.into_iter().find(|t| t.as_str() == name)
    }
}

/// A fault of a GPU, as the agent reads it from NVML (or is told to simulate it).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GpuFault {
    pub kind: GpuFaultKind,
    /// The XID code, or the count of uncorrectable errors; absent for the other kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<u64>,
}

/// What kind of fault: a critical XID event, uncorrectable ECC errors (volatile count), retired
/// pages pending a reset, or a device that fell off the bus (NVML answers `GPU_IS_LOST`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum GpuFaultKind {
    Xid,
    EccUncorrectable,
    RetiredPagesPending,
    FallenOffBus,
}

impl GpuFault {
    /// "XID 79", "12 uncorrectable ECC errors", …: what an operator reads in a pending reason.
    pub fn describe(&self) -> String {
        match (self.kind, self.code) {
            (GpuFaultKind::Xid, Some(code)) => format!("XID {code}"),
            (GpuFaultKind::Xid, None) => "an XID error".to_owned(),
            (GpuFaultKind::EccUncorrectable, Some(n)) => format!("{n} uncorrectable ECC errors"),
            (GpuFaultKind::EccUncorrectable, None) => "uncorrectable ECC errors".to_owned(),
            (GpuFaultKind::RetiredPagesPending, _) => "retired memory pages pending a reset".to_owned(),
            (GpuFaultKind::FallenOffBus, _) => "fallen off the bus".to_owned(),
        }
    }
}

/// A precise reason a registration or report is refused (answered 422, nothing written).
pub fn check_registration(r: &Registration) -> Result<(), String> {
    if r.name.is_empty() || r.name.len() > 253 || r.name.chars().any(|c| c.is_control()) {
        return Err("name must be 1 to 253 printable characters".into());
    }
    if r.cpu_millis == 0 || i32::try_from(r.cpu_millis).is_err() {
        return Err("cpu_millis must be between 1 and 2147483647".into());
    }
    if i64::try_from(r.memory_mb).is_err() {
        return Err("memory_mb is out of range".into());
    }
    if let Some(cost) = r.cost_per_hour
        && !(cost.is_finite() && cost >= 0.0)
    {
        return Err("cost_per_hour must be a non-negative number".into());
    }
    if r.gpus.len() > 64 {
        return Err("a node may advertise at most 64 GPUs".into());
    }
    let mut seen = std::collections::BTreeSet::new();
    for gpu in &r.gpus {
        if (gpu.sharing == GpuSharing::Mig) != gpu.mig_profile.is_some() {
            return Err(format!(
                "GPU {}: a MIG instance (sharing \"mig\") names its mig_profile, and only it",
                gpu.index
            ));
        }
        if gpu.parent_index.is_some() && gpu.sharing != GpuSharing::Mig {
            return Err(format!("GPU {}: only a MIG instance has a parent_index", gpu.index));
        }
        if gpu
            .sharing_note
            .as_ref()
            .is_some_and(|n| n.chars().count() > MAX_SHARING_NOTE_CHARS || n.chars().any(char::is_control))
        {
            return Err(format!(
                "GPU {}: sharing_note must be at most {MAX_SHARING_NOTE_CHARS} printable characters",
                gpu.index
            ));
        }
        if !seen.insert(gpu.index) {
            return Err(format!("GPU index {} is listed twice", gpu.index));
        }
        if gpu.index > 63 {
            return Err(format!("GPU index {} is out of range (0..=63)", gpu.index));
        }
        if i64::try_from(gpu.memory_mb).is_err() {
            return Err(format!("GPU {}: memory_mb is out of range", gpu.index));
        }
    }
    if r.gpu_source == GpuSource::None && !r.gpus.is_empty() {
        return Err("gpu_source \"none\" cannot list GPUs".into());
    }
    if let Some(engine) = &r.container_engine {
        engine.check()?;
    }
    accepts_protocol(r.protocol.as_deref())?;
    if r.running.len() > MAX_RUNNING_ATTEMPTS {
        return Err(format!("a registration lists at most {MAX_RUNNING_ATTEMPTS} running attempts"));
    }
    if r.running.iter().any(|a| a.attempt == 0 || i32::try_from(a.attempt).is_err()) {
        return Err("a running attempt's number must be between 1 and 2147483647".into());
    }
    if let Some(address) = &r.address {
        let ok = !address.is_empty()
            && address.len() <= MAX_ADDRESS_CHARS
            && address.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '_'));
        if !ok {
            return Err(format!(
                "address must be an IP address or a host name (letters, digits, '.', '-', ':', '_'; at most \
                 {MAX_ADDRESS_CHARS}), not {address:?}"
            ));
        }
    }
    Ok(())
}

/// The most running attempts a registration lists.
pub const MAX_RUNNING_ATTEMPTS: usize = 4096;

pub fn check_telemetry(t: &TelemetryReport) -> Result<(), String> {
    let unit = |v: f32| v.is_finite() && (0.0..=1.0).contains(&v);
    if !unit(t.cpu_util) {
        return Err("cpu_util must be between 0 and 1".into());
    }
    for g in &t.gpus {
        // Stored as signed integers: a value past their range would be stored wrong, not refused.
        let in_range = |v: Option<u64>| v.is_none_or(|v| i64::try_from(v).is_ok());
        if g.index > 63 || !in_range(g.memory_used_mb) || !in_range(g.ecc_errors) {
            return Err(format!("GPU {}: index (0..=63), memory_used_mb or ecc_errors is out of range", g.index));
        }
        if g.faults.len() > 8 || g.faults.iter().any(|f| !in_range(f.code)) {
            return Err(format!("GPU {}: at most 8 faults, each code within range", g.index));
        }
        if g.throttle.len() > GpuThrottle::ALL.len() {
            return Err(format!("GPU {}: at most {} throttle reasons", g.index, GpuThrottle::ALL.len()));
        }
        if let Some(u) = g.util
            && !unit(u)
        {
            return Err(format!("GPU {}: util must be between 0 and 1", g.index));
        }
        for (name, v) in [("temperature_c", g.temperature_c), ("power_w", g.power_w)] {
            if let Some(v) = v
                && !v.is_finite()
            {
                return Err(format!("GPU {}: {name} must be a finite number", g.index));
            }
        }
    }
    if i64::try_from(t.memory_used_mb).is_err() {
        return Err("memory_used_mb is out of range".into());
    }
    if t.replicas.len() > crate::serving::MAX_REPLICA_SAMPLES {
        return Err(format!("at most {} replica samples per report", crate::serving::MAX_REPLICA_SAMPLES));
    }
    for r in &t.replicas {
        r.check().map_err(|m| format!("replica {}: {m}", r.workload_id))?;
    }
    if t.shares.len() > 64 * 64 {
        return Err("at most 4096 share samples per report".into());
    }
    for s in &t.shares {
        if s.gpu_index > 63 || s.memory_used_mb.is_some_and(|m| i64::try_from(m).is_err()) {
            return Err(format!(
                "share of {} on GPU {}: gpu_index (0..=63) or memory_used_mb is out of range",
                s.workload_id, s.gpu_index
            ));
        }
        if let Some(u) = s.util
            && !unit(u)
        {
            return Err(format!("share of {} on GPU {}: util must be between 0 and 1", s.workload_id, s.gpu_index));
        }
    }
    Ok(())
}

/// `POST /api/v1/agent/enrol`: a one-time enrolment token for the node's own credential.
#[derive(Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EnrolRequest {
    #[cfg_attr(feature = "openapi", schema(format = Password))]
    pub enrolment_token: String,
    /// The node's name, as it will register.
    pub name: String,
}

impl std::fmt::Debug for EnrolRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnrolRequest").field("name", &self.name).finish_non_exhaustive()
    }
}

/// Answer to an enrolment: the node's own credential, shown this once.
#[derive(Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Enrolled {
    /// Keep it (the agent stores it in its state directory) and send it as
    /// `Authorization: Bearer <credential>`.
    pub credential: String,
    pub credential_id: Uuid,
    pub node_name: String,
}

impl std::fmt::Debug for Enrolled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Enrolled")
            .field("credential_id", &self.credential_id)
            .field("node_name", &self.node_name)
            .finish_non_exhaustive()
    }
}

/// Answer to a registration.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Registered {
    pub node_id: Uuid,
    pub heartbeat_interval_ms: u64,
    /// The node's lease: after this long without a delivered heartbeat the control plane counts
    /// the node lost, and the agent stops its workloads (fencing) unless told to keep them. Absent
    /// from control planes before fencing; the agent then uses its own `--lease-ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
}

/// Answer to the assignments long-poll: the node's whole desired state.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DesiredState {
    pub version: u64,
    pub assignments: Vec<Assignment>,
}

/// One workload the node must run or stop.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Assignment {
    pub workload_id: Uuid,
    pub attempt: u32,
    pub action: AssignmentAction,
    /// Why a `stop` was decided (e.g. `preempted: …`); absent for `run`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub command: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub gpu_indices: Vec<u32>,
    pub grace_period_ms: u64,
    /// The workload's share of each of its GPUs, in thousandths; absent or 1000: whole GPUs. On an
    /// MPS GPU the agent starts it with this share of the SMs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_milli: Option<u32>,
    /// GPU memory reserved for it on each GPU, MiB (an MPS GPU's pinned memory limit); absent: no
    /// slice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_mb: Option<u64>,
    /// Run it in this OCI image with the node's container engine (then `command` is the image's
    /// arguments); absent: `command` runs as a process on the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerSpec>,
    /// The CPU it asked for, thousandths of a core: a container's CPU limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_millis: Option<u32>,
    /// The host memory it asked for, MiB: a container's memory limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// Issued with this attempt's placement: every event the agent reports for the attempt
    /// carries it back, and an event for the attempt without it is refused (`attempt_token`).
    /// Absent for work placed before control planes issued tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_token: Option<String>,
    /// For a member of a gang (a workload spanning nodes): its rank and how to reach the others.
    /// Absent for a workload on one node. (Protocol 1.2.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<GangRendezvous>,
    /// For a service replica whose server the agent reads: the paths of its readiness and metrics
    /// endpoints. The agent gives it a free port (`PORT`, `AIRTIME_SERVE_PORT`) and reports what
    /// it reads there. (Protocol 1.3.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving: Option<crate::serving::ServingEndpoints>,
}

/// A gang member's place in its gang, as the frameworks' launchers expect it: the agent starts
/// the member with `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`, `RANK`, `NODE_RANK`, `LOCAL_RANK`,
/// `LOCAL_WORLD_SIZE` and a hostfile (`AIRTIME_HOSTFILE`) built from these.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GangRendezvous {
    /// The gang: its rank-0 member's workload id.
    pub gang_id: Uuid,
    /// This member's rank, `0 .. size`; also its node's rank (one member per node).
    pub rank: u32,
    /// Members (nodes) in the gang.
    pub size: u32,
    /// The rank-0 member's node address (`MASTER_ADDR`).
    pub master_addr: String,
    /// The port the rank-0 member listens on for the rendezvous (`MASTER_PORT`).
    pub master_port: u16,
    /// Every member's node address, by rank (the hostfile's lines).
    pub hosts: Vec<String>,
    /// GPUs each member holds (the hostfile's `slots`).
    pub slots: u32,
    /// Not every member's node has its assignment yet: the agent must not start the member (it
    /// may prepare) until a later desired state clears this.
    #[serde(default, skip_serializing_if = "is_false")]
    pub hold: bool,
}

impl GangRendezvous {
    /// The environment a member starts with (beside the workload's own and `CUDA_VISIBLE_DEVICES`).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("MASTER_ADDR", self.master_addr.clone()),
            ("MASTER_PORT", self.master_port.to_string()),
            ("WORLD_SIZE", self.size.to_string()),
            ("RANK", self.rank.to_string()),
            ("NODE_RANK", self.rank.to_string()),
            ("NNODES", self.size.to_string()),
            ("LOCAL_RANK", "0".into()),
            ("LOCAL_WORLD_SIZE", "1".into()),
            ("AIRTIME_GANG_ID", self.gang_id.to_string()),
            ("AIRTIME_GPUS_PER_NODE", self.slots.to_string()),
        ]
    }

    /// The hostfile MPI-style launchers read: one `address slots=N` line per member, by rank.
    pub fn hostfile(&self) -> String {
        self.hosts.iter().map(|h| format!("{h} slots={}\n", self.slots)).collect()
    }
}

impl Assignment {
    /// Its share of each GPU, in thousandths (1000: whole GPUs).
    pub fn share_milli(&self) -> u32 {
        self.gpu_milli.filter(|&m| (1..WHOLE_GPU_MILLI).contains(&m)).unwrap_or(WHOLE_GPU_MILLI)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum AssignmentAction {
    Run,
    Stop,
    /// An action this agent does not know yet (a newer control plane): the agent leaves such a
    /// workload as it is rather than failing the whole desired state.
    #[serde(other)]
    Unknown,
}

/// A workload event an agent reports: started, exited, failed to start. On the wire
/// `{"event": "started", "attempt": 1, "pid": 1234}`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EventReport {
    pub attempt: u32,
    pub event: EventKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Set when the process exited by itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal number that ended the process (15 = SIGTERM, 9 = SIGKILL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Why the agent ended it, or why it could not start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The agent ended it for the node's sake, not the workload's (it lost contact with the
    /// control plane past its lease and fenced its work): requeue it, do not count it failed.
    #[serde(default, skip_serializing_if = "is_false")]
    pub requeue: bool,
    /// The attempt's token, as its assignment gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_token: Option<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Started,
    Exited,
    FailedToStart,
}

/// Workloads' output, shipped by the agent in bounded chunks (`POST
/// /api/v1/agent/nodes/{node_id}/logs`). A chunk is numbered within its attempt and stream, so a
/// batch sent again after a lost answer is stored once.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LogBatch {
    /// At most [`MAX_LOG_BATCH_CHUNKS`].
    pub chunks: Vec<LogChunk>,
}

/// Consecutive lines of one attempt's stdout or stderr.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LogChunk {
    pub workload_id: Uuid,
    pub attempt: u32,
    pub stream: LogStream,
    /// This chunk's number within its attempt and stream, from 0.
    pub seq: u64,
    /// Whole lines, each ending in `\n`; at most [`MAX_LOG_CHUNK_BYTES`] bytes.
    pub text: String,
    /// Lines the agent could not ship before this chunk (its buffer was full during an outage).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped_lines: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Which output a log line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "sqlx", derive(sqlx::Type), sqlx(type_name = "text", rename_all = "snake_case"))]
#[serde(rename_all = "snake_case")]
pub enum LogStream {
    Stdout,
    Stderr,
}

/// The most bytes of text in one log chunk.
pub const MAX_LOG_CHUNK_BYTES: usize = 64 * 1024;
/// The most chunks in one log batch.
pub const MAX_LOG_BATCH_CHUNKS: usize = 64;

/// Longest event message kept, in characters (an exit reason, a spawn error).
pub const MAX_EVENT_MESSAGE_CHARS: usize = 2000;

impl EventReport {
    pub fn started(attempt: u32, pid: u32) -> Self {
        EventReport {
            attempt,
            event: EventKind::Started,
            pid: Some(pid),
            exit_code: None,
            signal: None,
            message: None,
            requeue: false,
            attempt_token: None,
        }
    }

    pub fn exited(attempt: u32, exit_code: Option<i32>, signal: Option<i32>, message: Option<String>) -> Self {
        EventReport {
            attempt,
            event: EventKind::Exited,
            pid: None,
            exit_code,
            signal,
            message,
            requeue: false,
            attempt_token: None,
        }
    }

    pub fn failed_to_start(attempt: u32, message: String) -> Self {
        EventReport {
            attempt,
            event: EventKind::FailedToStart,
            pid: None,
            exit_code: None,
            signal: None,
            message: Some(message),
            requeue: false,
            attempt_token: None,
        }
    }

    /// The event's name on the wire, for logs.
    pub fn name(&self) -> &'static str {
        match self.event {
            EventKind::Started => "started",
            EventKind::Exited => "exited",
            EventKind::FailedToStart => "failed_to_start",
        }
    }

    /// The message, cut to [`MAX_EVENT_MESSAGE_CHARS`].
    pub fn bounded_message(&self) -> Option<String> {
        self.message.as_ref().map(|m| m.chars().take(MAX_EVENT_MESSAGE_CHARS).collect())
    }
}

/// The API's one error body: `{"error": {"code": "...", "message": "..."}}`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorResponse {
    pub error: ErrorBody,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    /// Stable, machine-readable: `unauthorized`, `not_found`, `invalid_body`, `rate_limited`, …
    pub code: String,
    /// What is wrong, for people. Never internals.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_control_plane_accepts_its_own_and_every_earlier_minor_protocol_and_says_what_to_upgrade() {
        let (major, minor) = PROTOCOL_VERSION;
        assert_eq!(accepts_protocol(Some(&protocol_version())), Ok(PROTOCOL_VERSION));
        for older in 0..minor {
            assert_eq!(accepts_protocol(Some(&format!("{major}.{older}"))), Ok((major, older)));
        }
        assert_eq!(accepts_protocol(None), Ok((1, 0)), "agents before versioning speak 1.0");
        let newer = accepts_protocol(Some(&format!("{major}.{}", minor + 1))).unwrap_err();
        assert!(newer.contains("upgrade the control plane"), "{newer}");
        let other_major = accepts_protocol(Some(&format!("{}.0", major + 1))).unwrap_err();
        assert!(other_major.contains("upgrade the control plane"), "{other_major}");
        for bad in ["one", "1.01", "+1.1", "1.0000000000000000001", "1.1 "] {
            assert!(accepts_protocol(Some(bad)).unwrap_err().contains("MAJOR.MINOR"), "{bad}");
        }
    }

    #[test]
    fn a_registration_of_the_previous_protocol_still_parses() {
        // What a 1.0 agent sends: no protocol, no running attempts.
        let old: Registration = serde_json::from_value(serde_json::json!({
            "name": "gpu-1", "hostname": "gpu-1", "cpu_millis": 1000, "memory_mb": 1024,
            "agent_version": "0.2.0", "gpu_source": "none"
        }))
        .expect("a 1.0 registration");
        assert_eq!((old.protocol.as_deref(), old.running.len()), (None, 0));
        assert_eq!(check_registration(&old), Ok(()));
        let serialized = serde_json::to_value(&old).unwrap();
        assert!(serialized.get("running").is_none() && serialized.get("protocol").is_none());
    }

    #[test]
    fn an_advertised_address_is_an_address_or_a_host_name() {
        let mut r: Registration = serde_json::from_value(serde_json::json!({
            "name": "gpu-1", "hostname": "gpu-1", "cpu_millis": 1000, "memory_mb": 1024,
            "agent_version": "0.3.0", "gpu_source": "none", "protocol": "1.2", "address": "10.0.0.7"
        }))
        .expect("a 1.2 registration");
        assert_eq!(check_registration(&r), Ok(()));
        for good in ["fe80::1", "gpu-7.rack-2.example"] {
            r.address = Some(good.into());
            assert_eq!(check_registration(&r), Ok(()), "{good}");
        }
        for bad in ["", "10.0.0.7; rm -rf /", "a b", "x\n"] {
            r.address = Some(bad.into());
            assert!(check_registration(&r).unwrap_err().contains("address must be"), "{bad:?}");
        }
    }

    #[test]
    fn a_gang_member_gets_the_torchrun_variables_and_a_hostfile() {
        let gang = GangRendezvous {
            gang_id: Uuid::nil(),
            rank: 2,
            size: 3,
            master_addr: "10.0.0.1".into(),
            master_port: 29_500,
            hosts: vec!["10.0.0.1".into(), "10.0.0.2".into(), "10.0.0.3".into()],
            slots: 8,
            hold: false,
        };
        let env: BTreeMap<_, _> = gang.env().into_iter().collect();
        assert_eq!(env["MASTER_ADDR"], "10.0.0.1");
        assert_eq!((env["RANK"].as_str(), env["WORLD_SIZE"].as_str(), env["NODE_RANK"].as_str()), ("2", "3", "2"));
        assert_eq!(gang.hostfile(), "10.0.0.1 slots=8\n10.0.0.2 slots=8\n10.0.0.3 slots=8\n");
    }
}
