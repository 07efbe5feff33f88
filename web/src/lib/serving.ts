// A token-priced service's serving (its replicas read by their agents in vLLM's metric format): its
// latency objective, whether each variant holds it, what one replica sustains at it, and what a
// million tokens cost, against serving the same tokens on GPU replicas only. The shapes are the
// API's (api/types.ts).
import type {
  ReplicaVariant,
  ServiceDetail,
  ServingObjective,
  ServingPoint,
  ServingReport,
  VariantServing,
} from "../api/types";
import { money } from "./format";

export type { LearnedCapacity, ReplicaVariant, ServingObjective, ServingPoint, ServingReport, VariantServing } from "../api/types";

/** A service detail's serving report: null for a service that is not priced per token. */
export function servingOf(detail: ServiceDetail | null | undefined): ServingReport | null {
  return detail?.serving_report ?? null;
}

/** The latencies an objective bounds, in the order the page shows them. */
export const LATENCIES = [
  { key: "ttft_p95_ms", label: "TTFT" },
  { key: "tpot_p95_ms", label: "TPOT" },
  { key: "request_p95_ms", label: "Request" },
] as const;
export type Latency = (typeof LATENCIES)[number]["key"];

const finite = (x: number | null | undefined): x is number => x != null && Number.isFinite(x);

/** Milliseconds: "500 ms", "42.5 ms", "1,250 ms"; "—" when unknown. */
export function ms(x: number | null | undefined): string {
  if (!finite(x)) return "—";
  return `${x.toLocaleString("en-US", { maximumFractionDigits: x < 100 ? 1 : 0 })} ms`;
}

/** Tokens per second: "1,234", "12.5", "0.25"; "—" when unknown. */
export function tokensPerSecond(x: number | null | undefined): string {
  if (!finite(x)) return "—";
  const abs = Math.abs(x);
  return x.toLocaleString("en-US", { maximumFractionDigits: abs >= 100 ? 0 : abs >= 10 ? 1 : 2 });
}

/** An objective in words: "TTFT p95 ≤ 500 ms · TPOT p95 ≤ 50 ms"; "no latency target" when it sets none. */
export function objectiveWords(o: ServingObjective | null | undefined): string {
  const parts = LATENCIES.filter((l) => finite(o?.[l.key])).map((l) => `${l.label} p95 ≤ ${ms(o![l.key])}`);
  return parts.length ? parts.join(" · ") : "no latency target";
}

/** Whether a latency (or a variant) holds its objective: "unknown" without a reading or a target. */
export type Holds = "held" | "broken" | "unknown";

/** Whether an observed p95 holds its target (at or under it). */
export function latencyHolds(observed: number | null | undefined, target: number | null | undefined): Holds {
  if (!finite(observed) || !finite(target)) return "unknown";
  return observed <= target ? "held" : "broken";
}

/** Whether a variant holds the objective: its pressure (the API's worst p95 ÷ target) is 1 or less. */
export function variantHolds(v: VariantServing): Holds {
  const p = v.pressure;
  if (!finite(p)) return "unknown";
  return p <= 1 ? "held" : "broken";
}

/** What the page calls a variant. */
export function variantWords(v: ReplicaVariant): string {
  return v === "gpu" ? "GPU" : "CPU variant";
}

/**
 * A cost per million tokens in dollars, as the dashboard prints costs: "$0.42", "$1,235", "<$0.01"
 * for a cost too small to show, "—" when unknown (no tokens served).
 */
export function perMillion(x: number | null | undefined): string {
  if (!finite(x)) return "—";
  if (x > 0 && x < 0.005) return "<$0.01";
  return money(x);
}

/**
 * What the mix saves against serving the same tokens on GPU replicas only, as a percentage of the
 * GPU-only cost (negative: it costs more); null when either cost is unknown or GPU-only is free.
 */
export function savingPercent(r: Pick<ServingReport, "cost_per_million_tokens" | "gpu_only_cost_per_million_tokens">): number | null {
  const actual = r.cost_per_million_tokens;
  const gpuOnly = r.gpu_only_cost_per_million_tokens;
  if (!finite(actual) || !finite(gpuOnly) || gpuOnly <= 0) return null;
  return ((gpuOnly - actual) / gpuOnly) * 100;
}

/** The saving in words: "38% less than GPU only", "12% more than GPU only", "same as GPU only", "—". */
export function savingWords(percent: number | null): string {
  if (percent == null || !Number.isFinite(percent)) return "—";
  const rounded = Math.round(percent);
  if (rounded === 0) return "same as GPU only";
  return rounded > 0 ? `${rounded}% less than GPU only` : `${-rounded}% more than GPU only`;
}

type Point = [string, number | null];

/** A report's history as chart series: tokens per second and the cost of a million tokens (gaps stay gaps). */
export function servingSeries(history: ServingPoint[]): { tokens: Point[]; cost: Point[] } {
  const sorted = [...history].sort((a, b) => Date.parse(a.at) - Date.parse(b.at));
  return {
    tokens: sorted.map((p) => [p.at, finite(p.tokens_per_s) ? p.tokens_per_s : null]),
    cost: sorted.map((p) => [p.at, finite(p.cost_per_million_tokens) ? p.cost_per_million_tokens : null]),
  };
}
