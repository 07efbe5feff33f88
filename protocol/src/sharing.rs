//! GPU sharing, as both sides name it: how a node shares a GPU ([`GpuSharing`]), a MIG profile
//! ([`MigProfile`], parsed once where it enters) and the unit a share is counted in
//! ([`WHOLE_GPU_MILLI`]: thousandths of one GPU, the Alibaba trace's `gpu_milli`).

use serde::{Deserialize, Deserializer, Serialize};

/// A whole GPU, in thousandths: the unit shares, grants, quotas and accounting count in.
pub const WHOLE_GPU_MILLI: u32 = 1000;

/// How a node shares a GPU among workloads, chosen per node by the platform team
/// (`airtime-agent --gpu-sharing`) and reported by its agent for each device it advertises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "sqlx", derive(sqlx::Type), sqlx(type_name = "text", rename_all = "snake_case"))]
#[serde(rename_all = "snake_case")]
pub enum GpuSharing {
    /// Not shared: one workload holds the whole GPU (a fractional workload placed here gets it all).
    #[default]
    None,
    /// Shared without isolation: workloads take turns on the GPU; memory is not fenced.
    TimeSlicing,
    /// Shared through the CUDA Multi-Process Service: each workload gets its share of the SMs
    /// (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`) and a pinned memory limit.
    Mps,
    /// A MIG instance: an isolated slice of a physical GPU, advertised as its own device with its
    /// profile; only work asking for that profile runs on it, alone.
    Mig,
}

impl GpuSharing {
    pub const ALL: [GpuSharing; 4] = [Self::None, Self::TimeSlicing, Self::Mps, Self::Mig];

    /// Several workloads may hold shares of one such GPU at once.
    pub const fn is_shared(self) -> bool {
        matches!(self, Self::TimeSlicing | Self::Mps)
    }

    /// The name on the wire and in the database (`"time_slicing"`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::TimeSlicing => "time_slicing",
            Self::Mps => "mps",
            Self::Mig => "mig",
        }
    }

    /// The code in the policy ABI (`docs/policy-abi.md`, GPU `sharing`).
    pub const fn code(self) -> u32 {
        match self {
            Self::None => 0,
            Self::TimeSlicing => 1,
            Self::Mps => 2,
            Self::Mig => 3,
        }
    }

    /// Parses the wire name; also accepts `time-slicing` (the command line's spelling).
    pub fn parse(text: &str) -> Result<GpuSharing, String> {
        match text.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "none" => Ok(Self::None),
            "time_slicing" => Ok(Self::TimeSlicing),
            "mps" => Ok(Self::Mps),
            "mig" => Ok(Self::Mig),
            other => Err(format!("unknown GPU sharing mode {other:?} (expected none, time-slicing, mps or mig)")),
        }
    }
}

impl std::fmt::Display for GpuSharing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A MIG profile name as NVIDIA writes it: `<compute slices>g.<memory>gb`, optionally with a
/// `+me` or `+gfx` suffix (`1g.10gb`, `3g.40gb`, `1g.18gb+me`), stored lower-case so two spellings
/// of one profile compare equal.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct MigProfile(String);

impl MigProfile {
    pub fn parse(text: &str) -> Result<MigProfile, String> {
        let lower = text.trim().to_ascii_lowercase();
        let bad = || format!("a MIG profile looks like 1g.10gb or 3g.40gb (optionally +me), got {text:?}");
        let (base, suffix) = match lower.split_once('+') {
            Some((base, suffix)) => (base, Some(suffix)),
            None => (lower.as_str(), None),
        };
        if suffix.is_some_and(|s| !matches!(s, "me" | "gfx" | "me.all")) {
            return Err(bad());
        }
        let (slices, memory) = base.split_once('.').ok_or_else(bad)?;
        let digits = |s: &str| !s.is_empty() && s.len() <= 4 && s.bytes().all(|b| b.is_ascii_digit());
        let slices_ok = slices.strip_suffix('g').is_some_and(|n| digits(n) && n != "0");
        let memory_ok = memory.strip_suffix("gb").is_some_and(digits);
        if !(slices_ok && memory_ok) {
            return Err(bad());
        }
        Ok(MigProfile(lower))
    }

    /// The profile from a MIG device's NVML name (`"NVIDIA H100 80GB HBM3 MIG 1g.10gb"`): its last
    /// word that parses as a profile.
    pub fn from_device_name(name: &str) -> Option<MigProfile> {
        name.split_whitespace().rev().find_map(|word| MigProfile::parse(word).ok())
    }

    /// Compute slices (the `1` of `1g.10gb`).
    pub fn compute_slices(&self) -> u32 {
        self.0.split('g').next().and_then(|n| n.parse().ok()).unwrap_or(1)
    }

    /// Memory in GB (the `10` of `1g.10gb`).
    pub fn memory_gb(&self) -> u32 {
        self.0.split('.').nth(1).and_then(|m| m.split("gb").next()).and_then(|n| n.parse().ok()).unwrap_or(0)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for MigProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for MigProfile {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        MigProfile::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mig_profiles_parse_as_nvidia_writes_them() {
        for good in ["1g.10gb", "3G.40GB", " 7g.80gb ", "1g.18gb+me", "2g.35gb"] {
            assert!(MigProfile::parse(good).is_ok(), "{good}");
        }
        for bad in ["", "1g", "g.10gb", "0g.10gb", "1g.10", "1g.10gb+x", "a.b", "1g.10gb,2g.20gb"] {
            assert!(MigProfile::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(MigProfile::parse("3G.40GB").unwrap().as_str(), "3g.40gb");
        assert_eq!(MigProfile::parse("3g.40gb").unwrap().compute_slices(), 3);
        assert_eq!(MigProfile::parse("1g.18gb+me").unwrap().memory_gb(), 18);
        assert_eq!(
            MigProfile::from_device_name("NVIDIA H200 MIG 1g.18gb").map(|p| p.to_string()),
            Some("1g.18gb".to_owned())
        );
        assert_eq!(MigProfile::from_device_name("NVIDIA H200"), None);
    }

    #[test]
    fn sharing_modes_parse_both_spellings() {
        assert_eq!(GpuSharing::parse("time-slicing"), Ok(GpuSharing::TimeSlicing));
        assert_eq!(GpuSharing::parse("MPS"), Ok(GpuSharing::Mps));
        assert!(GpuSharing::parse("vgpu").unwrap_err().contains("time-slicing"));
        assert!(GpuSharing::Mps.is_shared() && !GpuSharing::Mig.is_shared() && !GpuSharing::None.is_shared());
    }
}
