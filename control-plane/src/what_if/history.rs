//! The recorded history of the last hours as the simulator's inputs: the fleet as it is now
//! (`airtime_replay::format::FleetSpec`, one node type per node) and the workloads of the window as
//! a trace (`airtime_replay::format::Trace`), each with the run time it really had.
//!
//! How a workload of the window becomes a trace record (the simplifications are named in
//! `docs/simulator.md`, "What-if in the product"):
//! - it arrives when it was submitted (work submitted before the window and still waiting or
//!   running when it began arrives at 0, with what it ran after the window began);
//! - it needs the compute it really used: the last attempt's run time (a checkpointable workload:
//!   every attempt's, since it resumes); work still running needs at least what it has run and at
//!   least its `expected_duration_s`; work that never ran needs its `expected_duration_s`, or an
//!   hour when it gave none; real-time inference is wanted from submission to its end (or now);
//! - work cancelled before it ever ran is not replayed (the demand was withdrawn);
//! - a service's replicas are replayed as the workloads they were (the autoscaler is not re-run).

use std::collections::HashMap;

use airtime_protocol::sharing::GpuSharing;
use airtime_replay::format::{FleetSpec, NodeType, TenantSpec, Trace, TraceWorkload};
use airtime_scheduler::fleet::FleetView;
use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::model::{WorkloadClass, WorkloadState};

/// A workload that never ran and gave no expected duration is replayed as needing this long.
const UNKNOWN_DURATION_S: u64 = 3600;

/// What a replay of the window runs on.
pub struct History {
    pub fleet: FleetSpec,
    pub trace: Trace,
    /// The start of the window: the trace's second 0.
    pub from: DateTime<Utc>,
    /// The window's length, seconds (the scored window).
    pub window_s: u64,
}

#[derive(sqlx::FromRow)]
struct Row {
    id: Uuid,
    tenant: String,
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
    gpu_milli: i32,
    mig_profile: Option<String>,
    submitted_at: DateTime<Utc>,
    finished_at: Option<DateTime<Utc>>,
}

/// Running intervals of a workload clipped to the window: every attempt's, and the last one's.
#[derive(Default, Clone, Copy)]
struct Ran {
    total_s: f64,
    last_attempt: i32,
    last_s: f64,
    ever: bool,
}

/// Reads the window `[now - hours, now)`: the fleet from `fleet` (the live model the scheduler
/// reads, so nodes and GPUs are what it places on), the workloads and their state history from
/// the database. `tenant_policies` names each tenant's active policy, where it has one.
pub async fn read(
    conn: &mut PgConnection,
    fleet: &FleetView,
    hours: u32,
    tenant_policies: &HashMap<Uuid, String>,
) -> sqlx::Result<History> {
    let now = fleet.now;
    let from = now - chrono::Duration::hours(i64::from(hours));
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT w.id, t.name AS tenant, w.class, w.state, w.priority, w.gpu_count, w.gpu_memory_mb, w.gpu_models, \
                w.cpu_millis, w.memory_mb, w.cpu_capable, w.preemptible, w.checkpointable, w.expected_duration_s, \
                w.gpu_milli, w.mig_profile, w.submitted_at, w.finished_at \
         FROM workloads w JOIN tenants t ON t.id = w.tenant_id \
         WHERE w.submitted_at < $2 AND (w.submitted_at >= $1 OR w.finished_at IS NULL OR w.finished_at > $1) \
         ORDER BY w.submitted_at, w.id",
    )
    .bind(from)
    .bind(now)
    .fetch_all(&mut *conn)
    .await?;
    let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
    let events: Vec<(Uuid, DateTime<Utc>, String, i32)> = sqlx::query_as(
        "SELECT workload_id, at, to_state, attempt FROM workload_events WHERE workload_id = ANY($1) \
         ORDER BY workload_id, id",
    )
    .bind(&ids)
    .fetch_all(&mut *conn)
    .await?;
    let ran = running_time(&events, from, now);
    // MIG nodes: how many physical GPUs each has, and one GPU's layout.
    let mig: Vec<(Uuid, Option<i32>, Option<String>)> = sqlx::query_as(
        "SELECT node_id, parent_index, mig_profile FROM gpus WHERE sharing = 'mig' ORDER BY node_id, parent_index, device_index",
    )
    .fetch_all(&mut *conn)
    .await?;

    let window_s = (now - from).num_seconds().max(1) as u64;
    let mut trace = Trace::default();
    for r in &rows {
        let ran = ran.get(&r.id).copied().unwrap_or_default();
        if r.state == WorkloadState::Cancelled && !ran.ever {
            continue;
        }
        let arrive_s = (r.submitted_at - from).num_seconds().max(0) as u64;
        let expected = r.expected_duration_s.map(|d| d.max(0) as u64);
        let needed = if r.checkpointable { ran.total_s } else { ran.last_s }.round() as u64;
        let active = !r.state.is_terminal();
        let duration_s = if r.class == WorkloadClass::RealtimeInference {
            let end = r.finished_at.unwrap_or(now).min(now);
            (end - r.submitted_at.max(from)).num_seconds().max(0) as u64
        } else if !ran.ever {
            expected.unwrap_or(UNKNOWN_DURATION_S)
        } else if active {
            needed.max(expected.unwrap_or(0))
        } else {
            needed
        };
        let gpus = r.gpu_count.max(0) as u32;
        trace.workloads.push(TraceWorkload {
            id: r.id.to_string(),
            tenant: r.tenant.clone(),
            class: r.class,
            arrive_s,
            duration_s: duration_s.max(1),
            gpus,
            gpu_milli: r.gpu_milli.clamp(1, 1000) as u32,
            mig_profile: r.mig_profile.clone(),
            gpu_memory_mb: r.gpu_memory_mb.max(0) as u64,
            gpu_models: r.gpu_models.clone(),
            cpu_millis: r.cpu_millis.max(0) as u32,
            memory_mb: r.memory_mb.max(0) as u64,
            priority: r.priority,
            preemptible: r.preemptible,
            checkpointable: r.checkpointable,
            cpu_capable: r.cpu_capable,
        });
    }
    Ok(History { fleet: fleet_spec(fleet, &mig, tenant_policies), trace, from, window_s })
}

/// Each workload's running time within `[from, now)`, from its state history: a run begins with
/// an event into `running` and ends with the workload's next event.
fn running_time(
    events: &[(Uuid, DateTime<Utc>, String, i32)],
    from: DateTime<Utc>,
    now: DateTime<Utc>,
) -> HashMap<Uuid, Ran> {
    let mut out: HashMap<Uuid, Ran> = HashMap::new();
    for (i, (id, at, to, attempt)) in events.iter().enumerate() {
        if to != "running" {
            continue;
        }
        let end = match events.get(i + 1) {
            Some((next, next_at, _, _)) if next == id => *next_at,
            _ => now,
        };
        let seconds = (end.min(now) - (*at).max(from)).num_milliseconds().max(0) as f64 / 1000.0;
        let ran = out.entry(*id).or_default();
        ran.ever = true;
        ran.total_s += seconds;
        if *attempt >= ran.last_attempt {
            if *attempt > ran.last_attempt {
                ran.last_s = 0.0;
            }
            ran.last_attempt = *attempt;
            ran.last_s += seconds;
        }
    }
    out
}

/// The fleet as the simulator's fleet file: the tenants with their quotas (and the policies
/// they run), one node type per node (named for the node, so the replay's nodes are
/// `<node>-0`), the priority settings as configured.
fn fleet_spec(
    fleet: &FleetView,
    mig: &[(Uuid, Option<i32>, Option<String>)],
    policies: &HashMap<Uuid, String>,
) -> FleetSpec {
    let tenants = fleet
        .tenants
        .iter()
        .map(|t| TenantSpec {
            name: t.name.clone(),
            guaranteed_gpus: t.guaranteed_gpus,
            weight: t.weight.max(1),
            tier: t.tier,
            may_borrow: t.may_borrow,
            gpu_limit: t.gpu_limit,
            policy: policies.get(&t.id).cloned(),
        })
        .collect();
    let node_types = fleet
        .nodes
        .iter()
        .map(|n| {
            let gpus = &fleet.gpus[n.gpu_first..n.gpu_first + n.gpu_count];
            let first = gpus.first();
            let sharing = first.map_or(GpuSharing::None, |g| g.sharing);
            let (count, layout, memory) = if sharing == GpuSharing::Mig {
                let instances: Vec<&(Uuid, Option<i32>, Option<String>)> =
                    mig.iter().filter(|(node, _, _)| *node == n.id).collect();
                let parents: std::collections::BTreeSet<Option<i32>> = instances.iter().map(|(_, p, _)| *p).collect();
                let first_parent = parents.iter().next().copied().flatten();
                let layout: Vec<String> = instances
                    .iter()
                    .filter(|(_, p, _)| *p == first_parent)
                    .filter_map(|(_, _, profile)| profile.clone())
                    .collect();
                // A MIG GPU's memory: the largest instance's profile says it (`7g.80gb`); the
                // layout is what the replay carves.
                let memory = gpus.iter().map(|g| g.memory_mb).sum::<u64>() / parents.len().max(1) as u64;
                (parents.len() as u32, layout, memory)
            } else {
                (gpus.len() as u32, Vec::new(), first.map_or(0, |g| g.memory_mb))
            };
            NodeType {
                name: n.name.to_string(),
                count: 1,
                gpus: count,
                gpu_model: first.map(|g| g.model.to_string()).unwrap_or_default(),
                gpu_memory_mb: memory,
                cpu_millis: n.cpu_millis,
                memory_mb: n.memory_mb,
                cost_per_hour: n.cost_per_hour,
                gpu_sharing: sharing,
                mig_layout: layout,
            }
        })
        .collect();
    FleetSpec { tenants, node_types, settings: fleet.settings.clone() }
}
