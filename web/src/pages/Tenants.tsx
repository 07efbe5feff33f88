import { useState, type FormEvent } from "react";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import type { PageProps } from "../App";
import { api, unwrap } from "../api/client";
import type { Tenant, TenantQuota } from "../api/types";
import { DecisionDiff } from "../components/DecisionDiff";
import { ErrorNote, Loading, PageHeader, Section } from "../components/ui";
import { gpus, words } from "../lib/format";
import { useTenantSummary, useTenants } from "../lib/queries";
import { TenantsTable } from "./Overview";

export function Tenants({ can }: PageProps) {
  const summary = useTenantSummary();
  const tenants = useTenants();
  const byId = new Map((tenants.data ?? []).map((t) => [t.id, t]));
  return (
    <>
      <PageHeader title="Tenants and quotas" />
      <Section title="Quota use" id="quotas">
        <ErrorNote error={summary.error} />
        {summary.isPending && <Loading what="tenants" />}
        <ul className="quotas" data-testid="quotas">
          {(summary.data ?? []).map((t) => {
            const scale = Math.max(t.guaranteed_gpus, t.running_gpus + t.pending_gpus, 1);
            const own = Math.min(t.running_gpus, t.guaranteed_gpus);
            const info = byId.get(t.tenant_id);
            return (
              <li key={t.tenant_id}>
                <div className="quota-head">
                  <strong>{t.tenant}</strong> <span className={`standing standing-${t.standing}`}>{words(t.standing)}</span>
                  <span className="muted small">
                    {gpus(t.running_gpus)} held of {t.guaranteed_gpus} guaranteed · {gpus(t.borrowing_gpus)} borrowed · {gpus(t.pending_gpus)} GPUs waiting
                    {info ? ` · tier ${info.tier}, weight ${info.weight}${info.may_borrow ? "" : ", may not borrow"}` : ""}
                  </span>
                </div>
                <div
                  className="quota-bar"
                  role="img"
                  aria-label={`${t.tenant}: ${gpus(own)} own, ${gpus(t.borrowing_gpus)} borrowed, ${gpus(t.pending_gpus)} waiting, guarantee ${t.guaranteed_gpus}`}
                >
                  <span className="q-own" style={{ width: `${(100 * own) / scale}%` }} />
                  <span className="q-borrowed" style={{ width: `${(100 * t.borrowing_gpus) / scale}%` }} />
                  <span className="q-pending" style={{ width: `${(100 * t.pending_gpus) / scale}%` }} />
                  <span className="q-guarantee" style={{ left: `${(100 * t.guaranteed_gpus) / scale}%` }} />
                </div>
              </li>
            );
          })}
        </ul>
        <p className="legend small">
          <span className="legend-swatch q-own" /> own · <span className="legend-swatch q-borrowed" /> borrowed · <span className="legend-swatch q-pending" /> waiting ·{" "}
          <span className="legend-line" /> guarantee
        </p>
      </Section>
      <Section title="Standing" id="standing">
        <TenantsTable rows={summary.data ?? []} />
      </Section>
      {can.manageTenants && tenants.data && tenants.data.length > 0 && <EditQuota tenants={tenants.data} />}
      {can.manageTenants && <CreateTenant />}
    </>
  );
}

function CreateTenant() {
  const client = useQueryClient();
  const [name, setName] = useState("");
  const [guaranteed, setGuaranteed] = useState(0);
  const create = useMutation({
    mutationFn: () => unwrap(api.POST("/api/v1/tenants", { body: { name, guaranteed_gpus: guaranteed } })),
    onSuccess: () => {
      setName("");
      client.invalidateQueries({ queryKey: ["tenants"] });
    },
  });
  const submit = (e: FormEvent) => {
    e.preventDefault();
    create.mutate();
  };
  return (
    <Section title="Create a tenant" id="create-tenant">
      <form className="form-grid" onSubmit={submit}>
        <label>
          Name
          <input required value={name} onChange={(e) => setName(e.target.value)} />
        </label>
        <label>
          Guaranteed GPUs
          <input type="number" min={0} value={guaranteed} onChange={(e) => setGuaranteed(Number(e.target.value))} />
        </label>
        <div className="row">
          <button type="submit" className="primary" disabled={create.isPending}>
            Create
          </button>
        </div>
        <ErrorNote error={create.error} />
      </form>
    </Section>
  );
}


/** A tenant's quota, every field set, as the form edits it. */
type Quota = Pick<Tenant, "guaranteed_gpus" | "weight" | "tier" | "may_borrow">;

function quotaOf(t: Tenant): Quota {
  return { guaranteed_gpus: t.guaranteed_gpus, weight: t.weight, tier: t.tier, may_borrow: t.may_borrow };
}

/** Only what differs from the tenant as it is: the change the API is sent. */
function quotaChange(t: Tenant, form: Quota): TenantQuota {
  const now = quotaOf(t);
  const change: TenantQuota = {};
  if (form.guaranteed_gpus !== now.guaranteed_gpus) change.guaranteed_gpus = form.guaranteed_gpus;
  if (form.weight !== now.weight) change.weight = form.weight;
  if (form.tier !== now.tier) change.tier = form.tier;
  if (form.may_borrow !== now.may_borrow) change.may_borrow = form.may_borrow;
  return change;
}

/**
 * A tenant's quota changed by a platform admin (PATCH /tenants/{id}, audited, applied at the next
 * cycle), with what the next cycle would decide differently shown first (POST /tenants/{id}/preview).
 */
function EditQuota({ tenants }: { tenants: Tenant[] }) {
  const [id, setId] = useState<string | null>(null);
  const tenant = tenants.find((t) => t.id === id) ?? tenants[0];
  if (!tenant) return null;
  // A fresh form per tenant: switching tenants drops the edits.
  return <QuotaForm key={tenant.id} tenant={tenant} tenants={tenants} onPick={setId} />;
}

function QuotaForm({ tenant, tenants, onPick }: { tenant: Tenant; tenants: Tenant[]; onPick: (id: string) => void }) {
  const client = useQueryClient();
  const [edited, setEdited] = useState<Quota | null>(null);
  const form = edited ?? quotaOf(tenant);
  const change = quotaChange(tenant, form);
  const dirty = Object.keys(change).length > 0;
  const [saved, setSaved] = useState("");
  const preview = useQuery({
    queryKey: ["tenant-preview", tenant.id, change],
    enabled: dirty,
    retry: false,
    queryFn: () => unwrap(api.POST("/api/v1/tenants/{id}/preview", { params: { path: { id: tenant.id } }, body: change })),
  });
  const save = useMutation({
    mutationFn: () => unwrap(api.PATCH("/api/v1/tenants/{id}", { params: { path: { id: tenant.id } }, body: change })),
    onSuccess: (t) => {
      setEdited(null);
      setSaved(`Saved: ${t.name} is guaranteed ${t.guaranteed_gpus} GPUs, weight ${t.weight}, tier ${t.tier}${t.may_borrow ? "" : ", may not borrow"}. The next cycle applies it.`);
      void client.invalidateQueries({ queryKey: ["tenants"] });
      void client.invalidateQueries({ queryKey: ["tenant-summary"] });
    },
  });
  const set = (patch: Partial<Quota>) => {
    setSaved("");
    save.reset();
    setEdited({ ...form, ...patch });
  };
  const submit = (e: FormEvent) => {
    e.preventDefault();
    save.mutate();
  };
  return (
    <Section title="Change a quota" id="edit-quota">
      <form className="form-grid" onSubmit={submit} data-testid="edit-quota">
        <label>
          Tenant
          <select
            name="tenant"
            value={tenant.id}
            onChange={(e) => onPick(e.target.value)}
          >
            {tenants.map((t) => (
              <option key={t.id} value={t.id}>
                {t.name}
              </option>
            ))}
          </select>
        </label>
        <label>
          Guaranteed GPUs
          <input name="guaranteed_gpus" type="number" min={0} max={100000} value={form.guaranteed_gpus} onChange={(e) => set({ guaranteed_gpus: Number(e.target.value) })} />
        </label>
        <label>
          Weight
          <input name="weight" type="number" min={1} max={10000} value={form.weight} onChange={(e) => set({ weight: Number(e.target.value) })} />
        </label>
        <label>
          Tier
          <input name="tier" type="number" min={-1000} max={1000} value={form.tier} onChange={(e) => set({ tier: Number(e.target.value) })} />
        </label>
        <label className="inline">
          <input name="may_borrow" type="checkbox" checked={form.may_borrow} onChange={(e) => set({ may_borrow: e.target.checked })} /> May borrow idle GPUs
        </label>
        <div className="row">
          <button type="submit" className="primary" disabled={!dirty || save.isPending}>
            Save
          </button>
          {dirty && (
            <button type="button" onClick={() => setEdited(null)}>
              Discard
            </button>
          )}
        </div>
        <div className="wide">
          <ErrorNote error={save.error} />
          {saved && (
            <p role="status" className="muted">
              {saved}
            </p>
          )}
        </div>
      </form>
      {dirty && (
        <div data-testid="quota-preview">
          <h3>What this change would do now</h3>
          <ErrorNote error={preview.error} />
          {preview.isFetching && !preview.data && <Loading what="the preview" />}
          {preview.data && <DecisionDiff comparison={preview.data.comparison} candidate="with this quota" />}
        </div>
      )}
    </Section>
  );
}
