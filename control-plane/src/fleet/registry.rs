//! What agents tell the control plane about their node: registration, and the checks of their
//! telemetry (written by [`super::telemetry`]).

use sqlx::PgPool;
use uuid::Uuid;

use crate::workloads::transitions;
pub use airtime_protocol::agent::{
    GpuInventory, GpuSample, Registration, TelemetryReport, check_registration, check_telemetry,
};

/// Binds a node credential to the node it registered as (ids are stable per name).
pub async fn bind_credential(db: &PgPool, node_id: Uuid, credential_id: Uuid) -> sqlx::Result<()> {
    sqlx::query("UPDATE node_credentials SET node_id = $1 WHERE id = $2")
        .bind(node_id)
        .bind(credential_id)
        .execute(db)
        .await?;
    Ok(())
}

/// Registers a node, or refreshes one that registered before under the same name. A node that
/// registers again has a freshly started agent: of what the node ran before, the attempts the
/// agent says it runs (adopted from its predecessor) stay; the rest is requeued.
pub async fn register(db: &PgPool, r: &Registration) -> sqlx::Result<Uuid> {
    let mut tx = db.begin().await?;
    let labels = serde_json::to_value(&r.labels).unwrap_or_default();
    let (node_id,): (Uuid,) = sqlx::query_as(
        "INSERT INTO nodes (id, name, hostname, state, cpu_millis, memory_mb, labels, cost_per_hour, \
                            gpu_source, agent_version, container_engine, container_engine_version, container_cdi, \
                            agent_protocol, address) \
         VALUES ($1, $2, $3, 'ready', $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) \
         ON CONFLICT (name) DO UPDATE SET hostname = EXCLUDED.hostname, state = 'ready', \
             cpu_millis = EXCLUDED.cpu_millis, memory_mb = EXCLUDED.memory_mb, labels = EXCLUDED.labels, \
             cost_per_hour = EXCLUDED.cost_per_hour, gpu_source = EXCLUDED.gpu_source, \
             agent_version = EXCLUDED.agent_version, container_engine = EXCLUDED.container_engine, \
             container_engine_version = EXCLUDED.container_engine_version, container_cdi = EXCLUDED.container_cdi, \
             agent_protocol = EXCLUDED.agent_protocol, address = EXCLUDED.address, last_seen_at = now(), \
             desired_version = nodes.desired_version + 1 \
         RETURNING id",
    )
    .bind(Uuid::now_v7())
    .bind(&r.name)
    .bind(&r.hostname)
    .bind(r.cpu_millis as i32)
    .bind(r.memory_mb as i64)
    .bind(labels)
    .bind(r.cost_per_hour)
    .bind(r.gpu_source)
    .bind(&r.agent_version)
    .bind(r.container_engine.as_ref().map(|e| e.kind))
    .bind(r.container_engine.as_ref().map(|e| &e.version))
    .bind(r.container_engine.as_ref().is_some_and(|e| e.cdi))
    .bind(&r.protocol)
    .bind(&r.address)
    .fetch_one(&mut *tx)
    .await?;

    sqlx::query("UPDATE gpus SET present = false WHERE node_id = $1").bind(node_id).execute(&mut *tx).await?;
    for gpu in &r.gpus {
        sqlx::query(
            "INSERT INTO gpus (id, node_id, device_index, uuid, model, memory_mb, nvlink_group, simulated, \
                 sharing, mig_profile, parent_index, sharing_note) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
             ON CONFLICT (node_id, device_index) DO UPDATE SET uuid = EXCLUDED.uuid, model = EXCLUDED.model, \
                 memory_mb = EXCLUDED.memory_mb, nvlink_group = EXCLUDED.nvlink_group, \
                 simulated = EXCLUDED.simulated, sharing = EXCLUDED.sharing, mig_profile = EXCLUDED.mig_profile, \
                 parent_index = EXCLUDED.parent_index, sharing_note = EXCLUDED.sharing_note, present = true, \
                 fault = CASE WHEN gpus.uuid IS DISTINCT FROM EXCLUDED.uuid THEN NULL ELSE gpus.fault END, \
                 faulted_at = CASE WHEN gpus.uuid IS DISTINCT FROM EXCLUDED.uuid THEN NULL ELSE gpus.faulted_at END",
        )
        .bind(Uuid::now_v7())
        .bind(node_id)
        .bind(gpu.index as i32)
        .bind(&gpu.uuid)
        .bind(gpu.model.as_str())
        .bind(gpu.memory_mb as i64)
        .bind(gpu.nvlink_group.map(|g| g as i32))
        .bind(gpu.simulated)
        .bind(gpu.sharing)
        .bind(gpu.mig_profile.as_ref().map(|p| p.as_str()))
        .bind(gpu.parent_index.map(|p| p.min(i32::MAX as u32) as i32))
        .bind(&gpu.sharing_note)
        .execute(&mut *tx)
        .await?;
    }
    let kept: Vec<(Uuid, i32)> = r.running.iter().map(|a| (a.workload_id, a.attempt as i32)).collect();
    transitions::requeue_node(&mut tx, node_id, &kept, "its node agent restarted").await?;
    tx.commit().await?;
    Ok(node_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registration() -> Registration {
        serde_json::from_value(serde_json::json!({
            "name": "gpu-1", "hostname": "gpu-1", "cpu_millis": 64000, "memory_mb": 262144,
            "agent_version": "0.1.0", "gpu_source": "simulated",
            "gpus": [{"index": 0, "model": "H100", "memory_mb": 81920, "simulated": true}]
        }))
        .expect("valid registration")
    }

    #[test]
    fn values_the_database_cannot_hold_are_refused_not_wrapped() {
        assert_eq!(check_registration(&registration()), Ok(()));
        let huge_cpu = Registration { cpu_millis: u32::MAX, ..registration() };
        assert!(check_registration(&huge_cpu).unwrap_err().contains("cpu_millis"));

        let report = |gpu: serde_json::Value| -> TelemetryReport {
            serde_json::from_value(serde_json::json!({"cpu_util": 0.5, "memory_used_mb": 1, "gpus": [gpu]}))
                .expect("valid shape")
        };
        assert_eq!(check_telemetry(&report(serde_json::json!({"index": 0, "memory_used_mb": 1024}))), Ok(()));
        for bad in [
            serde_json::json!({"index": 0, "memory_used_mb": u64::MAX}),
            serde_json::json!({"index": 0, "ecc_errors": u64::MAX}),
            serde_json::json!({"index": 64}),
            serde_json::json!({"index": 0, "util": 1.5}),
        ] {
            assert!(check_telemetry(&report(bad.clone())).is_err(), "{bad}");
        }
    }
}
