import { useMemo, useState } from "react";
import type { EChartsCoreOption } from "echarts/core";
import type { PageProps } from "../App";
import { Chart } from "../components/Chart";
import { DataTable } from "../components/DataTable";
import { RangeSelect } from "../components/History";
import { ErrorNote, Loading, PageHeader, Section, Stat } from "../components/ui";
import { duration, gpuHours, gpus, money, pct, words } from "../lib/format";
import { useFleetSummary, useHeldIdle, useTenantSummary, useUsage, useWorkloads } from "../lib/queries";
import { Link } from "../lib/router";
import { useClock } from "../lib/live";
import { pendingByReason, summaryNow, range, seriesByStep, shares, topByIdleCost } from "../lib/usage";
import type { HeldIdle, TenantStanding } from "../api/types";
import { createColumnHelper } from "@tanstack/react-table";

const RANGES = [
  { value: 1, label: "Last hour" },
  { value: 24, label: "Today (24 h)" },
  { value: 24 * 7, label: "This week (7 d)" },
];

const EMPTY = { nodes: 0, nodesReady: 0, gpus: 0, simulatedGpus: 0, allocated: 0, utilisation: null, costPerHour: 0, idleCostPerHour: 0 };

export function Overview(_: PageProps) {
  // The headline from GET /fleet/summary: its cost does not grow with the fleet (the fleet page
  // is the one that draws every GPU).
  const summary = useFleetSummary();
  const workloads = useWorkloads();
  const tenants = useTenantSummary();
  const [hours, setHours] = useState(24);
  const now = summary.data ? summaryNow(summary.data) : EMPTY;
  const pending = pendingByReason(workloads.data ?? []);

  return (
    <>
      <PageHeader title="Overview">
        <RangeSelect value={hours} onChange={setHours} choices={RANGES} testId="range" />
      </PageHeader>
      <ErrorNote error={summary.error} />
      <dl className="stats" data-testid="fleet-now">
        <Stat label="Fleet utilisation now" value={pct(now.utilisation)} hint="mean measured GPU utilisation" testId="stat-utilisation" />
        <Stat
          label="Allocated"
          value={now.gpus ? pct(now.allocated / now.gpus) : "—"}
          hint={`${gpus(Math.round(now.allocated * 100) / 100)} of ${now.gpus} GPUs held`}
          testId="stat-allocated"
        />
        <Stat label="GPUs" value={`${now.gpus}`} hint={`${now.nodesReady} of ${now.nodes} nodes ready${now.simulatedGpus ? ` · ${now.simulatedGpus} simulated` : ""}`} testId="stat-gpus" />
        <Stat label="Fleet cost" value={`${money(now.costPerHour)} / h`} testId="stat-cost" />
        <Stat
          label="Idle GPUs × cost"
          value={`${money(now.idleCostPerHour)} / h`}
          hint={`${gpus(Math.round((now.gpus - now.allocated) * 100) / 100)} GPUs unallocated`}
          testId="stat-idle-cost"
        />
      </dl>
      <UsagePanels hours={hours} />
      <div className="grid2">
        <Section title="Pending work by reason" id="pending">
          {workloads.isPending ? (
            <Loading what="the queue" />
          ) : pending.length === 0 ? (
            <p className="muted">Nothing waits.</p>
          ) : (
            <ul className="bars" data-testid="pending-reasons">
              {pending.map((p) => (
                <li key={p.reason}>
                  <span className="bar-label">{p.reason}</span>
                  <span className="bar-track" aria-hidden="true">
                    <span className="bar-fill warn" style={{ width: `${(100 * p.count) / pending[0]!.count}%` }} />
                  </span>
                  <span className="bar-value">
                    {p.count} · {gpus(p.gpus)} GPUs
                  </span>
                </li>
              ))}
            </ul>
          )}
          <p>
            <Link to="/workloads">The queue →</Link>
          </p>
        </Section>
        <Section title="Tenants" id="tenants-summary">
          <ErrorNote error={tenants.error} />
          <TenantsTable rows={tenants.data ?? []} />
        </Section>
      </div>
      <HeldIdlePanel />
    </>
  );
}

const th = createColumnHelper<TenantStanding>();
const tenantColumns = [
  th.accessor("tenant", { header: "Tenant" }),
  th.accessor("standing", { header: "Standing", cell: (c) => <span className={`standing standing-${c.getValue()}`}>{words(c.getValue())}</span> }),
  th.accessor("running_gpus", { header: "GPUs held / guaranteed", cell: (c) => `${gpus(c.getValue())} / ${c.row.original.guaranteed_gpus}` }),
  th.accessor("borrowing_gpus", { header: "Borrowing", cell: (c) => gpus(c.getValue()) }),
  th.accessor("pending_workloads", { header: "Waiting" }),
  th.accessor("top_pending_reason", { header: "Most common reason", cell: (c) => c.getValue() ?? "" }),
];
export function TenantsTable({ rows }: { rows: TenantStanding[] }) {
  return <DataTable data={rows} columns={tenantColumns} label="Tenants summary" testId="tenants-summary" rowKey={(t) => t.tenant_id} />;
}

function UsagePanels({ hours }: { hours: number }) {
  // The range is fixed per minute so the query key (and the cache) stays put between renders.
  const now = useClock(60_000);
  const r = useMemo(() => range(hours, now), [hours, now]);
  const overall = useUsage({ ...r, group_by: "none" });
  const byTenant = useUsage({ ...r, group_by: "tenant" });
  const byClass = useUsage({ ...r, group_by: "class" });
  const report = overall.data;
  const series = useMemo(() => (report ? seriesByStep(report) : []), [report]);
  const option = useMemo<EChartsCoreOption>(
    () => ({
      tooltip: { trigger: "axis" },
      legend: { top: 0 },
      grid: { left: 48, right: 16, top: 36, bottom: 28 },
      xAxis: { type: "time", min: report?.from, max: report?.to },
      yAxis: { type: "value", name: "GPUs", minInterval: 1 },
      series: [
        { name: "Busy", type: "line", showSymbol: series.length <= 24, areaStyle: { opacity: 0.25 }, data: series.map((p) => [p.at, round(p.busy)]) },
        { name: "Allocated", type: "line", showSymbol: series.length <= 24, data: series.map((p) => [p.at, round(p.allocated)]) },
        { name: "Idle", type: "line", showSymbol: series.length <= 24, lineStyle: { type: "dashed" }, data: series.map((p) => [p.at, round(p.idle)]) },
        { name: "Owned", type: "line", showSymbol: series.length <= 24, lineStyle: { width: 1 }, data: series.map((p) => [p.at, round(p.owned)]) },
      ],
    }),
    [series, report],
  );
  if (!report) return null; // GET /usage not there (yet): the panels stay hidden.
  const s = shares(report.totals);
  return (
    <>
      <dl className="stats" data-testid="usage-totals">
        <Stat label="Fleet utilisation" value={pct(s.busy)} hint="busy share of owned GPU-hours" testId="usage-busy" />
        <Stat label="Allocated share" value={pct(s.allocated)} hint={`${gpuHours(report.totals.allocated_gpu_hours)} of ${gpuHours(report.totals.owned_gpu_hours)} GPU-h`} />
        <Stat label="Idle GPU-hours" value={gpuHours(report.totals.idle_gpu_hours)} hint={`${pct(s.idle)} of owned`} />
        <Stat label="Idle cost" value={money(report.totals.idle_cost)} hint={`of ${money(report.totals.owned_cost)} owned`} testId="usage-idle-cost" />
      </dl>
      <Section title="Busy vs allocated vs idle over time" id="usage-chart">
        <Chart option={option} label={`Average GPUs busy, allocated and idle per ${duration(report.step_s)} step`} />
      </Section>
      <div className="grid2">
        <IdleCostBars title="Idle cost by tenant" id="idle-by-tenant" groups={byTenant.data?.groups ?? []} />
        <IdleCostBars title="Idle cost by class" id="idle-by-class" groups={byClass.data?.groups ?? []} words />
      </div>
    </>
  );
}

const round = (x: number) => Math.round(x * 100) / 100;

function IdleCostBars({ title, id, groups, words: w }: { title: string; id: string; groups: Parameters<typeof topByIdleCost>[0]; words?: boolean }) {
  const top = topByIdleCost(groups);
  const max = Math.max(0.0001, ...top.map((g) => g.idle_cost));
  return (
    <Section title={title} id={id}>
      {top.length === 0 ? (
        <p className="muted">No usage recorded in this range.</p>
      ) : (
        <ul className="bars" data-testid={id}>
          {top.map((g) => (
            <li key={g.group}>
              <span className="bar-label">{w ? words(g.group) : g.group}</span>
              <span className="bar-track" aria-hidden="true">
                <span className="bar-fill idle" style={{ width: `${(100 * g.idle_cost) / max}%` }} />
              </span>
              <span className="bar-value">
                {money(g.idle_cost)} · {gpuHours(g.idle_gpu_hours)} GPU-h
              </span>
            </li>
          ))}
        </ul>
      )}
    </Section>
  );
}

const hh = createColumnHelper<HeldIdle>();
const heldColumns = [
  hh.accessor("name", { header: "Workload", cell: (c) => <Link to={`/workloads/${c.row.original.workload_id}`}>{c.getValue()}</Link> }),
  hh.accessor("tenant", { header: "Tenant" }),
  hh.accessor("gpus", { header: "GPUs" }),
  hh.accessor("idle_for_s", { header: "Idle for", cell: (c) => duration(c.getValue()) }),
  hh.accessor("cost_so_far", { header: "Cost so far", cell: (c) => money(c.getValue()) }),
];

function HeldIdlePanel() {
  const held = useHeldIdle();
  if (!held.data) return null; // GET /fleet/held-idle not there (yet).
  return (
    <Section title="Held but idle" id="held-idle">
      <p className="muted">Workloads holding GPUs that have measured near zero utilisation for a while.</p>
      <DataTable data={held.data} columns={heldColumns} label="Held but idle GPUs" testId="held-idle" rowKey={(h) => h.workload_id} empty="No GPU is held idle." />
    </Section>
  );
}
