//! One node's CPU and memory over time (`GET /nodes/{id}/history`), for the dashboard's node page:
//! the agents' node telemetry (`node_telemetry`) bucketed in SQL by the step asked for, as
//! [`super::gpu_history`] buckets a GPU's. Kept as long as `--telemetry-retention-hours`.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use crate::time_range::TimeRange;

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct NodeHistory {
    pub node_id: Uuid,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// Width of each point's bucket, seconds.
    pub step_s: u32,
    /// The node's CPU, millicores, and memory, MB (what utilisation and memory are shares of).
    pub cpu_millis: i32,
    pub memory_mb: i64,
    /// One point per bucket that holds a sample, in time order (gaps: no telemetry then).
    pub points: Vec<NodeHistoryPoint>,
}

/// A bucket of samples: mean CPU utilisation, the most memory used and its mean.
#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct NodeHistoryPoint {
    /// Start of the bucket.
    pub at: DateTime<Utc>,
    /// Mean CPU utilisation, 0..1.
    pub cpu_util: f64,
    /// The most memory used in the bucket, MB.
    pub memory_used_mb: i64,
    /// Mean memory used in the bucket, MB.
    pub memory_used_mean_mb: f64,
    /// Samples in the bucket.
    pub samples: i64,
}

/// A node's telemetry in `range`, bucketed by its step; `None` when there is no such node.
pub async fn node_history(db: &PgPool, id: Uuid, range: TimeRange) -> sqlx::Result<Option<NodeHistory>> {
    let node: Option<(i32, i64)> =
        sqlx::query_as("SELECT cpu_millis, memory_mb FROM nodes WHERE id = $1").bind(id).fetch_optional(db).await?;
    let Some((cpu_millis, memory_mb)) = node else {
        return Ok(None);
    };
    let points: Vec<NodeHistoryPoint> = sqlx::query_as(
        "SELECT to_timestamp(floor(extract(epoch FROM at) / $4) * $4) AS at,
                avg(cpu_util)::float8 AS cpu_util, max(memory_used_mb) AS memory_used_mb,
                avg(memory_used_mb)::float8 AS memory_used_mean_mb, count(*) AS samples
           FROM node_telemetry
          WHERE node_id = $1 AND at >= $2 AND at < $3
          GROUP BY 1 ORDER BY 1",
    )
    .bind(id)
    .bind(range.from)
    .bind(range.to)
    .bind(f64::from(range.step_s))
    .fetch_all(db)
    .await?;
    Ok(Some(NodeHistory {
        node_id: id,
        from: range.from,
        to: range.to,
        step_s: range.step_s,
        cpu_millis,
        memory_mb,
        points,
    }))
}
