-- Airtime's data model. Every tenant-owned row carries tenant_id; the fleet (nodes, GPUs, telemetry)
-- belongs to the platform. States are text with CHECK constraints so a bad write fails loudly.

CREATE TABLE tenants (
    id              uuid PRIMARY KEY,
    name            text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    guaranteed_gpus integer NOT NULL DEFAULT 0 CHECK (guaranteed_gpus >= 0),
    weight          integer NOT NULL DEFAULT 1 CHECK (weight > 0),
    tier            integer NOT NULL DEFAULT 0,
    may_borrow      boolean NOT NULL DEFAULT true,
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- The tenant a workload lands in when the caller names none (single-team installs, the demo).
INSERT INTO tenants (id, name) VALUES ('00000000-0000-0000-0000-000000000001', 'default');

CREATE TABLE nodes (
    id               uuid PRIMARY KEY,
    name             text NOT NULL UNIQUE,
    hostname         text NOT NULL,
    state            text NOT NULL CHECK (state IN ('ready', 'draining', 'lost')),
    cpu_millis       integer NOT NULL CHECK (cpu_millis >= 0),
    memory_mb        bigint NOT NULL CHECK (memory_mb >= 0),
    labels           jsonb NOT NULL DEFAULT '{}',
    cost_per_hour    double precision CHECK (cost_per_hour IS NULL OR cost_per_hour >= 0),
    gpu_source       text NOT NULL CHECK (gpu_source IN ('nvml', 'simulated', 'none')),
    agent_version    text NOT NULL,
    registered_at    timestamptz NOT NULL DEFAULT now(),
    last_seen_at     timestamptz NOT NULL DEFAULT now(),
    -- latest telemetry, kept on the row so fleet reads need no scan of the history
    cpu_util         real,
    memory_used_mb   bigint,
    -- bumped whenever the node's desired state (its assignments) changes; agents long-poll on it
    desired_version  bigint NOT NULL DEFAULT 1
);

CREATE TABLE gpus (
    id              uuid PRIMARY KEY,
    node_id         uuid NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    device_index    integer NOT NULL CHECK (device_index >= 0),
    uuid            text,
    model           text NOT NULL,
    memory_mb       bigint NOT NULL CHECK (memory_mb >= 0),
    nvlink_group    integer,
    simulated       boolean NOT NULL,
    present         boolean NOT NULL DEFAULT true,
    util            real,
    memory_used_mb  bigint,
    temperature_c   real,
    power_w         real,
    ecc_errors      bigint,
    UNIQUE (node_id, device_index)
);

CREATE TABLE node_telemetry (
    id              bigserial PRIMARY KEY,
    node_id         uuid NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    at              timestamptz NOT NULL DEFAULT now(),
    cpu_util        real NOT NULL,
    memory_used_mb  bigint NOT NULL
);
CREATE INDEX node_telemetry_node_at ON node_telemetry (node_id, at DESC);

CREATE TABLE gpu_telemetry (
    id              bigserial PRIMARY KEY,
    gpu_id          uuid NOT NULL REFERENCES gpus (id) ON DELETE CASCADE,
    at              timestamptz NOT NULL DEFAULT now(),
    util            real,
    memory_used_mb  bigint,
    temperature_c   real,
    power_w         real,
    ecc_errors      bigint
);
CREATE INDEX gpu_telemetry_gpu_at ON gpu_telemetry (gpu_id, at DESC);

CREATE TABLE workloads (
    id                   uuid PRIMARY KEY,
    tenant_id            uuid NOT NULL REFERENCES tenants (id),
    name                 text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    class                text NOT NULL CHECK (class IN ('realtime_inference', 'batch_inference', 'training',
                                                        'fine_tuning', 'quantization', 'embeddings', 'evaluation')),
    priority             integer NOT NULL DEFAULT 0,
    gpu_count            integer NOT NULL CHECK (gpu_count BETWEEN 0 AND 64),
    gpu_memory_mb        bigint NOT NULL DEFAULT 0 CHECK (gpu_memory_mb >= 0),
    gpu_models           text[] NOT NULL DEFAULT '{}',
    cpu_millis           integer NOT NULL DEFAULT 0 CHECK (cpu_millis >= 0),
    memory_mb            bigint NOT NULL DEFAULT 0 CHECK (memory_mb >= 0),
    cpu_capable          boolean NOT NULL DEFAULT false,
    preemptible          boolean NOT NULL DEFAULT false,
    checkpointable       boolean NOT NULL DEFAULT false,
    expected_duration_s  integer CHECK (expected_duration_s IS NULL OR expected_duration_s >= 0),
    command              text[] NOT NULL CHECK (cardinality(command) >= 1),
    env                  jsonb NOT NULL DEFAULT '{}',
    state                text NOT NULL CHECK (state IN ('pending', 'scheduled', 'running', 'preempting',
                                                         'cancelling', 'succeeded', 'failed', 'cancelled')),
    -- one attempt per placement; agent events name their attempt so a late event of an old run is ignored
    attempt              integer NOT NULL DEFAULT 0,
    node_id              uuid REFERENCES nodes (id),
    -- the node of the latest attempt, kept after it ends
    last_node_id         uuid REFERENCES nodes (id),
    pending_reason       text,
    exit_code            integer,
    message              text,
    submitted_at         timestamptz NOT NULL DEFAULT now(),
    started_at           timestamptz,
    finished_at          timestamptz,
    updated_at           timestamptz NOT NULL DEFAULT now(),
    CHECK ((state IN ('scheduled', 'running', 'preempting', 'cancelling')) = (node_id IS NOT NULL))
);
CREATE INDEX workloads_active ON workloads (state) WHERE state IN ('pending', 'scheduled', 'running', 'preempting', 'cancelling');
CREATE INDEX workloads_tenant_submitted ON workloads (tenant_id, submitted_at DESC);
CREATE INDEX workloads_node ON workloads (node_id) WHERE node_id IS NOT NULL;

-- A grant gives one GPU to one workload. The primary key on gpu_id makes a double grant impossible,
-- whatever a policy returns and however cycles interleave.
CREATE TABLE gpu_grants (
    gpu_id       uuid PRIMARY KEY REFERENCES gpus (id) ON DELETE CASCADE,
    workload_id  uuid NOT NULL REFERENCES workloads (id),
    tenant_id    uuid NOT NULL REFERENCES tenants (id),
    granted_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX gpu_grants_workload ON gpu_grants (workload_id);

-- The state history of every workload: every transition, with why.
CREATE TABLE workload_events (
    id           bigserial PRIMARY KEY,
    workload_id  uuid NOT NULL REFERENCES workloads (id),
    tenant_id    uuid NOT NULL REFERENCES tenants (id),
    at           timestamptz NOT NULL DEFAULT now(),
    from_state   text,
    to_state     text NOT NULL,
    attempt      integer NOT NULL,
    detail       text NOT NULL
);
CREATE INDEX workload_events_workload ON workload_events (workload_id, id);

CREATE TABLE policies (
    id          uuid PRIMARY KEY,
    -- NULL: a platform policy (arbitrates between tenants); else the tenant's own policy
    tenant_id   uuid REFERENCES tenants (id),
    name        text NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    builtin     boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX policies_scope_name ON policies (COALESCE(tenant_id, '00000000-0000-0000-0000-000000000000'), name);

CREATE TABLE policy_versions (
    id           uuid PRIMARY KEY,
    policy_id    uuid NOT NULL REFERENCES policies (id),
    tenant_id    uuid REFERENCES tenants (id),
    version      integer NOT NULL CHECK (version >= 1),
    sha256       text NOT NULL,
    wasm         bytea NOT NULL,
    size_bytes   integer NOT NULL,
    params       jsonb NOT NULL DEFAULT '{}',
    uploaded_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (policy_id, version)
);

-- Which version decides for a scope. scope is 'platform' or a tenant id.
CREATE TABLE policy_activations (
    scope               text PRIMARY KEY,
    policy_version_id   uuid NOT NULL REFERENCES policy_versions (id),
    activated_at        timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE scheduling_cycles (
    id                 bigserial PRIMARY KEY,
    started_at         timestamptz NOT NULL,
    finished_at        timestamptz NOT NULL,
    trigger            text NOT NULL,
    policy_version_id  uuid REFERENCES policy_versions (id),
    policy_name        text NOT NULL,
    duration_us        bigint NOT NULL,
    placed             integer NOT NULL,
    preempted          integer NOT NULL,
    pending            integer NOT NULL,
    rejected           integer NOT NULL,
    error              text
);

-- What a policy decided, where, when, with which version and why. Kept forever.
CREATE TABLE decisions (
    id                 bigserial PRIMARY KEY,
    cycle_id           bigint NOT NULL REFERENCES scheduling_cycles (id),
    tenant_id          uuid NOT NULL REFERENCES tenants (id),
    workload_id        uuid NOT NULL REFERENCES workloads (id),
    kind               text NOT NULL CHECK (kind IN ('place', 'preempt', 'keep_pending', 'rejected')),
    node_id            uuid REFERENCES nodes (id),
    gpu_ids            uuid[] NOT NULL DEFAULT '{}',
    reason             text NOT NULL,
    policy_version_id  uuid REFERENCES policy_versions (id),
    policy_name        text NOT NULL,
    decided_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX decisions_workload ON decisions (workload_id, id);
CREATE INDEX decisions_tenant ON decisions (tenant_id, id DESC);

-- A policy evaluation that failed (trap, deadline, bad output): the cycle fell back to the built-in.
CREATE TABLE policy_failures (
    id                 bigserial PRIMARY KEY,
    cycle_id           bigint REFERENCES scheduling_cycles (id),
    policy_version_id  uuid NOT NULL REFERENCES policy_versions (id),
    tenant_id          uuid REFERENCES tenants (id),
    kind               text NOT NULL,
    message            text NOT NULL,
    at                 timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX policy_failures_version ON policy_failures (policy_version_id, id DESC);
