//! The fleet: nodes, their GPUs and telemetry. Agents write what is (registration, telemetry); the
//! API reads it.

pub mod liveness;
pub mod registry;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use crate::model::{GpuSource, NodeState};

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct NodeView {
    pub id: Uuid,
    pub name: String,
    pub hostname: String,
    pub state: NodeState,
    pub cpu_millis: i32,
    pub memory_mb: i64,
    #[schema(value_type = Object)]
    pub labels: serde_json::Value,
    pub cost_per_hour: Option<f64>,
    pub gpu_source: GpuSource,
    /// True when the node advertises simulated GPUs (`--simulate-gpus`), never real hardware.
    pub simulated: bool,
    pub agent_version: String,
    pub registered_at: DateTime<Utc>,
    pub last_seen_at: DateTime<Utc>,
    pub telemetry: NodeTelemetry,
    pub gpus: Vec<GpuView>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct NodeTelemetry {
    pub cpu_util: Option<f32>,
    pub memory_used_mb: Option<i64>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct GpuView {
    pub id: Uuid,
    pub node_id: Uuid,
    pub node_name: String,
    pub device_index: i32,
    pub uuid: Option<String>,
    pub model: String,
    pub memory_mb: i64,
    pub nvlink_group: Option<i32>,
    pub simulated: bool,
    /// Whether a workload holds this GPU now.
    pub held: bool,
    /// The workload that holds this GPU now: shown only to its own tenant and platform admins
    /// (others see only that the GPU is held).
    pub workload_id: Option<Uuid>,
    /// The holder's tenant, for that redaction; never serialized.
    #[serde(skip)]
    #[schema(ignore)]
    pub holder_tenant_id: Option<Uuid>,
    pub telemetry: GpuTelemetry,
}

impl GpuView {
    /// Hides who holds the GPU unless `sees(holder's tenant)`: fleet views show other tenants only
    /// in aggregate.
    pub fn redact_holder(&mut self, sees: impl Fn(Uuid) -> bool) {
        if !self.holder_tenant_id.is_some_and(&sees) {
            self.workload_id = None;
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct GpuTelemetry {
    pub util: Option<f32>,
    pub memory_used_mb: Option<i64>,
    pub temperature_c: Option<f32>,
    pub power_w: Option<f32>,
    pub ecc_errors: Option<i64>,
}

#[derive(sqlx::FromRow)]
struct NodeRow {
    id: Uuid,
    name: String,
    hostname: String,
    state: NodeState,
    cpu_millis: i32,
    memory_mb: i64,
    labels: serde_json::Value,
    cost_per_hour: Option<f64>,
    gpu_source: GpuSource,
    agent_version: String,
    registered_at: DateTime<Utc>,
    last_seen_at: DateTime<Utc>,
    cpu_util: Option<f32>,
    memory_used_mb: Option<i64>,
}

#[derive(sqlx::FromRow)]
struct GpuRow {
    id: Uuid,
    node_id: Uuid,
    node_name: String,
    device_index: i32,
    uuid: Option<String>,
    model: String,
    memory_mb: i64,
    nvlink_group: Option<i32>,
    simulated: bool,
    workload_id: Option<Uuid>,
    holder_tenant_id: Option<Uuid>,
    util: Option<f32>,
    memory_used_mb: Option<i64>,
    temperature_c: Option<f32>,
    power_w: Option<f32>,
    ecc_errors: Option<i64>,
}

impl From<GpuRow> for GpuView {
    fn from(r: GpuRow) -> Self {
        GpuView {
            id: r.id,
            node_id: r.node_id,
            node_name: r.node_name,
            device_index: r.device_index,
            uuid: r.uuid,
            model: r.model,
            memory_mb: r.memory_mb,
            nvlink_group: r.nvlink_group,
            simulated: r.simulated,
            held: r.workload_id.is_some(),
            workload_id: r.workload_id,
            holder_tenant_id: r.holder_tenant_id,
            telemetry: GpuTelemetry {
                util: r.util,
                memory_used_mb: r.memory_used_mb,
                temperature_c: r.temperature_c,
                power_w: r.power_w,
                ecc_errors: r.ecc_errors,
            },
        }
    }
}

const GPU_SELECT: &str = "SELECT g.id, g.node_id, n.name AS node_name, g.device_index, g.uuid, g.model, \
     g.memory_mb, g.nvlink_group, g.simulated, gr.workload_id, gr.tenant_id AS holder_tenant_id, g.util, g.memory_used_mb, \
     g.temperature_c, g.power_w, g.ecc_errors \
     FROM gpus g JOIN nodes n ON n.id = g.node_id LEFT JOIN gpu_grants gr ON gr.gpu_id = g.id \
     WHERE g.present";

const NODE_SELECT: &str = "SELECT id, name, hostname, state, cpu_millis, memory_mb, labels, cost_per_hour, \
     gpu_source, agent_version, registered_at, last_seen_at, cpu_util, memory_used_mb FROM nodes";

fn node_view(r: NodeRow, gpus: Vec<GpuView>) -> NodeView {
    NodeView {
        id: r.id,
        name: r.name,
        hostname: r.hostname,
        state: r.state,
        cpu_millis: r.cpu_millis,
        memory_mb: r.memory_mb,
        labels: r.labels,
        cost_per_hour: r.cost_per_hour,
        simulated: r.gpu_source == GpuSource::Simulated || gpus.iter().any(|g| g.simulated),
        gpu_source: r.gpu_source,
        agent_version: r.agent_version,
        registered_at: r.registered_at,
        last_seen_at: r.last_seen_at,
        telemetry: NodeTelemetry { cpu_util: r.cpu_util, memory_used_mb: r.memory_used_mb },
        gpus,
    }
}

pub async fn list_nodes(db: &PgPool) -> sqlx::Result<Vec<NodeView>> {
    let nodes: Vec<NodeRow> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("{NODE_SELECT} ORDER BY name"))).fetch_all(db).await?;
    let mut gpus = list_gpus(db).await?;
    Ok(nodes
        .into_iter()
        .map(|n| {
            let (mine, rest): (Vec<_>, Vec<_>) = gpus.drain(..).partition(|g| g.node_id == n.id);
            gpus = rest;
            node_view(n, mine)
        })
        .collect())
}

pub async fn get_node(db: &PgPool, id: Uuid) -> sqlx::Result<Option<NodeView>> {
    let Some(node): Option<NodeRow> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("{NODE_SELECT} WHERE id = $1"))).bind(id).fetch_optional(db).await?
    else {
        return Ok(None);
    };
    let gpus: Vec<GpuRow> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("{GPU_SELECT} AND g.node_id = $1 ORDER BY g.device_index")))
            .bind(id)
            .fetch_all(db)
            .await?;
    Ok(Some(node_view(node, gpus.into_iter().map(GpuView::from).collect())))
}

pub async fn list_gpus(db: &PgPool) -> sqlx::Result<Vec<GpuView>> {
    let rows: Vec<GpuRow> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("{GPU_SELECT} ORDER BY n.name, g.device_index")))
            .fetch_all(db)
            .await?;
    Ok(rows.into_iter().map(GpuView::from).collect())
}

pub async fn get_gpu(db: &PgPool, id: Uuid) -> sqlx::Result<Option<GpuView>> {
    let row: Option<GpuRow> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("{GPU_SELECT} AND g.id = $1"))).bind(id).fetch_optional(db).await?;
    Ok(row.map(GpuView::from))
}
