// The dashboard's browser story: Playwright (playwright-core) drives Debian's Chromium (headless,
// no sandbox, no GPU) against a real control plane, agent and PostgreSQL that
// tests/tests/dashboard_browser.rs started. Every page is checked with axe-core (no serious or
// critical violation) and saved as a screenshot in light and dark.
//
// Environment: AIRTIME_URL, ADMIN_EMAIL, ADMIN_PASSWORD, MEMBER_EMAIL, MEMBER_PASSWORD,
// HIDDEN_WORKLOAD (a workload of another tenant the member must never see), HOG_WORKLOAD (holds
// every GPU until the story cancels it), SERVICE (an inference service of the admin's tenant that
// scaled once), POLICY_WASM (a module to upload), SCREENSHOT_DIR, WEB_DIR
// (where web/node_modules is), CHROMIUM (default /usr/bin/chromium).
import { createRequire } from "node:module";
import { mkdirSync, readFileSync } from "node:fs";
import path from "node:path";

const env = (name, fallback) => {
  const v = process.env[name] ?? fallback;
  if (v === undefined) throw new Error(`${name} is not set`);
  return v;
};
const WEB_DIR = env("WEB_DIR");
const require = createRequire(path.join(WEB_DIR, "package.json"));
const { chromium } = require("playwright-core");
const AXE = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");

const URL = env("AIRTIME_URL");
const SHOTS = env("SCREENSHOT_DIR");
const SHOWN = 30_000;
mkdirSync(SHOTS, { recursive: true });

const log = (...a) => console.log("[dashboard]", ...a);
const problems = [];

const browser = await chromium.launch({
  executablePath: env("CHROMIUM", "/usr/bin/chromium"),
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
const context = await browser.newContext({ viewport: { width: 1440, height: 1000 }, colorScheme: "light" });
const page = await context.newPage();
page.setDefaultTimeout(SHOWN);
page.on("console", (m) => {
  const text = m.text();
  if (/Content Security Policy|Refused to (execute|load|apply)/i.test(text)) problems.push(`CSP: ${text}`);
  if (m.type() === "error" && !/Failed to load resource/.test(text)) log("console error:", text);
});
page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));

async function axe(name) {
  await page.evaluate(AXE);
  const result = await page.evaluate(async () => {
    // eslint-disable-next-line no-undef
    const r = await window.axe.run(document, { resultTypes: ["violations"] });
    return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 3).map((n) => n.target.join(" ")) }));
  });
  const bad = result.filter((v) => v.impact === "serious" || v.impact === "critical");
  const minor = result.filter((v) => !bad.includes(v));
  if (minor.length) log(`axe ${name}: minor: ${minor.map((v) => `${v.id} (${v.impact})`).join(", ")}`);
  if (bad.length) problems.push(`axe ${name}: ${JSON.stringify(bad)}`);
}

async function theme() {
  return page.evaluate(() => document.documentElement.dataset.theme);
}
async function setTheme(want) {
  if ((await theme()) !== want) await page.getByTestId("theme-toggle").click();
  await page.waitForFunction((t) => document.documentElement.dataset.theme === t, want);
}

/** Both themes: axe-checked and saved as target/screenshots/<name>-<theme>.png. */
async function capture(name) {
  for (const t of ["light", "dark"]) {
    await setTheme(t);
    await page.waitForTimeout(250); // charts redraw in the new theme
    await axe(`${name} (${t})`);
    // A full-page capture of a page scrolled down draws the sticky header where the viewport
    // was, over the middle of the page: capture from the top.
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.screenshot({ path: path.join(SHOTS, `${name}-${t}.png`), fullPage: true });
  }
  await setTheme("light");
  log(`checked and saved ${name}`);
}

async function nav(label, heading) {
  await page.locator(`nav[aria-label=Main] a[data-nav="${label}"]`).click();
  await page.getByRole("heading", { level: 1, name: heading ?? label }).waitFor();
}

const rowOf = (table, name) => page.locator(`[data-testid=${table}] tbody tr`, { has: page.locator(`td[data-col=name] a`, { hasText: new RegExp(`^${name}$`) }) });

async function signIn(email, password) {
  await page.fill("#email", email);
  await page.fill("#password", password);
  await page.click("#login-form button[type=submit]");
  await page.locator("nav[aria-label=Main]").waitFor();
}

try {
  // Signed out: the sign-in form, and a wrong password is refused with a message.
  const answer = await page.goto(URL);
  const csp = answer.headers()["content-security-policy"] ?? "";
  if (!csp.includes("default-src 'self'") || !csp.includes("script-src 'self'")) problems.push(`CSP header: ${csp}`);
  await page.locator("#login-form").waitFor();
  await capture("sign-in");
  await page.fill("#email", env("ADMIN_EMAIL"));
  await page.fill("#password", "not the admin password");
  await page.click("#login-form button[type=submit]");
  await page.locator("#login-error", { hasText: "Wrong email or password." }).waitFor();

  await signIn(env("ADMIN_EMAIL"), env("ADMIN_PASSWORD"));
  await page.evaluate(() => {
    window.__sameDocument = true; // gone if anything reloads the page
  });

  // Overview: the fleet's two simulated GPUs and what they cost.
  await page.locator("[data-testid=stat-gpus] dd", { hasText: /^2$/ }).waitFor();
  await page.locator("[data-testid=stat-cost] dd", { hasText: "$8.00 / h" }).waitFor();
  await capture("overview");

  // Fleet: a tile per GPU, grouped by node, the node marked as simulated.
  await nav("Fleet");
  await page.locator("[data-node=sim-dash-1] .badge.simulated").waitFor();
  await page.locator("[data-node=sim-dash-1] [data-gpu]").nth(1).waitFor();
  const tiles = await page.locator("[data-gpu]").count();
  if (tiles !== 2) problems.push(`fleet shows ${tiles} GPU tiles, not 2`);
  await page.locator("[data-gpu='sim-dash-1/0']").hover();
  await page.locator("[data-gpu='sim-dash-1/0'] .tip", { hasText: "GiB" }).waitFor({ state: "visible" });
  await capture("fleet");

  // A GPU: click its tile for its telemetry over time, then back to the fleet.
  await page.locator("[data-gpu='sim-dash-1/0'] .tile-link").click();
  await page.getByRole("heading", { name: "sim-dash-1 · GPU 0" }).waitFor();
  await page.locator("[data-testid=gpu-charts] [data-section=gpu-util] canvas").waitFor();
  await page.locator("[data-testid=gpu-charts] [data-section=gpu-power] canvas").waitFor();
  await capture("gpu");
  await page.getByRole("link", { name: "← Fleet" }).click();
  await page.locator("[data-gpu='sim-dash-1/1']").waitFor();

  // A node: click its name for its state, its GPUs (read for that node alone) and its CPU and
  // memory over time.
  const fleetReads = [];
  const onRequest = (r) => {
    if (/\/api\/v1\/(gpus|nodes)(\?|$)/.test(new globalThis.URL(r.url()).pathname)) fleetReads.push(r.url());
  };
  page.on("request", onRequest);
  await page.locator("[data-node-link=sim-dash-1]").click();
  await page.getByRole("heading", { level: 1, name: "sim-dash-1" }).waitFor();
  await page.locator("[data-testid=node-tiles] [data-gpu]").nth(1).waitFor();
  const nodeTiles = await page.locator("[data-testid=node-tiles] [data-gpu]").count();
  if (nodeTiles !== 2) problems.push(`the node page shows ${nodeTiles} GPU tiles, not 2`);
  await page.locator("[data-testid=node-charts] [data-section=node-cpu] canvas").waitFor();
  await page.locator("[data-testid=node-charts] [data-section=node-memory] canvas").waitFor();
  await page.locator("[data-testid=node-cpu] dd").first().waitFor();
  await capture("node");
  page.off("request", onRequest);
  if (fleetReads.length) problems.push(`the node page read the whole fleet: ${fleetReads.join(", ")}`);

  // Maintenance: drain the node with a reason; the page shows the hold, who set it and what is
  // left on the node (the hog, not checkpointable, is left to finish); then uncordon it.
  await page.fill("[data-testid=node-hold] input[name=hold-reason]", "browser drain drill");
  await page.click("[data-testid=node-hold] button[data-action=drain]");
  await page.locator("[data-testid=node-maintenance][data-mode=draining]").waitFor();
  await page.locator("[data-testid=node-maintenance]", { hasText: "browser drain drill" }).waitFor();
  await page.locator("[data-testid=node-work]", { hasText: "dash-gpu-hog" }).waitFor();
  await capture("node-draining");
  await page.click("[data-testid=node-hold] button[data-action=uncordon]");
  await page.getByText("No hold: the node takes new work.").waitFor();
  await page.getByRole("link", { name: "← Fleet" }).click();
  await page.locator("[data-gpu='sim-dash-1/1']").waitFor();

  // Workloads: submit one; it waits (the hog holds both GPUs) with its reason, shown live.
  await nav("Workloads");
  await page.getByTestId("submit-toggle").click();
  await page.fill("#submit-form input[name=name]", "browser-eval");
  await page.fill("#submit-form input[name=gpu_count]", "1");
  await page.fill("#submit-form input[name=command]", "echo hello from the browser; sleep 120");
  await page.click("#submit-form button[type=submit]");
  await page.locator("#submit-form [role=status]", { hasText: "browser-eval" }).waitFor();
  await page.getByRole("tab", { name: /Queue/ }).click();
  const queued = rowOf("workloads", "browser-eval");
  await queued.locator("[data-state=pending]").waitFor();
  await page.waitForFunction(
    () => {
      const row = [...document.querySelectorAll("[data-testid=workloads] tbody tr")].find((r) => r.textContent.includes("browser-eval"));
      const reason = row?.querySelector("td[data-col=reason]")?.textContent ?? "";
      return reason && reason !== "waiting for the next scheduling cycle";
    },
    null,
    { timeout: SHOWN },
  );
  log("pending because:", await queued.locator("td[data-col=reason]").textContent());
  await capture("workloads-queue");

  // Cancel the hog from the Running tab: the waiting one is placed and runs, without a reload.
  await page.getByRole("tab", { name: /Running/ }).click();
  const hog = rowOf("workloads", env("HOG_WORKLOAD"));
  await hog.locator("[data-state=running]").waitFor();
  await hog.getByRole("button", { name: `Cancel ${env("HOG_WORKLOAD")}` }).click();
  await rowOf("workloads", "browser-eval").locator("[data-state=running]").waitFor({ timeout: 60_000 });
  if (!(await page.evaluate(() => window.__sameDocument === true))) problems.push("the page reloaded while watching the workload");
  await capture("workloads-running");

  // Its detail: the state history from pending to running, its decisions and its output.
  await rowOf("workloads", "browser-eval").locator("td[data-col=name] a").click();
  await page.getByRole("heading", { level: 1, name: "browser-eval" }).waitFor();
  await page.locator("[data-testid=timeline] [data-state=pending]").first().waitFor();
  await page.locator("[data-testid=timeline] [data-state=running]").first().waitFor();
  await page.locator("[data-testid=logs]", { hasText: "hello from the browser" }).waitFor();
  await capture("workload-detail");

  // Priorities: change the burst reserve, see the preview when the API has one, save.
  await nav("Priorities");
  const reserve = page.locator("input[name=burst_reserve_gpus]");
  const before = Number(await reserve.inputValue());
  await reserve.fill(String(before + 1));
  await page.locator("[data-testid=priorities-status]", { hasText: "Unsaved changes." }).waitFor();
  await page.waitForTimeout(1000);
  const preview = await page.locator("[data-section=preview]").count();
  log(preview ? "priority preview shown" : "no priority preview endpoint: preview hidden");
  await capture("priorities");
  await page.getByTestId("save-priorities").click();
  await page.locator("[data-testid=priorities-status]", { hasText: "Saved" }).waitFor();
  const saved = await page.evaluate(async () => {
    const r = await fetch("/api/v1/settings/priorities", { headers: { Authorization: `Bearer ${sessionStorage.getItem("airtime.session")}` } });
    return (await r.json()).burst_reserve_gpus;
  });
  if (saved !== before + 1) problems.push(`burst_reserve_gpus saved as ${saved}, not ${before + 1}`);

  // Policies: drop a .wasm on the drop zone, upload, dry-run, activate.
  await nav("Policies");
  await page.fill("input[name=policy-name]", "browser-policy");
  const wasm = [...readFileSync(env("POLICY_WASM"))];
  await page.evaluate((bytes) => {
    const file = new File([new Uint8Array(bytes)], "browser-policy.wasm", { type: "application/wasm" });
    const data = new DataTransfer();
    data.items.add(file);
    const zone = document.querySelector("[data-testid=dropzone]");
    zone.dispatchEvent(new DragEvent("dragover", { dataTransfer: data, bubbles: true, cancelable: true }));
    zone.dispatchEvent(new DragEvent("drop", { dataTransfer: data, bubbles: true, cancelable: true }));
  }, wasm);
  await page.locator("[data-testid=dropzone]", { hasText: "browser-policy.wasm" }).waitFor();
  await page.getByRole("button", { name: "Upload" }).click();
  const policyRow = page.locator("[data-testid=policies] tr[data-policy=browser-policy]");
  await policyRow.waitFor({ timeout: 60_000 });
  await page.locator("[data-section=policy-detail]").waitFor();
  await page.getByRole("button", { name: "Dry-run" }).click();
  await page.locator("[data-testid=dry-run]", { hasText: "Nothing was applied" }).waitFor();
  await capture("policies");

  // Shadow it beside the active policy: each cycle's comparison opens to the decisions that differed.
  await page.getByRole("button", { name: "Shadow", exact: true }).click();
  const firstShadow = page.locator("[data-testid=shadow-results] li button").first();
  await firstShadow.waitFor({ timeout: 60_000 });
  await firstShadow.click();
  await page.locator("[data-testid=shadow-diff]", { hasText: "Nothing the shadow decided was applied" }).waitFor();
  await capture("policy-shadow");
  await page.getByRole("button", { name: "Stop shadowing" }).click();
  await page.getByRole("button", { name: "Shadow", exact: true }).waitFor();

  // What if it had run the recorded history: both score sets side by side.
  await page.getByRole("button", { name: /^What if/ }).click();
  await page.locator("[data-testid=what-if-scores] tr[data-score=busy_share]").waitFor({ timeout: 120_000 });
  const scoreCells = await page.locator("[data-testid=what-if-scores] tr[data-score=busy_share] td").allTextContents();
  if (scoreCells.length !== 3 || !scoreCells[0].endsWith("%") || !scoreCells[1].endsWith("%")) problems.push(`what-if scores: ${scoreCells}`);
  await capture("policy-what-if");
  await page.getByRole("button", { name: "Activate" }).click();
  await policyRow.locator("td[data-col=active]", { hasText: "v1" }).waitFor();

  // Services: the one the story created, then its replicas against demand and its scale decisions.
  await nav("Services");
  const service = env("SERVICE");
  const serviceRow = page.locator("[data-testid=services] tbody tr", { hasText: service });
  await serviceRow.waitFor();
  await capture("services");
  await serviceRow.getByRole("link", { name: service }).click();
  await page.getByRole("heading", { level: 1, name: service }).waitFor();
  await page.locator("[data-testid=scale-events] tbody tr td[data-col=reason]").first().waitFor();
  await page.locator("[data-section=service-replicas] canvas").waitFor();
  await page.locator("[data-testid=service-wanted] dd", { hasText: /^3$/ }).first().waitFor();
  await capture("service");

  // Tokens: create one (shown once), see it listed, revoke it.
  await nav("Tokens", "API tokens");
  await page.fill("input[name=token-name]", "browser-token");
  await page.locator("[data-testid=create-token] button[type=submit]").click();
  await page.locator("[data-testid=new-token]", { hasText: "at_" }).waitFor();
  const tokenRow = page.locator("[data-testid=tokens] tbody tr", { hasText: "browser-token" });
  await tokenRow.waitFor();
  await capture("tokens");
  await tokenRow.getByRole("button", { name: "Revoke browser-token" }).click();
  await tokenRow.waitFor({ state: "detached" });

  // Users: every user for a platform admin, the other tenant's member among them.
  await nav("Users");
  await page.locator("[data-testid=users] tbody tr", { hasText: env("MEMBER_EMAIL") }).waitFor();
  await capture("users");

  // Tenants: a quota changed in the form, previewed first (what the next cycle would decide
  // differently), then saved.
  await nav("Tenants", "Tenants and quotas");
  await page.selectOption("[data-testid=edit-quota] select[name=tenant]", { label: "team-b" });
  await page.fill("[data-testid=edit-quota] input[name=guaranteed_gpus]", "1");
  await page.locator("[data-testid=quota-preview] [data-testid=preview-summary]").waitFor();
  await capture("tenants-quota-preview");
  await page.click("[data-testid=edit-quota] button[type=submit]");
  await page.locator("[data-testid=edit-quota] [role=status]", { hasText: "team-b is guaranteed 1 GPUs" }).waitFor();

  for (const [label, heading] of [["Tenants", "Tenants and quotas"], ["Decisions"], ["Audit log"]]) {
    await nav(label, heading);
    await page.waitForTimeout(500);
    await capture(label.toLowerCase().replace(/ /g, "-"));
  }
  await page.locator("[data-testid=audit] tbody tr", { hasText: "policy" }).first().waitFor();

  // Sign out, then as a member of another tenant: none of the first tenant's work, in any tab.
  await page.click("#logout");
  await page.locator("#login-form").waitFor();
  if (await page.evaluate(() => sessionStorage.getItem("airtime.session"))) problems.push("the session outlived signing out");
  await signIn(env("MEMBER_EMAIL"), env("MEMBER_PASSWORD"));
  const navs = await page.locator("nav[aria-label=Main] a").allTextContents();
  if (navs.includes("Audit log")) problems.push("a tenant member sees the audit log in the navigation");
  if (navs.includes("Users")) problems.push("a tenant member sees the users page in the navigation");
  if (!navs.includes("Tokens")) problems.push("a tenant member cannot reach their own tokens");
  await nav("Services");
  await page.waitForTimeout(1000);
  if ((await page.locator("main").textContent()).includes(env("SERVICE"))) problems.push("a tenant member sees another tenant's service");
  await nav("Tokens", "API tokens");
  await page.locator("[data-testid=tokens]").waitFor();
  if ((await page.locator("[data-testid=tokens]").textContent()).includes("browser-token")) problems.push("a tenant member sees the admin's tokens");
  await capture("member-tokens");
  await nav("Workloads");
  await page.getByTestId("submit-toggle").waitFor(); // members may submit
  const hidden = env("HIDDEN_WORKLOAD");
  for (const tab of ["Queue", "Running", "Finished"]) {
    await page.getByRole("tab", { name: new RegExp(tab) }).click();
    await page.waitForTimeout(2500); // a refresh or more
    const text = await page.locator("#workloads-panel").textContent();
    for (const name of [hidden, "browser-eval", env("HOG_WORKLOAD")]) {
      if (text.includes(name)) problems.push(`a tenant member sees another tenant's workload ${name} in ${tab}`);
    }
  }
  await capture("member-workloads");
  await nav("Priorities");
  if (await page.getByTestId("save-priorities").count()) problems.push("a tenant member can save the priority settings");
} catch (err) {
  problems.push(`story failed: ${err.stack ?? err}`);
  await page.screenshot({ path: path.join(SHOTS, "failure.png"), fullPage: true }).catch(() => {});
} finally {
  await browser.close();
}

if (problems.length) {
  console.error(`[dashboard] ${problems.length} problem(s):\n- ${problems.join("\n- ")}`);
  process.exit(1);
}
log("all good");
