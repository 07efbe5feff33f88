//! A node's desired state, as its agent's long-poll reads it (docs/agent-protocol.md): the version
//! the control plane bumps at every change, and the assignments at that version.

use airtime_protocol::agent::{Assignment, AssignmentAction, DesiredState};
use sqlx::PgPool;
use uuid::Uuid;

use crate::model::{WHOLE_GPU_MILLI, WorkloadState};

/// The node's desired-state version (`None`: no such node).
pub async fn version(db: &PgPool, node_id: Uuid) -> sqlx::Result<Option<u64>> {
    let row: Option<(i64,)> =
        sqlx::query_as("SELECT desired_version FROM nodes WHERE id = $1").bind(node_id).fetch_optional(db).await?;
    Ok(row.map(|(v,)| v.max(0) as u64))
}

#[derive(sqlx::FromRow)]
struct AssignmentRow {
    id: Uuid,
    attempt: i32,
    state: WorkloadState,
    command: Vec<String>,
    env: serde_json::Value,
    gpu_indices: Vec<i32>,
    reason: Option<String>,
    /// The smallest share among its grants (1000 when it holds whole GPUs), and its memory slice.
    share_milli: Option<i32>,
    share_memory_mb: Option<i64>,
    container: Option<sqlx::types::Json<airtime_protocol::container::ContainerSpec>>,
    cpu_millis: i32,
    memory_mb: i64,
    attempt_token: Option<Uuid>,
    /// A member of a gang across nodes.
    in_gang: bool,
    /// A replica of a service priced per token: where the agent reads it.
    serving: Option<sqlx::types::Json<crate::services::serving::ServingSpec>>,
}

/// What the node should run and stop now, at `version`: its workloads with their grants, the
/// reason of a stop, the grace period.
pub async fn state(db: &PgPool, node_id: Uuid, version: u64) -> sqlx::Result<DesiredState> {
    let grace_period_ms = {
        let mut conn = db.acquire().await?;
        crate::settings::load(&mut conn).await?.grace_period_ms()
    };
    let rows: Vec<AssignmentRow> = sqlx::query_as(
        "SELECT w.id, w.attempt, w.state, w.command, w.env, w.container, w.cpu_millis, w.memory_mb, w.attempt_token, \
                w.gang_id IS NOT NULL AS in_gang, \
                (SELECT s.serving FROM services s WHERE s.id = w.service_id) AS serving, \
                COALESCE((SELECT array_agg(g.device_index ORDER BY g.device_index) FROM gpu_grants gr \
                          JOIN gpus g ON g.id = gr.gpu_id WHERE gr.workload_id = w.id), '{}') AS gpu_indices, \
                (SELECT e.detail FROM workload_events e WHERE e.workload_id = w.id ORDER BY e.id DESC LIMIT 1) AS reason, \
                (SELECT min(gr.milli) FROM gpu_grants gr WHERE gr.workload_id = w.id) AS share_milli, \
                (SELECT max(gr.memory_mb) FROM gpu_grants gr WHERE gr.workload_id = w.id) AS share_memory_mb \
         FROM workloads w WHERE w.node_id = $1 ORDER BY w.submitted_at",
    )
    .bind(node_id)
    .fetch_all(db)
    .await?;
    // A gang member's rendezvous; an agent before protocol 1.2 cannot hold a member, so it is not
    // shown one until its gang is released. A node that holds no gang member (the common case)
    // pays nothing for either.
    let (gangs, holds) = if rows.iter().any(|r| r.in_gang) {
        let gangs = crate::workloads::gangs::rendezvous(db, node_id, version).await?;
        let holds: bool = sqlx::query_scalar(
            "SELECT COALESCE(string_to_array(agent_protocol, '.')::int[] >= '{1,2}', false) FROM nodes WHERE id = $1",
        )
        .bind(node_id)
        .fetch_optional(db)
        .await?
        .unwrap_or(false);
        (gangs, holds)
    } else {
        (std::collections::HashMap::new(), true)
    };
    let assignments = rows
        .into_iter()
        .filter(|r| holds || r.state != WorkloadState::Scheduled || gangs.get(&r.id).is_none_or(|g| !g.hold))
        .map(|r| {
            let run = matches!(r.state, WorkloadState::Scheduled | WorkloadState::Running);
            Assignment {
                workload_id: r.id,
                attempt: u32::try_from(r.attempt).unwrap_or(0),
                action: if run { AssignmentAction::Run } else { AssignmentAction::Stop },
                reason: if run { None } else { r.reason },
                command: r.command,
                env: serde_json::from_value(r.env).unwrap_or_default(),
                gpu_indices: r.gpu_indices.into_iter().filter_map(|i| u32::try_from(i).ok()).collect(),
                grace_period_ms,
                // Its grant's share: on an MPS GPU the agent starts it with that share of the SMs;
                // a MIG instance's grant is its share of the physical GPU, run alone on it.
                gpu_milli: r.share_milli.and_then(|m| u32::try_from(m).ok()).filter(|&m| m < WHOLE_GPU_MILLI),
                gpu_memory_mb: r.share_memory_mb.and_then(|m| u64::try_from(m).ok()).filter(|&m| m > 0),
                container: r.container.map(|c| c.0),
                cpu_millis: u32::try_from(r.cpu_millis).ok().filter(|&c| c > 0),
                memory_mb: u64::try_from(r.memory_mb).ok().filter(|&m| m > 0),
                attempt_token: r.attempt_token.map(|t| t.simple().to_string()),
                gang: gangs.get(&r.id).cloned(),
                serving: r.serving.map(|s| s.0.endpoints()),
            }
        })
        .collect();
    Ok(DesiredState { version, assignments })
}
