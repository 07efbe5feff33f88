import { describe, expect, it } from "vitest";
import type { ApiToken } from "../api/types";
import { mayRevoke } from "../pages/Tokens";
import { can, rolesUpTo } from "./roles";

describe("what a role sees", () => {
  it("shows users to tenant admins and up only", () => {
    expect(can({ role: "viewer" }).readUsers).toBe(false);
    expect(can({ role: "tenant_member" }).readUsers).toBe(false);
    expect(can({ role: "tenant_admin" }).readUsers).toBe(true);
    expect(can({ role: "platform_admin" }).readUsers).toBe(true);
  });

  it("lets platform admins alone cordon, drain and uncordon nodes", () => {
    expect(can({ role: "viewer" }).maintainNodes).toBe(false);
    expect(can({ role: "tenant_admin" }).maintainNodes).toBe(false);
    expect(can({ role: "platform_admin" }).maintainNodes).toBe(true);
    expect(can(null).maintainNodes).toBe(false);
  });

  it("offers a new token at most the caller's role, a tenant role in a tenant", () => {
    expect(rolesUpTo("viewer", true)).toEqual(["viewer"]);
    expect(rolesUpTo("tenant_member", true)).toEqual(["viewer", "tenant_member"]);
    expect(rolesUpTo("platform_admin", true)).toEqual(["viewer", "tenant_member", "tenant_admin"]);
    expect(rolesUpTo("platform_admin", false)).toEqual(["platform_admin"]);
    expect(rolesUpTo("tenant_admin", false)).toEqual([]);
  });

  it("offers revoking a token to its owner, its tenant's admin and platform admins", () => {
    const t = { owner_id: "u1", tenant_id: "t1", revoked_at: null } as unknown as ApiToken;
    const member = can({ role: "tenant_member" });
    expect(mayRevoke(t, { user_id: "u1", tenant_id: "t1" }, member)).toBe(true);
    expect(mayRevoke(t, { user_id: "u2", tenant_id: "t1" }, member)).toBe(false);
    expect(mayRevoke(t, { user_id: "u2", tenant_id: "t1" }, can({ role: "tenant_admin" }))).toBe(true);
    expect(mayRevoke(t, { user_id: "u2", tenant_id: "t2" }, can({ role: "tenant_admin" }))).toBe(false);
    expect(mayRevoke(t, { user_id: "u9", tenant_id: null }, can({ role: "platform_admin" }))).toBe(true);
    expect(mayRevoke({ ...t, revoked_at: "2026-12-01T00:00:00Z" }, { user_id: "u1", tenant_id: "t1" }, member)).toBe(false);
  });
});
