//! The simulator's own input formats (`docs/simulator.md` documents them for people):
//!
//! - a **trace** is JSON Lines, one record per line: a workload (`"type": "workload"`) or a change to
//!   the fleet (`"type": "node_down"`), with times in seconds from the start of the trace;
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

/// One line of a trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TraceRecord {
    Workload(TraceWorkload),
    NodeDown(NodeDown),
}

/// A whole trace, checked against nothing but itself (the replay checks it against its fleet).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trace {
    pub workloads: Vec<TraceWorkload>,
    pub node_downs: Vec<NodeDown>,
}

impl Trace {
    /// The trace's span: when its last workload's demand ends (or its last record happens).
    pub fn span_s(&self) -> u64 {
        let w = self.workloads.iter().map(|w| w.arrive_s + w.duration_s).max().unwrap_or(0);
        let n = self.node_downs.iter().map(|d| d.at_s + d.for_s.unwrap_or(0)).max().unwrap_or(0);
        w.max(n)
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
                TraceRecord::NodeDown(d) => trace.node_downs.push(d),
            }
        }
        Ok(trace)
    }

    /// Writes the trace as JSON Lines, workloads in arrival order then the node changes.
    pub fn write(&self, out: &mut impl Write) -> std::io::Result<()> {
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
