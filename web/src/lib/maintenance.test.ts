import { describe, expect, it } from "vitest";
import { cordonBody, drainBody, drainWords, MAX_DEADLINE_S, nodeActions, remainingWords, type NodeWork } from "./maintenance";

const work = (drain: NodeWork["drain"]): NodeWork => ({ class: "training", drain, state: "running" });

describe("node maintenance", () => {
  it("offers the actions that change something in each state", () => {
    expect(nodeActions("ready", false)).toEqual(["cordon", "drain"]);
    expect(nodeActions("cordoned", true)).toEqual(["drain", "uncordon"]);
    expect(nodeActions("draining", true)).toEqual(["cordon", "drain", "uncordon"]);
    expect(nodeActions("lost", false)).toEqual(["cordon", "drain"]);
    expect(nodeActions("lost", true)).toEqual(["cordon", "drain", "uncordon"]);
  });

  it("says what a drain does with each workload", () => {
    expect(drainWords("requeue")).toBe("checkpoint signal, then requeued");
    expect(drainWords("replace")).toBe("replaced on another node, then stopped");
    expect(drainWords("finish")).toBe("left to finish");
    expect(drainWords("finish", "2030-01-01T00:00:00Z")).toBe("left to finish, requeued at the deadline");
    expect(drainWords("stopping")).toBe("stopping");
  });

  it("counts what is left like the CLI", () => {
    expect(remainingWords({ mode: "draining", remaining: 0, drained: true })).toMatch(/^drained/);
    expect(remainingWords({ mode: "cordoned", remaining: 1, drained: false })).toBe("1 workload left");
    expect(remainingWords({ mode: "draining", remaining: 2, drained: false }, [work("finish"), work("stopping")])).toBe(
      "2 workloads left (1 to finish, 1 stopping)",
    );
    expect(remainingWords({ mode: "draining", remaining: 3, drained: false }, [work("requeue"), work("replace"), work("requeue")])).toBe(
      "3 workloads left (2 to requeue, 1 to replace)",
    );
  });

  it("builds a cordon's body: the reason trimmed, absent when empty", () => {
    expect(cordonBody("")).toEqual({ body: {} });
    expect(cordonBody("  fan replacement ")).toEqual({ body: { reason: "fan replacement" } });
    expect(cordonBody("x".repeat(501))).toHaveProperty("error");
  });

  it("builds a drain's body: a deadline in whole seconds up to a week, or none", () => {
    expect(drainBody("", "")).toEqual({ body: {} });
    expect(drainBody("kernel upgrade", " 3600 ")).toEqual({ body: { reason: "kernel upgrade", deadline_s: 3600 } });
    expect(drainBody("", String(MAX_DEADLINE_S))).toEqual({ body: { deadline_s: MAX_DEADLINE_S } });
    expect(drainBody("", String(MAX_DEADLINE_S + 1))).toHaveProperty("error");
    expect(drainBody("", "0")).toHaveProperty("error");
    expect(drainBody("", "1.5")).toHaveProperty("error");
    expect(drainBody("", "-3")).toHaveProperty("error");
    expect(drainBody("", "soon")).toHaveProperty("error");
    expect(drainBody("x".repeat(501), "60")).toHaveProperty("error");
  });
});
