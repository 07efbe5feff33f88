-- Container workloads: the OCI image a workload runs in (NULL: a process on the node), and each
-- node's container engine as its agent reported it (NULL: the node runs no container work).
ALTER TABLE workloads ADD COLUMN container jsonb
    CHECK (container IS NULL OR (jsonb_typeof(container) = 'object' AND container ? 'image'));

ALTER TABLE nodes
    ADD COLUMN container_engine text CHECK (container_engine IN ('podman', 'docker')),
    ADD COLUMN container_engine_version text,
    ADD COLUMN container_cdi boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT nodes_container_engine_version CHECK ((container_engine IS NULL) = (container_engine_version IS NULL));
