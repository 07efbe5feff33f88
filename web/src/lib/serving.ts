// A token-priced service's serving (its replicas read by their agents in vLLM's metric format): its
// latency objective, whether each variant holds it, what one replica sustains at it, and what a
// million tokens cost, against serving the same tokens on GPU replicas only.
//
// The shapes below mirror the API's ServingReport (the `serving` field of GET
// /api/v1/services/{id}) until schema.d.ts is regenerated from the server's OpenAPI document, which
// will carry them under these names; then alias the schema's in api/types.ts and drop these.
import type { ServiceDetail } from "../api/types";
import { money } from "./format";

export type ReplicaVariant = "gpu" | "cpu";

/** The p95 latencies a service's replicas must stay under, ms; an absent one is no target. */
export interface ServingObjective {
  ttft_p95_ms?: number | null;
  tpot_p95_ms?: number | null;
  request_p95_ms?: number | null;
}

/** Tokens per second one replica sustains at the objective, and what that is learned from. */
export interface LearnedCapacity {
  tokens_per_s: number;
  declared_tokens_per_s: number;
  basis: string;
  samples: number;
  saturated_samples: number;
}

/** One variant's serving. */
export interface VariantServing {
  variant: ReplicaVariant;
  /** Placed replicas of this variant. */
  replicas: number;
  /** Of them, those whose readiness endpoint answered. */
  ready_replicas: number;
  /** Tokens per second now (prompt and generated), the latest reads summed. */
  tokens_per_s: number;
  /** The worst of the latest reads' p95s, ms. */
  ttft_p95_ms?: number | null;
  tpot_p95_ms?: number | null;
  request_p95_ms?: number | null;
  /** The worst observed p95 ÷ its target; 1 or less: the objective holds. */
  pressure?: number | null;
  capacity: LearnedCapacity;
  /** Tokens served in the window. */
  tokens: number;
  /** What this variant's replicas cost in the window, in the fleet's currency. */
  cost: number;
  cost_per_million_tokens?: number | null;
}

/** One five-minute point of the window. */
export interface ServingPoint {
  at: string;
  tokens_per_s: number;
  cost_per_million_tokens?: number | null;
  pressure?: number | null;
}

export interface ServingReport {
  objective: ServingObjective;
  ready_path: string;
  metrics_path: string;
  /** Seconds the totals and the history cover (an hour). */
  window_s: number;
  tokens_per_s: number;
  tokens: number;
  cost: number;
  cost_per_million_tokens?: number | null;
  /** What the same tokens would have cost on GPU replicas only. */
  gpu_only_cost_per_million_tokens?: number | null;
  variants: VariantServing[];
  /** One point per five minutes over the window, oldest first. */
  history: ServingPoint[];
}

/** A service detail's serving report, read defensively: null for a service that has none. */
export function servingOf(detail: ServiceDetail | null | undefined): ServingReport | null {
  if (!detail) return null;
  const serving = (detail as { serving_report?: ServingReport | null }).serving_report;
  return serving && typeof serving === "object" && Array.isArray(serving.variants) ? serving : null;
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

/**
 * A variant's pressure: the API's (worst observed p95 ÷ target), or where it gives none, the same
 * computed from the variant's p95s against the objective; null when nothing is both read and bounded.
 */
export function pressureOf(v: VariantServing, o: ServingObjective): number | null {
  if (finite(v.pressure)) return v.pressure;
  const ratios = LATENCIES.map((l) => {
    const observed = v[l.key];
    const target = o[l.key];
    return finite(observed) && finite(target) && target > 0 ? observed / target : null;
  }).filter(finite);
  return ratios.length ? Math.max(...ratios) : null;
}

/** Whether a variant holds the objective: its pressure is 1 or less. */
export function variantHolds(v: VariantServing, o: ServingObjective): Holds {
  const p = pressureOf(v, o);
  if (p == null) return "unknown";
  return p <= 1 ? "held" : "broken";
}

/** What the page calls a variant. */
export function variantWords(v: ReplicaVariant): string {
  return v === "gpu" ? "GPU" : "CPU variant";
}

/**
 * A cost per million tokens, currency-less with two decimals like the page's costs: "0.42",
 * "1,234.50", "<0.01" for a cost too small to show, "—" when unknown (no tokens served).
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
