//! The messages of the node agent ↔ control plane protocol (`docs/agent-protocol.md`): one
//! definition, in the `airtime-protocol` crate, which the control plane's handlers and OpenAPI
//! document use too. What the agent *receives* does not deny unknown fields, so a newer control
//! plane can add fields without breaking older agents; what it *sends* carries exactly the
//! documented fields, because the control plane denies unknown ones.

pub use airtime_protocol::agent::{
    Assignment, AssignmentAction, DesiredState, EnrolRequest, Enrolled, ErrorBody, ErrorResponse, EventKind,
    EventReport, GpuInventory, GpuSample, GpuSource, LogBatch, LogChunk, LogStream, MAX_LOG_BATCH_CHUNKS,
    MAX_LOG_CHUNK_BYTES, Registered, Registration, RunningAttempt, ShareSample, TelemetryReport, protocol_version,
};
pub use airtime_protocol::model::GpuModel;
pub use airtime_protocol::serving::{ReplicaSample, ServingEndpoints, ServingMetrics};
pub use airtime_protocol::sharing::{GpuSharing, MigProfile};

/// Error codes the agent acts on.
pub mod codes {
    /// The control plane does not know the node: register again.
    pub const NODE_NOT_FOUND: &str = "node_not_found";
    /// An event for an attempt that is no longer current: drop it.
    pub const STALE_ATTEMPT: &str = "stale_attempt";
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use serde_json::json;

    #[test]
    fn events_serialise_to_the_documented_shapes() -> Result<(), serde_json::Error> {
        let started = EventReport::started(1, 1234);
        assert_eq!(serde_json::to_value(&started)?, json!({"attempt": 1, "event": "started", "pid": 1234}));
        let exited = EventReport::exited(1, Some(0), None, None);
        assert_eq!(serde_json::to_value(&exited)?, json!({"attempt": 1, "event": "exited", "exit_code": 0}));
        let failed = EventReport::failed_to_start(1, "No such file or directory (os error 2)".into());
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
        let parsed: DesiredState = serde_json::from_value(body)?;
        assert_eq!(parsed.version, 42);
        assert_eq!(parsed.assignments[0].action, AssignmentAction::Run);
        assert_eq!(parsed.assignments[0].gpu_indices, vec![0, 1]);
        assert_eq!(parsed.assignments[1].action, AssignmentAction::Stop);
        assert_eq!(parsed.assignments[1].reason.as_deref(), Some("preempted: by a"));
        assert_eq!(parsed.assignments[2].action, AssignmentAction::Unknown);
        assert!(parsed.assignments[2].env.is_empty());
        // Without a share: whole GPUs.
        assert_eq!((parsed.assignments[0].gpu_milli, parsed.assignments[0].share_milli()), (None, 1000));
        Ok(())
    }

    #[test]
    fn a_share_assignment_carries_its_share_and_memory_slice() -> Result<(), serde_json::Error> {
        let body = json!({
            "workload_id": "0190a6a4-0000-7000-8000-000000000001", "attempt": 1, "action": "run",
            "command": ["python", "serve.py"], "gpu_indices": [0], "grace_period_ms": 30000,
            "gpu_milli": 250, "gpu_memory_mb": 20480
        });
        let parsed: Assignment = serde_json::from_value(body)?;
        assert_eq!((parsed.gpu_milli, parsed.share_milli(), parsed.gpu_memory_mb), (Some(250), 250, Some(20480)));
        Ok(())
    }

    #[test]
    fn telemetry_carries_share_samples() -> Result<(), serde_json::Error> {
        let workload_id = uuid::Uuid::from_u128(1);
        let report = TelemetryReport {
            cpu_util: 0.5,
            memory_used_mb: 100,
            gpus: vec![],
            shares: vec![ShareSample { workload_id, gpu_index: 0, util: Some(0.25), memory_used_mb: None }],
            replicas: vec![],
        };
        assert_eq!(
            serde_json::to_value(&report)?,
            json!({"cpu_util": 0.5, "memory_used_mb": 100, "gpus": [],
                   "shares": [{"workload_id": workload_id, "gpu_index": 0, "util": 0.25, "memory_used_mb": null}]})
        );
        let without = TelemetryReport { shares: vec![], ..report };
        assert_eq!(serde_json::to_value(&without)?, json!({"cpu_util": 0.5, "memory_used_mb": 100, "gpus": []}));
        Ok(())
    }

    #[test]
    fn register_request_matches_the_document() -> Result<(), serde_json::Error> {
        let request = Registration {
            name: "gpu-host-1".into(),
            hostname: "gpu-host-1".into(),
            cpu_millis: 16000,
            memory_mb: 131072,
            labels: BTreeMap::from([("zone".into(), "a".into())]),
            cost_per_hour: None,
            agent_version: "0.1.0".into(),
            gpu_source: GpuSource::Simulated,
            gpus: vec![
                GpuInventory {
                    index: 0,
                    uuid: Some("SIM-gpu-host-1-0".into()),
                    model: GpuModel::lossy("H100-SXM"),
                    memory_mb: 81920,
                    nvlink_group: None,
                    simulated: true,
                    sharing: GpuSharing::Mps,
                    mig_profile: None,
                    parent_index: None,
                    sharing_note: None,
                },
                GpuInventory {
                    index: 1,
                    uuid: Some("MIG-SIM-gpu-host-1-1-0".into()),
                    model: GpuModel::lossy("H100-SXM"),
                    memory_mb: 40960,
                    nvlink_group: None,
                    simulated: true,
                    sharing: GpuSharing::Mig,
                    mig_profile: MigProfile::parse("3g.40gb").ok(),
                    parent_index: Some(1),
                    sharing_note: None,
                },
                GpuInventory {
                    index: 2,
                    uuid: Some("GPU-2".into()),
                    model: GpuModel::lossy("H100-SXM"),
                    memory_mb: 81920,
                    nvlink_group: None,
                    simulated: false,
                    sharing: GpuSharing::None,
                    mig_profile: None,
                    parent_index: None,
                    sharing_note: Some("MIG mode is disabled on GPU 2: advertised whole".into()),
                },
            ],
            container_engine: Some(airtime_protocol::container::ContainerEngine {
                kind: airtime_protocol::container::EngineKind::Podman,
                version: "4.3.1".into(),
                cdi: true,
            }),
            protocol: Some("1.2".into()),
            running: vec![RunningAttempt { workload_id: uuid::Uuid::nil(), attempt: 2 }],
            address: Some("10.0.0.7".into()),
        };
        assert_eq!(
            serde_json::to_value(&request)?,
            json!({
                "name": "gpu-host-1", "hostname": "gpu-host-1", "cpu_millis": 16000,
                "memory_mb": 131072, "labels": {"zone": "a"}, "cost_per_hour": null,
                "agent_version": "0.1.0", "gpu_source": "simulated",
                "gpus": [
                    {"index": 0, "uuid": "SIM-gpu-host-1-0", "model": "H100-SXM",
                     "memory_mb": 81920, "nvlink_group": null, "simulated": true, "sharing": "mps"},
                    {"index": 1, "uuid": "MIG-SIM-gpu-host-1-1-0", "model": "H100-SXM",
                     "memory_mb": 40960, "nvlink_group": null, "simulated": true, "sharing": "mig",
                     "mig_profile": "3g.40gb", "parent_index": 1},
                    {"index": 2, "uuid": "GPU-2", "model": "H100-SXM",
                     "memory_mb": 81920, "nvlink_group": null, "simulated": false, "sharing": "none",
                     "sharing_note": "MIG mode is disabled on GPU 2: advertised whole"}
                ],
                "container_engine": {"kind": "podman", "version": "4.3.1", "cdi": true},
                "protocol": "1.2",
                "running": [{"workload_id": "00000000-0000-0000-0000-000000000000", "attempt": 2}],
                "address": "10.0.0.7"
            })
        );
        assert_eq!(airtime_protocol::agent::check_registration(&request), Ok(()));
        Ok(())
    }
}
