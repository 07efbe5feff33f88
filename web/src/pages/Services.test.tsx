import { afterEach, describe, expect, it, vi } from "vitest";
import { cleanup, render, screen, within } from "@testing-library/react";
import { QueryClient, QueryClientProvider } from "@tanstack/react-query";
import type { Me, ServiceDetail } from "../api/types";
import { can } from "../lib/roles";
import type { ServingReport } from "../lib/serving";
import { ServicePage } from "./Services";

// ECharts draws on a canvas, which jsdom has not: the chart stands in as its labelled box, keeping
// the option it was given.
const charts = vi.hoisted(() => [] as { label: string; option: { series: { name: string; data: unknown[] }[] } }[]);
vi.mock("../components/Chart", () => ({
  Chart: ({ option, label }: { option: (typeof charts)[number]["option"]; label: string }) => {
    charts.push({ label, option });
    return <div role="img" aria-label={label} />;
  },
}));

const ID = "55555555-0000-0000-0000-000000000000";

const me: Me = { credential: "session", email: "viewer@example.com", role: "viewer", user_id: "99999999-9999-9999-9999-999999999999" };

const service = (over: Record<string, unknown> = {}): ServiceDetail =>
  ({
    id: ID,
    name: "chat",
    tenant: "default",
    tenant_id: "00000000-0000-0000-0000-000000000000",
    class: "realtime_inference",
    state: "active",
    metric: "tokens_per_second",
    capacity: 1000,
    min_replicas: 1,
    max_replicas: 6,
    desired_gpu_replicas: 2,
    desired_cpu_replicas: 1,
    running_gpu_replicas: 2,
    running_cpu_replicas: 1,
    pending_replicas: 0,
    scale_up_window_s: 30,
    scale_down_window_s: 300,
    stale_after_s: 60,
    replica: { command: ["vllm", "serve"], resources: {} },
    created_at: "2030-01-01T00:00:00Z",
    scale_events: [],
    ...over,
  }) as unknown as ServiceDetail;

const SERVING: ServingReport = {
  objective: { ttft_p95_ms: 500, tpot_p95_ms: 50 },
  ready_path: "/health",
  metrics_path: "/metrics",
  window_s: 3600,
  tokens_per_s: 2150,
  tokens: 7_740_000,
  cost: 3.1,
  cost_per_million_tokens: 0.4,
  gpu_only_cost_per_million_tokens: 0.5,
  variants: [
    {
      variant: "gpu",
      replicas: 2,
      ready_replicas: 2,
      tokens_per_s: 1900,
      ttft_p95_ms: 420,
      tpot_p95_ms: 38,
      pressure: 0.84,
      capacity: { tokens_per_s: 1100, declared_tokens_per_s: 1000, basis: "measured: median of 6 saturated windows at the objective", samples: 40, saturated_samples: 6 },
      tokens: 6_840_000,
      cost: 2.9,
      cost_per_million_tokens: 0.42,
    },
    {
      variant: "cpu",
      replicas: 1,
      ready_replicas: 0,
      tokens_per_s: 250,
      ttft_p95_ms: 900,
      tpot_p95_ms: 45,
      pressure: 1.8,
      capacity: { tokens_per_s: 225, declared_tokens_per_s: 300, basis: "below the least served while breaking the objective, scaled to it (250)", samples: 12, saturated_samples: 0 },
      tokens: 900_000,
      cost: 0.2,
      cost_per_million_tokens: 0.22,
    },
  ],
  history: [
    { at: "2030-01-01T00:00:00Z", tokens_per_s: 2000, cost_per_million_tokens: 0.41, pressure: 0.9 },
    { at: "2030-01-01T00:05:00Z", tokens_per_s: 2150, cost_per_million_tokens: 0.4, pressure: 1.8 },
  ],
};

function show(detail: ServiceDetail) {
  vi.stubGlobal("fetch", async (request: Request) => {
    const path = new URL(request.url).pathname;
    const json = (body: unknown, status = 200) => new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });
    if (request.method === "GET" && path === `/api/v1/services/${ID}`) return json(detail);
    return json({ error: { code: "not_found", message: `no ${request.method} ${path}` } }, 404);
  });
  const client = new QueryClient({ defaultOptions: { queries: { retry: false }, mutations: { retry: false } } });
  render(
    <QueryClientProvider client={client}>
      <ServicePage id={ID} me={me} can={can(me)} />
    </QueryClientProvider>,
  );
}

afterEach(() => {
  cleanup();
  charts.length = 0;
  vi.unstubAllGlobals();
});

describe("a service's page", () => {
  it("shows a token-priced service's objective, each variant against it and its cost per million tokens", async () => {
    show(service({ serving_report: SERVING }));
    const section = (await screen.findByRole("heading", { name: "Serving" })).closest("section")!;
    expect(within(section).getByTestId("serving-objective").textContent).toBe("Objective: TTFT p95 ≤ 500 ms · TPOT p95 ≤ 50 ms");

    const table = within(section).getByTestId("serving-variants");
    const row = (name: string) => within(table).getByText(name).closest("tr")!;
    const cell = (r: HTMLTableRowElement, col: string) => r.querySelector(`td[data-col=${col}]`)!;
    const marks = (r: HTMLTableRowElement, col: string) => [...cell(r, col).querySelectorAll("[data-holds]")].map((m) => m.getAttribute("data-holds"));

    const gpu = row("GPU");
    expect(cell(gpu, "ready_replicas").textContent).toBe("2 of 2");
    expect(cell(gpu, "tokens_per_s").textContent).toBe("1,900");
    expect(cell(gpu, "ttft_p95_ms").textContent).toContain("420 ms");
    expect(marks(gpu, "ttft_p95_ms")).toEqual(["held"]);
    expect(marks(gpu, "tpot_p95_ms")).toEqual(["held"]);
    expect(marks(gpu, "objective")).toEqual(["held"]);
    expect(cell(gpu, "capacity").textContent).toContain("1,100 tokens/s");
    expect(cell(gpu, "capacity").textContent).toContain("measured: median of 6 saturated windows at the objective · 40 reads, 6 saturated");
    expect(cell(gpu, "cost_per_million").textContent).toBe("$0.42");

    const cpu = row("CPU variant");
    expect(cell(cpu, "ready_replicas").textContent).toBe("0 of 1");
    expect(marks(cpu, "ttft_p95_ms")).toEqual(["broken"]);
    expect(marks(cpu, "tpot_p95_ms")).toEqual(["held"]);
    expect(marks(cpu, "objective")).toEqual(["broken"]);
    expect(cell(cpu, "objective").textContent).toContain("✗ broken");
    expect(cell(cpu, "objective").textContent).toContain("1.8× target");
    expect(cell(cpu, "cost_per_million").textContent).toBe("$0.22");
    // The objective sets no request target: no mark there.
    expect(marks(cpu, "request_p95_ms")).toEqual([]);

    expect(within(section).getByTestId("serving-tokens").textContent).toContain("2,150");
    expect(within(section).getByTestId("serving-cost").textContent).toContain("$0.40");
    expect(within(section).getByTestId("serving-gpu-only").textContent).toContain("$0.50");
    expect(within(section).getByTestId("serving-saving").textContent).toContain("20% less than GPU only");
    expect(within(section).getByRole("img", { name: /Tokens per second and cost per million tokens of chat/ })).toBeTruthy();
    const chart = charts.findLast((c) => c.label.startsWith("Tokens per second"))!;
    expect(chart.option.series.map((x) => [x.name, x.data])).toEqual([
      ["Tokens/s", [["2030-01-01T00:00:00Z", 2000], ["2030-01-01T00:05:00Z", 2150]]],
      ["Cost per 1M tokens", [["2030-01-01T00:00:00Z", 0.41], ["2030-01-01T00:05:00Z", 0.4]]],
    ]);
  });

  it("shows no serving section for a service without a serving report", async () => {
    show(service({ metric: "requests_per_second", serving_report: null }));
    await screen.findByTestId("service-running");
    expect(screen.queryByRole("heading", { name: "Serving" })).toBeNull();
    expect(screen.queryByTestId("serving-variants")).toBeNull();
    expect(screen.getByRole("heading", { name: "Replicas against demand" })).toBeTruthy();
  });
});
