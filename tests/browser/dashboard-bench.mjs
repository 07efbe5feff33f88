// The dashboard's cost per open tab, measured in a real browser (tests/benches/dashboard.rs starts
// the control plane, registers the fleet and runs this): for "today's page" (the v0.1 page, its
// index.html, app.js and style.css as they were before the React app, served here with /api
// proxied to the control plane, so it makes exactly the requests it made) and for the new
// overview and fleet pages:
//   - bytes transferred per minute per tab (Chromium's encoded bytes, headers included, of every
//     request and of the live stream, from the DevTools protocol);
//   - time to first render (navigation start to the page showing the whole fleet: every GPU row
//     for the old page, the GPU count for the overview, every GPU tile for the fleet);
//   - the server's CPU per tab: the control plane's CPU time and that of the PostgreSQL backends
//     serving its database (from /proc), over the window, less the same window with no tab open,
//     divided by the tabs.
// Prints one JSON object per window (rows) and the medians as the last line (`RESULT {...}`).
//
// Environment: AIRTIME_URL, ADMIN_EMAIL, ADMIN_PASSWORD, OLD_WEB (a directory with the old
// index.html, app.js, style.css), CP_PID, DB_NAME, GPUS (GPUs registered), WEB_DIR, CHROMIUM,
// TABS (default 2), WINDOW_S (default 60), ROUNDS (default 3).
import { createRequire } from "node:module";
import { readFileSync, readdirSync } from "node:fs";
import http from "node:http";
import path from "node:path";

const env = (name, fallback) => {
  const v = process.env[name] ?? fallback;
  if (v === undefined) throw new Error(`${name} is not set`);
  return v;
};
const require = createRequire(path.join(env("WEB_DIR"), "package.json"));
const { chromium } = require("playwright-core");

const URL = env("AIRTIME_URL");
const OLD_WEB = env("OLD_WEB");
const CP_PID = Number(env("CP_PID"));
const DB_NAME = env("DB_NAME");
const GPUS = Number(env("GPUS"));
const TABS = Number(env("TABS", "2"));
const WINDOW_S = Number(env("WINDOW_S", "60"));
const ROUNDS = Number(env("ROUNDS", "3"));
const TICK = 100; // USER_HZ on Linux: /proc times are in 1/100 s
const log = (...a) => console.error("[bench]", ...a);

// --- CPU from /proc -------------------------------------------------------------------------
function cpuOf(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) / TICK; // utime + stime, seconds
  } catch {
    return null; // gone
  }
}
/**
 * PostgreSQL backends serving the database: their title is "postgres: [<cluster>: ]<user> <db>
 * <host> <activity>" (Debian names the cluster, "15/main:").
 */
function backends() {
  const pids = [];
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const cmd = readFileSync(`/proc/${d}/cmdline`, "utf8");
      const title = cmd.replace(/\0+$/, "").split(" ");
      if (title[0] === "postgres:" && title.slice(1, 4).includes(DB_NAME)) pids.push(Number(d));
    } catch {
      // gone
    }
  }
  return pids;
}
/** CPU seconds so far of the control plane and of each backend (by pid). */
function cpuNow() {
  const db = new Map();
  for (const pid of backends()) db.set(pid, cpuOf(pid) ?? 0);
  return { cp: cpuOf(CP_PID), db };
}
function cpuSince(before) {
  const after = cpuNow();
  let db = 0;
  for (const [pid, s] of after.db) db += s - (before.db.get(pid) ?? 0); // a backend opened meanwhile: all of it
  return { cp: after.cp - before.cp, db };
}

// --- The old page: its three files, /api proxied -------------------------------------------
const OLD_FILES = { "/": "index.html", "/index.html": "index.html", "/app.js": "app.js", "/style.css": "style.css" };
const TYPES = { html: "text/html; charset=utf-8", js: "text/javascript; charset=utf-8", css: "text/css; charset=utf-8" };
const target = new globalThis.URL(URL);
const oldServer = http.createServer((req, res) => {
  if (req.url.startsWith("/api/")) {
    const upstream = http.request(
      { host: target.hostname, port: target.port, path: req.url, method: req.method, headers: { ...req.headers, host: target.host } },
      (up) => {
        res.writeHead(up.statusCode, up.headers);
        up.pipe(res);
      },
    );
    upstream.on("error", () => res.destroy());
    req.pipe(upstream);
    return;
  }
  const file = OLD_FILES[req.url.split("?")[0]];
  if (!file) {
    res.writeHead(404).end();
    return;
  }
  res.writeHead(200, { "Content-Type": TYPES[file.split(".").pop()] });
  res.end(readFileSync(path.join(OLD_WEB, file)));
});
await new Promise((r) => oldServer.listen(0, "127.0.0.1", r));
const OLD_URL = `http://127.0.0.1:${oldServer.address().port}/`;

// --- The browser --------------------------------------------------------------------------
const login = await fetch(`${URL}/api/v1/auth/login`, {
  method: "POST",
  headers: { "Content-Type": "application/json" },
  body: JSON.stringify({ email: env("ADMIN_EMAIL"), password: env("ADMIN_PASSWORD") }),
});
if (!login.ok) throw new Error(`login: HTTP ${login.status}`);
const { token } = await login.json();

const browser = await chromium.launch({
  executablePath: env("CHROMIUM", "/usr/bin/chromium"),
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});

const SCENARIOS = {
  // v0.1: every node and every GPU (twice: /nodes carries them, /gpus again), every 3 s.
  old: OLD_URL,
  overview: `${URL}/`,
  fleet: `${URL}/fleet`,
};

/**
 * Runs in the page on every frame until the page shows the whole fleet; then answers the time
 * since navigation started. (A function, not a string: the dashboard's CSP forbids eval.)
 */
function rendered({ scenario, gpus }) {
  const done =
    scenario === "old"
      ? document.querySelectorAll("#gpus tbody tr").length >= gpus
      : scenario === "overview"
        ? document.querySelector("[data-testid=stat-gpus] dd")?.textContent === String(gpus)
        : document.querySelectorAll("[data-gpu]").length >= gpus;
  return done ? performance.now() : false;
}

/** Opens a signed-in tab on `url`; counts what it transfers from now on. */
async function openTab(scenario) {
  const url = SCENARIOS[scenario];
  const context = await browser.newContext({ viewport: { width: 1440, height: 1000 } });
  // Both pages keep the session in sessionStorage under the same key: the tab starts signed in.
  await context.addInitScript((t) => sessionStorage.setItem("airtime.session", t), token);
  const page = await context.newPage();
  page.setDefaultTimeout(180_000);
  const cdp = await context.newCDPSession(page);
  await cdp.send("Network.enable");
  const streamed = new Map(); // requestId -> bytes seen so far (a stream never finishes)
  const tab = { page, context, bytes: 0, requests: 0, streamed };
  cdp.on("Network.dataReceived", (e) => streamed.set(e.requestId, (streamed.get(e.requestId) ?? 0) + e.encodedDataLength));
  cdp.on("Network.loadingFinished", (e) => {
    // The request's whole transfer, headers included; what dataReceived counted of it is dropped.
    tab.bytes += e.encodedDataLength;
    tab.requests += 1;
    streamed.delete(e.requestId);
  });
  cdp.on("Network.loadingFailed", (e) => streamed.delete(e.requestId));
  await page.goto(url, { waitUntil: "commit" });
  // performance.now(): milliseconds since this tab's navigation started, read on the first frame
  // that shows the whole fleet.
  const handle = await page.waitForFunction(rendered, { scenario, gpus: GPUS }, { polling: "raf" });
  tab.firstRenderMs = await handle.jsonValue();
  return tab;
}

const rows = [];
async function window_(scenario) {
  const tabs = [];
  if (scenario !== "idle") {
    for (let i = 0; i < TABS; i++) tabs.push(await openTab(scenario));
    // Settle: the first render's burst is time to first render, not the steady cost.
    await new Promise((r) => setTimeout(r, 5000));
  }
  for (const t of tabs) {
    t.bytes = 0;
    t.requests = 0;
    t.streamed.clear();
  }
  const cpu = cpuNow();
  const started = Date.now();
  await new Promise((r) => setTimeout(r, WINDOW_S * 1000));
  const used = cpuSince(cpu);
  const minutes = (Date.now() - started) / 60_000;
  const row = {
    scenario,
    tabs: tabs.length,
    first_render_ms: tabs.map((t) => Math.round(t.firstRenderMs)),
    bytes_per_min_per_tab: tabs.map((t) => Math.round((t.bytes + [...t.streamed.values()].reduce((a, b) => a + b, 0)) / minutes)),
    requests_per_min_per_tab: tabs.map((t) => Math.round((t.requests / minutes) * 10) / 10),
    cp_cpu_s_per_min: used.cp / minutes,
    db_cpu_s_per_min: used.db / minutes,
  };
  for (const t of tabs) await t.context.close();
  console.log(JSON.stringify(row));
  rows.push(row);
  // Let requests still in flight drain before the next window.
  await new Promise((r) => setTimeout(r, 3000));
}
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

try {
  for (let round = 1; round <= ROUNDS; round++) {
    log(`round ${round} of ${ROUNDS}: ${TABS} tab(s), ${WINDOW_S} s windows`);
    for (const scenario of ["idle", "old", "overview", "fleet"]) await window_(scenario);
  }
  const by = (scenario) => rows.filter((r) => r.scenario === scenario);
  const idleCp = median(by("idle").map((r) => r.cp_cpu_s_per_min));
  const idleDb = median(by("idle").map((r) => r.db_cpu_s_per_min));
  const result = { gpus: GPUS, tabs: TABS, window_s: WINDOW_S, rounds: ROUNDS, idle_cp_cpu_s_per_min: idleCp, idle_db_cpu_s_per_min: idleDb };
  for (const scenario of ["old", "overview", "fleet"]) {
    const rs = by(scenario);
    result[scenario] = {
      bytes_per_min_per_tab: median(rs.flatMap((r) => r.bytes_per_min_per_tab)),
      requests_per_min_per_tab: median(rs.flatMap((r) => r.requests_per_min_per_tab)),
      first_render_ms: median(rs.flatMap((r) => r.first_render_ms)),
      // CPU seconds per minute (a share of one core × 60) each tab adds, over the idle control plane.
      cp_cpu_s_per_min_per_tab: median(rs.map((r) => (r.cp_cpu_s_per_min - idleCp) / r.tabs)),
      db_cpu_s_per_min_per_tab: median(rs.map((r) => (r.db_cpu_s_per_min - idleDb) / r.tabs)),
    };
  }
  console.log(`RESULT ${JSON.stringify(result)}`);
} finally {
  await browser.close();
  oldServer.close();
}
