// One node: its state, its GPUs (GET /api/v1/nodes/{id} carries them, so the page reads one node,
// not the fleet) and its CPU and memory over time (GET /api/v1/nodes/{id}/history).
import { useMemo, useState } from "react";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { createColumnHelper } from "@tanstack/react-table";
import type { PageProps } from "../App";
import { api, unwrap } from "../api/client";
import type { NodeView, Workload } from "../api/types";
import { HISTORY_RANGES, HistoryCharts, lineOption, RangeSelect, useHistory } from "../components/History";
import { DataTable } from "../components/DataTable";
import { Badge, ErrorNote, Loading, PageHeader, Section, Stat, StateBadge } from "../components/ui";
import { ago, gib, money, pct, time, words } from "../lib/format";
import { nodeSeries } from "../lib/history";
import { pollEvery } from "../lib/live";
import {
  cordonBody,
  drainBody,
  drainWords,
  MAX_REASON,
  nodeActions,
  remainingWords,
  type CordonRequest,
  type DrainRequest,
  type NodeAction,
  type NodeWork,
} from "../lib/maintenance";
import { useWorkloads } from "../lib/queries";
import { Link } from "../lib/router";
import { GpuTile, Legend } from "./Fleet";

export function NodePage({ id, can }: PageProps & { id: string }) {
  const [minutes, setMinutes] = useState(60);
  const node = useQuery({
    queryKey: ["node", id],
    queryFn: () => unwrap(api.GET("/api/v1/nodes/{id}", { params: { path: { id } } })),
    refetchInterval: pollEvery(5000),
  });
  const workloads = useWorkloads();
  const names = useMemo(() => new Map((workloads.data ?? []).map((w: Workload) => [w.id, w.name])), [workloads.data]);
  const history = useHistory(["node-history", id], minutes, (query) => unwrap(api.GET("/api/v1/nodes/{id}/history", { params: { path: { id }, query } })));
  const n = node.data;
  const h = history.data;
  const charts = useMemo(() => {
    if (!h) return [];
    const s = nodeSeries(h);
    return [
      { id: "cpu", title: "CPU utilisation", option: lineOption(h, "CPU", "%", s.cpu, 100) },
      { id: "memory", title: "Memory used", option: lineOption(h, "Memory used", "GiB", s.memoryGib, Math.round((h.memory_mb / 1024) * 100) / 100) },
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
        <RangeSelect value={minutes} onChange={setMinutes} choices={HISTORY_RANGES} testId="node-range" />
      </PageHeader>
      <dl className="stats" data-testid="node-now">
        <Stat label="CPU now" value={pct(n.telemetry.cpu_util)} hint={`${(n.cpu_millis / 1000).toFixed(0)} cores`} testId="node-cpu" />
        <Stat label="Memory" value={`${gib(n.telemetry.memory_used_mb)} / ${gib(n.memory_mb)} GiB`} testId="node-memory" />
        <Stat label="GPUs held" value={`${held} of ${gpus.length}`} testId="node-gpus" />
        <Stat label="Cost" value={n.cost_per_hour == null ? "not set" : `${money(n.cost_per_hour)} / h`} />
        <Stat label="Last heard" value={new Date(n.last_seen_at).toLocaleTimeString()} hint={`registered ${new Date(n.registered_at).toLocaleString()}`} />
      </dl>
      <NodeMaintenance node={n} canMaintain={can.maintainNodes} />
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
      <HistoryCharts history={history} charts={charts} prefix="node" of={`${n.name}`} />
    </>
  );
}

type Hold =
  | { action: "cordon"; body: CordonRequest }
  | { action: "drain"; body: DrainRequest }
  | { action: "uncordon" };

const ACTION_LABEL: Record<NodeAction, string> = { cordon: "Cordon", drain: "Drain", uncordon: "Uncordon" };

/**
 * The node's hold (cordon or drain) and what runs on it with what a drain does with each; for
 * platform admins, the buttons that cordon, drain and uncordon it (POST /nodes/{id}/cordon, /drain,
 * /uncordon), each answering the node as it is now.
 */
export function NodeMaintenance({ node: n, canMaintain }: { node: NodeView; canMaintain: boolean }) {
  const client = useQueryClient();
  const [reason, setReason] = useState("");
  const [deadline, setDeadline] = useState("");
  const [invalid, setInvalid] = useState("");
  const hold = useMutation({
    mutationFn: (h: Hold) => {
      const path = { params: { path: { id: n.id } } };
      switch (h.action) {
        case "cordon":
          return unwrap(api.POST("/api/v1/nodes/{id}/cordon", { ...path, body: h.body }));
        case "drain":
          return unwrap(api.POST("/api/v1/nodes/{id}/drain", { ...path, body: h.body }));
        case "uncordon":
          return unwrap(api.POST("/api/v1/nodes/{id}/uncordon", path));
      }
    },
    onSuccess: () => {
      setReason("");
      setDeadline("");
      void client.invalidateQueries({ queryKey: ["node", n.id] });
      void client.invalidateQueries({ queryKey: ["nodes"] });
    },
  });
  const run = (action: NodeAction) => {
    setInvalid("");
    hold.reset();
    if (action === "uncordon") {
      hold.mutate({ action });
      return;
    }
    const made = action === "cordon" ? cordonBody(reason) : drainBody(reason, deadline);
    if ("error" in made) setInvalid(made.error);
    else if (action === "cordon") hold.mutate({ action, body: made.body });
    else hold.mutate({ action, body: made.body });
  };
  const m = n.maintenance;
  const work = n.work ?? [];
  const actions = nodeActions(n.state, m != null);
  const col = createColumnHelper<NodeWork>();
  const columns = [
    col.accessor((w) => w.name ?? "", {
      id: "name",
      header: "Workload",
      cell: (c) =>
        c.row.original.workload_id ? (
          <Link to={`/workloads/${c.row.original.workload_id}`}>{c.row.original.name ?? c.row.original.workload_id.slice(0, 8)}</Link>
        ) : (
          <span className="muted">another tenant's</span>
        ),
    }),
    col.accessor("class", { header: "Class", cell: (c) => words(c.getValue()) }),
    col.accessor("state", { header: "State", cell: (c) => <StateBadge state={c.getValue()} /> }),
    col.accessor("drain", { header: "On drain", cell: (c) => <span data-drain={c.getValue()}>{drainWords(c.getValue(), m?.deadline)}</span> }),
  ];
  return (
    <Section title="Maintenance" id="node-maintenance">
      {m ? (
        <dl className="facts" data-testid="node-maintenance" data-mode={m.mode} data-drained={m.drained}>
          <dt>Hold</dt>
          <dd>
            <StateBadge state={m.mode} />{" "}
            {m.mode === "draining" && (m.drained ? <Badge kind="good">drained</Badge> : <Badge>in progress</Badge>)}
          </dd>
          <dt>Reason</dt>
          <dd>{m.reason || <span className="muted">none given</span>}</dd>
          <dt>Since</dt>
          <dd>
            {time(m.since)} <span className="muted">({ago(m.since)})</span>
          </dd>
          <dt>By</dt>
          <dd>{m.by}</dd>
          {m.mode === "draining" && (
            <>
              <dt>Deadline</dt>
              <dd>{m.deadline ? time(m.deadline) : <span className="muted">none: work left to finish runs to its end</span>}</dd>
            </>
          )}
          <dt>Left</dt>
          <dd data-testid="node-remaining" data-remaining={m.remaining}>
            {remainingWords(m, work)}
          </dd>
        </dl>
      ) : (
        <p className="muted">No hold: the node takes new work.</p>
      )}
      {work.length > 0 && (
        <DataTable
          data={work}
          columns={columns}
          label={`Work on ${n.name}`}
          testId="node-work"
          rowKey={(w) => w.workload_id ?? `${w.class}-${w.state}-${w.drain}-${work.indexOf(w)}`}
          maxHeight={320}
        />
      )}
      {work.length === 0 && m && <p className="muted small">Nothing runs on the node.</p>}
      {canMaintain && (
        <form
          className="form-grid"
          data-testid="node-hold"
          // Enter in a field does nothing: each change is its own button.
          onSubmit={(e) => e.preventDefault()}
        >
          <label>
            Reason <span className="muted">(optional)</span>
            <input value={reason} maxLength={MAX_REASON} onChange={(e) => setReason(e.target.value)} name="hold-reason" placeholder="fan replacement" />
          </label>
          <label>
            Drain deadline, s <span className="muted">(optional)</span>
            <input
              value={deadline}
              inputMode="numeric"
              pattern="[0-9]*"
              onChange={(e) => setDeadline(e.target.value)}
              name="hold-deadline"
              placeholder="3600"
              aria-describedby="hold-deadline-hint"
            />
          </label>
          <div className="row">
            {actions.map((a) => (
              <button
                key={a}
                type="button"
                className={a === "uncordon" ? "primary" : undefined}
                onClick={() => run(a)}
                disabled={hold.isPending}
                data-action={a}
              >
                {ACTION_LABEL[a]}
              </button>
            ))}
          </div>
          <p className="muted small wide" id="hold-deadline-hint">
            Cordon: no new work, what runs there runs on. Drain: cordon, and move the work off (checkpointable and preemptible work is requeued,
            service replicas replaced; other work finishes, or is requeued at the deadline). Uncordon: take work again.
          </p>
          {invalid && (
            <p className="error wide" role="alert">
              {invalid}
            </p>
          )}
          <div className="wide">
            <ErrorNote error={hold.error} />
          </div>
        </form>
      )}
    </Section>
  );
}
