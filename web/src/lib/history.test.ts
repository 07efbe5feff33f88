import { describe, expect, it } from "vitest";
import { historyRange, historySeries, nodeSeries } from "./history";

describe("a GPU's history", () => {
  it("asks for the last minutes, ending on the next 10 s, in about 240 points", () => {
    const r = historyRange(60, Date.parse("2026-12-03T10:00:03Z"));
    expect(r).toEqual({ from: "2026-12-03T09:00:10.000Z", to: "2026-12-03T10:00:10.000Z", step_s: 15 });
    expect(historyRange(5).step_s).toBe(2);
  });

  it("turns buckets into percent and GiB, and leaves a gap where no sample arrived", () => {
    const point = (at: string, util: number) => ({ at, util, memory_used_mb: 2048, temperature_c: 60, power_w: 300, samples: 5 });
    const s = historySeries({
      gpu_id: "g",
      from: "2026-12-03T10:00:00Z",
      to: "2026-12-03T10:05:00Z",
      step_s: 60,
      points: [point("2026-12-03T10:00:00Z", 0.25), point("2026-12-03T10:01:00Z", 0.5), point("2026-12-03T10:04:00Z", 1)],
    });
    expect(s.util).toEqual([
      ["2026-12-03T10:00:00Z", 25],
      ["2026-12-03T10:01:00Z", 50],
      ["2026-12-03T10:02:00.000Z", null],
      ["2026-12-03T10:04:00Z", 100],
    ]);
    expect(s.memoryGib[0]).toEqual(["2026-12-03T10:00:00Z", 2]);
  });
});

describe("a node's history", () => {
  it("turns buckets into CPU percent and GiB, with a gap where no sample arrived", () => {
    const point = (at: string, cpu_util: number, memory_used_mb: number) => ({ at, cpu_util, memory_used_mb, memory_used_mean_mb: memory_used_mb, samples: 30 });
    const s = nodeSeries({
      node_id: "n",
      from: "2026-12-03T10:00:00Z",
      to: "2026-12-03T10:05:00Z",
      step_s: 60,
      cpu_millis: 8000,
      memory_mb: 65536,
      points: [point("2026-12-03T10:00:00Z", 0.125, 4096), point("2026-12-03T10:03:00Z", 0.5, 3072)],
    });
    expect(s.cpu).toEqual([
      ["2026-12-03T10:00:00Z", 12.5],
      ["2026-12-03T10:01:00.000Z", null],
      ["2026-12-03T10:03:00Z", 50],
    ]);
    expect(s.memoryGib).toEqual([
      ["2026-12-03T10:00:00Z", 4],
      ["2026-12-03T10:01:00.000Z", null],
      ["2026-12-03T10:03:00Z", 3],
    ]);
  });
});
