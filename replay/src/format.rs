//! The simulator's own input formats (`docs/simulator.md` documents them for people):
//!
//! - a **trace** is JSON Lines, one record per line: a workload (`"type": "workload"`), an elastic
//!   inference service with its demand over time (`"type": "service"`), or a change to the fleet
//!   (`"type": "node_down"`), with times in seconds from the start of the trace;
//! - a **fleet** is one JSON document: tenants, node types (GPU model and memory, CPU and memory,
//!   $/hour, how many), and the platform's priority settings.
//!
//! Every loader (Alibaba, Azure, the generator) converts to these, so a replay never depends on
//! where its demand came from. GPU sharing is here (a workload's `gpu_milli` and `mig_profile`, a
//! node type's `gpu_sharing` and `mig_layout`), and a tenant's own policy. Parsing is strict: an unknown
//! field or a value out of range is an error naming the line and the field, never a guess.

use std::collections::HashSet;
use std::fmt;
use std::io::{BufRead, Write};
use std::path::Path;

use airtime_protocol::service::LoadMetric;
use airtime_protocol::settings::PrioritySettings;
use airtime_protocol::sharing::{GpuSharing, MigProfile};
use airtime_protocol::workload::WorkloadClass;
use serde::{Deserialize, Serialize};

/// A bad input file: which file, which line (1-based; 0 for a whole-document error) and what.
#[derive(Debug, thiserror::Error)]
pub struct InputError {
    pub file: String,
    pub line: usize,
    pub message: String,
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(f, "{} line {}: {}", self.file, self.line, self.message)
        }
    }
}

impl InputError {
    pub fn new(file: impl Into<String>, line: usize, message: impl Into<String>) -> Self {
        InputError { file: file.into(), line, message: message.into() }
    }
}

fn default_one() -> u32 {
    1
}

fn default_milli() -> u32 {
    1000
}

/// One workload as the trace submits it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceWorkload {
    /// Unique in the trace.
    pub id: String,
    /// A tenant of the fleet file.
    pub tenant: String,
    pub class: WorkloadClass,
    /// Seconds from the start of the trace at which it is submitted.
    pub arrive_s: u64,
    /// Compute it needs, in seconds of running (a preempted checkpointable workload resumes with
    /// what is left; any other starts over). For `realtime_inference` it is how long the demand
    /// lasts: the service is wanted from `arrive_s` to `arrive_s + duration_s`, whenever it starts.
    pub duration_s: u64,
    /// Whole GPUs (0: CPU only).
    #[serde(default)]
    pub gpus: u32,
    /// Thousandths of each GPU it uses: below 1000 a share of one GPU (`gpus` 1), which it takes
    /// on a time-sliced or MPS GPU and which is how busy it keeps it; on a GPU that is not shared
    /// it holds the whole GPU.
    #[serde(default = "default_milli")]
    pub gpu_milli: u32,
    /// The MIG profile it runs on (`1g.10gb`), alone on an instance of it (`gpus` 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_profile: Option<String>,
    /// GPU memory per GPU it needs, in MiB (0: any).
    #[serde(default)]
    pub gpu_memory_mb: u64,
    /// GPU models it may run on (empty: any), compared as the SDK compares them.
    #[serde(default)]
    pub gpu_models: Vec<String>,
    #[serde(default)]
    pub cpu_millis: u32,
    #[serde(default)]
    pub memory_mb: u64,
    #[serde(default)]
    pub priority: i32,
    #[serde(default)]
    pub preemptible: bool,
    #[serde(default)]
    pub checkpointable: bool,
    #[serde(default)]
    pub cpu_capable: bool,
}

/// A node leaves the fleet (its work is requeued, as when the control plane marks it lost) and
/// comes back `for_s` later (never, when absent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeDown {
    pub node: String,
    pub at_s: u64,
    #[serde(default)]
    pub for_s: Option<u64>,
}

fn default_five_minutes() -> u32 {
    300
}

fn default_one_minute() -> u32 {
    60
}

/// The most replicas a service may have (the control plane's bound).
pub const MAX_REPLICAS: u32 = 1000;

/// An elastic inference service, as the control plane's `POST /api/v1/services` defines one, with
/// the demand its replicas will report: the simulator runs the core's autoscaler
/// (`airtime_scheduler::services`) on it every cycle, as the control plane does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceService {
    /// Unique among the trace's services; its replicas are named `<name>-gpu-<n>` and `<name>-cpu-<n>`.
    pub name: String,
    /// A tenant of the fleet file.
    pub tenant: String,
    /// `realtime_inference` (customer-facing) or `batch_inference`.
    pub class: WorkloadClass,
    #[serde(default = "default_one")]
    pub min_replicas: u32,
    pub max_replicas: u32,
    /// What the demand and the capacities are measured in.
    #[serde(default)]
    pub metric: LoadMetric,
    /// Load one main replica carries at its latency target.
    pub capacity: f64,
    /// What every main replica needs.
    pub replica: ReplicaTemplate,
    /// The same model served from CPU, when it can be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_variant: Option<CpuVariantSpec>,
    /// Scale up only to what every report of this many seconds asked for (0: at once).
    #[serde(default)]
    pub scale_up_window_s: u32,
    /// Scale down only to what no report of this many seconds exceeded.
    #[serde(default = "default_five_minutes")]
    pub scale_down_window_s: u32,
    /// Without a report for this long, the autoscaler holds the replicas as they are.
    #[serde(default = "default_one_minute")]
    pub stale_after_s: u32,
    /// Seconds a placed replica takes to start serving (loading its model): its capacity counts
    /// from then on (default 0: at once).
    #[serde(default)]
    pub startup_s: u32,
    /// When the service is created and its first load report arrives.
    #[serde(default)]
    pub start_s: u64,
    /// The load its replicas report, one value a report. When the values run out the service is
    /// deleted: its replicas drain.
    pub demand: Demand,
}

/// The resources of one main replica, as a workload of the trace asks for them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicaTemplate {
    /// Whole GPUs (0: the main template is CPU only).
    #[serde(default = "default_one")]
    pub gpus: u32,
    /// Thousandths of each GPU, as a workload's `gpu_milli`.
    #[serde(default = "default_milli")]
    pub gpu_milli: u32,
    #[serde(default)]
    pub gpu_memory_mb: u64,
    #[serde(default)]
    pub gpu_models: Vec<String>,
    #[serde(default)]
    pub cpu_millis: u32,
    #[serde(default)]
    pub memory_mb: u64,
    #[serde(default)]
    pub priority: i32,
}

/// A CPU variant: what one CPU replica needs and carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuVariantSpec {
    /// Load one CPU replica carries at the latency target.
    pub capacity: f64,
    pub cpu_millis: u32,
    #[serde(default)]
    pub memory_mb: u64,
}

/// A service's load over time: one value every `every_s` seconds from the service's `start_s`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Demand {
    /// Seconds between two reports (a replica reports every 10–15 s in practice).
    pub every_s: u32,
    /// The load reported, in the service's metric.
    pub values: Vec<f64>,
}

impl TraceService {
    /// When its demand ends (its last report's interval is over).
    pub fn end_s(&self) -> u64 {
        self.start_s + u64::from(self.demand.every_s) * self.demand.values.len() as u64
    }

    /// The demand's highest and mean value.
    pub fn peak_and_mean(&self) -> (f64, f64) {
        let values = &self.demand.values;
        let peak = values.iter().copied().fold(0.0, f64::max);
        let mean = if values.is_empty() { 0.0 } else { values.iter().sum::<f64>() / values.len() as f64 };
        (peak, mean)
    }

    /// Thousandths of a GPU one main replica holds (a whole GPU 1000, two 2000, a quarter 250).
    pub fn gpu_milli_per_replica(&self) -> u32 {
        if self.replica.gpus == 0 { 0 } else { self.replica.gpus * self.replica.gpu_milli }
    }

    /// What a well-formed service must satisfy beyond its types, naming the field: the control
    /// plane's own rules for a service, and a workload's for each template.
    pub fn check(&self) -> Result<(), String> {
        let name = &self.name;
        if name.is_empty()
            || name.len() > 100
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        {
            return Err(format!("field `name`: {name:?} must be 1 to 100 letters, digits, '-', '_' or '.'"));
        }
        if self.tenant.is_empty() {
            return Err("field `tenant`: must not be empty".into());
        }
        if !matches!(self.class, WorkloadClass::RealtimeInference | WorkloadClass::BatchInference) {
            return Err(format!(
                "field `class`: service {name} must be realtime_inference or batch_inference, not {}",
                class_name(self.class)
            ));
        }
        let positive = |v: f64| v.is_finite() && v > 0.0 && v <= 1e9;
        if !positive(self.capacity) {
            return Err(format!(
                "field `capacity`: {} is not above 0 (the load one replica carries at its latency target)",
                self.capacity
            ));
        }
        if self.max_replicas == 0 || self.max_replicas > MAX_REPLICAS {
            return Err(format!("field `max_replicas`: {} is not between 1 and {MAX_REPLICAS}", self.max_replicas));
        }
        if self.min_replicas > self.max_replicas {
            return Err(format!(
                "field `min_replicas`: {} is more than max_replicas {}",
                self.min_replicas, self.max_replicas
            ));
        }
        for (field, value) in
            [("scale_up_window_s", self.scale_up_window_s), ("scale_down_window_s", self.scale_down_window_s)]
        {
            if value > 3600 {
                return Err(format!("field `{field}`: {value} is more than 3600 s"));
            }
        }
        if !(5..=3600).contains(&self.stale_after_s) {
            return Err(format!("field `stale_after_s`: {} is not between 5 and 3600", self.stale_after_s));
        }
        if self.startup_s > 3600 {
            return Err(format!("field `startup_s`: {} is more than 3600 s", self.startup_s));
        }
        let r = &self.replica;
        if r.gpus > 64 {
            return Err(format!("field `replica.gpus`: {} is more than any node holds (64 at most)", r.gpus));
        }
        if !(1..=1000).contains(&r.gpu_milli) {
            return Err(format!(
                "field `replica.gpu_milli`: {} is not between 1 and 1000 (thousandths of a GPU)",
                r.gpu_milli
            ));
        }
        if r.gpu_milli < 1000 && r.gpus != 1 {
            return Err(format!(
                "field `replica.gpu_milli`: {} is a share of one GPU, but the replica asks for {} GPUs",
                r.gpu_milli, r.gpus
            ));
        }
        if let Some(cpu) = &self.cpu_variant {
            if !positive(cpu.capacity) {
                return Err(format!("field `cpu_variant.capacity`: {} is not above 0", cpu.capacity));
            }
            if cpu.cpu_millis == 0 {
                return Err("field `cpu_variant.cpu_millis`: a CPU replica needs some CPU (above 0)".into());
            }
        }
        let d = &self.demand;
        if !(1..=3600).contains(&d.every_s) {
            return Err(format!("field `demand.every_s`: {} is not between 1 and 3600 s", d.every_s));
        }
        if d.values.is_empty() {
            return Err(format!("field `demand.values`: service {name} has no demand"));
        }
        if let Some((i, v)) = d.values.iter().enumerate().find(|(_, v)| !(v.is_finite() && (0.0..=1e9).contains(*v))) {
            return Err(format!("field `demand.values[{i}]`: {v} is not a load between 0 and 1e9"));
        }
        Ok(())
    }
}

/// One line of a trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TraceRecord {
    Workload(TraceWorkload),
    Service(TraceService),
    NodeDown(NodeDown),
}

/// A whole trace, checked against nothing but itself (the replay checks it against its fleet).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trace {
    pub workloads: Vec<TraceWorkload>,
    pub services: Vec<TraceService>,
    pub node_downs: Vec<NodeDown>,
}

impl Trace {
    /// The trace's span: when its last workload's or service's demand ends (or its last record
    /// happens).
    pub fn span_s(&self) -> u64 {
        let w = self.workloads.iter().map(|w| w.arrive_s + w.duration_s).max().unwrap_or(0);
        let s = self.services.iter().map(TraceService::end_s).max().unwrap_or(0);
        let n = self.node_downs.iter().map(|d| d.at_s + d.for_s.unwrap_or(0)).max().unwrap_or(0);
        w.max(s).max(n)
    }

    /// Reads a JSON Lines trace. Blank lines and lines starting with `#` are skipped.
    pub fn read(path: &Path) -> Result<Trace, InputError> {
        let name = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|e| InputError::new(&name, 0, format!("cannot open: {e}")))?;
        Trace::parse(std::io::BufReader::new(file), &name)
    }

    pub fn parse(reader: impl BufRead, name: &str) -> Result<Trace, InputError> {
        let mut trace = Trace::default();
        let mut ids = HashSet::new();
        let mut services = HashSet::new();
        for (i, line) in reader.lines().enumerate() {
            let n = i + 1;
            let line = line.map_err(|e| InputError::new(name, n, format!("cannot read: {e}")))?;
            let text = line.trim();
            if text.is_empty() || text.starts_with('#') {
                continue;
            }
            let record: TraceRecord =
                serde_json::from_str(text).map_err(|e| InputError::new(name, n, json_message(&e)))?;
            match record {
                TraceRecord::Workload(w) => {
                    w.check().map_err(|m| InputError::new(name, n, m))?;
                    if !ids.insert(w.id.clone()) {
                        return Err(InputError::new(name, n, format!("field `id`: workload {} appears twice", w.id)));
                    }
                    trace.workloads.push(w);
                }
                TraceRecord::Service(s) => {
                    s.check().map_err(|m| InputError::new(name, n, m))?;
                    if !services.insert(s.name.clone()) {
                        return Err(InputError::new(
                            name,
                            n,
                            format!("field `name`: service {} appears twice", s.name),
                        ));
                    }
                    trace.services.push(s);
                }
                TraceRecord::NodeDown(d) => trace.node_downs.push(d),
            }
        }
        Ok(trace)
    }

    /// Writes the trace as JSON Lines: the services, the workloads in arrival order, then the node
    /// changes.
    pub fn write(&self, out: &mut impl Write) -> std::io::Result<()> {
        for s in &self.services {
            serde_json::to_writer(&mut *out, &TraceRecord::Service(s.clone()))?;
            out.write_all(b"\n")?;
        }
        for w in &self.workloads {
            serde_json::to_writer(&mut *out, &TraceRecord::Workload(w.clone()))?;
            out.write_all(b"\n")?;
        }
        for d in &self.node_downs {
            serde_json::to_writer(&mut *out, &TraceRecord::NodeDown(d.clone()))?;
            out.write_all(b"\n")?;
        }
        Ok(())
    }

    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
        self.write(&mut out)?;
        out.flush()?;
        Ok(())
    }
}

impl TraceWorkload {
    /// What a well-formed record must satisfy beyond its types, naming the field.
    pub fn check(&self) -> Result<(), String> {
        if self.id.is_empty() {
            return Err("field `id`: must not be empty".into());
        }
        if self.tenant.is_empty() {
            return Err("field `tenant`: must not be empty".into());
        }
        if self.duration_s == 0 {
            return Err(format!("field `duration_s`: workload {} must run for at least one second", self.id));
        }
        if !(1..=1000).contains(&self.gpu_milli) {
            return Err(format!(
                "field `gpu_milli`: {} is not between 1 and 1000 (thousandths of a GPU)",
                self.gpu_milli
            ));
        }
        if self.gpus > 64 {
            return Err(format!("field `gpus`: {} is more than any node holds (64 at most)", self.gpus));
        }
        if self.gpu_milli < 1000 && self.gpus != 1 {
            return Err(format!(
                "field `gpu_milli`: {} is a share of one GPU, but workload {} asks for {} GPUs",
                self.gpu_milli, self.id, self.gpus
            ));
        }
        if let Some(profile) = &self.mig_profile {
            MigProfile::parse(profile).map_err(|e| format!("field `mig_profile`: {e}"))?;
            if self.gpus != 1 || self.gpu_milli < 1000 {
                return Err(format!(
                    "field `mig_profile`: workload {} runs on one MIG instance: gpus 1, no share",
                    self.id
                ));
            }
        }
        Ok(())
    }
}

/// A class as the formats spell it (`batch_inference`).
pub fn class_name(class: WorkloadClass) -> String {
    serde_json::to_value(class).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
}

/// serde_json's message with the field it names kept and its column kept out (the line is ours).
fn json_message(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

/// A tenant of the simulated platform.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantSpec {
    pub name: String,
    #[serde(default)]
    pub guaranteed_gpus: u32,
    #[serde(default = "default_one")]
    pub weight: u32,
    #[serde(default)]
    pub tier: i32,
    #[serde(default = "default_true")]
    pub may_borrow: bool,
    /// The most GPUs its work may hold at once, borrowed or not (as the control plane's tenant
    /// limit); none when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_limit: Option<u32>,
    /// The tenant's own policy for its own work (level 2): a built-in's name or a `.wasm` path.
    #[serde(default)]
    pub policy: Option<String>,
}

fn default_true() -> bool {
    true
}

/// A kind of node and how many the fleet has. Nodes are named `<name>-<n>` (n from 0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeType {
    pub name: String,
    pub count: u32,
    #[serde(default)]
    pub gpus: u32,
    #[serde(default)]
    pub gpu_model: String,
    #[serde(default)]
    pub gpu_memory_mb: u64,
    pub cpu_millis: u32,
    pub memory_mb: u64,
    /// What one such node costs an hour, in dollars (idle hours are priced with it).
    #[serde(default)]
    pub cost_per_hour: f64,
    /// How its GPUs are shared: `none` (whole GPUs), `time_slicing`, `mps`, or `mig` (each GPU
    /// carved into the instances of `mig_layout`).
    #[serde(default)]
    pub gpu_sharing: GpuSharing,
    /// With `gpu_sharing` `mig`: the MIG instances each GPU is carved into (`["3g.40gb",
    /// "2g.20gb", "1g.10gb", "1g.10gb"]`), each schedulable alone, with the profile's memory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig_layout: Vec<String>,
}

impl NodeType {
    /// The devices each of its GPUs is advertised as: one whole GPU, or its MIG instances as
    /// `(profile, memory MiB)`.
    pub fn devices_per_gpu(&self) -> Vec<(Option<MigProfile>, u64)> {
        if self.gpu_sharing != GpuSharing::Mig {
            return vec![(None, self.gpu_memory_mb)];
        }
        self.mig_layout
            .iter()
            .filter_map(|p| MigProfile::parse(p).ok())
            .map(|p| {
                let memory_mb = u64::from(p.memory_gb()) * 1024;
                (Some(p), memory_mb)
            })
            .collect()
    }
}

/// The simulated fleet and platform.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetSpec {
    pub tenants: Vec<TenantSpec>,
    pub node_types: Vec<NodeType>,
    #[serde(default)]
    pub settings: PrioritySettings,
}

impl FleetSpec {
    pub fn read(path: &Path) -> Result<FleetSpec, InputError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| InputError::new(&name, 0, format!("cannot read: {e}")))?;
        FleetSpec::parse(&text, &name)
    }

    pub fn parse(text: &str, name: &str) -> Result<FleetSpec, InputError> {
        let spec: FleetSpec =
            serde_json::from_str(text).map_err(|e| InputError::new(name, e.line(), json_message(&e)))?;
        spec.check().map_err(|m| InputError::new(name, 0, m))?;
        Ok(spec)
    }

    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        std::fs::write(path, serde_json::to_string_pretty(self)? + "\n")?;
        Ok(())
    }

    pub fn check(&self) -> Result<(), String> {
        if self.tenants.is_empty() {
            return Err("field `tenants`: the fleet needs at least one tenant".into());
        }
        let mut names = HashSet::new();
        for t in &self.tenants {
            if t.name.is_empty() || !names.insert(t.name.as_str()) {
                return Err(format!("field `tenants`: tenant name {:?} is empty or appears twice", t.name));
            }
            if t.weight == 0 {
                return Err(format!("field `weight`: tenant {} needs a weight of at least 1", t.name));
            }
        }
        let mut types = HashSet::new();
        for n in &self.node_types {
            if n.name.is_empty() || !types.insert(n.name.as_str()) {
                return Err(format!("field `node_types`: node type name {:?} is empty or appears twice", n.name));
            }
            if n.gpus > 64 {
                return Err(format!("field `gpus`: node type {} has {} GPUs (64 at most)", n.name, n.gpus));
            }
            if n.gpus > 0 && n.gpu_model.is_empty() {
                return Err(format!("field `gpu_model`: node type {} has GPUs but no model", n.name));
            }
            if !(n.cost_per_hour.is_finite() && n.cost_per_hour >= 0.0) {
                return Err(format!("field `cost_per_hour`: node type {} needs a price of 0 or more", n.name));
            }
            if n.gpu_sharing == GpuSharing::Mig {
                if n.mig_layout.is_empty() {
                    return Err(format!(
                        "field `mig_layout`: node type {} shares its GPUs by MIG but names no instances",
                        n.name
                    ));
                }
                let mut slices = 0;
                for p in &n.mig_layout {
                    let profile =
                        MigProfile::parse(p).map_err(|e| format!("field `mig_layout`: node type {}: {e}", n.name))?;
                    slices += profile.compute_slices();
                }
                if slices > 7 {
                    return Err(format!(
                        "field `mig_layout`: node type {}: {slices} compute slices, a GPU has 7",
                        n.name
                    ));
                }
            } else if !n.mig_layout.is_empty() {
                return Err(format!(
                    "field `mig_layout`: node type {} is not shared by MIG (gpu_sharing {})",
                    n.name, n.gpu_sharing
                ));
            }
        }
        if self.node_types.iter().all(|n| n.count == 0) {
            return Err("field `node_types`: the fleet has no nodes".into());
        }
        self.settings.check().map_err(|m| format!("field `settings`: {m}"))
    }

    pub fn gpu_count(&self) -> u64 {
        self.node_types.iter().map(|n| u64::from(n.count) * u64::from(n.gpus)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Trace, InputError> {
        Trace::parse(text.as_bytes(), "t.jsonl")
    }

    #[test]
    fn a_trace_round_trips_through_json_lines() {
        let text = concat!(
            r#"{"type":"workload","id":"a","tenant":"x","class":"training","arrive_s":5,"duration_s":60,"gpus":2}"#,
            "\n# a comment\n\n",
            r#"{"type":"node_down","node":"n-0","at_s":10,"for_s":30}"#,
            "\n"
        );
        let trace = parse(text).expect("parses");
        assert_eq!(trace.workloads[0].gpu_milli, 1000);
        assert_eq!(trace.node_downs[0].for_s, Some(30));
        let mut out = Vec::new();
        trace.write(&mut out).expect("writes");
        assert_eq!(parse(std::str::from_utf8(&out).expect("utf-8")).expect("parses again"), trace);
    }

    #[test]
    fn a_service_round_trips_with_its_defaults_and_its_demand() {
        let text = concat!(
            r#"{"type":"service","name":"chat","tenant":"x","class":"realtime_inference","max_replicas":8,"capacity":15,"#,
            r#""replica":{"cpu_millis":4000},"cpu_variant":{"capacity":3,"cpu_millis":16000},"#,
            r#""demand":{"every_s":15,"values":[10,12.5,40]}}"#,
            "\n"
        );
        let trace = parse(text).expect("parses");
        let s = &trace.services[0];
        assert_eq!((s.min_replicas, s.scale_down_window_s, s.stale_after_s, s.replica.gpus), (1, 300, 60, 1));
        assert_eq!((s.end_s(), s.gpu_milli_per_replica()), (45, 1000));
        assert_eq!(s.peak_and_mean().0, 40.0);
        assert_eq!(trace.span_s(), 45);
        let mut out = Vec::new();
        trace.write(&mut out).expect("writes");
        assert_eq!(parse(std::str::from_utf8(&out).expect("utf-8")).expect("parses again"), trace);
    }

    #[test]
    fn a_bad_line_is_named_with_its_field() {
        let ok = r#"{"type":"workload","id":"a","tenant":"x","class":"training","arrive_s":5,"duration_s":60}"#;
        let cases = [
            (
                r#"{"type":"workload","id":"b","tenant":"x","class":"training","duration_s":60}"#,
                "missing field `arrive_s`",
            ),
            (
                r#"{"type":"workload","id":"b","tenant":"x","class":"trainin","arrive_s":1,"duration_s":60}"#,
                "unknown variant `trainin`",
            ),
            (
                r#"{"type":"workload","id":"b","tenant":"x","class":"training","arrive_s":1,"duration_s":60,"gpu":1}"#,
                "unknown field `gpu`",
            ),
            (
                r#"{"type":"workload","id":"b","tenant":"x","class":"training","arrive_s":1,"duration_s":0}"#,
                "field `duration_s`",
            ),
            (
                r#"{"type":"workload","id":"b","tenant":"x","class":"training","arrive_s":1,"duration_s":9,"gpu_milli":1500}"#,
                "field `gpu_milli`",
            ),
            (
                r#"{"type":"workload","id":"a","tenant":"x","class":"training","arrive_s":1,"duration_s":9}"#,
                "appears twice",
            ),
            (r#"{"type":"reboot"}"#, "unknown variant `reboot`"),
            ("not json", "expected"),
        ];
        for (line, expected) in cases {
            let err = parse(&format!("{ok}\n{line}\n")).expect_err(line);
            assert_eq!(err.line, 2, "{err}");
            assert!(err.to_string().starts_with("t.jsonl line 2: "), "{err}");
            assert!(err.message.contains(expected), "{line}: {err}");
        }
    }

    #[test]
    fn a_bad_fleet_is_refused_with_the_field() {
        let good = r#"{"tenants":[{"name":"a"}],"node_types":[{"name":"g","count":1,"gpus":8,"gpu_model":"H100","cpu_millis":1,"memory_mb":1}]}"#;
        assert_eq!(FleetSpec::parse(good, "f.json").expect("parses").gpu_count(), 8);
        for (text, expected) in [
            (good.replace(r#""gpu_model":"H100","#, ""), "field `gpu_model`"),
            (good.replace(r#"{"name":"a"}"#, r#"{"name":"a","weight":0}"#), "field `weight`"),
            (good.replace(r#""count":1"#, r#""count":1,"cost":3"#), "unknown field `cost`"),
            (good.replace(r#"]}"#, r#"],"settings":{"grace_period_s":-1}}"#), "missing field"),
        ] {
            let err = FleetSpec::parse(&text, "f.json").expect_err(&text);
            assert!(err.to_string().contains(expected), "{text}: {err}");
        }
    }
}
