import { describe, expect, it } from "vitest";
import { ago, duration, gpuHours, gpusAcross, gpusAsked, money, pct } from "./format";

describe("format", () => {
  it("writes GPU-hours with the digits that matter", () => {
    expect(gpuHours(0)).toBe("0");
    expect(gpuHours(0.004)).toBe("<0.01");
    expect(gpuHours(0.25)).toBe("0.25");
    expect(gpuHours(12.345)).toBe("12.3");
    expect(gpuHours(1234.5)).toBe("1,235");
    expect(gpuHours(null)).toBe("—");
  });
  it("writes money in dollars, no cents past a thousand", () => {
    expect(money(0)).toBe("$0.00");
    expect(money(4)).toBe("$4.00");
    expect(money(12.5)).toBe("$12.50");
    expect(money(1234.56)).toBe("$1,235");
    expect(money(-3)).toBe("-$3.00");
    expect(money(undefined)).toBe("—");
  });
  it("writes shares and durations", () => {
    expect(pct(0.426)).toBe("43%");
    expect(pct(null)).toBe("—");
    expect(duration(42)).toBe("42 s");
    expect(duration(720)).toBe("12 min");
    expect(duration(3600 * 3 + 300)).toBe("3 h 5 min");
    expect(duration(86400 * 2 + 3600 * 4)).toBe("2 d 4 h");
    expect(ago("2026-01-01T00:00:00Z", Date.parse("2026-01-01T00:05:00Z"))).toBe("5 min ago");
  });
  it("says what a workload asks for", () => {
    expect(gpusAsked({ gpu_count: 4, gpu_milli: 1000 })).toBe("4");
    expect(gpusAsked({ gpu_count: 1, gpu_milli: 250 })).toBe("0.25 GPU");
    expect(gpusAsked({ gpu_count: 1, gpu_milli: 142, mig_profile: "1g.10gb" })).toBe("MIG 1g.10gb");
    expect(gpusAsked({ gpu_count: 0, gpu_milli: 1000 })).toBe("CPU");
  });
  it("says what a gang member asks for across its nodes", () => {
    expect(gpusAcross({ resources: { gpu_count: 2, gpu_milli: 1000 }, gang_size: 3 })).toBe("2 × 3 nodes");
    expect(gpusAcross({ resources: { gpu_count: 2, gpu_milli: 1000 }, gang_size: null })).toBe("2");
    expect(gpusAcross({ resources: { gpu_count: 8, gpu_milli: 1000 } })).toBe("8");
  });
});
