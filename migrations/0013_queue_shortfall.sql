-- What a pending workload is short of, in words, against the fleet at the last scheduling cycle
-- (airtime_scheduler::shortfall); NULL when some ready node had room (it waits for its turn).
ALTER TABLE workloads ADD COLUMN shortfall text;
CREATE INDEX workloads_pending_queue ON workloads (priority DESC, submitted_at, id) WHERE state = 'pending';
