//! Elastic inference services (`ARCHITECTURE.md`, "Services"): a tenant's service with a replica
//! template, bounds and scaling behaviour; the load it reports; the tokens that may report it; and
//! its replicas, which are workloads the scheduling loop starts and drains ([`scale`], on the
//! scheduling core's `airtime_scheduler::services`). A service priced per token has its replicas
//! read by their agents ([`serving`]).

pub mod serving;

use std::collections::BTreeMap;

use airtime_protocol::container::ContainerSpec;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use uuid::Uuid;

use crate::auth::audit::{self, Change};
use crate::auth::tokens::{self, TokenKind};
use crate::auth::{Role, SecretString};
use crate::domain;
use crate::domain::Scope;
use crate::model::{LoadMetric, WorkloadClass};
use crate::workloads::{ResourceProfile, Slo, SubmitWorkload};
use serving::ServingSpec;

/// The replica template: what every main replica runs and needs.
#[derive(Debug, Clone, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplicaTemplate {
    #[serde(default)]
    pub resources: ResourceProfile,
    pub command: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub priority: i32,
    /// The OCI image its replicas run in (the CPU variant too, with its own command); absent:
    /// processes on the node.
    #[serde(default)]
    pub container: Option<ContainerSpec>,
}

/// A CPU variant: the same model served from CPU, with its own command, resources and capacity.
#[derive(Debug, Clone, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CpuVariantSpec {
    /// CPU per replica, thousandths of a core.
    pub cpu_millis: u32,
    /// Host memory per replica, MiB.
    pub memory_mb: u64,
    pub command: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Load one CPU replica serves at the latency target, in the service's metric.
    pub capacity: f64,
}

/// A new service.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateService {
    pub name: String,
    /// Tenant name; the caller's own tenant when absent (platform admins name one).
    #[serde(default)]
    pub tenant: Option<String>,
    /// `realtime_inference` (customer-facing) or `batch_inference`.
    pub class: WorkloadClass,
    pub replica: ReplicaTemplate,
    #[serde(default)]
    pub cpu_variant: Option<CpuVariantSpec>,
    /// What load reports and capacities are measured in; absent: `requests_per_second`, or
    /// `tokens_per_second` for a service with `serving`.
    #[serde(default)]
    pub metric: Option<LoadMetric>,
    /// Load one main replica serves at its latency target (with `serving`: tokens per second,
    /// the prior until what replicas sustain at the objective is measured).
    pub capacity: f64,
    /// Its replicas serve an HTTP endpoint in vLLM's metric format: the agent reads their
    /// readiness and metrics, the load is their tokens and queues, the capacity is learned at
    /// this objective and the cost of a token is shown (`docs/token-services.md`).
    #[serde(default)]
    pub serving: Option<ServingSpec>,
    /// The latency target, ms (shown; the capacity is what it means for scaling).
    #[serde(default)]
    pub latency_target_ms: Option<u32>,
    #[serde(default = "one")]
    pub min_replicas: u32,
    pub max_replicas: u32,
    #[serde(default)]
    pub behavior: ScaleBehavior,
}

/// How eagerly it scales, like the Kubernetes HPA's `behavior`.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScaleBehavior {
    /// Scale up only to what every report of this many seconds asked for (0: at once).
    #[serde(default)]
    pub scale_up_window_s: u32,
    /// Scale down only to what no report of this many seconds exceeded.
    #[serde(default = "five_minutes")]
    pub scale_down_window_s: u32,
    /// Without a report for this long, the replicas are held as they are.
    #[serde(default = "one_minute")]
    pub stale_after_s: u32,
}

impl Default for ScaleBehavior {
    fn default() -> Self {
        ScaleBehavior { scale_up_window_s: 0, scale_down_window_s: five_minutes(), stale_after_s: one_minute() }
    }
}

fn one() -> u32 {
    1
}
fn five_minutes() -> u32 {
    300
}
fn one_minute() -> u32 {
    60
}

/// A change to a service: its bounds, capacity, behaviour or templates (new replicas run the new
/// template; running ones keep theirs until they drain). Absent fields stay as they are.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateService {
    pub min_replicas: Option<u32>,
    pub max_replicas: Option<u32>,
    pub capacity: Option<f64>,
    pub latency_target_ms: Option<u32>,
    pub behavior: Option<ScaleBehavior>,
    pub replica: Option<ReplicaTemplate>,
    /// A CPU variant to set; `remove_cpu_variant` to drop it.
    pub cpu_variant: Option<CpuVariantSpec>,
    #[serde(default)]
    pub remove_cpu_variant: bool,
    /// A new objective or endpoints for a service priced per token (it cannot be added to or
    /// removed from a service: its load is measured differently).
    pub serving: Option<ServingSpec>,
}

/// The parts of a service that are checked together.
struct Shape<'a> {
    name: &'a str,
    class: WorkloadClass,
    replica: &'a ReplicaTemplate,
    cpu_variant: Option<&'a CpuVariantSpec>,
    capacity: f64,
    latency_target_ms: Option<u32>,
    min_replicas: u32,
    max_replicas: u32,
    behavior: ScaleBehavior,
    metric: LoadMetric,
    serving: Option<&'a ServingSpec>,
}

pub const MAX_REPLICAS: u32 = 1000;

impl Shape<'_> {
    /// A precise reason the service is refused, before anything is written. Each template is
    /// checked as the submission of one of its replicas would be.
    fn check(&self, allowed_mounts: &[String]) -> Result<(), String> {
        let name = self.name;
        if name.is_empty()
            || name.len() > 100
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        {
            return Err("name must be 1 to 100 letters, digits, '-', '_' or '.'".into());
        }
        if !matches!(self.class, WorkloadClass::RealtimeInference | WorkloadClass::BatchInference) {
            return Err("class must be realtime_inference or batch_inference".into());
        }
        if let Some(serving) = self.serving {
            serving.check().map_err(|m| format!("serving: {m}"))?;
            if self.metric != LoadMetric::TokensPerSecond {
                return Err(
                    "metric must be tokens_per_second for a service with serving (its load is read in tokens)".into()
                );
            }
            if self.replica.container.is_some() {
                return Err("serving replicas run as processes: the agent reads them on the node's loopback, and a \
                            container's network is none"
                    .into());
            }
        }
        let positive = |v: f64| v.is_finite() && v > 0.0 && v <= 1e9;
        if !positive(self.capacity) {
            return Err("capacity (the load one replica serves at its latency target) must be above 0".into());
        }
        if self.max_replicas == 0 || self.max_replicas > MAX_REPLICAS {
            return Err(format!("max_replicas must be between 1 and {MAX_REPLICAS}"));
        }
        if self.min_replicas > self.max_replicas {
            return Err("min_replicas must not exceed max_replicas".into());
        }
        if self.latency_target_ms == Some(0) {
            return Err("latency_target_ms must be above 0".into());
        }
        let b = self.behavior;
        if b.scale_up_window_s > 3600 || b.scale_down_window_s > 3600 {
            return Err("scale_up_window_s and scale_down_window_s must be at most 3600".into());
        }
        if !(5..=3600).contains(&b.stale_after_s) {
            return Err("stale_after_s must be between 5 and 3600".into());
        }
        submission(name, self.class, self.replica, None, Uuid::nil(), self.latency_target_ms)
            .check(allowed_mounts)
            .map_err(|m| format!("replica: {m}"))?;
        if let Some(cpu) = self.cpu_variant {
            if !positive(cpu.capacity) {
                return Err("cpu_variant.capacity must be above 0".into());
            }
            if cpu.cpu_millis == 0 {
                return Err("cpu_variant.cpu_millis must be above 0".into());
            }
            submission(name, self.class, self.replica, Some(cpu), Uuid::nil(), self.latency_target_ms)
                .check(allowed_mounts)
                .map_err(|m| format!("cpu_variant: {m}"))?;
        }
        Ok(())
    }
}

/// The submission of one replica: the main template, or the CPU variant (its own command,
/// resources and environment, no GPU). Not preemptible: a replica serves customers.
/// The environment a serving replica's server finds its port in (set by the agent).
pub const PORT_ENV: [&str; 2] = ["PORT", "AIRTIME_SERVE_PORT"];

pub fn submission(
    service: &str,
    class: WorkloadClass,
    replica: &ReplicaTemplate,
    cpu: Option<&CpuVariantSpec>,
    id: Uuid,
    latency_target_ms: Option<u32>,
) -> SubmitWorkload {
    let short = &id.simple().to_string()[24..];
    let (variant, resources, command, env) = match cpu {
        None => ("gpu", replica.resources.clone(), replica.command.clone(), replica.env.clone()),
        Some(cpu) => (
            "cpu",
            ResourceProfile { cpu_millis: cpu.cpu_millis, memory_mb: cpu.memory_mb, ..ResourceProfile::default() },
            cpu.command.clone(),
            cpu.env.clone(),
        ),
    };
    SubmitWorkload {
        name: format!("{service}-{variant}-{short}"),
        tenant: None,
        class,
        priority: replica.priority,
        resources,
        command,
        env,
        preemptible: false,
        checkpointable: false,
        expected_duration_s: None,
        slo: Slo { latency_ms: latency_target_ms, deadline: None },
        container: replica.container.clone(),
        nodes: None,
    }
}

/// A service as the API shows it: its definition, the autoscaler's latest word and its replicas.
#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct ServiceView {
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub tenant: String,
    pub name: String,
    pub class: WorkloadClass,
    #[schema(value_type = ReplicaTemplate)]
    pub replica: sqlx::types::Json<serde_json::Value>,
    #[schema(value_type = Option<CpuVariantSpec>)]
    pub cpu_variant: Option<sqlx::types::Json<serde_json::Value>>,
    /// Priced per token: its objective and the endpoints its agents read.
    #[schema(value_type = Option<ServingSpec>)]
    pub serving: Option<sqlx::types::Json<ServingSpec>>,
    pub metric: LoadMetric,
    pub capacity: f64,
    pub latency_target_ms: Option<i32>,
    pub min_replicas: i32,
    pub max_replicas: i32,
    pub scale_up_window_s: i32,
    pub scale_down_window_s: i32,
    pub stale_after_s: i32,
    /// `active`, `draining` (deleted, replicas stopping) or `deleted`.
    pub state: String,
    /// The replicas the autoscaler wants, by variant.
    pub desired_gpu_replicas: i32,
    pub desired_cpu_replicas: i32,
    /// Replicas running now, by variant.
    pub running_gpu_replicas: i64,
    pub running_cpu_replicas: i64,
    /// Replicas waiting for a place.
    pub pending_replicas: i64,
    /// The load provisioned for (stabilised, with burst headroom); none while reports are stale.
    pub demand: Option<f64>,
    /// The latest report's load, and when it came.
    pub latest_load: Option<f64>,
    pub latest_load_at: Option<DateTime<Utc>>,
    /// Why it has the replicas it has: "scale up: demand 42 req/s over 3 replicas at 15 req/s each".
    pub scale_reason: Option<String>,
    pub scaled_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

const SERVICE_SELECT: &str = "SELECT s.id, s.tenant_id, t.name AS tenant, s.name, s.class, s.template AS replica, \
     s.cpu_variant, s.serving, s.metric, s.capacity, s.latency_target_ms, s.min_replicas, s.max_replicas, s.scale_up_window_s, \
     s.scale_down_window_s, s.stale_after_s, s.state, s.desired_gpu AS desired_gpu_replicas, \
     s.desired_cpu AS desired_cpu_replicas, \
     (SELECT count(*) FROM workloads w WHERE w.service_id = s.id AND w.replica_variant = 'gpu' \
        AND w.state IN ('scheduled', 'running')) AS running_gpu_replicas, \
     (SELECT count(*) FROM workloads w WHERE w.service_id = s.id AND w.replica_variant = 'cpu' \
        AND w.state IN ('scheduled', 'running')) AS running_cpu_replicas, \
     (SELECT count(*) FROM workloads w WHERE w.service_id = s.id AND w.state = 'pending') AS pending_replicas, \
     s.demand, l.value AS latest_load, l.at AS latest_load_at, s.scale_reason, s.scaled_at, s.created_at \
     FROM services s JOIN tenants t ON t.id = s.tenant_id \
     LEFT JOIN LATERAL (SELECT value, at FROM service_loads x WHERE x.service_id = s.id ORDER BY at DESC LIMIT 1) l \
       ON true";

/// A scale decision as listed.
#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct ScaleEvent {
    pub at: DateTime<Utc>,
    pub from_gpu: i32,
    pub from_cpu: i32,
    pub to_gpu: i32,
    pub to_cpu: i32,
    pub started: i32,
    pub drained: i32,
    pub demand: Option<f64>,
    pub reason: String,
}

/// A service with its latest scale decisions.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ServiceDetail {
    #[serde(flatten)]
    pub service: ServiceView,
    /// The last 50 scale decisions, newest first.
    pub scale_events: Vec<ScaleEvent>,
    /// For a service priced per token: tokens, latency against the objective, learned capacity and
    /// cost per million tokens over the last hour (beside `serving`, its definition).
    pub serving_report: Option<serving::ServingReport>,
}

pub async fn get(db: &PgPool, id: Uuid) -> sqlx::Result<Option<ServiceView>> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!("{SERVICE_SELECT} WHERE s.id = $1"))).bind(id).fetch_optional(db).await
}

/// The caller's tenant's live services (every tenant's for platform admins), by name.
pub async fn list(db: &PgPool, scope: &Scope) -> sqlx::Result<Vec<ServiceView>> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "{SERVICE_SELECT} WHERE s.state <> 'deleted' AND ($1::uuid IS NULL OR s.tenant_id = $1) ORDER BY t.name, s.name"
    )))
    .bind(scope.tenant_filter())
    .fetch_all(db)
    .await
}

/// A service the caller may see, with its latest scale decisions; another tenant's is not found.
pub async fn detail(db: &PgPool, id: Uuid, scope: &Scope) -> domain::Result<ServiceDetail> {
    let service = get(db, id).await?.ok_or(domain::Error::NotFound("service"))?;
    scope.ensure_visible(service.tenant_id, "service")?;
    let scale_events = sqlx::query_as(
        "SELECT at, from_gpu, from_cpu, to_gpu, to_cpu, started, drained, demand, reason FROM service_scale_events \
         WHERE service_id = $1 ORDER BY at DESC, id DESC LIMIT 50",
    )
    .bind(id)
    .fetch_all(db)
    .await?;
    let serving_report = match &service.serving {
        Some(spec) => Some(
            serving::report_for(
                db,
                id,
                &spec.0,
                &service.replica.0,
                service.cpu_variant.as_ref().map(|c| &c.0),
                service.capacity,
                true,
            )
            .await?,
        ),
        None => None,
    };
    Ok(ServiceDetail { service, scale_events, serving_report })
}

/// Creates a service in the caller's tenant (a platform admin names one). Its first replicas
/// start at the next cycle (`min_replicas` until load is reported).
pub async fn create(
    db: &PgPool,
    req: &CreateService,
    scope: &Scope,
    allowed_mounts: &[String],
) -> domain::Result<ServiceView> {
    scope.require_role(Role::TenantMember)?;
    let metric = match (req.metric, &req.serving) {
        (None, Some(_)) => LoadMetric::TokensPerSecond,
        (metric, _) => metric.unwrap_or_default(),
    };
    let shape = Shape {
        metric,
        serving: req.serving.as_ref(),
        name: &req.name,
        class: req.class,
        replica: &req.replica,
        cpu_variant: req.cpu_variant.as_ref(),
        capacity: req.capacity,
        latency_target_ms: req.latency_target_ms,
        min_replicas: req.min_replicas,
        max_replicas: req.max_replicas,
        behavior: req.behavior,
    };
    shape.check(allowed_mounts).map_err(|m| domain::Error::invalid("invalid_service", m))?;
    let mut tx = db.begin().await?;
    let tenant_id = crate::tenancy::resolve_for_write(&mut tx, scope, req.tenant.as_deref()).await?;
    let id = Uuid::now_v7();
    let b = req.behavior;
    sqlx::query(
        "INSERT INTO services (id, tenant_id, name, class, template, cpu_variant, metric, capacity, latency_target_ms, \
             min_replicas, max_replicas, scale_up_window_s, scale_down_window_s, stale_after_s, serving) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
    )
    .bind(id)
    .bind(tenant_id)
    .bind(&req.name)
    .bind(req.class)
    .bind(sqlx::types::Json(&req.replica))
    .bind(req.cpu_variant.as_ref().map(sqlx::types::Json))
    .bind(metric)
    .bind(req.capacity)
    .bind(req.latency_target_ms.map(|l| l.min(i32::MAX as u32) as i32))
    .bind(req.min_replicas as i32)
    .bind(req.max_replicas as i32)
    .bind(b.scale_up_window_s as i32)
    .bind(b.scale_down_window_s as i32)
    .bind(b.stale_after_s as i32)
    .bind(req.serving.as_ref().map(sqlx::types::Json))
    .execute(&mut *tx)
    .await
    .map_err(|err| match &err {
        sqlx::Error::Database(e) if e.is_unique_violation() => {
            domain::Error::conflict("service_exists", format!("the tenant already has a service named {:?}", req.name))
        }
        _ => domain::Error::from(err),
    })?;
    audit::record(
        &mut tx,
        &scope.actor,
        Change::new("service.create", "service", id).tenant(Some(tenant_id)).detail(serde_json::json!({
            "name": req.name, "class": req.class, "min_replicas": req.min_replicas,
            "max_replicas": req.max_replicas, "cpu_variant": req.cpu_variant.is_some(),
            "serving": req.serving,
        })),
    )
    .await?;
    tx.commit().await?;
    get(db, id).await?.ok_or(domain::Error::NotFound("service"))
}

/// The stored definition of a live service, locked for a change.
#[derive(sqlx::FromRow)]
struct StoredShape {
    tenant_id: Uuid,
    name: String,
    class: WorkloadClass,
    template: sqlx::types::Json<ReplicaTemplate>,
    cpu_variant: Option<sqlx::types::Json<CpuVariantSpec>>,
    capacity: f64,
    latency_target_ms: Option<i32>,
    min_replicas: i32,
    max_replicas: i32,
    scale_up_window_s: i32,
    scale_down_window_s: i32,
    stale_after_s: i32,
    state: String,
    metric: LoadMetric,
    serving: Option<sqlx::types::Json<ServingSpec>>,
}

async fn lock_live(tx: &mut sqlx::PgConnection, id: Uuid, scope: &Scope) -> domain::Result<StoredShape> {
    let stored: StoredShape = sqlx::query_as(
        "SELECT tenant_id, name, class, template, cpu_variant, capacity, latency_target_ms, min_replicas, \
                max_replicas, scale_up_window_s, scale_down_window_s, stale_after_s, state, metric, serving \
         FROM services WHERE id = $1 FOR UPDATE",
    )
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?
    .ok_or(domain::Error::NotFound("service"))?;
    scope.ensure_can_write(stored.tenant_id, "service")?;
    if stored.state != "active" {
        return Err(domain::Error::conflict("service_deleted", format!("the service was deleted ({})", stored.state)));
    }
    Ok(stored)
}

/// Changes a service's bounds, capacity, behaviour or templates: checked as a whole, audited.
pub async fn update(
    db: &PgPool,
    id: Uuid,
    req: &UpdateService,
    scope: &Scope,
    allowed_mounts: &[String],
) -> domain::Result<ServiceView> {
    let mut tx = db.begin().await?;
    let stored = lock_live(&mut tx, id, scope).await?;
    let replica = req.replica.clone().unwrap_or(stored.template.0);
    let cpu_variant =
        if req.remove_cpu_variant { None } else { req.cpu_variant.clone().or(stored.cpu_variant.map(|c| c.0)) };
    if req.remove_cpu_variant && req.cpu_variant.is_some() {
        return Err(domain::Error::invalid("invalid_service", "give cpu_variant or remove_cpu_variant, not both"));
    }
    let behavior = req.behavior.unwrap_or(ScaleBehavior {
        scale_up_window_s: stored.scale_up_window_s.max(0) as u32,
        scale_down_window_s: stored.scale_down_window_s.max(0) as u32,
        stale_after_s: stored.stale_after_s.max(0) as u32,
    });
    if req.serving.is_some() && stored.serving.is_none() {
        return Err(domain::Error::invalid(
            "invalid_service",
            "serving cannot be added to a service that measures its load in reports: create a new service",
        ));
    }
    let serving = req.serving.clone().or(stored.serving.map(|s| s.0));
    let shape = Shape {
        metric: stored.metric,
        serving: serving.as_ref(),
        name: &stored.name,
        class: stored.class,
        replica: &replica,
        cpu_variant: cpu_variant.as_ref(),
        capacity: req.capacity.unwrap_or(stored.capacity),
        latency_target_ms: req.latency_target_ms.or(stored.latency_target_ms.map(|l| l.max(0) as u32)),
        min_replicas: req.min_replicas.unwrap_or(stored.min_replicas.max(0) as u32),
        max_replicas: req.max_replicas.unwrap_or(stored.max_replicas.max(0) as u32),
        behavior,
    };
    shape.check(allowed_mounts).map_err(|m| domain::Error::invalid("invalid_service", m))?;
    sqlx::query(
        "UPDATE services SET template = $2, cpu_variant = $3, capacity = $4, latency_target_ms = $5, \
             min_replicas = $6, max_replicas = $7, scale_up_window_s = $8, scale_down_window_s = $9, \
             stale_after_s = $10, serving = $11, updated_at = now() WHERE id = $1",
    )
    .bind(id)
    .bind(sqlx::types::Json(&replica))
    .bind(cpu_variant.as_ref().map(sqlx::types::Json))
    .bind(shape.capacity)
    .bind(shape.latency_target_ms.map(|l| l.min(i32::MAX as u32) as i32))
    .bind(shape.min_replicas as i32)
    .bind(shape.max_replicas as i32)
    .bind(behavior.scale_up_window_s as i32)
    .bind(behavior.scale_down_window_s as i32)
    .bind(behavior.stale_after_s as i32)
    .bind(serving.as_ref().map(sqlx::types::Json))
    .execute(&mut *tx)
    .await?;
    audit::record(
        &mut tx,
        &scope.actor,
        Change::new("service.update", "service", id).tenant(Some(stored.tenant_id)).detail(serde_json::json!({
            "min_replicas": shape.min_replicas, "max_replicas": shape.max_replicas, "capacity": shape.capacity,
            "replica_changed": req.replica.is_some(),
            "cpu_variant": cpu_variant.is_some(),
            "serving": req.serving,
        })),
    )
    .await?;
    tx.commit().await?;
    get(db, id).await?.ok_or(domain::Error::NotFound("service"))
}

/// Deletes a service: it drains (each replica stops with the grace period) and is gone when the
/// last one has stopped. Its tokens stop working at once.
pub async fn delete(db: &PgPool, id: Uuid, scope: &Scope) -> domain::Result<ServiceView> {
    let mut tx = db.begin().await?;
    let stored = lock_live(&mut tx, id, scope).await?;
    sqlx::query("UPDATE services SET state = 'draining', updated_at = now() WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    sqlx::query("UPDATE service_tokens SET revoked_at = now() WHERE service_id = $1 AND revoked_at IS NULL")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    audit::record(
        &mut tx,
        &scope.actor,
        Change::new("service.delete", "service", id)
            .tenant(Some(stored.tenant_id))
            .detail(serde_json::json!({"name": stored.name})),
    )
    .await?;
    tx.commit().await?;
    get(db, id).await?.ok_or(domain::Error::NotFound("service"))
}

/// A load report.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadReport {
    /// Requests per second arriving now (required for a `requests_per_second` service).
    #[serde(default)]
    pub requests_per_s: Option<f64>,
    /// Requests in flight (required for a `concurrent_requests` service).
    #[serde(default)]
    pub concurrent_requests: Option<f64>,
    /// Tokens per second (prompt and generated) arriving now (required for a `tokens_per_second`
    /// service; a service with `serving` has its load read by its agents, and reports add to
    /// nothing there).
    #[serde(default)]
    pub tokens_per_s: Option<f64>,
    /// Requests queued, waiting for a replica.
    #[serde(default)]
    pub queue_depth: Option<u32>,
    /// Observed p95 latency, ms.
    #[serde(default)]
    pub p95_latency_ms: Option<f64>,
}

/// What a report was recorded as.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct LoadAccepted {
    pub service_id: Uuid,
    pub metric: LoadMetric,
    /// The load in the service's metric.
    pub value: f64,
    pub at: DateTime<Utc>,
}

/// Records a load report for a live service, from its own service token or a member of its
/// tenant. A report in the other metric only is refused (it cannot scale on it).
pub async fn report_load(
    db: &PgPool,
    id: Uuid,
    report: &LoadReport,
    reporter: &domain::Reporter,
) -> domain::Result<LoadAccepted> {
    let row: Option<(Uuid, LoadMetric, String)> =
        sqlx::query_as("SELECT tenant_id, metric, state FROM services WHERE id = $1")
            .bind(id)
            .fetch_optional(db)
            .await?;
    let Some((tenant_id, metric, state)) = row else { return Err(domain::Error::NotFound("service")) };
    reporter.ensure_service(id, tenant_id)?;
    if state == "deleted" {
        return Err(domain::Error::NotFound("service"));
    }
    let valid = |v: Option<f64>, field: &str| match v {
        Some(x) if !x.is_finite() || !(0.0..=1e9).contains(&x) => {
            Err(domain::Error::invalid("invalid_load", format!("{field} must be between 0 and 1e9")))
        }
        other => Ok(other),
    };
    let rps = valid(report.requests_per_s, "requests_per_s")?;
    let concurrent = valid(report.concurrent_requests, "concurrent_requests")?;
    let p95 = valid(report.p95_latency_ms, "p95_latency_ms")?;
    let tokens = valid(report.tokens_per_s, "tokens_per_s")?;
    let (value, field) = match metric {
        LoadMetric::RequestsPerSecond => (rps, "requests_per_s"),
        LoadMetric::ConcurrentRequests => (concurrent, "concurrent_requests"),
        LoadMetric::TokensPerSecond => (tokens, "tokens_per_s"),
    };
    let value = value.ok_or_else(|| {
        domain::Error::invalid("invalid_load", format!("this service scales on {}: send {field}", metric.as_str()))
    })?;
    let (at,): (DateTime<Utc>,) = sqlx::query_as(
        "INSERT INTO service_loads (service_id, value, requests_per_s, concurrent_requests, queue_depth, p95_latency_ms, \
             tokens_per_s) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING at",
    )
    .bind(id)
    .bind(value)
    .bind(rps)
    .bind(concurrent)
    .bind(report.queue_depth.map(|q| q.min(i32::MAX as u32) as i32))
    .bind(p95)
    .bind(tokens)
    .fetch_one(db)
    .await?;
    Ok(LoadAccepted { service_id: id, metric, value, at })
}

/// A new service token's request.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateServiceToken {
    pub name: String,
}

/// A service token; `token` only in the answer that creates it.
#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct ServiceTokenView {
    pub id: Uuid,
    pub service_id: Uuid,
    pub name: String,
    pub prefix: String,
    pub created_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// The secret (`st_…`), shown once.
    #[sqlx(skip)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// Mints a token that may report this service's load and nothing else: what its replicas or its
/// gateway are given. Shown once, stored as its hash, audited.
pub async fn create_token(
    db: &PgPool,
    id: Uuid,
    req: &CreateServiceToken,
    scope: &Scope,
) -> domain::Result<ServiceTokenView> {
    if req.name.trim().is_empty() || req.name.len() > 100 || req.name.chars().any(char::is_control) {
        return Err(domain::Error::invalid("invalid_token", "name must be 1 to 100 printable characters"));
    }
    let mut tx = db.begin().await?;
    let stored = lock_live(&mut tx, id, scope).await?;
    let secret = tokens::generate(TokenKind::Service).map_err(domain::Error::Internal)?;
    let token_id = Uuid::now_v7();
    let mut view: ServiceTokenView = sqlx::query_as(
        "INSERT INTO service_tokens (id, service_id, tenant_id, name, sha256, prefix, created_by) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) \
         RETURNING id, service_id, name, prefix, created_at, last_used_at, revoked_at",
    )
    .bind(token_id)
    .bind(id)
    .bind(stored.tenant_id)
    .bind(&req.name)
    .bind(&secret.sha256)
    .bind(&secret.prefix)
    .bind(scope.user_id)
    .fetch_one(&mut *tx)
    .await?;
    audit::record(
        &mut tx,
        &scope.actor,
        Change::new("service_token.create", "service_token", token_id)
            .tenant(Some(stored.tenant_id))
            .detail(serde_json::json!({"service_id": id, "name": req.name, "prefix": secret.prefix})),
    )
    .await?;
    tx.commit().await?;
    view.token = Some(SecretString::expose(&secret.token).to_owned());
    Ok(view)
}

/// Revokes one of a service's tokens.
pub async fn revoke_token(db: &PgPool, id: Uuid, token_id: Uuid, scope: &Scope) -> domain::Result<ServiceTokenView> {
    let mut tx = db.begin().await?;
    let stored = lock_live(&mut tx, id, scope).await?;
    let view: ServiceTokenView = sqlx::query_as(
        "UPDATE service_tokens SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1 AND service_id = $2 \
         RETURNING id, service_id, name, prefix, created_at, last_used_at, revoked_at",
    )
    .bind(token_id)
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?
    .ok_or(domain::Error::NotFound("service token"))?;
    audit::record(
        &mut tx,
        &scope.actor,
        Change::new("service_token.revoke", "service_token", token_id).tenant(Some(stored.tenant_id)),
    )
    .await?;
    tx.commit().await?;
    Ok(view)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> CreateService {
        serde_json::from_value(serde_json::json!({
            "name": "chat", "class": "realtime_inference", "capacity": 15.0, "max_replicas": 8,
            "replica": {"command": ["serve"], "resources": {"gpu_count": 1, "gpu_memory_mb": 20000}},
            "cpu_variant": {"command": ["serve", "--cpu"], "cpu_millis": 4000, "memory_mb": 8192, "capacity": 4.0}
        }))
        .expect("valid json")
    }

    fn check(s: &CreateService) -> Result<(), String> {
        Shape {
            name: &s.name,
            class: s.class,
            replica: &s.replica,
            cpu_variant: s.cpu_variant.as_ref(),
            capacity: s.capacity,
            latency_target_ms: s.latency_target_ms,
            min_replicas: s.min_replicas,
            max_replicas: s.max_replicas,
            behavior: s.behavior,
            metric: s.metric.unwrap_or_default(),
            serving: s.serving.as_ref(),
        }
        .check(&[])
    }

    #[test]
    fn a_reasonable_service_passes_with_the_hpa_like_defaults() {
        let s = valid();
        assert_eq!(check(&s), Ok(()));
        assert_eq!((s.min_replicas, s.behavior.scale_down_window_s, s.behavior.stale_after_s), (1, 300, 60));
    }

    #[test]
    fn each_bad_field_is_named() {
        type Case = (fn(&mut CreateService), &'static str);
        let cases: Vec<Case> = vec![
            (|s| s.name = "no spaces".into(), "name"),
            (|s| s.class = WorkloadClass::Training, "class"),
            (|s| s.capacity = 0.0, "capacity"),
            (|s| s.capacity = f64::NAN, "capacity"),
            (|s| s.max_replicas = 0, "max_replicas"),
            (|s| s.min_replicas = 9, "min_replicas"),
            (|s| s.behavior.stale_after_s = 1, "stale_after_s"),
            (|s| s.replica.command.clear(), "replica: command"),
            (
                |s| {
                    s.replica.env.insert("AIRTIME_X".into(), "1".into());
                },
                "replica: env AIRTIME_X",
            ),
            (|s| s.cpu_variant.as_mut().expect("cpu").capacity = -1.0, "cpu_variant.capacity"),
            (|s| s.cpu_variant.as_mut().expect("cpu").command.clear(), "cpu_variant: command"),
            (
                |s| {
                    s.serving = Some(serde_json::from_value(serde_json::json!({"objective": {}})).expect("spec"));
                },
                "serving: objective must set",
            ),
            (
                |s| {
                    s.serving = Some(
                        serde_json::from_value(serde_json::json!({"objective": {"ttft_p95_ms": 500.0}})).expect("spec"),
                    );
                    s.metric = Some(LoadMetric::RequestsPerSecond);
                },
                "metric must be tokens_per_second",
            ),
        ];
        for (break_it, expected) in cases {
            let mut s = valid();
            break_it(&mut s);
            let err = check(&s).expect_err(expected);
            assert!(err.contains(expected), "{err:?} should mention {expected}");
        }
    }

    #[test]
    fn a_replica_is_its_templates_submission_and_never_preemptible() {
        let s = valid();
        let id = Uuid::now_v7();
        let gpu = submission("chat", s.class, &s.replica, None, id, Some(200));
        assert_eq!(gpu.resources.gpu_count, 1);
        assert!(gpu.name.starts_with("chat-gpu-") && !gpu.preemptible);
        let cpu = submission("chat", s.class, &s.replica, s.cpu_variant.as_ref(), id, None);
        assert_eq!((cpu.resources.gpu_count, cpu.resources.cpu_millis), (0, 4000));
        assert_eq!(cpu.command, ["serve", "--cpu"]);
    }
}
