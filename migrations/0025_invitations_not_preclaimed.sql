-- An invitation cannot be pre-claimed (issue 35): a tenant admin who invites an unused login name
-- makes its account with a password they chose, so they control it. Such an account remembers the
-- tenant it was made through; another tenant's invitation to it is held (`held`): kept and shown
-- to that tenant as pending, like any invitation, but the account cannot accept it; a platform
-- admin adds the person directly instead. An account made by a platform admin, or before this
-- migration, is as before.
ALTER TABLE users ADD COLUMN created_by_tenant uuid REFERENCES tenants (id) ON DELETE SET NULL;
ALTER TABLE membership_invitations ADD COLUMN held boolean NOT NULL DEFAULT false;
-- Accounts whose creating invitation is still pending were made through that tenant.
UPDATE users u SET created_by_tenant = i.tenant_id
  FROM membership_invitations i WHERE i.created_account AND i.email = lower(u.email);
