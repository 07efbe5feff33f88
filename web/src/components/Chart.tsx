// Apache ECharts, tree-shaken to what the dashboard draws (lines, bars; canvas renderer).
import { useEffect, useRef } from "react";
import { BarChart, LineChart } from "echarts/charts";
import { AriaComponent, GridComponent, LegendComponent, TooltipComponent } from "echarts/components";
import * as echarts from "echarts/core";
import { CanvasRenderer } from "echarts/renderers";
import type { EChartsCoreOption } from "echarts/core";
import { useTheme } from "../lib/theme";

echarts.use([LineChart, BarChart, GridComponent, TooltipComponent, LegendComponent, AriaComponent, CanvasRenderer]);

export function Chart({ option, label, height = 260 }: { option: EChartsCoreOption; label: string; height?: number }) {
  const ref = useRef<HTMLDivElement>(null);
  const chart = useRef<echarts.ECharts | null>(null);
  const theme = useTheme();

  useEffect(() => {
    if (!ref.current) return;
    const c = echarts.init(ref.current, theme === "dark" ? "dark" : undefined, { renderer: "canvas" });
    chart.current = c;
    const resize = () => c.resize();
    const observer = typeof ResizeObserver === "undefined" ? null : new ResizeObserver(resize);
    observer?.observe(ref.current);
    return () => {
      observer?.disconnect();
      c.dispose();
      chart.current = null;
    };
  }, [theme]);

  useEffect(() => {
    chart.current?.setOption(
      { backgroundColor: "transparent", aria: { enabled: true, label: { description: label } }, animation: false, ...option },
      { notMerge: true },
    );
  }, [option, label, theme]);

  return <div className="chart" ref={ref} style={{ height }} role="img" aria-label={label} />;
}
