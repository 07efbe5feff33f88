// What the policy and service pages compute from what the API returns: a what-if run's two score
// sets side by side, a shadow result's differing decisions, and a service's replicas against its
// demand over time from its scale decisions.
import type { ServiceDetail } from "../api/types";

/** One simulator score (`sim::Scores`) worth comparing, and which way is better. */
interface ScoreSpec {
  key: string;
  label: string;
  kind: "share" | "hours" | "usd" | "count" | "index";
  better: "higher" | "lower";
}

/** The scores a what-if run compares, in the order the page shows them. */
export const SCORES: ScoreSpec[] = [
  { key: "busy_share", label: "GPUs busy", kind: "share", better: "higher" },
  { key: "allocated_share", label: "GPUs allocated", kind: "share", better: "higher" },
  { key: "idle_gpu_hours", label: "Idle GPU-hours", kind: "hours", better: "lower" },
  { key: "idle_cost", label: "Idle cost", kind: "usd", better: "lower" },
  { key: "held_idle_gpu_hours", label: "Held but idle GPU-hours", kind: "hours", better: "lower" },
  { key: "completed_gpu_hours", label: "GPU-hours completed", kind: "hours", better: "higher" },
  { key: "completed_workloads", label: "Workloads completed", kind: "count", better: "higher" },
  { key: "unfinished_workloads", label: "Workloads unfinished", kind: "count", better: "lower" },
  { key: "realtime_slo_attainment", label: "Real-time demand served", kind: "share", better: "higher" },
  { key: "service_slo_attainment", label: "Services at capacity", kind: "share", better: "higher" },
  { key: "preemptions", label: "Preemptions", kind: "count", better: "lower" },
  { key: "wasted_gpu_hours", label: "GPU-hours lost to preemption", kind: "hours", better: "lower" },
  { key: "fragmented_share_of_free", label: "Free GPUs fragmented", kind: "share", better: "lower" },
  { key: "fairness", label: "Fairness (Jain)", kind: "index", better: "higher" },
  { key: "refused", label: "Decisions refused", kind: "count", better: "lower" },
  { key: "policy_failures", label: "Policy failures", kind: "count", better: "lower" },
];

export interface ScoreRow {
  key: string;
  label: string;
  kind: ScoreSpec["kind"];
  active: number;
  candidate: number;
  /** Which side does better; "same" when equal (to 1e-9). */
  verdict: "candidate" | "active" | "same";
}

/** The scores both replays have, side by side, each with the side that does better. */
export function scoreRows(active: Record<string, unknown> | null | undefined, candidate: Record<string, unknown> | null | undefined): ScoreRow[] {
  if (!active || !candidate) return [];
  const rows: ScoreRow[] = [];
  for (const s of SCORES) {
    const a = active[s.key];
    const c = candidate[s.key];
    if (typeof a !== "number" || typeof c !== "number") continue;
    const diff = c - a;
    const verdict = Math.abs(diff) < 1e-9 ? "same" : (diff > 0) === (s.better === "higher") ? "candidate" : "active";
    rows.push({ key: s.key, label: s.label, kind: s.kind, active: a, candidate: c, verdict });
  }
  return rows;
}

export interface DecisionSide {
  decision: string;
  reason: string;
}
export interface ShadowDiffRow {
  workload_id: string | null;
  workload_name: string | null;
  /** What the active policy decided (null: nothing for this workload). */
  active: DecisionSide | null;
  /** What the shadowed version would have decided. */
  shadow: DecisionSide | null;
  /** Set when the host refused the shadow's decision: why. */
  refused: string | null;
}

function side(v: unknown): DecisionSide | null {
  if (!v || typeof v !== "object") return null;
  const o = v as Record<string, unknown>;
  return { decision: String(o.decision ?? ""), reason: String(o.reason ?? "") };
}

/** A shadow result's `diff` (one object per differing decision, or per refused one) as rows. */
export function shadowDiffRows(diff: unknown[]): ShadowDiffRow[] {
  return diff.map((d) => {
    const o = (d ?? {}) as Record<string, unknown>;
    return {
      workload_id: typeof o.workload_id === "string" ? o.workload_id : null,
      workload_name: typeof o.workload_name === "string" ? o.workload_name : null,
      active: side(o.active),
      shadow: side(o.shadow),
      refused: typeof o.refused === "string" ? o.refused : null,
    };
  });
}

type Point = [string, number | null];
export interface ReplicaSeries {
  /** Replicas wanted (GPU and CPU together), a step after each scale decision. */
  replicas: Point[];
  /** The demand each decision saw, in replicas' worth (demand / capacity of one replica). */
  demandReplicas: Point[];
}

/**
 * A service's replicas against its demand over time, from its scale decisions (newest first, as
 * the API lists them): the replicas hold from one decision to the next and on to `now`.
 */
export function replicaSeries(detail: Pick<ServiceDetail, "scale_events" | "capacity" | "desired_gpu_replicas" | "desired_cpu_replicas" | "demand">, now: string): ReplicaSeries {
  const events = [...detail.scale_events].sort((a, b) => Date.parse(a.at) - Date.parse(b.at));
  const out: ReplicaSeries = { replicas: [], demandReplicas: [] };
  const perReplica = (d: number | null | undefined) => (d == null || detail.capacity <= 0 ? null : Math.round((d / detail.capacity) * 100) / 100);
  if (events.length > 0) out.replicas.push([events[0]!.at, events[0]!.from_gpu + events[0]!.from_cpu]);
  for (const e of events) {
    out.replicas.push([e.at, e.to_gpu + e.to_cpu]);
    out.demandReplicas.push([e.at, perReplica(e.demand)]);
  }
  out.replicas.push([now, detail.desired_gpu_replicas + detail.desired_cpu_replicas]);
  out.demandReplicas.push([now, perReplica(detail.demand)]);
  return out;
}
