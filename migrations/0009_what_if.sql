-- What-if replays: a policy version against the active one on the recorded history of the last
-- hours, run in the background by the simulator's engine (the scheduling core's second adapter).
CREATE TABLE what_if_runs (
    id                   uuid PRIMARY KEY,
    -- Who asked, and the tenant whose view the scores are cut to (NULL: a platform admin's run).
    requested_by         text NOT NULL,
    viewer_tenant_id     uuid REFERENCES tenants (id),
    -- The candidate, at the level it would run at (NULL scope tenant: the platform policy).
    policy_id            uuid NOT NULL REFERENCES policies (id),
    policy_version_id    uuid NOT NULL REFERENCES policy_versions (id),
    scope_tenant_id      uuid REFERENCES tenants (id),
    params               jsonb NOT NULL DEFAULT '{}',
    hours                integer NOT NULL CHECK (hours BETWEEN 1 AND 168),
    state                text NOT NULL DEFAULT 'queued'
                         CHECK (state IN ('queued', 'running', 'succeeded', 'failed')),
    -- 0 to 1, written as the replays advance; heartbeat_at says the runner is alive.
    progress             double precision NOT NULL DEFAULT 0,
    heartbeat_at         timestamptz,
    error                text,
    -- The fleet, the trace (JSON Lines) and the replay's settings it ran on, and both score sets.
    inputs               jsonb,
    result               jsonb,
    created_at           timestamptz NOT NULL DEFAULT now(),
    started_at           timestamptz,
    finished_at          timestamptz
);
CREATE INDEX what_if_runs_queue ON what_if_runs (created_at) WHERE state IN ('queued', 'running');
CREATE INDEX what_if_runs_policy ON what_if_runs (policy_id, created_at DESC);
