-- Sessions end exactly when their user's session generation moves on (a password change, a
-- disable, an admin's update): a counter, not a timestamp, so a session issued in the same second
-- (or by a replica whose clock differs from the database's) is ended too.
ALTER TABLE users ADD COLUMN session_generation bigint NOT NULL DEFAULT 0;

-- A tenant admin adds people by login name; whether that name already has an account (in any
-- tenant) is never revealed to them. A new account's invitation is accepted by its first login
-- (the password the tenant admin chose); an existing user accepts or declines it. Until then the
-- tenant sees only the invitation.
CREATE TABLE membership_invitations (
    -- the login name, lower-cased
    email           text NOT NULL CHECK (length(email) BETWEEN 1 AND 254),
    tenant_id       uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    role            text NOT NULL CHECK (role IN ('tenant_admin', 'tenant_member', 'viewer')),
    -- the invitation created the account: its first login accepts it
    created_account boolean NOT NULL,
    invited_by      uuid REFERENCES users (id) ON DELETE SET NULL,
    invited_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (email, tenant_id)
);
CREATE INDEX membership_invitations_tenant ON membership_invitations (tenant_id);
