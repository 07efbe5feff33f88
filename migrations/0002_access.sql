-- Access control: people, their roles in tenants, API tokens, node enrolment and credentials, and
-- the audit log. No secret is ever stored: passwords are argon2id PHC strings, every token is kept as
-- the sha256 of its secret with a short prefix for people to recognise it.

CREATE TABLE users (
    id                  uuid PRIMARY KEY,
    -- the login name: an email address or a plain username, unique without regard to case
    email               text NOT NULL CHECK (length(email) BETWEEN 1 AND 254),
    -- argon2id, PHC string format ($argon2id$v=19$m=...,t=...,p=...$salt$hash)
    password_hash       text NOT NULL CHECK (password_hash LIKE '$argon2id$%'),
    -- the platform team: the fleet, tenants, quotas, priority settings and the platform policy
    platform_admin      boolean NOT NULL DEFAULT false,
    disabled            boolean NOT NULL DEFAULT false,
    -- sessions issued before this instant are refused (password change, disable, "log out everywhere")
    sessions_valid_after timestamptz NOT NULL DEFAULT now(),
    created_at          timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX users_email ON users (lower(email));

-- A person's role in a tenant. Platform admins are users with platform_admin; they need no membership.
CREATE TABLE memberships (
    user_id     uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    tenant_id   uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    role        text NOT NULL CHECK (role IN ('tenant_admin', 'tenant_member', 'viewer')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, tenant_id)
);
CREATE INDEX memberships_tenant ON memberships (tenant_id);

-- Tokens for automation and CI: `at_<secret>`, shown once at creation.
CREATE TABLE api_tokens (
    id            uuid PRIMARY KEY,
    -- NULL: a platform token (role platform_admin); else the tenant it acts in
    tenant_id     uuid REFERENCES tenants (id) ON DELETE CASCADE,
    owner_id      uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name          text NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    role          text NOT NULL CHECK (role IN ('platform_admin', 'tenant_admin', 'tenant_member', 'viewer')),
    secret_sha256 text NOT NULL UNIQUE CHECK (length(secret_sha256) = 64),
    -- the first characters of the token, enough to recognise it in a list
    prefix        text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz,
    last_used_at  timestamptz,
    revoked_at    timestamptz,
    CHECK ((tenant_id IS NULL) = (role = 'platform_admin'))
);
CREATE INDEX api_tokens_tenant ON api_tokens (tenant_id, created_at DESC);
CREATE INDEX api_tokens_owner ON api_tokens (owner_id, created_at DESC);

-- One-time tokens a node agent exchanges for its own credential (`et_<secret>`).
CREATE TABLE enrolment_tokens (
    id            uuid PRIMARY KEY,
    secret_sha256 text NOT NULL UNIQUE CHECK (length(secret_sha256) = 64),
    prefix        text NOT NULL,
    -- when set, only a node of this name may enrol with it (and it may replace that node's credential)
    node_name     text,
    created_by    uuid NOT NULL REFERENCES users (id),
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    used_at       timestamptz,
    revoked_at    timestamptz
);

-- A node agent's own credential (`nc_<secret>`), scoped to one node name; node_id is filled when the
-- node registers (node ids are stable per name).
CREATE TABLE node_credentials (
    id                  uuid PRIMARY KEY,
    node_name           text NOT NULL,
    node_id             uuid REFERENCES nodes (id) ON DELETE SET NULL,
    secret_sha256       text NOT NULL UNIQUE CHECK (length(secret_sha256) = 64),
    prefix              text NOT NULL,
    enrolment_token_id  uuid REFERENCES enrolment_tokens (id),
    created_at          timestamptz NOT NULL DEFAULT now(),
    last_used_at        timestamptz,
    revoked_at          timestamptz
);
-- At most one live credential per node.
CREATE UNIQUE INDEX node_credentials_live ON node_credentials (node_name) WHERE revoked_at IS NULL;

-- Every change: who, when, what, from where. Append-only.
CREATE TABLE audit_log (
    id           bigserial PRIMARY KEY,
    at           timestamptz NOT NULL DEFAULT now(),
    -- user, api_token, node or system
    actor_kind   text NOT NULL CHECK (actor_kind IN ('user', 'api_token', 'node', 'system')),
    actor_id     uuid,
    actor_name   text NOT NULL,
    -- the tenant whose data changed; NULL for platform-wide changes
    tenant_id    uuid REFERENCES tenants (id),
    action       text NOT NULL,
    target_kind  text NOT NULL,
    target_id    text,
    detail       jsonb NOT NULL DEFAULT '{}',
    source_ip    inet
);
CREATE INDEX audit_log_tenant ON audit_log (tenant_id, id DESC);
CREATE INDEX audit_log_action ON audit_log (action, id DESC);
