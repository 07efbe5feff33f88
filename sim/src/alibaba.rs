//! Alibaba's production GPU cluster trace (`cluster-trace-gpu-v2023`, the "openb" set: Weng et al.,
//! "Beware of Fragmentation", USENIX ATC '23) as a fleet and a trace of our own formats.
//!
//! - The node list becomes the fleet: nodes of one shape (CPU, memory, GPU count and model) are one
//!   node type. GPU memory comes from the model's spec sheet and a node's price from a per-GPU and
//!   per-core rate ([`gpu_price_per_hour`], [`CPU_CORE_PRICE_PER_HOUR`]): the trace has neither.
//! - Each pod becomes a workload with its CPU, memory, GPU count, GPU fraction (`gpu_milli`) and
//!   model constraint (`gpu_spec`, `|`-separated models), arriving at its creation time and lasting
//!   its lifetime (deletion − creation).
//! - The trace has no tenants or classes, only a QoS label; it is mapped, as stated in
//!   `docs/simulator.md`: `LS` (latency-sensitive) → tenant `serving`, class `realtime_inference`,
//!   priority 100, never preempted; `Burstable`/`Guaranteed` → tenant `batch`, class
//!   `batch_inference`, priority 50, preemptible; `BE` (best effort) → tenant `research`, class
//!   `training`, priority 0, preemptible and checkpointable. Each tenant is guaranteed GPUs in
//!   proportion to the GPU-hours its pods ask for, and may borrow.
//!
//! `compress` divides arrival times (lifetimes kept) so the 149 days contend for the GPUs; 1 replays
//! the trace as it was. `start_s` starts the replay later (almost every pod is created from day 115
//! on): the pods alive then are there from 0 with the rest of their lifetime.

use std::collections::BTreeMap;
use std::path::Path;

use airtime_protocol::settings::PrioritySettings;
use airtime_protocol::sharing::GpuSharing;
use airtime_protocol::workload::WorkloadClass;

use crate::format::{FleetSpec, InputError, NodeType, TenantSpec, Trace, TraceWorkload};

/// What one CPU core costs an hour in the fleet's prices (roughly a cloud vCPU's on-demand rate).
pub const CPU_CORE_PRICE_PER_HOUR: f64 = 0.04;

/// What one GPU of a model costs an hour, roughly public clouds' on-demand rates for the model
/// (G2 and G3 are Alibaba's own names, priced as A10-class parts). An assumption, stated.
pub fn gpu_price_per_hour(model: &str) -> f64 {
    match model {
        "P100" => 1.46,
        "T4" => 0.35,
        "V100M16" => 2.48,
        "V100M32" => 2.98,
        "A10" => 1.10,
        "G2" | "G3" => 1.10,
        _ => 1.00,
    }
}

/// GPU memory of a model, in MiB, from its spec sheet.
pub fn gpu_memory_mb(model: &str) -> u64 {
    match model {
        "V100M32" => 32 * 1024,
        "A10" | "G2" | "G3" => 24 * 1024,
        _ => 16 * 1024, // P100, T4, V100M16
    }
}

/// Options of the conversion.
#[derive(Debug, Clone)]
pub struct Options {
    /// `openb_pod_list_default.csv` or one of its variants.
    pub pod_file: String,
    /// Include the CPU-only nodes (`openb_node_list_all_node.csv`) or only the GPU nodes.
    pub cpu_nodes: bool,
    /// Arrival times are divided by this (lifetimes kept).
    pub compress: f64,
    /// The second of the trace the replay starts at: pods deleted by then are dropped, pods alive
    /// then arrive at 0 with the rest of their lifetime.
    pub start_s: u64,
    /// Only the first pods in creation order (all when None).
    pub max_pods: Option<usize>,
    /// Only the first GPU nodes in the trace's order (all when None); pods that fit no remaining node are dropped.
    pub max_nodes: Option<usize>,
    /// With `cpu_nodes`, only the first CPU-only nodes in the trace's order (all when None).
    pub max_cpu_nodes: Option<usize>,
    /// How the GPU nodes share their GPUs (the cluster shared them; `none` gives every fractional
    /// pod a whole GPU).
    pub gpu_sharing: GpuSharing,
    /// Fill the cluster, as Weng et al. evaluate placement: the pods arrive one a second in file
    /// order and never leave (their times ignored), so the replay shows how much of the cluster is
    /// allocated when it can take no more. Pod lists without times (`multigpu20`) are always read
    /// this way.
    pub fill: bool,
}

/// How long a pod of a filled cluster lives: past any replay of the trace.
pub const FILL_LIFETIME_S: u64 = 100 * 86_400;

impl Default for Options {
    fn default() -> Self {
        Options {
            pod_file: "openb_pod_list_default.csv".into(),
            cpu_nodes: false,
            gpu_sharing: GpuSharing::None,
            fill: false,
            compress: 1.0,
            start_s: 0,
            max_pods: None,
            max_nodes: None,
            max_cpu_nodes: None,
        }
    }
}

struct Csv<'a> {
    name: String,
    header: Vec<&'a str>,
    rows: Vec<(usize, Vec<&'a str>)>,
}

fn csv<'a>(name: &str, text: &'a str, expected: &[&str]) -> Result<Csv<'a>, InputError> {
    let mut lines = text.lines().enumerate();
    let header: Vec<&str> = lines.next().map(|(_, l)| l.trim().split(',').collect()).unwrap_or_default();
    for field in expected {
        if !header.contains(field) {
            return Err(InputError::new(
                name,
                1,
                format!("the header has no column `{field}` (it has {})", header.join(",")),
            ));
        }
    }
    let rows = lines
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, l.trim().split(',').collect::<Vec<_>>()))
        .collect();
    Ok(Csv { name: name.to_owned(), header, rows })
}

impl Csv<'_> {
    fn has(&self, column: &str) -> bool {
        self.header.contains(&column)
    }

    fn field<'r>(&self, row: &'r [&str], line: usize, column: &str) -> Result<&'r str, InputError> {
        let at = self.header.iter().position(|h| *h == column).unwrap_or(usize::MAX);
        row.get(at).copied().ok_or_else(|| {
            InputError::new(&self.name, line, format!("field `{column}`: missing (the row has {} fields)", row.len()))
        })
    }

    fn number<T: std::str::FromStr>(&self, row: &[&str], line: usize, column: &str) -> Result<T, InputError> {
        let text = self.field(row, line, column)?;
        text.parse()
            .map_err(|_| InputError::new(&self.name, line, format!("field `{column}`: {text:?} is not a whole number")))
    }
}

fn read(dir: &Path, file: &str) -> Result<(String, String), InputError> {
    let path = dir.join(file);
    let name = path.display().to_string();
    let text = std::fs::read_to_string(&path).map_err(|e| InputError::new(&name, 0, format!("cannot read: {e}")))?;
    Ok((name, text))
}

/// Reads the trace in `dir` (the `alibaba-openb-2023` folder) into a fleet and a trace.
pub fn load(dir: &Path, options: &Options) -> Result<(FleetSpec, Trace), InputError> {
    let node_file = if options.cpu_nodes { "openb_node_list_all_node.csv" } else { "openb_node_list_gpu_node.csv" };
    let (name, text) = read(dir, node_file)?;
    let nodes = csv(&name, &text, &["sn", "cpu_milli", "memory_mib", "gpu", "model"])?;
    // Node types keyed by shape, in the order shapes first appear.
    let mut types: Vec<NodeType> = Vec::new();
    let (mut gpu_nodes, mut cpu_only_nodes) = (0usize, 0usize);
    for (line, row) in &nodes.rows {
        let gpus: u32 = nodes.number(row, *line, "gpu")?;
        if gpus > 0 {
            if options.max_nodes.is_some_and(|max| gpu_nodes >= max) {
                continue;
            }
            gpu_nodes += 1;
        } else {
            if options.max_cpu_nodes.is_some_and(|max| cpu_only_nodes >= max) {
                continue;
            }
            cpu_only_nodes += 1;
        }
        let cpu_millis: u32 = nodes.number(row, *line, "cpu_milli")?;
        let memory_mb: u64 = nodes.number(row, *line, "memory_mib")?;
        let model = nodes.field(row, *line, "model")?.to_owned();
        if gpus > 0 && model.is_empty() {
            return Err(InputError::new(&name, *line, "field `model`: a node with GPUs names no model"));
        }
        let type_name = if gpus > 0 {
            format!("{model}x{gpus}-c{}", cpu_millis / 1000)
        } else {
            format!("cpu-c{}", cpu_millis / 1000)
        };
        match types.iter_mut().find(|t| t.name == type_name && t.memory_mb == memory_mb) {
            Some(t) => t.count += 1,
            None => {
                let name = if types.iter().any(|t| t.name == type_name) {
                    format!("{type_name}-m{}", memory_mb / 1024)
                } else {
                    type_name
                };
                types.push(NodeType {
                    name,
                    count: 1,
                    gpus,
                    gpu_model: model.clone(),
                    gpu_memory_mb: if gpus > 0 { gpu_memory_mb(&model) } else { 0 },
                    cpu_millis,
                    memory_mb,
                    cost_per_hour: f64::from(gpus) * gpu_price_per_hour(&model)
                        + f64::from(cpu_millis) / 1000.0 * CPU_CORE_PRICE_PER_HOUR,
                    gpu_sharing: if gpus > 0 { options.gpu_sharing } else { GpuSharing::None },
                    mig_layout: Vec::new(),
                });
            }
        }
    }

    let (name, text) = read(dir, &options.pod_file)?;
    let pods = csv(
        &name,
        &text,
        // What every pod list has; `gpu_spec`, `qos` and the times are optional (multigpu20 has
        // only the shapes: any model, tenant `batch`, and the cluster filled in file order).
        &["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"],
    )?;
    let timed = pods.has("creation_time") && pods.has("deletion_time");
    let fill = options.fill || !timed;
    let compress = options.compress;
    if !(compress.is_finite() && compress >= 1.0) {
        return Err(InputError::new(
            "--compress",
            0,
            format!("{compress} is not a factor of 1 or more (1 replays the trace as it was)"),
        ));
    }
    let mut workloads = Vec::with_capacity(pods.rows.len());
    for (position, (line, row)) in pods.rows.iter().enumerate() {
        let (created, deleted): (u64, u64) = if fill {
            (position as u64, position as u64 + FILL_LIFETIME_S)
        } else {
            (pods.number(row, *line, "creation_time")?, pods.number(row, *line, "deletion_time")?)
        };
        if deleted < created {
            return Err(InputError::new(
                &name,
                *line,
                format!("field `deletion_time`: {deleted} is before the creation time {created}"),
            ));
        }
        if !fill && deleted <= options.start_s {
            continue;
        }
        let (created, arrive) = if fill {
            (created, created)
        } else if created < options.start_s {
            (options.start_s, 0)
        } else {
            (created, ((created - options.start_s) as f64 / compress) as u64)
        };
        let gpus: u32 = pods.number(row, *line, "num_gpu")?;
        let gpu_milli: u32 = pods.number(row, *line, "gpu_milli")?;
        let qos = if pods.has("qos") { pods.field(row, *line, "qos")? } else { "Burstable" };
        let (tenant, class, priority, preemptible, checkpointable) = match qos {
            "LS" => ("serving", WorkloadClass::RealtimeInference, 100, false, false),
            "Burstable" | "Guaranteed" => ("batch", WorkloadClass::BatchInference, 50, true, false),
            "BE" => ("research", WorkloadClass::Training, 0, true, true),
            other => {
                return Err(InputError::new(
                    &name,
                    *line,
                    format!("field `qos`: {other:?} is none of LS, BE, Burstable, Guaranteed"),
                ));
            }
        };
        let spec = if pods.has("gpu_spec") { pods.field(row, *line, "gpu_spec")? } else { "" };
        let fraction = gpus == 0 && gpu_milli > 0;
        let gpus = if fraction { 1 } else { gpus };
        let models: Vec<String> = spec.split('|').map(str::trim).filter(|m| !m.is_empty()).map(str::to_owned).collect();
        workloads.push(TraceWorkload {
            mig_profile: None,
            id: pods.field(row, *line, "name")?.to_owned(),
            tenant: tenant.to_owned(),
            class,
            arrive_s: arrive,
            duration_s: (deleted - created).max(1),
            gpus,
            gpu_milli: if gpus == 0 { 1000 } else { gpu_milli.clamp(1, 1000) },
            gpu_memory_mb: 0,
            gpu_models: models,
            cpu_millis: pods.number(row, *line, "cpu_milli")?,
            memory_mb: pods.number(row, *line, "memory_mib")?,
            priority,
            preemptible,
            checkpointable,
            cpu_capable: false,
        });
    }
    workloads.sort_by(|a, b| a.arrive_s.cmp(&b.arrive_s).then_with(|| a.id.cmp(&b.id)));
    if options.max_nodes.is_some() || options.max_cpu_nodes.is_some() {
        // A slice of the fleet keeps only the pods some node of it could ever hold.
        workloads.retain(|w| {
            types.iter().any(|t| {
                t.gpus >= w.gpus
                    && t.cpu_millis >= w.cpu_millis
                    && t.memory_mb >= w.memory_mb
                    && (w.gpus == 0
                        || w.gpu_models.is_empty()
                        || w.gpu_models.iter().any(|m| airtime_policy_sdk::model_allowed(m, &t.gpu_model)))
            })
        });
    }
    if let Some(max) = options.max_pods {
        workloads.truncate(max);
    }

    let total_gpus: u64 = types.iter().map(|t| u64::from(t.count) * u64::from(t.gpus)).sum();
    let mut demand: BTreeMap<&str, f64> = BTreeMap::new();
    for w in &workloads {
        *demand.entry(w.tenant.as_str()).or_default() += f64::from(w.gpus) * w.duration_s as f64;
    }
    let all: f64 = demand.values().sum::<f64>().max(1.0);
    let tenants = ["serving", "batch", "research"]
        .iter()
        .map(|&name| TenantSpec {
            name: name.to_owned(),
            guaranteed_gpus: (demand.get(name).copied().unwrap_or(0.0) / all * total_gpus as f64).floor() as u32,
            weight: 1,
            tier: 0,
            may_borrow: true,
            gpu_limit: None,
            policy: None,
        })
        .collect();
    let fleet = FleetSpec { tenants, node_types: types, settings: PrioritySettings::default() };
    fleet.check().map_err(|m| InputError::new(node_file, 0, m))?;
    Ok((fleet, Trace { workloads, ..Trace::default() }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(nodes: &str, pods: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("openb_node_list_gpu_node.csv"), nodes).expect("write");
        std::fs::write(dir.path().join("openb_pod_list_default.csv"), pods).expect("write");
        dir
    }

    const NODES: &str =
        "sn,cpu_milli,memory_mib,gpu,model\nn0,96000,786432,8,G2\nn1,96000,786432,8,G2\nn2,64000,262144,2,T4\n";
    const HEADER: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n";

    #[test]
    fn nodes_become_types_and_pods_become_workloads() {
        let pods = format!(
            "{HEADER}p1,8000,16384,0,460,,LS,Running,100,700,100\np0,4000,8192,2,1000,T4|P100,BE,Running,0,50,0\np2,1000,1024,0,0,,Burstable,Running,10,20,\n"
        );
        let dir = folder(NODES, &pods);
        let (fleet, trace) = load(dir.path(), &Options::default()).expect("loads");
        assert_eq!(fleet.node_types.len(), 2);
        assert_eq!(
            (fleet.node_types[0].count, fleet.node_types[0].gpus, fleet.node_types[0].gpu_memory_mb),
            (2, 8, 24576)
        );
        assert_eq!(fleet.gpu_count(), 18);
        let ids: Vec<&str> = trace.workloads.iter().map(|w| w.id.as_str()).collect();
        assert_eq!(ids, ["p0", "p2", "p1"], "in arrival order");
        let ls = &trace.workloads[2];
        assert_eq!((ls.class, ls.gpus, ls.gpu_milli, ls.duration_s), (WorkloadClass::RealtimeInference, 1, 460, 600));
        assert_eq!(trace.workloads[0].gpu_models, ["T4", "P100"]);
        assert_eq!(trace.workloads[1].gpus, 0, "a pod without GPUs is CPU work");
        let guarantees: Vec<u32> = fleet.tenants.iter().map(|t| t.guaranteed_gpus).collect();
        assert_eq!(guarantees, [15, 0, 2], "18 GPUs in proportion to the GPU-seconds asked: 600 serving, 100 research");
    }

    #[test]
    fn a_later_start_keeps_the_pods_alive_then_with_the_rest_of_their_lifetime() {
        let pods = format!(
            "{HEADER}gone,1000,1024,1,1000,,BE,Running,0,50,0\nalive,1000,1024,1,1000,,LS,Running,10,400,10\nlater,1000,1024,1,1000,,BE,Running,300,320,300\n"
        );
        let dir = folder(NODES, &pods);
        let options = Options { start_s: 100, compress: 10.0, ..Options::default() };
        let (_, trace) = load(dir.path(), &options).expect("loads");
        let got: Vec<(&str, u64, u64)> =
            trace.workloads.iter().map(|w| (w.id.as_str(), w.arrive_s, w.duration_s)).collect();
        assert_eq!(got, [("alive", 0, 300), ("later", 20, 20)]);
    }

    #[test]
    fn a_pod_list_of_shapes_alone_fills_the_cluster_in_file_order() {
        // multigpu20 has no times, QoS or model constraint: pods arrive 1/s in file order and stay.
        let pods = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nb,1000,1024,1,460\na,2000,2048,2,1000\n";
        let dir = folder(NODES, pods);
        let (_, trace) = load(dir.path(), &Options::default()).expect("loads");
        let got: Vec<(&str, u64, u64, &str)> =
            trace.workloads.iter().map(|w| (w.id.as_str(), w.arrive_s, w.duration_s, w.tenant.as_str())).collect();
        assert_eq!(got, [("b", 0, FILL_LIFETIME_S, "batch"), ("a", 1, FILL_LIFETIME_S, "batch")]);
        assert!(trace.workloads.iter().all(|w| w.gpu_models.is_empty()));
        // A timed list can be filled the same way.
        let timed =
            format!("{HEADER}late,1000,1024,1,1000,,LS,Running,900,950,900\nearly,1000,1024,1,500,,BE,Running,5,6,5\n");
        let dir = folder(NODES, &timed);
        let (_, trace) = load(dir.path(), &Options { fill: true, ..Options::default() }).expect("loads");
        let got: Vec<(&str, u64)> = trace.workloads.iter().map(|w| (w.id.as_str(), w.arrive_s)).collect();
        assert_eq!(got, [("late", 0), ("early", 1)], "file order, not creation order");
    }

    #[test]
    fn a_bad_row_names_its_line_and_field() {
        for (row, expected) in [
            ("p0,4000,8192,x,1000,,BE,Running,0,50,0", "line 2: field `num_gpu`: \"x\" is not a whole number"),
            ("p0,4000,8192,1,1000,,XX,Running,0,50,0", "line 2: field `qos`"),
            ("p0,4000,8192,1,1000,,BE,Running,60,50,0", "line 2: field `deletion_time`"),
            ("p0,4000", "line 2: field `creation_time`: missing (the row has 2 fields)"),
        ] {
            let dir = folder(NODES, &format!("{HEADER}{row}\n"));
            let err = load(dir.path(), &Options::default()).expect_err(row).to_string();
            assert!(err.contains(expected), "{row}: {err}");
        }
        let dir = folder(NODES, HEADER);
        let err =
            load(dir.path(), &Options { compress: 0.5, ..Options::default() }).expect_err("a compression below 1");
        assert!(err.to_string().contains("--compress: 0.5 is not a factor of 1 or more"), "{err}");
        let dir = folder("sn,cpu,memory_mib,gpu,model\n", HEADER);
        assert!(
            load(dir.path(), &Options::default()).expect_err("no column").to_string().contains("no column `cpu_milli`")
        );
    }
}
