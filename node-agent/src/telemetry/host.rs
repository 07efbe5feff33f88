//! Host CPU and memory, read with `sysinfo`.

use sysinfo::{CpuRefreshKind, MemoryRefreshKind, System};

use super::TelemetryError;

const MIB: u64 = 1024 * 1024;

/// Samples host CPU utilisation and memory. CPU utilisation is measured between two samples, so
/// the value a sample returns covers the time since the previous one (one heartbeat interval).
pub struct HostSampler {
    system: System,
}

/// What the host offers, read once at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostCapacity {
    /// Logical cores × 1000.
    pub cpu_millis: u64,
    /// Total memory, MiB.
    pub memory_mb: u64,
}

/// One sample of host use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostSample {
    /// 0..1 over the time since the previous sample.
    pub cpu_util: f64,
    /// Memory in use (total less available), MiB.
    pub memory_used_mb: u64,
}

impl HostSampler {
    pub fn new() -> Result<Self, TelemetryError> {
        let mut system = System::new().map_err(|e| TelemetryError::Host(e.to_string()))?;
        // The first CPU refresh sets the baseline the first sample is measured against.
        system.refresh_cpu_specifics(CpuRefreshKind::nothing().with_usage());
        system.refresh_memory_specifics(MemoryRefreshKind::nothing().with_ram());
        Ok(Self { system })
    }

    pub fn capacity(&self) -> HostCapacity {
        let cores = match self.system.cpus().len() {
            0 => std::thread::available_parallelism().map_or(1, usize::from),
            n => n,
        };
        HostCapacity {
            cpu_millis: u64::try_from(cores).unwrap_or(u64::MAX / 1000) * 1000,
            memory_mb: self.system.total_memory() / MIB,
        }
    }

    pub fn sample(&mut self) -> HostSample {
        self.system.refresh_cpu_specifics(CpuRefreshKind::nothing().with_usage());
        self.system.refresh_memory_specifics(MemoryRefreshKind::nothing().with_ram());
        let percent = f64::from(self.system.global_cpu_usage());
        HostSample { cpu_util: (percent / 100.0).clamp(0.0, 1.0), memory_used_mb: self.system.used_memory() / MIB }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn reads_real_cpu_and_memory() -> Result<(), TelemetryError> {
        let mut sampler = HostSampler::new()?;
        let capacity = sampler.capacity();
        assert!(capacity.cpu_millis >= 1000, "{capacity:?}");
        assert!(capacity.memory_mb > 0, "{capacity:?}");

        // Keep one core busy between two samples so the CPU reading cannot be an idle zero.
        std::thread::sleep(sysinfo::MINIMUM_CPU_UPDATE_INTERVAL);
        sampler.sample();
        let busy_until = Instant::now() + Duration::from_millis(400);
        let mut spins = 0_u64;
        while Instant::now() < busy_until {
            spins = std::hint::black_box(spins.wrapping_add(1));
        }
        let sample = sampler.sample();
        assert!(sample.cpu_util > 0.0 && sample.cpu_util <= 1.0, "{sample:?}");
        assert!(sample.memory_used_mb > 0, "{sample:?}");
        assert!(sample.memory_used_mb <= capacity.memory_mb, "{sample:?}");
        Ok(())
    }
}
