-- Inference priced per token (issue 41).
-- `services.serving`: for a service whose replicas serve an HTTP endpoint in vLLM's metric format,
-- its objective (p95 time to first token, time per output token or request latency) and the paths
-- the agent reads (readiness, metrics); NULL: load arrives as reports, as before. Such a service
-- measures its load in tokens per second (prompt and generated).
-- `workloads.ready_attempt`: the attempt whose readiness endpoint has answered (a replica counts as
-- serving only from then; a new attempt is not ready until it answers again).
-- `replica_samples`: what the agent read from each serving replica, one row per replica and
-- heartbeat, kept as long as telemetry: the service's load, the capacity a replica sustains at the
-- objective (learned per variant) and the tokens that cost is divided by all come from these rows.
-- `pressure` is the worst observed p95 ÷ its target (1 or less: the objective held); `saturated`
-- says requests waited (or the KV cache was full), so the window's tokens are what the replica
-- could serve.
-- Expand only: a new nullable column, a widened check and a new table.
ALTER TABLE services ADD COLUMN serving jsonb;
ALTER TABLE services DROP CONSTRAINT IF EXISTS services_metric_check;
ALTER TABLE services ADD CONSTRAINT services_metric_check
    CHECK (metric IN ('requests_per_second', 'concurrent_requests', 'tokens_per_second'));
ALTER TABLE service_loads ADD COLUMN tokens_per_s double precision;
ALTER TABLE workloads ADD COLUMN ready_attempt integer;

CREATE TABLE replica_samples (
    id                 bigserial PRIMARY KEY,
    service_id         uuid NOT NULL REFERENCES services (id) ON DELETE CASCADE,
    workload_id        uuid NOT NULL REFERENCES workloads (id) ON DELETE CASCADE,
    node_id            uuid NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    variant            text NOT NULL CHECK (variant IN ('gpu', 'cpu')),
    at                 timestamptz NOT NULL DEFAULT now(),
    ready              boolean NOT NULL,
    window_s           double precision CHECK (window_s IS NULL OR window_s > 0),
    running            double precision,
    waiting            double precision,
    kv_cache_usage     double precision,
    prompt_tokens      double precision,
    generation_tokens  double precision,
    requests_finished  double precision,
    ttft_p95_ms        double precision,
    tpot_p95_ms        double precision,
    request_p95_ms     double precision,
    pressure           double precision,
    saturated          boolean
);
CREATE INDEX replica_samples_service_at ON replica_samples (service_id, at);
CREATE INDEX replica_samples_workload_at ON replica_samples (workload_id, at);
CREATE INDEX replica_samples_at ON replica_samples (at);
