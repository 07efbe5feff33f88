import { useMemo, useState, type FormEvent } from "react";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { createColumnHelper } from "@tanstack/react-table";
import type { PageProps } from "../App";
import { api, unwrap } from "../api/client";
import { BUDGET_ACTIONS, BUDGET_PERIODS, type Budget, type BudgetAction, type BudgetPeriod, type Tenant, type TenantQuota } from "../api/types";
import { DataTable, type Column } from "../components/DataTable";
import { DecisionDiff } from "../components/DecisionDiff";
import { Badge, ErrorNote, Loading, PageHeader, Section, WordSelect } from "../components/ui";
import { gpuHours, gpus, time, words } from "../lib/format";
import { useClock } from "../lib/live";
import { useBudgets, useTenantSummary, useTenants } from "../lib/queries";
import { archivedWords, budgetActionWords, burnDown, burnDownWords, limitChange, limitWords, MAX_GPU_LIMIT } from "../lib/tenants";
import { TenantsTable } from "./Overview";

export function Tenants({ can }: PageProps) {
  const summary = useTenantSummary();
  const tenants = useTenants();
  const byId = new Map((tenants.data ?? []).map((t) => [t.id, t]));
  // An archived tenant keeps its row and its history, but its quota and budgets no longer change.
  const live = (tenants.data ?? []).filter((t) => !t.archived_at);
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
                  {info?.archived_at && <Badge kind="warn">archived</Badge>}
                  <span className="muted small">
                    {gpus(t.running_gpus)} held of {t.guaranteed_gpus} guaranteed · {gpus(t.borrowing_gpus)} borrowed · {gpus(t.pending_gpus)} GPUs waiting
                    {info ? ` · tier ${info.tier}, weight ${info.weight}${info.may_borrow ? "" : ", may not borrow"}${info.gpu_limit != null ? `, at most ${limitWords(info.gpu_limit)}` : ""}` : ""}
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
      <TenantList tenants={tenants.data ?? []} pending={tenants.isPending} error={tenants.error} canArchive={can.manageTenants} />
      {can.manageTenants && live.length > 0 && <EditQuota tenants={live} />}
      <Budgets tenants={live} canEdit={can.manageTenants} />
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


/**
 * A tenant's quota, every field set, as the form edits it. The GPU limit is the field's text (empty
 * leaves the limit as it is) and whether "No limit" is chosen (which removes it).
 */
type Quota = Pick<Tenant, "guaranteed_gpus" | "weight" | "tier" | "may_borrow"> & { gpu_limit: string; no_limit: boolean };

function quotaOf(t: Tenant): Quota {
  return {
    guaranteed_gpus: t.guaranteed_gpus,
    weight: t.weight,
    tier: t.tier,
    may_borrow: t.may_borrow,
    gpu_limit: t.gpu_limit != null ? String(t.gpu_limit) : "",
    no_limit: t.gpu_limit == null,
  };
}

/** Only what differs from the tenant as it is: the change the API is sent. */
function quotaChange(t: Tenant, form: Quota): TenantQuota {
  const now = quotaOf(t);
  const change: TenantQuota = {};
  if (form.guaranteed_gpus !== now.guaranteed_gpus) change.guaranteed_gpus = form.guaranteed_gpus;
  if (form.weight !== now.weight) change.weight = form.weight;
  if (form.tier !== now.tier) change.tier = form.tier;
  if (form.may_borrow !== now.may_borrow) change.may_borrow = form.may_borrow;
  const limit = limitChange(t.gpu_limit, form.gpu_limit, form.no_limit);
  if (limit !== undefined) change.gpu_limit = limit;
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
      setSaved(
        `Saved: ${t.name} is guaranteed ${t.guaranteed_gpus} GPUs, weight ${t.weight}, tier ${t.tier}${t.may_borrow ? "" : ", may not borrow"}, ` +
          `GPU limit ${limitWords(t.gpu_limit)}. The next cycle applies it.`,
      );
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
        <label>
          GPU limit
          <input
            name="gpu_limit"
            type="number"
            min={1}
            max={MAX_GPU_LIMIT}
            step={1}
            value={form.no_limit ? "" : form.gpu_limit}
            placeholder={form.no_limit ? "no limit" : "unchanged"}
            disabled={form.no_limit}
            aria-describedby="gpu-limit-hint"
            onChange={(e) => set({ gpu_limit: e.target.value })}
          />
        </label>
        <label className="inline">
          <input name="no_limit" type="checkbox" checked={form.no_limit} onChange={(e) => set({ no_limit: e.target.checked })} /> No limit
        </label>
        <p id="gpu-limit-hint" className="help wide">
          The most GPUs its work may hold at once, borrowed or not; now {limitWords(tenant.gpu_limit)}. An empty field leaves it as it is; "No limit" removes
          it.
        </p>
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

const tc = createColumnHelper<Tenant>();
const tenantColumns: Column<Tenant>[] = [
  tc.accessor("name", {
    header: "Tenant",
    cell: (c) => (
      <>
        {c.getValue()} {c.row.original.archived_at && <Badge kind="warn">archived</Badge>}
      </>
    ),
  }),
  tc.accessor("guaranteed_gpus", { header: "Guaranteed GPUs" }),
  tc.accessor("weight", { header: "Weight" }),
  tc.accessor("tier", { header: "Tier" }),
  tc.accessor("may_borrow", { header: "May borrow", cell: (c) => (c.getValue() ? "yes" : "no") }),
  tc.accessor((t) => t.gpu_limit ?? Number.POSITIVE_INFINITY, {
    id: "gpu_limit",
    header: "GPU limit",
    cell: (c) => (c.row.original.gpu_limit != null ? limitWords(c.row.original.gpu_limit) : <span className="muted">none</span>),
  }),
  tc.accessor((t) => t.archived_at ?? "", {
    id: "archived_at",
    header: "Status",
    cell: (c) =>
      c.row.original.archived_at ? <span data-archived="true">archived {time(c.row.original.archived_at)}</span> : <span data-archived="false">live</span>,
  }),
];

/** Every tenant the caller may see with its quota, its GPU limit and whether it is archived; a platform admin archives one from here. */
function TenantList({ tenants, pending, error, canArchive }: { tenants: Tenant[]; pending: boolean; error: unknown; canArchive: boolean }) {
  const client = useQueryClient();
  const [confirming, setConfirming] = useState<Tenant | null>(null);
  const archive = useMutation({
    mutationFn: (t: Tenant) => unwrap(api.POST("/api/v1/tenants/{id}/archive", { params: { path: { id: t.id } } })),
    onSuccess: () => {
      setConfirming(null);
      void client.invalidateQueries({ queryKey: ["tenants"] });
      void client.invalidateQueries({ queryKey: ["workloads"] });
    },
  });
  const { reset, isPending: busy } = archive;
  // The same columns from render to render, so a row's button stays the same element (and keeps focus).
  const columns = useMemo(
    () =>
      canArchive
        ? [
            ...tenantColumns,
            tc.display({
              id: "actions",
              header: () => <span className="sr-only">Actions</span>,
              cell: (c) => {
                const t = c.row.original;
                // The default tenant cannot be archived, nor one twice.
                if (t.archived_at || t.name === "default") return null;
                return (
                  <button
                    type="button"
                    className="small danger"
                    disabled={busy}
                    aria-label={`Archive ${t.name}`}
                    onClick={() => {
                      reset();
                      setConfirming(t);
                    }}
                  >
                    Archive
                  </button>
                );
              },
            }),
          ]
        : tenantColumns,
    [canArchive, busy, reset],
  );
  return (
    <Section title="Tenants" id="tenant-list">
      <ErrorNote error={error} />
      {pending && <Loading what="tenants" />}
      <DataTable data={tenants} columns={columns} label="Tenant list" testId="tenants" rowKey={(t) => t.id} empty="No tenants." />
      {confirming && (
        <div className="confirm" role="group" aria-labelledby="archive-confirm-title" data-testid="archive-confirm">
          <h3 id="archive-confirm-title">Archive {confirming.name}?</h3>
          <p>Archiving ends {confirming.name}'s work gracefully, and it admits nothing new from then on:</p>
          <ul>
            <li>its pending work is cancelled;</li>
            <li>its running work is stopped, each workload with its grace period;</li>
            <li>its services are drained.</li>
          </ul>
          <p>Its history, decisions and accounting remain.</p>
          <div className="row">
            <button type="button" className="danger" onClick={() => archive.mutate(confirming)} disabled={busy}>
              Yes, archive {confirming.name}
            </button>
            <button type="button" autoFocus onClick={() => setConfirming(null)}>
              Keep it
            </button>
          </div>
        </div>
      )}
      <ErrorNote error={archive.error} />
      {archive.data && (
        <p role="status" className="muted" data-testid="archive-result">
          {archivedWords(archive.data)}
        </p>
      )}
    </Section>
  );
}

const bc = createColumnHelper<Budget>();
const budgetColumns: Column<Budget>[] = [
  bc.accessor("tenant", { header: "Tenant" }),
  bc.accessor("period", {
    header: "Period",
    cell: (c) => (
      <>
        {words(c.getValue())} <span className="muted small">until {time(c.row.original.period_end)}</span>
      </>
    ),
  }),
  bc.accessor("gpu_hours", { header: "Budget, GPU-h", cell: (c) => gpuHours(c.getValue()) }),
  bc.accessor("used_gpu_hours", { header: "Used, GPU-h", cell: (c) => gpuHours(c.getValue()) }),
  bc.accessor("remaining_gpu_hours", { header: "Remaining, GPU-h", cell: (c) => gpuHours(c.getValue()) }),
];

/** The budget columns that read the clock: the burn-down against the period, and the standing. */
function clockedColumns(now: number): Column<Budget>[] {
  return [
    bc.accessor((b) => (b.gpu_hours > 0 ? b.remaining_gpu_hours / b.gpu_hours : 0), {
      id: "burn_down",
      header: "Left vs the period",
      cell: (c) => {
        const b = c.row.original;
        const d = burnDown(b, now);
        return (
          <span className="budget-bar" role="img" aria-label={burnDownWords(b, d)}>
            <span className={`bar-fill${d.overPace ? " warn" : ""}`} style={{ width: `${100 * d.remaining}%` }} />
            <span className="budget-pace" style={{ left: `${100 * d.pace}%` }} />
          </span>
        );
      },
    }),
    bc.accessor("action", { header: "When used up", cell: (c) => words(c.getValue()) }),
    bc.accessor("exhausted", {
      header: "Standing",
      cell: (c) => {
        const b = c.row.original;
        if (b.exhausted) return <Badge kind="bad">exhausted</Badge>;
        return burnDown(b, now).overPace ? <Badge kind="warn">ahead of pace</Badge> : <Badge kind="good">on track</Badge>;
      },
    }),
  ];
}

/** GPU-hour budgets and how far each is used this period; a platform admin sets or removes one. */
function Budgets({ tenants, canEdit }: { tenants: Tenant[]; canEdit: boolean }) {
  const budgets = useBudgets();
  const now = useClock(60_000);
  const columns = useMemo(() => [...budgetColumns, ...clockedColumns(now)], [now]);
  const rows = budgets.data ?? [];
  return (
    <Section title="GPU-hour budgets" id="budgets">
      <ErrorNote error={budgets.error} />
      {budgets.isPending && <Loading what="budgets" />}
      <DataTable data={rows} columns={columns} label="Budgets" testId="budgets" rowKey={(b) => `${b.tenant_id}/${b.period}`} empty="No budgets set." />
      <p className="legend small">
        <span className="legend-swatch bar-fill" /> budget left · <span className="legend-swatch bar-fill warn" /> left, used faster than the period passes ·{" "}
        <span className="legend-line" /> what an even pace would leave
      </p>
      {canEdit && tenants.length > 0 && <EditBudget tenants={tenants} budgets={rows} />}
    </Section>
  );
}

/** Which budget the form edits: a fresh form per tenant and period, filled in from its budget if it has one. */
function EditBudget({ tenants, budgets }: { tenants: Tenant[]; budgets: Budget[] }) {
  const [id, setId] = useState<string | null>(null);
  const [period, setPeriod] = useState<BudgetPeriod>("month");
  const tenant = tenants.find((t) => t.id === id) ?? tenants[0];
  if (!tenant) return null;
  const budget = budgets.find((b) => b.tenant_id === tenant.id && b.period === period);
  return <BudgetForm key={`${tenant.id}/${period}`} tenant={tenant} tenants={tenants} period={period} budget={budget} onPick={setId} onPeriod={setPeriod} />;
}

function BudgetForm({
  tenant,
  tenants,
  period,
  budget,
  onPick,
  onPeriod,
}: {
  tenant: Tenant;
  tenants: Tenant[];
  period: BudgetPeriod;
  budget: Budget | undefined;
  onPick: (id: string) => void;
  onPeriod: (p: BudgetPeriod) => void;
}) {
  const client = useQueryClient();
  const [hours, setHours] = useState(budget ? String(budget.gpu_hours) : "");
  const [action, setAction] = useState<BudgetAction>(budget?.action ?? "warn");
  const [done, setDone] = useState("");
  const path = { params: { path: { id: tenant.id, period } } };
  const change = useMutation({
    mutationFn: async (what: "set" | "remove") => {
      if (what === "remove") {
        await unwrap(api.DELETE("/api/v1/tenants/{id}/budgets/{period}", path));
        return `Removed ${tenant.name}'s ${period}ly budget.`;
      }
      const b = await unwrap(api.PUT("/api/v1/tenants/{id}/budgets/{period}", { ...path, body: { gpu_hours: Number(hours), action } }));
      return `Saved: ${b.tenant} may use ${gpuHours(b.gpu_hours)} GPU-hours a ${b.period}, then ${budgetActionWords(b.action)}.`;
    },
    onSuccess: (message) => {
      setDone(message);
      void client.invalidateQueries({ queryKey: ["tenants", "budgets"] });
    },
  });
  const edit = () => {
    setDone("");
    change.reset();
  };
  const submit = (e: FormEvent) => {
    e.preventDefault();
    change.mutate("set");
  };
  return (
    <form className="form-grid" onSubmit={submit} data-testid="edit-budget" aria-label="Set or remove a budget">
      <label>
        Tenant
        <select name="budget_tenant" value={tenant.id} onChange={(e) => onPick(e.target.value)}>
          {tenants.map((t) => (
            <option key={t.id} value={t.id}>
              {t.name}
            </option>
          ))}
        </select>
      </label>
      <label>
        Period
        <WordSelect name="budget_period" value={period} options={BUDGET_PERIODS} onChange={onPeriod} />
      </label>
      <label>
        GPU-hours per {period}
        <input
          name="gpu_hours"
          type="number"
          required
          min={0.01}
          step="any"
          value={hours}
          onChange={(e) => {
            edit();
            setHours(e.target.value);
          }}
        />
      </label>
      <label>
        When used up
        <WordSelect
          name="budget_action"
          value={action}
          options={BUDGET_ACTIONS}
          onChange={(a) => {
            edit();
            setAction(a);
          }}
        />
      </label>
      <p className="help wide">
        {budgetActionWords(action)}. Used GPU-hours are counted as billed (a quarter GPU for an hour is 0.25); a change applies to the next submission.
      </p>
      <div className="row">
        <button type="submit" className="primary" disabled={change.isPending || hours.trim() === ""}>
          {budget ? "Change budget" : "Set budget"}
        </button>
        {budget && (
          <button type="button" className="danger" onClick={() => change.mutate("remove")} disabled={change.isPending}>
            Remove budget
          </button>
        )}
      </div>
      <div className="wide">
        <ErrorNote error={change.error} />
        {done && (
          <p role="status" className="muted">
            {done}
          </p>
        )}
      </div>
    </form>
  );
}
