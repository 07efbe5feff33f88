//! What the node has and how it is used: host CPU and memory, real GPUs (NVML) and simulated GPUs.
//!
//! Reading is blocking (procfs, NVML calls); the agent calls [`Telemetry::sample`] off the async
//! workers.

pub mod host;
pub mod nvml;
pub mod simulated;

use std::collections::BTreeSet;

use thiserror::Error;

use crate::config::{NvmlMode, SimulatedGpuSpec};
use crate::protocol::{GpuInventory, GpuSource, TelemetryReport};
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

pub struct Telemetry {
    host: HostSampler,
    nvml: Option<NvmlGpus>,
    simulated: SimulatedGpus,
}

impl Telemetry {
    /// Finds the node's resources. A missing NVML is not an error: it is logged once and the node
    /// runs without real GPUs.
    pub fn discover(
        nvml_mode: &NvmlMode,
        simulated: &[SimulatedGpuSpec],
        node_name: &str,
    ) -> Result<Self, TelemetryError> {
        let host = HostSampler::new()?;
        let simulated_count: u32 = simulated.iter().map(|s| s.count).sum();
        let nvml = match nvml_mode {
            NvmlMode::Disabled => {
                tracing::info!("NVML disabled by --no-nvml");
                None
            }
            NvmlMode::Enabled { library } => match NvmlGpus::open(library.as_deref()) {
                Ok(gpus) => {
                    tracing::info!(gpus = gpus.gpus().len(), "NVML loaded");
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
        let first_simulated = nvml.as_ref().map_or(0, NvmlGpus::next_index);
        let simulated = SimulatedGpus::new(simulated, first_simulated, node_name);
        Ok(Self { host, nvml, simulated })
    }

    pub fn inventory(&self) -> Inventory {
        let capacity = self.host.capacity();
        let real = self.nvml.as_ref().map_or(&[][..], NvmlGpus::gpus);
        let gpu_source = if !real.is_empty() {
            GpuSource::Nvml
        } else if !self.simulated.gpus().is_empty() {
            GpuSource::Simulated
        } else {
            GpuSource::None
        };
        Inventory {
            cpu_millis: capacity.cpu_millis,
            memory_mb: capacity.memory_mb,
            gpu_source,
            gpus: real.iter().chain(self.simulated.gpus()).cloned().collect(),
        }
    }

    /// One sample. `busy_gpus` are the GPU indices running workloads hold (drives simulated GPUs).
    pub fn sample(&mut self, busy_gpus: &BTreeSet<u32>) -> TelemetryReport {
        let host = self.host.sample();
        let mut gpus = self.nvml.as_ref().map(NvmlGpus::sample).unwrap_or_default();
        gpus.extend(self.simulated.sample(busy_gpus));
        TelemetryReport { cpu_util: host.cpu_util as f32, memory_used_mb: host.memory_used_mb, gpus }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn absent_nvml() -> NvmlMode {
        NvmlMode::Enabled { library: Some(PathBuf::from("libnvidia-ml-absent-for-airtime-tests.so")) }
    }

    #[test]
    fn without_nvml_the_node_is_a_cpu_node() -> Result<(), TelemetryError> {
        let mut telemetry = Telemetry::discover(&absent_nvml(), &[], "n1")?;
        let inventory = telemetry.inventory();
        assert_eq!(inventory.gpu_source, GpuSource::None);
        assert!(inventory.gpus.is_empty());
        assert!(inventory.cpu_millis >= 1000);
        assert!(inventory.memory_mb > 0);
        let report = telemetry.sample(&BTreeSet::new());
        assert!(report.gpus.is_empty());
        assert!(report.memory_used_mb > 0);
        Ok(())
    }

    #[test]
    fn without_nvml_simulated_gpus_start_at_zero() -> Result<(), TelemetryError> {
        let spec = SimulatedGpuSpec { count: 2, model: "H100-SXM".into(), memory_mb: 81920 };
        let mut telemetry = Telemetry::discover(&absent_nvml(), &[spec], "n1")?;
        let inventory = telemetry.inventory();
        assert_eq!(inventory.gpu_source, GpuSource::Simulated);
        let indices: Vec<u32> = inventory.gpus.iter().map(|g| g.index).collect();
        assert_eq!(indices, vec![0, 1]);
        let report = telemetry.sample(&BTreeSet::from([0]));
        assert_eq!(report.gpus.len(), 2);
        assert!(report.gpus[0].util.unwrap_or_default() > 0.9);
        assert_eq!(report.gpus[1].util, Some(0.0));
        Ok(())
    }

    #[test]
    fn disabled_nvml_is_a_cpu_node() -> Result<(), TelemetryError> {
        let telemetry = Telemetry::discover(&NvmlMode::Disabled, &[], "n1")?;
        assert_eq!(telemetry.inventory().gpu_source, GpuSource::None);
        Ok(())
    }
}
