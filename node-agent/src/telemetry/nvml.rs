//! Real NVIDIA GPUs, read through NVML.
//!
//! NVML is loaded at run time (`libnvidia-ml.so.1`), so the same agent binary runs on CPU-only
//! servers: [`NvmlGpus::open`] then fails and the caller carries on without real GPUs.

use std::path::Path;

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError, TemperatureSensor};
use nvml_wrapper::error::NvmlError;

use crate::protocol::{GpuInventory, GpuModel, GpuSample};

const MIB: u64 = 1024 * 1024;

/// The NVML library and the GPUs it found at start.
pub struct NvmlGpus {
    nvml: Nvml,
    /// GPUs that answered at start. A GPU that failed then is left out rather than advertised
    /// with made-up properties.
    gpus: Vec<GpuInventory>,
    /// What NVML counts, including GPUs left out; simulated GPUs are numbered after these.
    device_count: u32,
}

impl NvmlGpus {
    /// Loads NVML (from `library` when given) and lists its GPUs. The error is the reason NVML is
    /// not available, for the log.
    pub fn open(library: Option<&Path>) -> Result<Self, NvmlError> {
        let nvml = match library {
            Some(path) => Nvml::builder().lib_path(path.as_os_str()).init()?,
            None => Nvml::init()?,
        };
        let device_count = nvml.device_count()?;
        let mut gpus = Vec::new();
        for index in 0..device_count {
            match describe(&nvml, index) {
                Ok(gpu) => gpus.push(gpu),
                Err(error) => {
                    tracing::warn!(index, %error, "NVML lists this GPU but cannot describe it; not advertising it");
                }
            }
        }
        Ok(Self { nvml, gpus, device_count })
    }

    pub fn gpus(&self) -> &[GpuInventory] {
        &self.gpus
    }

    /// The first index free for GPUs that do not come from NVML.
    pub fn next_index(&self) -> u32 {
        self.device_count
    }

    /// Reads every advertised GPU. Never fails as a whole: what cannot be read is `None`.
    pub fn sample(&self) -> Vec<GpuSample> {
        self.gpus.iter().map(|gpu| sample_one(&self.nvml, gpu.index)).collect()
    }
}

fn describe(nvml: &Nvml, index: u32) -> Result<GpuInventory, NvmlError> {
    let device = nvml.device_by_index(index)?;
    let memory_mb = match device.memory_info() {
        Ok(memory) => memory.total / MIB,
        Err(error) => {
            tracing::warn!(index, %error, "cannot read the GPU's memory size; advertising 0 MiB");
            0
        }
    };
    Ok(GpuInventory {
        index,
        uuid: Some(device.uuid()?),
        model: GpuModel::lossy(&device.name()?),
        memory_mb,
        // NVLink topology is not read yet; the protocol allows null.
        nvlink_group: None,
        simulated: false,
    })
}

fn sample_one(nvml: &Nvml, index: u32) -> GpuSample {
    let empty =
        GpuSample { index, util: None, memory_used_mb: None, temperature_c: None, power_w: None, ecc_errors: None };
    let device = match nvml.device_by_index(index) {
        Ok(device) => device,
        Err(error) => {
            tracing::debug!(index, %error, "cannot open the GPU for a sample");
            return empty;
        }
    };
    GpuSample {
        util: device.utilization_rates().ok().map(|u| u.gpu as f32 / 100.0),
        memory_used_mb: device.memory_info().ok().map(|m| m.used / MIB),
        temperature_c: device.temperature(TemperatureSensor::Gpu).ok().map(|t| t as f32),
        // NVML reports milliwatts.
        power_w: device.power_usage().ok().map(|mw| mw as f32 / 1000.0),
        // Uncorrected errors since the driver loaded: the count that means a GPU is unhealthy now.
        // Fails with NotSupported on GPUs without ECC, which is then null.
        ecc_errors: device.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile).ok(),
        ..empty
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_an_error_not_a_panic() {
        let result = NvmlGpus::open(Some(Path::new("libnvidia-ml-absent-for-airtime-tests.so")));
        let Err(error) = result else {
            panic!("a library that does not exist cannot load");
        };
        assert!(!error.to_string().is_empty());
    }
}
