// Airtime's dashboard: fleet, idle cost, workloads, tenants and decisions, read from the REST API.
// Signs in with the API's login (the session token stays in this tab's sessionStorage).
"use strict";

const REFRESH_MS = 3000;
const TOKEN_KEY = "airtime.session";

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child ?? "")));
  return node;
}

const badge = (text, cls = "") => el("span", { class: `badge ${cls}` }, text);
const pct = (x) => (x == null ? "—" : `${Math.round(x * 100)}%`);
const gib = (mb) => Math.round((mb ?? 0) / 1024);

function ago(iso) {
  if (!iso) return "";
  const s = Math.round((Date.now() - new Date(iso).getTime()) / 1000);
  if (s < 60) return `${Math.max(s, 0)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  return `${Math.round(s / 3600)} h ago`;
}

function fill(tableId, rows) {
  const body = document.querySelector(`#${tableId} tbody`);
  const columns = document.querySelectorAll(`#${tableId} thead th`).length;
  body.replaceChildren();
  if (rows.length === 0) {
    body.append(el("tr", {}, el("td", { colspan: columns, class: "empty" }, "none yet")));
    return;
  }
  for (const cells of rows) body.append(el("tr", {}, ...cells.map((c) => el("td", {}, c))));
}

class Unauthorized extends Error {}

async function api(path, options = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const headers = { Accept: "application/json", ...(options.headers ?? {}) };
  if (token) headers.Authorization = `Bearer ${token}`;
  const response = await fetch(path, { ...options, headers });
  if (response.status === 401) throw new Unauthorized("sign in again");
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body?.error?.message ?? `${path}: HTTP ${response.status}`);
  return body;
}

function show(signedIn) {
  document.getElementById("login").hidden = signedIn;
  document.getElementById("dashboard").hidden = !signedIn;
  document.getElementById("logout").hidden = !signedIn;
}

function summary(nodes, gpus) {
  const live = nodes.filter((n) => n.state !== "lost");
  const costOf = new Map(live.map((n) => [n.id, n.gpus.length ? (n.cost_per_hour ?? 0) / n.gpus.length : 0]));
  // Shares count as fractions: a GPU held in quarters by two workloads is half allocated.
  const heldShare = (g) => (g.held_milli ?? (g.held ? 1000 : 0)) / 1000;
  const held = gpus.reduce((sum, g) => sum + heldShare(g), 0);
  const idleCost = gpus.reduce((sum, g) => sum + (1 - heldShare(g)) * (costOf.get(g.node_id) ?? 0), 0);
  const count = (n) => (Number.isInteger(n) ? `${n}` : n.toFixed(2));
  const items = [
    ["Nodes ready", `${live.filter((n) => n.state === "ready").length} / ${nodes.length}`],
    ["GPUs busy", `${count(held)} / ${gpus.length}`],
    ["GPU allocation", gpus.length ? pct(held / gpus.length) : "—"],
    ["Idle GPU cost", `$${idleCost.toFixed(2)} / hour`],
  ];
  const dl = document.getElementById("summary");
  dl.replaceChildren(...items.map(([k, v]) => el("div", {}, el("dt", {}, k), el("dd", {}, v))));
}

// GPUs a workload asks for: "2", "0.25 GPU" for a share of one, "MIG 1g.10gb" for an instance.
function gpusAsked(r) {
  if (r.mig_profile) return `MIG ${r.mig_profile}`;
  if (r.gpu_count === 1 && r.gpu_milli < 1000) return `${r.gpu_milli / 1000} GPU`;
  return r.gpu_count;
}

// How a GPU is shared, shown on its row: time-slicing says it has no isolation.
function sharingBadge(g) {
  const labels = { mps: "MPS", time_slicing: "time-slicing · no isolation" };
  if (g.sharing === "mig") return badge(`MIG ${g.mig_profile ?? ""}`.trim(), "sharing");
  return labels[g.sharing] ? badge(labels[g.sharing], "sharing") : "";
}

// Who holds a GPU: its workload, its shares ("2 shares, 500/1000 (mps)"), or "free". Another
// tenant's workload is shown only as held (the API leaves its id out).
function holders(g, names) {
  const shares = g.shares ?? [];
  const label = (id) => (id ? (names.get(id) ?? id.slice(0, 8)) : "another tenant");
  if (shares.length === 0) return g.held ? "held" : "free";
  if (shares.length === 1 && (shares[0].milli >= 1000 || g.sharing === "mig" || g.sharing === "none")) {
    return label(shares[0].workload_id);
  }
  const held = shares.reduce((sum, s) => sum + s.milli, 0);
  const who = shares.map((s) => `${label(s.workload_id)} ${s.milli}/1000`).join(", ");
  return `${shares.length} shares, ${held}/1000 (${g.sharing}): ${who}`;
}

async function refresh() {
  const status = document.getElementById("status");
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) {
    show(false);
    status.textContent = "Sign in to see the fleet.";
    return;
  }
  try {
    const [nodes, gpus, workloads, tenants, decisions] = await Promise.all([
      api("/api/v1/nodes"),
      api("/api/v1/gpus"),
      api("/api/v1/workloads?limit=50"),
      api("/api/v1/tenants/summary"),
      api("/api/v1/decisions?limit=20"),
    ]);
    // Signed out (or in again) while this refresh was in flight: its answers are not to be shown.
    if (sessionStorage.getItem(TOKEN_KEY) !== token) return;
    show(true);
    const names = new Map(workloads.map((w) => [w.id, w.name]));
    summary(nodes, gpus);
    fill("nodes", nodes.map((n) => [
      el("span", {}, n.name, " ", n.simulated ? badge("simulated GPUs", "simulated") : ""),
      el("span", { class: `state-${n.state}` }, n.state),
      `${(n.cpu_millis / 1000).toFixed(0)} cores · ${pct(n.telemetry.cpu_util)}`,
      `${gib(n.telemetry.memory_used_mb)} / ${gib(n.memory_mb)} GiB`,
      n.gpus.length,
      n.cost_per_hour == null ? "—" : `$${n.cost_per_hour.toFixed(2)}`,
      ago(n.last_seen_at),
    ]));
    fill("gpus", gpus.map((g) => [
      g.node_name,
      g.device_index,
      el("span", {}, g.model, " ", g.simulated ? badge("simulated", "simulated") : "", " ", sharingBadge(g)),
      `${gib(g.telemetry.memory_used_mb)} / ${gib(g.memory_mb)} GiB`,
      pct(g.telemetry.util),
      g.telemetry.temperature_c == null ? "—" : `${Math.round(g.telemetry.temperature_c)} °C`,
      holders(g, names),
    ]));
    fill("workloads", workloads.map((w) => [
      w.name,
      w.tenant,
      w.class,
      el("span", { class: `state-${w.state}` }, w.state),
      gpusAsked(w.resources),
      w.state === "pending" ? (w.pending_reason ?? "") : (w.message ?? (w.exit_code == null ? "" : `exit ${w.exit_code}`)),
      ago(w.submitted_at),
    ]));
    fill("tenants", tenants.map((t) => [
      t.tenant,
      el("span", { class: `standing-${t.standing}` }, t.standing.replace("_", " ")),
      `${t.running_gpus} / ${t.guaranteed_gpus}`,
      t.borrowing_gpus,
      `${t.pending_workloads} workloads`,
      t.top_pending_reason ?? "",
    ]));
    fill("decisions", decisions.map((d) => [
      ago(d.decided_at),
      d.workload_name,
      d.kind.replace("_", " "),
      d.node_name ?? "",
      d.reason,
      d.policy_name,
    ]));
    status.textContent = `Updated ${new Date().toLocaleTimeString()}`;
  } catch (err) {
    if (sessionStorage.getItem(TOKEN_KEY) !== token) return;
    if (err instanceof Unauthorized) {
      sessionStorage.removeItem(TOKEN_KEY);
      show(false);
      status.textContent = "Your session ended; sign in again.";
    } else {
      status.textContent = `Cannot reach the API: ${err.message}`;
    }
  }
}

document.getElementById("login-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const error = document.getElementById("login-error");
  error.textContent = "";
  try {
    const session = await api("/api/v1/auth/login", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({
        email: document.getElementById("email").value,
        password: document.getElementById("password").value,
      }),
    });
    sessionStorage.setItem(TOKEN_KEY, session.token);
    document.getElementById("password").value = "";
    await refresh();
  } catch (err) {
    error.textContent = err instanceof Unauthorized ? "Wrong email or password." : err.message;
  }
});

document.getElementById("logout").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  show(false);
});

refresh();
setInterval(refresh, REFRESH_MS);
