import { describe, expect, it } from "vitest";
import type { Budget } from "../api/types";
import { archivedWords, burnDown, limitChange, limitWords } from "./tenants";

const budget = (over: Partial<Budget> = {}): Budget => ({
  tenant_id: "bbbbbbbb-0000-0000-0000-000000000000",
  tenant: "team-b",
  period: "week",
  gpu_hours: 100,
  action: "warn",
  period_start: "2030-01-01T00:00:00Z",
  period_end: "2030-01-11T00:00:00Z",
  used_gpu_hours: 20,
  remaining_gpu_hours: 80,
  exhausted: false,
  ...over,
});
const day = (d: number) => Date.parse("2030-01-01T00:00:00Z") + d * 86_400_000;

describe("a tenant's controls", () => {
  it("sends a GPU limit only when it changes: empty keeps it, no limit removes it (0)", () => {
    expect(limitChange(8, "", false)).toBeUndefined();
    expect(limitChange(8, " 8 ", false)).toBeUndefined();
    expect(limitChange(8, "12", false)).toBe(12);
    expect(limitChange(null, "4", false)).toBe(4);
    expect(limitChange(8, "12", true)).toBe(0);
    expect(limitChange(undefined, "", true)).toBeUndefined();
    expect(limitChange(8, "1.5", false)).toBeUndefined();
  });

  it("reads limits and what archiving ended", () => {
    expect(limitWords(null)).toBe("none");
    expect(limitWords(1)).toBe("1 GPU");
    expect(limitWords(16)).toBe("16 GPUs");
    const tenant = { id: "x", name: "team-b", created_at: "2030-01-01T00:00:00Z", guaranteed_gpus: 0, weight: 1, tier: 0, may_borrow: true };
    expect(archivedWords({ tenant, cancelled_pending: 1, stopping: 0, draining_services: 3 })).toMatch(
      /^Archived team-b: 1 pending workload cancelled, 0 workloads stopping with their grace period, 3 services draining\./,
    );
  });

  it("burns a budget down against its period", () => {
    expect(burnDown(budget(), day(1))).toEqual({ remaining: 0.8, elapsed: 0.1, pace: 0.9, overPace: true });
    expect(burnDown(budget(), day(5)).overPace).toBe(false);
    // Before and after the period, and an exhausted budget (its remainder may read below 0).
    expect(burnDown(budget(), day(-1)).pace).toBe(1);
    expect(burnDown(budget(), day(20)).pace).toBe(0);
    expect(burnDown(budget({ exhausted: true, used_gpu_hours: 120, remaining_gpu_hours: -20 }), day(5)).remaining).toBe(0);
  });
});
