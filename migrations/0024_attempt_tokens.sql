-- A node credential acts only for what its agent was told (issue 35): each placement issues its
-- attempt a random token, given to the agent with the assignment; every event the agent reports for
-- that attempt carries it back, and an event for the current attempt whose token does not match is
-- refused and changes nothing. Work placed before this migration has none (NULL) and is checked as
-- before, until it is placed again.
ALTER TABLE workloads ADD COLUMN attempt_token uuid;
