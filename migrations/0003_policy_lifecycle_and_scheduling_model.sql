-- Policy lifecycle (limits per policy, suspension after repeated failures, shadow mode, logs) and
-- the scheduling model (priority settings, SLOs, decayed usage for fair share).

ALTER TABLE policies
    -- per-evaluation limits set by the platform team (PolicyLimits as JSON; {} = defaults)
    ADD COLUMN limits jsonb NOT NULL DEFAULT '{}',
    -- failed evaluations in a row; reset by a good one or by activation
    ADD COLUMN consecutive_failures integer NOT NULL DEFAULT 0,
    ADD COLUMN deleted_at timestamptz;

ALTER TABLE policy_versions ADD COLUMN deleted_at timestamptz;

ALTER TABLE policy_activations
    ADD COLUMN params jsonb NOT NULL DEFAULT '{}',
    -- set when the policy failed too many cycles in a row: the scope runs the built-in meanwhile
    ADD COLUMN suspended_at timestamptz,
    ADD COLUMN suspended_reason text;

-- A candidate version evaluated beside the active one every cycle, never applied.
CREATE TABLE policy_shadows (
    scope              text PRIMARY KEY,
    policy_version_id  uuid NOT NULL REFERENCES policy_versions (id),
    params             jsonb NOT NULL DEFAULT '{}',
    started_at         timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE shadow_results (
    id                  bigserial PRIMARY KEY,
    cycle_id            bigint NOT NULL REFERENCES scheduling_cycles (id),
    scope               text NOT NULL,
    shadow_version_id   uuid NOT NULL REFERENCES policy_versions (id),
    active_policy_name  text NOT NULL,
    agreed              integer NOT NULL,
    differed            integer NOT NULL,
    -- per workload where the two disagree: what each decided
    diff                jsonb NOT NULL,
    error               text,
    at                  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX shadow_results_version ON shadow_results (shadow_version_id, id DESC);

-- What policies logged from inside (airtime.log), kept with the cycle that produced it.
CREATE TABLE policy_logs (
    id                 bigserial PRIMARY KEY,
    policy_version_id  uuid NOT NULL REFERENCES policy_versions (id),
    tenant_id          uuid REFERENCES tenants (id),
    cycle_id           bigint REFERENCES scheduling_cycles (id),
    level              text NOT NULL,
    message            text NOT NULL,
    at                 timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX policy_logs_version ON policy_logs (policy_version_id, id DESC);

-- The platform's priority settings: one row.
CREATE TABLE priority_settings (
    id                        boolean PRIMARY KEY DEFAULT true CHECK (id),
    -- GPUs kept free (or filled only with preemptible work) for customer-facing inference bursts
    burst_reserve_gpus        integer NOT NULL DEFAULT 0 CHECK (burst_reserve_gpus >= 0),
    -- customer-facing (real-time) inference outranks internal training
    realtime_first            boolean NOT NULL DEFAULT true,
    -- a workload runs at least this long before it may be preempted
    min_runtime_s             integer NOT NULL DEFAULT 0 CHECK (min_runtime_s >= 0),
    -- SIGTERM (checkpoint signal) to SIGKILL
    grace_period_s            integer NOT NULL DEFAULT 30 CHECK (grace_period_s BETWEEN 0 AND 3600),
    max_preemptions_per_hour  integer NOT NULL DEFAULT 4 CHECK (max_preemptions_per_hour >= 0),
    -- only checkpointable work may be preempted
    checkpointable_only       boolean NOT NULL DEFAULT false,
    -- priority added to training and fine-tuning during the night window (UTC hours)
    night_training_bonus      integer NOT NULL DEFAULT 0,
    night_start_hour          integer NOT NULL DEFAULT 22 CHECK (night_start_hour BETWEEN 0 AND 23),
    night_end_hour            integer NOT NULL DEFAULT 6 CHECK (night_end_hour BETWEEN 0 AND 23),
    updated_at                timestamptz NOT NULL DEFAULT now()
);
INSERT INTO priority_settings DEFAULT VALUES;

ALTER TABLE workloads
    ADD COLUMN slo_latency_ms integer CHECK (slo_latency_ms IS NULL OR slo_latency_ms > 0),
    ADD COLUMN deadline timestamptz,
    -- why it was last preempted (the cause), shown with the workload
    ADD COLUMN preempted_reason text;

-- GPU-hours used per tenant, decayed with a half-life, for fair share.
CREATE TABLE tenant_usage (
    tenant_id          uuid PRIMARY KEY REFERENCES tenants (id),
    decayed_gpu_hours  double precision NOT NULL DEFAULT 0,
    updated_at         timestamptz NOT NULL DEFAULT now()
);
