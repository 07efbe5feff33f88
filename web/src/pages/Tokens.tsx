// API tokens (GET /api/v1/tokens): your own; your tenant's for a tenant admin; every one for a
// platform admin. Anyone may create one up to their own role (shown once); a token is revoked by
// its owner, a tenant admin of its tenant or a platform admin — the button shows only to them.
import { useState, type FormEvent } from "react";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { createColumnHelper } from "@tanstack/react-table";
import type { PageProps } from "../App";
import { api, unwrap } from "../api/client";
import type { ApiToken, CreatedToken, Me, Role } from "../api/types";
import { DataTable } from "../components/DataTable";
import { ErrorNote, Loading, PageHeader, Section, WordSelect } from "../components/ui";
import { ago, time, words } from "../lib/format";
import { rolesUpTo, type Can } from "../lib/roles";

/** Whether the caller may revoke this token (the API decides the same way). */
export function mayRevoke(t: ApiToken, me: Pick<Me, "user_id" | "tenant_id">, c: Pick<Can, "platformAdmin" | "readAudit">): boolean {
  if (t.revoked_at) return false;
  if (c.platformAdmin) return true;
  if (t.owner_id === me.user_id && (t.tenant_id ?? null) === (me.tenant_id ?? null)) return true;
  return c.readAudit && t.tenant_id != null && t.tenant_id === me.tenant_id;
}

export function Tokens({ me, can }: PageProps) {
  const client = useQueryClient();
  const [showRevoked, setShowRevoked] = useState(false);
  const tokens = useQuery({
    queryKey: ["tokens", showRevoked],
    queryFn: () => unwrap(api.GET("/api/v1/tokens", { params: { query: showRevoked ? { include_revoked: true } : {} } })),
  });
  const revoke = useMutation({
    mutationFn: (id: string) => unwrap(api.DELETE("/api/v1/tokens/{id}", { params: { path: { id } } })),
    onSuccess: () => void client.invalidateQueries({ queryKey: ["tokens"] }),
  });
  const col = createColumnHelper<ApiToken>();
  const columns = [
    col.accessor("name", { header: "Name" }),
    col.accessor("prefix", { header: "Starts with", cell: (c) => <code>{c.getValue()}…</code> }),
    col.accessor("owner", { header: "Owner" }),
    col.accessor("role", { header: "Role", cell: (c) => words(c.getValue()) }),
    col.accessor("tenant", { header: "Tenant", cell: (c) => c.getValue() ?? "platform" }),
    col.accessor("created_at", { header: "Created", cell: (c) => time(c.getValue()) }),
    col.accessor("last_used_at", { header: "Last used", cell: (c) => (c.getValue() ? ago(c.getValue()) : "never") }),
    col.accessor("expires_at", { header: "Expires", cell: (c) => (c.row.original.revoked_at ? `revoked ${ago(c.row.original.revoked_at)}` : c.getValue() ? time(c.getValue()) : "never") }),
    col.display({
      id: "actions",
      header: () => <span className="sr-only">Actions</span>,
      cell: (c) =>
        mayRevoke(c.row.original, me, can) ? (
          <button type="button" className="small danger" onClick={() => revoke.mutate(c.row.original.id)} disabled={revoke.isPending} aria-label={`Revoke ${c.row.original.name}`}>
            Revoke
          </button>
        ) : null,
    }),
  ];
  return (
    <>
      <PageHeader title="API tokens">
        <p className="muted">
          {can.platformAdmin ? "Every token." : can.readAudit ? "Your tenant's tokens." : "Your tokens."} Send one as <code>Authorization: Bearer …</code>.
        </p>
        <label className="inline">
          <input type="checkbox" checked={showRevoked} onChange={(e) => setShowRevoked(e.target.checked)} /> Show revoked and expired
        </label>
      </PageHeader>
      <CreateToken role={me.role} inTenant={me.tenant_id != null} />
      <Section title="Tokens" id="tokens">
        <ErrorNote error={tokens.error ?? revoke.error} />
        {tokens.isPending ? <Loading what="tokens" /> : <DataTable data={tokens.data ?? []} columns={columns} label="API tokens table" testId="tokens" rowKey={(t) => t.id} />}
      </Section>
    </>
  );
}

function CreateToken({ role, inTenant }: { role: Role; inTenant: boolean }) {
  const client = useQueryClient();
  const roles = rolesUpTo(role, inTenant);
  const [name, setName] = useState("");
  const [asRole, setAsRole] = useState<Role>(roles[roles.length - 1] ?? role);
  const [days, setDays] = useState(90);
  const [created, setCreated] = useState<CreatedToken | null>(null);
  const create = useMutation({
    mutationFn: () => unwrap(api.POST("/api/v1/tokens", { body: { name, role: asRole, expires_in_days: days } })),
    onSuccess: (t) => {
      setCreated(t);
      setName("");
      void client.invalidateQueries({ queryKey: ["tokens"] });
    },
  });
  const submit = (e: FormEvent) => {
    e.preventDefault();
    create.mutate();
  };
  return (
    <Section title="Create a token" id="create-token">
      <form className="form-grid" onSubmit={submit} data-testid="create-token">
        <label>
          Name
          <input required maxLength={100} value={name} onChange={(e) => setName(e.target.value)} name="token-name" />
        </label>
        <label>
          Role
          <WordSelect value={asRole} options={roles} onChange={setAsRole} />
        </label>
        <label>
          Expires in (days)
          <input type="number" min={1} max={3650} value={days} onChange={(e) => setDays(Number(e.target.value))} />
        </label>
        <div className="row">
          <button type="submit" className="primary" disabled={create.isPending}>
            Create
          </button>
        </div>
        <ErrorNote error={create.error} />
      </form>
      {created && (
        <p className="small" role="status" data-testid="new-token">
          <strong>{created.name}</strong>: <code>{created.token}</code> — copy it now; it is not shown again.
        </p>
      )}
    </Section>
  );
}
