//! Elastic inference services on the wire: how a service measures its load, and which variant of
//! its replica template a replica runs. The control plane stores them as text, its API speaks them,
//! the scheduling core's autoscaler (`airtime_scheduler::services`) and the simulator decide with
//! them.

use serde::{Deserialize, Serialize};

/// What one replica's capacity is measured in, and what load reports carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "sqlx", derive(sqlx::Type), sqlx(type_name = "text", rename_all = "snake_case"))]
#[serde(rename_all = "snake_case")]
pub enum LoadMetric {
    /// Requests per second arriving at the service.
    #[default]
    RequestsPerSecond,
    /// Requests in flight at once.
    ConcurrentRequests,
    /// Tokens per second (prompt and generated): what a service whose replicas the agent reads in
    /// vLLM's metric format measures (`crate::serving`).
    TokensPerSecond,
}

impl LoadMetric {
    /// The unit in reasons ("42 req/s").
    pub fn unit(self) -> &'static str {
        match self {
            Self::RequestsPerSecond => "req/s",
            Self::ConcurrentRequests => "concurrent requests",
            Self::TokensPerSecond => "tokens/s",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::RequestsPerSecond => "requests_per_second",
            Self::ConcurrentRequests => "concurrent_requests",
            Self::TokensPerSecond => "tokens_per_second",
        }
    }
}

/// Which of a service's templates a replica runs: the main one (its GPUs, or a share of one), or
/// the CPU variant of a model that can serve from CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "sqlx", derive(sqlx::Type), sqlx(type_name = "text", rename_all = "snake_case"))]
#[serde(rename_all = "snake_case")]
pub enum ReplicaVariant {
    Gpu,
    Cpu,
}

impl ReplicaVariant {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Gpu => "gpu",
            Self::Cpu => "cpu",
        }
    }
}
