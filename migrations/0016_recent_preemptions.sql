-- The scheduler reads, every cycle, how often each running workload was preempted in the last hour
-- (policies spare work preempted often). One aggregate over the last hour's preemptions, found by
-- this small index, instead of one lookup per running workload: at 5,000 running workloads the
-- per-row lookups cost 80–900 ms a cycle depending on the plan the statistics of the moment chose.
CREATE INDEX workload_events_preempting_at ON workload_events (at) WHERE to_state = 'preempting';
