-- Agent restarts that leave work running (issue 38): the agent protocol each node's agent speaks
-- (`major.minor`; NULL: an agent before protocol versions, 1.0), shown beside its version so an
-- operator rolling a fleet sees which nodes are done.
-- Expand only: a new nullable column, so a replica of the previous version keeps working against
-- this schema (it neither writes nor reads it).
ALTER TABLE nodes ADD COLUMN agent_protocol text CHECK (length(agent_protocol) <= 16);
