import { describe, expect, it } from "vitest";
import { STOPS, UNKNOWN, contrast, heatColor, heatRgb, segments, textOn } from "./heat";

describe("heat-map colour scale", () => {
  it("maps the ends and the stops exactly", () => {
    for (const stop of STOPS) expect(heatRgb(stop.at)).toEqual(stop.rgb);
    expect(heatColor(0)).toBe("rgb(30, 58, 138)");
    expect(heatColor(1)).toBe("rgb(220, 38, 38)");
  });
  it("clamps out-of-range readings and greys unknown ones", () => {
    expect(heatRgb(-1)).toEqual(heatRgb(0));
    expect(heatRgb(7)).toEqual(heatRgb(1));
    expect(heatRgb(null)).toEqual(UNKNOWN);
    expect(heatRgb(Number.NaN)).toEqual(UNKNOWN);
  });
  it("interpolates between stops", () => {
    const mid = heatRgb(0.125);
    expect(mid).toEqual([34, 79, 187]);
  });
  it("always picks a readable text colour (WCAG AA for large text)", () => {
    for (let u = 0; u <= 1.0001; u += 0.05) {
      const ink = textOn(u) === "#000" ? [0, 0, 0] : [255, 255, 255];
      expect(contrast(heatRgb(u), ink as [number, number, number])).toBeGreaterThanOrEqual(3);
    }
  });
  it("draws a shared GPU as its shares plus the free rest", () => {
    expect(segments([{ milli: 250, workload_id: "a" }, { milli: 500, workload_id: null }])).toEqual([
      { part: 0.25, workload_id: "a" },
      { part: 0.5, workload_id: null },
      { part: 0.25, workload_id: null },
    ]);
    expect(segments([{ milli: 1000, workload_id: "a" }])).toEqual([{ part: 1, workload_id: "a" }]);
    expect(segments([])).toEqual([{ part: 1, workload_id: null }]);
  });
});
