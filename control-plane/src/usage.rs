//! GPU-time accounting: owned, allocated, busy and idle GPU-hours and their cost, over a time
//! range, by tenant, class, node or GPU model.
//!
//! The arithmetic is one SQL function (`airtime_gpu_usage`, migration 0012): owned is the time a GPU
//! reported telemetry (each sample holds until the next, at most `hold`), allocated the overlap of
//! each grant's interval (a held grant's `gpu_grants` row, an ended one's `gpu_grant_history` row,
//! written by the release trigger on `gpu_grants`) with the range weighted by its share, busy each sample's utilisation over its time, split among the grants
//! holding the GPU by their shares. Closed hours are rolled up into `gpu_usage_hourly` by
//! [`roll_up`] (so a month of a large fleet reads a few rows per GPU and hour, and survives the
//! telemetry's retention); what is not rolled up yet is computed from the raw rows. Cost is each
//! node's `cost_per_hour` shared equally by its GPUs, at roll-up time (or now, for raw hours).

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use uuid::Uuid;

use crate::time_range::{RangeRules, TimeRange};

/// How usage is grouped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    /// One group, `all`.
    #[default]
    None,
    Tenant,
    Class,
    Node,
    GpuModel,
}

/// The group of GPU-time no grant held (by tenant or class).
pub const UNALLOCATED: &str = "(unallocated)";
/// Other tenants, for a caller who may not see them one by one.
pub const OTHER_TENANTS: &str = "(other tenants)";

/// GPU-hours and their cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct UsageNumbers {
    /// GPU-hours the fleet had (its GPUs reported telemetry).
    pub owned_gpu_hours: f64,
    /// GPU-hours a grant held, weighted by its share.
    pub allocated_gpu_hours: f64,
    /// GPU-hours of measured utilisation.
    pub busy_gpu_hours: f64,
    /// Owned but not busy: held-but-idle plus unallocated.
    pub idle_gpu_hours: f64,
    /// What the owned GPU-hours cost, USD.
    pub owned_cost: f64,
    /// What the idle GPU-hours cost, USD.
    pub idle_cost: f64,
}

impl UsageNumbers {
    fn add(&mut self, row: &Row) {
        let hours = |s: f64| s / 3600.0;
        self.owned_gpu_hours += hours(row.owned_s);
        self.allocated_gpu_hours += hours(row.allocated_s);
        self.busy_gpu_hours += hours(row.busy_s);
        let idle = hours((row.owned_s - row.busy_s).max(0.0));
        self.idle_gpu_hours += idle;
        self.owned_cost += hours(row.owned_s) * row.cost_per_gpu_hour;
        self.idle_cost += idle * row.cost_per_gpu_hour;
    }
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct UsageGroup {
    pub group: String,
    #[serde(flatten)]
    pub numbers: UsageNumbers,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct UsagePoint {
    /// The start of the step.
    pub at: DateTime<Utc>,
    pub group: String,
    #[serde(flatten)]
    pub numbers: UsageNumbers,
}

/// `GET /api/v1/usage`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct UsageReport {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub step_s: u32,
    pub group_by: GroupBy,
    pub totals: UsageNumbers,
    /// Each group over the whole range, largest idle cost first.
    pub groups: Vec<UsageGroup>,
    /// Each step and group, in time order.
    pub series: Vec<UsagePoint>,
}

/// A checked usage query.
#[derive(Debug, Clone)]
pub struct UsageQuery {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub step: TimeDelta,
    pub group_by: GroupBy,
    /// The tenant the caller may see one by one; `None`: every tenant (a platform admin).
    pub own_tenant: Option<Uuid>,
}

/// The most steps one answer has.
pub const MAX_STEPS: i64 = 1000;

/// A day by default, in hourly steps; steps of a minute at least.
const RULES: RangeRules =
    RangeRules { default_span: TimeDelta::days(1), default_step: |_| 3600, min_step_s: 60, max_steps: MAX_STEPS };

impl UsageQuery {
    /// Parses a request's range and step: `from` defaults to a day before `to`, `to` to now, the
    /// step to an hour; the step is at least a minute and the range at most [`MAX_STEPS`] steps.
    pub fn parse(
        from: Option<DateTime<Utc>>,
        to: Option<DateTime<Utc>>,
        step_s: Option<u32>,
        group_by: GroupBy,
        own_tenant: Option<Uuid>,
        now: DateTime<Utc>,
    ) -> Result<UsageQuery, String> {
        let r = TimeRange::parse(from, to, step_s, RULES, now)?;
        Ok(UsageQuery { from: r.from, to: r.to, step: r.step(), group_by, own_tenant })
    }
}

/// One row of GPU-time: a GPU's holder (or nobody) over one step.
#[derive(Debug, Clone, sqlx::FromRow)]
struct Row {
    at: DateTime<Utc>,
    tenant_id: Option<Uuid>,
    tenant: Option<String>,
    class: Option<String>,
    node: String,
    model: String,
    owned_s: f64,
    allocated_s: f64,
    busy_s: f64,
    cost_per_gpu_hour: f64,
}

const HOUR: TimeDelta = TimeDelta::hours(1);

/// The usage `q` asks for. `hold` is how long a telemetry sample stands for its GPU.
pub async fn report(db: &PgPool, q: &UsageQuery, hold: Duration) -> sqlx::Result<UsageReport> {
    let (rolled_until,): (DateTime<Utc>,) =
        sqlx::query_as("SELECT rolled_until FROM gpu_usage_progress").fetch_one(db).await?;
    let hourly = q.step.num_seconds() % 3600 == 0 && q.from.timestamp() % 3600 == 0;
    let mut rows: Vec<Row> = Vec::new();
    let mut start = q.from;
    while start < q.to {
        let end = (start + q.step).min(q.to);
        if hourly && end <= rolled_until {
            rows.extend(rolled(db, start, end).await?);
        } else {
            rows.extend(raw(db, start, end, hold).await?);
        }
        start = end;
    }
    Ok(assemble(q, &rows))
}

async fn rolled(db: &PgPool, from: DateTime<Utc>, to: DateTime<Utc>) -> sqlx::Result<Vec<Row>> {
    sqlx::query_as(
        "SELECT $1::timestamptz AS at, u.tenant_id, t.name AS tenant, u.class, COALESCE(n.name, '?') AS node, u.model, \
                u.owned_s, u.allocated_s, u.busy_s, u.cost_per_gpu_hour \
         FROM gpu_usage_hourly u LEFT JOIN tenants t ON t.id = u.tenant_id LEFT JOIN nodes n ON n.id = u.node_id \
         WHERE u.hour >= $1 AND u.hour < $2",
    )
    .bind(from)
    .bind(to)
    .fetch_all(db)
    .await
}

/// The GPU's cost per GPU-hour: its node's cost shared by the node's GPUs.
pub(crate) const GPU_COST: &str = "COALESCE(n.cost_per_hour, 0) / GREATEST((SELECT count(*) FROM gpus x \
     WHERE x.node_id = n.id AND x.present), 1)";

async fn raw(db: &PgPool, from: DateTime<Utc>, to: DateTime<Utc>, hold: Duration) -> sqlx::Result<Vec<Row>> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT $1::timestamptz AS at, u.tenant_id, t.name AS tenant, u.class, n.name AS node, g.model, \
                u.owned_s, u.allocated_s, u.busy_s, ({GPU_COST})::float8 AS cost_per_gpu_hour \
         FROM airtime_gpu_usage($1, $2, make_interval(secs => $3)) u \
         JOIN gpus g ON g.id = u.gpu_id JOIN nodes n ON n.id = g.node_id LEFT JOIN tenants t ON t.id = u.tenant_id"
    )))
    .bind(from)
    .bind(to)
    .bind(hold.as_secs_f64())
    .fetch_all(db)
    .await
}

fn group_of(q: &UsageQuery, row: &Row) -> String {
    match q.group_by {
        GroupBy::None => "all".to_owned(),
        GroupBy::Tenant => match (row.tenant_id, &row.tenant) {
            (None, _) => UNALLOCATED.to_owned(),
            (Some(id), Some(name)) if q.own_tenant.is_none_or(|own| own == id) => name.clone(),
            (Some(_), _) => OTHER_TENANTS.to_owned(),
        },
        GroupBy::Class => row.class.clone().unwrap_or_else(|| UNALLOCATED.to_owned()),
        GroupBy::Node => row.node.clone(),
        GroupBy::GpuModel => row.model.clone(),
    }
}

fn assemble(q: &UsageQuery, rows: &[Row]) -> UsageReport {
    let mut totals = UsageNumbers::default();
    let mut groups: BTreeMap<String, UsageNumbers> = BTreeMap::new();
    let mut series: BTreeMap<(DateTime<Utc>, String), UsageNumbers> = BTreeMap::new();
    for row in rows {
        let group = group_of(q, row);
        totals.add(row);
        groups.entry(group.clone()).or_default().add(row);
        series.entry((row.at, group)).or_default().add(row);
    }
    let mut groups: Vec<UsageGroup> =
        groups.into_iter().map(|(group, numbers)| UsageGroup { group, numbers }).collect();
    groups.sort_by(|a, b| b.numbers.idle_cost.total_cmp(&a.numbers.idle_cost).then_with(|| a.group.cmp(&b.group)));
    UsageReport {
        from: q.from,
        to: q.to,
        step_s: u32::try_from(q.step.num_seconds()).unwrap_or(u32::MAX),
        group_by: q.group_by,
        totals,
        groups,
        series: series.into_iter().map(|((at, group), numbers)| UsagePoint { at, group, numbers }).collect(),
    }
}

/// The GPU-hours tenant `tenant`'s grants held from `from` to `to`, weighted by their shares (a
/// quarter GPU for an hour is 0.25): the rolled-up hours where they are rolled up, the raw rows
/// after. What budgets count.
pub async fn tenant_allocated_gpu_hours(
    conn: &mut sqlx::PgConnection,
    tenant: Uuid,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    hold: Duration,
) -> sqlx::Result<f64> {
    let (rolled_until,): (DateTime<Utc>,) =
        sqlx::query_as("SELECT rolled_until FROM gpu_usage_progress").fetch_one(&mut *conn).await?;
    let split = rolled_until.clamp(from, to.max(from));
    let (rolled,): (f64,) = sqlx::query_as(
        "SELECT COALESCE(sum(allocated_s), 0)::float8 FROM gpu_usage_hourly WHERE tenant_id = $1 AND hour >= $2 AND hour < $3",
    )
    .bind(tenant)
    .bind(from)
    .bind(split)
    .fetch_one(&mut *conn)
    .await?;
    let raw = if split < to {
        let (raw,): (f64,) = sqlx::query_as(
            "SELECT COALESCE(sum(allocated_s), 0)::float8 FROM airtime_gpu_usage($1, $2, make_interval(secs => $3)) \
             WHERE tenant_id = $4",
        )
        .bind(split)
        .bind(to)
        .bind(hold.as_secs_f64())
        .bind(tenant)
        .fetch_one(&mut *conn)
        .await?;
        raw
    } else {
        0.0
    };
    Ok((rolled + raw) / 3600.0)
}

/// Rolls up the closed hours not rolled up yet (at most a day's worth per call), each once: the
/// progress row is locked while it is advanced, so replicas never roll an hour twice. An hour is
/// closed once `hold` has passed after it (its last samples are in). Returns the hours rolled.
pub async fn roll_up(db: &PgPool, hold: Duration) -> sqlx::Result<u32> {
    let mut rolled = 0;
    while rolled < 24 {
        let mut tx = db.begin().await?;
        let (until, now): (DateTime<Utc>, DateTime<Utc>) =
            sqlx::query_as("SELECT rolled_until, now() FROM gpu_usage_progress FOR UPDATE").fetch_one(&mut *tx).await?;
        let hold = TimeDelta::from_std(hold).unwrap_or(TimeDelta::seconds(15));
        let hour = until.duration_trunc(HOUR).unwrap_or(until);
        if hour + HOUR + hold > now {
            return Ok(rolled);
        }
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO gpu_usage_hourly (hour, gpu_id, node_id, model, tenant_id, class, owned_s, allocated_s, busy_s, \
                 cost_per_gpu_hour) \
             SELECT $1, u.gpu_id, g.node_id, g.model, u.tenant_id, u.class, u.owned_s, u.allocated_s, u.busy_s, \
                    ({GPU_COST})::float8 \
             FROM airtime_gpu_usage($1, $2, make_interval(secs => $3)) u \
             JOIN gpus g ON g.id = u.gpu_id JOIN nodes n ON n.id = g.node_id \
             WHERE u.owned_s > 0 OR u.allocated_s > 0 \
             ON CONFLICT DO NOTHING"
        )))
        .bind(hour)
        .bind(hour + HOUR)
        .bind(hold.as_seconds_f64())
        .execute(&mut *tx)
        .await?;
        sqlx::query("UPDATE gpu_usage_progress SET rolled_until = $1").bind(hour + HOUR).execute(&mut *tx).await?;
        tx.commit().await?;
        rolled += 1;
    }
    Ok(rolled)
}

/// A workload holding GPUs that have measured near zero for a while.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct HeldIdle {
    pub workload_id: Uuid,
    pub name: String,
    pub tenant: String,
    pub tenant_id: Uuid,
    pub class: String,
    /// GPUs it holds (a share counts as one).
    pub gpus: i64,
    /// How long all its GPUs have read below the idle threshold, seconds.
    pub idle_for_s: f64,
    /// What its grants have cost since they were made, USD.
    pub cost_so_far: f64,
    /// Since it holds its GPUs.
    pub held_since: DateTime<Utc>,
}

/// Workloads whose every GPU has read below `threshold` utilisation for at least `after` (since
/// their grant, or since the last sample above it), longest idle first; another tenant's only for
/// a caller who may see every tenant (`scope` `None`).
pub async fn held_idle(
    db: &PgPool,
    threshold: f32,
    after: Duration,
    scope: Option<Uuid>,
) -> sqlx::Result<Vec<HeldIdle>> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "WITH per_gpu AS ( \
             SELECT gr.workload_id, gr.gpu_id, gr.granted_at, gr.milli, \
                    GREATEST(gr.granted_at, COALESCE((SELECT max(t.at) FROM gpu_telemetry t \
                        WHERE t.gpu_id = gr.gpu_id AND t.at >= gr.granted_at AND t.util >= $1), gr.granted_at)) AS idle_since, \
                    (SELECT count(*) FROM gpu_telemetry t WHERE t.gpu_id = gr.gpu_id AND t.at >= gr.granted_at) AS samples, \
                    ({GPU_COST})::float8 AS cost_per_gpu_hour \
             FROM gpu_grants gr JOIN gpus g ON g.id = gr.gpu_id JOIN nodes n ON n.id = g.node_id) \
         SELECT w.id AS workload_id, w.name, t.name AS tenant, w.tenant_id, w.class, count(*) AS gpus, \
                extract(epoch FROM now() - max(p.idle_since))::float8 AS idle_for_s, \
                sum(extract(epoch FROM now() - p.granted_at)::float8 / 3600.0 * p.milli / 1000.0 * p.cost_per_gpu_hour) \
                    AS cost_so_far, \
                min(p.granted_at) AS held_since \
         FROM per_gpu p JOIN workloads w ON w.id = p.workload_id JOIN tenants t ON t.id = w.tenant_id \
         WHERE w.state = 'running' AND ($3::uuid IS NULL OR w.tenant_id = $3) \
         GROUP BY w.id, w.name, t.name, w.tenant_id, w.class \
         HAVING min(p.samples) > 0 AND now() - max(p.idle_since) >= make_interval(secs => $2) \
         ORDER BY idle_for_s DESC, w.id"
    )))
    .bind(threshold)
    .bind(after.as_secs_f64())
    .bind(scope)
    .fetch_all(db)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().expect("a time")
    }

    #[test]
    fn a_query_is_parsed_with_its_defaults_and_limits() {
        let now = at("2026-12-02T12:00:00Z");
        let q = UsageQuery::parse(None, None, None, GroupBy::Tenant, None, now).expect("defaults");
        assert_eq!((q.from, q.to, q.step), (at("2026-12-01T12:00:00Z"), now, TimeDelta::hours(1)));
        assert!(UsageQuery::parse(Some(now), Some(now), None, GroupBy::None, None, now).is_err());
        assert!(UsageQuery::parse(None, None, Some(30), GroupBy::None, None, now).unwrap_err().contains("at least 60"));
        let error = UsageQuery::parse(None, None, Some(60), GroupBy::None, None, now).unwrap_err();
        assert!(error.contains("1440 steps"), "{error}");
        // A range into the future ends now.
        let q = UsageQuery::parse(None, Some(at("2027-01-01T00:00:00Z")), None, GroupBy::None, None, now).expect("ok");
        assert_eq!(q.to, now);
    }

    fn row(tenant: Option<(Uuid, &str)>, owned_s: f64, allocated_s: f64, busy_s: f64) -> Row {
        Row {
            at: at("2026-12-02T10:00:00Z"),
            tenant_id: tenant.map(|t| t.0),
            tenant: tenant.map(|t| t.1.to_owned()),
            class: tenant.map(|_| "training".to_owned()),
            node: "n1".into(),
            model: "H100".into(),
            owned_s,
            allocated_s,
            busy_s,
            cost_per_gpu_hour: 4.0,
        }
    }

    #[test]
    fn other_tenants_are_one_group_for_a_tenant_member() {
        let (mine, theirs) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let rows = [
            row(Some((mine, "acme")), 1800.0, 1800.0, 900.0),
            row(Some((theirs, "globex")), 3600.0, 3600.0, 3600.0),
            row(None, 1800.0, 0.0, 0.0),
        ];
        let now = at("2026-12-02T12:00:00Z");
        let q = UsageQuery::parse(None, None, None, GroupBy::Tenant, Some(mine), now).expect("query");
        let report = assemble(&q, &rows);
        let names: Vec<&str> = report.groups.iter().map(|g| g.group.as_str()).collect();
        assert_eq!(names, [UNALLOCATED, "acme", OTHER_TENANTS], "largest idle cost first");
        assert_eq!(report.totals.owned_gpu_hours, 2.0);
        assert_eq!(report.totals.busy_gpu_hours, 1.25);
        assert_eq!(report.totals.idle_gpu_hours, 0.75);
        assert_eq!(report.totals.idle_cost, 3.0);
        let acme = &report.groups[1].numbers;
        assert_eq!((acme.allocated_gpu_hours, acme.idle_gpu_hours, acme.idle_cost), (0.5, 0.25, 1.0));
    }
}
