-- Two costs of a burst's grants (issue 10: 8,000 grants in one statement), measured in psql on the
-- scheduling-cycle bench's database (rolled back; BENCHMARKS.md): the grant history's row per
-- grant, written by a row trigger at the insert (about 45 of the insert's 115-125 ms: 8,000 rows
-- and four indexes), and the fit check's per-GPU sums, one index scan per GPU (28 ms; grouped in
-- one scan, 15).
--
-- 1. The grant history holds the grants that ended; the grants held now are the `gpu_grants` rows
--    themselves. A held grant was kept twice (its row and an open history row) only so that usage
--    could read one table; now usage reads both (`airtime_gpu_usage`, below), a grant costs no
--    history row, and its release writes its whole interval in one insert instead of finding and
--    updating the open row. What the history answers is unchanged: every grant's interval, held
--    or ended, with its GPU, holder, class and share; a grant undone in the transaction that made
--    it (a placement rolled back) held nothing and leaves nothing. The release trigger is per
--    statement (one insert of the statement's released grants joined to their workloads' class).
DROP TRIGGER gpu_grants_history_open ON gpu_grants;
DROP TRIGGER gpu_grants_history_close ON gpu_grants;
DROP FUNCTION gpu_grant_history_open();
DROP FUNCTION gpu_grant_history_close();

-- The open rows are the held grants, which `gpu_grants` holds.
DELETE FROM gpu_grant_history WHERE released_at IS NULL;
DROP INDEX gpu_grant_history_open;
ALTER TABLE gpu_grant_history ALTER COLUMN released_at SET NOT NULL;

CREATE FUNCTION gpu_grant_history_close() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO gpu_grant_history (gpu_id, workload_id, tenant_id, class, milli, granted_at, released_at)
    SELECT o.gpu_id, o.workload_id, o.tenant_id, w.class, o.milli, o.granted_at, greatest(now(), o.granted_at)
      FROM closed o JOIN workloads w ON w.id = o.workload_id
     -- A grant undone in the transaction that made it (a placement rolled back) held nothing.
     WHERE o.granted_at <> now();
    RETURN NULL;
END $$;

CREATE TRIGGER gpu_grants_history_close AFTER DELETE ON gpu_grants
    REFERENCING OLD TABLE AS closed FOR EACH STATEMENT EXECUTE FUNCTION gpu_grant_history_close();

-- Usage reads the ended grants from the history and the held ones from `gpu_grants` (held until
-- now); the rest of the arithmetic is 0012's.
CREATE OR REPLACE FUNCTION airtime_gpu_usage(p_from timestamptz, p_to timestamptz, p_hold interval)
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
           greatest(h.granted_at, p_from) AS g_from, least(h.released_at, p_to) AS g_to
    FROM gpu_grant_history h
    WHERE h.granted_at < p_to AND h.released_at > p_from
    UNION ALL
    SELECT g.gpu_id, g.tenant_id, w.class, g.milli,
           greatest(g.granted_at, p_from) AS g_from, least(now(), p_to) AS g_to
    FROM gpu_grants g JOIN workloads w ON w.id = g.workload_id
    WHERE g.granted_at < p_to AND now() > p_from
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

-- 2. The fit check sums the grants of the statement's GPUs in one grouped scan instead of one
--    index scan per GPU. What it checks, and the locks it takes first, are 0020's.
CREATE OR REPLACE FUNCTION gpu_grants_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    bad uuid;
BEGIN
    SELECT n.gpu_id INTO bad FROM granted n LEFT JOIN gpus g ON g.id = n.gpu_id WHERE g.id IS NULL LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'a grant names GPU %, which does not exist', bad USING ERRCODE = 'foreign_key_violation';
    END IF;
    SELECT n.workload_id INTO bad FROM granted n
      LEFT JOIN workloads w ON w.id = n.workload_id AND w.tenant_id = n.tenant_id
     WHERE w.id IS NULL LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'a grant names workload %, which does not exist in the grant''s tenant', bad
            USING ERRCODE = 'foreign_key_violation';
    END IF;

    PERFORM pg_advisory_xact_lock(l.k)
       FROM (SELECT DISTINCT hashtextextended(gpu_id::text, 0) AS k FROM granted ORDER BY 1) l;
    SELECT g.id INTO bad
      FROM (SELECT x.gpu_id, count(*) AS holders, sum(x.milli) AS milli, sum(x.memory_mb) AS memory_mb
              FROM gpu_grants x WHERE x.gpu_id IN (SELECT gpu_id FROM granted) GROUP BY x.gpu_id) h
      JOIN gpus g ON g.id = h.gpu_id
     WHERE (g.sharing NOT IN ('time_slicing', 'mps') AND h.holders > 1)
        OR h.milli > 1000
        OR h.memory_mb > g.memory_mb
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'GPU % would be over-committed: its grants add up to more than the GPU', bad
            USING ERRCODE = 'exclusion_violation';
    END IF;
    RETURN NULL;
END $$;
