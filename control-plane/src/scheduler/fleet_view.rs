//! The control plane's side of the scheduling core's fleet model: the fleet and the queue read
//! from PostgreSQL, in one repeatable-read transaction so they agree. The model itself is
//! `airtime_scheduler::fleet`.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

pub use airtime_scheduler::fleet::*;

use crate::model::{NodeState, WorkloadClass, WorkloadState};

/// Reads the fleet and the queue in one repeatable-read transaction so they agree.
pub async fn load(conn: &mut PgConnection) -> sqlx::Result<FleetView> {
    load_with(conn, None).await
}

/// [`load`], reading of the active workloads only the rows that changed since `cache` last saw
/// them (the scheduling loop keeps one: see [`WorkloadCache`]).
pub async fn load_with(conn: &mut PgConnection, cache: Option<&mut WorkloadCache>) -> sqlx::Result<FleetView> {
    sqlx::query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY").execute(&mut *conn).await?;
    let result = load_inner(conn, cache).await;
    // A read-only transaction: ending it cannot lose anything.
    sqlx::query("COMMIT").execute(&mut *conn).await?;
    result
}

/// The active workloads' rows as the last read saw them, each with the `xmin` of its row version:
/// a row's `xmin` changes with every update, so a read compares the versions (one narrow scan)
/// and fetches in full only the rows that are new or changed. Why: the queue is the largest part
/// of the fleet read (15,000 rows, 30 of 68 ms at 1,000 × 8 GPUs) and between two cycles few of
/// its rows change. A cache older than [`WorkloadCache::MAX_AGE`] is dropped and read afresh (a
/// replica that stood by for long, a loop that stalled): `xmin` is a 32-bit counter, and only a
/// cache that is compared often can trust that an equal `xmin` is the same row version.
#[derive(Default)]
pub struct WorkloadCache {
    rows: HashMap<Uuid, (i64, WorkloadRow)>,
    read_at: Option<std::time::Instant>,
    fetched: usize,
}

impl WorkloadCache {
    pub const MAX_AGE: std::time::Duration = std::time::Duration::from_secs(60);

    /// How many active workloads it holds.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// How many rows the last read fetched in full (new or changed since the read before).
    pub fn fetched(&self) -> usize {
        self.fetched
    }

    /// The row version (`xmin`) of workload `id` the last read saw.
    pub fn seen(&self, id: Uuid) -> Option<i64> {
        self.rows.get(&id).map(|(xmin, _)| *xmin)
    }

    /// Takes in rows the cycle itself rewrote and committed, so the next read need not fetch them
    /// again (after a mass placement, most of the queue's reasons: 10,000 rows, 30 ms of the next
    /// cycle's read). A rewrite is taken only onto the version it replaced (`seen`): the cached row
    /// plus the rewritten columns is then exactly the new version. The caller vouches that no
    /// other statement of that transaction touched these rows — a second update in one transaction
    /// keeps the same `xmin`, and the cache would not see it.
    pub fn rewritten(&mut self, rewrites: Vec<Rewrite>) {
        for rewrite in rewrites {
            let Some((xmin, row)) = self.rows.get_mut(&rewrite.id) else { continue };
            if *xmin != rewrite.seen {
                continue;
            }
            *xmin = rewrite.xmin;
            if let Some(reason) = rewrite.reason {
                row.pending_reason = Some(reason);
            }
            if let Some(shortfall) = rewrite.shortfall {
                row.shortfall = shortfall;
            }
        }
    }
}

/// A waiting workload's row as a cycle rewrote it ([`WorkloadCache::rewritten`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewrite {
    pub id: Uuid,
    /// The version the rewrite replaced.
    pub seen: i64,
    /// The new version.
    pub xmin: i64,
    /// The new pending reason, if it was written.
    pub reason: Option<String>,
    /// The new shortfall, if it was written.
    pub shortfall: Option<Option<String>>,
}

/// The active workloads' columns, but for their preemptions in the last hour.
const WORKLOAD_COLUMNS: &str = "id, tenant_id, name, class, state, priority, gpu_count, gpu_memory_mb, gpu_models, \
     cpu_millis, memory_mb, cpu_capable, preemptible, checkpointable, expected_duration_s, submitted_at, started_at, \
     node_id, pending_reason, shortfall, gpu_milli, mig_profile, service_id, replica_variant, container IS NOT NULL AS container";
const ACTIVE: &str = "state IN ('pending', 'scheduled', 'running', 'preempting', 'cancelling')";

/// The active workloads, every row read.
async fn read_workloads(conn: &mut PgConnection) -> sqlx::Result<Vec<WorkloadRow>> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {WORKLOAD_COLUMNS}, \
                CASE WHEN state = 'pending' THEN 0 ELSE COALESCE(p.preemptions, 0) END AS preemptions_last_hour \
         FROM workloads \
         LEFT JOIN (SELECT e.workload_id, count(*) AS preemptions FROM workload_events e \
                    WHERE e.to_state = 'preempting' AND e.at > now() - interval '1 hour' \
                    GROUP BY e.workload_id) p ON p.workload_id = workloads.id \
         WHERE {ACTIVE}"
    )))
    .fetch_all(&mut *conn)
    .await
}

/// The active workloads, reading in full only the rows `cache` has not seen in this version; the
/// cache is left holding exactly the active rows of this read.
async fn read_workloads_cached(conn: &mut PgConnection, cache: &mut WorkloadCache) -> sqlx::Result<Vec<WorkloadRow>> {
    if cache.read_at.is_none_or(|at| at.elapsed() > WorkloadCache::MAX_AGE) {
        cache.rows.clear();
    }
    let versions: Vec<(Uuid, i64)> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT id, xmin::text::bigint FROM workloads WHERE {ACTIVE}")))
            .fetch_all(&mut *conn)
            .await?;
    let stale: Vec<Uuid> = versions
        .iter()
        .filter(|(id, xmin)| cache.rows.get(id).is_none_or(|(seen, _)| seen != xmin))
        .map(|(id, _)| *id)
        .collect();
    cache.fetched = stale.len();
    let mut fresh: HashMap<Uuid, WorkloadRow> = HashMap::with_capacity(stale.len());
    if !stale.is_empty() {
        // The same snapshot as the versions above: these rows are the versions just listed.
        let rows: Vec<WorkloadRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {WORKLOAD_COLUMNS}, 0::bigint AS preemptions_last_hour FROM workloads WHERE id = ANY($1)"
        )))
        .bind(&stale)
        .fetch_all(&mut *conn)
        .await?;
        fresh.extend(rows.into_iter().map(|r| (r.id, r)));
    }
    // Preemptions in the last hour change with the clock, not with the row: counted every time.
    let preemptions: HashMap<Uuid, i64> = sqlx::query_as(
        "SELECT workload_id, count(*) FROM workload_events \
         WHERE to_state = 'preempting' AND at > now() - interval '1 hour' GROUP BY workload_id",
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .collect();

    let mut previous = std::mem::take(&mut cache.rows);
    let mut rows = Vec::with_capacity(versions.len());
    for (id, xmin) in versions {
        let Some(mut row) = fresh.remove(&id).or_else(|| previous.remove(&id).map(|(_, row)| row)) else {
            continue;
        };
        row.preemptions_last_hour =
            if row.state == WorkloadState::Pending { 0 } else { preemptions.get(&id).copied().unwrap_or(0) };
        cache.rows.insert(id, (xmin, row.clone()));
        rows.push(row);
    }
    cache.read_at = Some(std::time::Instant::now());
    Ok(rows)
}

async fn load_inner(conn: &mut PgConnection, cache: Option<&mut WorkloadCache>) -> sqlx::Result<FleetView> {
    let (now,): (DateTime<Utc>,) = sqlx::query_as("SELECT now()").fetch_one(&mut *conn).await?;
    let settings = crate::settings::load(&mut *conn).await?;

    let tenant_rows: Vec<TenantRow> = sqlx::query_as(
        "SELECT t.id, t.name, t.guaranteed_gpus, t.weight, t.tier, t.may_borrow, \
                COALESCE(h.milli, 0)::bigint, COALESCE(u.decayed_gpu_hours, 0) \
         FROM tenants t \
         LEFT JOIN (SELECT tenant_id, sum(milli) AS milli FROM gpu_grants GROUP BY tenant_id) h ON h.tenant_id = t.id \
         LEFT JOIN tenant_usage u ON u.tenant_id = t.id \
         ORDER BY t.name",
    )
    .fetch_all(&mut *conn)
    .await?;
    let tenants: Vec<TenantEntry> = tenant_rows
        .into_iter()
        .map(|TenantRow(id, name, guaranteed, weight, tier, may_borrow, running, usage)| TenantEntry {
            id,
            name,
            guaranteed_gpus: guaranteed.max(0) as u32,
            weight: weight.max(1) as u32,
            tier,
            may_borrow,
            running_gpu_milli: u32::try_from(running.max(0)).unwrap_or(u32::MAX),
            decayed_gpu_hours: usage.max(0.0),
        })
        .collect();
    let tenant_index: HashMap<Uuid, usize> = tenants.iter().enumerate().map(|(i, t)| (t.id, i)).collect();
    let services = crate::services::scale::read(&mut *conn, &tenant_index).await?;
    let service_index: HashMap<Uuid, usize> = services.iter().enumerate().map(|(i, s)| (s.id, i)).collect();

    // Lost nodes take no work; draining ones are shown so policies can see what runs there.
    let node_rows: Vec<NodeRow> = sqlx::query_as(
        "WITH used AS (SELECT node_id, sum(cpu_millis) AS cpu, sum(memory_mb) AS mem FROM workloads \
                       WHERE node_id IS NOT NULL GROUP BY node_id) \
         SELECT n.id, n.name, n.state, n.cpu_millis, n.memory_mb, n.cost_per_hour, n.cpu_util, \
                n.gpu_source = 'simulated', COALESCE(u.cpu, 0)::bigint, COALESCE(u.mem, 0)::bigint, \
                n.container_engine IS NOT NULL \
         FROM nodes n LEFT JOIN used u ON u.node_id = n.id WHERE n.state <> 'lost' ORDER BY n.name",
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut nodes: Vec<NodeEntry> = node_rows
        .into_iter()
        .map(|NodeRow(id, name, state, cpu, mem, cost, util, simulated, cpu_used, mem_used, containers)| {
            let cpu_millis = cpu.max(0) as u32;
            let memory_mb = mem.max(0) as u64;
            NodeEntry {
                id,
                name,
                state,
                cpu_millis,
                memory_mb,
                cpu_millis_free: cpu_millis.saturating_sub(cpu_used.max(0) as u32),
                memory_mb_free: memory_mb.saturating_sub(mem_used.max(0) as u64),
                cost_per_hour: cost.unwrap_or(0.0),
                cpu_util: util.unwrap_or(0.0),
                simulated,
                containers,
                gpu_first: 0,
                gpu_count: 0,
            }
        })
        .collect();
    let node_index: HashMap<Uuid, usize> = nodes.iter().enumerate().map(|(i, n)| (n.id, i)).collect();

    let workload_rows = match cache {
        Some(cache) => read_workloads_cached(conn, cache).await?,
        None => read_workloads(conn).await?,
    };
    let mut workload_rows = workload_rows;
    // Queue order (submission time, then id: a uuid compares by its bytes here as in PostgreSQL),
    // sorted here: in SQL the sort of 15,000 rows with their reasons spilled to disk.
    workload_rows.sort_unstable_by_key(|w| (w.submitted_at, w.id));
    let workloads: Vec<WorkloadEntry> = workload_rows
        .into_iter()
        .filter_map(|r| {
            let tenant = *tenant_index.get(&r.tenant_id)?;
            Some(WorkloadEntry {
                id: r.id,
                id_text: r.id.to_string(),
                name: r.name,
                tenant,
                class: r.class,
                state: r.state,
                priority: r.priority,
                gpu_count: r.gpu_count.max(0) as u32,
                gpu_memory_mb: r.gpu_memory_mb.max(0) as u64,
                gpu_models: r.gpu_models.join(","),
                cpu_millis: r.cpu_millis.max(0) as u32,
                memory_mb: r.memory_mb.max(0) as u64,
                cpu_capable: r.cpu_capable,
                preemptible: r.preemptible,
                checkpointable: r.checkpointable,
                expected_duration_s: r.expected_duration_s.unwrap_or(0).max(0) as u32,
                submitted_at: r.submitted_at,
                started_at: r.started_at,
                node: r.node_id.and_then(|n| node_index.get(&n).copied()),
                pending_reason: r.pending_reason,
                shortfall: r.shortfall,
                preemptions_last_hour: r.preemptions_last_hour.max(0) as u32,
                gpu_milli: r.gpu_milli.clamp(1, WHOLE_GPU_MILLI as i32) as u32,
                mig_profile: r.mig_profile.unwrap_or_default(),
                replica_of: r.service_id.and_then(|id| {
                    Some(ReplicaOf {
                        service: *service_index.get(&id)?,
                        variant: r.replica_variant.unwrap_or(ReplicaVariant::Gpu),
                    })
                }),
                container: r.container,
            })
        })
        .collect();
    let workload_index: HashMap<Uuid, usize> = workloads.iter().enumerate().map(|(i, w)| (w.id, i)).collect();

    // The GPUs of the nodes read above, and every grant, in two plain reads joined here: a lateral
    // aggregate per GPU cost 39 ms at 8,000 GPUs, the two reads a few.
    let gpu_rows: Vec<GpuRow> = sqlx::query_as(
        "SELECT g.id, g.node_id, g.device_index, g.model, g.memory_mb, g.memory_used_mb, g.util, \
                g.nvlink_group, g.simulated, g.sharing, g.mig_profile \
         FROM gpus g JOIN nodes n ON n.id = g.node_id WHERE g.present AND n.state <> 'lost'",
    )
    .fetch_all(&mut *conn)
    .await?;
    let grant_rows: Vec<GrantRow> = sqlx::query_as(
        "SELECT gpu_id, workload_id, milli, memory_mb FROM gpu_grants ORDER BY gpu_id, granted_at, workload_id",
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut grants: HashMap<Uuid, Vec<Holder>> = HashMap::with_capacity(grant_rows.len());
    for GrantRow(gpu, workload, milli, memory) in grant_rows {
        // A grant held by a workload we did not load (should not happen) still blocks its share.
        grants.entry(gpu).or_default().push(Holder {
            workload: workload_index.get(&workload).copied().unwrap_or(usize::MAX),
            milli: milli.clamp(1, WHOLE_GPU_MILLI as i32) as u32,
            memory_mb: memory.max(0) as u64,
        });
    }
    let mut gpus = Vec::with_capacity(gpu_rows.len());
    for row in gpu_rows {
        let Some(&node) = node_index.get(&row.node_id) else {
            continue;
        };
        gpus.push(GpuEntry {
            id: row.id,
            node,
            device_index: row.device_index.max(0) as u32,
            model: row.model,
            memory_mb: row.memory_mb.max(0) as u64,
            memory_used_mb: row.memory_used_mb.unwrap_or(0).max(0) as u64,
            util: row.util.unwrap_or(0.0),
            nvlink_group: row.nvlink_group.map(|g| g.max(0) as u32),
            holders: grants.remove(&row.id).unwrap_or_default(),
            simulated: row.simulated,
            sharing: row.sharing,
            mig_profile: row.mig_profile.unwrap_or_default(),
        });
    }
    // In the nodes' order (by name, as the database collates it), then by device index.
    gpus.sort_unstable_by_key(|g| (g.node, g.device_index, g.id));
    // GPUs are sorted by node name, as nodes are, so each node's GPUs are one contiguous run.
    for (i, gpu) in gpus.iter().enumerate() {
        let node = &mut nodes[gpu.node];
        if node.gpu_count == 0 {
            node.gpu_first = i;
        }
        node.gpu_count += 1;
    }
    Ok(FleetView { now, settings, tenants, nodes, gpus, workloads, services })
}

#[derive(sqlx::FromRow)]
struct TenantRow(Uuid, String, i32, i32, i32, bool, i64, f64);

#[derive(sqlx::FromRow)]
struct NodeRow(Uuid, String, NodeState, i32, i64, Option<f64>, Option<f32>, bool, i64, i64, bool);

#[derive(sqlx::FromRow)]
struct GpuRow {
    id: Uuid,
    node_id: Uuid,
    device_index: i32,
    model: String,
    memory_mb: i64,
    memory_used_mb: Option<i64>,
    util: Option<f32>,
    nvlink_group: Option<i32>,
    simulated: bool,
    sharing: GpuSharing,
    mig_profile: Option<String>,
}

#[derive(sqlx::FromRow)]
struct GrantRow(Uuid, Uuid, i32, i64);

#[derive(sqlx::FromRow, Clone)]
struct WorkloadRow {
    id: Uuid,
    tenant_id: Uuid,
    name: String,
    class: WorkloadClass,
    state: WorkloadState,
    priority: i32,
    gpu_count: i32,
    gpu_memory_mb: i64,
    gpu_models: Vec<String>,
    cpu_millis: i32,
    memory_mb: i64,
    cpu_capable: bool,
    preemptible: bool,
    checkpointable: bool,
    expected_duration_s: Option<i32>,
    submitted_at: DateTime<Utc>,
    started_at: Option<DateTime<Utc>>,
    node_id: Option<Uuid>,
    pending_reason: Option<String>,
    shortfall: Option<String>,
    preemptions_last_hour: i64,
    gpu_milli: i32,
    mig_profile: Option<String>,
    service_id: Option<Uuid>,
    replica_variant: Option<ReplicaVariant>,
    container: bool,
}
