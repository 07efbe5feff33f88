-- GPU-time accounting: owned (the GPU reported telemetry), allocated (a grant held it, weighted by
-- its share) and busy (measured utilisation), per GPU and holder.

-- Every grant's interval, kept after the grant goes: who held which GPU, when, and how much of it.
-- Written by triggers on gpu_grants, so no path that grants or releases a GPU can forget it.
CREATE TABLE gpu_grant_history (
    id           bigserial PRIMARY KEY,
    gpu_id       uuid NOT NULL REFERENCES gpus (id) ON DELETE CASCADE,
    workload_id  uuid NOT NULL REFERENCES workloads (id) ON DELETE CASCADE,
    tenant_id    uuid NOT NULL REFERENCES tenants (id),
    class        text NOT NULL,
    milli        integer NOT NULL CHECK (milli BETWEEN 1 AND 1000),
    granted_at   timestamptz NOT NULL,
    released_at  timestamptz CHECK (released_at IS NULL OR released_at >= granted_at)
);
CREATE INDEX gpu_grant_history_gpu ON gpu_grant_history (gpu_id, granted_at);
CREATE INDEX gpu_grant_history_open ON gpu_grant_history (gpu_id) WHERE released_at IS NULL;
CREATE INDEX gpu_grant_history_released ON gpu_grant_history (released_at);

CREATE FUNCTION gpu_grant_history_open() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO gpu_grant_history (gpu_id, workload_id, tenant_id, class, milli, granted_at)
    SELECT NEW.gpu_id, NEW.workload_id, NEW.tenant_id, w.class, NEW.milli, NEW.granted_at
    FROM workloads w WHERE w.id = NEW.workload_id;
    RETURN NULL;
END $$;

CREATE FUNCTION gpu_grant_history_close() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- A grant undone in the transaction that made it (a placement rolled back) held nothing.
    DELETE FROM gpu_grant_history
     WHERE gpu_id = OLD.gpu_id AND workload_id = OLD.workload_id AND released_at IS NULL AND granted_at = now();
    UPDATE gpu_grant_history SET released_at = greatest(now(), granted_at)
     WHERE gpu_id = OLD.gpu_id AND workload_id = OLD.workload_id AND released_at IS NULL;
    RETURN NULL;
END $$;

CREATE TRIGGER gpu_grants_history_open AFTER INSERT ON gpu_grants
    FOR EACH ROW EXECUTE FUNCTION gpu_grant_history_open();
CREATE TRIGGER gpu_grants_history_close AFTER DELETE ON gpu_grants
    FOR EACH ROW EXECUTE FUNCTION gpu_grant_history_close();

-- Grants held when this migration runs start their history now.
INSERT INTO gpu_grant_history (gpu_id, workload_id, tenant_id, class, milli, granted_at)
SELECT g.gpu_id, g.workload_id, g.tenant_id, w.class, g.milli, g.granted_at
FROM gpu_grants g JOIN workloads w ON w.id = g.workload_id;

-- The GPU-time of [p_from, p_to) per GPU and holder: one row per (GPU, tenant, class) that held it,
-- and one row (tenant and class NULL) for the time nobody held.
--   owned: time the GPU reported telemetry, each sample standing for the time until the next one
--          (at most p_hold: a node that stops reporting stops counting);
--   allocated: the overlap of each grant with the range, times its share (milli / 1000);
--   busy: each sample's utilisation over its time, split among the grants holding the GPU then by
--         their shares; what no grant held is the unheld row's.
-- A holder's row has owned = allocated (the GPU-time it held); the unheld row has what is left.
CREATE FUNCTION airtime_gpu_usage(p_from timestamptz, p_to timestamptz, p_hold interval)
RETURNS TABLE (gpu_id uuid, tenant_id uuid, class text, owned_s float8, allocated_s float8, busy_s float8)
LANGUAGE sql STABLE AS $$
WITH samples AS (
    SELECT t.gpu_id, COALESCE(t.util, 0)::float8 AS util, t.at,
           lead(t.at) OVER (PARTITION BY t.gpu_id ORDER BY t.at, t.id) AS next_at
    FROM gpu_telemetry t
    WHERE t.at >= p_from - p_hold AND t.at < p_to
),
spans AS (
    SELECT s.gpu_id, s.util, greatest(s.at, p_from) AS s_from,
           least(COALESCE(s.next_at, s.at + p_hold), s.at + p_hold, p_to) AS s_to
    FROM samples s
),
spans_in AS (SELECT * FROM spans WHERE s_to > s_from),
grants AS (
    SELECT h.gpu_id, h.tenant_id, h.class, h.milli,
           greatest(h.granted_at, p_from) AS g_from, least(COALESCE(h.released_at, now()), p_to) AS g_to
    FROM gpu_grant_history h
    WHERE h.granted_at < p_to AND COALESCE(h.released_at, 'infinity'::timestamptz) > p_from
),
grants_in AS (SELECT * FROM grants WHERE g_to > g_from),
-- Each span's overlap with each grant, with the shares held over it.
pieces AS (
    SELECT s.gpu_id, g.tenant_id, g.class, g.milli, s.util, s.s_from, s.s_to,
           extract(epoch FROM least(s.s_to, g.g_to) - greatest(s.s_from, g.g_from))::float8 AS dt,
           sum(g.milli) OVER (PARTITION BY s.gpu_id, s.s_from) AS held_milli
    FROM spans_in s JOIN grants_in g ON g.gpu_id = s.gpu_id AND g.g_from < s.s_to AND g.g_to > s.s_from
),
held_busy AS (
    SELECT p.gpu_id, p.tenant_id, p.class,
           sum(p.dt * p.util * p.milli::float8 / greatest(p.held_milli, 1000)::float8) AS busy_s
    FROM pieces p GROUP BY p.gpu_id, p.tenant_id, p.class
),
held AS (
    SELECT g.gpu_id, g.tenant_id, g.class,
           sum(extract(epoch FROM g.g_to - g.g_from)::float8 * g.milli::float8 / 1000.0) AS allocated_s
    FROM grants_in g GROUP BY g.gpu_id, g.tenant_id, g.class
),
per_gpu AS (
    SELECT s.gpu_id, sum(extract(epoch FROM s.s_to - s.s_from)::float8) AS owned_s,
           sum(extract(epoch FROM s.s_to - s.s_from)::float8 * s.util) AS busy_s
    FROM spans_in s GROUP BY s.gpu_id
),
holders AS (
    SELECT h.gpu_id, h.tenant_id, h.class, h.allocated_s, COALESCE(b.busy_s, 0) AS busy_s
    FROM held h LEFT JOIN held_busy b USING (gpu_id, tenant_id, class)
),
held_totals AS (
    SELECT gpu_id, sum(allocated_s) AS allocated_s, sum(busy_s) AS busy_s FROM holders GROUP BY gpu_id
)
SELECT h.gpu_id, h.tenant_id, h.class, h.allocated_s, h.allocated_s, h.busy_s FROM holders h
UNION ALL
SELECT p.gpu_id, NULL::uuid, NULL::text,
       greatest(p.owned_s - COALESCE(t.allocated_s, 0), 0),
       0,
       greatest(p.busy_s - COALESCE(t.busy_s, 0), 0)
FROM per_gpu p LEFT JOIN held_totals t USING (gpu_id)
$$;

-- Closed hours, rolled up: what airtime_gpu_usage says of each, with the GPU's node, model and cost
-- per GPU-hour at roll-up time, so a month of a large fleet reads a few rows per GPU and hour.
CREATE TABLE gpu_usage_hourly (
    hour         timestamptz NOT NULL,
    gpu_id       uuid NOT NULL,
    node_id      uuid NOT NULL,
    model        text NOT NULL,
    tenant_id    uuid,
    class        text,
    owned_s      float8 NOT NULL,
    allocated_s  float8 NOT NULL,
    busy_s       float8 NOT NULL,
    cost_per_gpu_hour float8 NOT NULL
);
CREATE INDEX gpu_usage_hourly_hour ON gpu_usage_hourly (hour);
CREATE UNIQUE INDEX gpu_usage_hourly_key
    ON gpu_usage_hourly (hour, gpu_id, COALESCE(tenant_id, '00000000-0000-0000-0000-000000000000'), COALESCE(class, ''));

-- Hours before this are rolled up.
CREATE TABLE gpu_usage_progress (
    one          boolean PRIMARY KEY DEFAULT true CHECK (one),
    rolled_until timestamptz NOT NULL
);
INSERT INTO gpu_usage_progress (rolled_until) VALUES (date_trunc('hour', now()));
