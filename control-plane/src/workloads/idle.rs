//! Idle reclaim: a tenant's rule (`tenants.idle_reclaim_after_s`) that work holding GPUs which all
//! read below the idle threshold (`--idle-util-threshold`, 5 %) for that long gives them back. The
//! fleet watch calls [`sweep`]: such work is first warned (an event on its history and the live
//! feed: "idle … : its GPUs are released in N s unless used"), then, if it is still idle a warning
//! period later (`--idle-reclaim-warning-s`, 60 s), stopped as a cancel stops it — SIGTERM (its
//! checkpoint signal), SIGKILL after the grace period — with the reason in its history and an
//! audit row. Work that is used again before then has its warning cleared. Idle-ness is the
//! held-but-idle list's (`usage::held_idle`): every GPU it holds reported telemetry, and none read
//! at or above the threshold since the time it counts from.

use std::time::Duration;

use sqlx::PgPool;
use uuid::Uuid;

use crate::auth::audit::{self, AuditActor, Change};
use crate::workloads::transitions;

/// What a sweep did: work warned, work stopped.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reclaimed {
    pub warned: u32,
    pub stopped: u32,
}

/// Warns, then stops, work idle past its tenant's rule (see the module). `threshold` is the
/// utilisation below which a reading is idle; `warning` how long a warned workload has to become
/// busy again.
pub async fn sweep(db: &PgPool, threshold: f32, warning: Duration) -> sqlx::Result<Reclaimed> {
    let rules: Vec<(Uuid, String, i32)> = sqlx::query_as(
        "SELECT id, name, idle_reclaim_after_s FROM tenants WHERE idle_reclaim_after_s IS NOT NULL AND archived_at IS NULL",
    )
    .fetch_all(db)
    .await?;
    let mut done = Reclaimed::default();
    if rules.is_empty() {
        return Ok(done);
    }
    let mut idle_ids: Vec<Uuid> = Vec::new();
    let ruled: Vec<Uuid> = rules.iter().map(|r| r.0).collect();
    // One read of the held-but-idle list for every rule: idle at least as long as the shortest
    // rule, then each workload judged by its own tenant's.
    let shortest = rules.iter().map(|r| r.2).min().unwrap_or(1);
    let candidates =
        crate::usage::held_idle(db, threshold, Duration::from_secs(u64::try_from(shortest).unwrap_or(1)), None).await?;
    for w in candidates {
        let Some((tenant, name, after_s)) = rules.iter().find(|r| r.0 == w.tenant_id) else { continue };
        if w.idle_for_s < f64::from(*after_s) {
            continue;
        }
        idle_ids.push(w.workload_id);
        let mut tx = db.begin().await?;
        // (attempt, its node, warned this long ago in seconds)
        let row: Option<(i32, Option<Uuid>, Option<f64>)> = sqlx::query_as(
            "SELECT attempt, node_id, extract(epoch FROM now() - idle_warned_at)::float8 FROM workloads \
             WHERE id = $1 AND state = 'running' FOR UPDATE",
        )
        .bind(w.workload_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((attempt, node_id, warned_ago)) = row else { continue };
        let idle = format!(
            "idle: its {} GPU{} read below {:.0} % for {:.0} s (tenant {name}'s rule: {after_s} s)",
            w.gpus,
            if w.gpus == 1 { "" } else { "s" },
            threshold * 100.0,
            w.idle_for_s
        );
        match warned_ago {
            None => {
                sqlx::query("UPDATE workloads SET idle_warned_at = now() WHERE id = $1")
                    .bind(w.workload_id)
                    .execute(&mut *tx)
                    .await?;
                let detail = format!("{idle}; its GPUs are released in {} s unless used", warning.as_secs());
                transitions::record_event(
                    &mut tx,
                    w.workload_id,
                    *tenant,
                    Some(crate::model::WorkloadState::Running),
                    crate::model::WorkloadState::Running,
                    attempt,
                    &detail,
                )
                .await?;
                done.warned += 1;
            }
            Some(ago) if ago >= warning.as_secs_f64() => {
                let detail = format!("reclaimed, {idle}: stopping on its node so its GPUs go to what waits");
                transitions::request_cancel(
                    &mut tx,
                    w.workload_id,
                    *tenant,
                    crate::model::WorkloadState::Running,
                    attempt,
                    node_id,
                    &detail,
                )
                .await?;
                audit::record(
                    &mut tx,
                    &AuditActor::system("idle-reclaim"),
                    Change::new("workload.idle_reclaim", "workload", w.workload_id)
                        .tenant(Some(*tenant))
                        .detail(serde_json::json!({"name": w.name, "idle_for_s": w.idle_for_s, "rule_s": after_s,
                                                   "gpus": w.gpus})),
                )
                .await?;
                done.stopped += 1;
            }
            Some(_) => {}
        }
        tx.commit().await?;
    }
    // Work used again since its warning starts afresh.
    sqlx::query(
        "UPDATE workloads SET idle_warned_at = NULL WHERE idle_warned_at IS NOT NULL \
         AND tenant_id = ANY($1) AND NOT (id = ANY($2))",
    )
    .bind(&ruled)
    .bind(&idle_ids)
    .execute(db)
    .await?;
    Ok(done)
}
