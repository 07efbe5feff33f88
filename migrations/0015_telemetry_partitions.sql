-- Telemetry history in hourly partitions (issue 10, item 8). At the protocol's rate a 1,000-node
-- fleet writes about 3,900 GPU samples a second, 340 million rows a day: retention by row DELETE
-- rewrote and vacuumed as much as ingest wrote. Each table is now PARTITION BY RANGE (at), one
-- partition per UTC hour, and retention drops whole partitions (airtime_drop_telemetry_partitions).
--
-- Why hours: retention is set in hours (--telemetry-retention-hours, 24 by default), so an hourly
-- partition keeps at most one hour past it (a daily one would keep up to a day more: twice the
-- default's data); a day of history is 24 partitions, which the planner prunes by `at` in every
-- history read (all of them bound `at`), so planning stays cheap.
--
-- The `id` column stays (from the same sequences) to order samples that share an `at`: a flush
-- writes every report it holds in one transaction, with that transaction's now(). It is no longer
-- a primary key: nothing looks a sample up by id, and its B-tree was a third of the index work of
-- every sample written; the history is read by (gpu_id, at) and (node_id, at), kept below.
--
-- Nor do the history tables reference nodes and gpus any more: a foreign key checked (an index probe
-- and a row lock on the GPU's row) every sample written, and tied every partition's creation and
-- drop to a lock on gpus or nodes, which the telemetry writer updates all the time. Nothing deletes a
-- node or a GPU (a GPU an agent stops advertising is kept, present = false), so the cascade it gave
-- never ran; the writer only writes samples of the rows it has just updated, and retention drops
-- whole hours.

-- The latest values live on the nodes and gpus rows, rewritten at every report: room on each page
-- lets those updates be HOT (no index entry per update, dead versions pruned in place). Measured at
-- 200 nodes x 8 GPUs: without it 147 of 11,200 updates of the GPU rows were HOT.
ALTER TABLE gpus SET (fillfactor = 50);
ALTER TABLE nodes SET (fillfactor = 50);

ALTER TABLE node_telemetry RENAME TO node_telemetry_unpartitioned;
ALTER TABLE gpu_telemetry RENAME TO gpu_telemetry_unpartitioned;
ALTER INDEX node_telemetry_node_at RENAME TO node_telemetry_unpartitioned_node_at;
ALTER INDEX gpu_telemetry_gpu_at RENAME TO gpu_telemetry_unpartitioned_gpu_at;
ALTER TABLE node_telemetry_unpartitioned RENAME CONSTRAINT node_telemetry_pkey TO node_telemetry_unpartitioned_pkey;
ALTER TABLE gpu_telemetry_unpartitioned RENAME CONSTRAINT gpu_telemetry_pkey TO gpu_telemetry_unpartitioned_pkey;
ALTER TABLE node_telemetry_unpartitioned ALTER COLUMN id DROP DEFAULT;
ALTER TABLE gpu_telemetry_unpartitioned ALTER COLUMN id DROP DEFAULT;
ALTER SEQUENCE node_telemetry_id_seq OWNED BY NONE;
ALTER SEQUENCE gpu_telemetry_id_seq OWNED BY NONE;

CREATE TABLE node_telemetry (
    id              bigint NOT NULL DEFAULT nextval('node_telemetry_id_seq'),
    node_id         uuid NOT NULL,
    at              timestamptz NOT NULL DEFAULT now(),
    cpu_util        real NOT NULL,
    memory_used_mb  bigint NOT NULL
) PARTITION BY RANGE (at);
CREATE INDEX node_telemetry_node_at ON node_telemetry (node_id, at DESC);
ALTER SEQUENCE node_telemetry_id_seq OWNED BY node_telemetry.id;

CREATE TABLE gpu_telemetry (
    id              bigint NOT NULL DEFAULT nextval('gpu_telemetry_id_seq'),
    gpu_id          uuid NOT NULL,
    at              timestamptz NOT NULL DEFAULT now(),
    util            real,
    memory_used_mb  bigint,
    temperature_c   real,
    power_w         real,
    ecc_errors      bigint
) PARTITION BY RANGE (at);
CREATE INDEX gpu_telemetry_gpu_at ON gpu_telemetry (gpu_id, at DESC);
ALTER SEQUENCE gpu_telemetry_id_seq OWNED BY gpu_telemetry.id;

-- Creates the hourly partitions of both tables that cover [p_from, p_until), and returns how long
-- from now() every hour is covered (0 when p_until is in the past). Called at start-up (from the
-- retention's start, so history written for any kept hour has its partition) and by the telemetry
-- flusher when its cached coverage runs short. Safe when replicas race: one transaction-scoped
-- advisory lock orders them, and an hour that exists is left alone.
CREATE FUNCTION airtime_telemetry_partitions(p_from timestamptz, p_until timestamptz) RETURNS interval
LANGUAGE plpgsql AS $$
DECLARE
    h      timestamptz := date_trunc('hour', least(p_from, now()), 'UTC');
    suffix text;
    tbl    text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('airtime_telemetry_partitions'));
    -- Hours before the end of the partition this migration made for old rows are its.
    h := greatest(h, (SELECT max(substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''([^'']+)''\)')::timestamptz)
                      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                      WHERE i.inhparent IN ('node_telemetry'::regclass, 'gpu_telemetry'::regclass)
                        AND pg_get_expr(c.relpartbound, c.oid) LIKE '%MINVALUE%'));
    WHILE h < p_until LOOP
        suffix := to_char(h AT TIME ZONE 'UTC', 'YYYYMMDD"_"HH24');
        FOREACH tbl IN ARRAY ARRAY['node_telemetry', 'gpu_telemetry'] LOOP
            IF to_regclass(tbl || '_p' || suffix) IS NULL THEN
                EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                               tbl || '_p' || suffix, tbl, h, h + interval '1 hour');
            END IF;
        END LOOP;
        h := h + interval '1 hour';
    END LOOP;
    RETURN greatest(h - now(), interval '0');
END $$;

-- Drops the partitions of both tables that hold nothing at or after p_before (their upper bound is
-- at or before it), and returns how many. Retention drops whole hours: no row DELETE, no vacuum.
CREATE FUNCTION airtime_drop_telemetry_partitions(p_before timestamptz) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    part    record;
    dropped integer := 0;
BEGIN
    FOR part IN
        SELECT c.oid::regclass AS name,
               substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''([^'']+)''\)')::timestamptz AS upper_bound
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent IN ('node_telemetry'::regclass, 'gpu_telemetry'::regclass)
    LOOP
        IF part.upper_bound IS NOT NULL AND part.upper_bound <= p_before THEN
            EXECUTE format('DROP TABLE %s', part.name);
            dropped := dropped + 1;
        END IF;
    END LOOP;
    RETURN dropped;
END $$;

-- The rows already written: the last two days in hourly partitions, anything older in one partition
-- that retention drops whole once its upper bound is past the retention.
DO $$
DECLARE
    recent  timestamptz := date_trunc('hour', now(), 'UTC') - interval '48 hours';
    oldest  timestamptz;
    h       timestamptz;
    suffix  text;
    tbl     text;
BEGIN
    SELECT least((SELECT min(at) FROM node_telemetry_unpartitioned), (SELECT min(at) FROM gpu_telemetry_unpartitioned))
      INTO oldest;
    IF oldest IS NOT NULL AND oldest < recent THEN
        FOREACH tbl IN ARRAY ARRAY['node_telemetry', 'gpu_telemetry'] LOOP
            EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (MINVALUE) TO (%L)',
                           tbl || '_before', tbl, recent);
        END LOOP;
    END IF;
    h := greatest(recent, date_trunc('hour', COALESCE(oldest, now()), 'UTC'));
    WHILE h < date_trunc('hour', now(), 'UTC') LOOP
        suffix := to_char(h AT TIME ZONE 'UTC', 'YYYYMMDD"_"HH24');
        FOREACH tbl IN ARRAY ARRAY['node_telemetry', 'gpu_telemetry'] LOOP
            EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                           tbl || '_p' || suffix, tbl, h, h + interval '1 hour');
        END LOOP;
        h := h + interval '1 hour';
    END LOOP;
END $$;
-- This hour and the next two (the control plane keeps them ahead from now on), and any hour a row
-- already written lies in.
SELECT airtime_telemetry_partitions(now(), greatest(now() + interval '2 hours',
    (SELECT max(at) + interval '1 hour' FROM node_telemetry_unpartitioned),
    (SELECT max(at) + interval '1 hour' FROM gpu_telemetry_unpartitioned)));

INSERT INTO node_telemetry (id, node_id, at, cpu_util, memory_used_mb)
SELECT id, node_id, at, cpu_util, memory_used_mb FROM node_telemetry_unpartitioned;
INSERT INTO gpu_telemetry (id, gpu_id, at, util, memory_used_mb, temperature_c, power_w, ecc_errors)
SELECT id, gpu_id, at, util, memory_used_mb, temperature_c, power_w, ecc_errors FROM gpu_telemetry_unpartitioned;
DROP TABLE node_telemetry_unpartitioned;
DROP TABLE gpu_telemetry_unpartitioned;
