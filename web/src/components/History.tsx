// The pieces the GPU, node and overview pages share to show numbers over a time range: the range
// picker, and the grid of line charts of a telemetry history.
import { useMemo } from "react";
import { useQuery } from "@tanstack/react-query";
import type { EChartsCoreOption } from "echarts/core";
import { duration } from "../lib/format";
import { historyRange } from "../lib/history";
import { useClock } from "../lib/live";
import { Chart } from "./Chart";
import { ErrorNote, Loading, Section } from "./ui";

/** A choice of [`RangeSelect`]: its value (minutes, hours: the page's unit) and what it says. */
export interface RangeChoice {
  value: number;
  label: string;
}

/** The time ranges of a GPU's and a node's telemetry, in minutes. */
export const HISTORY_RANGES: RangeChoice[] = [
  { value: 15, label: "Last 15 minutes" },
  { value: 60, label: "Last hour" },
  { value: 6 * 60, label: "Last 6 hours" },
  { value: 24 * 60, label: "Last 24 hours" },
];

/**
 * A telemetry history over the last `minutes`, asked again every 10 s (`fetch` gets the range),
 * the last answer kept on screen while the next loads. `key` names the query; the range's end
 * is added to it.
 */
export function useHistory<T>(key: unknown[], minutes: number, fetch: (range: ReturnType<typeof historyRange>) => Promise<T>) {
  // The range moves on every 10 s, so the query key (and the cache) stays put between renders.
  const now = useClock(10_000);
  const r = useMemo(() => historyRange(minutes, now), [minutes, now]);
  return useQuery({
    queryKey: [...key, minutes, r.to],
    queryFn: () => fetch(r),
    refetchInterval: 10_000,
    placeholderData: (prev) => prev,
  });
}

/** The "Time range" picker of a page header. */
export function RangeSelect({ value, onChange, choices, testId }: { value: number; onChange: (value: number) => void; choices: RangeChoice[]; testId: string }) {
  return (
    <label className="inline">
      Time range{" "}
      <select value={value} onChange={(e) => onChange(Number(e.target.value))} data-testid={testId}>
        {choices.map((x) => (
          <option key={x.value} value={x.value}>
            {x.label}
          </option>
        ))}
      </select>
    </label>
  );
}

/** A line chart's option over a history's range, from 0 up (to `max` where given); gaps stay gaps. */
export function lineOption(h: { from: string; to: string }, name: string, unit: string, data: [string, number | null][], max?: number): EChartsCoreOption {
  return {
    tooltip: { trigger: "axis" },
    grid: { left: 52, right: 16, top: 24, bottom: 28 },
    xAxis: { type: "time", min: h.from, max: h.to },
    yAxis: { type: "value", name: unit, min: 0, max },
    series: [{ name, type: "line", showSymbol: data.length <= 30, connectNulls: false, areaStyle: { opacity: 0.2 }, data }],
  };
}

/** One chart of [`HistoryCharts`]. */
export interface HistoryChart {
  id: string;
  title: string;
  option: EChartsCoreOption;
}

/**
 * A telemetry history's charts, two a row (`data-testid="{prefix}-charts"`, each section
 * `{prefix}-{id}`), or why there are none: its error, that it loads, or that the range is empty.
 * `of` names what the charts are about in their accessible labels.
 */
export function HistoryCharts({ history, charts, prefix, of }: { history: { data?: { step_s: number; points: unknown[] }; error: unknown; isPending: boolean }; charts: HistoryChart[]; prefix: string; of: string }) {
  const h = history.data;
  return (
    <>
      <ErrorNote error={history.error} />
      {history.isPending && <Loading what="its telemetry" />}
      {h && h.points.length === 0 && <p className="muted">No telemetry in this range (it is kept as long as the control plane's --telemetry-retention-hours).</p>}
      {h && h.points.length > 0 && (
        <div className="grid2" data-testid={`${prefix}-charts`} data-points={h.points.length}>
          {charts.map((c) => (
            <Section key={c.id} title={c.title} id={`${prefix}-${c.id}`}>
              <Chart option={c.option} label={`${c.title} of ${of}, one point per ${duration(h.step_s)}`} height={220} />
            </Section>
          ))}
        </div>
      )}
    </>
  );
}
