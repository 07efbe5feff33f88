//! The control plane's side of the scheduling core's fleet model: the fleet and the queue read
//! from PostgreSQL, in one repeatable-read transaction so they agree. The model itself is
//! `airtime_scheduler::fleet`.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use rustc_hash::FxHashMap;
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
    rows: FxHashMap<Uuid, Cached>,
    read_at: Option<std::time::Instant>,
    fetched: usize,
    /// Which read this is: a row the latest read did not list has left the queue.
    read: u64,
    /// Token-priced services' learned capacities and the fleet's prices (read every half minute).
    learned: crate::services::serving::Learned,
    /// The week's arrivals and when they were read (again after [`Self::ARRIVALS_MAX_AGE`]):
    /// [`read_arrivals`].
    arrivals: Option<(std::time::Instant, Arc<Vec<ArrivalEntry>>)>,
}

/// A cached row: its version, the read that last listed it, the row.
struct Cached {
    xmin: i64,
    read: u64,
    row: WorkloadRow,
}

impl WorkloadCache {
    pub const MAX_AGE: std::time::Duration = std::time::Duration::from_secs(60);
    /// How long the arrivals count is reused: a week's mix barely moves in five minutes, and the
    /// count scans a week of submissions.
    pub const ARRIVALS_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(300);

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
        self.rows.get(&id).map(|c| c.xmin)
    }

    /// Takes in rows the cycle itself rewrote and committed, so the next read need not fetch them
    /// again (after a mass placement, most of the queue's reasons: 10,000 rows, 30 ms of the next
    /// cycle's read; and the rows it placed or preempted). A rewrite is taken only onto the
    /// version it replaced (`seen`): the cached row plus the rewritten columns is then exactly the
    /// new version. The caller vouches that no other statement of that transaction touched these
    /// rows — a second update in one transaction keeps the same `xmin`, and the cache would not
    /// see it.
    pub fn rewritten(&mut self, rewrites: Vec<Rewrite>) {
        for rewrite in rewrites {
            let Some(cached) = self.rows.get_mut(&rewrite.id) else { continue };
            if cached.xmin != rewrite.seen {
                continue;
            }
            cached.xmin = rewrite.xmin;
            if let Some(reason) = rewrite.reason {
                cached.row.pending_reason = Some(reason);
            }
            if let Some(shortfall) = rewrite.shortfall {
                cached.row.shortfall = shortfall;
            }
            match rewrite.moved {
                Some(Moved::Placed { node }) => {
                    cached.row.state = WorkloadState::Scheduled;
                    cached.row.node_id = Some(node);
                    cached.row.pending_reason = None;
                }
                Some(Moved::Preempting) => cached.row.state = WorkloadState::Preempting,
                None => {}
            }
        }
    }
}

/// A workload's row as a cycle rewrote it ([`WorkloadCache::rewritten`]): a waiting one's reason
/// or shortfall, or one the cycle placed or preempted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewrite {
    pub id: Uuid,
    /// The version the rewrite replaced.
    pub seen: i64,
    /// The new version.
    pub xmin: i64,
    /// The new pending reason, if it was written.
    pub reason: Option<Arc<str>>,
    /// The new shortfall, if it was written.
    pub shortfall: Option<Option<Arc<str>>>,
    /// Where the cycle moved it, if it did.
    pub moved: Option<Moved>,
}

/// What a cycle's placement or preemption changed of a workload's row, of the columns the fleet
/// read holds (its `attempt` and `updated_at` change too; the read holds neither).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    /// Placed on this node: `scheduled`, its pending reason cleared.
    Placed { node: Uuid },
    /// Preempted: `preempting`.
    Preempting,
}

/// The active workloads' columns, but for their preemptions in the last hour.
const WORKLOAD_COLUMNS: &str = "id, tenant_id, name, class, state, priority, gpu_count, gpu_memory_mb, gpu_models, \
     cpu_millis, memory_mb, cpu_capable, preemptible, checkpointable, expected_duration_s, submitted_at, started_at, \
     node_id, pending_reason, shortfall, gpu_milli, mig_profile, service_id, replica_variant, container IS NOT NULL AS container, \
     gang_id, gang_rank, gang_size, \
     (service_id IS NULL OR COALESCE(ready_attempt = attempt, false) \
      OR NOT EXISTS (SELECT 1 FROM services s WHERE s.id = workloads.service_id AND s.serving IS NOT NULL)) AS replica_ready";
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
        .filter(|(id, xmin)| cache.rows.get(id).is_none_or(|c| c.xmin != *xmin))
        .map(|(id, _)| *id)
        .collect();
    cache.fetched = stale.len();
    let mut fresh: FxHashMap<Uuid, WorkloadRow> = FxHashMap::default();
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
    let preemptions: FxHashMap<Uuid, i64> = sqlx::query_as(
        "SELECT workload_id, count(*) FROM workload_events \
         WHERE to_state = 'preempting' AND at > now() - interval '1 hour' GROUP BY workload_id",
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .collect();

    cache.read += 1;
    let read = cache.read;
    let mut rows = Vec::with_capacity(versions.len());
    for (id, xmin) in versions {
        let mut row = match fresh.remove(&id) {
            Some(mut row) => {
                row.id_text = Some(id.to_string().into());
                cache.rows.insert(id, Cached { xmin, read, row: row.clone() });
                row
            }
            None => match cache.rows.get_mut(&id) {
                Some(cached) => {
                    cached.read = read;
                    cached.row.clone()
                }
                None => continue,
            },
        };
        row.preemptions_last_hour =
            if row.state == WorkloadState::Pending { 0 } else { preemptions.get(&id).copied().unwrap_or(0) };
        rows.push(row);
    }
    // Rows the read did not list have left the queue.
    cache.rows.retain(|_, c| c.read == read);
    cache.read_at = Some(std::time::Instant::now());
    Ok(rows)
}

async fn load_inner(conn: &mut PgConnection, mut cache: Option<&mut WorkloadCache>) -> sqlx::Result<FleetView> {
    let (now,): (DateTime<Utc>,) = sqlx::query_as("SELECT now()").fetch_one(&mut *conn).await?;
    let settings = crate::settings::load(&mut *conn).await?;

    let tenant_rows: Vec<TenantRow> = sqlx::query_as(
        "SELECT t.id, t.name, t.guaranteed_gpus, t.weight, t.tier, t.may_borrow, t.gpu_limit, \
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
        .map(|TenantRow(id, name, guaranteed, weight, tier, may_borrow, limit, running, usage)| TenantEntry {
            id,
            name,
            guaranteed_gpus: guaranteed.max(0) as u32,
            weight: weight.max(1) as u32,
            tier,
            may_borrow,
            gpu_limit: limit.and_then(|l| u32::try_from(l).ok()),
            running_gpu_milli: u32::try_from(running.max(0)).unwrap_or(u32::MAX),
            decayed_gpu_hours: usage.max(0.0),
        })
        .collect();
    let tenant_index: HashMap<Uuid, usize> = tenants.iter().enumerate().map(|(i, t)| (t.id, i)).collect();
    let services = super::scale::read(&mut *conn, &tenant_index, cache.as_mut().map(|c| &mut c.learned)).await?;
    let service_index: HashMap<Uuid, usize> = services.iter().enumerate().map(|(i, s)| (s.id, i)).collect();

    // Lost nodes take no work; cordoned and draining ones (an operator's hold, which the host's
    // check refuses placements on) are shown so policies can see what runs there.
    // Their free CPU and memory are worked out below from the workloads read: a workload holds a
    // node exactly while it is active (a table constraint), and the active ones are all read.
    let node_rows: Vec<NodeRow> = sqlx::query_as(
        "SELECT n.id, n.name, node_shown_state(n.state, n.cordon), n.cpu_millis, n.memory_mb, n.cost_per_hour, n.cpu_util, \
                n.gpu_source = 'simulated', n.container_engine IS NOT NULL \
         FROM nodes n WHERE n.state <> 'lost' ORDER BY n.name",
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut nodes: Vec<NodeEntry> = node_rows
        .into_iter()
        .map(|NodeRow(id, name, state, cpu, mem, cost, util, simulated, containers)| {
            let cpu_millis = cpu.max(0) as u32;
            let memory_mb = mem.max(0) as u64;
            NodeEntry {
                id,
                name: name.into(),
                state,
                cpu_millis,
                memory_mb,
                cpu_millis_free: cpu_millis,
                memory_mb_free: memory_mb,
                cost_per_hour: cost.unwrap_or(0.0),
                cpu_util: util.unwrap_or(0.0),
                simulated,
                containers,
                gpu_first: 0,
                gpu_count: 0,
            }
        })
        .collect();
    let node_index: FxHashMap<Uuid, usize> = nodes.iter().enumerate().map(|(i, n)| (n.id, i)).collect();

    let (workload_rows, cache_arrivals) = match cache {
        Some(cache) => (read_workloads_cached(conn, &mut *cache).await?, Some(&mut cache.arrivals)),
        None => (read_workloads(conn).await?, None),
    };
    // Queue order (submission time, then id: a uuid compares by its bytes here as in PostgreSQL),
    // sorted here: in SQL the sort of 15,000 rows with their reasons spilled to disk. The keys are
    // sorted, not the rows (each a few hundred bytes to move).
    let mut order: Vec<(DateTime<Utc>, Uuid, usize)> =
        workload_rows.iter().enumerate().map(|(i, w)| (w.submitted_at, w.id, i)).collect();
    order.sort_unstable();
    let mut slots: Vec<Option<WorkloadRow>> = workload_rows.into_iter().map(Some).collect();
    let workloads: Vec<WorkloadEntry> = order
        .into_iter()
        .filter_map(|(_, _, i)| slots[i].take())
        .filter_map(|r| {
            let tenant = *tenant_index.get(&r.tenant_id)?;
            Some(WorkloadEntry {
                id: r.id,
                id_text: r.id_text.unwrap_or_else(|| r.id.to_string().into()),
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
                        ready: r.replica_ready,
                    })
                }),
                container: r.container,
                gang: r.gang_id.map(|g| airtime_scheduler::fleet::GangOf {
                    id: g.to_string().into(),
                    rank: r.gang_rank.unwrap_or(0).max(0) as u32,
                    size: r.gang_size.unwrap_or(1).max(1) as u32,
                }),
            })
        })
        .collect();
    // What the work on each node holds of its CPU and memory (a lost node's work holds nothing here).
    let mut used: Vec<(u64, u64)> = vec![(0, 0); nodes.len()];
    for w in &workloads {
        if let Some(node) = w.node {
            used[node].0 += u64::from(w.cpu_millis);
            used[node].1 += w.memory_mb;
        }
    }
    for (node, (cpu, mem)) in nodes.iter_mut().zip(used) {
        node.cpu_millis_free = node.cpu_millis.saturating_sub(u32::try_from(cpu).unwrap_or(u32::MAX));
        node.memory_mb_free = node.memory_mb.saturating_sub(mem);
    }
    let workload_index: FxHashMap<Uuid, usize> = workloads.iter().enumerate().map(|(i, w)| (w.id, i)).collect();

    // The GPUs of the nodes read above, and every grant, in two plain reads joined here: a lateral
    // aggregate per GPU cost 39 ms at 8,000 GPUs, the two reads a few.
    let gpu_rows: Vec<GpuRow> = sqlx::query_as(
        "SELECT g.id, g.node_id, g.device_index, g.model, g.memory_mb, g.memory_used_mb, g.util, \
                g.nvlink_group, g.simulated, g.sharing, g.mig_profile \
         FROM gpus g JOIN nodes n ON n.id = g.node_id WHERE g.present AND g.fault IS NULL AND n.state <> 'lost'",
    )
    .fetch_all(&mut *conn)
    .await?;
    let grant_rows: Vec<GrantRow> = sqlx::query_as(
        "SELECT gpu_id, workload_id, milli, memory_mb FROM gpu_grants ORDER BY gpu_id, granted_at, workload_id",
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut grants: FxHashMap<Uuid, Vec<Holder>> =
        FxHashMap::with_capacity_and_hasher(grant_rows.len(), Default::default());
    for GrantRow(gpu, workload, milli, memory) in grant_rows {
        // A grant held by a workload we did not load (should not happen) still blocks its share.
        grants.entry(gpu).or_default().push(Holder {
            workload: workload_index.get(&workload).copied().unwrap_or(usize::MAX),
            milli: milli.clamp(1, WHOLE_GPU_MILLI as i32) as u32,
            memory_mb: memory.max(0) as u64,
        });
    }
    let mut gpus = Vec::with_capacity(gpu_rows.len());
    // A fleet has a few models: each made shared once, not once per GPU.
    let mut models: FxHashMap<String, Arc<str>> = FxHashMap::default();
    for GpuRow(
        id,
        node_id,
        device_index,
        model,
        memory_mb,
        memory_used_mb,
        util,
        nvlink_group,
        simulated,
        sharing,
        mig,
    ) in gpu_rows
    {
        let Some(&node) = node_index.get(&node_id) else {
            continue;
        };
        let model = models.entry(model).or_insert_with_key(|m| Arc::from(m.as_str())).clone();
        gpus.push(GpuEntry {
            id,
            node,
            device_index: device_index.max(0) as u32,
            model,
            memory_mb: memory_mb.max(0) as u64,
            memory_used_mb: memory_used_mb.unwrap_or(0).max(0) as u64,
            util: util.unwrap_or(0.0),
            nvlink_group: nvlink_group.map(|g| g.max(0) as u32),
            holders: grants.remove(&id).unwrap_or_default(),
            simulated,
            sharing,
            mig_profile: mig.unwrap_or_default(),
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
    let arrivals = match cache_arrivals {
        Some(Some((at, arrivals))) if at.elapsed() <= WorkloadCache::ARRIVALS_MAX_AGE => Arc::clone(arrivals),
        stale => {
            let arrivals = Arc::new(read_arrivals(&mut *conn).await?);
            if let Some(slot) = stale {
                *slot = Some((std::time::Instant::now(), Arc::clone(&arrivals)));
            }
            arrivals
        }
    };
    Ok(FleetView { now, settings, tenants, nodes, gpus, workloads, services, arrivals })
}

/// The most shapes of work the arrivals count passes on: far more than the typical work of any
/// fleet (Weng et al.'s 8,152 pods have 155), few enough that a snapshot stays small.
pub const MOST_ARRIVAL_SHAPES: i64 = 512;

/// The shapes of work submitted in the last [`ARRIVALS_WINDOW_DAYS`] days and how many of each,
/// most frequent first (MIG requests left out: they use instances, not capacity). Every
/// submission counts, placed or not, ended or not: what arrives, not what the queue holds now.
/// The range is read through the listing's index on `submitted_at` (migration 0014).
pub async fn read_arrivals(conn: &mut PgConnection) -> sqlx::Result<Vec<ArrivalEntry>> {
    let rows: Vec<(i32, i32, i32, String, i64)> = sqlx::query_as(
        "SELECT CASE WHEN gpu_count = 0 THEN 0 ELSE gpu_milli END, gpu_count, cpu_millis,                 array_to_string(gpu_models, ','), count(*)          FROM workloads          WHERE submitted_at > now() - make_interval(days => $1) AND mig_profile IS NULL          GROUP BY 1, 2, 3, 4 ORDER BY 5 DESC, 1, 2, 3, 4 LIMIT $2",
    )
    .bind(ARRIVALS_WINDOW_DAYS as i32)
    .bind(MOST_ARRIVAL_SHAPES)
    .fetch_all(&mut *conn)
    .await?;
    let count = |n: i32| u32::try_from(n).unwrap_or(0);
    Ok(rows
        .into_iter()
        .map(|(milli, gpus, cpu, models, n)| ArrivalEntry {
            gpu_milli: count(milli),
            gpu_count: count(gpus),
            cpu_millis: count(cpu),
            gpu_models: models,
            count: u32::try_from(n).unwrap_or(u32::MAX),
        })
        .collect())
}

#[derive(sqlx::FromRow)]
struct TenantRow(Uuid, String, i32, i32, i32, bool, Option<i32>, i64, f64);

#[derive(sqlx::FromRow)]
struct NodeRow(Uuid, String, NodeState, i32, i64, Option<f64>, Option<f32>, bool, bool);

/// By position, not name: sqlx finds a named column by a hash lookup per field per row, and the
/// GPUs are read whole every cycle (8,000 rows of 11 columns).
#[derive(sqlx::FromRow)]
struct GpuRow(
    Uuid,           // id
    Uuid,           // node_id
    i32,            // device_index
    String,         // model
    i64,            // memory_mb
    Option<i64>,    // memory_used_mb
    Option<f32>,    // util
    Option<i32>,    // nvlink_group
    bool,           // simulated
    GpuSharing,     // sharing
    Option<String>, // mig_profile
);

#[derive(sqlx::FromRow)]
struct GrantRow(Uuid, Uuid, i32, i64);

#[derive(sqlx::FromRow, Clone)]
struct WorkloadRow {
    id: Uuid,
    tenant_id: Uuid,
    /// Shared by the cached row, every cycle's model and the tenants' views: cloned, not copied.
    #[sqlx(try_from = "String")]
    name: Arc<str>,
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
    /// Shared by the cached row and every cycle's model (as `name`).
    pending_reason: Option<Arc<str>>,
    shortfall: Option<Arc<str>>,
    preemptions_last_hour: i64,
    gpu_milli: i32,
    mig_profile: Option<String>,
    service_id: Option<Uuid>,
    replica_variant: Option<ReplicaVariant>,
    /// A replica whose server answers (or whose service reads none).
    replica_ready: bool,
    container: bool,
    gang_id: Option<Uuid>,
    gang_rank: Option<i32>,
    gang_size: Option<i32>,
    /// The id as text (the snapshots' form), made once when the row is fetched.
    #[sqlx(skip)]
    id_text: Option<Arc<str>>,
}
