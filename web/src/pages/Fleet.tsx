import type { PageProps } from "../App";
import type { GpuView, NodeView, Workload } from "../api/types";
import { Badge, ErrorNote, Loading, PageHeader, StateBadge } from "../components/ui";
import { gib, money, pct, words } from "../lib/format";
import { heatColor, segments, STOPS, textOn } from "../lib/heat";
import { useNodes, useWorkloads } from "../lib/queries";
import { Link } from "../lib/router";
import { fleetNow } from "../lib/usage";

export function Fleet(_: PageProps) {
  // GET /nodes carries each node's GPUs: one read of the fleet, not a second one of every GPU.
  const nodes = useNodes();
  const workloads = useWorkloads();
  const names = new Map((workloads.data ?? []).map((w: Workload) => [w.id, w.name]));
  const now = fleetNow(nodes.data ?? [], (nodes.data ?? []).flatMap((n) => n.gpus));
  return (
    <>
      <PageHeader title="Fleet">
        <p className="muted">
          {now.nodes} nodes · {now.gpus} GPUs · {pct(now.utilisation)} busy · {pct(now.gpus ? now.allocated / now.gpus : null)} allocated
        </p>
      </PageHeader>
      <Legend />
      <ErrorNote error={nodes.error} />
      {nodes.isPending && <Loading what="the fleet" />}
      <div className="nodes" data-testid="fleet">
        {(nodes.data ?? []).map((n) => (
          <NodeCard key={n.id} node={n} gpus={[...n.gpus].sort((a, b) => a.device_index - b.device_index)} names={names} />
        ))}
        {nodes.data?.length === 0 && <p className="muted">No node has registered yet.</p>}
      </div>
    </>
  );
}

export function Legend() {
  const gradient = `linear-gradient(to right, ${STOPS.map((s) => `${heatColor(s.at)} ${s.at * 100}%`).join(", ")})`;
  return (
    <div className="legend" aria-label="Colour scale: GPU utilisation from 0% (blue) to 100% (red)" role="img">
      <span>0%</span>
      <span className="legend-bar" style={{ background: gradient }} />
      <span>100% utilisation</span>
      <span className="legend-swatch" style={{ background: heatColor(null) }} /> <span>no reading</span>
      <span className="legend-swatch hatched" /> <span>free share</span>
    </div>
  );
}

export function NodeSummaryLine({ node, gpus }: { node: NodeView; gpus: number }) {
  return (
    <>
      {gpus} GPUs · {(node.cpu_millis / 1000).toFixed(0)} cores at {pct(node.telemetry.cpu_util)} · {gib(node.telemetry.memory_used_mb)} / {gib(node.memory_mb)} GiB ·{" "}
      {node.cost_per_hour == null ? "no cost set" : `${money(node.cost_per_hour)} / h`}
    </>
  );
}

function NodeCard({ node, gpus, names }: { node: NodeView; gpus: GpuView[]; names: Map<string, string> }) {
  return (
    <section className={`card node node-${node.state}`} aria-labelledby={`node-${node.id}`} data-node={node.name}>
      <div className="card-head">
        <h2 id={`node-${node.id}`}>
          <Link to={`/fleet/nodes/${node.id}`} data-node-link={node.name}>
            {node.name}
          </Link>
        </h2>
        <StateBadge state={node.state} />
        {node.simulated && <Badge kind="simulated">simulated GPUs</Badge>}
        {node.container_engine && <Badge>{node.container_engine.kind}</Badge>}
      </div>
      <p className="muted small">
        <NodeSummaryLine node={node} gpus={gpus.length} />
      </p>
      {node.maintenance && (
        <p className="small" data-testid="node-hold-line">
          {node.maintenance.mode === "draining" ? (node.maintenance.drained ? "Drained" : `Draining, ${node.maintenance.remaining} left`) : "Cordoned"} by{" "}
          {node.maintenance.by}
          {node.maintenance.reason ? `: ${node.maintenance.reason}` : ""}
        </p>
      )}
      {gpus.length === 0 ? (
        <p className="muted small">CPU only.</p>
      ) : (
        <ul className="tiles" aria-label={`GPUs of ${node.name}`}>
          {gpus.map((g) => (
            <GpuTile key={g.id} gpu={g} names={names} />
          ))}
        </ul>
      )}
    </section>
  );
}

function holder(g: GpuView, names: Map<string, string>): string {
  const label = (id: string | null | undefined) => (id ? (names.get(id) ?? id.slice(0, 8)) : "another tenant");
  if (g.shares.length === 0) return g.held ? "held" : "free";
  if (g.shares.length === 1 && g.shares[0]!.milli >= 1000) return label(g.shares[0]!.workload_id);
  return g.shares.map((s) => `${label(s.workload_id)} ${s.milli / 10}%`).join(", ");
}

export function GpuTile({ gpu: g, names }: { gpu: GpuView; names: Map<string, string> }) {
  const util = g.telemetry.util;
  const shared = g.sharing !== "none" && g.shares.length > 0;
  const memory = `${gib(g.telemetry.memory_used_mb)} / ${gib(g.memory_mb)} GiB`;
  const who = holder(g, names);
  const label = `GPU ${g.device_index} ${g.model}${g.simulated ? " (simulated)" : ""}${g.fault ? ` quarantined (${g.fault})` : ""}${
    g.telemetry.throttle.length ? ` throttled (${g.telemetry.throttle.map(words).join(", ")})` : ""
  }: ${pct(util)} busy, memory ${memory}, ${who}`;
  return (
    <li
      className={`tile ${g.held ? "held" : "free"}`}
      style={{ background: heatColor(util), color: textOn(util) }}
      data-gpu={`${g.node_name}/${g.device_index}`}
      data-util={util ?? ""}
      data-held={who}
    >
      <Link to={`/fleet/gpus/${g.id}`} className="tile-link" aria-label={`${label}. Open its telemetry`} />
      <span className="tile-top">
        <span className="tile-index">#{g.device_index}</span>
        {g.simulated && (
          <span className="tile-sim" title="simulated">
            SIM
          </span>
        )}
        {g.fault && (
          <span className="tile-sim" title={`quarantined: ${g.fault}`} data-fault={g.fault}>
            FAULT
          </span>
        )}
        {g.telemetry.throttle.length > 0 && (
          <span className="tile-sim" title={`throttled: ${g.telemetry.throttle.map(words).join(", ")}`} data-throttle={g.telemetry.throttle.join(",")}>
            HOT
          </span>
        )}
      </span>
      <span className="tile-util">{pct(util)}</span>
      <span className="tile-model">{g.mig_profile ? `MIG ${g.mig_profile}` : g.model}</span>
      {shared && (
        <span className="shares" aria-hidden="true">
          {segments(g.shares).map((s, i) => (
            <span key={i} className={`share ${s.workload_id === null && i === g.shares.length ? "share-free" : ""}`} style={{ flexGrow: s.part }} />
          ))}
        </span>
      )}
      <span className="tip" role="tooltip">
        <strong>
          {g.node_name} #{g.device_index} · {g.model}
        </strong>
        <br />
        Utilisation {pct(util)} · memory {memory}
        <br />
        {g.telemetry.temperature_c == null ? "" : `${Math.round(g.telemetry.temperature_c)} °C · `}
        {g.telemetry.power_w == null ? "" : `${Math.round(g.telemetry.power_w)} W · `}
        {g.sharing !== "none" ? `${words(g.sharing)} · ` : ""}
        {who}
      </span>
    </li>
  );
}
