-- GPU health (issue 38): a GPU the agent reports a fault for (an XID error, uncorrectable ECC
-- errors, retired pages pending a reset, fallen off the bus) is quarantined: the scheduler places
-- nothing on it and its work is stopped and requeued. It stays quarantined until its node
-- registers again (an agent restart after the repair: a fault that persists is reported again at
-- once) or a platform admin clears it.
-- Expand only: new nullable columns, so a replica of the previous version keeps working against
-- this schema (it ignores the quarantine).
ALTER TABLE gpus
    ADD COLUMN fault        text CHECK (length(fault) <= 500),
    ADD COLUMN faulted_at   timestamptz,
    ADD CONSTRAINT gpus_fault_since CHECK ((fault IS NULL) = (faulted_at IS NULL));
