-- GPU health (issue 38): why a GPU's clocks are held down now (`power_cap`, `sw_thermal`,
-- `hw_thermal`, `hw_power_brake`, `hw_slowdown`; comma-separated, NULL: none), from the agent's
-- latest report, beside its other latest telemetry. A warning: the GPU keeps its work.
-- Expand only: a new nullable column, so a replica of the previous version keeps working against
-- this schema (it neither writes nor reads it).
ALTER TABLE gpus ADD COLUMN throttle text CHECK (length(throttle) <= 200);
