//! The domain's vocabulary: workload classes and states and node states (one definition, in
//! `airtime_protocol::workload`), and the control plane's constants.

pub use airtime_protocol::workload::{NodeState, WorkloadClass, WorkloadState};

pub use airtime_protocol::agent::GpuSource;
pub use airtime_protocol::service::{LoadMetric, ReplicaVariant};
pub use airtime_protocol::sharing::{GpuSharing, MigProfile, WHOLE_GPU_MILLI};

/// The platform scope's id for policy activation (tenant scopes use the tenant id).
pub const PLATFORM_SCOPE: &str = "platform";

/// The tenant created by the first migration.
pub const DEFAULT_TENANT: uuid::Uuid = uuid::Uuid::from_u128(1);
