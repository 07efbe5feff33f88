// Aggregations the dashboard computes from what the API returns.
import type { FleetSummary, GpuView, NodeView, UsageNumbers, UsageReport, Workload } from "../api/types";

/** The fleet right now (from GET /fleet/summary, or from /nodes where the page has them anyway): what it costs per hour and what idles. */
export interface FleetNow {
  nodes: number;
  nodesReady: number;
  gpus: number;
  simulatedGpus: number;
  /** GPUs held by a grant; a share counts as its fraction. */
  allocated: number;
  /** Mean measured utilisation of the GPUs that report one, 0..1 (null: none reports). */
  utilisation: number | null;
  costPerHour: number;
  /** Unallocated GPU share × each GPU's part of its node's hourly cost. */
  idleCostPerHour: number;
}

export function fleetNow(nodes: NodeView[], gpus: GpuView[]): FleetNow {
  const live = nodes.filter((n) => n.state !== "lost");
  const perGpu = new Map(live.map((n) => [n.id, n.gpus.length ? (n.cost_per_hour ?? 0) / n.gpus.length : 0]));
  const liveGpus = gpus.filter((g) => perGpu.has(g.node_id));
  const heldShare = (g: GpuView) => Math.min(1, (g.held_milli ?? (g.held ? 1000 : 0)) / 1000);
  const utils = liveGpus.map((g) => g.telemetry.util).filter((u): u is number => u != null);
  return {
    nodes: nodes.length,
    nodesReady: nodes.filter((n) => n.state === "ready").length,
    gpus: liveGpus.length,
    simulatedGpus: liveGpus.filter((g) => g.simulated).length,
    allocated: liveGpus.reduce((s, g) => s + heldShare(g), 0),
    utilisation: utils.length ? utils.reduce((a, b) => a + b, 0) / utils.length : null,
    costPerHour: live.reduce((s, n) => s + (n.cost_per_hour ?? 0), 0),
    idleCostPerHour: liveGpus.reduce((s, g) => s + (1 - heldShare(g)) * (perGpu.get(g.node_id) ?? 0), 0),
  };
}

/** The same numbers from GET /fleet/summary: a few hundred bytes, whatever the fleet's size. */
export function summaryNow(s: FleetSummary): FleetNow {
  return {
    nodes: s.nodes_ready + s.nodes_cordoned + s.nodes_draining + s.nodes_lost,
    nodesReady: s.nodes_ready,
    gpus: s.gpus,
    simulatedGpus: s.gpus_simulated,
    allocated: s.gpus_allocated,
    utilisation: s.gpus ? s.gpu_util : null,
    costPerHour: s.cost_per_hour,
    idleCostPerHour: s.unallocated_cost_per_hour,
  };
}

/** Pending workloads counted by their reason, most common first. */
export function pendingByReason(workloads: Workload[]): { reason: string; count: number; gpus: number }[] {
  const by = new Map<string, { count: number; gpus: number }>();
  for (const w of workloads) {
    if (w.state !== "pending") continue;
    const reason = w.pending_reason || "no reason given yet";
    const entry = by.get(reason) ?? { count: 0, gpus: 0 };
    entry.count += 1;
    entry.gpus += w.resources.gpu_count * (w.resources.gpu_count === 1 ? w.resources.gpu_milli / 1000 : 1);
    by.set(reason, entry);
  }
  return [...by.entries()].map(([reason, v]) => ({ reason, ...v })).sort((a, b) => b.count - a.count || a.reason.localeCompare(b.reason));
}

export interface SeriesPoint {
  at: string;
  busy: number;
  allocated: number;
  idle: number;
  owned: number;
}

/**
 * The usage series summed over its groups at each step, as average GPUs over the step (GPU-hours ÷
 * the step's hours): a fleet of 8 GPUs half allocated reads 4, whatever the step.
 */
export function seriesByStep(report: Pick<UsageReport, "series" | "step_s">): SeriesPoint[] {
  const hours = report.step_s / 3600;
  const by = new Map<string, SeriesPoint>();
  for (const p of report.series) {
    const key = new Date(p.at).toISOString();
    const e = by.get(key) ?? { at: key, busy: 0, allocated: 0, idle: 0, owned: 0 };
    e.busy += p.busy_gpu_hours / hours;
    e.allocated += p.allocated_gpu_hours / hours;
    e.idle += p.idle_gpu_hours / hours;
    e.owned += p.owned_gpu_hours / hours;
    by.set(key, e);
  }
  return [...by.values()].sort((a, b) => a.at.localeCompare(b.at));
}

/** Shares of owned GPU-hours: busy (fleet utilisation), allocated, idle. */
export function shares(t: UsageNumbers): { busy: number | null; allocated: number | null; idle: number | null } {
  if (!t.owned_gpu_hours) return { busy: null, allocated: null, idle: null };
  return {
    busy: t.busy_gpu_hours / t.owned_gpu_hours,
    allocated: t.allocated_gpu_hours / t.owned_gpu_hours,
    idle: t.idle_gpu_hours / t.owned_gpu_hours,
  };
}

/** The groups by idle cost, the largest `top` kept and the rest summed as "other". */
export function topByIdleCost(groups: UsageReport["groups"], top = 8): { group: string; idle_cost: number; idle_gpu_hours: number }[] {
  const sorted = [...groups].sort((a, b) => b.idle_cost - a.idle_cost);
  const head = sorted.slice(0, top).map((g) => ({ group: g.group, idle_cost: g.idle_cost, idle_gpu_hours: g.idle_gpu_hours }));
  const rest = sorted.slice(top);
  if (rest.length) {
    head.push({
      group: `other (${rest.length})`,
      idle_cost: rest.reduce((s, g) => s + g.idle_cost, 0),
      idle_gpu_hours: rest.reduce((s, g) => s + g.idle_gpu_hours, 0),
    });
  }
  return head;
}

/** A time range ending now, and a step that gives about 60 points. */
export function range(hours: number, now: number = Date.now()): { from: string; to: string; step_s: number } {
  const to = new Date(Math.ceil(now / 60000) * 60000);
  const from = new Date(to.getTime() - hours * 3600 * 1000);
  const step = Math.max(60, Math.round((hours * 3600) / 60 / 60) * 60);
  return { from: from.toISOString(), to: to.toISOString(), step_s: step };
}
