// One GPU: what it is, who holds it, and its telemetry over time (utilisation, memory, temperature,
// power) from GET /api/v1/gpus/{id}/history.
import { useMemo, useState } from "react";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import type { EChartsCoreOption } from "echarts/core";
import type { PageProps } from "../App";
import { api, unwrap } from "../api/client";
import { Chart } from "../components/Chart";
import { Badge, ErrorNote, Loading, PageHeader, Section, Stat } from "../components/ui";
import { duration, gib, pct, words } from "../lib/format";
import { historyRange, historySeries } from "../lib/history";
import { pollEvery, useClock } from "../lib/live";
import { Link } from "../lib/router";

const RANGES = [
  { minutes: 15, label: "Last 15 minutes" },
  { minutes: 60, label: "Last hour" },
  { minutes: 6 * 60, label: "Last 6 hours" },
  { minutes: 24 * 60, label: "Last 24 hours" },
];

export function GpuPage({ id, can }: PageProps & { id: string }) {
  const [minutes, setMinutes] = useState(60);
  const gpu = useQuery({ queryKey: ["gpu", id], queryFn: () => unwrap(api.GET("/api/v1/gpus/{id}", { params: { path: { id } } })), refetchInterval: pollEvery(5000) });
  // The range moves on every 10 s, so the query key (and the cache) stays put between renders.
  const now = useClock(10_000);
  const r = useMemo(() => historyRange(minutes, now), [minutes, now]);
  const history = useQuery({
    queryKey: ["gpu-history", id, minutes, r.to],
    queryFn: () => unwrap(api.GET("/api/v1/gpus/{id}/history", { params: { path: { id }, query: r } })),
    refetchInterval: 10_000,
    placeholderData: (prev) => prev,
  });
  const g = gpu.data;
  const h = history.data;
  const series = useMemo(() => (h ? historySeries(h) : null), [h]);
  const charts = useMemo(() => {
    if (!h || !series) return [];
    const base = (name: string, unit: string, data: [string, number | null][], max?: number): EChartsCoreOption => ({
      tooltip: { trigger: "axis" },
      grid: { left: 52, right: 16, top: 24, bottom: 28 },
      xAxis: { type: "time", min: h.from, max: h.to },
      yAxis: { type: "value", name: unit, min: 0, max },
      series: [{ name, type: "line", showSymbol: data.length <= 30, connectNulls: false, areaStyle: { opacity: 0.2 }, data }],
    });
    return [
      { id: "util", title: "Utilisation", option: base("Utilisation", "%", series.util, 100) },
      { id: "memory", title: "Memory used", option: base("Memory used", "GiB", series.memoryGib, g ? g.memory_mb / 1024 : undefined) },
      { id: "temperature", title: "Temperature", option: base("Temperature", "°C", series.temperature) },
      { id: "power", title: "Power", option: base("Power", "W", series.power) },
    ];
  }, [h, series, g]);

  if (gpu.isPending) return <Loading what="the GPU" />;
  if (gpu.error || !g) return <ErrorNote error={gpu.error ?? new Error("no such GPU")} />;
  const t = g.telemetry;
  return (
    <>
      <PageHeader title={`${g.node_name} · GPU ${g.device_index}`}>
        <p className="muted">
          <Link to="/fleet">← Fleet</Link> · {g.model}
          {g.mig_profile ? ` · MIG ${g.mig_profile}` : ""} · {gib(g.memory_mb)} GiB {g.simulated && <Badge kind="simulated">simulated</Badge>}
          {g.sharing !== "none" && <Badge>{words(g.sharing)}</Badge>}
          {g.fault && (
            <Badge kind="bad">
              quarantined
            </Badge>
          )}
          {t.throttle.length > 0 && (
            <span data-testid="gpu-throttle" title="Its clocks are held down for heat or power: its work runs slower">
              {" "}
              <Badge kind="warn">throttled: {t.throttle.map(words).join(", ")}</Badge>
            </span>
          )}
        </p>
        {g.fault && (
          <p className="muted" role="alert" data-testid="gpu-fault">
            Quarantined since {g.faulted_at ? new Date(g.faulted_at).toLocaleString() : "—"}: {g.fault}. It takes no new work; its workloads were requeued. The
            quarantine outlives agent restarts: a platform admin clears it after the repair.
          </p>
        )}
        {g.fault && can.maintainNodes && <ClearFault id={g.id} />}
        <label className="inline">
          Time range{" "}
          <select value={minutes} onChange={(e) => setMinutes(Number(e.target.value))} data-testid="gpu-range">
            {RANGES.map((x) => (
              <option key={x.minutes} value={x.minutes}>
                {x.label}
              </option>
            ))}
          </select>
        </label>
      </PageHeader>
      <dl className="stats" data-testid="gpu-now">
        <Stat label="Utilisation now" value={pct(t.util)} testId="gpu-util" />
        <Stat label="Memory" value={`${gib(t.memory_used_mb)} / ${gib(g.memory_mb)} GiB`} />
        <Stat label="Temperature" value={t.temperature_c == null ? "—" : `${Math.round(t.temperature_c)} °C`} />
        <Stat label="Power" value={t.power_w == null ? "—" : `${Math.round(t.power_w)} W`} />
        <Stat label="Held by" value={g.shares.length === 0 ? (g.held ? "held" : "nobody") : `${g.shares.length} workload${g.shares.length > 1 ? "s" : ""}`} />
      </dl>
      <ErrorNote error={history.error} />
      {history.isPending && <Loading what="its telemetry" />}
      {h && h.points.length === 0 && <p className="muted">No telemetry in this range (it is kept as long as the control plane's --telemetry-retention-hours).</p>}
      {h && h.points.length > 0 && (
        <div className="grid2" data-testid="gpu-charts" data-points={h.points.length}>
          {charts.map((c) => (
            <Section key={c.id} title={c.title} id={`gpu-${c.id}`}>
              <Chart option={c.option} label={`${c.title} of ${g.node_name} GPU ${g.device_index}, one point per ${duration(h.step_s)}`} height={220} />
            </Section>
          ))}
        </div>
      )}
    </>
  );
}

/** Lifts the GPU's quarantine after its repair (POST /gpus/{id}/clear-fault, audited): platform admins. */
function ClearFault({ id }: { id: string }) {
  const client = useQueryClient();
  const [reason, setReason] = useState("");
  const clear = useMutation({
    mutationFn: () => unwrap(api.POST("/api/v1/gpus/{id}/clear-fault", { params: { path: { id } }, body: { reason: reason.trim() || null } })),
    onSuccess: () => {
      setReason("");
      void client.invalidateQueries({ queryKey: ["gpu", id] });
      void client.invalidateQueries({ queryKey: ["gpus"] });
    },
  });
  return (
    <form className="row" data-testid="gpu-clear-fault" onSubmit={(e) => {
        e.preventDefault();
        clear.mutate();
      }}>
      <label className="inline">
        Why <span className="muted">(optional)</span>{" "}
        <input value={reason} maxLength={500} onChange={(e) => setReason(e.target.value)} name="clear-reason" placeholder="reseated, passed dcgmi diag" />
      </label>
      <button type="submit" className="primary" disabled={clear.isPending}>
        Clear quarantine
      </button>
      <ErrorNote error={clear.error} />
    </form>
  );
}
