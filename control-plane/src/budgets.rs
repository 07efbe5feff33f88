//! Budgets: the GPU-hours a tenant may use per calendar period (a week from Monday 00:00 UTC, a
//! month from the 1st), counted from the usage accounting as it bills — allocated GPU-hours, a
//! quarter GPU as a quarter (`usage::tenant_allocated_gpu_hours`) — and what happens once they are
//! used up, chosen per budget:
//!
//! - `warn`: new work is admitted; each submission says so in its first event (on the live feed),
//!   and the budget shows as exhausted in the API and on the dashboard;
//! - `best_effort`: new work is admitted as preemptible at the lowest priority (0), said so in
//!   its first event;
//! - `stop`: new work is refused (409 `budget_exhausted`); running work finishes.
//!
//! Budgets judge admissions, not running work: a job that runs past its tenant's budget is not
//! stopped (stopping it would waste what it has computed), and the next period starts afresh.
//! The check runs in the submission's transaction, so a budget set or raised applies to the next
//! submission.

use chrono::{DateTime, Datelike, Duration as TimeDelta, NaiveTime, TimeZone, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use uuid::Uuid;

use crate::auth::audit::{self, Change};
use crate::domain::{self, Scope};

/// How long a budget's period is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "text", rename_all = "snake_case")]
pub enum Period {
    /// From Monday 00:00 UTC.
    Week,
    /// From the 1st, 00:00 UTC.
    Month,
}

impl Period {
    /// Parses a path segment (`week`, `month`).
    pub fn parse(text: &str) -> domain::Result<Period> {
        match text {
            "week" => Ok(Period::Week),
            "month" => Ok(Period::Month),
            other => Err(domain::Error::invalid("invalid_budget", format!("period {other:?} is not week or month"))),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Period::Week => "week",
            Period::Month => "month",
        }
    }

    /// The period that holds `now`: [start, end).
    pub fn bounds(self, now: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
        let day = now.date_naive();
        match self {
            Period::Week => {
                let monday = day - TimeDelta::days(i64::from(day.weekday().num_days_from_monday()));
                let start = Utc.from_utc_datetime(&monday.and_time(NaiveTime::MIN));
                (start, start + TimeDelta::days(7))
            }
            Period::Month => {
                let first = day.with_day(1).unwrap_or(day);
                let next = if first.month() == 12 {
                    first.with_year(first.year() + 1).and_then(|d| d.with_month(1))
                } else {
                    first.with_month(first.month() + 1)
                }
                .unwrap_or(first);
                (
                    Utc.from_utc_datetime(&first.and_time(NaiveTime::MIN)),
                    Utc.from_utc_datetime(&next.and_time(NaiveTime::MIN)),
                )
            }
        }
    }
}

/// What happens to new work once a budget is used up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "text", rename_all = "snake_case")]
pub enum BudgetAction {
    /// Admit it, and say so.
    Warn,
    /// Admit it as preemptible at the lowest priority.
    BestEffort,
    /// Refuse it; running work finishes.
    Stop,
}

/// `PUT /tenants/{id}/budgets/{period}`.
#[derive(Debug, Clone, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetBudget {
    /// GPU-hours per period, counted as billed (a quarter GPU for an hour is 0.25); above 0.
    pub gpu_hours: f64,
    pub action: BudgetAction,
}

/// A budget and where its tenant stands against it in the current period.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct BudgetView {
    pub tenant_id: Uuid,
    pub tenant: String,
    pub period: Period,
    pub gpu_hours: f64,
    pub action: BudgetAction,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
    /// Allocated GPU-hours so far this period, as billed.
    pub used_gpu_hours: f64,
    pub remaining_gpu_hours: f64,
    /// Used up: the action applies to new work.
    pub exhausted: bool,
}

/// How a submission is admitted against its tenant's budgets.
#[derive(Debug, Clone, PartialEq)]
pub enum Admission {
    /// Within every budget.
    Admit,
    /// Past a `warn` budget: admitted, with this to say.
    Warned(String),
    /// Past a `best_effort` budget: admitted as preemptible at priority 0, with this to say.
    BestEffort(String),
}

/// (tenant, name, period, gpu_hours, action)
type Row = (Uuid, String, Period, f64, BudgetAction);

async fn view(
    conn: &mut sqlx::PgConnection,
    row: Row,
    now: DateTime<Utc>,
    hold: std::time::Duration,
) -> sqlx::Result<BudgetView> {
    let (tenant_id, tenant, period, gpu_hours, action) = row;
    let (period_start, period_end) = period.bounds(now);
    let used = crate::usage::tenant_allocated_gpu_hours(&mut *conn, tenant_id, period_start, now, hold).await?;
    Ok(BudgetView {
        tenant_id,
        tenant,
        period,
        gpu_hours,
        action,
        period_start,
        period_end,
        used_gpu_hours: used,
        remaining_gpu_hours: (gpu_hours - used).max(0.0),
        exhausted: used >= gpu_hours,
    })
}

/// Every budget the caller may see (a platform admin: every tenant's, optionally one tenant's;
/// anyone else: their own tenant's), with what each tenant used this period.
pub async fn list(
    db: &PgPool,
    scope: &Scope,
    tenant: Option<Uuid>,
    hold: std::time::Duration,
) -> domain::Result<Vec<BudgetView>> {
    let filter = match (scope.tenant_filter(), tenant) {
        (Some(own), Some(asked)) if own != asked => return Err(domain::Error::NotFound("tenant")),
        (Some(own), _) => Some(own),
        (None, asked) => asked,
    };
    Ok(standing(db, filter, hold).await?)
}

/// Every budget (of one tenant, if given) with what its tenant used this period: what the API
/// lists and `/metrics` exports.
pub async fn standing(db: &PgPool, tenant: Option<Uuid>, hold: std::time::Duration) -> sqlx::Result<Vec<BudgetView>> {
    let mut conn = db.acquire().await?;
    let (now,): (DateTime<Utc>,) = sqlx::query_as("SELECT now()").fetch_one(&mut *conn).await?;
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT b.tenant_id, t.name, b.period, b.gpu_hours, b.action FROM budgets b JOIN tenants t ON t.id = b.tenant_id \
         WHERE ($1::uuid IS NULL OR b.tenant_id = $1) ORDER BY t.name, b.period",
    )
    .bind(tenant)
    .fetch_all(&mut *conn)
    .await?;
    let mut views = Vec::with_capacity(rows.len());
    for row in rows {
        views.push(view(&mut conn, row, now, hold).await?);
    }
    Ok(views)
}

/// Sets (creates or changes) tenant `tenant`'s budget for `period` (platform admins), audited with
/// what it was and what it became.
pub async fn set(
    db: &PgPool,
    scope: &Scope,
    tenant: Uuid,
    period: Period,
    req: &SetBudget,
    hold: std::time::Duration,
) -> domain::Result<BudgetView> {
    scope.require_platform_admin()?;
    if !req.gpu_hours.is_finite() || req.gpu_hours <= 0.0 || req.gpu_hours > 1e9 {
        return Err(domain::Error::invalid("invalid_budget", "gpu_hours must be above 0 and at most 1e9"));
    }
    let mut tx = db.begin().await?;
    let name: Option<(String, bool)> =
        sqlx::query_as("SELECT name, archived_at IS NOT NULL FROM tenants WHERE id = $1 FOR UPDATE")
            .bind(tenant)
            .fetch_optional(&mut *tx)
            .await?;
    let Some((name, archived)) = name else { return Err(domain::Error::NotFound("tenant")) };
    if archived {
        return Err(domain::Error::conflict("tenant_archived", format!("tenant {name} is archived")));
    }
    let before: Option<(f64, BudgetAction)> =
        sqlx::query_as("SELECT gpu_hours, action FROM budgets WHERE tenant_id = $1 AND period = $2")
            .bind(tenant)
            .bind(period)
            .fetch_optional(&mut *tx)
            .await?;
    sqlx::query(
        "INSERT INTO budgets (tenant_id, period, gpu_hours, action) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (tenant_id, period) DO UPDATE SET gpu_hours = EXCLUDED.gpu_hours, action = EXCLUDED.action",
    )
    .bind(tenant)
    .bind(period)
    .bind(req.gpu_hours)
    .bind(req.action)
    .execute(&mut *tx)
    .await?;
    audit::record(
        &mut tx,
        &scope.actor,
        Change::new("tenant.budget", "tenant", tenant).tenant(Some(tenant)).detail(serde_json::json!({
            "name": name, "period": period,
            "before": before.map(|(h, a)| serde_json::json!({"gpu_hours": h, "action": a})),
            "after": {"gpu_hours": req.gpu_hours, "action": req.action},
        })),
    )
    .await?;
    let (now,): (DateTime<Utc>,) = sqlx::query_as("SELECT now()").fetch_one(&mut *tx).await?;
    let answer = view(&mut tx, (tenant, name, period, req.gpu_hours, req.action), now, hold).await?;
    tx.commit().await?;
    Ok(answer)
}

/// Removes tenant `tenant`'s budget for `period` (platform admins), audited.
pub async fn remove(db: &PgPool, scope: &Scope, tenant: Uuid, period: Period) -> domain::Result<()> {
    scope.require_platform_admin()?;
    let mut tx = db.begin().await?;
    let removed: Option<(f64, BudgetAction)> =
        sqlx::query_as("DELETE FROM budgets WHERE tenant_id = $1 AND period = $2 RETURNING gpu_hours, action")
            .bind(tenant)
            .bind(period)
            .fetch_optional(&mut *tx)
            .await?;
    let Some((gpu_hours, action)) = removed else { return Err(domain::Error::NotFound("budget")) };
    audit::record(
        &mut tx,
        &scope.actor,
        Change::new("tenant.budget", "tenant", tenant).tenant(Some(tenant)).detail(serde_json::json!({
            "period": period, "before": {"gpu_hours": gpu_hours, "action": action}, "after": null,
        })),
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// How tenant `tenant`'s new work is admitted now: refused (`budget_exhausted`) past a `stop`
/// budget, else best effort past a `best_effort` one, else warned past a `warn` one. A tenant
/// without budgets costs one indexed read.
pub async fn admission(
    conn: &mut sqlx::PgConnection,
    tenant: Uuid,
    hold: std::time::Duration,
) -> domain::Result<Admission> {
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT b.tenant_id, t.name, b.period, b.gpu_hours, b.action FROM budgets b JOIN tenants t ON t.id = b.tenant_id \
         WHERE b.tenant_id = $1 ORDER BY b.period",
    )
    .bind(tenant)
    .fetch_all(&mut *conn)
    .await?;
    if rows.is_empty() {
        return Ok(Admission::Admit);
    }
    let (now,): (DateTime<Utc>,) = sqlx::query_as("SELECT now()").fetch_one(&mut *conn).await?;
    let mut answer = Admission::Admit;
    for row in rows {
        let v = view(&mut *conn, row, now, hold).await?;
        if !v.exhausted {
            continue;
        }
        let words = format!(
            "tenant {} used {:.2} of its {} GPU-hours this {} (until {})",
            v.tenant,
            v.used_gpu_hours,
            v.gpu_hours,
            v.period.as_str(),
            v.period_end.format("%Y-%m-%d %H:%M UTC")
        );
        match v.action {
            BudgetAction::Stop => {
                return Err(domain::Error::conflict("budget_exhausted", format!("{words}: new work is refused")));
            }
            BudgetAction::BestEffort => answer = Admission::BestEffort(format!("{words}: admitted as best effort")),
            BudgetAction::Warn => {
                if answer == Admission::Admit {
                    answer = Admission::Warned(format!("{words}: budget exceeded"));
                }
            }
        }
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn a_week_runs_from_monday_and_a_month_from_the_first_in_utc() {
        // 2026-12-07 is a Monday.
        let (start, end) = Period::Week.bounds(at("2026-12-09T15:00:00Z"));
        assert_eq!((start, end), (at("2026-12-07T00:00:00Z"), at("2026-12-14T00:00:00Z")));
        assert_eq!(Period::Week.bounds(at("2026-12-07T00:00:00Z")).0, at("2026-12-07T00:00:00Z"));
        let (start, end) = Period::Month.bounds(at("2026-12-31T23:59:59Z"));
        assert_eq!((start, end), (at("2026-12-01T00:00:00Z"), at("2027-01-01T00:00:00Z")));
        assert_eq!(Period::Month.bounds(at("2027-02-10T00:00:00Z")).1, at("2027-03-01T00:00:00Z"));
    }

    #[test]
    fn a_period_is_week_or_month() {
        assert_eq!(Period::parse("month").unwrap(), Period::Month);
        assert!(Period::parse("day").is_err());
    }
}
