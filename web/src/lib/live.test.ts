import { describe, expect, it } from "vitest";
import { parseSse, staleKeys } from "./live";

describe("the live feed's parser", () => {
  it("splits whole events, keeps an unfinished one, skips keep-alives", () => {
    const text =
      'id: e3.d0.f0\nevent: workload\ndata: {"workload_id":"w1","to_state":"running"}\n\n' +
      ": keep-alive\n\n" +
      'id: e3.d1.f0\nevent: decision\ndata: {"decision":"place"}\n\n' +
      "id: e4.d1.f0\nevent: wor";
    const { events, rest } = parseSse(text);
    expect(events).toEqual([
      { event: "workload", id: "e3.d0.f0", data: { workload_id: "w1", to_state: "running" } },
      { event: "decision", id: "e3.d1.f0", data: { decision: "place" } },
    ]);
    expect(rest).toBe("id: e4.d1.f0\nevent: wor");
    expect(parseSse(rest + 'kload\ndata: {"x":1}\n\n').events).toEqual([{ event: "workload", id: "e4.d1.f0", data: { x: 1 } }]);
  });

  it("makes stale what each kind of change affects", () => {
    expect(staleKeys("node")).toEqual([["nodes"], ["gpus"], ["node"], ["fleet-summary"]]);
    expect(staleKeys("workload")).toContainEqual(["workloads"]);
    expect(staleKeys("something-new")).toEqual([]);
  });
});
