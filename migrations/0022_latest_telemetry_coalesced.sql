-- The latest telemetry values on `gpus` and `gpu_grants` are written by each control plane's
-- latest-values writer (`fleet::telemetry`), at most once a second per GPU and share, instead of
-- by every flush: history keeps every sample, the rows the newest. `telemetry_at` is the time of
-- the sample a row holds (the `at` of its history row: the flush's transaction time), so that of
-- two replicas writing one GPU's values, the newer sample wins whichever writes last.
--
-- Nullable without a default: adding them rewrites nothing.
ALTER TABLE gpus ADD COLUMN telemetry_at timestamptz;
ALTER TABLE gpu_grants ADD COLUMN telemetry_at timestamptz;
