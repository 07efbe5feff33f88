//! The domain's vocabulary on the wire: workload classes and states, node states and the
//! transitions between states. The control plane stores them as text (CHECK constraints list the
//! same values), its API and OpenAPI document speak them, and the scheduling core decides with them.

use serde::{Deserialize, Serialize};

/// What kind of work a workload is; decides how policies treat it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "sqlx", derive(sqlx::Type), sqlx(type_name = "text", rename_all = "snake_case"))]
#[serde(rename_all = "snake_case")]
pub enum WorkloadClass {
    /// Customer-facing, latency above all; long-running service.
    RealtimeInference,
    /// Throughput; tolerates hours of delay.
    BatchInference,
    /// Several GPUs at once for hours or days; checkpointable.
    Training,
    FineTuning,
    /// Much GPU memory, briefly.
    Quantization,
    /// Short, small; often fine on CPU.
    Embeddings,
    Evaluation,
}

impl WorkloadClass {
    pub const ALL: [WorkloadClass; 7] = [
        Self::RealtimeInference,
        Self::BatchInference,
        Self::Training,
        Self::FineTuning,
        Self::Quantization,
        Self::Embeddings,
        Self::Evaluation,
    ];
}

/// Where a workload is in its life.
///
/// ```text
/// pending ──place──▶ scheduled ──agent started──▶ running ──exit──▶ succeeded | failed
///    ▲                   │                          │
///    └──── requeue ◀── preempting ◀──preempt────────┘   (also when its node is lost)
/// any active state ──cancel──▶ cancelling ──agent stopped──▶ cancelled   (pending: cancelled at once)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "sqlx", derive(sqlx::Type), sqlx(type_name = "text", rename_all = "snake_case"))]
#[serde(rename_all = "snake_case")]
pub enum WorkloadState {
    Pending,
    Scheduled,
    Running,
    Preempting,
    Cancelling,
    Succeeded,
    Failed,
    Cancelled,
}

impl WorkloadState {
    pub const ALL: [WorkloadState; 8] = [
        Self::Pending,
        Self::Scheduled,
        Self::Running,
        Self::Preempting,
        Self::Cancelling,
        Self::Succeeded,
        Self::Failed,
        Self::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Scheduled => "scheduled",
            Self::Running => "running",
            Self::Preempting => "preempting",
            Self::Cancelling => "cancelling",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// Holds a node (and its GPU grants): an agent runs it or is about to, or is stopping it.
    pub fn is_on_node(self) -> bool {
        matches!(self, Self::Scheduled | Self::Running | Self::Preempting | Self::Cancelling)
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "sqlx", derive(sqlx::Type), sqlx(type_name = "text", rename_all = "snake_case"))]
#[serde(rename_all = "snake_case")]
pub enum NodeState {
    /// Heard from and taking work.
    Ready,
    /// Held by an operator: takes no new work; what runs there runs on.
    Cordoned,
    /// Cordoned, and its work is being moved off (checkpointed and requeued, replaced elsewhere,
    /// or left to finish by a deadline).
    Draining,
    /// Not heard from; its work is requeued once its lease has run out.
    Lost,
}

impl NodeState {
    pub const ALL: [NodeState; 4] = [Self::Ready, Self::Cordoned, Self::Draining, Self::Lost];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::Cordoned => "cordoned",
            Self::Draining => "draining",
            Self::Lost => "lost",
        }
    }

    /// Whether new work may be placed on it.
    pub fn takes_work(self) -> bool {
        self == Self::Ready
    }
}
