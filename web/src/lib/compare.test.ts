import { describe, expect, it } from "vitest";
import { replicaSeries, scoreRows, shadowDiffRows } from "./compare";

describe("a what-if run's scores", () => {
  it("puts both replays side by side and says which does better, by the score's direction", () => {
    const active = { busy_share: 0.5, idle_cost: 120, preemptions: 3, fairness: 0.9, policy: "builtin", series: [] };
    const candidate = { busy_share: 0.625, idle_cost: 150, preemptions: 3, fairness: 0.8, policy: "mine" };
    const rows = scoreRows(active, candidate);
    expect(rows.map((r) => [r.key, r.active, r.candidate, r.verdict])).toEqual([
      ["busy_share", 0.5, 0.625, "candidate"],
      ["idle_cost", 120, 150, "active"],
      ["preemptions", 3, 3, "same"],
      ["fairness", 0.9, 0.8, "active"],
    ]);
    expect(scoreRows(null, candidate)).toEqual([]);
  });
});

describe("a shadow result's differences", () => {
  it("reads differing and refused decisions", () => {
    const rows = shadowDiffRows([
      { workload_id: "w1", workload_name: "train", active: { decision: "place on n1", reason: "fits" }, shadow: null },
      { refused: "unknown node", workload_id: null },
    ]);
    expect(rows).toEqual([
      { workload_id: "w1", workload_name: "train", active: { decision: "place on n1", reason: "fits" }, shadow: null, refused: null },
      { workload_id: null, workload_name: null, active: null, shadow: null, refused: "unknown node" },
    ]);
  });
});

describe("a service's replicas against demand", () => {
  it("steps from each decision to the next and on to now, demand in replicas' worth", () => {
    const ev = (at: string, from: number, to: number, demand: number | null) => ({
      at,
      from_gpu: from,
      from_cpu: 0,
      to_gpu: to,
      to_cpu: 0,
      started: Math.max(0, to - from),
      drained: Math.max(0, from - to),
      demand,
      reason: "r",
    });
    const s = replicaSeries(
      {
        capacity: 10,
        desired_gpu_replicas: 2,
        desired_cpu_replicas: 1,
        demand: 25,
        // newest first, as GET /services/{id} lists them
        scale_events: [ev("2026-12-03T10:05:00Z", 4, 2, 15), ev("2026-12-03T10:00:00Z", 1, 4, 38)],
      },
      "2026-12-03T10:10:00Z",
    );
    expect(s.replicas).toEqual([
      ["2026-12-03T10:00:00Z", 1],
      ["2026-12-03T10:00:00Z", 4],
      ["2026-12-03T10:05:00Z", 2],
      ["2026-12-03T10:10:00Z", 3],
    ]);
    expect(s.demandReplicas).toEqual([
      ["2026-12-03T10:00:00Z", 3.8],
      ["2026-12-03T10:05:00Z", 1.5],
      ["2026-12-03T10:10:00Z", 2.5],
    ]);
  });
});
