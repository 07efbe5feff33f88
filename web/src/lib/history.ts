// A GPU's telemetry history as chart series: gaps where no sample arrived stay gaps.
import type { GpuHistory, NodeHistory } from "../api/types";

/** The range the GPU and node pages ask for: the last `minutes`, ending on the next 10 s, about 240 points. */
export function historyRange(minutes: number, now: number = Date.now()): { from: string; to: string; step_s: number } {
  const to = new Date(Math.ceil(now / 10_000) * 10_000);
  const from = new Date(to.getTime() - minutes * 60_000);
  const step_s = Math.max(2, Math.round((minutes * 60) / 240));
  return { from: from.toISOString(), to: to.toISOString(), step_s };
}

type Point = [string, number | null];

export interface HistorySeries {
  util: Point[];
  memoryGib: Point[];
  temperature: Point[];
  power: Point[];
}

/** Series for the four charts; a bucket with no sample after one that had some breaks the line. */
export function historySeries(h: GpuHistory): HistorySeries {
  const out: HistorySeries = { util: [], memoryGib: [], temperature: [], power: [] };
  let last: number | null = null;
  for (const p of h.points) {
    const at = Date.parse(p.at);
    if (last !== null && at - last > 1.5 * h.step_s * 1000) {
      const gap = new Date(last + h.step_s * 1000).toISOString();
      for (const s of [out.util, out.memoryGib, out.temperature, out.power]) s.push([gap, null]);
    }
    last = at;
    out.util.push([p.at, p.util == null ? null : Math.round(p.util * 1000) / 10]);
    out.memoryGib.push([p.at, p.memory_used_mb == null ? null : Math.round((p.memory_used_mb / 1024) * 100) / 100]);
    out.temperature.push([p.at, p.temperature_c ?? null]);
    out.power.push([p.at, p.power_w ?? null]);
  }
  return out;
}

export interface NodeSeries {
  /** Mean CPU utilisation, percent. */
  cpu: Point[];
  /** Most memory used in the bucket, GiB. */
  memoryGib: Point[];
}

/** Series for a node's CPU and memory charts, with the same gaps as a GPU's. */
export function nodeSeries(h: NodeHistory): NodeSeries {
  const out: NodeSeries = { cpu: [], memoryGib: [] };
  let last: number | null = null;
  for (const p of h.points) {
    const at = Date.parse(p.at);
    if (last !== null && at - last > 1.5 * h.step_s * 1000) {
      const gap = new Date(last + h.step_s * 1000).toISOString();
      out.cpu.push([gap, null]);
      out.memoryGib.push([gap, null]);
    }
    last = at;
    out.cpu.push([p.at, Math.round(p.cpu_util * 1000) / 10]);
    out.memoryGib.push([p.at, Math.round((p.memory_used_mb / 1024) * 100) / 100]);
  }
  return out;
}
