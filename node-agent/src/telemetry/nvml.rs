//! Real NVIDIA GPUs, read through NVML.
//!
//! NVML is loaded at run time (`libnvidia-ml.so.1`), so the same agent binary runs on CPU-only
//! servers: [`NvmlGpus::open`] then fails and the caller carries on without real GPUs.
//!
//! What is advertised follows the node's sharing mode:
//! - `none`, `time_slicing`, `mps`: each physical GPU, slot = its NVML index. In MPS mode the MPS
//!   control daemon is joined or started first; if that fails the GPUs are advertised
//!   `time_slicing`, with a note saying why.
//! - `mig`: each MIG instance of each GPU whose MIG mode is enabled, slots numbered 0.. across the
//!   node (`parent_index`: the GPU's NVML index, uuid `MIG-…`, memory the instance's); a GPU whose
//!   MIG mode is disabled (or that has no MIG) is advertised whole, sharing `none`, with a note.
//!
//! Each heartbeat reads every advertised device and, for each slot a workload holds, its
//! processes' memory (`nvmlDeviceGetComputeRunningProcesses`, and the MPS clients on an MPS GPU)
//! and SM utilisation (`nvmlDeviceGetProcessUtilization`, from the newest sample seen last time),
//! attributed to workloads by process group ([`super::GpuHolders::owner_of_process`]). A MIG
//! instance is read through its own handle; what NVML does not offer there (utilisation, as a
//! rule) is `None`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use airtime_protocol::agent::{GpuFault, GpuFaultKind, GpuThrottle, ShareSample};
use airtime_protocol::sharing::{GpuSharing, MigProfile};
use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::event::EventSet;
use nvml_wrapper::{Device as NvmlDevice, Nvml};

use super::nvidia::Nvidia;
use super::{
    Accelerator, Device, GpuDevices, GpuHolders, GpuReadings, ProcessBusy, ProcessUse, attribute_shares, sharing_note,
};
use crate::protocol::{GpuInventory, GpuModel, GpuSample, GpuSource};

const MIB: u64 = 1024 * 1024;
/// `NVML_DEVICE_MIG_ENABLE`: the value of an enabled MIG mode.
const MIG_ENABLED: u32 = 1;

/// How to open an advertised device for a sample.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Handle {
    /// A physical GPU, by NVML index.
    Physical { index: u32 },
    /// A MIG instance: its parent's NVML index, its position among the parent's MIG devices, and
    /// its uuid (checked at each sample, so a reconfigured GPU is not misread).
    Mig { parent: u32, position: u32, uuid: String },
}

/// The NVML library and the GPUs it found at start.
pub struct NvmlGpus {
    /// Loaded once for the agent's life (leaked on purpose: the XID event set borrows it).
    nvml: &'static Nvml,
    /// Critical XID events of every physical GPU, when the driver offers them.
    xid_events: Option<EventSet<'static>>,
    /// Per physical GPU (its NVML index), the hardware XIDs seen since the agent started: each is
    /// reported at every heartbeat, so a report lost in an outage loses no fault.
    xids: HashMap<u32, Vec<u64>>,
    /// Devices that answered at start. A GPU that failed then is left out rather than advertised
    /// with made-up properties.
    devices: Vec<Device>,
    /// How to open each of `devices`, in the same order.
    handles: Vec<Handle>,
    /// What NVML counts, including GPUs left out; simulated GPUs are numbered after these.
    device_count: u32,
    /// The first slot after the advertised devices.
    next_slot: u32,
    /// The MPS daemon's pipe directory, when the GPUs are shared through MPS.
    mps_pipe_directory: Option<PathBuf>,
    /// Per slot, the newest per-process utilisation timestamp seen (NVML's CPU clock, µs), so
    /// each sample reads only what is new.
    last_seen: HashMap<u32, u64>,
}

impl NvmlGpus {
    /// Loads NVML (from `library` when given) and lists its GPUs as `sharing` says. In MPS mode
    /// with GPUs, `start_mps` joins or starts the MPS daemon and answers its pipe directory; its
    /// error is why the GPUs are time-sliced instead. The error is the reason NVML is not available, for the log.
    pub fn open(
        library: Option<&Path>,
        sharing: GpuSharing,
        start_mps: impl FnOnce() -> Result<PathBuf, String>,
    ) -> Result<Self, NvmlError> {
        let nvml: &'static Nvml = Box::leak(Box::new(match library {
            Some(path) => Nvml::builder().lib_path(path.as_os_str()).init()?,
            None => Nvml::init()?,
        }));
        let device_count = nvml.device_count()?;
        let mut found: Vec<(Device, Handle)> = Vec::new();
        let mut next_slot = 0;
        for index in 0..device_count {
            let described = match sharing {
                GpuSharing::Mig => describe_mig(nvml, index, next_slot),
                mode => describe(nvml, index, index, mode, None).map(|d| vec![(d, Handle::Physical { index })]),
            };
            match described {
                Ok(devices) => {
                    next_slot += u32::try_from(devices.len()).unwrap_or(u32::MAX);
                    found.extend(devices);
                }
                Err(error) => {
                    tracing::warn!(index, %error, "NVML lists this GPU but cannot describe it; not advertising it");
                }
            }
        }
        if sharing != GpuSharing::Mig {
            next_slot = device_count;
        }
        let mut mps_pipe_directory = None;
        if sharing == GpuSharing::Mps && !found.is_empty() {
            match start_mps() {
                Ok(pipe) => mps_pipe_directory = Some(pipe),
                Err(reason) => {
                    let note =
                        sharing_note(&format!("MPS is not available on this node ({reason}): GPUs are time-sliced"));
                    tracing::warn!("{note}");
                    for (device, _) in &mut found {
                        device.inventory.sharing = GpuSharing::TimeSlicing;
                        device.inventory.sharing_note = Some(note.clone());
                    }
                }
            }
        }
        let (devices, handles) = found.into_iter().unzip();
        let xid_events = xid_event_set(nvml, device_count);
        Ok(Self {
            nvml,
            xid_events,
            xids: HashMap::new(),
            devices,
            handles,
            device_count,
            next_slot,
            mps_pipe_directory,
            last_seen: HashMap::new(),
        })
    }

    /// The first physical GPU number free for GPUs that do not come from NVML.
    pub fn next_physical_index(&self) -> u32 {
        self.device_count
    }

    /// The first slot free for devices that do not come from NVML.
    pub fn next_slot(&self) -> u32 {
        self.next_slot
    }
}

impl GpuDevices for NvmlGpus {
    fn source(&self) -> GpuSource {
        GpuSource::Nvml
    }

    fn devices(&self) -> &[Device] {
        &self.devices
    }

    fn accelerator(&self) -> Arc<dyn Accelerator> {
        Arc::new(Nvidia::new(self.mps_pipe_directory.clone()))
    }

    fn sample(&mut self, holders: &GpuHolders) -> GpuReadings {
        let mut readings = GpuReadings::default();
        if let Some(events) = &self.xid_events {
            for (index, xid) in drain_xids(events) {
                let seen = self.xids.entry(index).or_default();
                if !seen.contains(&xid) {
                    tracing::warn!(gpu = index, xid, "the GPU reported a hardware XID error");
                    seen.push(xid);
                }
            }
        }
        for (device, handle) in self.devices.iter().zip(&self.handles) {
            let slot = device.inventory.index;
            let last_seen = self.last_seen.get(&slot).copied();
            let (mut gpu, shares, newest) = sample_one(self.nvml, device, handle, holders, last_seen);
            let physical = match handle {
                Handle::Physical { index } => *index,
                Handle::Mig { parent, .. } => *parent,
            };
            if let Some(xids) = self.xids.get(&physical) {
                gpu.faults.extend(xids.iter().map(|&xid| GpuFault { kind: GpuFaultKind::Xid, code: Some(xid) }));
            }
            readings.gpus.push(gpu);
            readings.shares.extend(shares);
            if let Some(newest) = newest {
                self.last_seen.insert(slot, newest);
            }
        }
        readings
    }
}

/// A physical GPU as advertised in slot `slot`.
fn describe(
    nvml: &Nvml,
    index: u32,
    slot: u32,
    sharing: GpuSharing,
    note: Option<String>,
) -> Result<Device, NvmlError> {
    let device = nvml.device_by_index(index)?;
    let memory_mb = match device.memory_info() {
        Ok(memory) => memory.total / MIB,
        Err(error) => {
            tracing::warn!(index, %error, "cannot read the GPU's memory size; advertising 0 MiB");
            0
        }
    };
    Ok(Device {
        inventory: GpuInventory {
            index: slot,
            uuid: Some(device.uuid()?),
            model: GpuModel::lossy(&device.name()?),
            memory_mb,
            // NVLink topology is not read yet; the protocol allows null.
            nvlink_group: None,
            simulated: false,
            sharing,
            mig_profile: None,
            parent_index: None,
            sharing_note: note,
        },
        runtime_id: index.to_string(),
    })
}

/// The devices a GPU gives a MIG node, from slot `first_slot` on: its MIG instances, or the GPU
/// whole (sharing `none`, with a note) when its MIG mode is not enabled.
fn describe_mig(nvml: &Nvml, index: u32, first_slot: u32) -> Result<Vec<(Device, Handle)>, NvmlError> {
    let physical = nvml.device_by_index(index)?;
    let whole = |note: String| -> Result<Vec<(Device, Handle)>, NvmlError> {
        tracing::warn!("{note}");
        let device = describe(nvml, index, first_slot, GpuSharing::None, Some(sharing_note(&note)))?;
        Ok(vec![(device, Handle::Physical { index })])
    };
    match physical.mig_mode() {
        Ok(mode) if mode.current == MIG_ENABLED => {}
        Ok(mode) => {
            let pending = if mode.pending == MIG_ENABLED { " (enabled from its next reset)" } else { "" };
            return whole(format!("MIG mode is disabled on GPU {index}{pending}: advertised whole"));
        }
        Err(NvmlError::NotSupported) => return whole(format!("GPU {index} does not support MIG: advertised whole")),
        Err(error) => return whole(format!("cannot read the MIG mode of GPU {index} ({error}): advertised whole")),
    }
    let model = GpuModel::lossy(&physical.name()?);
    let positions = physical.mig_device_count()?;
    let mut devices = Vec::new();
    for position in 0..positions {
        let instance = match physical.mig_device_by_index(position) {
            Ok(instance) => instance,
            // An empty position: no instance was created there.
            Err(NvmlError::NotFound) => continue,
            Err(error) => {
                tracing::warn!(index, position, %error, "cannot open this MIG instance; not advertising it");
                continue;
            }
        };
        let slot = first_slot + u32::try_from(devices.len()).unwrap_or(0);
        match describe_instance(&instance, &model, index, slot) {
            Ok(device) => {
                let uuid = device.runtime_id.clone();
                devices.push((device, Handle::Mig { parent: index, position, uuid }));
            }
            Err(error) => {
                tracing::warn!(index, position, %error, "cannot describe this MIG instance; not advertising it");
            }
        }
    }
    if devices.is_empty() {
        tracing::warn!(
            index,
            "MIG mode is enabled on GPU {index} but it has no MIG instances (create them with `nvidia-smi mig`); \
             nothing on it is advertised"
        );
    }
    Ok(devices)
}

fn describe_instance(instance: &NvmlDevice<'_>, model: &GpuModel, parent: u32, slot: u32) -> Result<Device, NvmlError> {
    let uuid = instance.uuid()?;
    let profile = match instance.name().ok().and_then(|name| MigProfile::from_device_name(&name)) {
        Some(profile) => profile,
        None => profile_from_attributes(instance)?,
    };
    let memory_mb = instance.memory_info()?.total / MIB;
    Ok(Device {
        inventory: GpuInventory {
            index: slot,
            uuid: Some(uuid.clone()),
            model: model.clone(),
            memory_mb,
            nvlink_group: None,
            simulated: false,
            sharing: GpuSharing::Mig,
            mig_profile: Some(profile),
            parent_index: Some(parent),
            sharing_note: None,
        },
        runtime_id: uuid,
    })
}

/// A MIG profile from an instance's attributes, for a driver whose device name does not end in
/// one: `<slices>g.<GiB, rounded up>gb`, as NVIDIA rounds its names.
fn profile_from_attributes(instance: &NvmlDevice<'_>) -> Result<MigProfile, NvmlError> {
    let attributes = instance.attributes()?;
    let gb = attributes.memory_size_mb.div_ceil(1024);
    MigProfile::parse(&format!("{}g.{gb}gb", attributes.gpu_instance_slice_count))
        .map_err(|_| NvmlError::UnexpectedVariant(attributes.gpu_instance_slice_count))
}

/// One device's sample, its shares, and the newest per-process utilisation timestamp read.
fn sample_one(
    nvml: &Nvml,
    device: &Device,
    handle: &Handle,
    holders: &GpuHolders,
    last_seen: Option<u64>,
) -> (GpuSample, Vec<ShareSample>, Option<u64>) {
    let slot = device.inventory.index;
    let empty = GpuSample {
        index: slot,
        util: None,
        memory_used_mb: None,
        temperature_c: None,
        power_w: None,
        ecc_errors: None,
        faults: Vec::new(),
        throttle: Vec::new(),
    };
    let unknown_shares = || attribute_shares(slot, holders, None, None, |_| None);
    let (physical, instance) = match open(nvml, handle) {
        Ok(opened) => opened,
        Err(NvmlError::GpuLost) => {
            tracing::warn!(slot, "the GPU has fallen off the bus");
            let lost = vec![GpuFault { kind: GpuFaultKind::FallenOffBus, code: None }];
            return (GpuSample { faults: lost, ..empty }, unknown_shares(), None);
        }
        Err(error) => {
            tracing::debug!(slot, %error, "cannot open the GPU for a sample");
            return (empty, unknown_shares(), None);
        }
    };
    let faults = faults_of(&physical);
    let throttle = throttle_of(&physical);
    let sample = match &instance {
        None => GpuSample {
            util: physical.utilization_rates().ok().map(|u| u.gpu as f32 / 100.0),
            memory_used_mb: physical.memory_info().ok().map(|m| m.used / MIB),
            temperature_c: physical.temperature(TemperatureSensor::Gpu).ok().map(|t| t as f32),
            // NVML reports milliwatts.
            power_w: physical.power_usage().ok().map(|mw| mw as f32 / 1000.0),
            // Uncorrected errors since the driver loaded: the count that means a GPU is unhealthy
            // now. Fails with NotSupported on GPUs without ECC, which is then null.
            ecc_errors: physical.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile).ok(),
            faults,
            throttle,
            ..empty
        },
        // A MIG instance: its own utilisation (NVML does not offer it on most drivers) and
        // memory; temperature and ECC errors are its GPU's; power is not split between instances.
        Some(instance) => GpuSample {
            util: instance.utilization_rates().ok().map(|u| u.gpu as f32 / 100.0),
            memory_used_mb: instance.memory_info().ok().map(|m| m.used / MIB),
            temperature_c: physical.temperature(TemperatureSensor::Gpu).ok().map(|t| t as f32),
            ecc_errors: physical.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile).ok(),
            faults,
            // The clocks are the physical GPU's: a MIG instance is slowed with it.
            throttle,
            ..empty
        },
    };
    if !holders.is_held(slot) {
        return (sample, Vec::new(), None);
    }
    let target = instance.as_ref().unwrap_or(&physical);
    let processes = processes_of(target, device.inventory.sharing == GpuSharing::Mps);
    let (busy, newest) = match busy_of(target, last_seen) {
        Some((busy, newest)) => (Some(busy), newest),
        None => (None, None),
    };
    let shares =
        attribute_shares(slot, holders, processes.as_deref(), busy.as_deref(), |pid| holders.owner_of_process(pid));
    (sample, shares, newest)
}

/// XIDs that mean the hardware (or its driver state) is bad, not that an application crashed
/// (13, 31, 43 and the like are a program's own faults): double-bit ECC (48, 63, 64, 94, 95),
/// fallen off the bus (79), GSP and PMU failures (61, 62, 119, 120), video processor and NVLink
/// faults (68, 69, 74), row-remapping failure (92).
const HARDWARE_XIDS: [u64; 14] = [48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120];

/// An event set with every physical GPU's critical XID events (`None` when the driver offers
/// none: NotSupported on some GPUs, which are then watched through ECC and retired pages only).
fn xid_event_set(nvml: &'static Nvml, device_count: u32) -> Option<EventSet<'static>> {
    let mut set = nvml.create_event_set().ok()?;
    let mut any = false;
    for index in 0..device_count {
        let Ok(device) = nvml.device_by_index(index) else { continue };
        set = match device.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
            Ok(set) => {
                any = true;
                set
            }
            Err(error) => {
                tracing::info!(index, error = %error.error, "no XID events from this GPU");
                // The set is consumed on error: start another for the GPUs that follow.
                nvml.create_event_set().ok()?
            }
        };
    }
    any.then_some(set)
}

/// The hardware XIDs the event set holds now, as (physical GPU index, XID); never waits.
fn drain_xids(events: &EventSet<'static>) -> Vec<(u32, u64)> {
    let mut found = Vec::new();
    // Bounded: a storm of events is read over several heartbeats.
    for _ in 0..64 {
        let Ok(event) = events.wait(0) else { break };
        if let (Some(XidError::Value(xid)), Ok(index)) = (event.event_data, event.device.index())
            && HARDWARE_XIDS.contains(&xid)
        {
            found.push((index, xid));
        }
    }
    found
}

/// What NVML says is wrong with a physical GPU now: uncorrectable ECC errors since the driver
/// loaded (the volatile count), and retired pages waiting for a reset. A query that fails
/// (NotSupported on GPUs without ECC) says nothing. Hardware XID events come from the event set
/// ([`drain_xids`]); simulated GPUs report faults from `--simulated-gpu-faults`.
fn faults_of(physical: &NvmlDevice<'_>) -> Vec<GpuFault> {
    let mut faults = Vec::new();
    if let Ok(count) = physical.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
        && count > 0
    {
        faults.push(GpuFault { kind: GpuFaultKind::EccUncorrectable, code: Some(count) });
    }
    if physical.are_pages_pending_retired().unwrap_or(false) {
        faults.push(GpuFault { kind: GpuFaultKind::RetiredPagesPending, code: None });
    }
    faults
}

/// Why the GPU's clocks are held down now, of the reasons that mean heat or power (NVML's clock
/// event reasons; `NotSupported` on older GPUs: none).
fn throttle_of(physical: &NvmlDevice<'_>) -> Vec<GpuThrottle> {
    let Ok(reasons) = physical.current_throttle_reasons() else { return Vec::new() };
    [
        (ThrottleReasons::SW_POWER_CAP, GpuThrottle::PowerCap),
        (ThrottleReasons::SW_THERMAL_SLOWDOWN, GpuThrottle::SwThermal),
        (ThrottleReasons::HW_THERMAL_SLOWDOWN, GpuThrottle::HwThermal),
        (ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN, GpuThrottle::HwPowerBrake),
        (ThrottleReasons::HW_SLOWDOWN, GpuThrottle::HwSlowdown),
    ]
    .into_iter()
    .filter(|(bit, _)| reasons.contains(*bit))
    .map(|(_, reason)| reason)
    .collect()
}

/// The physical GPU, and the MIG instance when the handle names one (checked by uuid).
fn open<'n>(nvml: &'n Nvml, handle: &Handle) -> Result<(NvmlDevice<'n>, Option<NvmlDevice<'n>>), NvmlError> {
    match handle {
        Handle::Physical { index } => Ok((nvml.device_by_index(*index)?, None)),
        Handle::Mig { parent, position, uuid } => {
            let physical = nvml.device_by_index(*parent)?;
            let instance = physical.mig_device_by_index(*position)?;
            if instance.uuid()? != *uuid {
                // The GPU was reconfigured since the agent started: this is another instance.
                return Err(NvmlError::NotFound);
            }
            Ok((physical, Some(instance)))
        }
    }
}

/// The compute processes on a device (on an MPS GPU, its MPS clients too); `None` when NVML
/// cannot list them.
fn processes_of(device: &NvmlDevice<'_>, mps: bool) -> Option<Vec<ProcessUse>> {
    let mut listed = device.running_compute_processes().ok()?;
    if mps {
        match device.mps_running_compute_processes() {
            Ok(clients) => listed.extend(clients),
            Err(error) => tracing::debug!(%error, "cannot list the MPS clients of a GPU"),
        }
    }
    Some(
        listed
            .into_iter()
            .map(|p| ProcessUse {
                pid: p.pid,
                memory_mb: match p.used_gpu_memory {
                    UsedGpuMemory::Used(bytes) => Some(bytes / MIB),
                    UsedGpuMemory::Unavailable => None,
                },
            })
            .collect(),
    )
}

/// Per-process SM utilisation since `last_seen` and the newest timestamp among the readings;
/// `None` when NVML does not offer it for this device.
fn busy_of(device: &NvmlDevice<'_>, last_seen: Option<u64>) -> Option<(Vec<ProcessBusy>, Option<u64>)> {
    let readings = match device.process_utilization_stats(last_seen) {
        Ok(readings) => readings,
        // No process was busy since `last_seen`.
        Err(NvmlError::NotFound) => Vec::new(),
        Err(error) => {
            tracing::debug!(%error, "no per-process utilisation for this GPU");
            return None;
        }
    };
    let newest = readings.iter().map(|r| r.timestamp).max().or(last_seen);
    let busy = readings.iter().map(|r| ProcessBusy { pid: r.pid, sm_util: r.sm_util as f32 / 100.0 }).collect();
    Some((busy, newest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_an_error_not_a_panic() {
        for sharing in GpuSharing::ALL {
            let result = NvmlGpus::open(Some(Path::new("libnvidia-ml-absent-for-airtime-tests.so")), sharing, || {
                Err("no GPUs, no MPS".into())
            });
            let Err(error) = result else {
                panic!("a library that does not exist cannot load");
            };
            assert!(!error.to_string().is_empty());
        }
    }
}
