//! Simulated GPUs, for demos and tests on machines without NVIDIA hardware (`--simulate-gpus`).
//!
//! Their telemetry is SYNTHETIC. It is derived from what the agent runs, so a dashboard shows the
//! scheduler's decisions: a GPU that a running workload holds reads about 95 % utilisation and
//! about 80 % of its memory in use, with a slow wobble so the numbers move; a free GPU reads 0.
//! Temperature and power follow the same two states. ECC errors are always 0. Nothing here is
//! measured, and every simulated GPU is advertised with `simulated: true`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::config::SimulatedGpuSpec;
use crate::protocol::{GpuInventory, GpuModel, GpuSample};

const BUSY_UTIL: f64 = 0.95;
const BUSY_MEMORY_SHARE: f64 = 0.8;
const IDLE_TEMPERATURE_C: f64 = 34.0;
const BUSY_TEMPERATURE_C: f64 = 67.0;
const IDLE_POWER_W: f64 = 60.0;
const BUSY_POWER_W: f64 = 450.0;

pub struct SimulatedGpus {
    gpus: Vec<GpuInventory>,
    since: Instant,
}

impl SimulatedGpus {
    /// Numbers the GPUs of `specs` from `first_index` on. UUIDs derive from the node name, so a
    /// restarted agent advertises the same GPUs.
    pub fn new(specs: &[SimulatedGpuSpec], first_index: u32, node_name: &str) -> Self {
        let gpus = specs
            .iter()
            .flat_map(|spec| (0..spec.count).map(move |_| spec))
            .zip(first_index..)
            .map(|(spec, index)| GpuInventory {
                index,
                uuid: Some(format!("SIM-{node_name}-{index}")),
                model: GpuModel::lossy(&spec.model),
                memory_mb: spec.memory_mb,
                nvlink_group: None,
                simulated: true,
            })
            .collect();
        Self { gpus, since: Instant::now() }
    }

    pub fn gpus(&self) -> &[GpuInventory] {
        &self.gpus
    }

    /// `busy` holds the indices of the GPUs that running workloads hold.
    pub fn sample(&self, busy: &BTreeSet<u32>) -> Vec<GpuSample> {
        self.sample_at(busy, self.since.elapsed())
    }

    fn sample_at(&self, busy: &BTreeSet<u32>, elapsed: Duration) -> Vec<GpuSample> {
        self.gpus
            .iter()
            .map(|gpu| {
                // A slow wave per GPU, in -1..1, so a busy GPU's numbers move a little.
                let wobble = (elapsed.as_secs_f64() * 0.7 + f64::from(gpu.index) * 1.3).sin();
                if busy.contains(&gpu.index) {
                    let memory = gpu.memory_mb as f64 * BUSY_MEMORY_SHARE * (1.0 + 0.01 * wobble);
                    GpuSample {
                        index: gpu.index,
                        util: Some((BUSY_UTIL + 0.03 * wobble).clamp(0.0, 1.0) as f32),
                        memory_used_mb: Some((memory.round() as u64).min(gpu.memory_mb)),
                        temperature_c: Some((BUSY_TEMPERATURE_C + 2.0 * wobble) as f32),
                        power_w: Some((BUSY_POWER_W + 15.0 * wobble) as f32),
                        ecc_errors: Some(0),
                    }
                } else {
                    GpuSample {
                        index: gpu.index,
                        util: Some(0.0),
                        memory_used_mb: Some(0),
                        temperature_c: Some(IDLE_TEMPERATURE_C as f32),
                        power_w: Some(IDLE_POWER_W as f32),
                        ecc_errors: Some(0),
                    }
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(count: u32, model: &str, memory_mb: u64) -> SimulatedGpuSpec {
        SimulatedGpuSpec { count, model: model.into(), memory_mb }
    }

    #[test]
    fn numbers_gpus_after_the_first_index() {
        let sim = SimulatedGpus::new(&[spec(2, "H100-SXM", 81920), spec(1, "L4", 23034)], 4, "n1");
        let listed: Vec<(u32, &str, &str, u64, bool)> = sim
            .gpus()
            .iter()
            .map(|g| (g.index, g.uuid.as_deref().unwrap_or_default(), g.model.as_str(), g.memory_mb, g.simulated))
            .collect();
        assert_eq!(
            listed,
            vec![
                (4, "SIM-n1-4", "H100-SXM", 81920, true),
                (5, "SIM-n1-5", "H100-SXM", 81920, true),
                (6, "SIM-n1-6", "L4", 23034, true),
            ]
        );
    }

    #[test]
    fn telemetry_follows_the_running_workloads() {
        let sim = SimulatedGpus::new(&[spec(2, "H100-SXM", 81920)], 0, "n1");
        let busy = BTreeSet::from([1]);
        for second in 0..20 {
            let samples = sim.sample_at(&busy, Duration::from_secs(second));
            let (idle, held) = (&samples[0], &samples[1]);
            assert_eq!((idle.util, idle.memory_used_mb), (Some(0.0), Some(0)));
            let util = held.util.unwrap_or_default();
            assert!((0.92..=0.98).contains(&util), "{util}");
            let used = held.memory_used_mb.unwrap_or_default();
            assert!((64880..=66200).contains(&used), "{used}");
            assert_eq!(held.ecc_errors, Some(0));
        }
        let all_idle = sim.sample(&BTreeSet::new());
        assert!(all_idle.iter().all(|g| g.util == Some(0.0)));
    }
}
