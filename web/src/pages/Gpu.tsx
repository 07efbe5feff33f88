// One GPU: what it is, who holds it, and its telemetry over time (utilisation, memory, temperature,
// power) from GET /api/v1/gpus/{id}/history.
import { useMemo, useState } from "react";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import type { PageProps } from "../App";
import { api, unwrap } from "../api/client";
import { HISTORY_RANGES, HistoryCharts, lineOption, RangeSelect, useHistory } from "../components/History";
import { Badge, ErrorNote, Loading, PageHeader, Stat } from "../components/ui";
import { gib, pct, words } from "../lib/format";
import { historySeries } from "../lib/history";
import { pollEvery } from "../lib/live";
import { Link } from "../lib/router";

export function GpuPage({ id, can }: PageProps & { id: string }) {
  const [minutes, setMinutes] = useState(60);
  const gpu = useQuery({ queryKey: ["gpu", id], queryFn: () => unwrap(api.GET("/api/v1/gpus/{id}", { params: { path: { id } } })), refetchInterval: pollEvery(5000) });
  const history = useHistory(["gpu-history", id], minutes, (query) => unwrap(api.GET("/api/v1/gpus/{id}/history", { params: { path: { id }, query } })));
  const g = gpu.data;
  const h = history.data;
  const series = useMemo(() => (h ? historySeries(h) : null), [h]);
  const charts = useMemo(() => {
    if (!h || !series) return [];
    return [
      { id: "util", title: "Utilisation", option: lineOption(h, "Utilisation", "%", series.util, 100) },
      { id: "memory", title: "Memory used", option: lineOption(h, "Memory used", "GiB", series.memoryGib, g ? g.memory_mb / 1024 : undefined) },
      { id: "temperature", title: "Temperature", option: lineOption(h, "Temperature", "°C", series.temperature) },
      { id: "power", title: "Power", option: lineOption(h, "Power", "W", series.power) },
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
        <RangeSelect value={minutes} onChange={setMinutes} choices={HISTORY_RANGES} testId="gpu-range" />
      </PageHeader>
      <dl className="stats" data-testid="gpu-now">
        <Stat label="Utilisation now" value={pct(t.util)} testId="gpu-util" />
        <Stat label="Memory" value={`${gib(t.memory_used_mb)} / ${gib(g.memory_mb)} GiB`} />
        <Stat label="Temperature" value={t.temperature_c == null ? "—" : `${Math.round(t.temperature_c)} °C`} />
        <Stat label="Power" value={t.power_w == null ? "—" : `${Math.round(t.power_w)} W`} />
        <Stat label="Held by" value={g.shares.length === 0 ? (g.held ? "held" : "nobody") : `${g.shares.length} workload${g.shares.length > 1 ? "s" : ""}`} />
      </dl>
      <HistoryCharts history={history} charts={charts} prefix="gpu" of={`${g.node_name} GPU ${g.device_index}`} />
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
