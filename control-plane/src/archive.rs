//! Archiving a tenant: its work ends gracefully — pending work cancelled, running work stopped with
//! its grace period as a cancel stops it, services drained and their tokens revoked — and it admits
//! nothing new (`tenancy::resolve_for_write` refuses it). Its rows stay, so its history, decisions
//! and accounting remain. Its own module because it uses both `tenancy` and `workloads`, which
//! use each other's other half.

use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use airtime_protocol::workload::WorkloadState;

use crate::auth::audit::{self, Change};
use crate::domain::{self, Scope};
use crate::tenancy::{self, TenantView};
use crate::workloads::transitions;

/// What archiving a tenant did.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Archived {
    pub tenant: TenantView,
    /// Its pending workloads, cancelled.
    pub cancelled_pending: u32,
    /// Its workloads on nodes, asked to stop (each with its grace period).
    pub stopping: u32,
    /// Its services, draining.
    pub draining_services: u32,
}

/// Archives tenant `id` (platform admins), in one audited transaction: its pending work is
/// cancelled, its running work asked to stop (SIGTERM, then SIGKILL after the grace period, as a
/// cancel), its services drained and their tokens revoked; from then on it admits no workload,
/// service or quota change. Its rows stay — workloads, decisions, usage, audit — so its history
/// and accounting remain. The `default` tenant cannot be archived.
pub async fn archive(db: &PgPool, scope: &Scope, id: Uuid) -> domain::Result<(Archived, bool)> {
    scope.require_platform_admin()?;
    if id == tenancy::DEFAULT_TENANT {
        return Err(domain::Error::invalid("default_tenant", "the default tenant cannot be archived"));
    }
    let mut tx = db.begin().await?;
    let tenant = tenancy::lock(&mut tx, id).await?;
    if tenant.archived_at.is_some() {
        return Err(domain::Error::conflict("tenant_archived", format!("tenant {} is archived", tenant.name)));
    }
    let work: Vec<(Uuid, WorkloadState, i32, Option<Uuid>)> = sqlx::query_as(
        "SELECT id, state, attempt, node_id FROM workloads WHERE tenant_id = $1 \
         AND state IN ('pending', 'scheduled', 'running', 'preempting') ORDER BY id FOR UPDATE",
    )
    .bind(id)
    .fetch_all(&mut *tx)
    .await?;
    let (mut cancelled_pending, mut stopping) = (0u32, 0u32);
    for (workload, state, attempt, node) in work {
        if state == WorkloadState::Pending {
            transitions::cancel_pending(&mut tx, workload, id, attempt, "cancelled: its tenant was archived").await?;
            cancelled_pending += 1;
        } else {
            transitions::request_cancel(
                &mut tx,
                workload,
                id,
                state,
                attempt,
                node,
                "its tenant was archived; stopping on its node",
            )
            .await?;
            stopping += 1;
        }
    }
    let draining = sqlx::query(
        "UPDATE services SET state = 'draining', updated_at = now() WHERE tenant_id = $1 AND state = 'active'",
    )
    .bind(id)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    sqlx::query(
        "UPDATE service_tokens SET revoked_at = now() WHERE revoked_at IS NULL \
         AND service_id IN (SELECT id FROM services WHERE tenant_id = $1)",
    )
    .bind(id)
    .execute(&mut *tx)
    .await?;
    let tenant = tenancy::mark_archived(&mut tx, id).await?;
    let archived = Archived {
        tenant,
        cancelled_pending,
        stopping,
        draining_services: u32::try_from(draining).unwrap_or(u32::MAX),
    };
    audit::record(
        &mut tx,
        &scope.actor,
        Change::new("tenant.archive", "tenant", id).tenant(Some(id)).detail(serde_json::json!({
            "name": archived.tenant.name, "cancelled_pending": cancelled_pending, "stopping": stopping,
            "draining_services": archived.draining_services,
        })),
    )
    .await?;
    tx.commit().await?;
    Ok((archived, stopping > 0))
}
