-- The organisation's controls (issue 40).
-- `gpu_limit`: the most GPUs a tenant's work may hold at once, borrowed or not (NULL: no limit
-- beyond its guarantee's borrowing rule); the checker enforces it on every policy's decisions.
-- `archived_at`: when the tenant was archived — its work was ended, it admits nothing new, and its
-- rows (workloads, grants, usage, audit) stay for history and accounting.
-- `budgets`: GPU-hours a tenant may use per calendar period (counted as billed: a quarter GPU as a
-- quarter) and what happens once they are used up: `warn` (shown, counted, an event on the feed),
-- `best_effort` (new work is admitted as preemptible at the lowest priority) or `stop` (new work is
-- refused; running work finishes). One budget per tenant and period.
-- `idle_reclaim_after_s`: a tenant's idle rule — its work that holds GPUs and keeps every one of them
-- below the idle threshold this long is warned (`workloads.idle_warned_at`, an event), then stopped
-- a warning period later, so its GPUs go to what waits (NULL: no rule).
-- Expand only: new nullable columns and a new table, so a replica of the previous version keeps
-- working against this schema (it neither reads nor writes them).
ALTER TABLE tenants ADD COLUMN gpu_limit integer CHECK (gpu_limit IS NULL OR (gpu_limit >= 1 AND gpu_limit <= 100000));
ALTER TABLE tenants ADD COLUMN archived_at timestamptz;
ALTER TABLE tenants ADD COLUMN idle_reclaim_after_s integer
    CHECK (idle_reclaim_after_s IS NULL OR (idle_reclaim_after_s >= 1 AND idle_reclaim_after_s <= 604800));
ALTER TABLE workloads ADD COLUMN idle_warned_at timestamptz;

CREATE TABLE budgets (
    tenant_id   uuid NOT NULL REFERENCES tenants (id),
    period      text NOT NULL CHECK (period IN ('week', 'month')),
    gpu_hours   double precision NOT NULL CHECK (gpu_hours > 0 AND gpu_hours <= 1e9),
    action      text NOT NULL CHECK (action IN ('warn', 'best_effort', 'stop')),
    -- The start of the last period whose exhaustion was announced (once per period).
    warned_for  timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, period)
);
