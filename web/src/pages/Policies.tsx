import { useRef, useState, type DragEvent, type FormEvent } from "react";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import type { PageProps } from "../App";
import { api, unwrap } from "../api/client";
import type { Policy, ShadowResult } from "../api/types";
import { Badge, ErrorNote, Loading, PageHeader, Section } from "../components/ui";
import { ago, gpuHours, money, pct, time, words } from "../lib/format";
import { scoreRows, shadowDiffRows, type ScoreRow } from "../lib/compare";
import { Link } from "../lib/router";
import { usePolicies } from "../lib/queries";

interface DryRun {
  policy?: string;
  elapsed_ms?: number;
  decisions?: Record<string, unknown>[];
  refused?: Record<string, unknown>[];
  logs?: { level: string; message: string }[];
  error?: string | null;
}

export function Policies({ can }: PageProps) {
  const policies = usePolicies();
  const [selected, setSelected] = useState<string | null>(null);
  const list = policies.data ?? [];
  const current = list.find((p) => p.id === selected) ?? null;
  return (
    <>
      <PageHeader title="Policies" />
      {can.managePolicies && <Upload onUploaded={(p) => setSelected(p.id)} />}
      <Section title="Policies" id="policies">
        <ErrorNote error={policies.error} />
        {policies.isPending && <Loading what="policies" />}
        <div className="table-scroll" tabIndex={0} role="region" aria-label="All policies">
          <table data-testid="policies">
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Scope</th>
                <th scope="col">Active</th>
                <th scope="col">Shadow</th>
                <th scope="col">Versions</th>
                <th scope="col">Failures</th>
                <th scope="col">
                  <span className="sr-only">Open</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {list.map((p) => (
                <tr key={p.id} data-policy={p.name} className={p.id === selected ? "selected" : undefined}>
                  <td>
                    {p.name} {p.builtin && <Badge>built in</Badge>} {p.suspended_reason && <Badge kind="bad">suspended</Badge>}
                  </td>
                  <td>{p.tenant ?? "platform"}</td>
                  <td data-col="active">{p.active_version == null ? "—" : `v${p.active_version}`}</td>
                  <td>{p.shadow_version == null ? "—" : `v${p.shadow_version}`}</td>
                  <td>{p.versions.length}</td>
                  <td>{p.consecutive_failures}</td>
                  <td>
                    <button type="button" className="small" onClick={() => setSelected(p.id)} aria-label={`Open ${p.name}`}>
                      Open
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </Section>
      {current && <PolicyDetail key={current.id} policy={current} can={can} />}
    </>
  );
}

function Upload({ onUploaded }: { onUploaded: (p: Policy) => void }) {
  const client = useQueryClient();
  const [name, setName] = useState("");
  const [file, setFile] = useState<File | null>(null);
  const [over, setOver] = useState(false);
  const input = useRef<HTMLInputElement>(null);
  const upload = useMutation({
    mutationFn: async () => {
      if (!file) throw new Error("Choose a .wasm module first.");
      const bytes = new Uint8Array(await file.arrayBuffer());
      // The document declares the module as bytes (an array of integers); they go as binary.
      return unwrap(
        api.POST("/api/v1/policies", {
          params: { query: { name: name || file.name.replace(/\.wasm$/, "") } },
          headers: { "Content-Type": "application/wasm" },
          body: Array.from(bytes),
          bodySerializer: (b) => Uint8Array.from(b),
        }),
      );
    },
    onSuccess: (p) => {
      client.invalidateQueries({ queryKey: ["policies"] });
      setFile(null);
      onUploaded(p);
    },
  });
  const drop = (e: DragEvent) => {
    e.preventDefault();
    setOver(false);
    const f = e.dataTransfer.files[0];
    if (f) setFile(f);
  };
  const submit = (e: FormEvent) => {
    e.preventDefault();
    upload.mutate();
  };
  return (
    <Section title="Upload a policy" id="upload">
      <form className="upload" onSubmit={submit}>
        <label>
          Name
          <input name="policy-name" value={name} placeholder="my-policy" onChange={(e) => setName(e.target.value)} />
        </label>
        <div
          className={`dropzone ${over ? "over" : ""}`}
          data-testid="dropzone"
          onDragOver={(e) => {
            e.preventDefault();
            setOver(true);
          }}
          onDragLeave={() => setOver(false)}
          onDrop={drop}
        >
          <p>{file ? `${file.name} · ${(file.size / 1024).toFixed(0)} KiB` : "Drop a .wasm module here, or"}</p>
          <button type="button" onClick={() => input.current?.click()}>
            Choose a file
          </button>
          <input ref={input} className="sr-only" type="file" accept=".wasm,application/wasm" aria-label="Policy module (.wasm)" data-testid="wasm-input" onChange={(e) => setFile(e.target.files?.[0] ?? null)} />
        </div>
        <button type="submit" className="primary" disabled={!file || upload.isPending}>
          {upload.isPending ? "Compiling and trying it…" : "Upload"}
        </button>
        <ErrorNote error={upload.error} />
      </form>
    </Section>
  );
}

function PolicyDetail({ policy, can }: { policy: Policy; can: PageProps["can"] }) {
  const client = useQueryClient();
  const latest = policy.versions.reduce((m, v) => Math.max(m, v.version), 0);
  const [version, setVersion] = useState<number>(policy.active_version ?? latest);
  const [params, setParams] = useState(JSON.stringify(policy.active_params ?? {}, null, 0));
  const [paramsError, setParamsError] = useState("");
  const [dry, setDry] = useState<DryRun | null>(null);
  const [whatIfId, setWhatIfId] = useState<string | null>(null);
  const [shadowId, setShadowId] = useState<number | null>(null);
  const mayManage = can.managePolicies && (policy.tenant == null ? can.platformAdmin : true);
  const refresh = () => client.invalidateQueries({ queryKey: ["policies"] });
  const parsed = (): Record<string, unknown> | null => {
    try {
      const p: unknown = JSON.parse(params || "{}");
      if (typeof p !== "object" || p === null || Array.isArray(p)) throw new Error("not an object");
      setParamsError("");
      return p as Record<string, unknown>;
    } catch {
      setParamsError("Parameters must be a JSON object.");
      return null;
    }
  };
  const action = useMutation({
    mutationFn: async (what: "activate" | "dry-run" | "rollback" | "deactivate" | "shadow" | "unshadow" | "what-if") => {
      const path = { params: { path: { id: policy.id } } };
      const p = what === "activate" || what === "dry-run" || what === "shadow" || what === "what-if" ? parsed() : {};
      if (p === null) throw new Error("Parameters must be a JSON object.");
      switch (what) {
        case "activate":
          return unwrap(api.POST("/api/v1/policies/{id}/activate", { ...path, body: { version, params: p } }));
        case "dry-run":
          setDry(await unwrap(api.POST("/api/v1/policies/{id}/dry-run", { ...path, body: { version, params: p } })));
          return null;
        case "rollback":
          return unwrap(api.POST("/api/v1/policies/{id}/rollback", path));
        case "deactivate":
          return unwrap(api.POST("/api/v1/policies/{id}/deactivate", path));
        case "shadow":
          return unwrap(api.PUT("/api/v1/policies/{id}/shadow", { ...path, body: { version, params: p } }));
        case "unshadow":
          return unwrap(api.DELETE("/api/v1/policies/{id}/shadow", path));
        case "what-if": {
          const run = await unwrap(api.POST("/api/v1/policies/{id}/what-if", { ...path, body: { version, params: p, hours: 24 } }));
          setWhatIfId(run.id);
          return run;
        }
      }
    },
    onSettled: refresh,
  });
  const failures = useQuery({ queryKey: ["policy", policy.id, "failures"], queryFn: () => unwrap(api.GET("/api/v1/policies/{id}/failures", { params: { path: { id: policy.id } } })), refetchInterval: 10_000 });
  const logs = useQuery({ queryKey: ["policy", policy.id, "logs"], queryFn: () => unwrap(api.GET("/api/v1/policies/{id}/logs", { params: { path: { id: policy.id } } })), refetchInterval: 10_000 });
  const shadow = useQuery({
    queryKey: ["policy", policy.id, "shadow"],
    queryFn: () => unwrap(api.GET("/api/v1/policies/{id}/shadow-results", { params: { path: { id: policy.id } } })),
    refetchInterval: 10_000,
  });
  return (
    <Section title={`${policy.name}${policy.active_version != null ? ` · active v${policy.active_version}` : ""}`} id="policy-detail">
      <table className="compact" data-testid="versions">
        <caption className="sr-only">Versions</caption>
        <thead>
          <tr>
            <th scope="col">Version</th>
            <th scope="col">Uploaded</th>
            <th scope="col">Size</th>
            <th scope="col">SHA-256</th>
            <th scope="col">Params</th>
            <th scope="col">Status</th>
          </tr>
        </thead>
        <tbody>
          {[...policy.versions]
            .sort((a, b) => b.version - a.version)
            .map((v) => (
              <tr key={v.id}>
                <td>v{v.version}</td>
                <td>{time(v.uploaded_at)}</td>
                <td>{(v.size_bytes / 1024).toFixed(0)} KiB</td>
                <td>
                  <code>{v.sha256.slice(0, 12)}</code>
                </td>
                <td>
                  <code>{JSON.stringify(v.params)}</code>
                </td>
                <td>
                  {v.active && <Badge kind="good">active</Badge>} {v.shadow && <Badge>shadow</Badge>}
                </td>
              </tr>
            ))}
        </tbody>
      </table>
      {policy.suspended_reason && <p className="error">Suspended: {policy.suspended_reason}</p>}
      {mayManage && (
        <div className="form-grid" data-testid="policy-actions">
          <label>
            Version
            <select value={version} onChange={(e) => setVersion(Number(e.target.value))}>
              {policy.versions.map((v) => (
                <option key={v.id} value={v.version}>
                  v{v.version}
                </option>
              ))}
            </select>
          </label>
          <label className="wide">
            Parameters (JSON)
            <textarea rows={2} value={params} onChange={(e) => setParams(e.target.value)} aria-invalid={paramsError ? true : undefined} />
          </label>
          {paramsError && <p className="error wide">{paramsError}</p>}
          <div className="wide row">
            {can.dryRun && (
              <button type="button" onClick={() => action.mutate("dry-run")} disabled={action.isPending}>
                Dry-run
              </button>
            )}
            <button type="button" className="primary" onClick={() => action.mutate("activate")} disabled={action.isPending}>
              Activate
            </button>
            <button type="button" onClick={() => action.mutate("rollback")} disabled={action.isPending}>
              Roll back
            </button>
            {policy.active_version != null && (
              <button type="button" onClick={() => action.mutate("deactivate")} disabled={action.isPending}>
                Deactivate
              </button>
            )}
            {policy.shadow_version == null ? (
              <button type="button" onClick={() => action.mutate("shadow")} disabled={action.isPending}>
                Shadow
              </button>
            ) : (
              <button type="button" onClick={() => action.mutate("unshadow")} disabled={action.isPending}>
                Stop shadowing
              </button>
            )}
            <button type="button" onClick={() => action.mutate("what-if")} disabled={action.isPending}>
              What if (last 24 h)
            </button>
          </div>
          <ErrorNote error={action.error} />
        </div>
      )}
      {dry && <DryRunResult dry={dry} />}
      {whatIfId && <WhatIfRun id={whatIfId} />}
      {shadowId != null && (shadow.data ?? []).some((r) => r.id === shadowId) && <ShadowDiff result={(shadow.data ?? []).find((r) => r.id === shadowId)!} />}
      <div className="grid2">
        <div>
          <h3>Shadow results</h3>
          {(shadow.data ?? []).length === 0 ? (
            <p className="muted small">Not shadowed yet.</p>
          ) : (
            <ul className="plain small" data-testid="shadow-results">
              {(shadow.data ?? []).slice(0, 10).map((s) => (
                <li key={s.id}>
                  <button
                    type="button"
                    className="link"
                    aria-pressed={shadowId === s.id}
                    title="Show the decisions that differed"
                    onClick={() => setShadowId(shadowId === s.id ? null : s.id)}
                  >
                    {ago(s.at)}: v{s.version} agreed {s.agreed}, differed {s.differed} with {s.active_policy_name}
                  </button>
                  {s.error ? ` — ${s.error}` : ""}
                </li>
              ))}
            </ul>
          )}
          <h3>Failures</h3>
          {(failures.data ?? []).length === 0 ? (
            <p className="muted small">None.</p>
          ) : (
            <ul className="plain small">
              {(failures.data ?? []).slice(0, 10).map((f) => (
                <li key={f.id}>
                  {ago(f.at)} v{f.version} {f.kind}: {f.message}
                </li>
              ))}
            </ul>
          )}
        </div>
        <div>
          <h3>Logs</h3>
          <pre className="logs small" tabIndex={0} aria-label="Policy logs">
            {(logs.data ?? [])
              .slice(0, 50)
              .map((l) => `${time(l.at)} v${l.version} ${l.level}: ${l.message}`)
              .join("\n") || "No logs."}
          </pre>
          <h3>Limits</h3>
          <p className="small">
            <code>{JSON.stringify(policy.limits)}</code>
          </p>
        </div>
      </div>
    </Section>
  );
}

function describe(d: Record<string, unknown>): string {
  const parts = ["kind", "action", "workload_name", "workload", "workload_id", "node_name", "node", "reason"]
    .map((k) => d[k])
    .filter((v) => typeof v === "string" || typeof v === "number");
  return parts.length ? parts.join(" · ") : JSON.stringify(d);
}

function DryRunResult({ dry }: { dry: DryRun }) {
  return (
    <div className="dry-run" data-testid="dry-run" role="status">
      <h3>Dry run: {dry.policy}</h3>
      <p className="small">
        {dry.decisions?.length ?? 0} decisions, {dry.refused?.length ?? 0} refused, in {dry.elapsed_ms?.toFixed(1)} ms{dry.error ? ` — error: ${dry.error}` : ""}. Nothing was applied.
      </p>
      <ul className="plain small">
        {(dry.decisions ?? []).slice(0, 20).map((d, i) => (
          <li key={i}>{describe(d)}</li>
        ))}
        {(dry.refused ?? []).slice(0, 20).map((d, i) => (
          <li key={`r${i}`} className="error">
            refused: {describe(d)}
          </li>
        ))}
        {(dry.logs ?? []).map((l, i) => (
          <li key={`l${i}`} className="muted">
            {l.level}: {l.message}
          </li>
        ))}
      </ul>
    </div>
  );
}

function ShadowDiff({ result }: { result: ShadowResult }) {
  const rows = shadowDiffRows(result.diff);
  const decision = (d: { decision: string; reason: string } | null) =>
    d ? (
      <>
        <strong>{words(d.decision)}</strong>
        <br />
        <span className="muted">{d.reason}</span>
      </>
    ) : (
      <span className="muted">nothing</span>
    );
  return (
    <div className="dry-run" data-testid="shadow-diff">
      <h3>
        Shadow v{result.version} against {result.active_policy_name}, cycle {result.cycle_id} ({time(result.at)})
      </h3>
      <p className="small">
        Agreed on {result.agreed} decision{result.agreed === 1 ? "" : "s"}, differed on {result.differed}. Nothing the shadow decided was applied.
        {result.error ? ` Error: ${result.error}` : ""}
      </p>
      {rows.length > 0 && (
        <table className="compact">
          <caption className="sr-only">Decisions that differed</caption>
          <thead>
            <tr>
              <th scope="col">Workload</th>
              <th scope="col">Active policy</th>
              <th scope="col">Shadow v{result.version}</th>
            </tr>
          </thead>
          <tbody>
            {rows.map((r, i) => (
              <tr key={i}>
                <td>{r.workload_id ? <Link to={`/workloads/${r.workload_id}`}>{r.workload_name ?? r.workload_id.slice(0, 8)}</Link> : "—"}</td>
                <td>{decision(r.active)}</td>
                <td>{r.refused ? <span className="error">refused by the host: {r.refused}</span> : decision(r.shadow)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}

function scoreValue(r: ScoreRow, v: number): string {
  switch (r.kind) {
    case "share":
      return pct(v);
    case "hours":
      return gpuHours(v);
    case "usd":
      return money(v);
    case "index":
      return v.toFixed(3);
    default:
      return String(v);
  }
}

function WhatIfRun({ id }: { id: string }) {
  const run = useQuery({
    queryKey: ["what-if", id],
    queryFn: () => unwrap(api.GET("/api/v1/what-if/{id}", { params: { path: { id } } })),
    refetchInterval: (q) => (q.state.data && ["done", "failed", "succeeded"].includes(q.state.data.state) ? false : 1500),
  });
  const r = run.data;
  const result = r?.result as { active?: Record<string, unknown>; candidate?: Record<string, unknown>; workloads?: number } | null | undefined;
  const rows = scoreRows(result?.active, result?.candidate);
  return (
    <div className="dry-run" role="status" data-testid="what-if">
      <h3>What if, last {r?.hours ?? 24} h</h3>
      <ErrorNote error={run.error} />
      {r && (
        <p className="small">
          {r.state} · {pct(r.progress)}
          {typeof result?.workloads === "number" ? ` · ${result.workloads} workloads replayed` : ""}
          {r.error ? ` — ${r.error}` : ""}
        </p>
      )}
      {rows.length > 0 && (
        <table className="compact" data-testid="what-if-scores">
          <caption className="sr-only">The active policies' scores beside this version's</caption>
          <thead>
            <tr>
              <th scope="col">Score</th>
              <th scope="col">Active policies</th>
              <th scope="col">This version</th>
              <th scope="col">Better</th>
            </tr>
          </thead>
          <tbody>
            {rows.map((row) => {
              const [a, c] = [scoreValue(row, row.active), scoreValue(row, row.candidate)];
              // A difference too small to show is no difference to the reader.
              const verdict = a === c ? "same" : row.verdict;
              return (
                <tr key={row.key} data-score={row.key}>
                  <th scope="row">{row.label}</th>
                  <td>{a}</td>
                  <td>{c}</td>
                  <td>{verdict === "same" ? "same" : verdict === "candidate" ? <Badge kind="good">this version</Badge> : <Badge kind="bad">active</Badge>}</td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
    </div>
  );
}
