import { describe, expect, it } from "vitest";
import type { FleetSummary, GpuView, NodeView, UsageReport, Workload } from "../api/types";
import { fleetNow, summaryNow, pendingByReason, range, seriesByStep, shares, topByIdleCost } from "./usage";

const n = (id: string, state: NodeView["state"], cost: number | null, gpus: number) =>
  ({ id, state, cost_per_hour: cost, gpus: Array.from({ length: gpus }, () => ({})) }) as unknown as NodeView;
const g = (node_id: string, held_milli: number, util: number | null, simulated = true) =>
  ({ node_id, held_milli, held: held_milli > 0, telemetry: { util }, simulated }) as unknown as GpuView;
const nums = (o: Partial<Record<string, number>>) => ({
  owned_gpu_hours: 0,
  allocated_gpu_hours: 0,
  busy_gpu_hours: 0,
  idle_gpu_hours: 0,
  idle_cost: 0,
  owned_cost: 0,
  ...o,
});

describe("fleetNow", () => {
  it("counts shares as fractions and prices the unallocated part of each GPU", () => {
    const nodes = [n("a", "ready", 8, 2), n("b", "lost", 100, 1), n("c", "draining", null, 1)];
    const gpus = [g("a", 1000, 0.9), g("a", 250, 0.1), g("b", 1000, 1), g("c", 0, null, false)];
    const f = fleetNow(nodes, gpus);
    expect(f.gpus).toBe(3);
    expect(f.allocated).toBeCloseTo(1.25);
    expect(f.costPerHour).toBe(8);
    expect(f.idleCostPerHour).toBeCloseTo(0.75 * 4);
    expect(f.utilisation).toBeCloseTo(0.5);
    expect(f.nodesReady).toBe(1);
    expect(f.simulatedGpus).toBe(2);
  });
});

describe("summaryNow", () => {
  it("reads the same headline from GET /fleet/summary as fleetNow computes from every GPU", () => {
    const summary = {
      nodes_ready: 1,
      nodes_cordoned: 0,
      nodes_draining: 1,
      nodes_lost: 1,
      gpus: 3,
      gpus_simulated: 2,
      gpus_held: 2,
      gpus_allocated: 1.25,
      gpu_util: 0.5,
      cost_per_hour: 8,
      unallocated_cost_per_hour: 3,
      workloads: {},
      pending_by_reason: [],
    } as FleetSummary;
    const nodes = [n("a", "ready", 8, 2), n("b", "lost", 100, 1), n("c", "draining", null, 1)];
    const gpus = [g("a", 1000, 0.9), g("a", 250, 0.1), g("b", 1000, 1), g("c", 0, null, false)];
    const fromGpus = fleetNow(nodes, gpus);
    const fromSummary = summaryNow(summary);
    expect(fromSummary).toEqual({ ...fromGpus, allocated: 1.25, idleCostPerHour: 3, utilisation: 0.5 });
    expect(fromSummary.idleCostPerHour).toBeCloseTo(fromGpus.idleCostPerHour);
    expect(fromSummary.allocated).toBeCloseTo(fromGpus.allocated);
    expect(summaryNow({ ...summary, gpus: 0 }).utilisation).toBeNull();
  });
});

describe("usage", () => {
  it("sums the groups at each step as average GPUs", () => {
    const report = {
      step_s: 1800,
      series: [
        { at: "2026-01-01T00:00:00Z", group: "a", ...nums({ busy_gpu_hours: 1, allocated_gpu_hours: 2, owned_gpu_hours: 4, idle_gpu_hours: 2 }) },
        { at: "2026-01-01T00:00:00.000Z", group: "b", ...nums({ busy_gpu_hours: 0.5, allocated_gpu_hours: 0.5, owned_gpu_hours: 0 }) },
        { at: "2026-01-01T00:30:00Z", group: "a", ...nums({ busy_gpu_hours: 2 }) },
      ],
    } as Pick<UsageReport, "series" | "step_s">;
    expect(seriesByStep(report)).toEqual([
      { at: "2026-01-01T00:00:00.000Z", busy: 3, allocated: 5, idle: 4, owned: 8 },
      { at: "2026-01-01T00:30:00.000Z", busy: 4, allocated: 0, idle: 0, owned: 0 },
    ]);
  });
  it("gives shares of owned GPU-hours, none of nothing", () => {
    expect(shares(nums({ owned_gpu_hours: 10, busy_gpu_hours: 4, allocated_gpu_hours: 6, idle_gpu_hours: 4 }))).toEqual({
      busy: 0.4,
      allocated: 0.6,
      idle: 0.4,
    });
    expect(shares(nums({}))).toEqual({ busy: null, allocated: null, idle: null });
  });
  it("keeps the largest idle costs and sums the rest", () => {
    const groups = ["a", "b", "c", "d"].map((group, i) => ({ group, ...nums({ idle_cost: i + 1, idle_gpu_hours: 1 }) }));
    expect(topByIdleCost(groups, 2)).toEqual([
      { group: "d", idle_cost: 4, idle_gpu_hours: 1 },
      { group: "c", idle_cost: 3, idle_gpu_hours: 1 },
      { group: "other (2)", idle_cost: 3, idle_gpu_hours: 2 },
    ]);
  });
  it("picks a step of about 60 points, whole minutes", () => {
    const r = range(24, Date.parse("2026-01-01T12:00:30Z"));
    expect(r.to).toBe("2026-01-01T12:01:00.000Z");
    expect(r.from).toBe("2025-12-31T12:01:00.000Z");
    expect(r.step_s).toBe(1440);
    expect(range(1).step_s).toBe(60);
  });
});

describe("pendingByReason", () => {
  it("groups pending work by reason, most common first", () => {
    const w = (state: string, reason: string | null, gpu_count = 1) =>
      ({ state, pending_reason: reason, resources: { gpu_count, gpu_milli: 1000 } }) as unknown as Workload;
    expect(pendingByReason([w("pending", "quota"), w("pending", "no fit", 4), w("pending", "quota"), w("running", "x"), w("pending", null)])).toEqual([
      { reason: "quota", count: 2, gpus: 2 },
      { reason: "no fit", count: 1, gpus: 4 },
      { reason: "no reason given yet", count: 1, gpus: 1 },
    ]);
  });
});
