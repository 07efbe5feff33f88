// What the signed-in caller may do (GET /api/v1/auth/me), so the app hides what a role cannot do.
// The API enforces all of it regardless; this only keeps the page honest.
import type { Me, Role } from "../api/types";

const RANK: Record<Role, number> = { viewer: 0, tenant_member: 1, tenant_admin: 2, platform_admin: 3 };

export interface Can {
  role: Role;
  platformAdmin: boolean;
  submit: boolean;
  cancel: boolean;
  editPriorities: boolean;
  managePolicies: boolean;
  dryRun: boolean;
  readAudit: boolean;
  manageTenants: boolean;
}

export function can(me: Pick<Me, "role"> | null | undefined): Can {
  const role: Role = me?.role ?? "viewer";
  const r = RANK[role];
  const platformAdmin = role === "platform_admin";
  return {
    role,
    platformAdmin,
    submit: r >= RANK.tenant_member,
    cancel: r >= RANK.tenant_member,
    editPriorities: platformAdmin,
    managePolicies: r >= RANK.tenant_admin,
    dryRun: platformAdmin,
    readAudit: r >= RANK.tenant_admin,
    manageTenants: platformAdmin,
  };
}
