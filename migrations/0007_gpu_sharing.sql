-- GPU sharing: fractions of a GPU (thousandths, as the Alibaba trace counts them), memory slices,
-- MIG instances and how each device is shared, as the node's agent reports it.

-- How a device is shared; a MIG instance is its own device with its profile.
ALTER TABLE gpus
    ADD COLUMN sharing text NOT NULL DEFAULT 'none' CHECK (sharing IN ('none', 'time_slicing', 'mps', 'mig')),
    ADD COLUMN mig_profile text,
    ADD COLUMN parent_index integer CHECK (parent_index IS NULL OR parent_index >= 0),
    -- why the node could not honour the mode it was asked for (said once, at registration)
    ADD COLUMN sharing_note text,
    ADD CONSTRAINT gpus_mig_profile CHECK ((sharing = 'mig') = (mig_profile IS NOT NULL));

-- A workload's share of one GPU, or the MIG profile it must run on.
ALTER TABLE workloads
    ADD COLUMN gpu_milli integer NOT NULL DEFAULT 1000 CHECK (gpu_milli BETWEEN 1 AND 1000),
    ADD COLUMN mig_profile text,
    ADD CONSTRAINT workloads_share_of_one_gpu CHECK (gpu_milli = 1000 OR gpu_count = 1),
    ADD CONSTRAINT workloads_mig_one_instance CHECK (mig_profile IS NULL OR (gpu_count = 1 AND gpu_milli = 1000));

-- A grant now gives a workload a share of a GPU in thousandths of a physical GPU (1000: a whole GPU;
-- a MIG instance: its share of the GPU's compute slices) and a memory slice; several grants may share
-- a time-sliced or MPS GPU, one holds any other. The grants of one GPU never add up to more than the whole GPU or its
-- memory: a trigger checks every new grant under a per-GPU lock and drops one that does not fit (as
-- the old primary key's ON CONFLICT DO NOTHING did), whatever a policy returned and however cycles
-- interleave. Per-share telemetry (what the workload's processes use of the GPU) is kept on the grant.
ALTER TABLE gpu_grants DROP CONSTRAINT gpu_grants_pkey;
ALTER TABLE gpu_grants
    ADD PRIMARY KEY (gpu_id, workload_id),
    ADD COLUMN milli integer NOT NULL DEFAULT 1000 CHECK (milli BETWEEN 1 AND 1000),
    ADD COLUMN memory_mb bigint NOT NULL DEFAULT 0 CHECK (memory_mb >= 0),
    ADD COLUMN util real,
    ADD COLUMN memory_used_mb bigint;

CREATE FUNCTION gpu_grant_fits() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    held_milli integer;
    held_memory bigint;
    capacity bigint;
    mode text;
    grants integer;
BEGIN
    -- One grant of a GPU at a time: a concurrent transaction granting the same GPU waits here and
    -- then sees what the first committed.
    PERFORM pg_advisory_xact_lock(('x' || substr(md5(NEW.gpu_id::text), 1, 16))::bit(64)::bigint);
    SELECT count(*), COALESCE(sum(milli), 0), COALESCE(sum(memory_mb), 0) INTO grants, held_milli, held_memory
        FROM gpu_grants WHERE gpu_id = NEW.gpu_id;
    SELECT memory_mb, sharing INTO capacity, mode FROM gpus WHERE id = NEW.gpu_id;
    -- A GPU that is not shared, or a MIG instance (granted as its share of the physical GPU),
    -- has one holder at most.
    IF mode NOT IN ('time_slicing', 'mps') AND grants > 0 THEN
        RETURN NULL;
    END IF;
    IF held_milli + NEW.milli > 1000 OR held_memory + NEW.memory_mb > COALESCE(capacity, 0) THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER gpu_grants_fit BEFORE INSERT ON gpu_grants FOR EACH ROW EXECUTE FUNCTION gpu_grant_fits();
