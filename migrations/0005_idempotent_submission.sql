-- A retried submission with the same Idempotency-Key (per tenant, for a day) returns the workload the
-- first one created instead of queueing it twice. The digest of the request tells a retry from a
-- different request that reuses the key.
ALTER TABLE workloads ADD COLUMN idempotency_key text CHECK (length(idempotency_key) BETWEEN 1 AND 255);
ALTER TABLE workloads ADD COLUMN idempotency_digest text;
CREATE UNIQUE INDEX workloads_idempotency ON workloads (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
