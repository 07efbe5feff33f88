//! Names that cross the wire more than once, parsed into types where they enter so a rule lives
//! once.

use serde::{Deserialize, Deserializer, Serialize};

/// Longest GPU model name, in bytes.
pub const MAX_GPU_MODEL_BYTES: usize = 128;

/// A GPU model name (`"H100-SXM"`), as an agent reports it and a workload asks for it: trimmed,
/// 1 to 128 bytes, without commas (the policy ABI carries a workload's models comma-separated) or
/// control characters. Two names are the same model when they are equal ignoring ASCII case
/// (`airtime_policy_sdk::same_model`, the one rule policies and the host's check apply).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct GpuModel(String);

impl GpuModel {
    /// Parses a name, trimming surrounding spaces.
    pub fn parse(name: &str) -> Result<GpuModel, String> {
        let name = name.trim();
        if name.is_empty() || name.len() > MAX_GPU_MODEL_BYTES {
            return Err(format!("a GPU model name must be 1 to {MAX_GPU_MODEL_BYTES} bytes, got {:?}", name));
        }
        if name.contains(',') || name.chars().any(char::is_control) {
            return Err(format!("a GPU model name has no commas or control characters, got {name:?}"));
        }
        Ok(GpuModel(name.to_owned()))
    }

    /// A name as reported by hardware (NVML), kept whatever it holds: commas and control
    /// characters become spaces, the result is cut to the bound, and an empty one is `unknown`.
    pub fn lossy(name: &str) -> GpuModel {
        let cleaned: String = name.chars().map(|c| if c == ',' || c.is_control() { ' ' } else { c }).collect();
        let mut cut = cleaned.trim().to_owned();
        while cut.len() > MAX_GPU_MODEL_BYTES {
            cut.pop();
        }
        GpuModel::parse(&cut).unwrap_or_else(|_| GpuModel("unknown".to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for GpuModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for GpuModel {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        GpuModel::parse(&name).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_is_trimmed_once_and_bad_names_are_refused() {
        assert_eq!(GpuModel::parse("  h100-sxm ").unwrap().as_str(), "h100-sxm");
        assert!(GpuModel::parse("   ").is_err());
        assert!(GpuModel::parse("a,b").is_err());
        assert!(GpuModel::parse("a\tb").is_err());
        assert!(GpuModel::parse(&"x".repeat(129)).is_err());
        let parsed: Vec<GpuModel> = serde_json::from_str(r#"[" A100 "]"#).unwrap();
        assert_eq!(parsed[0].as_str(), "A100");
        assert!(serde_json::from_str::<Vec<GpuModel>>(r#"["a,b"]"#).is_err());
    }
}
