// Users (GET /api/v1/users): a tenant admin sees their tenant's members, a platform admin every
// user. Tenant admins invite people into their tenant; platform admins create accounts and
// disable or enable them. Viewers and members do not see this page.
import { useState, type FormEvent } from "react";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { createColumnHelper } from "@tanstack/react-table";
import type { PageProps } from "../App";
import { api, unwrap } from "../api/client";
import type { Role, User } from "../api/types";
import { DataTable } from "../components/DataTable";
import { Badge, ErrorNote, Loading, PageHeader, Section, WordSelect } from "../components/ui";
import { time, words } from "../lib/format";
import { rolesUpTo } from "../lib/roles";

export function Users({ me, can }: PageProps) {
  const client = useQueryClient();
  const users = useQuery({ queryKey: ["users"], queryFn: () => unwrap(api.GET("/api/v1/users")) });
  const toggle = useMutation({
    mutationFn: (u: User) => unwrap(api.PATCH("/api/v1/users/{id}", { params: { path: { id: u.id } }, body: { disabled: !u.disabled } })),
    onSuccess: () => void client.invalidateQueries({ queryKey: ["users"] }),
  });
  const col = createColumnHelper<User>();
  const columns = [
    col.accessor("email", { header: "Login" }),
    col.accessor((u) => u.memberships.map((m) => `${m.tenant}: ${words(m.role)}`).join(", "), { id: "memberships", header: "Roles" }),
    col.accessor("platform_admin", { header: "Platform admin", cell: (c) => (c.getValue() ? <Badge kind="good">yes</Badge> : "no") }),
    col.accessor("disabled", { header: "Account", cell: (c) => (c.getValue() ? <Badge kind="bad">disabled</Badge> : "active") }),
    col.accessor("created_at", { header: "Since", cell: (c) => time(c.getValue()) }),
    ...(can.platformAdmin
      ? [
          col.display({
            id: "actions",
            header: () => <span className="sr-only">Actions</span>,
            cell: (c) =>
              c.row.original.id === me.user_id ? null : (
                <button type="button" className="small" onClick={() => toggle.mutate(c.row.original)} disabled={toggle.isPending}>
                  {c.row.original.disabled ? "Enable" : "Disable"}
                </button>
              ),
          }),
        ]
      : []),
  ];
  return (
    <>
      <PageHeader title="Users">
        <p className="muted">{can.platformAdmin ? "Every user." : `The members of ${me.tenant ?? "your tenant"}.`}</p>
      </PageHeader>
      <AddUser platformAdmin={can.platformAdmin} role={me.role} tenant={me.tenant ?? null} />
      <Section title="Users" id="users">
        <ErrorNote error={users.error ?? toggle.error} />
        {users.isPending ? <Loading what="users" /> : <DataTable data={users.data ?? []} columns={columns} label="Users table" testId="users" rowKey={(u) => u.id} />}
      </Section>
    </>
  );
}

function AddUser({ platformAdmin, role, tenant }: { platformAdmin: boolean; role: Role; tenant: string | null }) {
  const client = useQueryClient();
  const roles = rolesUpTo(role, true);
  const [email, setEmail] = useState("");
  const [password, setPassword] = useState("");
  const [asRole, setAsRole] = useState<Role>("tenant_member");
  const [inTenant, setInTenant] = useState(tenant ?? "");
  const [done, setDone] = useState("");
  const add = useMutation({
    mutationFn: () =>
      unwrap(api.POST("/api/v1/users", { body: { email, password, role: asRole, ...(platformAdmin && inTenant ? { tenant: inTenant } : {}) } })),
    onSuccess: (r) => {
      setDone("id" in r ? `${email} can sign in now.` : `${email} is invited: they join when they sign in or accept.`);
      setEmail("");
      setPassword("");
      void client.invalidateQueries({ queryKey: ["users"] });
    },
  });
  const submit = (e: FormEvent) => {
    e.preventDefault();
    setDone("");
    add.mutate();
  };
  return (
    <Section title={platformAdmin ? "Add a user" : "Invite someone"} id="add-user">
      <form className="form-grid" onSubmit={submit} data-testid="add-user">
        <label>
          Login
          <input required value={email} onChange={(e) => setEmail(e.target.value)} autoComplete="off" name="new-login" />
        </label>
        <label>
          Password <span className="muted">(used if they have no account yet)</span>
          <input required type="password" minLength={8} value={password} onChange={(e) => setPassword(e.target.value)} autoComplete="new-password" name="new-password" />
        </label>
        {platformAdmin && (
          <label>
            Tenant
            <input value={inTenant} onChange={(e) => setInTenant(e.target.value)} name="new-tenant" />
          </label>
        )}
        <label>
          Role
          <WordSelect value={asRole} options={roles} onChange={setAsRole} />
        </label>
        <div className="row">
          <button type="submit" className="primary" disabled={add.isPending}>
            {platformAdmin ? "Add" : "Invite"}
          </button>
        </div>
        <ErrorNote error={add.error} />
      </form>
      {done && (
        <p className="small" role="status" data-testid="user-added">
          {done}
        </p>
      )}
    </Section>
  );
}
