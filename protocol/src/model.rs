//! Names that cross the wire more than once, parsed into types where they enter so a rule lives
//! once.

use serde::{Deserialize, Deserializer, Serialize};

/// A name type's `Display` (the name) and a `Deserialize` that parses it with the type's `parse`,
/// so a request holding a bad name is refused where it is read.
macro_rules! parsed_name {
    ($name:ident) => {
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let name = String::deserialize(deserializer)?;
                $name::parse(&name).map_err(serde::de::Error::custom)
            }
        }
    };
}

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

parsed_name!(GpuModel);

/// Longest node name, in bytes (a DNS name's bound).
pub const MAX_NODE_NAME_BYTES: usize = 253;

/// A node's name (`"gpu-node-7"`), as an enrolment token is bound to it and its agent enrols and
/// registers with it: 1 to 253 bytes without control characters, kept exactly (a node's name is
/// its identity: no trimming, no case folding).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct NodeName(String);

impl NodeName {
    pub fn parse(name: &str) -> Result<NodeName, String> {
        if name.is_empty() || name.len() > MAX_NODE_NAME_BYTES || name.chars().any(char::is_control) {
            return Err(format!("a node name must be 1 to {MAX_NODE_NAME_BYTES} printable characters"));
        }
        Ok(NodeName(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

parsed_name!(NodeName);

/// Longest tenant name, in bytes (a DNS label's bound, so it can name a namespace or a host).
pub const MAX_TENANT_NAME_BYTES: usize = 63;

/// A tenant's name (`"team-a"`): 1 to 63 lowercase ASCII letters, digits or `-`, not starting
/// with `-`. Tenants are created with one; elsewhere a name that does not parse names no tenant.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct TenantName(String);

impl TenantName {
    pub fn parse(name: &str) -> Result<TenantName, String> {
        let valid = !name.is_empty()
            && name.len() <= MAX_TENANT_NAME_BYTES
            && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !name.starts_with('-');
        if !valid {
            return Err(format!("name must be 1 to {MAX_TENANT_NAME_BYTES} lowercase letters, digits or '-'"));
        }
        Ok(TenantName(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

parsed_name!(TenantName);

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

    #[test]
    fn node_and_tenant_names_are_parsed_once() {
        assert_eq!(NodeName::parse("gpu-node-7").unwrap().as_str(), "gpu-node-7");
        assert_eq!(NodeName::parse(" Spaced Node ").unwrap().as_str(), " Spaced Node ", "kept exactly");
        assert!(NodeName::parse("").is_err());
        assert!(NodeName::parse("a\nb").is_err());
        assert!(NodeName::parse(&"n".repeat(254)).is_err());
        assert_eq!(TenantName::parse("team-a").unwrap().as_str(), "team-a");
        for bad in ["", "-team", "Team", "team a", "team_a", &"t".repeat(64)] {
            assert!(TenantName::parse(bad).is_err(), "{bad:?}");
        }
        assert!(serde_json::from_str::<TenantName>(r#""Team-A""#).is_err());
    }
}
