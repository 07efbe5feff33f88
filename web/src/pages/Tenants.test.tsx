import { afterEach, describe, expect, it, vi } from "vitest";
import { cleanup, fireEvent, render, screen, waitFor, within } from "@testing-library/react";
import { QueryClient, QueryClientProvider } from "@tanstack/react-query";
import type { Archived, Budget, Me, Tenant } from "../api/types";
import { can } from "../lib/roles";
import { Tenants } from "./Tenants";

const DEFAULT = "00000000-0000-0000-0000-000000000000";
const TEAM_B = "bbbbbbbb-0000-0000-0000-000000000000";
const OLD = "cccccccc-0000-0000-0000-000000000000";

const admin: Me = { credential: "session", email: "admin@example.com", role: "platform_admin", user_id: "99999999-9999-9999-9999-999999999999" };
const viewer: Me = { ...admin, email: "viewer@example.com", role: "viewer" };

const tenant = (over: Partial<Tenant>): Tenant => ({
  id: DEFAULT,
  name: "default",
  created_at: "2030-01-01T00:00:00Z",
  guaranteed_gpus: 0,
  weight: 1,
  tier: 0,
  may_borrow: true,
  ...over,
});

const TENANTS: Tenant[] = [
  tenant({}),
  tenant({ id: TEAM_B, name: "team-b", guaranteed_gpus: 4, weight: 2, gpu_limit: 8 }),
  tenant({ id: OLD, name: "old-team", archived_at: "2030-01-02T00:00:00Z" }),
];

const HOUR = 3600_000;
const budget = (over: Partial<Budget>): Budget => ({
  tenant_id: TEAM_B,
  tenant: "team-b",
  period: "week",
  gpu_hours: 100,
  action: "stop",
  period_start: new Date(Date.now() - 84 * HOUR).toISOString(),
  period_end: new Date(Date.now() + 84 * HOUR).toISOString(),
  used_gpu_hours: 100,
  remaining_gpu_hours: 0,
  exhausted: true,
  ...over,
});

const BUDGETS: Budget[] = [
  budget({}),
  budget({ tenant_id: DEFAULT, tenant: "default", period: "month", gpu_hours: 500, action: "warn", used_gpu_hours: 12.5, remaining_gpu_hours: 487.5, exhausted: false }),
];

interface Seen {
  method: string;
  path: string;
  body: unknown;
}

/** Answers the page's requests as a control plane would, and keeps each one with its body. */
function serve(): Seen[] {
  const seen: Seen[] = [];
  vi.stubGlobal("fetch", async (request: Request) => {
    const path = new URL(request.url).pathname;
    const text = await request.text();
    seen.push({ method: request.method, path, body: text ? JSON.parse(text) : undefined });
    const json = (body: unknown, status = 200) => new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });
    const id = /^\/api\/v1\/tenants\/([^/]+)/.exec(path)?.[1];
    const one = TENANTS.find((t) => t.id === id);
    if (request.method === "GET" && path === "/api/v1/tenants") return json(TENANTS);
    if (request.method === "GET" && path === "/api/v1/tenants/summary") return json([]);
    if (request.method === "GET" && path === "/api/v1/tenants/budgets") return json(BUDGETS);
    if (request.method === "POST" && path.endsWith("/preview"))
      return json({
        tenant: one!.name,
        current: {},
        candidate: {},
        comparison: { changes: [], placed_now: 3, placed_with_candidate: 3, policy: "fair-share", preempted_now: 0, preempted_with_candidate: 0 },
      });
    if (request.method === "PATCH") return json({ ...one!, gpu_limit: (seen.at(-1)!.body as { gpu_limit: number }).gpu_limit || null });
    if (request.method === "POST" && path.endsWith("/archive")) {
      const archived: Archived = { tenant: { ...one!, archived_at: "2030-01-03T00:00:00Z" }, cancelled_pending: 2, stopping: 1, draining_services: 1 };
      return json(archived);
    }
    if (request.method === "PUT") {
      const period = path.split("/").at(-1) as Budget["period"];
      return json(budget({ tenant_id: id!, tenant: one!.name, period, ...(seen.at(-1)!.body as object), exhausted: false }));
    }
    if (request.method === "DELETE") return new Response(null, { status: 204 });
    return json({ error: { code: "not_found", message: `no ${request.method} ${path}` } }, 404);
  });
  return seen;
}

function show(me: Me) {
  const seen = serve();
  const client = new QueryClient({ defaultOptions: { queries: { retry: false }, mutations: { retry: false } } });
  render(
    <QueryClientProvider client={client}>
      <Tenants me={me} can={can(me)} />
    </QueryClientProvider>,
  );
  return seen;
}

const sent = (seen: Seen[], method: string) => seen.filter((s) => s.method === method);

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

describe("the tenants page", () => {
  it("lists each tenant's GPU limit and marks archived tenants, which the forms leave out", async () => {
    show(admin);
    const table = await screen.findByTestId("tenants");
    const row = (name: string) => within(table).getByText(name).closest("tr")!;
    await waitFor(() => expect(row("team-b")).toBeTruthy());
    expect(within(row("team-b")).getByText("8 GPUs")).toBeTruthy();
    expect(within(row("default")).getByText("none")).toBeTruthy();
    expect(within(row("old-team")).getByText("archived")).toBeTruthy();
    expect(row("old-team").querySelector("[data-archived=true]")).toBeTruthy();

    // Archive is offered for a live tenant, never for `default` or one already archived.
    expect(within(row("team-b")).getByRole("button", { name: "Archive team-b" })).toBeTruthy();
    expect(within(row("default")).queryByRole("button")).toBeNull();
    expect(within(row("old-team")).queryByRole("button")).toBeNull();

    const quota = await screen.findByTestId("edit-quota");
    const options = within(within(quota).getByRole("combobox", { name: "Tenant" })).getAllByRole("option");
    expect(options.map((o) => o.textContent)).toEqual(["default", "team-b"]);
  });

  it("sends a new GPU limit in the PATCH, and 0 for no limit", async () => {
    const seen = show(admin);
    fireEvent.change(within(await screen.findByTestId("edit-quota")).getByRole("combobox", { name: "Tenant" }), { target: { value: TEAM_B } });
    // A fresh form for the tenant picked.
    const quota = screen.getByTestId("edit-quota");
    const limit = within(quota).getByRole("spinbutton", { name: /GPU limit/ });
    expect((limit as HTMLInputElement).value).toBe("8");

    // An empty field changes nothing.
    fireEvent.change(limit, { target: { value: "" } });
    expect(within(quota).getByRole("button", { name: "Save" }).hasAttribute("disabled")).toBe(true);

    fireEvent.change(limit, { target: { value: "12" } });
    await waitFor(() => expect(sent(seen, "POST").some((s) => s.path.endsWith("/preview"))).toBe(true));
    expect(sent(seen, "POST").find((s) => s.path.endsWith("/preview"))!.body).toEqual({ gpu_limit: 12 });
    fireEvent.click(within(quota).getByRole("button", { name: "Save" }));
    await waitFor(() => expect(sent(seen, "PATCH")).toHaveLength(1));
    expect(sent(seen, "PATCH")[0]).toEqual({ method: "PATCH", path: `/api/v1/tenants/${TEAM_B}`, body: { gpu_limit: 12 } });
    expect((await within(quota).findByRole("status")).textContent).toContain("team-b is guaranteed 4 GPUs, weight 2, tier 0, GPU limit 12 GPUs");

    fireEvent.click(within(quota).getByRole("checkbox", { name: "No limit" }));
    expect(limit.hasAttribute("disabled")).toBe(true);
    fireEvent.click(within(quota).getByRole("button", { name: "Save" }));
    await waitFor(() => expect(sent(seen, "PATCH")).toHaveLength(2));
    expect(sent(seen, "PATCH")[1]!.body).toEqual({ gpu_limit: 0 });
  });

  it("archives a tenant only once its confirmation is accepted, and says what that ended", async () => {
    const seen = show(admin);
    const archive = await screen.findByRole("button", { name: "Archive team-b" });

    // Keeping it sends nothing.
    fireEvent.click(archive);
    fireEvent.click(within(screen.getByTestId("archive-confirm")).getByRole("button", { name: "Keep it" }));
    expect(screen.queryByTestId("archive-confirm")).toBeNull();

    fireEvent.click(archive);
    const confirm = screen.getByTestId("archive-confirm");
    expect(within(confirm).getByRole("heading", { name: "Archive team-b?" })).toBeTruthy();
    expect(confirm.textContent).toContain("its pending work is cancelled");
    expect(confirm.textContent).toContain("its running work is stopped, each workload with its grace period");
    expect(confirm.textContent).toContain("its services are drained");
    expect(confirm.textContent).toContain("Its history, decisions and accounting remain.");
    expect(sent(seen, "POST")).toHaveLength(0);

    fireEvent.click(within(confirm).getByRole("button", { name: "Yes, archive team-b" }));
    await waitFor(() => expect(sent(seen, "POST")).toHaveLength(1));
    expect(sent(seen, "POST")[0]).toEqual({ method: "POST", path: `/api/v1/tenants/${TEAM_B}/archive`, body: undefined });
    expect((await screen.findByTestId("archive-result")).textContent).toBe(
      "Archived team-b: 2 pending workloads cancelled, 1 workload stopping with its grace period, 1 service draining. It admits nothing new; its history and accounting remain.",
    );
    expect(screen.queryByTestId("archive-confirm")).toBeNull();
  });

  it("shows each budget's used and remaining GPU-hours, its burn-down and whether it is exhausted", async () => {
    show(viewer);
    const table = await screen.findByTestId("budgets");
    await waitFor(() => expect(within(table).getAllByRole("row")).toHaveLength(3));
    const row = (name: string) => within(table).getByText(name).closest("tr")!;
    const cell = (r: HTMLTableRowElement, col: string) => r.querySelector(`td[data-col=${col}]`)!.textContent;

    const spent = row("team-b");
    expect(cell(spent, "used_gpu_hours")).toBe("100");
    expect(cell(spent, "remaining_gpu_hours")).toBe("0");
    expect(cell(spent, "action")).toBe("stop");
    expect(within(spent).getByText("exhausted").className).toContain("bad");
    expect(within(spent).getByRole("img").getAttribute("aria-label")).toBe("team-b, week: 100 of 100 GPU-hours used, 0% left with 50% of the week to go");

    const fine = row("default");
    expect(cell(fine, "used_gpu_hours")).toBe("12.5");
    expect(cell(fine, "remaining_gpu_hours")).toBe("488");
    expect(within(fine).queryByText("exhausted")).toBeNull();
    expect(within(fine).getByText("on track")).toBeTruthy();

    // Not a platform admin: no forms, no archive.
    expect(screen.queryByTestId("edit-budget")).toBeNull();
    expect(screen.queryByTestId("edit-quota")).toBeNull();
    expect(screen.queryByRole("button", { name: /^Archive/ })).toBeNull();
  });

  it("sets and removes a tenant's budget for a platform admin", async () => {
    const seen = show(admin);
    await screen.findByText("exhausted");
    fireEvent.change(within(screen.getByTestId("edit-budget")).getByRole("combobox", { name: "Tenant" }), { target: { value: TEAM_B } });
    fireEvent.change(within(screen.getByTestId("edit-budget")).getByRole("combobox", { name: "Period" }), { target: { value: "week" } });
    // A fresh form for the tenant and period picked.
    const form = screen.getByTestId("edit-budget");
    // Filled in from team-b's weekly budget.
    const hours = within(form).getByRole("spinbutton", { name: /GPU-hours per week/ });
    expect((hours as HTMLInputElement).value).toBe("100");
    fireEvent.change(hours, { target: { value: "250" } });
    fireEvent.change(within(form).getByRole("combobox", { name: "When used up" }), { target: { value: "best_effort" } });
    fireEvent.click(within(form).getByRole("button", { name: "Change budget" }));
    await waitFor(() => expect(sent(seen, "PUT")).toHaveLength(1));
    expect(sent(seen, "PUT")[0]).toEqual({ method: "PUT", path: `/api/v1/tenants/${TEAM_B}/budgets/week`, body: { gpu_hours: 250, action: "best_effort" } });
    expect((await within(form).findByRole("status")).textContent).toBe(
      "Saved: team-b may use 250 GPU-hours a week, then best effort: new work is admitted preemptible at priority 0.",
    );

    fireEvent.click(within(form).getByRole("button", { name: "Remove budget" }));
    await waitFor(() => expect(sent(seen, "DELETE")).toHaveLength(1));
    expect(sent(seen, "DELETE")[0]!.path).toBe(`/api/v1/tenants/${TEAM_B}/budgets/week`);
  });
});
