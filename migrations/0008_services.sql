-- Elastic inference services: a tenant's service with a replica template (and optionally a CPU
-- variant), its bounds and scaling behaviour, the load it reports, the tokens its replicas report
-- with, and every scale decision with its reason. Replicas are workloads that name their service.

CREATE TABLE services (
    id                   uuid PRIMARY KEY,
    tenant_id            uuid NOT NULL REFERENCES tenants (id),
    name                 text NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    class                text NOT NULL CHECK (class IN ('realtime_inference', 'batch_inference')),
    -- the main replica: resources, command, env, priority (control-plane/src/services: ReplicaTemplate)
    template             jsonb NOT NULL,
    -- a CPU variant for models that serve from CPU: resources, command, env, capacity
    cpu_variant          jsonb,
    metric               text NOT NULL CHECK (metric IN ('requests_per_second', 'concurrent_requests')),
    -- load one main replica serves at its latency target, in the metric
    capacity             double precision NOT NULL CHECK (capacity > 0),
    latency_target_ms    integer CHECK (latency_target_ms IS NULL OR latency_target_ms > 0),
    min_replicas         integer NOT NULL CHECK (min_replicas BETWEEN 0 AND 1000),
    max_replicas         integer NOT NULL CHECK (max_replicas BETWEEN 1 AND 1000 AND max_replicas >= min_replicas),
    scale_up_window_s    integer NOT NULL CHECK (scale_up_window_s BETWEEN 0 AND 3600),
    scale_down_window_s  integer NOT NULL CHECK (scale_down_window_s BETWEEN 0 AND 3600),
    stale_after_s        integer NOT NULL CHECK (stale_after_s BETWEEN 5 AND 3600),
    -- deleting drains: 'draining' until its last replica has stopped, then 'deleted' (kept for history)
    state                text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'draining', 'deleted')),
    -- the autoscaler's latest word
    desired_gpu          integer NOT NULL DEFAULT 0,
    desired_cpu          integer NOT NULL DEFAULT 0,
    demand               double precision,
    scale_reason         text,
    scaled_at            timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX services_live_name ON services (tenant_id, name) WHERE state <> 'deleted';

-- What a service reports: kept an hour (the burst reserve looks back that far), pruned by the loop.
CREATE TABLE service_loads (
    service_id           uuid NOT NULL REFERENCES services (id) ON DELETE CASCADE,
    at                   timestamptz NOT NULL DEFAULT now(),
    -- in the service's metric
    value                double precision NOT NULL CHECK (value >= 0),
    requests_per_s       double precision,
    concurrent_requests  double precision,
    queue_depth          integer,
    p95_latency_ms       double precision
);
CREATE INDEX service_loads_recent ON service_loads (service_id, at);
CREATE INDEX service_loads_at ON service_loads (at);

-- A token that may report one service's load and nothing else (stored as its sha256 only).
CREATE TABLE service_tokens (
    id                   uuid PRIMARY KEY,
    service_id           uuid NOT NULL REFERENCES services (id) ON DELETE CASCADE,
    tenant_id            uuid NOT NULL REFERENCES tenants (id),
    name                 text NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    sha256               text NOT NULL UNIQUE,
    prefix               text NOT NULL,
    created_by           uuid,
    created_at           timestamptz NOT NULL DEFAULT now(),
    last_used_at         timestamptz,
    revoked_at           timestamptz
);

-- Every scale decision: from what to what, for what demand, and why.
CREATE TABLE service_scale_events (
    id                   bigserial PRIMARY KEY,
    service_id           uuid NOT NULL REFERENCES services (id) ON DELETE CASCADE,
    at                   timestamptz NOT NULL DEFAULT now(),
    from_gpu             integer NOT NULL,
    from_cpu             integer NOT NULL,
    to_gpu               integer NOT NULL,
    to_cpu               integer NOT NULL,
    started              integer NOT NULL,
    drained              integer NOT NULL,
    demand               double precision,
    reason               text NOT NULL
);
CREATE INDEX service_scale_events_service ON service_scale_events (service_id, at DESC);

-- A replica names its service and which template it runs.
ALTER TABLE workloads
    ADD COLUMN service_id uuid REFERENCES services (id),
    ADD COLUMN replica_variant text CHECK (replica_variant IN ('gpu', 'cpu')),
    ADD CONSTRAINT workloads_replica_variant CHECK ((service_id IS NULL) = (replica_variant IS NULL));
CREATE INDEX workloads_service ON workloads (service_id) WHERE service_id IS NOT NULL;
