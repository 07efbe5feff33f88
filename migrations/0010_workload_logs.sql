-- What workloads print: each attempt's stdout and stderr in the chunks the agent shipped them in,
-- numbered per attempt and stream (a batch sent twice is stored once), kept within a byte limit
-- per workload and per tenant (the oldest output goes first).
CREATE TABLE workload_logs (
    id             bigserial PRIMARY KEY,
    workload_id    uuid NOT NULL REFERENCES workloads (id),
    tenant_id      uuid NOT NULL REFERENCES tenants (id),
    attempt        integer NOT NULL CHECK (attempt >= 1),
    stream         text NOT NULL CHECK (stream IN ('stdout', 'stderr')),
    seq            bigint NOT NULL CHECK (seq >= 0),
    at             timestamptz NOT NULL DEFAULT now(),
    text           text NOT NULL,
    bytes          integer NOT NULL CHECK (bytes >= 0),
    -- Lines the agent could not ship before this chunk (its buffer filled during an outage).
    dropped_lines  bigint NOT NULL DEFAULT 0,
    UNIQUE (workload_id, attempt, stream, seq)
);
CREATE INDEX workload_logs_workload ON workload_logs (workload_id, id);
CREATE INDEX workload_logs_tenant ON workload_logs (tenant_id, id);

-- Bytes of output kept, and dropped by the retention limits, per workload and per tenant.
ALTER TABLE workloads
    ADD COLUMN log_bytes bigint NOT NULL DEFAULT 0,
    ADD COLUMN log_dropped_bytes bigint NOT NULL DEFAULT 0;
CREATE TABLE tenant_log_usage (
    tenant_id      uuid PRIMARY KEY REFERENCES tenants (id),
    bytes          bigint NOT NULL DEFAULT 0
);
