//! The fleet: nodes, their GPUs and telemetry. Agents write what is (registration, telemetry); the
//! API reads it.

pub mod desired;
pub mod health;
pub mod liveness;
pub mod maintenance;
pub mod node_history;
pub mod registry;
pub mod telemetry;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use airtime_protocol::agent::GpuThrottle;
use airtime_protocol::container::{ContainerEngine, EngineKind};

use crate::model::{GpuSharing, GpuSource, NodeState};
use crate::time_range::{RangeRules, TimeRange};

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct NodeView {
    pub id: Uuid,
    pub name: String,
    pub hostname: String,
    /// `ready`, `cordoned` or `draining` (an operator's hold: no new work), or `lost` (silent).
    pub state: NodeState,
    /// The operator's hold (cordon or drain), with the drain's progress; absent: none.
    pub maintenance: Option<maintenance::Maintenance>,
    /// What runs on the node and what a drain does with each (`GET /nodes/{id}` only; whose
    /// workload it is shown only to its tenant and platform admins).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work: Option<Vec<maintenance::NodeWork>>,
    pub cpu_millis: i32,
    pub memory_mb: i64,
    #[schema(value_type = Object)]
    pub labels: serde_json::Value,
    pub cost_per_hour: Option<f64>,
    pub gpu_source: GpuSource,
    /// True when the node advertises simulated GPUs (`--simulate-gpus`), never real hardware.
    pub simulated: bool,
    pub agent_version: String,
    /// The agent protocol its agent speaks (`major.minor`; 1.0 for agents before versions).
    pub agent_protocol: String,
    /// The container engine it runs container workloads with; absent: it runs none.
    pub container_engine: Option<ContainerEngine>,
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
    /// How it is shared: `none` (one workload holds it whole), `time_slicing` (shared without
    /// isolation), `mps` (shared with SM and memory limits) or `mig` (a MIG instance).
    pub sharing: GpuSharing,
    /// A MIG instance's profile (`1g.10gb`).
    pub mig_profile: Option<String>,
    /// The physical GPU (its index on the node) a MIG instance is carved from.
    pub parent_index: Option<i32>,
    /// Why the node could not honour the sharing mode it was asked for.
    pub sharing_note: Option<String>,
    /// Whether a workload holds this GPU (or a share of it) now.
    pub held: bool,
    /// Thousandths of this device its holders hold (1000: all of it; any holder of a GPU that is
    /// not shared, or of a MIG instance, holds all of it).
    pub held_milli: i64,
    /// The first workload that holds this GPU now: shown only to its own tenant and platform
    /// admins (others see only that the GPU is held).
    pub workload_id: Option<Uuid>,
    /// Every workload holding it, with its share: several on a shared GPU.
    pub shares: Vec<GpuShareView>,
    pub telemetry: GpuTelemetry,
    /// Why it is quarantined (`XID 79`, `2 uncorrectable ECC errors`, …): it takes no new work
    /// and its workloads were stopped and requeued. Absent: healthy.
    pub fault: Option<String>,
    pub faulted_at: Option<DateTime<Utc>>,
}

/// One workload's share of a GPU and what its processes use of it (per-process telemetry).
#[derive(Debug, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct GpuShareView {
    /// Shown only to its own tenant and platform admins.
    pub workload_id: Option<Uuid>,
    /// Thousandths of a physical GPU granted (1000: a whole GPU; a MIG instance counts as its share
    /// of the GPU's compute slices, 142 for a `1g` instance): what quotas and usage count.
    pub milli: i64,
    /// Memory slice reserved for it, MiB (0: none).
    pub memory_mb: i64,
    /// SM utilisation of its processes, 0..1, where the node measures it.
    pub util: Option<f32>,
    pub memory_used_mb: Option<i64>,
    /// The holder's tenant, for redaction; never serialized.
    #[serde(skip_serializing, default)]
    #[schema(ignore)]
    pub tenant_id: Option<Uuid>,
}

impl GpuView {
    /// Hides who holds the GPU unless `sees(holder's tenant)`: fleet views show other tenants only
    /// in aggregate.
    pub fn redact_holder(&mut self, sees: impl Fn(Uuid) -> bool) {
        for share in &mut self.shares {
            if !share.tenant_id.is_some_and(&sees) {
                share.workload_id = None;
            }
        }
        self.workload_id = self.shares.first().and_then(|s| s.workload_id);
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct GpuTelemetry {
    pub util: Option<f32>,
    pub memory_used_mb: Option<i64>,
    pub temperature_c: Option<f32>,
    pub power_w: Option<f32>,
    pub ecc_errors: Option<i64>,
    /// Why its clocks are held down now (heat or power): a warning, the GPU keeps its work.
    pub throttle: Vec<GpuThrottle>,
}

#[derive(sqlx::FromRow)]
struct NodeRow {
    id: Uuid,
    name: String,
    hostname: String,
    state: NodeState,
    cordon: Option<NodeState>,
    cordon_reason: Option<String>,
    cordoned_at: Option<DateTime<Utc>>,
    cordoned_by: Option<String>,
    drain_deadline: Option<DateTime<Utc>>,
    remaining: Option<i64>,
    cpu_millis: i32,
    memory_mb: i64,
    labels: serde_json::Value,
    cost_per_hour: Option<f64>,
    gpu_source: GpuSource,
    agent_version: String,
    agent_protocol: Option<String>,
    container_engine: Option<EngineKind>,
    container_engine_version: Option<String>,
    container_cdi: bool,
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
    sharing: GpuSharing,
    mig_profile: Option<String>,
    parent_index: Option<i32>,
    sharing_note: Option<String>,
    shares: sqlx::types::Json<Vec<GpuShareView>>,
    util: Option<f32>,
    memory_used_mb: Option<i64>,
    temperature_c: Option<f32>,
    power_w: Option<f32>,
    ecc_errors: Option<i64>,
    throttle: Option<String>,
    fault: Option<String>,
    faulted_at: Option<DateTime<Utc>>,
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
            sharing: r.sharing,
            mig_profile: r.mig_profile,
            parent_index: r.parent_index,
            sharing_note: r.sharing_note,
            held: !r.shares.0.is_empty(),
            // Of this device: its shares on a shared GPU, all of it for any holder of another.
            held_milli: match (r.shares.0.is_empty(), r.sharing.is_shared()) {
                (true, _) => 0,
                (false, true) => r.shares.0.iter().map(|s| s.milli).sum::<i64>().min(1000),
                (false, false) => 1000,
            },
            workload_id: r.shares.0.first().and_then(|s| s.workload_id),
            shares: r.shares.0,
            telemetry: GpuTelemetry {
                util: r.util,
                memory_used_mb: r.memory_used_mb,
                temperature_c: r.temperature_c,
                power_w: r.power_w,
                ecc_errors: r.ecc_errors,
                throttle: telemetry::throttle_of(r.throttle.as_deref()),
            },
            fault: r.fault,
            faulted_at: r.faulted_at,
        }
    }
}

const GPU_SELECT: &str = "SELECT g.id, g.node_id, n.name AS node_name, g.device_index, g.uuid, g.model, \
     g.memory_mb, g.nvlink_group, g.simulated, g.sharing, g.mig_profile, g.parent_index, g.sharing_note, \
     (SELECT COALESCE(jsonb_agg(jsonb_build_object('workload_id', gr.workload_id, 'tenant_id', gr.tenant_id, \
             'milli', gr.milli, 'memory_mb', gr.memory_mb, 'util', gr.util, 'memory_used_mb', gr.memory_used_mb) \
             ORDER BY gr.granted_at, gr.workload_id), '[]'::jsonb) FROM gpu_grants gr WHERE gr.gpu_id = g.id) AS shares, \
     g.util, g.memory_used_mb, g.temperature_c, g.power_w, g.ecc_errors, g.throttle, g.fault, g.faulted_at \
     FROM gpus g JOIN nodes n ON n.id = g.node_id \
     WHERE g.present";

const NODE_SELECT: &str = "SELECT id, name, hostname, node_shown_state(state, cordon) AS state, cordon, \
     cordon_reason, cordoned_at, cordoned_by, drain_deadline, \
     CASE WHEN cordon IS NOT NULL THEN (SELECT count(*) FROM workloads w WHERE w.node_id = nodes.id) END AS remaining, \
     cpu_millis, memory_mb, labels, cost_per_hour, \
     gpu_source, agent_version, agent_protocol, container_engine, container_engine_version, container_cdi, registered_at, \
     last_seen_at, cpu_util, memory_used_mb FROM nodes";

fn node_view(r: NodeRow, gpus: Vec<GpuView>) -> NodeView {
    let maintenance = r.cordon.zip(r.cordoned_at).map(|(mode, since)| {
        let remaining = r.remaining.unwrap_or(0);
        maintenance::Maintenance {
            mode,
            reason: r.cordon_reason,
            since,
            by: r.cordoned_by.unwrap_or_default(),
            deadline: r.drain_deadline,
            remaining,
            drained: mode == NodeState::Draining && remaining == 0,
        }
    });
    NodeView {
        id: r.id,
        name: r.name,
        hostname: r.hostname,
        state: r.state,
        maintenance,
        work: None,
        cpu_millis: r.cpu_millis,
        memory_mb: r.memory_mb,
        labels: r.labels,
        cost_per_hour: r.cost_per_hour,
        simulated: r.gpu_source == GpuSource::Simulated || gpus.iter().any(|g| g.simulated),
        gpu_source: r.gpu_source,
        agent_version: r.agent_version,
        agent_protocol: r.agent_protocol.unwrap_or_else(|| "1.0".to_owned()),
        container_engine: r.container_engine.zip(r.container_engine_version).map(|(kind, version)| ContainerEngine {
            kind,
            version,
            cdi: r.container_cdi,
        }),
        registered_at: r.registered_at,
        last_seen_at: r.last_seen_at,
        telemetry: NodeTelemetry { cpu_util: r.cpu_util, memory_used_mb: r.memory_used_mb },
        gpus,
    }
}

/// A page of a fleet list, in node-name order. Without a limit, the whole fleet (bounded by the
/// hardware, and what a heat map draws); with one, `after` the last node of the previous page
/// (keyset pagination: a page costs the same however deep it is).
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct FleetPage {
    /// Only nodes (or GPUs of nodes) whose name sorts after this one.
    pub after: Option<String>,
    /// At most this many nodes (or GPUs), 1 to 1000; all when absent.
    pub limit: Option<u32>,
}

impl FleetPage {
    fn limit(&self) -> Option<i64> {
        self.limit.map(|l| i64::from(l.clamp(1, 1000)))
    }
}

pub async fn list_nodes(db: &PgPool, page: &FleetPage) -> sqlx::Result<Vec<NodeView>> {
    let nodes: Vec<NodeRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "{NODE_SELECT} WHERE ($1::text IS NULL OR name > $1) ORDER BY name LIMIT $2"
    )))
    .bind(&page.after)
    .bind(page.limit())
    .fetch_all(db)
    .await?;
    // The GPUs of exactly these nodes, grouped by node id (not by comparing names in Rust, whose
    // order is not the database collation's).
    let ids: Vec<Uuid> = nodes.iter().map(|n| n.id).collect();
    let rows: Vec<GpuRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "{GPU_SELECT} AND g.node_id = ANY($1) ORDER BY n.name, g.device_index"
    )))
    .bind(&ids)
    .fetch_all(db)
    .await?;
    let mut by_node: std::collections::HashMap<Uuid, Vec<GpuView>> = std::collections::HashMap::new();
    for gpu in rows.into_iter().map(GpuView::from) {
        by_node.entry(gpu.node_id).or_default().push(gpu);
    }
    Ok(nodes
        .into_iter()
        .map(|n| {
            let gpus = by_node.remove(&n.id).unwrap_or_default();
            node_view(n, gpus)
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
    let mut view = node_view(node, gpus.into_iter().map(GpuView::from).collect());
    view.work = Some(maintenance::work_on(db, id).await?);
    Ok(Some(view))
}

/// A page of the GPU list, in node-name and device order: all without a limit; with one, `after`
/// the last GPU of the previous page (keyset pagination).
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct GpuPage {
    /// Only GPUs after this one (the last GPU of the previous page).
    pub after: Option<Uuid>,
    /// At most this many GPUs, 1 to 1000; all when absent.
    pub limit: Option<u32>,
}

pub async fn list_gpus(db: &PgPool, page: &GpuPage) -> sqlx::Result<Vec<GpuView>> {
    let rows: Vec<GpuRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "{GPU_SELECT} AND ($1::uuid IS NULL OR (n.name, g.device_index) > \
             (SELECT cn.name, c.device_index FROM gpus c JOIN nodes cn ON cn.id = c.node_id WHERE c.id = $1)) \
         ORDER BY n.name, g.device_index LIMIT $2"
    )))
    .bind(page.after)
    .bind(page.limit.map(|l| i64::from(l.clamp(1, 1000))))
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(GpuView::from).collect())
}

pub async fn get_gpu(db: &PgPool, id: Uuid) -> sqlx::Result<Option<GpuView>> {
    let row: Option<GpuRow> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("{GPU_SELECT} AND g.id = $1"))).bind(id).fetch_optional(db).await?;
    Ok(row.map(GpuView::from))
}

/// The fleet at a glance, a few hundred bytes whatever its size (`GET /fleet/summary`): what a
/// dashboard's headline needs without downloading every GPU.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct FleetSummary {
    pub nodes_ready: i64,
    /// Held by an operator: no new work, their work runs on.
    pub nodes_cordoned: i64,
    pub nodes_draining: i64,
    pub nodes_lost: i64,
    /// GPUs (MIG instances counted one each) on nodes that are not lost.
    pub gpus: i64,
    pub gpus_simulated: i64,
    /// GPUs any workload holds a share of.
    pub gpus_held: i64,
    /// GPUs held, counting shares as fractions.
    pub gpus_allocated: f64,
    /// Mean live utilisation of those GPUs, 0..1.
    pub gpu_util: f64,
    /// What the live nodes cost an hour, USD.
    pub cost_per_hour: f64,
    /// What their GPUs nobody holds cost an hour, USD (each node's cost shared by its GPUs).
    pub unallocated_cost_per_hour: f64,
    /// Workloads by state.
    pub workloads: std::collections::BTreeMap<String, i64>,
    /// The commonest reasons pending work waits, most first (at most ten).
    pub pending_by_reason: Vec<ReasonCount>,
}

#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct ReasonCount {
    pub reason: String,
    pub count: i64,
}

/// The fleet summary; workload counts and pending reasons only of `tenant` when given.
pub async fn summary(db: &PgPool, tenant: Option<Uuid>) -> sqlx::Result<FleetSummary> {
    let (ready, cordoned, draining, lost): (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE s = 'ready'), count(*) FILTER (WHERE s = 'cordoned'), \
                count(*) FILTER (WHERE s = 'draining'), count(*) FILTER (WHERE s = 'lost') \
         FROM (SELECT node_shown_state(state, cordon) AS s FROM nodes) n",
    )
    .fetch_one(db)
    .await?;
    let (gpus, simulated, held, allocated, util, unallocated_cost): (i64, i64, i64, f64, f64, f64) = sqlx::query_as(
        "WITH g AS (SELECT g.*, n.cost_per_hour / GREATEST(count(*) OVER (PARTITION BY g.node_id), 1) AS gpu_cost, \
                          (SELECT sum(milli) FROM gpu_grants gr WHERE gr.gpu_id = g.id) AS held_milli \
                    FROM gpus g JOIN nodes n ON n.id = g.node_id WHERE g.present AND n.state <> 'lost') \
         SELECT count(*), count(*) FILTER (WHERE simulated), count(held_milli), \
                COALESCE(sum(LEAST(held_milli, 1000)) FILTER (WHERE held_milli IS NOT NULL), 0)::float8 / 1000.0, COALESCE(avg(util), 0)::float8, \
                COALESCE(sum(gpu_cost) FILTER (WHERE held_milli IS NULL), 0)::float8 FROM g",
    )
    .fetch_one(db)
    .await?;
    let (cost,): (f64,) =
        sqlx::query_as("SELECT COALESCE(sum(cost_per_hour), 0)::float8 FROM nodes WHERE state <> 'lost'")
            .fetch_one(db)
            .await?;
    let workloads: Vec<(String, i64)> = sqlx::query_as(
        "SELECT state, count(*) FROM workloads WHERE $1::uuid IS NULL OR tenant_id = $1 GROUP BY state ORDER BY state",
    )
    .bind(tenant)
    .fetch_all(db)
    .await?;
    let pending_by_reason = sqlx::query_as(
        "SELECT COALESCE(pending_reason, 'waiting for the next scheduling cycle') AS reason, count(*) AS count \
         FROM workloads WHERE state = 'pending' AND ($1::uuid IS NULL OR tenant_id = $1) \
         GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 10",
    )
    .bind(tenant)
    .fetch_all(db)
    .await?;
    Ok(FleetSummary {
        nodes_ready: ready,
        nodes_cordoned: cordoned,
        nodes_draining: draining,
        nodes_lost: lost,
        gpus,
        gpus_simulated: simulated,
        gpus_held: held,
        gpus_allocated: allocated,
        gpu_util: util,
        cost_per_hour: cost,
        unallocated_cost_per_hour: unallocated_cost,
        workloads: workloads.into_iter().collect(),
        pending_by_reason,
    })
}

/// One GPU's telemetry over time (`GET /gpus/{id}/history`), for the dashboard's GPU page.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct GpuHistory {
    pub gpu_id: Uuid,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// Width of each point's bucket, seconds.
    pub step_s: u32,
    /// One point per bucket that holds a sample, in time order (gaps: no telemetry then).
    pub points: Vec<GpuHistoryPoint>,
}

/// A bucket of samples: mean utilisation, temperature and power, the most memory used.
#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct GpuHistoryPoint {
    /// Start of the bucket.
    pub at: DateTime<Utc>,
    /// Mean utilisation, 0..1.
    pub util: Option<f64>,
    pub memory_used_mb: Option<i64>,
    pub temperature_c: Option<f64>,
    pub power_w: Option<f64>,
    /// Samples in the bucket.
    pub samples: i64,
}

/// The most points one history answer has.
pub const MAX_HISTORY_POINTS: i64 = 1000;

/// An hour by default, in 300 points (at least 2 s, the agents' telemetry period); steps of a
/// second at least.
pub const HISTORY_RULES: RangeRules = RangeRules {
    default_span: chrono::TimeDelta::hours(1),
    default_step: |seconds| u32::try_from((seconds / 300).max(2)).unwrap_or(u32::MAX),
    min_step_s: 1,
    max_steps: MAX_HISTORY_POINTS,
};

/// A GPU's telemetry in `range`, bucketed by its step; `None` when there is no such GPU. Kept as
/// long as `--telemetry-retention-hours`.
pub async fn gpu_history(db: &PgPool, id: Uuid, range: TimeRange) -> sqlx::Result<Option<GpuHistory>> {
    let exists: Option<(Uuid,)> =
        sqlx::query_as("SELECT id FROM gpus WHERE id = $1").bind(id).fetch_optional(db).await?;
    if exists.is_none() {
        return Ok(None);
    }
    let points: Vec<GpuHistoryPoint> = sqlx::query_as(
        "SELECT to_timestamp(floor(extract(epoch FROM at) / $4) * $4) AS at,
                avg(util)::float8 AS util, max(memory_used_mb) AS memory_used_mb,
                avg(temperature_c)::float8 AS temperature_c, avg(power_w)::float8 AS power_w,
                count(*) AS samples
           FROM gpu_telemetry
          WHERE gpu_id = $1 AND at >= $2 AND at < $3
          GROUP BY 1 ORDER BY 1",
    )
    .bind(id)
    .bind(range.from)
    .bind(range.to)
    .bind(f64::from(range.step_s))
    .fetch_all(db)
    .await?;
    Ok(Some(GpuHistory { gpu_id: id, from: range.from, to: range.to, step_s: range.step_s, points }))
}

#[cfg(test)]
mod history_tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn a_history_range_has_defaults_and_refuses_what_it_cannot_answer() {
        let now = Utc.with_ymd_and_hms(2026, 12, 3, 12, 0, 0).unwrap();
        let r = TimeRange::parse(None, None, None, HISTORY_RULES, now).unwrap();
        assert_eq!((r.to - r.from).num_seconds(), 3600);
        assert_eq!(r.step_s, 12, "an hour in 300 points");
        assert_eq!(
            TimeRange::parse(None, None, Some(1), HISTORY_RULES, now).unwrap_err(),
            "the range holds 3600 steps of 1 s; at most 1000: widen step_s"
        );
        assert!(TimeRange::parse(Some(now), None, None, HISTORY_RULES, now).is_err(), "an empty range");
        assert!(TimeRange::parse(None, None, Some(0), HISTORY_RULES, now).is_err());
        let later = now + chrono::TimeDelta::days(1);
        assert_eq!(TimeRange::parse(None, Some(later), None, HISTORY_RULES, now).unwrap().to, now, "the future is now");
        assert_eq!(
            TimeRange::parse(Some(now - chrono::TimeDelta::minutes(5)), None, None, HISTORY_RULES, now).unwrap().step_s,
            2
        );
    }
}
