//! The control plane's side of the autoscaler: services and their recent load read into the
//! scheduling core's fleet model, and the scale plans the core's cycle makes (`airtime_scheduler::
//! cycle::run`) applied in one transaction under the scheduling lease — replicas started as pending workloads,
//! drained ones cancelled (pending) or stopped through their agent with the grace period, the
//! decision and its reason recorded on the service and in its scale events.

use std::collections::HashMap;

use airtime_scheduler::services::{
    self as core, CpuVariant, LoadSample, ReplicaVariant, ScalePlan, ServiceEntry, VariantCosts,
};
use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::Scheduler;
use super::fleet_view::FleetView;
use super::leader::LeaseError;
use crate::model::{LoadMetric, WHOLE_GPU_MILLI, WorkloadClass, WorkloadState};
use crate::services::serving::{self, ServingSpec};
use crate::services::{CpuVariantSpec, ReplicaTemplate, submission};
use crate::workloads::{self, NewWorkload, transitions};

/// Load reports are kept this long: the burst reserve looks back an hour.
const KEEP_LOADS: &str = "65 minutes";

#[derive(sqlx::FromRow)]
struct ServiceRow {
    id: Uuid,
    tenant_id: Uuid,
    name: String,
    class: WorkloadClass,
    metric: LoadMetric,
    min_replicas: i32,
    max_replicas: i32,
    capacity: f64,
    template: sqlx::types::Json<ReplicaTemplate>,
    cpu_variant: Option<sqlx::types::Json<CpuVariantSpec>>,
    scale_up_window_s: i32,
    scale_down_window_s: i32,
    stale_after_s: i32,
    draining: bool,
    recent_peak: Option<f64>,
    serving: Option<sqlx::types::Json<ServingSpec>>,
}

/// The live services (active or draining), with the reports their windows need, in the order the
/// fleet model indexes them. Read inside the fleet's repeatable-read transaction.
/// `learned` is the loop's (read again only when stale); without one it is read now.
pub async fn read(
    conn: &mut PgConnection,
    tenant_index: &HashMap<Uuid, usize>,
    learned: Option<&mut serving::Learned>,
) -> sqlx::Result<Vec<ServiceEntry>> {
    let rows: Vec<ServiceRow> = sqlx::query_as(
        "SELECT s.id, s.tenant_id, s.name, s.class, s.metric, s.min_replicas, s.max_replicas, s.capacity, s.template, \
                s.cpu_variant, s.scale_up_window_s, s.scale_down_window_s, s.stale_after_s, \
                s.state = 'draining' AS draining, s.serving, \
                (SELECT max(l.value) FROM service_loads l WHERE l.service_id = s.id \
                   AND l.at > now() - interval '1 hour') AS recent_peak \
         FROM services s WHERE s.state IN ('active', 'draining') ORDER BY s.tenant_id, s.name, s.id",
    )
    .fetch_all(&mut *conn)
    .await?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let loads: Vec<(Uuid, DateTime<Utc>, f64)> = sqlx::query_as(
        "SELECT l.service_id, l.at, l.value FROM services s JOIN service_loads l ON l.service_id = s.id \
         WHERE s.state IN ('active', 'draining') \
           AND l.at > now() - make_interval(secs => greatest(s.scale_up_window_s, s.scale_down_window_s, $1) \
                                                    + s.stale_after_s) \
         ORDER BY l.service_id, l.at",
    )
    .bind(core::BURST_WINDOW_S as f64)
    .fetch_all(&mut *conn)
    .await?;
    let mut priced: Vec<Uuid> = rows.iter().filter(|r| r.serving.is_some()).map(|r| r.id).collect();
    priced.sort_unstable();
    let mut own = serving::Learned::default();
    let learned = learned.unwrap_or(&mut own);
    if !priced.is_empty() {
        learned.refresh(&mut *conn, &priced).await?;
    }
    let (observed, prices) = (&learned.observed, learned.prices);
    let mut by_service: HashMap<Uuid, Vec<LoadSample>> = HashMap::new();
    for (service, at, value) in loads {
        by_service.entry(service).or_default().push(LoadSample { at, value });
    }
    Ok(rows
        .into_iter()
        .filter_map(|r| {
            let tenant = *tenant_index.get(&r.tenant_id)?;
            let gpu_milli_per_replica = r.template.0.resources.gpu_milli_per_replica();
            // Priced per token: what replicas sustained at the objective replaces the declared
            // capacity (its prior), and the fleet's prices choose between the variants.
            let learned = |variant: ReplicaVariant, declared: f64| {
                if r.serving.is_none() {
                    return declared;
                }
                observed.get(&(r.id, variant)).cloned().unwrap_or_default().estimate(declared).tokens_per_s
            };
            let replica_cost_per_hour = match (&r.serving, &r.cpu_variant, prices.gpu_hour, prices.cpu_milli_hour) {
                (Some(_), Some(cpu), Some(gpu_hour), Some(cpu_milli_hour)) => Some(VariantCosts {
                    gpu: gpu_hour * f64::from(gpu_milli_per_replica) / f64::from(WHOLE_GPU_MILLI),
                    cpu: cpu_milli_hour * f64::from(cpu.0.cpu_millis),
                }),
                _ => None,
            };
            Some(ServiceEntry {
                id: r.id,
                name: r.name,
                tenant,
                class: r.class,
                metric: r.metric,
                min_replicas: r.min_replicas.max(0) as u32,
                max_replicas: r.max_replicas.max(0) as u32,
                capacity: learned(ReplicaVariant::Gpu, r.capacity),
                gpu_milli_per_replica,
                cpu_variant: r.cpu_variant.map(|c| CpuVariant {
                    capacity: learned(ReplicaVariant::Cpu, c.0.capacity),
                    cpu_millis: c.0.cpu_millis,
                    memory_mb: c.0.memory_mb,
                }),
                scale_up_window_s: r.scale_up_window_s.max(0) as u32,
                scale_down_window_s: r.scale_down_window_s.max(0) as u32,
                stale_after_s: r.stale_after_s.max(0) as u32,
                draining: r.draining,
                loads: by_service.remove(&r.id).unwrap_or_default(),
                recent_peak: r.recent_peak,
                replica_cost_per_hour,
            })
        })
        .collect())
}

/// What a cycle's scaling did.
#[derive(Debug, Default)]
pub struct Scaled {
    /// Replicas started or drained: the fleet must be read again before the policies decide.
    pub changed: bool,
    /// A node's desired state changed (a placed replica drains).
    pub nodes_changed: bool,
}

/// Applies the cycle's scale plans in one transaction that first proves this replica still leads:
/// new replicas (pending, with the plan's reason), drains, each service's desired replicas and
/// reason, a scale event for every change, deleted services whose last replica has stopped, and
/// old load reports pruned. A cycle whose plans change nothing and say nothing new, with no
/// service draining and nothing to prune, writes nothing: the check is two reads outside any
/// transaction, so a steady fleet with services costs its cycles no write.
pub async fn apply(state: &Scheduler, fleet: &FleetView, plans: &[ScalePlan]) -> Result<Scaled, LeaseError> {
    let before = stored(&state.db).await?;
    let steady = |plan: &ScalePlan| {
        let service = &fleet.services[plan.service];
        !plan.changes()
            && !service.draining
            && before.get(&service.id).is_some_and(|(g, c, r)| {
                *g == plan.desired.gpu as i32 && *c == plan.desired.cpu as i32 && r.as_deref() == Some(&plan.reason)
            })
    };
    if plans.iter().all(steady) {
        let prune_due: bool = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT EXISTS (SELECT 1 FROM service_loads WHERE at < now() - interval '{KEEP_LOADS}')"
        )))
        .fetch_one(&state.db)
        .await?;
        if !prune_due {
            return Ok(Scaled::default());
        }
    }
    let mut tx = state.db.begin().await?;
    state.leadership.prove(&mut tx).await?;
    let mut scaled = Scaled::default();
    // Read again under the lease: another leader may have written since the check above.
    let stored = stored(&mut *tx).await?;
    for plan in plans {
        let service = &fleet.services[plan.service];
        let tenant_id = fleet.tenants[service.tenant].id;
        if plan.changes() {
            start_and_drain(&mut tx, fleet, plan, tenant_id, &mut scaled).await?;
            let have = (plan.placed.gpu + plan.pending.gpu, plan.placed.cpu + plan.pending.cpu);
            sqlx::query(
                "INSERT INTO service_scale_events (service_id, from_gpu, from_cpu, to_gpu, to_cpu, started, drained, \
                     demand, reason) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )
            .bind(service.id)
            .bind(have.0 as i32)
            .bind(have.1 as i32)
            .bind(plan.desired.gpu as i32)
            .bind(plan.desired.cpu as i32)
            .bind(plan.start.len() as i32)
            .bind(plan.drain.len() as i32)
            .bind(plan.demand)
            .bind(&plan.reason)
            .execute(&mut *tx)
            .await?;
        }
        let unchanged = stored.get(&service.id).is_some_and(|(g, c, r)| {
            *g == plan.desired.gpu as i32 && *c == plan.desired.cpu as i32 && r.as_deref() == Some(&plan.reason)
        });
        if !unchanged || plan.changes() {
            sqlx::query(
                "UPDATE services SET desired_gpu = $2, desired_cpu = $3, demand = $4, scale_reason = $5, \
                     scaled_at = CASE WHEN $6 THEN now() ELSE scaled_at END WHERE id = $1",
            )
            .bind(service.id)
            .bind(plan.desired.gpu as i32)
            .bind(plan.desired.cpu as i32)
            .bind(plan.demand)
            .bind(&plan.reason)
            .bind(plan.changes())
            .execute(&mut *tx)
            .await?;
        }
    }
    // A deleted service is gone once none of its replicas is active.
    sqlx::query(
        "UPDATE services s SET state = 'deleted', updated_at = now() WHERE s.state = 'draining' AND NOT EXISTS \
           (SELECT 1 FROM workloads w WHERE w.service_id = s.id \
              AND w.state IN ('pending', 'scheduled', 'running', 'preempting', 'cancelling'))",
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("DELETE FROM service_loads WHERE at < now() - interval '{KEEP_LOADS}'")))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(scaled)
}

/// Each live service's stored desired replicas and reason.
async fn stored<'c>(db: impl sqlx::PgExecutor<'c>) -> sqlx::Result<HashMap<Uuid, (i32, i32, Option<String>)>> {
    let rows: Vec<(Uuid, i32, i32, Option<String>)> =
        sqlx::query_as("SELECT id, desired_gpu, desired_cpu, scale_reason FROM services WHERE state <> 'deleted'")
            .fetch_all(db)
            .await?;
    Ok(rows.into_iter().map(|(id, g, c, r)| (id, (g, c, r))).collect())
}

/// A service's templates and latency target, as stored.
type Templates = (sqlx::types::Json<ReplicaTemplate>, Option<sqlx::types::Json<CpuVariantSpec>>, Option<i32>);

async fn start_and_drain(
    tx: &mut PgConnection,
    fleet: &FleetView,
    plan: &ScalePlan,
    tenant_id: Uuid,
    scaled: &mut Scaled,
) -> sqlx::Result<()> {
    let service = &fleet.services[plan.service];
    let template: Option<Templates> =
        sqlx::query_as("SELECT template, cpu_variant, latency_target_ms FROM services WHERE id = $1")
            .bind(service.id)
            .fetch_optional(&mut *tx)
            .await?;
    if let Some((template, cpu_variant, latency)) = template {
        for &variant in &plan.start {
            let id = Uuid::now_v7();
            let cpu = match variant {
                ReplicaVariant::Cpu => cpu_variant.as_ref().map(|c| &c.0),
                ReplicaVariant::Gpu => None,
            };
            let mut req =
                submission(&service.name, service.class, &template.0, cpu, id, latency.map(|l| l.max(0) as u32));
            // What a replica may need to know about itself (set by Airtime, never by a template).
            req.env.insert("AIRTIME_SERVICE_ID".into(), service.id.to_string());
            req.env.insert("AIRTIME_SERVICE_NAME".into(), service.name.clone());
            req.env.insert("AIRTIME_REPLICA_VARIANT".into(), variant.as_str().into());
            let reason = format!("a replica of service {}: {}", service.name, plan.reason);
            let row = NewWorkload {
                id,
                tenant_id,
                req: &req,
                idempotency: None,
                replica: Some((service.id, variant)),
                pending_reason: "waiting for the next scheduling cycle",
                gang: None,
            };
            workloads::insert(&mut *tx, &row).await?;
            transitions::record_event(&mut *tx, id, tenant_id, None, WorkloadState::Pending, 0, &reason).await?;
            scaled.changed = true;
        }
    }
    for &w in &plan.drain {
        let replica = &fleet.workloads[w];
        // Locked and read again: the agent may have ended it since the fleet was read.
        let row: Option<(WorkloadState, i32, Option<Uuid>)> =
            sqlx::query_as("SELECT state, attempt, node_id FROM workloads WHERE id = $1 FOR UPDATE")
                .bind(replica.id)
                .fetch_optional(&mut *tx)
                .await?;
        let Some((state, attempt, node_id)) = row else { continue };
        let detail = format!("scaled down: {}", plan.reason);
        match state {
            WorkloadState::Pending => {
                transitions::cancel_pending(&mut *tx, replica.id, tenant_id, attempt, &detail).await?;
            }
            WorkloadState::Scheduled | WorkloadState::Running => {
                transitions::request_cancel(&mut *tx, replica.id, tenant_id, state, attempt, node_id, &detail).await?;
                scaled.nodes_changed = true;
            }
            _ => continue,
        }
        scaled.changed = true;
    }
    Ok(())
}

/// The cycle's scaling (`cycle::Adapter::scale`): the core's plans for `fleet` applied when they
/// change anything or say something new. Returns what it did, and the fleet read again when
/// replicas were started or drained (the core then plans again and derives the burst reserve).
pub async fn step(
    state: &Scheduler,
    fleet: &FleetView,
    plans: &[ScalePlan],
) -> anyhow::Result<(Scaled, Option<FleetView>)> {
    let scaled = apply(state, fleet, plans).await?;
    if !scaled.changed {
        return Ok((scaled, None));
    }
    let mut conn = state.db.acquire().await?;
    let fleet = super::fleet_view::load(&mut conn).await?;
    Ok((scaled, Some(fleet)))
}
