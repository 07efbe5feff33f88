// Elastic inference services (GET /api/v1/services): the caller's tenant's, every tenant's for
// platform admins. A service's page draws its replicas against its demand over time from its
// scale decisions (GET /api/v1/services/{id}) and lists those decisions with their reasons; a
// token-priced service's page also shows its serving: its latency objective, whether each variant
// holds it, what one replica sustains at it and what a million tokens cost.
import { useMemo } from "react";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { createColumnHelper } from "@tanstack/react-table";
import type { EChartsCoreOption } from "echarts/core";
import type { PageProps } from "../App";
import { api, unwrap } from "../api/client";
import type { ScaleEvent, Service } from "../api/types";
import { Chart } from "../components/Chart";
import { DataTable } from "../components/DataTable";
import { Badge, ErrorNote, Loading, PageHeader, Section, Stat, StateBadge } from "../components/ui";
import { ago, duration, time, words } from "../lib/format";
import { replicaSeries } from "../lib/compare";
import { pollEvery } from "../lib/live";
import { Link, navigate } from "../lib/router";
import {
  LATENCIES,
  latencyHolds,
  ms,
  objectiveWords,
  perMillion,
  savingPercent,
  savingWords,
  servingOf,
  servingSeries,
  tokensPerSecond,
  variantHolds,
  variantWords,
  type Holds,
  type ServingObjective,
  type ServingReport,
  type VariantServing,
} from "../lib/serving";

const useServices = () => useQuery({ queryKey: ["services"], queryFn: () => unwrap(api.GET("/api/v1/services")), refetchInterval: pollEvery(5000) });

const load = (v: number | null | undefined, s: Pick<Service, "metric">) => (v == null ? "—" : `${Math.round(v * 100) / 100} ${words(s.metric)}`);

const col = createColumnHelper<Service>();
const columns = [
  col.accessor("name", { header: "Service", cell: (c) => <Link to={`/services/${c.row.original.id}`}>{c.getValue()}</Link> }),
  col.accessor("tenant", { header: "Tenant" }),
  col.accessor("class", { header: "Class", cell: (c) => words(c.getValue()) }),
  col.accessor((s) => s.running_gpu_replicas + s.running_cpu_replicas, {
    id: "running",
    header: "Running",
    cell: (c) => `${c.getValue()} of ${c.row.original.desired_gpu_replicas + c.row.original.desired_cpu_replicas} wanted`,
  }),
  col.accessor("pending_replicas", { header: "Waiting" }),
  col.accessor("demand", { header: "Demand", cell: (c) => load(c.getValue(), c.row.original) }),
  col.accessor("latest_load", { header: "Latest report", cell: (c) => `${load(c.getValue(), c.row.original)} ${c.row.original.latest_load_at ? ago(c.row.original.latest_load_at) : ""}` }),
  col.accessor("state", { header: "State", cell: (c) => <StateBadge state={c.getValue()} /> }),
];

export function Services(_: PageProps) {
  const services = useServices();
  return (
    <>
      <PageHeader title="Services">
        <p className="muted">Inference services scale their replicas with the load they report, between their bounds.</p>
      </PageHeader>
      <ErrorNote error={services.error} />
      {services.isPending ? (
        <Loading what="services" />
      ) : (
        <Section title="Services" id="services">
          <DataTable
            data={services.data ?? []}
            columns={columns}
            label="Services table"
            testId="services"
            rowKey={(s) => s.id}
            onRowClick={(s) => navigate(`/services/${s.id}`)}
            empty="No service yet (create one with POST /api/v1/services or the CLI)."
          />
        </Section>
      )}
    </>
  );
}

const ev = createColumnHelper<ScaleEvent>();
const eventColumns = [
  ev.accessor("at", { header: "When", cell: (c) => time(c.getValue()) }),
  ev.accessor((e) => `${e.from_gpu + e.from_cpu} → ${e.to_gpu + e.to_cpu}`, { id: "replicas", header: "Replicas" }),
  ev.accessor((e) => `${e.to_gpu} main · ${e.to_cpu} CPU variant`, { id: "variants", header: "By variant" }),
  ev.accessor((e) => `+${e.started} / −${e.drained}`, { id: "moved", header: "Started / drained" }),
  ev.accessor("demand", { header: "Demand", cell: (c) => (c.getValue() == null ? "stale" : Math.round(c.getValue()! * 100) / 100) }),
  ev.accessor("reason", { header: "Why" }),
];

export function ServicePage({ id, can }: PageProps & { id: string }) {
  const client = useQueryClient();
  const detail = useQuery({
    queryKey: ["service", id],
    queryFn: () => unwrap(api.GET("/api/v1/services/{id}", { params: { path: { id } } })),
    refetchInterval: pollEvery(5000),
  });
  const remove = useMutation({
    mutationFn: () => unwrap(api.DELETE("/api/v1/services/{id}", { params: { path: { id } } })),
    onSuccess: () => void client.invalidateQueries({ queryKey: ["service", id] }),
  });
  const s = detail.data;
  const option = useMemo((): EChartsCoreOption | null => {
    if (!s) return null;
    const series = replicaSeries(s, new Date().toISOString());
    return {
      tooltip: { trigger: "axis" },
      legend: { top: 0 },
      grid: { left: 48, right: 16, top: 32, bottom: 28 },
      xAxis: { type: "time" },
      yAxis: { type: "value", name: "replicas", min: 0, minInterval: 1 },
      series: [
        { name: "Replicas wanted", type: "line", step: "end", showSymbol: false, data: series.replicas },
        { name: "Demand (replicas' worth)", type: "line", showSymbol: true, connectNulls: false, data: series.demandReplicas },
      ],
    };
  }, [s]);
  if (detail.isPending) return <Loading what="the service" />;
  if (detail.error || !s) return <ErrorNote error={detail.error ?? new Error("no such service")} />;
  const mayChange = can.submit && s.state === "active";
  const serving = servingOf(s);
  return (
    <>
      <PageHeader title={s.name}>
        <p className="muted">
          <Link to="/services">← Services</Link> · {s.tenant} · {words(s.class)} · <StateBadge state={s.state} /> {s.cpu_variant && <Badge>CPU variant</Badge>}
        </p>
      </PageHeader>
      <dl className="stats" data-testid="service-now">
        <Stat
          label="Running"
          value={s.cpu_variant ? `${s.running_gpu_replicas} main · ${s.running_cpu_replicas} CPU` : `${s.running_gpu_replicas}`}
          hint={`${s.pending_replicas} waiting for a place`}
          testId="service-running"
        />
        <Stat label="Wanted" value={`${s.desired_gpu_replicas + s.desired_cpu_replicas}`} hint={`between ${s.min_replicas} and ${s.max_replicas}`} testId="service-wanted" />
        <Stat label="Demand" value={load(s.demand, s)} hint={`${s.capacity} ${words(s.metric)} per replica`} />
        <Stat label="Latest report" value={load(s.latest_load, s)} hint={s.latest_load_at ? ago(s.latest_load_at) : "none yet"} />
      </dl>
      {s.scale_reason && (
        <p className="small" data-testid="scale-reason">
          Last decision: {s.scale_reason}
        </p>
      )}
      {serving && <Serving serving={serving} name={s.name} />}
      <Section title="Replicas against demand" id="service-replicas">
        {s.scale_events.length === 0 ? (
          <p className="muted">No scale decision yet.</p>
        ) : (
          option && <Chart option={option} label={`Replicas wanted and demand of ${s.name} over its last ${s.scale_events.length} scale decisions`} height={260} />
        )}
      </Section>
      <Section title="Scale decisions" id="scale-events">
        <DataTable data={s.scale_events} columns={eventColumns} label="Scale decisions table" testId="scale-events" rowKey={(e) => `${e.at}-${e.reason}`} empty="None yet." />
      </Section>
      {mayChange && (
        <Section title="Delete" id="service-delete">
          <p className="small">Deleting drains its replicas and frees their GPUs.</p>
          <button type="button" className="danger" onClick={() => remove.mutate()} disabled={remove.isPending}>
            Delete {s.name}
          </button>
          <ErrorNote error={remove.error} />
        </Section>
      )}
    </>
  );
}

/** A held or broken mark (`data-holds`), or a muted "no reading". */
function HoldsMark({ holds, what }: { holds: Holds; what?: string }) {
  if (holds === "unknown") return <span className="muted small" data-holds="unknown">no reading</span>;
  return (
    <Badge kind={holds === "held" ? "good" : "bad"}>
      <span data-holds={holds} title={what}>
        {holds === "held" ? "✓ held" : "✗ broken"}
      </span>
    </Badge>
  );
}

const vs = createColumnHelper<VariantServing>();
/** The variants' table, its latency columns against the objective's targets. */
function variantColumns(objective: ServingObjective) {
  return [
    vs.accessor("variant", { header: "Variant", cell: (c) => variantWords(c.getValue()) }),
    vs.accessor("ready_replicas", { header: "Ready", cell: (c) => `${c.getValue()} of ${c.row.original.replicas}` }),
    vs.accessor("tokens_per_s", { header: "Tokens/s", cell: (c) => tokensPerSecond(c.getValue()) }),
    ...LATENCIES.map((l) =>
      vs.accessor((v) => v[l.key] ?? null, {
        id: l.key,
        header: objective[l.key] == null ? `${l.label} p95` : `${l.label} p95 (≤ ${ms(objective[l.key])})`,
        cell: (c) => {
          const target = objective[l.key];
          return (
            <>
              {ms(c.getValue())} {target != null && c.getValue() != null && <HoldsMark holds={latencyHolds(c.getValue(), target)} what={`${l.label} p95 against ${ms(target)}`} />}
            </>
          );
        },
      }),
    ),
    vs.accessor((v) => v.pressure ?? null, {
      id: "objective",
      header: "Objective",
      cell: (c) => (
        <>
          <HoldsMark holds={variantHolds(c.row.original)} />
          {c.getValue() != null && <span className="muted small"> {Math.round(c.getValue()! * 100) / 100}× target</span>}
        </>
      ),
    }),
    vs.accessor((v) => v.capacity.tokens_per_s, {
      id: "capacity",
      header: "Capacity per replica",
      cell: (c) => {
        const k = c.row.original.capacity;
        return (
          <>
            {tokensPerSecond(k.tokens_per_s)} tokens/s
            <br />
            <span className="muted small">
              {k.basis} · {k.samples} reads, {k.saturated_samples} saturated at the objective · declared {tokensPerSecond(k.declared_tokens_per_s)}
            </span>
          </>
        );
      },
    }),
    vs.accessor((v) => v.cost_per_million_tokens ?? null, { id: "cost_per_million", header: "Cost per 1M tokens", cell: (c) => perMillion(c.getValue()) }),
  ];
}

/** A token-priced service's serving over its report's window: the objective, each variant against it, totals and history. */
function Serving({ serving, name }: { serving: ServingReport; name: string }) {
  const columns = useMemo(() => variantColumns(serving.objective), [serving.objective]);
  const option = useMemo((): EChartsCoreOption => {
    const series = servingSeries(serving.history);
    return {
      tooltip: { trigger: "axis" },
      legend: { top: 0 },
      grid: { left: 56, right: 56, top: 32, bottom: 28 },
      xAxis: { type: "time" },
      yAxis: [
        { type: "value", name: "tokens/s", min: 0 },
        { type: "value", name: "per 1M tokens", min: 0, splitLine: { show: false } },
      ],
      series: [
        { name: "Tokens/s", type: "line", showSymbol: series.tokens.length <= 30, connectNulls: false, areaStyle: { opacity: 0.2 }, data: series.tokens },
        { name: "Cost per 1M tokens", type: "line", yAxisIndex: 1, showSymbol: series.cost.length <= 30, connectNulls: false, data: series.cost },
      ],
    };
  }, [serving.history]);
  const saving = savingPercent(serving);
  const last = duration(serving.window_s);
  return (
    <Section title="Serving" id="service-serving">
      <p data-testid="serving-objective">
        Objective: <strong>{objectiveWords(serving.objective)}</strong>
      </p>
      <p className="small muted">
        Its agents read each replica&apos;s {serving.metrics_path} (vLLM&apos;s metrics) and {serving.ready_path} (readiness); totals over the last {last}.
      </p>
      <dl className="stats" data-testid="serving-totals">
        <Stat label="Tokens/s" value={tokensPerSecond(serving.tokens_per_s)} hint={`${Math.round(serving.tokens).toLocaleString("en-US")} tokens in the last ${last}`} testId="serving-tokens" />
        <Stat label="Cost per 1M tokens" value={perMillion(serving.cost_per_million_tokens)} hint={`${perMillion(serving.cost)} spent in the last ${last}`} testId="serving-cost" />
        <Stat label="GPU only, per 1M tokens" value={perMillion(serving.gpu_only_cost_per_million_tokens)} hint="the same tokens on GPU replicas only" testId="serving-gpu-only" />
        <Stat label="Saving" value={savingWords(saving)} testId="serving-saving" />
      </dl>
      <DataTable data={serving.variants} columns={columns} label="Serving by variant table" testId="serving-variants" rowKey={(v) => v.variant} empty="No replica read yet." />
      {serving.history.length > 0 && (
        <Chart option={option} label={`Tokens per second and cost per million tokens of ${name} over the last ${last}, one point per 5 min`} height={220} />
      )}
    </Section>
  );
}
