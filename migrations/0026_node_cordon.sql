-- Cordon and drain (issue 38): an operator's hold on a node, kept apart from its liveness
-- (`state`: ready or lost, which registration and the fleet watch write), so neither a
-- re-registering agent nor a node lost and heard again lifts it. `cordoned`: no new placements,
-- its work runs on; `draining`: cordoned, and its work is moved off (checkpointable and
-- preemptible work stopped and requeued, service replicas replaced elsewhere first, the rest left
-- to finish until `drain_deadline`, when it is stopped and requeued too).
-- Expand only: the columns are new and nullable, so a replica of the previous version keeps
-- working against this schema (it ignores the hold, and would place work on a cordoned node).
ALTER TABLE nodes
    ADD COLUMN cordon         text CHECK (cordon IN ('cordoned', 'draining')),
    ADD COLUMN cordon_reason  text CHECK (length(cordon_reason) <= 500),
    ADD COLUMN cordoned_at    timestamptz,
    ADD COLUMN cordoned_by    text,
    ADD COLUMN drain_deadline timestamptz,
    ADD CONSTRAINT nodes_cordon_since CHECK ((cordon IS NULL) = (cordoned_at IS NULL)),
    ADD CONSTRAINT nodes_drain_deadline CHECK (drain_deadline IS NULL OR cordon = 'draining');

-- The state a node shows and the scheduler reads: lost wins (it runs nothing we know of), then the
-- operator's hold, then its liveness. One definition for the API, the metrics and the scheduler.
CREATE FUNCTION node_shown_state(state text, cordon text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT CASE WHEN state = 'lost' THEN 'lost' ELSE COALESCE(cordon, state) END $$;
