//! What the node has and how it is used: host CPU and memory, real GPUs (NVML) and simulated GPUs.
//!
//! GPUs are read through one trait, [`GpuDevices`], which both sources implement: NVML
//! ([`nvml::NvmlGpus`], absent on a CPU-only server) and the simulation
//! ([`simulated::SimulatedGpus`]). Each advertises [`Device`]s numbered by *slot* — the number the
//! control plane's assignments name in `gpu_indices` — and samples them, and the shares of the
//! workloads holding them ([`GpuHolders`]), every heartbeat.
//!
//! Reading is blocking (procfs, NVML calls); the agent calls [`Telemetry::sample`] off the async
//! workers.
//!
//! How a workload is given its devices is the vendor's too, behind [`Accelerator`]: the
//! environment that names them to the vendor's runtime (NVIDIA's `CUDA_VISIBLE_DEVICES`, its MPS
//! limits), the variables only the agent may set, and what a container needs to reach them (CDI
//! devices, bind mounts). Each source says which accelerator its devices are
//! ([`GpuDevices::accelerator`]): NVML's GPUs and the simulated ones are NVIDIA's
//! ([`nvidia::Nvidia`]). Another vendor (AMD's ROCm: `ROCR_VISIBLE_DEVICES`, `amd.com/gpu`) is one
//! new module implementing both traits. A CPU-only node keeps NVIDIA's naming to say "no GPU"
//! ([`Telemetry::accelerator`]).

pub mod host;
pub mod nvidia;
pub mod nvml;
pub mod simulated;

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use airtime_protocol::agent::{MAX_SHARING_NOTE_CHARS, ShareSample};
use airtime_protocol::sharing::GpuSharing;
use thiserror::Error;
use uuid::Uuid;

use crate::config::{MigLayout, NvmlMode, SimulatedGpuSpec};
use crate::protocol::{GpuInventory, GpuSample, GpuSource, TelemetryReport};
use host::HostSampler;
use nvml::NvmlGpus;
use simulated::SimulatedGpus;

#[derive(Debug, Error)]
pub enum TelemetryError {
    #[error("cannot read host CPU and memory: {0}")]
    Host(String),
}

/// What the node advertises at registration.
#[derive(Debug, Clone, PartialEq)]
pub struct Inventory {
    pub cpu_millis: u64,
    pub memory_mb: u64,
    pub gpu_source: GpuSource,
    /// Real GPUs first, then simulated ones.
    pub gpus: Vec<GpuInventory>,
}

/// One device the node advertises, and how a workload placed on it names it.
#[derive(Debug, Clone, PartialEq)]
pub struct Device {
    /// As registered; `inventory.index` is its slot.
    pub inventory: GpuInventory,
    /// How the vendor's runtime names it to a workload (see [`Accelerator`]). NVIDIA: its entry in
    /// `CUDA_VISIBLE_DEVICES`, a MIG instance's `MIG-…` uuid, a physical GPU's NVML index (with
    /// `CUDA_DEVICE_ORDER=PCI_BUS_ID`, CUDA's index too), a simulated GPU's slot.
    pub runtime_id: String,
}

/// One GPU slot as a workload placed on it sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuSlot {
    /// Its [`Device::runtime_id`].
    pub runtime_id: String,
    pub sharing: GpuSharing,
}

/// The GPU slots a workload is placed on, in the assignment's order (a device's ordinal is its
/// position here), and its share of each.
#[derive(Debug, Clone, Copy)]
pub struct Placement<'a> {
    /// Empty for a CPU placement, which must see no device at all.
    pub gpus: &'a [&'a GpuSlot],
    /// Its share of each, in thousandths (1..=1000; 1000: whole GPUs).
    pub milli: u32,
    /// GPU memory set aside for it on each, MiB, when the assignment named one.
    pub memory_mb: Option<u64>,
}

/// What a container placed on GPUs is given: its environment's device variables, and what the
/// engine adds to its `run`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerAccess {
    pub env: Vec<(String, String)>,
    /// Its devices as CDI names (`<vendor>.com/gpu=<id>`), injected when the engine uses CDI.
    pub cdi_devices: Vec<String>,
    /// Host directories bound into it at the same path (an MPS daemon's pipe directory).
    pub binds: Vec<PathBuf>,
    /// Whether it shares the host's IPC namespace (an MPS client's shared memory).
    pub host_ipc: bool,
}

/// A vendor's way of giving devices to workloads: everything the runner and the container engine
/// know of a vendor goes through here, so they name no vendor themselves.
pub trait Accelerator: Send + Sync + std::fmt::Debug {
    /// The vendor as CDI names it (`nvidia`): its specifications are `<vendor>*.yaml` or `.json`
    /// in the CDI directories, its devices `<vendor>.com/gpu=<id>`.
    fn cdi_vendor(&self) -> &'static str;

    /// Whether a workload's environment gets `name` from the agent alone: the assignment's `env`
    /// cannot set it (the GPUs it sees, their limits).
    fn owns_variable(&self, name: &str) -> bool;

    /// Whether `name`, inherited by the agent, configures the vendor's runtime for the agent
    /// itself and must not reach a workload (an MPS pipe directory the agent was started with).
    fn is_agent_setting(&self, name: &str) -> bool;

    /// The device variables of a process workload's environment.
    fn process_environment(&self, placement: &Placement<'_>) -> Vec<(String, String)>;

    /// What a container workload is given.
    fn container_access(&self, placement: &Placement<'_>) -> ContainerAccess;
}

/// One sample of a source's devices.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuReadings {
    /// One per advertised device.
    pub gpus: Vec<GpuSample>,
    /// One per workload holding a device, for each device it holds.
    pub shares: Vec<ShareSample>,
}

/// A source of GPUs: the one interface the agent reads real and simulated GPUs through.
pub trait GpuDevices: Send {
    /// What the registration says these devices come from.
    fn source(&self) -> GpuSource;

    /// The devices advertised, in slot order.
    fn devices(&self) -> &[Device];

    /// How workloads are given these devices.
    fn accelerator(&self) -> Arc<dyn Accelerator>;

    /// Reads every device, and what each workload holding one uses of it. Never fails as a whole:
    /// what cannot be read is `None`, never an invented number.
    fn sample(&mut self, holders: &GpuHolders) -> GpuReadings;
}

/// One workload holding GPU slots, as the sampler needs to know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub workload_id: Uuid,
    /// Its main process, which leads a process group of its own (the runner starts every workload
    /// so): the processes of that group, and their descendants, are the workload's.
    pub pid: u32,
    /// The slots it was placed on.
    pub slots: Vec<u32>,
    /// Its share of each slot, in thousandths (1000: whole GPUs).
    pub milli: u32,
    /// The GPU memory set aside for it on each slot, MiB, when the assignment named one.
    pub memory_mb: Option<u64>,
    /// How busy it keeps simulated GPUs, in thousandths, when its environment says
    /// (`SIMULATED_GPU_UTIL`, 0..1): a held-but-idle workload for demos and tests. Real GPUs ignore it.
    pub simulated_busy_milli: Option<u32>,
}

/// Who holds which GPU slot: the workloads whose processes have not exited yet, kept current by
/// the runner and read by every sample.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuHolders {
    /// Ordered by workload id, so samples list shares in a stable order.
    holders: Vec<Holder>,
}

impl GpuHolders {
    pub fn new(mut holders: Vec<Holder>) -> Self {
        holders.sort_by_key(|h| h.workload_id);
        Self { holders }
    }

    pub fn holders(&self) -> &[Holder] {
        &self.holders
    }

    /// The workloads holding `slot`.
    pub fn of_slot(&self, slot: u32) -> impl Iterator<Item = &Holder> {
        self.holders.iter().filter(move |h| h.slots.contains(&slot))
    }

    pub fn is_held(&self, slot: u32) -> bool {
        self.of_slot(slot).next().is_some()
    }

    /// Every slot some workload holds.
    pub fn slots(&self) -> BTreeSet<u32> {
        self.holders.iter().flat_map(|h| h.slots.iter().copied()).collect()
    }

    /// The workload process `pid` belongs to: the first workload whose process group holds it or
    /// one of its ancestors (a process that left the group with `setsid` is still found through
    /// its parents). Reads `/proc`, so NVML's pids must be this agent's pid namespace's.
    pub fn owner_of_process(&self, pid: u32) -> Option<Uuid> {
        crate::procfs::ancestry(pid).find_map(|(pid, group)| {
            self.holders.iter().find(|h| h.pid == group || h.pid == pid).map(|h| h.workload_id)
        })
    }
}

/// What NVML says one process uses of one device.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessUse {
    pub pid: u32,
    /// `None` where NVML cannot say.
    pub memory_mb: Option<u64>,
}

/// One per-process utilisation reading of one device.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessBusy {
    pub pid: u32,
    /// SM utilisation, 0..1 of the device.
    pub sm_util: f32,
}

/// Turns one device's per-process readings into one share sample per workload holding `slot`:
/// each process is attributed with `owner` (in production [`GpuHolders::owner_of_process`]) and
/// summed per workload.
///
/// `processes` is `None` when the device's process list could not be read (memory is then
/// `None`); `busy` is `None` when per-process utilisation is unavailable (util is then `None`).
/// NVML lists utilisation only for processes that were busy, so a workload absent from `busy`
/// used none, and lists every compute process, so a workload absent from `processes` holds no GPU
/// memory. A workload whose processes' memory NVML cannot say reports `None`, not 0 (with some of
/// them known: the known sum).
pub fn attribute_shares(
    slot: u32,
    holders: &GpuHolders,
    processes: Option<&[ProcessUse]>,
    busy: Option<&[ProcessBusy]>,
    mut owner: impl FnMut(u32) -> Option<Uuid>,
) -> Vec<ShareSample> {
    let mut owners: HashMap<u32, Option<Uuid>> = HashMap::new();
    let mut owner_of = |pid: u32| *owners.entry(pid).or_insert_with(|| owner(pid));
    // Per pid, the mean of its utilisation readings (NVML may return several per interval).
    let mut per_pid: HashMap<u32, (f32, u32)> = HashMap::new();
    for reading in busy.unwrap_or_default() {
        let entry = per_pid.entry(reading.pid).or_default();
        entry.0 += reading.sm_util.clamp(0.0, 1.0);
        entry.1 += 1;
    }
    let mut busy_of: HashMap<Uuid, f32> = HashMap::new();
    for (pid, (sum, count)) in per_pid {
        if let Some(workload) = owner_of(pid) {
            *busy_of.entry(workload).or_default() += sum / count.max(1) as f32;
        }
    }
    // Per workload: (memory known, MiB) and whether any of its processes' memory was unknown.
    let mut memory_of: HashMap<Uuid, (u64, bool)> = HashMap::new();
    for process in processes.unwrap_or_default() {
        if let Some(workload) = owner_of(process.pid) {
            let entry = memory_of.entry(workload).or_default();
            match process.memory_mb {
                Some(mb) => entry.0 = entry.0.saturating_add(mb),
                None => entry.1 = true,
            }
        }
    }
    holders
        .of_slot(slot)
        .map(|holder| {
            let id = holder.workload_id;
            let memory_used_mb = processes.and_then(|_| match memory_of.get(&id) {
                None => Some(0),
                Some((known, false)) => Some(*known),
                Some((known, true)) if *known > 0 => Some(*known),
                Some(_) => None,
            });
            let util = busy.map(|_| busy_of.get(&id).copied().unwrap_or(0.0).clamp(0.0, 1.0));
            ShareSample { workload_id: id, gpu_index: slot, util, memory_used_mb }
        })
        .collect()
}

/// A sharing note as the protocol takes it: one line of printable characters, at most
/// [`MAX_SHARING_NOTE_CHARS`].
pub fn sharing_note(text: &str) -> String {
    let line: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let words: Vec<&str> = line.split_whitespace().collect();
    words.join(" ").chars().take(MAX_SHARING_NOTE_CHARS).collect()
}

/// How the node's GPUs are found and shared.
#[derive(Debug, Clone, Copy)]
pub struct GpuSettings<'a> {
    pub nvml: &'a NvmlMode,
    pub simulated: &'a [SimulatedGpuSpec],
    pub sharing: GpuSharing,
    /// `--mig-layout`, for simulated GPUs of a MIG node.
    pub mig_layout: Option<&'a MigLayout>,
    pub node_name: &'a str,
    /// `--simulated-gpu-faults`: faults the simulated GPUs report.
    pub simulated_faults: Option<&'a std::path::Path>,
}

pub struct Telemetry {
    host: HostSampler,
    /// NVML's GPUs (when it loaded), then the simulated ones.
    sources: Vec<Box<dyn GpuDevices>>,
}

impl Telemetry {
    /// Finds the node's resources. A missing NVML is not an error: it is logged once and the node
    /// runs without real GPUs. In MPS mode with real GPUs, `start_mps` is called once to join or
    /// start the MPS control daemon, and answers its pipe directory; its error is why the GPUs are
    /// time-sliced instead.
    pub fn discover(
        settings: &GpuSettings<'_>,
        start_mps: impl FnOnce() -> Result<PathBuf, String>,
    ) -> Result<Self, TelemetryError> {
        let host = HostSampler::new()?;
        let simulated_count: u32 = settings.simulated.iter().map(|s| s.count).sum();
        let nvml = match settings.nvml {
            NvmlMode::Disabled => {
                tracing::info!("NVML disabled by --no-nvml");
                None
            }
            NvmlMode::Enabled { library } => match NvmlGpus::open(library.as_deref(), settings.sharing, start_mps) {
                Ok(gpus) => {
                    tracing::info!(gpus = gpus.devices().len(), sharing = %settings.sharing, "NVML loaded");
                    Some(gpus)
                }
                Err(error) if simulated_count == 0 => {
                    tracing::info!("NVML not available ({error}); running as a CPU node");
                    None
                }
                Err(error) => {
                    tracing::info!(
                        "NVML not available ({error}); running as a CPU node plus {simulated_count} simulated GPU(s)"
                    );
                    None
                }
            },
        };
        let (first_physical, first_slot) = nvml.as_ref().map_or((0, 0), |n| (n.next_physical_index(), n.next_slot()));
        let simulated = SimulatedGpus::new(
            settings.simulated,
            simulated::Numbering { first_physical, first_slot },
            settings.node_name,
            settings.sharing,
            settings.mig_layout,
        )
        .with_faults(settings.simulated_faults.map(std::path::Path::to_path_buf));
        let mut sources: Vec<Box<dyn GpuDevices>> = Vec::new();
        if let Some(nvml) = nvml {
            sources.push(Box::new(nvml));
        }
        sources.push(Box::new(simulated));
        Ok(Self { host, sources })
    }

    /// How workloads are given this node's devices: the accelerator of the first source with any.
    /// A CPU-only node uses NVIDIA's, with no MPS daemon, to give a CPU placement an empty
    /// `CUDA_VISIBLE_DEVICES`: NVML may have failed to load on a server whose GPUs CUDA still
    /// finds, and a workload placed on no GPU must use none.
    pub fn accelerator(&self) -> Arc<dyn Accelerator> {
        match self.sources.iter().find(|s| !s.devices().is_empty()) {
            Some(source) => source.accelerator(),
            None => Arc::new(nvidia::Nvidia::default()),
        }
    }

    /// Every advertised device, real ones first.
    pub fn devices(&self) -> Vec<Device> {
        self.sources.iter().flat_map(|s| s.devices().iter().cloned()).collect()
    }

    pub fn inventory(&self) -> Inventory {
        let capacity = self.host.capacity();
        let gpu_source = self.sources.iter().find(|s| !s.devices().is_empty()).map_or(GpuSource::None, |s| s.source());
        Inventory {
            cpu_millis: capacity.cpu_millis,
            memory_mb: capacity.memory_mb,
            gpu_source,
            gpus: self.devices().into_iter().map(|d| d.inventory).collect(),
        }
    }

    /// One sample. `holders` are the workloads holding GPU slots (they drive simulated GPUs, and
    /// real GPUs' per-process readings are attributed to them).
    pub fn sample(&mut self, holders: &GpuHolders) -> TelemetryReport {
        let host = self.host.sample();
        let mut readings = GpuReadings::default();
        for source in &mut self.sources {
            let read = source.sample(holders);
            readings.gpus.extend(read.gpus);
            readings.shares.extend(read.shares);
        }
        TelemetryReport {
            cpu_util: host.cpu_util as f32,
            memory_used_mb: host.memory_used_mb,
            gpus: readings.gpus,
            shares: readings.shares,
            replicas: vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt as _;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    fn absent_nvml() -> NvmlMode {
        NvmlMode::Enabled { library: Some(PathBuf::from("libnvidia-ml-absent-for-airtime-tests.so")) }
    }

    fn settings<'a>(nvml: &'a NvmlMode, simulated: &'a [SimulatedGpuSpec], sharing: GpuSharing) -> GpuSettings<'a> {
        GpuSettings { nvml, simulated, sharing, mig_layout: None, node_name: "n1", simulated_faults: None }
    }

    fn no_mps() -> Result<PathBuf, String> {
        Err("not asked for in this test".into())
    }

    fn whole(workload_id: Uuid, slots: &[u32]) -> Holder {
        Holder {
            workload_id,
            pid: u32::MAX,
            slots: slots.to_vec(),
            milli: 1000,
            memory_mb: None,
            simulated_busy_milli: None,
        }
    }

    #[test]
    fn without_nvml_the_node_is_a_cpu_node() -> Result<(), TelemetryError> {
        let nvml = absent_nvml();
        let mut telemetry = Telemetry::discover(&settings(&nvml, &[], GpuSharing::None), no_mps)?;
        let inventory = telemetry.inventory();
        assert_eq!(inventory.gpu_source, GpuSource::None);
        assert!(inventory.gpus.is_empty());
        assert!(inventory.cpu_millis >= 1000);
        assert!(inventory.memory_mb > 0);
        let report = telemetry.sample(&GpuHolders::default());
        assert!(report.gpus.is_empty() && report.shares.is_empty());
        assert!(report.memory_used_mb > 0);
        Ok(())
    }

    #[test]
    fn without_nvml_simulated_gpus_start_at_zero() -> Result<(), TelemetryError> {
        let spec = [SimulatedGpuSpec { count: 2, model: "H100-SXM".into(), memory_mb: 81920 }];
        let nvml = absent_nvml();
        // MPS with simulated GPUs only: no daemon is asked for.
        let mut telemetry = Telemetry::discover(&settings(&nvml, &spec, GpuSharing::Mps), || {
            Err("the MPS daemon must not be started for simulated GPUs".into())
        })?;
        let inventory = telemetry.inventory();
        assert_eq!(inventory.gpu_source, GpuSource::Simulated);
        let indices: Vec<(u32, GpuSharing)> = inventory.gpus.iter().map(|g| (g.index, g.sharing)).collect();
        assert_eq!(indices, vec![(0, GpuSharing::Mps), (1, GpuSharing::Mps)]);
        assert!(inventory.gpus.iter().all(|g| g.sharing_note.is_none()));
        let workload = Uuid::new_v4();
        let report = telemetry.sample(&GpuHolders::new(vec![whole(workload, &[0])]));
        assert_eq!(report.gpus.len(), 2);
        assert!(report.gpus[0].util.unwrap_or_default() > 0.9);
        assert_eq!(report.gpus[1].util, Some(0.0));
        assert_eq!(report.shares.len(), 1);
        assert_eq!((report.shares[0].workload_id, report.shares[0].gpu_index), (workload, 0));
        Ok(())
    }

    #[test]
    fn disabled_nvml_is_a_cpu_node() -> Result<(), TelemetryError> {
        let telemetry = Telemetry::discover(&settings(&NvmlMode::Disabled, &[], GpuSharing::None), no_mps)?;
        assert_eq!(telemetry.inventory().gpu_source, GpuSource::None);
        Ok(())
    }

    #[test]
    fn sharing_notes_are_one_bounded_line() {
        assert_eq!(sharing_note("MPS failed:\n  exit status 1\t(see log)"), "MPS failed: exit status 1 (see log)");
        assert_eq!(sharing_note(&"x".repeat(2000)).chars().count(), MAX_SHARING_NOTE_CHARS);
    }

    /// A process in its own group, as the runner starts workloads, with a child of its own that
    /// left the group (`setsid`). Returns (leader, escaped grandchild) once both run.
    fn workload_tree(dir: &std::path::Path) -> Result<(std::process::Child, u32), Box<dyn std::error::Error>> {
        let pid_file = dir.join("escaped");
        let script =
            format!("setsid sleep 30 & echo $! > {0}.tmp && mv {0}.tmp {0}; exec sleep 30", pid_file.display());
        let leader = Command::new("sh").args(["-c", &script]).stdout(Stdio::null()).process_group(0).spawn()?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !pid_file.exists() {
            assert!(Instant::now() < deadline, "the workload's child never started");
            std::thread::sleep(Duration::from_millis(10));
        }
        let escaped: u32 = std::fs::read_to_string(&pid_file)?.trim().parse()?;
        Ok((leader, escaped))
    }

    #[test]
    fn processes_are_attributed_to_the_workload_whose_tree_they_are_in() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let (mut leader, escaped) = workload_tree(dir.path())?;
        let quarter = Uuid::new_v4();
        let other = Uuid::new_v4();
        let holders = GpuHolders::new(vec![
            Holder {
                workload_id: quarter,
                pid: leader.id(),
                slots: vec![0],
                milli: 250,
                memory_mb: Some(4096),
                simulated_busy_milli: None,
            },
            Holder {
                workload_id: other,
                pid: u32::MAX - 7,
                slots: vec![0, 1],
                milli: 250,
                memory_mb: None,
                simulated_busy_milli: None,
            },
        ]);
        assert_eq!(holders.owner_of_process(leader.id()), Some(quarter));
        // setsid made it the leader of a new group, but its parent is still the workload's.
        assert_eq!(holders.owner_of_process(escaped), Some(quarter));
        assert_eq!(holders.owner_of_process(std::process::id()), None, "the test itself is no workload");

        // NVML's view: the leader and its escaped child on slot 0, plus a process of nobody's.
        let processes = [
            ProcessUse { pid: leader.id(), memory_mb: Some(3000) },
            ProcessUse { pid: escaped, memory_mb: Some(1000) },
            ProcessUse { pid: std::process::id(), memory_mb: Some(9999) },
        ];
        let busy = [
            ProcessBusy { pid: leader.id(), sm_util: 0.10 },
            ProcessBusy { pid: leader.id(), sm_util: 0.20 },
            ProcessBusy { pid: escaped, sm_util: 0.05 },
        ];
        let shares = attribute_shares(0, &holders, Some(&processes), Some(&busy), |pid| holders.owner_of_process(pid));
        let mut shares = shares.into_iter();
        let (first, second) = (shares.next().ok_or("two shares")?, shares.next().ok_or("two shares")?);
        let (mine, theirs) = if first.workload_id == quarter { (first, second) } else { (second, first) };
        assert_eq!(mine.memory_used_mb, Some(4000));
        assert!((mine.util.unwrap_or_default() - 0.20).abs() < 1e-6, "{mine:?}");
        // A holder with no process on the GPU uses none of it: NVML listed every process.
        assert_eq!((theirs.util, theirs.memory_used_mb), (Some(0.0), Some(0)));
        assert!(shares.next().is_none());

        // What NVML cannot read stays unknown.
        let unknown = attribute_shares(0, &holders, None, None, |pid| holders.owner_of_process(pid));
        assert!(unknown.iter().all(|s| s.util.is_none() && s.memory_used_mb.is_none()), "{unknown:?}");
        let unreadable = [ProcessUse { pid: leader.id(), memory_mb: None }];
        let partly = attribute_shares(0, &holders, Some(&unreadable), None, |pid| holders.owner_of_process(pid));
        assert!(partly.iter().any(|s| s.workload_id == quarter && s.memory_used_mb.is_none()), "{partly:?}");
        // Slot 1 is held by the other workload only.
        let slot_1 = attribute_shares(1, &holders, Some(&processes), Some(&busy), |pid| holders.owner_of_process(pid));
        assert_eq!(slot_1.iter().map(|s| s.workload_id).collect::<Vec<_>>(), vec![other]);

        leader.kill()?;
        leader.wait()?;
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(escaped)?),
            nix::sys::signal::Signal::SIGKILL,
        );
        Ok(())
    }
}
