import { afterEach, describe, expect, it, vi } from "vitest";
import { cleanup, fireEvent, render, screen, waitFor } from "@testing-library/react";
import { QueryClient, QueryClientProvider } from "@tanstack/react-query";
import type { NodeView } from "../api/types";
import { NodeMaintenance } from "./Node";

const node = (over: Partial<NodeView> = {}): NodeView => ({
  id: "11111111-1111-1111-1111-111111111111",
  name: "gpu-7",
  hostname: "gpu-7.local",
  agent_protocol: "1.0",
  agent_version: "0.1.0",
  cpu_millis: 8000,
  memory_mb: 32768,
  gpu_source: "simulated",
  gpus: [],
  labels: {},
  last_seen_at: "2030-01-01T00:00:00Z",
  registered_at: "2030-01-01T00:00:00Z",
  simulated: true,
  state: "ready",
  telemetry: {},
  ...over,
});

function show(n: NodeView, canMaintain: boolean) {
  const client = new QueryClient({ defaultOptions: { queries: { retry: false }, mutations: { retry: false } } });
  return render(
    <QueryClientProvider client={client}>
      <NodeMaintenance node={n} canMaintain={canMaintain} />
    </QueryClientProvider>,
  );
}

function serve(status: number, body: unknown): Request[] {
  const seen: Request[] = [];
  vi.stubGlobal("fetch", async (request: Request) => {
    seen.push(request);
    return new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });
  });
  return seen;
}

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

describe("the node page's maintenance section", () => {
  it("shows a drain's hold and what it does with each workload", () => {
    show(
      node({
        state: "draining",
        maintenance: { mode: "draining", reason: "kernel upgrade", by: "admin@example.com", since: "2030-01-01T00:00:00Z", remaining: 2, drained: false },
        work: [
          { class: "training", drain: "finish", state: "running", name: "train-1", workload_id: "22222222-2222-2222-2222-222222222222" },
          { class: "batch_inference", drain: "stopping", state: "running" },
        ],
      }),
      false,
    );
    expect(screen.getByTestId("node-maintenance").dataset.mode).toBe("draining");
    expect(screen.getByText("kernel upgrade")).toBeTruthy();
    expect(screen.getByTestId("node-remaining").textContent).toBe("2 workloads left (1 to finish, 1 stopping)");
    expect(screen.getByRole("link", { name: "train-1" }).getAttribute("href")).toContain("/workloads/22222222");
    expect(screen.getByText("another tenant's")).toBeTruthy();
    // Not a platform admin: no buttons.
    expect(screen.queryByTestId("node-hold")).toBeNull();
  });

  it("drains with the reason and deadline for a platform admin", async () => {
    const seen = serve(200, node({ state: "draining" }));
    show(node(), true);
    expect(screen.queryByRole("button", { name: "Uncordon" })).toBeNull();
    fireEvent.change(screen.getByRole("textbox", { name: /Reason/ }), { target: { value: " kernel upgrade " } });
    fireEvent.change(screen.getByRole("textbox", { name: /deadline/ }), { target: { value: "3600" } });
    fireEvent.click(screen.getByRole("button", { name: "Drain" }));
    await waitFor(() => expect(seen).toHaveLength(1));
    expect(seen[0]!.method).toBe("POST");
    expect(new URL(seen[0]!.url).pathname).toBe("/api/v1/nodes/11111111-1111-1111-1111-111111111111/drain");
    expect(await seen[0]!.json()).toEqual({ reason: "kernel upgrade", deadline_s: 3600 });
  });

  it("refuses a bad deadline before asking, and shows the API's refusal", async () => {
    const seen = serve(403, { error: { code: "forbidden", message: "platform admins only" } });
    show(node({ state: "cordoned", maintenance: { mode: "cordoned", by: "ops", since: "2030-01-01T00:00:00Z", remaining: 0, drained: false } }), true);
    fireEvent.change(screen.getByRole("textbox", { name: /deadline/ }), { target: { value: "soon" } });
    fireEvent.click(screen.getByRole("button", { name: "Drain" }));
    expect(screen.getByRole("alert").textContent).toMatch(/whole number of seconds/);
    expect(seen).toHaveLength(0);
    fireEvent.click(screen.getByRole("button", { name: "Uncordon" }));
    await waitFor(() => expect(screen.getByRole("alert").textContent).toBe("Not allowed: platform admins only"));
    expect(new URL(seen[0]!.url).pathname).toMatch(/\/uncordon$/);
  });
});
