import { useState, type FormEvent } from "react";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import type { PageProps } from "../App";
import { api, unwrap } from "../api/client";
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
