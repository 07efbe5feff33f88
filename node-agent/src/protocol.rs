//! The messages of the node agent ↔ control plane protocol (`docs/agent-protocol.md`).
//!
//! Field names are exactly the document's. The control plane keeps its own copies of these types;
//! this file and the document change together. What the agent *receives* does not deny unknown
//! fields, so a newer control plane can add fields without breaking older agents. What the agent
//! *sends* carries exactly the documented fields, because the control plane denies unknown ones.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Where the GPUs a node advertises come from.
///
/// A node with both real and simulated GPUs reports `nvml`; each GPU's `simulated` flag tells
/// them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuSource {
    Nvml,
    Simulated,
    None,
}

/// `POST /api/v1/agent/enrol`: the one-time enrolment token for the node's own credential.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct EnrolRequest {
    pub enrolment_token: String,
    pub name: String,
}

impl std::fmt::Debug for EnrolRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnrolRequest").field("name", &self.name).finish_non_exhaustive()
    }
}

/// Answer to an enrolment: the credential, shown once.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct EnrolResponse {
    pub credential: String,
    pub credential_id: Uuid,
    pub node_name: String,
}

impl std::fmt::Debug for EnrolResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnrolResponse")
            .field("credential_id", &self.credential_id)
            .field("node_name", &self.node_name)
            .finish_non_exhaustive()
    }
}

/// `POST /api/v1/agent/register`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegisterRequest {
    pub name: String,
    pub hostname: String,
    /// Logical cores × 1000.
    pub cpu_millis: u64,
    /// Total host memory in MiB.
    pub memory_mb: u64,
    pub labels: BTreeMap<String, String>,
    /// USD per hour; `null` when unknown.
    pub cost_per_hour: Option<f64>,
    pub agent_version: String,
    pub gpu_source: GpuSource,
    pub gpus: Vec<GpuInfo>,
}

/// One GPU as advertised at registration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// NVML index (PCI bus order); simulated GPUs follow the real ones.
    pub index: u32,
    pub uuid: String,
    pub model: String,
    /// Total GPU memory in MiB.
    pub memory_mb: u64,
    pub nvlink_group: Option<u32>,
    pub simulated: bool,
}

/// Answer to a registration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegisterResponse {
    pub node_id: Uuid,
    pub heartbeat_interval_ms: u64,
}

/// `POST /api/v1/agent/nodes/{node_id}/telemetry`; doubles as the heartbeat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TelemetryReport {
    /// Host CPU utilisation, 0..1, over the last interval.
    pub cpu_util: f64,
    /// Host memory in use, MiB.
    pub memory_used_mb: u64,
    pub gpus: Vec<GpuTelemetry>,
}

/// One GPU's sample. A field the source cannot read is `null`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuTelemetry {
    pub index: u32,
    /// 0..1.
    pub util: Option<f64>,
    pub memory_used_mb: Option<u64>,
    pub temperature_c: Option<f64>,
    pub power_w: Option<f64>,
    pub ecc_errors: Option<u64>,
}

/// Answer to `GET /api/v1/agent/nodes/{node_id}/assignments`: the node's whole desired state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssignmentsResponse {
    pub version: u64,
    pub assignments: Vec<Assignment>,
}

/// One workload the node must run or stop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Assignment {
    pub workload_id: Uuid,
    pub attempt: u32,
    pub action: AssignmentAction,
    /// Why a `stop` was decided (e.g. `preempted: …`); absent for `run`.
    #[serde(default)]
    pub reason: Option<String>,
    pub command: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub gpu_indices: Vec<u32>,
    pub grace_period_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AssignmentAction {
    Run,
    Stop,
    /// An action this agent does not know yet (a newer control plane). The agent leaves such a
    /// workload as it is rather than failing the whole desired state.
    #[serde(other)]
    Unknown,
}

/// `POST /api/v1/agent/nodes/{node_id}/workloads/{workload_id}/events`.
///
/// Serialises to exactly the documented shapes, e.g.
/// `{"event":"started","attempt":1,"pid":1234}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WorkloadEvent {
    Started {
        attempt: u32,
        pid: u32,
    },
    Exited {
        attempt: u32,
        /// Set when the process exited by itself.
        exit_code: Option<i32>,
        /// The signal number that ended the process (15 = SIGTERM, 9 = SIGKILL).
        signal: Option<i32>,
        /// Why the agent ended it, when it did (e.g. `stopped: preempted: …`).
        message: Option<String>,
    },
    FailedToStart {
        attempt: u32,
        message: String,
    },
}

impl WorkloadEvent {
    pub fn attempt(&self) -> u32 {
        match self {
            Self::Started { attempt, .. } | Self::Exited { attempt, .. } | Self::FailedToStart { attempt, .. } => {
                *attempt
            }
        }
    }

    /// The event's name on the wire, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Started { .. } => "started",
            Self::Exited { .. } => "exited",
            Self::FailedToStart { .. } => "failed_to_start",
        }
    }
}

/// The API's one error shape: `{"error": {"code": "...", "message": "..."}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorResponse {
    pub error: ErrorBody,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: String,
    pub message: String,
}

/// Error codes the agent acts on.
pub mod codes {
    /// The control plane does not know the node: register again.
    pub const NODE_NOT_FOUND: &str = "node_not_found";
    /// An event for an attempt that is no longer current: drop it.
    pub const STALE_ATTEMPT: &str = "stale_attempt";
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_serialise_to_the_documented_shapes() -> Result<(), serde_json::Error> {
        let started = WorkloadEvent::Started { attempt: 1, pid: 1234 };
        assert_eq!(serde_json::to_value(&started)?, json!({"attempt": 1, "event": "started", "pid": 1234}));
        let exited = WorkloadEvent::Exited { attempt: 1, exit_code: Some(0), signal: None, message: None };
        assert_eq!(
            serde_json::to_value(&exited)?,
            json!({"attempt": 1, "event": "exited", "exit_code": 0, "signal": null, "message": null})
        );
        let failed =
            WorkloadEvent::FailedToStart { attempt: 1, message: "No such file or directory (os error 2)".into() };
        assert_eq!(
            serde_json::to_value(&failed)?,
            json!({"attempt": 1, "event": "failed_to_start", "message": "No such file or directory (os error 2)"})
        );
        Ok(())
    }

    #[test]
    fn assignments_tolerate_new_fields_and_actions() -> Result<(), serde_json::Error> {
        let body = json!({
            "version": 42,
            "future_field": true,
            "assignments": [
                {"workload_id": "0190a6a4-0000-7000-8000-000000000001", "attempt": 1, "action": "run",
                 "command": ["python", "serve.py"], "env": {"MODEL": "llama"},
                 "gpu_indices": [0, 1], "grace_period_ms": 30000, "priority": 7},
                {"workload_id": "0190a6a4-0000-7000-8000-000000000002", "attempt": 3, "action": "stop",
                 "reason": "preempted: by a", "command": ["x"], "env": {}, "gpu_indices": [2],
                 "grace_period_ms": 30000},
                {"workload_id": "0190a6a4-0000-7000-8000-000000000003", "attempt": 1, "action": "pause",
                 "command": ["x"], "grace_period_ms": 1}
            ]
        });
        let parsed: AssignmentsResponse = serde_json::from_value(body)?;
        assert_eq!(parsed.version, 42);
        assert_eq!(parsed.assignments[0].action, AssignmentAction::Run);
        assert_eq!(parsed.assignments[0].gpu_indices, vec![0, 1]);
        assert_eq!(parsed.assignments[1].action, AssignmentAction::Stop);
        assert_eq!(parsed.assignments[1].reason.as_deref(), Some("preempted: by a"));
        assert_eq!(parsed.assignments[2].action, AssignmentAction::Unknown);
        assert!(parsed.assignments[2].env.is_empty());
        Ok(())
    }

    #[test]
    fn register_request_matches_the_document() -> Result<(), serde_json::Error> {
        let request = RegisterRequest {
            name: "gpu-host-1".into(),
            hostname: "gpu-host-1".into(),
            cpu_millis: 16000,
            memory_mb: 131072,
            labels: BTreeMap::from([("zone".into(), "a".into())]),
            cost_per_hour: None,
            agent_version: "0.1.0".into(),
            gpu_source: GpuSource::Simulated,
            gpus: vec![GpuInfo {
                index: 0,
                uuid: "SIM-gpu-host-1-0".into(),
                model: "H100-SXM".into(),
                memory_mb: 81920,
                nvlink_group: None,
                simulated: true,
            }],
        };
        assert_eq!(
            serde_json::to_value(&request)?,
            json!({
                "name": "gpu-host-1", "hostname": "gpu-host-1", "cpu_millis": 16000,
                "memory_mb": 131072, "labels": {"zone": "a"}, "cost_per_hour": null,
                "agent_version": "0.1.0", "gpu_source": "simulated",
                "gpus": [{"index": 0, "uuid": "SIM-gpu-host-1-0", "model": "H100-SXM",
                          "memory_mb": 81920, "nvlink_group": null, "simulated": true}]
            })
        );
        Ok(())
    }
}
