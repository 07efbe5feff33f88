//! NVIDIA's way of giving GPUs to workloads: CUDA's environment, MPS's limits, the container
//! toolkit's variables and CDI devices. Real GPUs (NVML) and simulated ones both use it.
//!
//! A process workload sees its GPUs through `CUDA_VISIBLE_DEVICES`: each slot's
//! [`super::Device::runtime_id`] (a MIG instance's uuid, a GPU's NVML index), with
//! `CUDA_DEVICE_ORDER=PCI_BUS_ID` so CUDA numbers GPUs as NVML does; a CPU placement gets an empty
//! list, so it sees no GPU. On an MPS GPU it gets `CUDA_MPS_PIPE_DIRECTORY` when the node runs a
//! daemon, and for a share below a whole GPU `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` (⌈milli / 10⌉, at
//! least 1) and, with a memory slice, `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` (`<ordinal>=<MiB>M` per
//! MPS GPU, ordinals counted in `CUDA_VISIBLE_DEVICES`).
//!
//! A container's `NVIDIA_VISIBLE_DEVICES` names its slots as the host knows them (what the
//! toolkit's runtime hook reads; `void` for none: the toolkit then injects no GPU), its
//! `CUDA_VISIBLE_DEVICES` counts them from 0, as CUDA numbers the only GPUs a container sees, and
//! with CDI each slot is `nvidia.com/gpu=<id>`. An MPS client in a container gets the daemon's
//! pipe directory bound in and the host's IPC namespace.

use std::path::PathBuf;

use airtime_protocol::sharing::{GpuSharing, WHOLE_GPU_MILLI};

use super::{Accelerator, ContainerAccess, Placement};

/// Variables only the agent sets; every `CUDA_MPS_…` one is the agent's too.
const OWNED: [&str; 3] = ["CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES"];
const MPS_PREFIX: &str = "CUDA_MPS_";

/// NVIDIA GPUs, and the MPS daemon their MPS shares connect to (none for simulated GPUs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Nvidia {
    mps_pipe_directory: Option<PathBuf>,
}

impl Nvidia {
    pub fn new(mps_pipe_directory: Option<PathBuf>) -> Self {
        Self { mps_pipe_directory }
    }

    /// The MPS variables of a placement: none unless one of its GPUs is an MPS GPU.
    fn mps_environment(&self, placement: &Placement<'_>) -> Vec<(String, String)> {
        let ordinals: Vec<usize> =
            placement.gpus.iter().enumerate().filter(|(_, g)| g.sharing == GpuSharing::Mps).map(|(o, _)| o).collect();
        let mut env = Vec::new();
        if ordinals.is_empty() {
            return env;
        }
        if let Some(pipe) = &self.mps_pipe_directory {
            env.push(("CUDA_MPS_PIPE_DIRECTORY".to_owned(), pipe.display().to_string()));
        }
        let milli = placement.milli;
        if milli < WHOLE_GPU_MILLI {
            env.push(("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".to_owned(), milli.div_ceil(10).max(1).to_string()));
            if let Some(mb) = placement.memory_mb {
                let limits: Vec<String> = ordinals.iter().map(|o| format!("{o}={mb}M")).collect();
                env.push(("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_owned(), limits.join(",")));
            }
        }
        env
    }

    /// The pipe directory an MPS client of this placement connects to.
    fn mps_pipe_for(&self, placement: &Placement<'_>) -> Option<&PathBuf> {
        self.mps_pipe_directory.as_ref().filter(|_| placement.gpus.iter().any(|g| g.sharing == GpuSharing::Mps))
    }
}

fn ids<'a>(placement: &Placement<'a>) -> Vec<&'a str> {
    placement.gpus.iter().map(|g| g.runtime_id.as_str()).collect()
}

impl Accelerator for Nvidia {
    fn cdi_vendor(&self) -> &'static str {
        "nvidia"
    }

    fn owns_variable(&self, name: &str) -> bool {
        OWNED.contains(&name) || self.is_agent_setting(name)
    }

    fn is_agent_setting(&self, name: &str) -> bool {
        name.starts_with(MPS_PREFIX)
    }

    fn process_environment(&self, placement: &Placement<'_>) -> Vec<(String, String)> {
        let mut env = vec![("CUDA_VISIBLE_DEVICES".to_owned(), ids(placement).join(","))];
        env.extend(self.mps_environment(placement));
        env.push(("CUDA_DEVICE_ORDER".to_owned(), "PCI_BUS_ID".to_owned()));
        env
    }

    fn container_access(&self, placement: &Placement<'_>) -> ContainerAccess {
        let ids = ids(placement);
        let ordinals: Vec<String> = (0..ids.len()).map(|i| i.to_string()).collect();
        let mut env = vec![("CUDA_VISIBLE_DEVICES".to_owned(), ordinals.join(","))];
        env.extend(self.mps_environment(placement));
        let host = if ids.is_empty() { "void".to_owned() } else { ids.join(",") };
        env.push(("NVIDIA_VISIBLE_DEVICES".to_owned(), host));
        env.push(("CUDA_DEVICE_ORDER".to_owned(), "PCI_BUS_ID".to_owned()));
        let pipe = self.mps_pipe_for(placement);
        ContainerAccess {
            env,
            cdi_devices: ids.iter().map(|id| format!("{}.com/gpu={id}", self.cdi_vendor())).collect(),
            binds: pipe.into_iter().cloned().collect(),
            host_ipc: pipe.is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::GpuSlot;

    fn slot(id: &str, sharing: GpuSharing) -> GpuSlot {
        GpuSlot { runtime_id: id.into(), sharing }
    }

    fn get<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
        env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    #[test]
    fn a_container_counts_its_gpus_from_zero_and_the_toolkit_sees_the_hosts_names() {
        let nvidia = Nvidia::new(Some(PathBuf::from("/run/mps")));
        let (a, b) = (slot("1", GpuSharing::Mps), slot("MIG-abc", GpuSharing::Mig));
        let gpus = [&a, &b];
        let access = nvidia.container_access(&Placement { gpus: &gpus, milli: 500, memory_mb: Some(1024) });
        assert_eq!(get(&access.env, "CUDA_VISIBLE_DEVICES"), Some("0,1"));
        assert_eq!(get(&access.env, "NVIDIA_VISIBLE_DEVICES"), Some("1,MIG-abc"));
        assert_eq!(get(&access.env, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), Some("0=1024M"));
        assert_eq!(access.cdi_devices, ["nvidia.com/gpu=1", "nvidia.com/gpu=MIG-abc"]);
        assert_eq!((access.binds, access.host_ipc), (vec![PathBuf::from("/run/mps")], true));

        // A CPU placement: the toolkit injects nothing, and no MPS daemon is reached.
        let cpu = nvidia.container_access(&Placement { gpus: &[], milli: WHOLE_GPU_MILLI, memory_mb: None });
        assert_eq!(get(&cpu.env, "NVIDIA_VISIBLE_DEVICES"), Some("void"));
        assert_eq!(get(&cpu.env, "CUDA_VISIBLE_DEVICES"), Some(""));
        assert!(cpu.cdi_devices.is_empty() && cpu.binds.is_empty() && !cpu.host_ipc);
    }

    #[test]
    fn the_agent_owns_the_device_variables_and_every_mps_one() {
        let nvidia = Nvidia::default();
        for name in ["CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_MPS_LOG_DIRECTORY"] {
            assert!(nvidia.owns_variable(name), "{name}");
        }
        assert!(!nvidia.owns_variable("MODEL"));
        assert!(nvidia.is_agent_setting("CUDA_MPS_PIPE_DIRECTORY"));
        assert!(!nvidia.is_agent_setting("CUDA_VISIBLE_DEVICES"), "set for every workload anyway");
    }
}
