import { afterEach, describe, expect, it, vi } from "vitest";
import { cleanup, render, screen, within } from "@testing-library/react";
import { QueryClient, QueryClientProvider } from "@tanstack/react-query";
import type { Me, WorkloadDetail } from "../api/types";
import { can } from "../lib/roles";
import { WorkloadPage } from "./Workloads";

const GANG = "aaaaaaaa-0000-0000-0000-000000000000";
const RANK1 = "bbbbbbbb-1111-1111-1111-111111111111";
const RANK2 = "cccccccc-2222-2222-2222-222222222222";
const NODE_A = "11111111-aaaa-aaaa-aaaa-aaaaaaaaaaaa";
const NODE_B = "22222222-bbbb-bbbb-bbbb-bbbbbbbbbbbb";

const me: Me = { credential: "session", email: "viewer@example.com", role: "viewer", user_id: "99999999-9999-9999-9999-999999999999" };

const detail = (over: Partial<WorkloadDetail> = {}): WorkloadDetail => ({
  id: RANK1,
  name: "llama-70b",
  tenant: "research",
  tenant_id: "33333333-3333-3333-3333-333333333333",
  class: "training",
  priority: 10,
  state: "running",
  attempt: 1,
  checkpointable: false,
  preemptible: false,
  command: ["torchrun", "train.py"],
  env: {},
  gpu_ids: [],
  resources: { cpu_capable: false, cpu_millis: 0, gpu_count: 2, gpu_memory_mb: 0, gpu_milli: 1000, gpu_models: [], memory_mb: 0 },
  submitted_at: "2030-01-01T00:00:00Z",
  started_at: "2030-01-01T00:01:00Z",
  history: [],
  decisions: [],
  ...over,
});

/** A gang of three whose rank 1 is shown: rank 0 and 1 run on nodes, rank 2 waits (last ran on gpu-9). */
const member = detail({
  node_id: NODE_B,
  gang_id: GANG,
  gang_rank: 1,
  gang_size: 3,
  gang: [
    { id: RANK2, rank: 2, state: "pending", attempt: 2, node_id: null, node: "gpu-9" },
    { id: GANG, rank: 0, state: "running", attempt: 1, node_id: NODE_A, node: "gpu-7" },
    { id: RANK1, rank: 1, state: "running", attempt: 1, node_id: NODE_B, node: "gpu-8" },
  ],
});

/** Answers the workload's detail and (empty) logs. */
function serve(w: WorkloadDetail) {
  vi.stubGlobal("fetch", async (request: Request) => {
    const path = new URL(request.url).pathname;
    const body = path.endsWith("/logs") ? { cursor: 0, dropped_bytes: 0, lines: [] } : w;
    return new Response(JSON.stringify(body), { status: 200, headers: { "Content-Type": "application/json" } });
  });
}

function show(w: WorkloadDetail) {
  serve(w);
  const client = new QueryClient({ defaultOptions: { queries: { retry: false } } });
  return render(
    <QueryClientProvider client={client}>
      <WorkloadPage id={w.id} me={me} can={can(me)} />
    </QueryClientProvider>,
  );
}

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

describe("a workload's gang", () => {
  it("shows a member's rank and every member of its gang by rank, with their nodes", async () => {
    show(member);
    expect((await screen.findByTestId("workload-gang")).textContent).toBe("Gang: rank 1 of 3");
    expect(screen.getByTestId("workload-facts").textContent).toContain("2 × 3 nodes");

    const table = screen.getByTestId("gang-members");
    const rows = within(table).getAllByRole("row").slice(1) as HTMLTableRowElement[];
    expect(rows.map((r) => r.dataset.rank)).toEqual(["0", "1", "2"]);

    // Each member links to its own page; the one shown is marked.
    const links = rows.map((r) => within(r).getAllByRole("link")[0]!.getAttribute("href"));
    expect(links).toEqual([`/workloads/${GANG}`, `/workloads/${RANK1}`, `/workloads/${RANK2}`]);
    expect(rows[1]!.className).toBe("selected");
    expect(within(rows[1]!).getAllByRole("link")[0]!.getAttribute("aria-current")).toBe("page");
    expect(rows[0]!.className).toBe("");
    expect(within(rows[0]!).getAllByRole("link")[0]!.getAttribute("aria-current")).toBeNull();

    // Nodes link to their pages where the member has one; a waiting member names where it last ran.
    expect(within(table).getByRole("link", { name: "gpu-7" }).getAttribute("href")).toBe(`/fleet/nodes/${NODE_A}`);
    expect(within(table).getByRole("link", { name: "gpu-8" }).getAttribute("href")).toBe(`/fleet/nodes/${NODE_B}`);
    expect(within(table).queryByRole("link", { name: "gpu-9" })).toBeNull();
    expect(within(rows[2]!).getByText("gpu-9")).toBeTruthy();

    expect(within(rows[2]!).getByText("pending")).toBeTruthy();
    expect(rows.map((r) => r.cells[3]!.textContent)).toEqual(["1", "1", "2"]);
  });

  it("keeps a pending member's reason beside its gang", async () => {
    show({ ...member, state: "pending", pending_reason: "waits for 3 nodes with 2 free GPUs each", node_id: null });
    expect((await screen.findByTestId("workload-gang")).textContent).toBe("Gang: rank 1 of 3");
    expect(screen.getByTestId("workload-facts").textContent).toContain("waits for 3 nodes with 2 free GPUs each");
    expect(screen.getByTestId("gang-members")).toBeTruthy();
  });

  it("shows no gang for work on one node", async () => {
    show(detail({ id: RANK2, name: "eval-1" }));
    expect((await screen.findByTestId("workload-facts")).textContent).toContain("GPUs2");
    expect(screen.queryByTestId("workload-gang")).toBeNull();
    expect(screen.queryByTestId("gang-members")).toBeNull();
    expect(screen.queryByRole("heading", { name: "Gang members" })).toBeNull();
  });
});
