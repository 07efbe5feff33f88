import { describe, expect, it } from "vitest";
import type { ServiceDetail } from "../api/types";
import {
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
  type ServingReport,
  type VariantServing,
} from "./serving";

const variant = (over: Partial<VariantServing> = {}): VariantServing => ({
  variant: "gpu",
  replicas: 2,
  ready_replicas: 2,
  tokens_per_s: 1800,
  capacity: { tokens_per_s: 1000, declared_tokens_per_s: 1000, basis: "declared", samples: 0, saturated_samples: 0 },
  tokens: 6_480_000,
  cost: 4,
  ...over,
});

const report = (over: Partial<ServingReport> = {}): ServingReport => ({
  objective: { ttft_p95_ms: 500, tpot_p95_ms: 50 },
  ready_path: "/health",
  metrics_path: "/metrics",
  window_s: 3600,
  tokens_per_s: 1800,
  tokens: 6_480_000,
  cost: 4,
  variants: [variant()],
  history: [],
  ...over,
});

describe("objectiveWords", () => {
  it("names each target the objective sets, in order", () => {
    expect(objectiveWords({ ttft_p95_ms: 500, tpot_p95_ms: 50 })).toBe("TTFT p95 ≤ 500 ms · TPOT p95 ≤ 50 ms");
    expect(objectiveWords({ tpot_p95_ms: 42.5, request_p95_ms: 12000, ttft_p95_ms: null })).toBe("TPOT p95 ≤ 42.5 ms · Request p95 ≤ 12,000 ms");
    expect(objectiveWords({})).toBe("no latency target");
    expect(objectiveWords(null)).toBe("no latency target");
  });
});

describe("whether the objective holds", () => {
  it("holds a latency at or under its target, breaks it above, and knows nothing without both", () => {
    expect(latencyHolds(500, 500)).toBe("held");
    expect(latencyHolds(501, 500)).toBe("broken");
    expect(latencyHolds(null, 500)).toBe("unknown");
    expect(latencyHolds(300, undefined)).toBe("unknown");
  });

  it("reads a variant by the API's pressure: 1 or less holds, none is unknown", () => {
    expect(variantHolds(variant({ pressure: 0.8 }))).toBe("held");
    expect(variantHolds(variant({ pressure: 1 }))).toBe("held");
    expect(variantHolds(variant({ pressure: 1.4 }))).toBe("broken");
    expect(variantHolds(variant({ pressure: null }))).toBe("unknown");
  });
});

describe("costs", () => {
  it("prints a cost per million tokens in dollars, as the rest of the dashboard prints costs", () => {
    expect(perMillion(0.4166)).toBe("$0.42");
    expect(perMillion(1234.5)).toBe("$1,235");
    expect(perMillion(0)).toBe("$0.00");
    expect(perMillion(0.001)).toBe("<$0.01");
    expect(perMillion(null)).toBe("—");
    expect(perMillion(undefined)).toBe("—");
  });

  it("gives the saving against GPU only as a percentage of the GPU-only cost", () => {
    expect(savingPercent({ cost_per_million_tokens: 0.3, gpu_only_cost_per_million_tokens: 0.5 })).toBeCloseTo(40);
    expect(savingPercent({ cost_per_million_tokens: 0.6, gpu_only_cost_per_million_tokens: 0.5 })).toBeCloseTo(-20);
    expect(savingPercent({ cost_per_million_tokens: 0.3, gpu_only_cost_per_million_tokens: null })).toBeNull();
    expect(savingPercent({ cost_per_million_tokens: null, gpu_only_cost_per_million_tokens: 0.5 })).toBeNull();
    expect(savingPercent({ cost_per_million_tokens: 0, gpu_only_cost_per_million_tokens: 0 })).toBeNull();
    expect(savingWords(40)).toBe("40% less than GPU only");
    expect(savingWords(-19.6)).toBe("20% more than GPU only");
    expect(savingWords(0.2)).toBe("same as GPU only");
    expect(savingWords(null)).toBe("—");
  });
});

describe("numbers", () => {
  it("prints milliseconds, tokens per second and variants", () => {
    expect(ms(420)).toBe("420 ms");
    expect(ms(42.25)).toBe("42.3 ms");
    expect(ms(null)).toBe("—");
    expect(tokensPerSecond(1834.4)).toBe("1,834");
    expect(tokensPerSecond(12.345)).toBe("12.3");
    expect(tokensPerSecond(0.256)).toBe("0.26");
    expect(tokensPerSecond(undefined)).toBe("—");
    expect(variantWords("gpu")).toBe("GPU");
    expect(variantWords("cpu")).toBe("CPU variant");
  });
});

describe("servingOf", () => {
  const detail = (serving: unknown) => ({ name: "chat", scale_events: [], serving_report: serving }) as unknown as ServiceDetail;

  it("reads a service detail's report, and nothing where it has none", () => {
    const r = report();
    expect(servingOf(detail(r))).toBe(r);
    expect(servingOf(detail(null))).toBeNull();
    expect(servingOf({ name: "plain", scale_events: [] } as unknown as ServiceDetail)).toBeNull();
    expect(servingOf(undefined)).toBeNull();
  });
});

describe("servingSeries", () => {
  it("orders the history oldest first and keeps the hours without a cost as gaps", () => {
    const s = servingSeries([
      { at: "2030-01-01T00:05:00Z", tokens_per_s: 1500, cost_per_million_tokens: null },
      { at: "2030-01-01T00:00:00Z", tokens_per_s: 1200, cost_per_million_tokens: 0.4 },
    ]);
    expect(s.tokens).toEqual([
      ["2030-01-01T00:00:00Z", 1200],
      ["2030-01-01T00:05:00Z", 1500],
    ]);
    expect(s.cost).toEqual([
      ["2030-01-01T00:00:00Z", 0.4],
      ["2030-01-01T00:05:00Z", null],
    ]);
  });
});
