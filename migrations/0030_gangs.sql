-- Training bigger than one server (issue 39): a gang is a workload of several members, one per
-- node, placed all together or not at all. Each member is a row of its own (its attempt, grants,
-- events and logs are per member); `gang_id` is the id of the gang's rank-0 member (so that row
-- names the gang), `gang_rank` the member's rank (0 .. gang_size), `gang_size` the members.
-- `gang_shown_version` is the node's desired-state version that first showed the member's
-- placement to its agent, and `gang_acked_at` when the agent then asked for a newer version (so it
-- has the assignment): the gang starts when every member's agent has it. Both are cleared at each
-- placement.
-- A node's `address` is where the other members of a gang reach it (the agent's advertised
-- address; the rank-0 member's is MASTER_ADDR).
-- Expand only: new nullable columns and an index, so a replica of the previous version keeps
-- working against this schema (it neither reads nor writes them, and it submits no gangs).
ALTER TABLE workloads ADD COLUMN gang_id uuid;
ALTER TABLE workloads ADD COLUMN gang_rank integer CHECK (gang_rank >= 0);
ALTER TABLE workloads ADD COLUMN gang_size integer CHECK (gang_size >= 1 AND gang_size <= 256);
ALTER TABLE workloads ADD COLUMN gang_shown_version bigint;
ALTER TABLE workloads ADD COLUMN gang_acked_at timestamptz;
CREATE INDEX workloads_gang ON workloads (gang_id) WHERE gang_id IS NOT NULL;
ALTER TABLE nodes ADD COLUMN address text CHECK (length(address) <= 255);
