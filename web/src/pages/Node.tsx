// One node: its state, its GPUs (GET /api/v1/nodes/{id} carries them, so the page reads one node,
// not the fleet) and its CPU and memory over time (GET /api/v1/nodes/{id}/history).
import { useMemo, useState } from "react";
import { useQuery } from "@tanstack/react-query";
import type { EChartsCoreOption } from "echarts/core";
import type { PageProps } from "../App";
import { api, unwrap } from "../api/client";
import type { Workload } from "../api/types";
import { Chart } from "../components/Chart";
import { Badge, ErrorNote, Loading, PageHeader, Section, Stat, StateBadge } from "../components/ui";
import { duration, gib, money, pct } from "../lib/format";
import { historyRange, nodeSeries } from "../lib/history";
import { pollEvery, useClock } from "../lib/live";
import { useWorkloads } from "../lib/queries";
import { Link } from "../lib/router";
import { GpuTile, Legend } from "./Fleet";

const RANGES = [
  { minutes: 15, label: "Last 15 minutes" },
  { minutes: 60, label: "Last hour" },
  { minutes: 6 * 60, label: "Last 6 hours" },
  { minutes: 24 * 60, label: "Last 24 hours" },
];

export function NodePage({ id }: PageProps & { id: string }) {
  const [minutes, setMinutes] = useState(60);
  const node = useQuery({
    queryKey: ["node", id],
    queryFn: () => unwrap(api.GET("/api/v1/nodes/{id}", { params: { path: { id } } })),
    refetchInterval: pollEvery(5000),
  });
  const workloads = useWorkloads();
  const names = useMemo(() => new Map((workloads.data ?? []).map((w: Workload) => [w.id, w.name])), [workloads.data]);
  // The range moves on every 10 s, so the query key (and the cache) stays put between renders.
  const now = useClock(10_000);
  const r = useMemo(() => historyRange(minutes, now), [minutes, now]);
  const history = useQuery({
    queryKey: ["node-history", id, minutes, r.to],
    queryFn: () => unwrap(api.GET("/api/v1/nodes/{id}/history", { params: { path: { id }, query: r } })),
    refetchInterval: 10_000,
    placeholderData: (prev) => prev,
  });
  const n = node.data;
  const h = history.data;
  const charts = useMemo(() => {
    if (!h) return [];
    const s = nodeSeries(h);
    const base = (name: string, unit: string, data: [string, number | null][], max?: number): EChartsCoreOption => ({
      tooltip: { trigger: "axis" },
      grid: { left: 52, right: 16, top: 24, bottom: 28 },
      xAxis: { type: "time", min: h.from, max: h.to },
      yAxis: { type: "value", name: unit, min: 0, max },
      series: [{ name, type: "line", showSymbol: data.length <= 30, connectNulls: false, areaStyle: { opacity: 0.2 }, data }],
    });
    return [
      { id: "cpu", title: "CPU utilisation", option: base("CPU", "%", s.cpu, 100) },
      { id: "memory", title: "Memory used", option: base("Memory used", "GiB", s.memoryGib, Math.round((h.memory_mb / 1024) * 100) / 100) },
    ];
  }, [h]);

  if (node.isPending) return <Loading what="the node" />;
  if (node.error || !n) return <ErrorNote error={node.error ?? new Error("no such node")} />;
  const gpus = [...n.gpus].sort((a, b) => a.device_index - b.device_index);
  const held = gpus.filter((g) => g.held).length;
  return (
    <>
      <PageHeader title={n.name}>
        <p className="muted">
          <Link to="/fleet">← Fleet</Link> · {n.hostname} · agent {n.agent_version} (protocol {n.agent_protocol}) <StateBadge state={n.state} />{" "}
          {n.simulated && <Badge kind="simulated">simulated GPUs</Badge>}
          {n.container_engine && <Badge>{n.container_engine.kind}</Badge>}
          {Object.entries((n.labels ?? {}) as Record<string, unknown>).map(([k, v]) => (
            <Badge key={k}>{`${k}=${String(v)}`}</Badge>
          ))}
        </p>
        <label className="inline">
          Time range{" "}
          <select value={minutes} onChange={(e) => setMinutes(Number(e.target.value))} data-testid="node-range">
            {RANGES.map((x) => (
              <option key={x.minutes} value={x.minutes}>
                {x.label}
              </option>
            ))}
          </select>
        </label>
      </PageHeader>
      <dl className="stats" data-testid="node-now">
        <Stat label="CPU now" value={pct(n.telemetry.cpu_util)} hint={`${(n.cpu_millis / 1000).toFixed(0)} cores`} testId="node-cpu" />
        <Stat label="Memory" value={`${gib(n.telemetry.memory_used_mb)} / ${gib(n.memory_mb)} GiB`} testId="node-memory" />
        <Stat label="GPUs held" value={`${held} of ${gpus.length}`} testId="node-gpus" />
        <Stat label="Cost" value={n.cost_per_hour == null ? "not set" : `${money(n.cost_per_hour)} / h`} />
        <Stat label="Last heard" value={new Date(n.last_seen_at).toLocaleTimeString()} hint={`registered ${new Date(n.registered_at).toLocaleString()}`} />
      </dl>
      <Section title="GPUs" id="node-gpus">
        {gpus.length === 0 ? (
          <p className="muted">CPU only.</p>
        ) : (
          <>
            <Legend />
            <ul className="tiles" aria-label={`GPUs of ${n.name}`} data-testid="node-tiles">
              {gpus.map((g) => (
                <GpuTile key={g.id} gpu={g} names={names} />
              ))}
            </ul>
          </>
        )}
      </Section>
      <ErrorNote error={history.error} />
      {history.isPending && <Loading what="its telemetry" />}
      {h && h.points.length === 0 && <p className="muted">No telemetry in this range (it is kept as long as the control plane's --telemetry-retention-hours).</p>}
      {h && h.points.length > 0 && (
        <div className="grid2" data-testid="node-charts" data-points={h.points.length}>
          {charts.map((c) => (
            <Section key={c.id} title={c.title} id={`node-${c.id}`}>
              <Chart option={c.option} label={`${c.title} of ${n.name}, one point per ${duration(h.step_s)}`} height={220} />
            </Section>
          ))}
        </div>
      )}
    </>
  );
}
