//! GPU health: what agents report of their GPUs' faults (`GpuSample::faults`: an XID error,
//! uncorrectable ECC errors, retired pages pending a reset, a GPU fallen off the bus). A faulty GPU
//! is quarantined: the scheduler's fleet read leaves it out (`scheduler::fleet_view`), so nothing
//! new is placed on it, and the work holding it is told to stop and is requeued. A node with
//! [`DRAIN_AFTER_FAULTY_GPUS`] or more faulty GPUs is drained, as an operator would drain it for
//! repair (`fleet::maintenance::drain_for_repair`). The quarantine lasts until a platform admin
//! clears it after the repair ([`clear_fault`]; a fault that persists is reported again at the
//! next heartbeat) or the GPU at that index is replaced (its node registers it with another UUID).
//! An agent restart does not lift it: an XID event is reported once by the agent process that saw
//! it, so a restart must not forget it.
//!
//! Faults are rare: they are handled apart from the batched telemetry write, in a transaction of
//! their own that holds the node's row lock, as a cordon does.

use sqlx::PgPool;
use uuid::Uuid;

use super::maintenance;
use crate::auth::audit::{self, Change};
use crate::domain::{self, Scope};
use crate::workloads::transitions;
use airtime_protocol::agent::GpuSample;

/// A node with this many faulty GPUs is drained.
pub const DRAIN_AFTER_FAULTY_GPUS: i64 = 2;

/// The faults of `gpus` as one line per GPU index (`XID 79; 2 uncorrectable ECC errors`); GPUs
/// without faults are left out.
pub fn faults_of(gpus: &[GpuSample]) -> Vec<(i32, String)> {
    gpus.iter()
        .filter(|g| !g.faults.is_empty())
        .map(|g| {
            let why: Vec<String> = g.faults.iter().map(|f| f.describe()).collect();
            (g.index as i32, why.join("; "))
        })
        .collect()
}

/// Quarantines the GPUs of node `node_id` that `gpus` report faulty (those not quarantined yet):
/// their work is told to stop and requeued, and the node is drained once it has
/// [`DRAIN_AFTER_FAULTY_GPUS`] faulty GPUs. Answers how many GPUs were newly quarantined.
pub async fn record_faults(db: &PgPool, node_id: Uuid, gpus: &[GpuSample]) -> sqlx::Result<u64> {
    let faults = faults_of(gpus);
    if faults.is_empty() {
        return Ok(0);
    }
    let mut tx = db.begin().await?;
    let Some((node,)): Option<(String,)> = sqlx::query_as("SELECT name FROM nodes WHERE id = $1 FOR NO KEY UPDATE")
        .bind(node_id)
        .fetch_optional(&mut *tx)
        .await?
    else {
        return Ok(0);
    };
    let mut quarantined = 0;
    for (index, why) in faults {
        let Some((gpu_id,)): Option<(Uuid,)> = sqlx::query_as(
            "UPDATE gpus SET fault = $3, faulted_at = now() \
             WHERE node_id = $1 AND device_index = $2 AND present AND fault IS NULL RETURNING id",
        )
        .bind(node_id)
        .bind(index)
        .bind(why.chars().take(500).collect::<String>())
        .fetch_optional(&mut *tx)
        .await?
        else {
            continue;
        };
        quarantined += 1;
        tracing::warn!(%node, gpu = index, fault = %why, "GPU quarantined: no new work, its work is requeued");
        let holders: Vec<(Uuid, Uuid, i32)> = sqlx::query_as(
            "SELECT w.id, w.tenant_id, w.attempt FROM gpu_grants g JOIN workloads w ON w.id = g.workload_id \
             WHERE g.gpu_id = $1 AND w.state IN ('scheduled', 'running') ORDER BY w.id",
        )
        .bind(gpu_id)
        .fetch_all(&mut *tx)
        .await?;
        let detail = format!("preempted: its GPU {index} on node {node} faulted ({why}) and is quarantined");
        for (id, tenant_id, attempt) in holders {
            transitions::request_preempt(&mut tx, id, tenant_id, attempt, &detail).await?;
        }
    }
    let (faulty,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM gpus WHERE node_id = $1 AND present AND fault IS NOT NULL")
            .bind(node_id)
            .fetch_one(&mut *tx)
            .await?;
    if quarantined > 0 && faulty >= DRAIN_AFTER_FAULTY_GPUS {
        let why = format!("{faulty} of its GPUs are faulty: drained for repair");
        maintenance::drain_for_repair(&mut tx, node_id, &why).await?;
        tracing::warn!(%node, faulty, "node drained: too many faulty GPUs");
    }
    tx.commit().await?;
    Ok(quarantined)
}

/// Lifts the quarantine of GPU `gpu_id` (after its repair), with its audit row: the scheduler
/// places work on it again from the next cycle. Platform admins only. Answers whether it was
/// quarantined (clearing a healthy GPU changes nothing and is not audited). A drain Airtime
/// started for the node's faults stays until an operator lifts it (`uncordon`).
pub async fn clear_fault(db: &PgPool, scope: &Scope, gpu_id: Uuid, why: Option<&str>) -> domain::Result<bool> {
    scope.require_platform_admin()?;
    let why = maintenance::reason(why)?;
    let mut tx = db.begin().await?;
    // The node's row lock orders this against a fault reported at the same moment (`record_faults`
    // takes it too): under it, no fault is recorded for the GPU meanwhile.
    let Some((node,)): Option<(String,)> = sqlx::query_as(
        "SELECT n.name FROM gpus g JOIN nodes n ON n.id = g.node_id WHERE g.id = $1 FOR NO KEY UPDATE OF n",
    )
    .bind(gpu_id)
    .fetch_optional(&mut *tx)
    .await?
    else {
        return Err(domain::Error::NotFound("gpu"));
    };
    let (index, fault): (i32, Option<String>) =
        sqlx::query_as("SELECT device_index, fault FROM gpus WHERE id = $1").bind(gpu_id).fetch_one(&mut *tx).await?;
    let Some(fault) = fault else { return Ok(false) };
    sqlx::query("UPDATE gpus SET fault = NULL, faulted_at = NULL WHERE id = $1").bind(gpu_id).execute(&mut *tx).await?;
    audit::record(
        &mut tx,
        &scope.actor,
        Change::new("gpu.clear_fault", "gpu", gpu_id).detail(serde_json::json!({
            "node": node, "index": index, "fault": fault, "reason": why,
        })),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(%node, gpu = index, by = %scope.actor.name, "GPU quarantine cleared");
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use airtime_protocol::agent::{GpuFault, GpuFaultKind};

    #[test]
    fn faults_are_described_per_gpu_and_healthy_gpus_left_out() {
        let sample = |index: u32, faults: Vec<GpuFault>| GpuSample {
            index,
            util: None,
            memory_used_mb: None,
            temperature_c: None,
            power_w: None,
            ecc_errors: None,
            faults,
            throttle: Vec::new(),
        };
        let gpus = vec![
            sample(0, vec![]),
            sample(
                1,
                vec![
                    GpuFault { kind: GpuFaultKind::Xid, code: Some(79) },
                    GpuFault { kind: GpuFaultKind::EccUncorrectable, code: Some(2) },
                ],
            ),
            sample(3, vec![GpuFault { kind: GpuFaultKind::FallenOffBus, code: None }]),
        ];
        assert_eq!(
            faults_of(&gpus),
            vec![(1, "XID 79; 2 uncorrectable ECC errors".to_owned()), (3, "fallen off the bus".to_owned())]
        );
    }
}
