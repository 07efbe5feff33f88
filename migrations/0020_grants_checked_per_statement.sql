-- A grant is checked once per statement instead of once per row. A cycle that places a burst
-- inserts about 8,000 grants in one statement; per row, the fit trigger of 0007 (a plpgsql call, an
-- advisory lock and two lookups) and the three foreign keys (an index probe and a row lock each) were
-- 140 and 84 ms of that insert (measured in psql, issue 10's burst; BENCHMARKS.md).
--
-- What is guaranteed is unchanged. Every grant names a GPU that exists and a workload that exists,
-- in the grant's tenant (the foreign keys checked the workload and the tenant apart; the pair is
-- stronger). The grants of one GPU never add up to more than the GPU (its thousandths and its
-- memory), and a GPU that is not shared (or a MIG instance) has one holder at most, whatever a
-- policy returned and however transactions interleave. What changes: a statement that would break
-- either fails as a whole — SQLSTATE 23503 (foreign_key_violation) or 23P01 (exclusion_violation),
-- naming the GPU — where the row trigger silently dropped a grant that did not fit. The scheduling
-- cycle inserts its grants under a savepoint and, on 23P01 (a GPU granted by another transaction
-- since the cycle read the fleet), again one placement at a time, so only the placements that lost
-- the race are refused (control-plane/src/scheduler/record.rs).
--
-- Why no row lock on the GPU and the workload, as the foreign keys took: nothing deletes a GPU, a
-- workload or a tenant, or changes their ids (nodes and GPUs that go away stay, `present = false`;
-- workloads end in a final state), so there is no concurrent delete to hold off; and nothing updates
-- a grant's GPU or workload. Why the fit check is still race-free: the statement's GPUs are locked
-- after the insert, in one order (two transactions granting overlapping GPUs cannot deadlock on
-- them), and the sums are read by a new statement with a new snapshot (READ COMMITTED, as every
-- granting transaction runs), so they include every grant of those GPUs that another transaction
-- holding the same locks committed.
ALTER TABLE gpu_grants
    DROP CONSTRAINT gpu_grants_gpu_id_fkey,
    DROP CONSTRAINT gpu_grants_workload_id_fkey,
    DROP CONSTRAINT gpu_grants_tenant_id_fkey;
DROP TRIGGER gpu_grants_fit ON gpu_grants;
DROP FUNCTION gpu_grant_fits();

CREATE FUNCTION gpu_grants_check() RETURNS trigger LANGUAGE plpgsql AS $$
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
      FROM (SELECT DISTINCT gpu_id FROM granted) n
      JOIN gpus g ON g.id = n.gpu_id
      CROSS JOIN LATERAL (SELECT count(*) AS holders, sum(x.milli) AS milli, sum(x.memory_mb) AS memory_mb
                            FROM gpu_grants x WHERE x.gpu_id = n.gpu_id) h
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

CREATE TRIGGER gpu_grants_check AFTER INSERT ON gpu_grants
    REFERENCING NEW TABLE AS granted FOR EACH STATEMENT EXECUTE FUNCTION gpu_grants_check();

-- The same for the two logs a cycle writes a row per workload into: its decisions (a burst's 2,500
-- placements; a cycle that rewrites the queue's pending reasons, up to one per waiting workload) and
-- the workloads' events. Per row their foreign keys were four and two index probes and row locks:
-- 33 of 42 ms for 2,500 decisions, 16 of 22 ms for 2,500 events (psql, rolled back). Checked here
-- per statement, by one anti-join per referent; a workload and its tenant as a pair, as above. The
-- referents are never deleted (scheduling cycles, nodes and policy versions neither).
ALTER TABLE decisions
    DROP CONSTRAINT decisions_cycle_id_fkey,
    DROP CONSTRAINT decisions_tenant_id_fkey,
    DROP CONSTRAINT decisions_workload_id_fkey,
    DROP CONSTRAINT decisions_node_id_fkey,
    DROP CONSTRAINT decisions_policy_version_id_fkey;
ALTER TABLE workload_events
    DROP CONSTRAINT workload_events_workload_id_fkey,
    DROP CONSTRAINT workload_events_tenant_id_fkey;

CREATE FUNCTION decisions_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    bad text;
BEGIN
    SELECT d.workload_id::text INTO bad FROM decided d
      LEFT JOIN workloads w ON w.id = d.workload_id AND w.tenant_id = d.tenant_id WHERE w.id IS NULL LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'a decision names workload %, which does not exist in the decision''s tenant', bad
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    SELECT d.cycle_id::text INTO bad FROM decided d
      LEFT JOIN scheduling_cycles c ON c.id = d.cycle_id WHERE c.id IS NULL LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'a decision names scheduling cycle %, which does not exist', bad
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    SELECT d.node_id::text INTO bad FROM decided d
      LEFT JOIN nodes n ON n.id = d.node_id WHERE d.node_id IS NOT NULL AND n.id IS NULL LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'a decision names node %, which does not exist', bad USING ERRCODE = 'foreign_key_violation';
    END IF;
    SELECT d.policy_version_id::text INTO bad FROM decided d
      LEFT JOIN policy_versions v ON v.id = d.policy_version_id
     WHERE d.policy_version_id IS NOT NULL AND v.id IS NULL LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'a decision names policy version %, which does not exist', bad
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER decisions_check AFTER INSERT ON decisions
    REFERENCING NEW TABLE AS decided FOR EACH STATEMENT EXECUTE FUNCTION decisions_check();

CREATE FUNCTION workload_events_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    bad uuid;
BEGIN
    SELECT e.workload_id INTO bad FROM recorded e
      LEFT JOIN workloads w ON w.id = e.workload_id AND w.tenant_id = e.tenant_id WHERE w.id IS NULL LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'an event names workload %, which does not exist in the event''s tenant', bad
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER workload_events_check AFTER INSERT ON workload_events
    REFERENCING NEW TABLE AS recorded FOR EACH STATEMENT EXECUTE FUNCTION workload_events_check();
