//! Workloads' output: stored as the agents ship it (`store`), kept within a byte limit per
//! workload and per tenant so a chatty job cannot fill the database, and read back by attempt,
//! stream, tail and cursor (`read`) under the workload's tenant isolation.

use std::collections::HashMap;

use airtime_protocol::agent::{LogBatch, LogStream, MAX_LOG_BATCH_CHUNKS, MAX_LOG_CHUNK_BYTES};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use uuid::Uuid;

use crate::domain;
use crate::domain::Scope;

/// How much output is kept.
#[derive(Debug, Clone, Copy)]
pub struct LogLimits {
    /// Per workload (all its attempts), bytes.
    pub per_workload: i64,
    /// Per tenant (all its workloads), bytes.
    pub per_tenant: i64,
}

/// What a batch did.
#[derive(Debug, Default, Serialize, utoipa::ToSchema)]
pub struct Stored {
    /// Chunks stored now.
    pub stored: usize,
    /// Chunks already stored (a batch sent again).
    pub duplicates: usize,
    /// Chunks of workloads this node never ran (or attempts it is not running), ignored.
    pub ignored: usize,
}

/// Checks a batch's shape: the bounds of the protocol.
pub fn check(batch: &LogBatch) -> Result<(), String> {
    if batch.chunks.len() > MAX_LOG_BATCH_CHUNKS {
        return Err(format!("a batch holds at most {MAX_LOG_BATCH_CHUNKS} chunks, not {}", batch.chunks.len()));
    }
    for (i, c) in batch.chunks.iter().enumerate() {
        if c.text.len() > MAX_LOG_CHUNK_BYTES {
            return Err(format!("chunk {i}: {} bytes of text (at most {MAX_LOG_CHUNK_BYTES})", c.text.len()));
        }
        if c.attempt == 0 || c.attempt > i32::MAX as u32 || c.seq > i64::MAX as u64 {
            return Err(format!("chunk {i}: attempt or seq out of range"));
        }
    }
    Ok(())
}

/// Stores a node's batch in one transaction: each chunk of a workload that runs (or ran) its
/// attempt on this node, once, then trims the workloads and tenants past their limits.
pub async fn store(db: &PgPool, node_id: Uuid, batch: &LogBatch, limits: LogLimits) -> sqlx::Result<Stored> {
    let mut tx = db.begin().await?;
    let mut out = Stored::default();
    // Per workload: its tenant if this node ran the attempt (looked up once per attempt), and
    // the bytes stored now (counted once per workload and tenant after the inserts).
    let mut owners: HashMap<(Uuid, u32), Option<Uuid>> = HashMap::new();
    let mut added: Vec<(Uuid, Uuid, i64)> = Vec::new();
    for chunk in &batch.chunks {
        let key = (chunk.workload_id, chunk.attempt);
        let owner = match owners.get(&key) {
            Some(owner) => *owner,
            None => {
                // The attempt ran here: the node is its current or latest one, and no later
                // attempt has begun.
                let owner: Option<(Uuid,)> = sqlx::query_as(
                    "SELECT tenant_id FROM workloads WHERE id = $1 AND $2 IN (node_id, last_node_id) AND attempt >= $3",
                )
                .bind(chunk.workload_id)
                .bind(node_id)
                .bind(chunk.attempt as i32)
                .fetch_optional(&mut *tx)
                .await?;
                let owner = owner.map(|(t,)| t);
                owners.insert(key, owner);
                owner
            }
        };
        let Some(tenant_id) = owner else {
            out.ignored += 1;
            continue;
        };
        // PostgreSQL text holds no NUL.
        let text = chunk.text.replace('\0', "\u{FFFD}");
        let inserted: Option<(i32,)> = sqlx::query_as(
            "INSERT INTO workload_logs (workload_id, tenant_id, attempt, stream, seq, text, bytes, dropped_lines) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (workload_id, attempt, stream, seq) DO NOTHING \
             RETURNING bytes",
        )
        .bind(chunk.workload_id)
        .bind(tenant_id)
        .bind(chunk.attempt as i32)
        .bind(chunk.stream)
        .bind(chunk.seq as i64)
        .bind(&text)
        .bind(text.len() as i32)
        .bind(chunk.dropped_lines.min(i64::MAX as u64) as i64)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((bytes,)) = inserted else {
            out.duplicates += 1;
            continue;
        };
        out.stored += 1;
        match added.iter_mut().find(|(w, _, _)| *w == chunk.workload_id) {
            Some(entry) => entry.2 += i64::from(bytes),
            None => added.push((chunk.workload_id, tenant_id, i64::from(bytes))),
        }
    }
    let mut tenants: Vec<(Uuid, i64)> = Vec::new();
    for &(workload, tenant, bytes) in &added {
        sqlx::query("UPDATE workloads SET log_bytes = log_bytes + $2 WHERE id = $1")
            .bind(workload)
            .bind(bytes)
            .execute(&mut *tx)
            .await?;
        match tenants.iter_mut().find(|(t, _)| *t == tenant) {
            Some(entry) => entry.1 += bytes,
            None => tenants.push((tenant, bytes)),
        }
    }
    for &(tenant, bytes) in &tenants {
        sqlx::query(
            "INSERT INTO tenant_log_usage (tenant_id, bytes) VALUES ($1, $2) \
             ON CONFLICT (tenant_id) DO UPDATE SET bytes = tenant_log_usage.bytes + EXCLUDED.bytes",
        )
        .bind(tenant)
        .bind(bytes)
        .execute(&mut *tx)
        .await?;
    }
    for &(workload, _, _) in &added {
        trim(&mut tx, "workload_id", workload, limits.per_workload).await?;
    }
    for &(tenant, _) in &tenants {
        trim(&mut tx, "tenant_id", tenant, limits.per_tenant).await?;
    }
    tx.commit().await?;
    Ok(out)
}

/// Deletes the oldest chunks of a workload or tenant (`column`) past `limit` bytes, keeping the
/// byte counts true. Cheap when within the limit: the counters say so first.
async fn trim(tx: &mut sqlx::PgConnection, column: &str, id: Uuid, limit: i64) -> sqlx::Result<()> {
    let used: Option<(i64,)> = if column == "workload_id" {
        sqlx::query_as("SELECT log_bytes FROM workloads WHERE id = $1").bind(id).fetch_optional(&mut *tx).await?
    } else {
        sqlx::query_as("SELECT bytes FROM tenant_log_usage WHERE tenant_id = $1")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?
    };
    if used.is_none_or(|(u,)| u <= limit) {
        return Ok(());
    }
    // Newest first, keep while the running total stays within the limit.
    let dropped: Vec<(Uuid, Uuid, i32)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "DELETE FROM workload_logs WHERE id IN ( \
           SELECT id FROM (SELECT id, sum(bytes) OVER (ORDER BY id DESC) AS newer FROM workload_logs \
                           WHERE {column} = $1) x WHERE newer > $2) \
         RETURNING workload_id, tenant_id, bytes"
    )))
    .bind(id)
    .bind(limit)
    .fetch_all(&mut *tx)
    .await?;
    for (workload, tenant, bytes) in dropped {
        sqlx::query(
            "UPDATE workloads SET log_bytes = log_bytes - $2, log_dropped_bytes = log_dropped_bytes + $2 WHERE id = $1",
        )
        .bind(workload)
        .bind(i64::from(bytes))
        .execute(&mut *tx)
        .await?;
        sqlx::query("UPDATE tenant_log_usage SET bytes = bytes - $2 WHERE tenant_id = $1")
            .bind(tenant)
            .bind(i64::from(bytes))
            .execute(&mut *tx)
            .await?;
    }
    Ok(())
}

/// Which output to read.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct LogQuery {
    /// One attempt (1, 2, …); every attempt when absent.
    #[serde(default)]
    pub attempt: Option<u32>,
    /// `stdout` or `stderr`; both when absent.
    #[serde(default)]
    pub stream: Option<LogStream>,
    /// Only the last this many lines (at most 10,000).
    #[serde(default)]
    pub tail: Option<u32>,
    /// Only output stored after this cursor (from an earlier answer's `cursor`).
    #[serde(default)]
    pub after: Option<i64>,
    /// Keep the answer open and send output as it arrives (JSON Lines), until the workload ends
    /// or `wait_s` passes (a client reconnects with `after` set to the last line's cursor).
    #[serde(default)]
    pub follow: bool,
    /// With `follow`: the longest the answer stays open, seconds (default `--log-follow-default-s`, 20; at most 3600).
    #[serde(default)]
    #[param(maximum = 3600)]
    pub wait_s: Option<u32>,
}

/// One line of output.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct LogLine {
    /// Where it is: pass as `after` to read what came after its chunk.
    pub cursor: i64,
    pub attempt: i32,
    pub stream: LogStream,
    /// When the agent's chunk holding it was stored.
    pub at: DateTime<Utc>,
    pub text: String,
}

/// Output, oldest first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Logs {
    pub workload_id: Uuid,
    pub lines: Vec<LogLine>,
    /// Pass as `after` to read only what came since.
    pub cursor: i64,
    /// Bytes of this workload's earliest output dropped by the retention limits.
    pub dropped_bytes: i64,
    /// Lines the agent could not ship (its buffer filled while the control plane was unreachable).
    pub lost_lines: i64,
}

/// The most lines one answer holds.
pub const MAX_LINES: usize = 10_000;

/// A workload's output bytes dropped by retention and whether it has ended, if the caller may
/// see it.
pub async fn visible(db: &PgPool, id: Uuid, scope: &Scope) -> domain::Result<(i64, bool)> {
    let Some((tenant, dropped, ended)) = output_state(db, id).await? else {
        return Err(domain::Error::NotFound("workload"));
    };
    scope.ensure_visible(tenant, "workload")?;
    Ok((dropped, ended))
}

/// A workload's tenant, output bytes dropped by retention, and whether it has ended.
pub async fn output_state(db: &PgPool, id: Uuid) -> sqlx::Result<Option<(Uuid, i64, bool)>> {
    sqlx::query_as(
        "SELECT tenant_id, log_dropped_bytes, state IN ('succeeded', 'failed', 'cancelled') FROM workloads WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(db)
    .await
}

/// Reads output of a workload the caller may see (checked with [`visible`]).
pub async fn read(db: &PgPool, id: Uuid, q: &LogQuery, dropped_bytes: i64) -> domain::Result<Logs> {
    if q.wait_s.is_some_and(|w| w > 3600) {
        return Err(domain::Error::bad_query("invalid_query", "wait_s is at most 3600 seconds"));
    }
    if q.tail.is_some_and(|t| t as usize > MAX_LINES) {
        return Err(domain::Error::bad_query("invalid_query", format!("tail is at most {MAX_LINES} lines")));
    }
    let rows: Vec<(i64, i32, LogStream, DateTime<Utc>, String, i64)> = sqlx::query_as(
        "SELECT id, attempt, stream, at, text, dropped_lines FROM workload_logs \
         WHERE workload_id = $1 AND ($2::int IS NULL OR attempt = $2) AND ($3::text IS NULL OR stream = $3) \
           AND id > $4 ORDER BY id",
    )
    .bind(id)
    .bind(q.attempt.map(|a| a.min(i32::MAX as u32) as i32))
    .bind(q.stream)
    .bind(q.after.unwrap_or(0))
    .fetch_all(db)
    .await?;
    let cursor = rows.last().map_or(q.after.unwrap_or(0), |r| r.0);
    let lost_lines = rows.iter().map(|r| r.5).sum();
    let mut lines: Vec<LogLine> = rows
        .into_iter()
        .flat_map(|(cursor, attempt, stream, at, text, _)| {
            text.lines().map(|l| LogLine { cursor, attempt, stream, at, text: l.to_owned() }).collect::<Vec<_>>()
        })
        .collect();
    let keep = q.tail.map_or(MAX_LINES, |t| t as usize).min(MAX_LINES);
    if lines.len() > keep {
        lines.drain(..lines.len() - keep);
    }
    Ok(Logs { workload_id: id, lines, cursor, dropped_bytes, lost_lines })
}

/// The last lines of a workload's latest attempt's output, both streams in order: what its
/// detail shows when the attempt failed.
pub async fn last_lines(db: &PgPool, id: Uuid, attempt: i32, n: usize) -> sqlx::Result<Vec<String>> {
    let rows: Vec<(String,)> = sqlx::query_as(
        "SELECT text FROM (SELECT id, text FROM workload_logs WHERE workload_id = $1 AND attempt = $2 \
                           ORDER BY id DESC LIMIT 8) x ORDER BY id",
    )
    .bind(id)
    .bind(attempt)
    .fetch_all(db)
    .await?;
    let mut lines: Vec<String> = rows.iter().flat_map(|(t,)| t.lines().map(str::to_owned)).collect();
    if lines.len() > n {
        lines.drain(..lines.len() - n);
    }
    Ok(lines)
}
