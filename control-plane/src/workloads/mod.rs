//! Workloads: submission with its checks, listing, the detail view (state history and decisions)
//! and cancellation.

pub mod gangs;
pub mod idle;
pub mod logs;
pub mod transitions;

use std::collections::BTreeMap;

use airtime_protocol::container::ContainerSpec;
use airtime_protocol::model::GpuModel;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::Digest as _;
use sqlx::PgPool;
use uuid::Uuid;

use crate::auth::audit::{self, Change};
use crate::domain;
use crate::domain::Scope;
use crate::model::{MigProfile, ReplicaVariant, WHOLE_GPU_MILLI, WorkloadClass, WorkloadState};

/// A submission. Unknown fields are refused so a typo ("gpu_cout") is an error, not a default.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitWorkload {
    pub name: String,
    /// Tenant name; the `default` tenant when absent.
    #[serde(default)]
    pub tenant: Option<String>,
    pub class: WorkloadClass,
    #[serde(default)]
    pub priority: i32,
    #[serde(default)]
    pub resources: ResourceProfile,
    pub command: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub preemptible: bool,
    #[serde(default)]
    pub checkpointable: bool,
    #[serde(default)]
    pub expected_duration_s: Option<u32>,
    /// Service-level objective: a latency target for real-time inference, a deadline for batch work.
    #[serde(default)]
    pub slo: Slo,
    /// Run it in this OCI image with the node's container engine: then `command` is the image's
    /// arguments (empty: the image's own) and only nodes with an engine can take it. Absent:
    /// `command` runs as a process on the node.
    #[serde(default)]
    pub container: Option<ContainerSpec>,
    /// A gang across nodes: this many members (2 to 256), each on a node of its own with the
    /// `resources` given (so `resources.gpu_count` is GPUs per node), placed all together or not
    /// at all, started together with a rendezvous (`MASTER_ADDR`, `RANK`, `WORLD_SIZE`, …) and
    /// requeued together. Absent or 1: one node.
    #[serde(default)]
    pub nodes: Option<u32>,
}

/// What the workload promises its users.
#[derive(Debug, Clone, Default, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Slo {
    /// Target latency of a request, ms (real-time inference).
    #[serde(default)]
    pub latency_ms: Option<u32>,
    /// When the work must be done (batch inference, evaluation).
    #[serde(default)]
    pub deadline: Option<DateTime<Utc>>,
}

/// What a workload needs from a node.
#[derive(Debug, Clone, Default, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceProfile {
    /// GPUs, all on one node (a gang: all or none). 0 for CPU-only work.
    #[serde(default)]
    pub gpu_count: u32,
    /// GPU memory needed on each GPU, MiB.
    #[serde(default)]
    pub gpu_memory_mb: u64,
    /// Allowed GPU models; empty allows any. Trimmed where they are read; matched ignoring ASCII
    /// case (the SDK's rule).
    #[serde(default)]
    #[schema(value_type = Vec<String>)]
    pub gpu_models: Vec<GpuModel>,
    /// CPU needed, thousandths of a core.
    #[serde(default)]
    pub cpu_millis: u32,
    /// Host memory needed, MiB.
    #[serde(default)]
    pub memory_mb: u64,
    /// May run on CPU alone (cpu_millis, memory_mb) instead of GPUs: light inference, embeddings.
    #[serde(default)]
    pub cpu_capable: bool,
    /// A fraction of one GPU, in thousandths (1 to 1000; 250 is a quarter): with `gpu_count` 1,
    /// the workload shares a time-sliced or MPS GPU with others, `gpu_memory_mb` being its memory
    /// slice. On a GPU that is not shared it gets the whole GPU. Absent: whole GPUs.
    #[serde(default)]
    pub gpu_milli: Option<u32>,
    /// A MIG profile (`1g.10gb`, `3g.40gb`): with `gpu_count` 1, the workload runs alone on a MIG
    /// instance of that profile.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub mig_profile: Option<MigProfile>,
}

impl ResourceProfile {
    /// GPUs it holds, in thousandths (a whole GPU 1000, two 2000, a quarter 250).
    pub fn gpu_milli_per_replica(&self) -> u32 {
        if self.gpu_count == 1 {
            self.gpu_milli.unwrap_or(crate::model::WHOLE_GPU_MILLI)
        } else {
            self.gpu_count * crate::model::WHOLE_GPU_MILLI
        }
    }
}

pub const PRIORITY_RANGE: std::ops::RangeInclusive<i32> = -1000..=1000;

impl SubmitWorkload {
    /// A precise reason the submission is refused, before anything is written; `allowed_mounts`
    /// are the host directories a container may mount (the platform's `--container-mount-prefix`).
    pub fn check(&self, allowed_mounts: &[String]) -> Result<(), String> {
        if self.name.trim().is_empty() || self.name.len() > 200 || self.name.chars().any(char::is_control) {
            return Err("name must be 1 to 200 printable characters".into());
        }
        match &self.container {
            // A container's command is its image's arguments: none runs the image's own CMD.
            Some(container) => container.check(allowed_mounts)?,
            None if self.command.is_empty() || self.command[0].is_empty() => {
                return Err("command must name a program: [\"program\", \"arg\", ...]".into());
            }
            None => {}
        }
        if self.command.len() > 1024 || self.command.iter().any(|a| a.contains('\0')) {
            return Err("command has more than 1024 arguments or a NUL byte".into());
        }
        if !PRIORITY_RANGE.contains(&self.priority) {
            return Err(format!("priority must be between {} and {}", PRIORITY_RANGE.start(), PRIORITY_RANGE.end()));
        }
        for (key, value) in &self.env {
            let valid_key = !key.is_empty()
                && !key.starts_with(|c: char| c.is_ascii_digit())
                && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid_key {
                return Err(format!("env name {key:?} is not a valid variable name"));
            }
            if key == "CUDA_VISIBLE_DEVICES"
                || key == "NVIDIA_VISIBLE_DEVICES"
                || key.starts_with("CUDA_MPS_")
                || key.starts_with("AIRTIME_")
            {
                return Err(format!("env {key} is set by Airtime and cannot be overridden"));
            }
            if value.contains('\0') {
                return Err(format!("env {key} contains a NUL byte"));
            }
            // A container's environment reaches its engine as a file of lines (never on a host
            // process's own environment): a value cannot span lines there.
            if self.container.is_some() && value.contains(['\n', '\r']) {
                return Err(format!("env {key}: a container's environment value cannot hold a line break"));
            }
        }
        if self.slo.latency_ms == Some(0) {
            return Err("slo.latency_ms must be at least 1".into());
        }
        let r = &self.resources;
        if r.gpu_count > 64 {
            return Err("resources.gpu_count must be at most 64".into());
        }
        if r.gpu_count == 0 && r.cpu_millis == 0 {
            return Err("a workload without GPUs must ask for cpu_millis".into());
        }
        if r.cpu_capable && r.cpu_millis == 0 {
            return Err("a cpu_capable workload must say what it needs on CPU (resources.cpu_millis)".into());
        }
        if r.gpu_count == 0 && (r.gpu_memory_mb > 0 || !r.gpu_models.is_empty()) {
            return Err("gpu_memory_mb and gpu_models need gpu_count of at least 1".into());
        }
        if r.gpu_memory_mb > 4 * 1024 * 1024 || r.memory_mb > i64::MAX as u64 / 2 || r.cpu_millis > 1_000_000 {
            return Err("a resource request is out of range".into());
        }
        if let Some(milli) = r.gpu_milli {
            if !(1..=WHOLE_GPU_MILLI).contains(&milli) {
                return Err("resources.gpu_milli must be between 1 and 1000 (thousandths of one GPU)".into());
            }
            if milli < WHOLE_GPU_MILLI && r.gpu_count != 1 {
                return Err("resources.gpu_milli below 1000 is a share of one GPU: it needs gpu_count 1".into());
            }
        }
        if let Some(nodes) = self.nodes {
            if !(1..=gangs::MAX_MEMBERS).contains(&nodes) {
                return Err(format!("nodes must be between 1 and {} (members of a gang)", gangs::MAX_MEMBERS));
            }
            if nodes > 1
                && (r.gpu_count == 0 || r.gpu_milli.is_some_and(|m| m < WHOLE_GPU_MILLI) || r.mig_profile.is_some())
            {
                return Err("a gang across nodes (nodes > 1) takes whole GPUs on each node: resources.gpu_count of \
                            at least 1, no gpu_milli share, no mig_profile"
                    .into());
            }
            if nodes > 1 && r.cpu_capable {
                return Err("a gang across nodes runs on GPUs: it cannot be cpu_capable".into());
            }
        }
        if r.mig_profile.is_some() {
            if r.gpu_count != 1 {
                return Err("resources.mig_profile runs on one MIG instance: it needs gpu_count 1".into());
            }
            if r.gpu_milli.is_some_and(|m| m < WHOLE_GPU_MILLI) {
                return Err(
                    "resources.mig_profile and a gpu_milli share are exclusive: a MIG instance is not shared".into()
                );
            }
        }
        Ok(())
    }
}

#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct WorkloadView {
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub tenant: String,
    pub name: String,
    pub class: WorkloadClass,
    pub priority: i32,
    pub state: WorkloadState,
    pub attempt: i32,
    #[sqlx(flatten)]
    pub resources: ResourcesRow,
    pub preemptible: bool,
    pub checkpointable: bool,
    pub expected_duration_s: Option<i32>,
    /// Target latency, ms (real-time inference).
    pub slo_latency_ms: Option<i32>,
    /// Deadline (batch work).
    pub deadline: Option<DateTime<Utc>>,
    /// Why it was last preempted.
    pub preempted_reason: Option<String>,
    pub command: Vec<String>,
    #[schema(value_type = Object)]
    pub env: serde_json::Value,
    pub node_id: Option<Uuid>,
    pub last_node_id: Option<Uuid>,
    pub gpu_ids: Vec<Uuid>,
    /// Why it is not running yet, in words (pending workloads only).
    pub pending_reason: Option<String>,
    /// Its place in the queue of pending work that competes for the same resources (the same
    /// GPU models, or CPU only), ordered by priority and then submission: 1 is next. Pending only;
    /// absent from the answer to a submission (read the workload for it).
    pub queue_position: Option<i64>,
    /// What it is short of against the fleet at the last scheduling cycle ("needs 4 free GPUs of
    /// H100 on one node; the best ready node (n7) has 2"); absent when a node had room for it.
    pub shortfall: Option<String>,
    pub exit_code: Option<i32>,
    pub message: Option<String>,
    pub submitted_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// The service this workload is a replica of (`None` for a job).
    pub service_id: Option<Uuid>,
    /// Which of the service's templates it runs: `gpu` (the main one) or `cpu`.
    pub replica_variant: Option<ReplicaVariant>,
    /// The OCI image it runs in; absent: a process on its node.
    #[schema(value_type = Option<ContainerSpec>)]
    pub container: Option<sqlx::types::Json<ContainerSpec>>,
    /// The gang it is a member of (its rank-0 member's id); absent: a workload on one node.
    pub gang_id: Option<Uuid>,
    /// Its rank in the gang, `0 .. gang_size`.
    pub gang_rank: Option<i32>,
    /// Members of its gang.
    pub gang_size: Option<i32>,
}

/// One member of a gang, as a member's detail lists them.
#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct GangMember {
    pub id: Uuid,
    pub rank: i32,
    pub state: WorkloadState,
    pub attempt: i32,
    pub node_id: Option<Uuid>,
    /// The name of the node it runs on, or last ran on.
    pub node: Option<String>,
}

#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct ResourcesRow {
    pub gpu_count: i32,
    pub gpu_memory_mb: i64,
    pub gpu_models: Vec<String>,
    pub cpu_millis: i32,
    pub memory_mb: i64,
    pub cpu_capable: bool,
    /// Its share of one GPU, thousandths (1000: whole GPUs).
    pub gpu_milli: i32,
    pub mig_profile: Option<String>,
}

#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct WorkloadEvent {
    pub at: DateTime<Utc>,
    pub from_state: Option<WorkloadState>,
    pub to_state: WorkloadState,
    pub attempt: i32,
    pub detail: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WorkloadDetail {
    #[serde(flatten)]
    pub workload: WorkloadView,
    pub history: Vec<WorkloadEvent>,
    pub decisions: Vec<crate::decisions::DecisionView>,
    /// The last lines its latest attempt printed (stdout and stderr in order), when it failed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub last_output: Vec<String>,
    /// Every member of its gang by rank, where each runs; empty for a workload on one node.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gang: Vec<GangMember>,
}

/// How a read of workloads finds each pending one's place in its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    /// Counted for the one workload read: the pending work of its kind ahead of it.
    Counted,
    /// Ranked once for a list: every pending workload's place in one pass (`ranked`, a
    /// materialized CTE the list's statement defines), joined to the page.
    Ranked,
    /// Not counted: a submission's answer. Counting the queue was the one part of a submission
    /// that grew with it (100 submissions/s against 10,000 waiting: most of a core of
    /// PostgreSQL, submit p50 4 → 29 ms); reading the workload gives its place.
    Omitted,
}

/// The workload view's columns and joins, with `position` deciding how `queue_position` is found.
fn workload_select(position: Position) -> String {
    let (queue_position, ranked) = match position {
        Position::Counted => (
            "CASE WHEN w.state = 'pending' THEN (SELECT count(*) + 1 FROM workloads p WHERE p.state = 'pending' \
                 AND (p.gpu_count > 0) = (w.gpu_count > 0) AND p.gpu_models = w.gpu_models \
                 AND (p.priority > w.priority OR (p.priority = w.priority AND (p.submitted_at, p.id) < (w.submitted_at, w.id)))) \
             END",
            "",
        ),
        // The same order as the count: priority, then submission (`submitted_at, id` is unique).
        Position::Ranked => ("q.position", " LEFT JOIN ranked q ON q.id = w.id"),
        Position::Omitted => ("NULL::bigint", ""),
    };
    format!(
        "SELECT w.id, w.tenant_id, t.name AS tenant, w.name, w.class, w.priority, w.state, \
         w.attempt, w.gpu_count, w.gpu_memory_mb, w.gpu_models, w.cpu_millis, w.memory_mb, w.cpu_capable, w.gpu_milli, w.mig_profile, \
         w.preemptible, w.checkpointable, w.expected_duration_s, w.slo_latency_ms, w.deadline, w.preempted_reason, w.command, w.env, w.node_id, w.last_node_id, \
         COALESCE((SELECT array_agg(g.gpu_id ORDER BY g.gpu_id) FROM gpu_grants g WHERE g.workload_id = w.id), '{{}}') AS gpu_ids, \
         w.pending_reason, {queue_position} AS queue_position, \
         CASE WHEN w.state = 'pending' THEN w.shortfall END AS shortfall, w.exit_code, w.message, w.submitted_at, w.started_at, w.finished_at, w.service_id, \
         w.replica_variant, w.container, w.gang_id, w.gang_rank, w.gang_size \
         FROM workloads w JOIN tenants t ON t.id = w.tenant_id{ranked}"
    )
}

/// Submits a workload for `caller`: into the caller's own tenant (a named tenant must be it), or
/// for a platform admin into the named tenant (`default` when none is named). Another tenant's
/// name is refused exactly like a name that does not exist.
/// A client's `Idempotency-Key`: 1 to 255 visible ASCII characters, parsed where it enters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn parse(key: &str) -> Result<IdempotencyKey, String> {
        if key.is_empty() || key.len() > 255 || !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("Idempotency-Key must be 1 to 255 visible ASCII characters".into());
        }
        Ok(IdempotencyKey(key.to_owned()))
    }
}

/// A retry's insert lost the race to an earlier one with the same key (never answered).
const RACED: &str = "idempotency_race";

/// How long a submission's idempotency key is remembered.
pub const IDEMPOTENCY_WINDOW_HOURS: i32 = 24;

/// Queues a workload. With an idempotency key, a retry of the same request within a day returns
/// the workload the first one created (`replayed` true) instead of queueing it twice; the same key
/// with a different request is refused.
pub async fn submit(
    db: &PgPool,
    req: &SubmitWorkload,
    scope: &Scope,
    key: Option<&IdempotencyKey>,
    rules: &SubmitRules<'_>,
) -> domain::Result<(WorkloadView, bool)> {
    match submit_once(db, req, scope, key, rules).await {
        // Two retries raced and the other committed first: answer with its workload.
        Err(domain::Error::Conflict { code: RACED, .. }) => submit_once(db, req, scope, key, rules).await,
        other => other,
    }
}

/// What a submission is judged by beside the request itself.
pub struct SubmitRules<'a> {
    /// The host paths a container may mount (`--container-mount-prefix`).
    pub allowed_mounts: &'a [String],
    /// How long a telemetry sample stands for its GPU (the usage budgets count).
    pub usage_hold: std::time::Duration,
}

async fn submit_once(
    db: &PgPool,
    req: &SubmitWorkload,
    scope: &Scope,
    key: Option<&IdempotencyKey>,
    rules: &SubmitRules<'_>,
) -> domain::Result<(WorkloadView, bool)> {
    scope.require_role(crate::auth::Role::TenantMember)?;
    req.check(rules.allowed_mounts).map_err(|m| domain::Error::invalid("invalid_workload", m))?;
    let mut tx = db.begin().await?;
    let tenant_id = crate::tenancy::resolve_for_write(&mut tx, scope, req.tenant.as_deref()).await?;
    // The request as parsed, not its bytes: a retry that reorders fields is the same request.
    let digest = key.map(|_| hex::encode(sha2::Sha256::digest(format!("{req:?}").as_bytes())));
    if let Some(IdempotencyKey(key)) = key {
        sqlx::query(
            "UPDATE workloads SET idempotency_key = NULL WHERE tenant_id = $1 AND idempotency_key = $2 \
             AND submitted_at < now() - make_interval(hours => $3)",
        )
        .bind(tenant_id)
        .bind(key)
        .bind(IDEMPOTENCY_WINDOW_HOURS)
        .execute(&mut *tx)
        .await?;
        let first: Option<(Uuid, Option<String>)> = sqlx::query_as(
            "SELECT id, idempotency_digest FROM workloads WHERE tenant_id = $1 AND idempotency_key = $2",
        )
        .bind(tenant_id)
        .bind(key)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some((first_id, first_digest)) = first {
            if first_digest != digest {
                return Err(domain::Error::invalid(
                    "idempotency_key_reused",
                    "this Idempotency-Key was used for a different request in the last day",
                ));
            }
            tx.commit().await?;
            let view = read(db, first_id, Position::Omitted).await?.ok_or(domain::Error::NotFound("workload"))?;
            return Ok((view, true));
        }
    }
    // Past a budget: refused (`stop`), or admitted as best effort or with a warning.
    let admission = crate::budgets::admission(&mut tx, tenant_id, rules.usage_hold).await?;
    let best_effort;
    let (req, budget_note) = match &admission {
        crate::budgets::Admission::Admit => (req, None),
        crate::budgets::Admission::Warned(note) => (req, Some(note.as_str())),
        crate::budgets::Admission::BestEffort(note) => {
            let mut lowered = req.clone();
            lowered.priority = 0;
            lowered.preemptible = true;
            best_effort = lowered;
            (&best_effort, Some(note.as_str()))
        }
    };
    let id = Uuid::now_v7();
    // A gang is its members' rows, the rank-0 member's id naming the gang; the key is on it alone.
    let members = req.nodes.unwrap_or(1);
    for rank in 0..members {
        let member = if rank == 0 { id } else { Uuid::now_v7() };
        let row = NewWorkload {
            id: member,
            tenant_id,
            req,
            idempotency: key.filter(|_| rank == 0).map(|IdempotencyKey(k)| k.as_str()).zip(digest.as_deref()),
            replica: None,
            pending_reason: "waiting for the next scheduling cycle",
            gang: (members > 1).then_some((id, rank, members)),
        };
        insert(&mut tx, &row).await.map_err(|err| match &err {
            sqlx::Error::Database(e) if key.is_some() && e.is_unique_violation() => {
                domain::Error::conflict(RACED, "a retry with the same Idempotency-Key committed first")
            }
            _ => domain::Error::from(err),
        })?;
        let mut detail =
            if members > 1 { format!("submitted (gang member rank {rank} of {members})") } else { "submitted".into() };
        if let Some(note) = budget_note {
            detail.push_str("; ");
            detail.push_str(note);
        }
        transitions::record_event(&mut tx, member, tenant_id, None, WorkloadState::Pending, 0, &detail).await?;
    }
    audit::record(
        &mut tx,
        &scope.actor,
        Change::new("workload.submit", "workload", id).tenant(Some(tenant_id)).detail(serde_json::json!({
            "name": req.name, "class": req.class, "priority": req.priority, "gpu_count": req.resources.gpu_count,
            "nodes": req.nodes,
            "image": req.container.as_ref().map(|c| &c.image),
        })),
    )
    .await?;
    tx.commit().await?;
    Ok((read(db, id, Position::Omitted).await?.ok_or(domain::Error::NotFound("workload"))?, false))
}

/// A workload row to write: a submission's, or a service replica the autoscaler starts.
pub struct NewWorkload<'a> {
    pub id: Uuid,
    pub tenant_id: Uuid,
    /// What it runs and needs (checked by [`SubmitWorkload::check`] before it gets here).
    pub req: &'a SubmitWorkload,
    /// The Idempotency-Key and the request's digest.
    pub idempotency: Option<(&'a str, &'a str)>,
    /// The service it is a replica of, and which template it runs.
    pub replica: Option<(Uuid, ReplicaVariant)>,
    pub pending_reason: &'a str,
    /// A gang member: (the gang's id, its rank, the gang's members).
    pub gang: Option<(Uuid, u32, u32)>,
}

/// Writes a pending workload (its first event is the caller's to record).
pub async fn insert(conn: &mut sqlx::PgConnection, w: &NewWorkload<'_>) -> sqlx::Result<()> {
    let (req, r) = (w.req, &w.req.resources);
    sqlx::query(
        "INSERT INTO workloads (id, tenant_id, name, class, priority, gpu_count, gpu_memory_mb, gpu_models, \
             cpu_millis, memory_mb, cpu_capable, preemptible, checkpointable, expected_duration_s, command, env, \
             slo_latency_ms, deadline, state, pending_reason, idempotency_key, idempotency_digest, gpu_milli, \
             mig_profile, service_id, replica_variant, container, gang_id, gang_rank, gang_size) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, 'pending', \
                 $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29)",
    )
    .bind(w.id)
    .bind(w.tenant_id)
    .bind(&req.name)
    .bind(req.class)
    .bind(req.priority)
    .bind(r.gpu_count as i32)
    .bind(r.gpu_memory_mb as i64)
    .bind(r.gpu_models.iter().map(GpuModel::as_str).collect::<Vec<_>>())
    .bind(r.cpu_millis as i32)
    .bind(r.memory_mb as i64)
    .bind(r.cpu_capable)
    .bind(req.preemptible)
    .bind(req.checkpointable)
    .bind(req.expected_duration_s.map(|d| d.min(i32::MAX as u32) as i32))
    .bind(&req.command)
    .bind(serde_json::to_value(&req.env).unwrap_or_default())
    .bind(req.slo.latency_ms.map(|l| l.min(i32::MAX as u32) as i32))
    .bind(req.slo.deadline)
    .bind(w.pending_reason)
    .bind(w.idempotency.map(|(k, _)| k))
    .bind(w.idempotency.map(|(_, d)| d))
    .bind(r.gpu_milli.unwrap_or(WHOLE_GPU_MILLI) as i32)
    .bind(r.mig_profile.as_ref().map(MigProfile::as_str))
    .bind(w.replica.map(|(s, _)| s))
    .bind(w.replica.map(|(_, v)| v))
    .bind(req.container.as_ref().map(sqlx::types::Json))
    .bind(w.gang.map(|(g, _, _)| g))
    .bind(w.gang.map(|(_, rank, _)| rank as i32))
    .bind(w.gang.map(|(_, _, size)| size as i32))
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn get(db: &PgPool, id: Uuid) -> sqlx::Result<Option<WorkloadView>> {
    read(db, id, Position::Counted).await
}

async fn read(db: &PgPool, id: Uuid, position: Position) -> sqlx::Result<Option<WorkloadView>> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!("{} WHERE w.id = $1", workload_select(position))))
        .bind(id)
        .fetch_optional(db)
        .await
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct WorkloadFilter {
    pub state: Option<WorkloadState>,
    pub tenant: Option<String>,
    pub class: Option<WorkloadClass>,
    pub node_id: Option<Uuid>,
    /// A service's replicas.
    pub service_id: Option<Uuid>,
    /// The next page: only workloads submitted before this one (the last one of the previous
    /// page; keyset pagination, so a page costs the same however deep it is).
    pub before: Option<Uuid>,
    /// Most recent first; at most 1000, 100 by default.
    pub limit: Option<u32>,
    /// The caller's tenant scope (set by the handler, never from the query): `None` for all.
    #[serde(skip)]
    pub tenant_id: Option<Uuid>,
}

pub async fn list(db: &PgPool, f: &WorkloadFilter) -> sqlx::Result<Vec<WorkloadView>> {
    // A page that may hold pending work ranks the queue once, not once per pending row (a page of
    // 100 waiting workloads counted a queue of 10,000 a hundred times).
    //
    // The page is chosen first, then the queue is ranked once if the page holds pending work, each
    // a materialized CTE: computed once per statement whatever plan PostgreSQL picks. Why: the
    // ranking was a subquery joined to every workload, and a plan that must have run it once per
    // row (not captured; likely a prepared statement's plan on fresh statistics) took 595 s at
    // 15,000 workloads and held a pooled connection all along (BENCHMARKS.md, "Reads at scale").
    let position = match f.state {
        None | Some(WorkloadState::Pending) => Position::Ranked,
        Some(_) => Position::Omitted,
    };
    let ranked = match position {
        Position::Ranked => {
            ", ranked AS MATERIALIZED (SELECT id, row_number() OVER (PARTITION BY gpu_count > 0, gpu_models \
                                      ORDER BY priority DESC, submitted_at, id) AS position \
                                      FROM workloads WHERE state = 'pending' \
                                      AND EXISTS (SELECT 1 FROM page WHERE page.state = 'pending'))"
        }
        _ => "",
    };
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "WITH page AS MATERIALIZED ( \
           SELECT w.id, w.state FROM workloads w JOIN tenants t ON t.id = w.tenant_id \
           WHERE ($1::text IS NULL OR w.state = $1) AND ($2::text IS NULL OR t.name = $2) \
           AND ($3::text IS NULL OR w.class = $3) AND ($4::uuid IS NULL OR w.node_id = $4) \
           AND ($6::uuid IS NULL OR w.tenant_id = $6) AND ($7::uuid IS NULL OR w.service_id = $7) \
           AND ($8::uuid IS NULL OR (w.submitted_at, w.id) < \
                (SELECT c.submitted_at, c.id FROM workloads c WHERE c.id = $8 \
                  AND ($6::uuid IS NULL OR c.tenant_id = $6))) \
           ORDER BY w.submitted_at DESC, w.id DESC LIMIT $5){ranked} \
         {} WHERE w.id IN (SELECT id FROM page) ORDER BY w.submitted_at DESC, w.id DESC",
        workload_select(position)
    )))
    .bind(f.state)
    .bind(&f.tenant)
    .bind(f.class)
    .bind(f.node_id)
    .bind(i64::from(f.limit.unwrap_or(100).clamp(1, 1000)))
    .bind(f.tenant_id)
    .bind(f.service_id)
    .bind(f.before)
    .fetch_all(db)
    .await
}

/// A workload with its history and decisions; another tenant's is not found.
pub async fn detail(db: &PgPool, id: Uuid, scope: &Scope) -> domain::Result<WorkloadDetail> {
    let workload = get(db, id).await?.ok_or(domain::Error::NotFound("workload"))?;
    scope.ensure_visible(workload.tenant_id, "workload")?;
    let history = sqlx::query_as(
        "SELECT at, from_state, to_state, attempt, detail FROM workload_events WHERE workload_id = $1 ORDER BY id",
    )
    .bind(id)
    .fetch_all(db)
    .await?;
    let decisions = crate::decisions::list_decisions(
        db,
        &crate::decisions::DecisionFilter { workload_id: Some(id), ..Default::default() },
    )
    .await?;
    let last_output = if workload.state == WorkloadState::Failed {
        logs::last_lines(db, id, workload.attempt, LAST_OUTPUT_LINES).await?
    } else {
        Vec::new()
    };
    let gang = match workload.gang_id {
        Some(gang_id) => {
            sqlx::query_as(
                "SELECT w.id, w.gang_rank AS rank, w.state, w.attempt, w.node_id, n.name AS node \
                 FROM workloads w LEFT JOIN nodes n ON n.id = COALESCE(w.node_id, w.last_node_id) \
                 WHERE w.gang_id = $1 ORDER BY w.gang_rank",
            )
            .bind(gang_id)
            .fetch_all(db)
            .await?
        }
        None => Vec::new(),
    };
    Ok(WorkloadDetail { workload, history, decisions, last_output, gang })
}

/// Lines of a failed attempt's output its detail shows.
const LAST_OUTPUT_LINES: usize = 20;

/// Cancels a workload: a pending one at once, one on a node through its agent (SIGTERM, then
/// SIGKILL after the grace period). Returns whether a node's desired state changed. Another
/// tenant's workload is not found; the change is audited in the same transaction.
pub async fn cancel(db: &PgPool, id: Uuid, scope: &Scope) -> domain::Result<(WorkloadView, bool)> {
    let mut tx = db.begin().await?;
    /// (tenant, state, attempt, node, gang)
    type Row = (Uuid, WorkloadState, i32, Option<Uuid>, Option<Uuid>);
    let row: Option<Row> =
        sqlx::query_as("SELECT tenant_id, state, attempt, node_id, gang_id FROM workloads WHERE id = $1 FOR UPDATE")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
    let Some((tenant_id, state, attempt, node_id, gang_id)) = row else {
        return Err(domain::Error::NotFound("workload"));
    };
    scope.ensure_can_write(tenant_id, "workload")?;
    let node_changed = match state {
        WorkloadState::Pending => {
            transitions::cancel_pending(&mut tx, id, tenant_id, attempt, "cancelled").await?;
            false
        }
        WorkloadState::Scheduled | WorkloadState::Running | WorkloadState::Preempting => {
            transitions::request_cancel(
                &mut tx,
                id,
                tenant_id,
                state,
                attempt,
                node_id,
                "cancel requested; stopping on its node",
            )
            .await?;
            true
        }
        WorkloadState::Cancelling => false,
        WorkloadState::Succeeded | WorkloadState::Failed | WorkloadState::Cancelled => {
            return Err(domain::Error::conflict(
                "already_finished",
                format!("workload already finished ({})", state.as_str()),
            ));
        }
    };
    // Cancelling a member cancels its gang.
    let gang_changed = match gang_id {
        Some(gang) => gangs::follow(&mut tx, &[gang]).await?,
        None => false,
    };
    tx.commit().await?;
    let view = get(db, id).await?.ok_or(domain::Error::NotFound("workload"))?;
    Ok((view, node_changed || gang_changed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> SubmitWorkload {
        serde_json::from_value(serde_json::json!({
            "name": "train-llama", "class": "training", "command": ["python", "train.py"],
            "resources": {"gpu_count": 8, "gpu_memory_mb": 40000}
        }))
        .expect("valid json")
    }

    #[test]
    fn a_reasonable_submission_passes() {
        assert_eq!(valid().check(&[]), Ok(()));
    }

    #[test]
    fn each_bad_field_is_named() {
        type Case = (fn(&mut SubmitWorkload), &'static str);
        let cases: Vec<Case> = vec![
            (|w| w.name = String::new(), "name"),
            (|w| w.command = vec![], "command"),
            (|w| w.priority = 5000, "priority"),
            (|w| w.resources.gpu_count = 65, "gpu_count"),
            (
                |w| {
                    w.env.insert("CUDA_VISIBLE_DEVICES".into(), "0".into());
                },
                "CUDA_VISIBLE_DEVICES",
            ),
            (
                |w| {
                    w.env.insert("1BAD".into(), "x".into());
                },
                "1BAD",
            ),
            (
                |w| {
                    w.resources.gpu_count = 0;
                    w.resources.gpu_memory_mb = 0;
                },
                "cpu_millis",
            ),
        ];
        for (break_it, expected) in cases {
            let mut w = valid();
            break_it(&mut w);
            let err = w.check(&[]).expect_err(expected);
            assert!(err.contains(expected), "{err:?} should mention {expected}");
        }
    }

    #[test]
    fn unknown_fields_are_refused() {
        let err = serde_json::from_value::<SubmitWorkload>(serde_json::json!({
            "name": "x", "class": "training", "command": ["true"], "gpu_cout": 1
        }))
        .expect_err("typo");
        assert!(err.to_string().contains("gpu_cout"), "{err}");
    }
}
