// Airtime's first page: nodes, GPUs and workloads, read from the REST API every few seconds.
"use strict";

const REFRESH_MS = 3000;

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child ?? "")));
  return node;
}

function badge(text, cls = "") {
  return el("span", { class: `badge ${cls}` }, text);
}

function ago(iso) {
  if (!iso) return "";
  const s = Math.round((Date.now() - new Date(iso).getTime()) / 1000);
  if (s < 60) return `${Math.max(s, 0)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  return `${Math.round(s / 3600)} h ago`;
}

function pct(x) {
  return x == null ? "—" : `${Math.round(x * 100)}%`;
}

function fill(tableId, rows, columns) {
  const body = document.querySelector(`#${tableId} tbody`);
  body.replaceChildren();
  if (rows.length === 0) {
    body.append(el("tr", {}, el("td", { colspan: columns, class: "empty" }, "none yet")));
    return;
  }
  for (const cells of rows) body.append(el("tr", {}, ...cells.map((c) => el("td", {}, c))));
}

async function getJson(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" } });
  if (!response.ok) {
    const body = await response.json().catch(() => ({}));
    throw new Error(body?.error?.message ?? `${path}: HTTP ${response.status}`);
  }
  return response.json();
}

async function refresh() {
  const status = document.getElementById("status");
  try {
    const [nodes, gpus, workloads] = await Promise.all([
      getJson("/api/v1/nodes"),
      getJson("/api/v1/gpus"),
      getJson("/api/v1/workloads?limit=50"),
    ]);
    const names = new Map(workloads.map((w) => [w.id, w.name]));
    fill("nodes", nodes.map((n) => [
      el("span", {}, n.name, " ", n.simulated ? badge("simulated GPUs", "simulated") : ""),
      el("span", { class: `state-${n.state}` }, n.state),
      `${(n.cpu_millis / 1000).toFixed(0)} cores · ${pct(n.telemetry.cpu_util)}`,
      `${Math.round((n.telemetry.memory_used_mb ?? 0) / 1024)} / ${Math.round(n.memory_mb / 1024)} GiB`,
      n.gpus.length,
      n.cost_per_hour == null ? "—" : `$${n.cost_per_hour.toFixed(2)}`,
      ago(n.last_seen_at),
    ]), 7);
    fill("gpus", gpus.map((g) => [
      g.node_name,
      g.device_index,
      el("span", {}, g.model, " ", g.simulated ? badge("simulated", "simulated") : ""),
      `${Math.round((g.telemetry.memory_used_mb ?? 0) / 1024)} / ${Math.round(g.memory_mb / 1024)} GiB`,
      pct(g.telemetry.util),
      g.telemetry.temperature_c == null ? "—" : `${Math.round(g.telemetry.temperature_c)} °C`,
      g.workload_id ? (names.get(g.workload_id) ?? g.workload_id.slice(0, 8)) : "free",
    ]), 7);
    fill("workloads", workloads.map((w) => [
      w.name,
      w.tenant,
      w.class,
      el("span", { class: `state-${w.state}` }, w.state),
      w.resources.gpu_count,
      w.state === "pending" ? (w.pending_reason ?? "") : (w.message ?? (w.exit_code == null ? "" : `exit ${w.exit_code}`)),
      ago(w.submitted_at),
    ]), 7);
    status.textContent = `Updated ${new Date().toLocaleTimeString()}`;
  } catch (err) {
    status.textContent = `Cannot reach the API: ${err.message}`;
  }
}

refresh();
setInterval(refresh, REFRESH_MS);
