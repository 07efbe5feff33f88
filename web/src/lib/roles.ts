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
  /** The users page: a tenant admin's members, every user for a platform admin. */
  readUsers: boolean;
  /** Cordon, drain and uncordon nodes. */
  maintainNodes: boolean;
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
    readUsers: r >= RANK.tenant_admin,
    maintainNodes: platformAdmin,
  };
}

/**
 * The roles a new API token may have: at most the caller's, a tenant role when it acts in a
 * tenant and `platform_admin` only for a platform token (no tenant), as POST /tokens checks.
 */
export function rolesUpTo(role: Role, inTenant: boolean): Role[] {
  if (!inTenant) return role === "platform_admin" ? ["platform_admin"] : [];
  const ceiling = Math.min(RANK[role], RANK.tenant_admin);
  return (["viewer", "tenant_member", "tenant_admin"] as Role[]).filter((r) => RANK[r] <= ceiling);
}
