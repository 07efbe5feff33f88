//! Applies one cycle's checked decisions in one transaction, and records each with its reason and
//! the policy version that made it. Also the read side: decisions over the API.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use crate::model::WorkloadState;
use crate::scheduler::check::{Proposal, Refusal};
use crate::scheduler::fleet_view::{FleetView, Moved, Rewrite, WorkloadCache};
use crate::scheduler::leader::{Leadership, LeaseError};
use crate::workloads::transitions;

/// Which policy decided, for the record (the core's).
pub use airtime_scheduler::cycle::Decider;

#[derive(Debug, Clone)]
pub struct CycleOutcome {
    pub cycle_id: i64,
    pub placed: usize,
    pub preempted: usize,
    pub pending: usize,
    pub refused: usize,
    /// Nodes whose desired state changed: their agents must look again.
    pub nodes_changed: bool,
    /// Where the cycle's time went.
    pub phases: Phases,
    /// The waiting workloads' rows this cycle rewrote and nothing else touched, for the loop's
    /// cache ([`WorkloadCache::rewritten`]); empty unless the transaction committed.
    pub rewritten: Vec<Rewrite>,
}

/// Where a cycle's time went, phase by phase (wall time, in the order they run).
#[derive(Debug, Clone, Copy, Default)]
pub struct Phases {
    /// Decaying and accruing the tenants' usage.
    pub accrue: std::time::Duration,
    /// Reading the fleet and the queue.
    pub read: std::time::Duration,
    /// Scaling the services.
    pub services: std::time::Duration,
    /// Loading the active policies of the scopes with pending work.
    pub levels: std::time::Duration,
    /// Encoding snapshots, evaluating every policy, checking and composing the decisions.
    pub decide: std::time::Duration,
    /// The cycle's transaction: placements, preemptions, reasons, the record.
    pub apply: std::time::Duration,
    /// The shadow policy and what each policy's evaluation left (failures, logs, successes).
    pub notes: std::time::Duration,
}

impl Phases {
    /// Each phase by name, in the order they run.
    pub fn named(&self) -> [(&'static str, std::time::Duration); 7] {
        [
            ("accrue usage", self.accrue),
            ("read fleet and queue", self.read),
            ("scale services", self.services),
            ("load policies", self.levels),
            ("evaluate, check, compose", self.decide),
            ("apply (one transaction)", self.apply),
            ("shadow and policy notes", self.notes),
        ]
    }
}

/// Whether [`apply`] keeps what it wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Commit,
    /// Everything is written and then rolled back: does the database accept these decisions?
    Trial,
}

pub struct CycleRecord<'a> {
    pub leadership: &'a Leadership,
    pub started_at: DateTime<Utc>,
    pub trigger: &'a str,
    pub decider: &'a Decider,
    pub error: Option<String>,
    /// The row versions the cycle's read saw: a waiting workload's reason is rewritten only onto
    /// the version the cycle decided on (one changed since waits for the next cycle), and what was
    /// rewritten comes back in [`CycleOutcome::rewritten`]. `None`: rewritten whatever the version.
    pub seen: Option<&'a WorkloadCache>,
}

/// Applies the accepted proposals and records everything, all or nothing. A placement whose
/// workload changed since the snapshot (cancelled meanwhile) or whose GPU was granted meanwhile is
/// undone and recorded as refused; the database's trigger `gpu_grants_check` (a GPU's grants never
/// add up to more than the GPU) is the last word on double grants. Placements are applied set-based ([`apply_placements`]).
pub async fn apply(
    db: &PgPool,
    fleet: &FleetView,
    accepted: &[(Proposal, &Decider)],
    refused: &[(Refusal, &Decider)],
    record: CycleRecord<'_>,
    mode: Mode,
) -> Result<CycleOutcome, LeaseError> {
    let mut tx = db.begin().await?;
    // First, and held to the commit: this replica still leads (see scheduler::leader).
    record.leadership.prove(&mut tx).await?;
    // Every node this cycle changes, locked first and in id order — the order the telemetry
    // writer locks nodes in — so a cycle and a flush never wait on each other in a cycle.
    let mut touched: Vec<Uuid> = accepted
        .iter()
        .filter_map(|(proposal, _)| match proposal {
            Proposal::Place { node, .. } => fleet.nodes.get(*node).map(|n| n.id),
            Proposal::Preempt { .. } => {
                fleet.workloads[proposal.workload()].node.and_then(|n| fleet.nodes.get(n)).map(|n| n.id)
            }
            Proposal::KeepPending { .. } => None,
        })
        .collect();
    touched.sort_unstable();
    touched.dedup();
    // The lock also answers which of them an operator cordoned since the cycle read the fleet (a
    // cordon takes the node's row lock, so none can land between this read and the commit): no
    // placement goes onto those.
    let mut cordoned: Vec<(Uuid, String)> = Vec::new();
    if !touched.is_empty() {
        let locked: Vec<(Uuid, String, bool)> = sqlx::query_as(
            "SELECT id, name, cordon IS NOT NULL FROM nodes WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE",
        )
        .bind(&touched)
        .fetch_all(&mut *tx)
        .await?;
        cordoned = locked.into_iter().filter(|(_, _, held)| *held).map(|(id, name, _)| (id, name)).collect();
    }
    let (cycle_id,): (i64,) = sqlx::query_as(
        "INSERT INTO scheduling_cycles (started_at, finished_at, trigger, policy_version_id, policy_name, \
             duration_us, placed, preempted, pending, rejected, error) \
         VALUES ($1, now(), $2, $3, $4, 0, 0, 0, 0, 0, $5) RETURNING id",
    )
    .bind(record.started_at)
    .bind(record.trigger)
    .bind(record.decider.policy_version_id)
    .bind(&record.decider.policy_name)
    .bind(&record.error)
    .fetch_one(&mut *tx)
    .await?;

    let mut outcome = CycleOutcome {
        cycle_id,
        placed: 0,
        preempted: 0,
        pending: 0,
        refused: refused.len(),
        nodes_changed: false,
        phases: Phases::default(),
        rewritten: Vec::new(),
    };
    let mut late_refusals: Vec<(Refusal, &Decider)> = Vec::new();
    // The rows this cycle placed or preempted, as the cache can take them in.
    let mut moves: Vec<Rewrite> = Vec::new();
    let mut pending_changes: Vec<(Uuid, Uuid, String, &Decider)> = Vec::new();
    let mut placements: Vec<Placement<'_>> = Vec::new();

    for &(ref proposal, decider) in accepted {
        let w = &fleet.workloads[proposal.workload()];
        match proposal {
            Proposal::Place { node, gpus, reason, .. } => {
                placements.push(Placement { workload: proposal.workload(), node: *node, gpus, reason, decider });
            }
            Proposal::Preempt { reason, .. } => {
                // First onto the version the cycle read, whose new version the cache can take in
                // (see `apply_placements`); one changed meanwhile is preempted all the same.
                let seen = record.seen.and_then(|c| c.seen(w.id));
                let preempt = |version: Option<i64>| {
                    sqlx::query_as::<_, (Uuid, i32, Option<i64>, i64)>(
                        "UPDATE workloads SET state = 'preempting', updated_at = now(), preempted_reason = $2 \
                         WHERE id = $1 AND state IN ('scheduled', 'running') \
                           AND ($3::bigint IS NULL OR xmin::text::bigint = $3) \
                         RETURNING node_id, attempt, $3::bigint, xmin::text::bigint",
                    )
                    .bind(w.id)
                    .bind(reason)
                    .bind(version)
                };
                let mut moved = None;
                if seen.is_some() {
                    moved = preempt(seen).fetch_optional(&mut *tx).await?;
                }
                if moved.is_none() {
                    moved = preempt(None).fetch_optional(&mut *tx).await?;
                }
                if let Some((_, _, Some(seen), xmin)) = moved {
                    moves.push(Rewrite {
                        id: w.id,
                        seen,
                        xmin,
                        reason: None,
                        shortfall: None,
                        moved: Some(Moved::Preempting),
                    });
                }
                let Some((node_id, attempt, _, _)) = moved else {
                    late_refusals.push((
                        Refusal {
                            workload: Some(proposal.workload()),
                            reason: format!("workload {} is no longer running", w.id),
                        },
                        decider,
                    ));
                    continue;
                };
                sqlx::query("UPDATE nodes SET desired_version = desired_version + 1 WHERE id = $1")
                    .bind(node_id)
                    .execute(&mut *tx)
                    .await?;
                transitions::record_event(
                    &mut tx,
                    w.id,
                    fleet.tenants[w.tenant].id,
                    Some(w.state),
                    WorkloadState::Preempting,
                    attempt,
                    &format!("preempted by {}: {reason}", decider.policy_name),
                )
                .await?;
                insert_decision(
                    &mut tx,
                    cycle_id,
                    fleet,
                    proposal.workload(),
                    "preempt",
                    Some(node_id),
                    &[],
                    reason,
                    decider,
                )
                .await?;
                outcome.preempted += 1;
                outcome.nodes_changed = true;
            }
            Proposal::KeepPending { reason, .. } => {
                outcome.pending += 1;
                // Recorded when the reason changes, not every tick: the history stays readable.
                if w.pending_reason.as_deref() != Some(reason.as_str()) {
                    let reason: String = reason.chars().take(1000).collect();
                    pending_changes.push((w.id, fleet.tenants[w.tenant].id, reason, decider));
                }
            }
        }
    }

    placements.retain(|p| {
        let node = &fleet.nodes[p.node];
        let Some((_, name)) = cordoned.iter().find(|(id, _)| *id == node.id) else { return true };
        let reason = format!("node {name} was cordoned after the cycle read the fleet");
        late_refusals.push((Refusal { workload: Some(p.workload), reason }, p.decider));
        false
    });
    let placed =
        apply_placements(&mut tx, cycle_id, fleet, &placements, record.seen, &mut late_refusals, &mut moves).await?;
    outcome.placed = placed;
    outcome.nodes_changed |= placed > 0;
    // What the waiting work lacks, judged on the room this cycle leaves (its placements hold
    // theirs), not the room it read: the next cycle then finds the same and rewrites nothing.
    let lost: std::collections::HashSet<usize> = late_refusals.iter().filter_map(|(r, _)| r.workload).collect();
    let held: Vec<(usize, usize, &[usize])> =
        placements.iter().filter(|p| !lost.contains(&p.workload)).map(|p| (p.workload, p.node, p.gpus)).collect();
    let shortfalls = if held.is_empty() {
        changed_shortfalls(fleet, fleet, &[])
    } else {
        changed_shortfalls(fleet, &fleet.room_after(&held), &held)
    };
    let mut rewritten = record_waiting(&mut tx, cycle_id, &pending_changes, &shortfalls, record.seen).await?;

    let refusals: Vec<(Uuid, Uuid, String, &Decider)> = refused
        .iter()
        .chain(late_refusals.iter())
        .filter_map(|(refusal, decider)| {
            let w = &fleet.workloads[refusal.workload?];
            let reason: String =
                format!("refused by the control plane: {}", refusal.reason).chars().take(1000).collect();
            Some((w.id, fleet.tenants[w.tenant].id, reason, *decider))
        })
        .collect();
    record_refusals(&mut tx, cycle_id, &refusals).await?;
    outcome.refused += late_refusals.len();
    // A row rewritten twice in one transaction keeps one `xmin`: the cache takes in only rows no
    // other statement here touched (placed, preempted, refused), and reads the others afresh.
    let elsewhere: rustc_hash::FxHashSet<Uuid> = accepted
        .iter()
        .filter(|(p, _)| !matches!(p, Proposal::KeepPending { .. }))
        .map(|(p, _)| fleet.workloads[p.workload()].id)
        .chain(refusals.iter().map(|r| r.0))
        .collect();
    // The same for the rows placed or preempted: taken in only if no other statement touched them
    // (a refusal's reason, a waiting row's rewrite — neither can touch a row no longer pending or
    // running, but the rule is checked, not assumed), and each at most once.
    let mut touched: rustc_hash::FxHashMap<Uuid, usize> = rustc_hash::FxHashMap::default();
    for id in refusals.iter().map(|r| r.0).chain(rewritten.iter().map(|r| r.id)).chain(moves.iter().map(|m| m.id)) {
        *touched.entry(id).or_default() += 1;
    }
    rewritten.retain(|r| !elsewhere.contains(&r.id));
    rewritten.extend(moves.into_iter().filter(|m| touched.get(&m.id) == Some(&1)));

    sqlx::query(
        "UPDATE scheduling_cycles SET finished_at = now(), \
             duration_us = (extract(epoch from clock_timestamp() - started_at) * 1000000)::bigint, \
             placed = $2, preempted = $3, pending = $4, rejected = $5 WHERE id = $1",
    )
    .bind(cycle_id)
    .bind(outcome.placed as i32)
    .bind(outcome.preempted as i32)
    .bind(outcome.pending as i32)
    .bind(outcome.refused as i32)
    .execute(&mut *tx)
    .await?;
    match mode {
        Mode::Commit => {
            tx.commit().await?;
            outcome.rewritten = rewritten;
        }
        Mode::Trial => tx.rollback().await?,
    }
    Ok(outcome)
}

/// One placement to apply.
struct Placement<'a> {
    workload: usize,
    node: usize,
    gpus: &'a [usize],
    reason: &'a str,
    decider: &'a Decider,
}

/// Applies a cycle's placements in a few set-based statements whatever their number: move the
/// workloads that are still pending, grant their GPUs or shares (the trigger `gpu_grants_check`, which
/// never lets a GPU's grants add up to more than the GPU, is the last word on double grants), undo the few that lost a race (a workload cancelled meanwhile, a GPU
/// granted meanwhile: refused, recorded like any refusal), then bump the nodes' desired state and
/// write the events and decisions. Returns how many were placed.
#[allow(clippy::too_many_arguments)]
async fn apply_placements<'a>(
    tx: &mut sqlx::PgConnection,
    cycle_id: i64,
    fleet: &FleetView,
    placements: &[Placement<'a>],
    seen: Option<&WorkloadCache>,
    late_refusals: &mut Vec<(Refusal, &'a Decider)>,
    moves: &mut Vec<Rewrite>,
) -> sqlx::Result<usize> {
    if placements.is_empty() {
        return Ok(0);
    }
    let workload_ids: Vec<Uuid> = placements.iter().map(|p| fleet.workloads[p.workload].id).collect();
    let node_ids: Vec<Uuid> = placements.iter().map(|p| fleet.nodes[p.node].id).collect();
    let versions: Vec<Option<i64>> = workload_ids.iter().map(|id| seen.and_then(|c| c.seen(*id))).collect();
    // First the rows still at the version the cycle read: their new version is the read's row plus
    // this change, which the loop's cache takes in (a burst's first cycle would otherwise have its
    // next read fetch every row it placed again). Then, in a second statement, any still pending
    // that changed meanwhile: placed all the same, and read afresh next cycle.
    const MOVE: &str = "UPDATE workloads w SET state = 'scheduled', node_id = p.node_id, attempt = w.attempt + 1, \
             attempt_token = gen_random_uuid(), pending_reason = NULL, updated_at = now(), \
             gang_shown_version = NULL, gang_acked_at = NULL \
         FROM UNNEST($1::uuid[], $2::uuid[], $3::bigint[]) AS p(id, node_id, seen) \
         WHERE w.id = p.id AND w.state = 'pending'";
    let mut moved: Vec<(Uuid, i32, Option<i64>, i64)> = if seen.is_some() {
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "{MOVE} AND w.xmin::text::bigint = p.seen RETURNING w.id, w.attempt, p.seen, w.xmin::text::bigint"
        )))
        .bind(&workload_ids)
        .bind(&node_ids)
        .bind(&versions)
        .fetch_all(&mut *tx)
        .await?
    } else {
        Vec::new()
    };
    if moved.len() < placements.len() {
        let done: rustc_hash::FxHashSet<Uuid> = moved.iter().map(|m| m.0).collect();
        let (ids, nodes): (Vec<Uuid>, Vec<Uuid>) =
            workload_ids.iter().zip(&node_ids).filter(|(id, _)| !done.contains(*id)).map(|(w, n)| (*w, *n)).unzip();
        let nulls: Vec<Option<i64>> = vec![None; ids.len()];
        let rest: Vec<(Uuid, i32, Option<i64>, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "{MOVE} RETURNING w.id, w.attempt, NULL::bigint, w.xmin::text::bigint"
        )))
        .bind(&ids)
        .bind(&nodes)
        .bind(&nulls)
        .fetch_all(&mut *tx)
        .await?;
        moved.extend(rest);
    }
    // The moves made onto the version the cycle read: (that version, the new one).
    let onto_seen: rustc_hash::FxHashMap<Uuid, (i64, i64)> =
        moved.iter().filter_map(|&(id, _, seen, xmin)| Some((id, (seen?, xmin)))).collect();
    let attempts: std::collections::HashMap<Uuid, i32> =
        moved.into_iter().map(|(id, attempt, _, _)| (id, attempt)).collect();

    // Grants for the workloads that moved.
    let moved: Vec<&Placement<'a>> =
        placements.iter().filter(|p| attempts.contains_key(&fleet.workloads[p.workload].id)).collect();
    let mut all = Grants::default();
    for p in &moved {
        all.add(fleet, p);
    }
    // The trigger `gpu_grants_check` fails a statement that would over-commit a GPU: one granted by
    // another transaction since this cycle read the fleet. Then the grants go in again one placement
    // at a time, so only the placements that lost the race are refused (and undone below).
    let granted = match try_grants(&mut *tx, &all).await? {
        Some(granted) => granted,
        None => {
            let mut granted = Vec::new();
            for p in &moved {
                let mut one = Grants::default();
                one.add(fleet, p);
                granted.extend(try_grants(&mut *tx, &one).await?.unwrap_or_default());
            }
            granted
        }
    };
    let mut granted_count: std::collections::HashMap<Uuid, usize> = std::collections::HashMap::new();
    for (w,) in granted {
        *granted_count.entry(w).or_default() += 1;
    }

    // Sort each placement into placed or refused (and undo a refused one that had moved).
    let mut undo: Vec<Uuid> = Vec::new();
    let mut placed: Vec<&Placement<'a>> = Vec::new();
    for p in placements {
        let w = &fleet.workloads[p.workload];
        if !attempts.contains_key(&w.id) {
            let reason = format!("workload {} is no longer pending", w.id);
            late_refusals.push((Refusal { workload: Some(p.workload), reason }, p.decider));
        } else if granted_count.get(&w.id).copied().unwrap_or(0) != p.gpus.len() {
            undo.push(w.id);
            let reason = "a GPU it was given was granted to another workload meanwhile".to_owned();
            late_refusals.push((Refusal { workload: Some(p.workload), reason }, p.decider));
        } else {
            placed.push(p);
        }
    }
    if !undo.is_empty() {
        sqlx::query("DELETE FROM gpu_grants WHERE workload_id = ANY($1)").bind(&undo).execute(&mut *tx).await?;
        sqlx::query(
            "UPDATE workloads SET state = 'pending', node_id = NULL, attempt = attempt - 1, updated_at = now() \
             WHERE id = ANY($1)",
        )
        .bind(&undo)
        .execute(&mut *tx)
        .await?;
    }
    if placed.is_empty() {
        return Ok(0);
    }
    moves.extend(placed.iter().filter_map(|p| {
        let id = fleet.workloads[p.workload].id;
        let (seen, xmin) = *onto_seen.get(&id)?;
        Some(Rewrite {
            id,
            seen,
            xmin,
            reason: None,
            shortfall: None,
            moved: Some(Moved::Placed { node: fleet.nodes[p.node].id }),
        })
    }));

    let nodes: Vec<Uuid> = {
        let set: std::collections::BTreeSet<Uuid> = placed.iter().map(|p| fleet.nodes[p.node].id).collect();
        set.into_iter().collect()
    };
    // Already locked, in id order, at the transaction's start (see `apply`).
    sqlx::query("UPDATE nodes SET desired_version = desired_version + 1 WHERE id = ANY($1)")
        .bind(&nodes)
        .execute(&mut *tx)
        .await?;

    let mut events = Vec::with_capacity(placed.len());
    let (mut d_workloads, mut d_tenants, mut d_nodes, mut d_gpus, mut d_reasons, mut d_versions, mut d_names) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for p in &placed {
        let w = &fleet.workloads[p.workload];
        let n = &fleet.nodes[p.node];
        let where_ = if p.gpus.is_empty() {
            format!("placed on {} (CPU)", n.name)
        } else {
            let list: Vec<String> = p.gpus.iter().map(|&g| fleet.gpus[g].device_index.to_string()).collect();
            format!("placed on {} GPUs [{}]", n.name, list.join(","))
        };
        events.push(transitions::EventRow {
            workload_id: w.id,
            tenant_id: fleet.tenants[w.tenant].id,
            from: Some(WorkloadState::Pending),
            to: WorkloadState::Scheduled,
            attempt: attempts[&w.id],
            detail: format!("{where_} by {}: {}", p.decider.policy_name, p.reason),
        });
        d_workloads.push(w.id);
        d_tenants.push(fleet.tenants[w.tenant].id);
        d_nodes.push(n.id);
        d_gpus.push(p.gpus.iter().map(|&g| fleet.gpus[g].id.to_string()).collect::<Vec<_>>().join(","));
        d_reasons.push(p.reason);
        d_versions.push(p.decider.policy_version_id);
        d_names.push(p.decider.policy_name.as_str());
    }
    transitions::record_events(&mut *tx, &events).await?;
    sqlx::query(
        "INSERT INTO decisions (cycle_id, tenant_id, workload_id, kind, node_id, gpu_ids, reason, \
             policy_version_id, policy_name) \
         SELECT $1, d.tenant_id, d.workload_id, 'place', d.node_id, \
                CASE WHEN d.gpus = '' THEN '{}'::uuid[] ELSE string_to_array(d.gpus, ',')::uuid[] END, \
                d.reason, d.version_id, d.policy_name \
         FROM UNNEST($2::uuid[], $3::uuid[], $4::uuid[], $5::text[], $6::text[], $7::uuid[], $8::text[]) \
              AS d(workload_id, tenant_id, node_id, gpus, reason, version_id, policy_name)",
    )
    .bind(cycle_id)
    .bind(&d_workloads)
    .bind(&d_tenants)
    .bind(&d_nodes)
    .bind(&d_gpus)
    .bind(&d_reasons)
    .bind(&d_versions)
    .bind(&d_names)
    .execute(&mut *tx)
    .await?;
    Ok(placed.len())
}

/// A cycle's grants as the columns of one insert: a share of a shared GPU is granted its
/// thousandths and memory slice, anything else the whole GPU.
#[derive(Default)]
struct Grants {
    gpus: Vec<Uuid>,
    workloads: Vec<Uuid>,
    tenants: Vec<Uuid>,
    milli: Vec<i32>,
    memory_mb: Vec<i64>,
}

impl Grants {
    fn add(&mut self, fleet: &FleetView, p: &Placement<'_>) {
        let w = &fleet.workloads[p.workload];
        for &g in p.gpus {
            let gpu = &fleet.gpus[g];
            let (milli, memory_mb) = gpu.grant_for(w);
            self.gpus.push(gpu.id);
            self.workloads.push(w.id);
            self.tenants.push(fleet.tenants[w.tenant].id);
            self.milli.push(milli as i32);
            self.memory_mb.push(i64::try_from(memory_mb).unwrap_or(i64::MAX));
        }
    }
}

/// Inserts the grants in one statement under a savepoint. `None` (and nothing inserted) when the
/// trigger `gpu_grants_check` refused the statement because a GPU would be over-committed; the
/// workload of each inserted grant otherwise.
async fn try_grants(tx: &mut sqlx::PgConnection, grants: &Grants) -> sqlx::Result<Option<Vec<(Uuid,)>>> {
    sqlx::query("SAVEPOINT grants").execute(&mut *tx).await?;
    let inserted = sqlx::query_as(
        "INSERT INTO gpu_grants (gpu_id, workload_id, tenant_id, milli, memory_mb) \
         SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::uuid[], $4::integer[], $5::bigint[]) \
         ON CONFLICT DO NOTHING RETURNING workload_id",
    )
    .bind(&grants.gpus)
    .bind(&grants.workloads)
    .bind(&grants.tenants)
    .bind(&grants.milli)
    .bind(&grants.memory_mb)
    .fetch_all(&mut *tx)
    .await;
    match inserted {
        Ok(rows) => {
            sqlx::query("RELEASE SAVEPOINT grants").execute(&mut *tx).await?;
            Ok(Some(rows))
        }
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(OVER_COMMITTED) => {
            sqlx::query("ROLLBACK TO SAVEPOINT grants").execute(&mut *tx).await?;
            sqlx::query("RELEASE SAVEPOINT grants").execute(&mut *tx).await?;
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The SQLSTATE of the trigger `gpu_grants_check`'s refusal (exclusion_violation, migration 0020).
const OVER_COMMITTED: &str = "23P01";

/// Refused decisions, in one statement. A policy that repeats a refused decision every cycle is
/// recorded once, not every tick: a refusal identical to the workload's latest decision is skipped.
/// A refused pending workload's pending reason becomes the refusal: "why is my job pending?" must
/// name what the host refused, not "waiting for the next scheduling cycle".
async fn record_refusals(
    tx: &mut sqlx::PgConnection,
    cycle_id: i64,
    refusals: &[(Uuid, Uuid, String, &Decider)],
) -> sqlx::Result<()> {
    if refusals.is_empty() {
        return Ok(());
    }
    let (ids, tenants, reasons, versions, names) = decision_columns(refusals);
    sqlx::query(
        "WITH r AS (SELECT * FROM UNNEST($2::uuid[], $3::uuid[], $4::text[], $5::uuid[], $6::text[]) \
                    AS r(workload_id, tenant_id, reason, version_id, policy_name)), \
              waiting AS (UPDATE workloads w SET pending_reason = r.reason FROM r \
                          WHERE w.id = r.workload_id AND w.state = 'pending' \
                            AND w.pending_reason IS DISTINCT FROM r.reason RETURNING w.id) \
         INSERT INTO decisions (cycle_id, tenant_id, workload_id, kind, reason, policy_version_id, policy_name) \
         SELECT $1, r.tenant_id, r.workload_id, 'rejected', r.reason, r.version_id, r.policy_name FROM r \
         WHERE NOT EXISTS (SELECT 1 FROM (SELECT d.kind, d.reason FROM decisions d WHERE d.workload_id = r.workload_id \
                                          ORDER BY d.id DESC LIMIT 1) last \
                           WHERE last.kind = 'rejected' AND last.reason = r.reason)",
    )
    .bind(cycle_id)
    .bind(&ids)
    .bind(&tenants)
    .bind(&reasons)
    .bind(&versions)
    .bind(&names)
    .execute(tx)
    .await?;
    Ok(())
}

type DecisionColumns<'a> = (Vec<Uuid>, Vec<Uuid>, Vec<&'a str>, Vec<Option<Uuid>>, Vec<&'a str>);

/// (workload, tenant, reason, decider) rows as the column arrays `UNNEST` takes.
fn decision_columns<'a>(rows: &'a [(Uuid, Uuid, String, &'a Decider)]) -> DecisionColumns<'a> {
    (
        rows.iter().map(|r| r.0).collect(),
        rows.iter().map(|r| r.1).collect(),
        rows.iter().map(|r| r.2.as_str()).collect(),
        rows.iter().map(|r| r.3.policy_version_id).collect(),
        rows.iter().map(|r| r.3.policy_name.as_str()).collect(),
    )
}

/// What each workload still pending is short of (`airtime_scheduler::shortfall`) in `room` (the
/// fleet as the cycle leaves it: [`FleetView::room_after`]), where it changed since the fleet was
/// read (a steady queue of 10,000 rewrites nothing); workloads of one shape (the same needs) are
/// judged once, and those `placed` this cycle not at all.
fn changed_shortfalls(
    fleet: &FleetView,
    room: &FleetView,
    placed: &[(usize, usize, &[usize])],
) -> Vec<(Uuid, Option<String>)> {
    type Shape<'a> = (u32, u64, &'a str, u32, u64, bool, u32, &'a str, bool);
    let placed: rustc_hash::FxHashSet<usize> = placed.iter().map(|(w, _, _)| *w).collect();
    let mut judged: rustc_hash::FxHashMap<Shape<'_>, Option<String>> = rustc_hash::FxHashMap::default();
    let mut changed = Vec::new();
    for (i, w) in fleet.workloads.iter().enumerate() {
        if w.state != WorkloadState::Pending || placed.contains(&i) {
            continue;
        }
        let shape: Shape<'_> = (
            w.gpu_count,
            w.gpu_memory_mb,
            &w.gpu_models,
            w.cpu_millis,
            w.memory_mb,
            w.cpu_capable,
            w.gpu_milli,
            &w.mig_profile,
            w.container,
        );
        let shortfall = judged.entry(shape).or_insert_with(|| airtime_scheduler::shortfall::shortfall(room, w));
        if w.shortfall.as_deref() != shortfall.as_deref() {
            changed.push((w.id, shortfall.clone()));
        }
    }
    changed
}

/// What the waiting workloads wait for, in one statement whatever their number (a cycle over 10,000
/// waiting workloads must not cost 20,000 round trips): the new pending reasons, each recorded as a
/// `keep_pending` decision, and the changed shortfalls. One statement, so that a workload whose
/// reason and shortfall both change (most of the queue after a mass placement) gets one new row
/// version, not two: with room on its page for one (migration 0021) the update stays HOT, where a
/// second version in the same transaction found the page full and wrote all eight indexes.
async fn record_waiting(
    tx: &mut sqlx::PgConnection,
    cycle_id: i64,
    reasons: &[(Uuid, Uuid, String, &Decider)],
    shortfalls: &[(Uuid, Option<String>)],
    seen: Option<&WorkloadCache>,
) -> sqlx::Result<Vec<Rewrite>> {
    if reasons.is_empty() && shortfalls.is_empty() {
        return Ok(Vec::new());
    }
    let (ids, tenants, texts, versions, names) = decision_columns(reasons);
    let short_ids: Vec<Uuid> = shortfalls.iter().map(|(id, _)| *id).collect();
    let short_texts: Vec<Option<&str>> = shortfalls.iter().map(|(_, s)| s.as_deref()).collect();
    let seen_of = |id: &Uuid| seen.and_then(|c| c.seen(*id));
    let reason_seen: Vec<Option<i64>> = ids.iter().map(seen_of).collect();
    let short_seen: Vec<Option<i64>> = short_ids.iter().map(seen_of).collect();
    // `old` is the row as the statement found it (RETURNING sees only the new one): a decision is
    // recorded only for a reason that really changed. A row whose version is not the one the
    // cycle read (`seen`) changed meanwhile: left for the next cycle, which decides on it afresh.
    let changed: Vec<(Uuid, i64, i64)> = sqlx::query_as(
        "WITH c AS (SELECT * FROM UNNEST($2::uuid[], $3::uuid[], $4::text[], $5::uuid[], $6::text[], $9::bigint[]) \
                    AS c(workload_id, tenant_id, reason, version_id, policy_name, seen)), \
              s AS (SELECT * FROM UNNEST($7::uuid[], $8::text[], $10::bigint[]) AS s(id, shortfall, seen)), \
              u AS (SELECT COALESCE(c.workload_id, s.id) AS id, c.workload_id IS NOT NULL AS has_reason, c.reason, \
                           s.id IS NOT NULL AS has_shortfall, s.shortfall, COALESCE(c.seen, s.seen) AS seen \
                    FROM c FULL JOIN s ON s.id = c.workload_id), \
              changed AS (UPDATE workloads w \
                          SET pending_reason = CASE WHEN u.has_reason THEN u.reason ELSE w.pending_reason END, \
                              shortfall = CASE WHEN u.has_shortfall THEN u.shortfall ELSE w.shortfall END \
                          FROM u, workloads old \
                          WHERE w.id = u.id AND old.id = u.id AND w.state = 'pending' \
                            AND (u.seen IS NULL OR w.xmin::text::bigint = u.seen) \
                            AND ((u.has_reason AND w.pending_reason IS DISTINCT FROM u.reason) \
                              OR (u.has_shortfall AND w.shortfall IS DISTINCT FROM u.shortfall)) \
                          RETURNING w.id, u.seen, w.xmin::text::bigint AS xmin, \
                                    u.has_reason AND old.pending_reason IS DISTINCT FROM u.reason AS new_reason), \
              recorded AS (INSERT INTO decisions (cycle_id, tenant_id, workload_id, kind, reason, policy_version_id, policy_name) \
                           SELECT $1, c.tenant_id, c.workload_id, 'keep_pending', c.reason, c.version_id, c.policy_name \
                           FROM c JOIN changed ON changed.id = c.workload_id AND changed.new_reason) \
         SELECT id, seen, xmin FROM changed WHERE seen IS NOT NULL",
    )
    .bind(cycle_id)
    .bind(&ids)
    .bind(&tenants)
    .bind(&texts)
    .bind(&versions)
    .bind(&names)
    .bind(&short_ids)
    .bind(&short_texts)
    .bind(&reason_seen)
    .bind(&short_seen)
    .fetch_all(tx)
    .await?;
    if changed.is_empty() {
        return Ok(Vec::new());
    }
    let reason_of: rustc_hash::FxHashMap<Uuid, &str> = reasons.iter().map(|r| (r.0, r.2.as_str())).collect();
    let shortfall_of: rustc_hash::FxHashMap<Uuid, &Option<String>> =
        shortfalls.iter().map(|(id, s)| (*id, s)).collect();
    Ok(changed
        .into_iter()
        .map(|(id, seen, xmin)| Rewrite {
            id,
            seen,
            xmin,
            reason: reason_of.get(&id).map(|r| std::sync::Arc::from(*r)),
            shortfall: shortfall_of.get(&id).map(|s| s.as_deref().map(std::sync::Arc::from)),
            moved: None,
        })
        .collect())
}

#[allow(clippy::too_many_arguments)]
async fn insert_decision(
    conn: &mut sqlx::PgConnection,
    cycle_id: i64,
    fleet: &FleetView,
    workload: usize,
    kind: &str,
    node_id: Option<Uuid>,
    gpu_ids: &[Uuid],
    reason: &str,
    decider: &Decider,
) -> sqlx::Result<()> {
    let w = &fleet.workloads[workload];
    // Reasons come from untrusted policies: bounded before they are stored.
    let reason: String = reason.chars().take(1000).collect();
    sqlx::query(
        "INSERT INTO decisions (cycle_id, tenant_id, workload_id, kind, node_id, gpu_ids, reason, \
             policy_version_id, policy_name) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(cycle_id)
    .bind(fleet.tenants[w.tenant].id)
    .bind(w.id)
    .bind(kind)
    .bind(node_id)
    .bind(gpu_ids)
    .bind(reason)
    .bind(decider.policy_version_id)
    .bind(&decider.policy_name)
    .execute(conn)
    .await?;
    Ok(())
}
