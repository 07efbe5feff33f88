import { pollEvery } from "../lib/live";
import { useState, type FormEvent } from "react";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { createColumnHelper } from "@tanstack/react-table";
import type { PageProps } from "../App";
import { api, unwrap } from "../api/client";
import { ACTIVE_STATES, WORKLOAD_CLASSES, type GangMember, type SubmitWorkload, type Workload, type WorkloadClass } from "../api/types";
import { DataTable, type Column } from "../components/DataTable";
import { Badge, ErrorNote, Loading, PageHeader, Section, StateBadge, WordSelect } from "../components/ui";
import { ago, duration, gpusAcross, time, words } from "../lib/format";
import { LIVE_MS, useTenants, useWorkloads } from "../lib/queries";
import { Link, navigate } from "../lib/router";
import { DecisionsTable } from "./Decisions";

type Tab = "queue" | "running" | "finished";
const TABS: { id: Tab; label: string; states: string[] }[] = [
  { id: "queue", label: "Queue", states: ["pending"] },
  { id: "running", label: "Running", states: ["scheduled", "running", "preempting", "cancelling"] },
  { id: "finished", label: "Finished", states: ["succeeded", "failed", "cancelled"] },
];

function CancelButton({ w }: { w: Workload }) {
  const client = useQueryClient();
  const cancel = useMutation({
    mutationFn: () => unwrap(api.POST("/api/v1/workloads/{id}/cancel", { params: { path: { id: w.id } } })),
    onSettled: () => client.invalidateQueries({ queryKey: ["workloads"] }),
  });
  if (!ACTIVE_STATES.includes(w.state) || w.state === "cancelling") return null;
  return (
    <button
      type="button"
      className="small danger"
      aria-label={`Cancel ${w.name}`}
      disabled={cancel.isPending}
      onClick={(e) => {
        e.stopPropagation();
        cancel.mutate();
      }}
    >
      Cancel
    </button>
  );
}

/** A gang member's place in its gang, "1/3"; null for work on one node. */
function gangOf(w: Workload): string | null {
  return w.gang_id != null && w.gang_rank != null && w.gang_size != null ? `${w.gang_rank}/${w.gang_size}` : null;
}

const col = createColumnHelper<Workload>();
function columns(tab: Tab, canCancel: boolean) {
  const cs: Column<Workload>[] = [
    ...(tab === "queue"
      ? [col.accessor((w) => w.queue_position ?? null, { id: "position", header: "#", cell: (c) => c.getValue() ?? "" })]
      : []),
    col.accessor("name", {
      header: "Name",
      cell: (c) => {
        const gang = gangOf(c.row.original);
        return (
          <>
            <Link to={`/workloads/${c.row.original.id}`}>{c.getValue()}</Link>
            {gang && <span className="muted small" data-gang-rank={c.row.original.gang_rank}> gang {gang}</span>}
          </>
        );
      },
    }),
    col.accessor("tenant", { header: "Tenant" }),
    col.accessor("class", { header: "Class", cell: (c) => words(c.getValue()) }),
    col.accessor("state", { header: "State", cell: (c) => <StateBadge state={c.getValue()} /> }),
    col.accessor((w) => gpusAcross(w), { id: "gpus", header: "GPUs" }),
    col.accessor("priority", { header: "Priority" }),
    ...(tab === "queue"
      ? [
          col.accessor((w) => w.pending_reason ?? "", { id: "reason", header: "Why it waits" }),
          col.accessor((w) => w.shortfall ?? "", { id: "shortfall", header: "Short of" }),
          col.accessor("submitted_at", { header: "Waiting", cell: (c) => ago(c.getValue()) }),
        ]
      : tab === "running"
        ? [col.accessor("started_at", { header: "Started", cell: (c) => ago(c.getValue()) })]
        : [
            col.accessor((w) => w.message ?? (w.exit_code == null ? "" : `exit ${w.exit_code}`), { id: "result", header: "Result" }),
            col.accessor("finished_at", { header: "Finished", cell: (c) => ago(c.getValue()) }),
          ]),
  ];
  if (canCancel && tab !== "finished") cs.push(col.display({ id: "actions", header: "Actions", cell: (c) => <CancelButton w={c.row.original} /> }));
  return cs;
}

export function Workloads({ can }: PageProps) {
  const workloads = useWorkloads();
  const [tab, setTab] = useState<Tab>("queue");
  const all = workloads.data ?? [];
  const current = TABS.find((t) => t.id === tab)!;
  const rows = all.filter((w) => current.states.includes(w.state));
  if (tab === "queue") rows.sort((a, b) => (a.queue_position ?? 1e9) - (b.queue_position ?? 1e9) || a.submitted_at.localeCompare(b.submitted_at));
  return (
    <>
      <PageHeader title="Workloads" />
      {can.submit && <SubmitForm platformAdmin={can.platformAdmin} />}
      <Section title="Workloads" id="workloads">
        <div role="tablist" aria-label="Workloads by state" className="tabs">
          {TABS.map((t) => {
            const count = all.filter((w) => t.states.includes(w.state)).length;
            return (
              <button
                key={t.id}
                type="button"
                role="tab"
                id={`tab-${t.id}`}
                aria-selected={tab === t.id}
                aria-controls="workloads-panel"
                tabIndex={tab === t.id ? 0 : -1}
                onClick={() => setTab(t.id)}
                onKeyDown={(e) => {
                  const i = TABS.findIndex((x) => x.id === tab);
                  if (e.key === "ArrowRight") setTab(TABS[(i + 1) % TABS.length]!.id);
                  if (e.key === "ArrowLeft") setTab(TABS[(i + TABS.length - 1) % TABS.length]!.id);
                }}
              >
                {t.label} <span className="count">{count}</span>
              </button>
            );
          })}
        </div>
        <div id="workloads-panel" role="tabpanel" aria-labelledby={`tab-${tab}`}>
          <ErrorNote error={workloads.error} />
          {workloads.isPending ? (
            <Loading what="workloads" />
          ) : (
            <DataTable
              data={rows}
              columns={columns(tab, can.cancel)}
              label={`${current.label} workloads`}
              testId="workloads"
              rowKey={(w) => w.id}
              empty={tab === "queue" ? "Nothing waits." : "None."}
            />
          )}
        </div>
      </Section>
    </>
  );
}

function SubmitForm({ platformAdmin }: { platformAdmin: boolean }) {
  const client = useQueryClient();
  const tenants = useTenants();
  const [open, setOpen] = useState(false);
  const [name, setName] = useState("");
  const [klass, setKlass] = useState<WorkloadClass>("evaluation");
  const [priority, setPriority] = useState(10);
  const [gpuCount, setGpuCount] = useState(1);
  const [gpuMemoryGib, setGpuMemoryGib] = useState(0);
  const [command, setCommand] = useState("sleep 60");
  const [tenant, setTenant] = useState("");
  const submit = useMutation({
    mutationFn: (body: SubmitWorkload) => unwrap(api.POST("/api/v1/workloads", { body })),
    onSuccess: (w) => {
      setName("");
      client.invalidateQueries({ queryKey: ["workloads"] });
      setLast(w);
    },
  });
  const [last, setLast] = useState<Workload | null>(null);
  const onSubmit = (e: FormEvent) => {
    e.preventDefault();
    submit.mutate({
      name,
      class: klass,
      priority,
      resources: { gpu_count: gpuCount, ...(gpuMemoryGib > 0 ? { gpu_memory_mb: Math.round(gpuMemoryGib * 1024) } : {}) },
      command: ["sh", "-c", command],
      ...(tenant ? { tenant } : {}),
    });
  };
  return (
    <Section
      title="Submit a workload"
      id="submit"
      actions={
        <button type="button" aria-expanded={open} aria-controls="submit-form" onClick={() => setOpen(!open)} data-testid="submit-toggle">
          {open ? "Hide" : "New workload"}
        </button>
      }
    >
      {open && (
        <form id="submit-form" className="form-grid" onSubmit={onSubmit}>
          <label>
            Name
            <input name="name" required value={name} onChange={(e) => setName(e.target.value)} />
          </label>
          <label>
            Class
            <WordSelect name="class" value={klass} options={WORKLOAD_CLASSES} onChange={setKlass} />
          </label>
          <label>
            Priority
            <input name="priority" type="number" value={priority} onChange={(e) => setPriority(Number(e.target.value))} />
          </label>
          <label>
            GPUs
            <input name="gpu_count" type="number" min={0} value={gpuCount} onChange={(e) => setGpuCount(Number(e.target.value))} />
          </label>
          <label>
            GPU memory each (GiB, 0: any)
            <input name="gpu_memory" type="number" min={0} value={gpuMemoryGib} onChange={(e) => setGpuMemoryGib(Number(e.target.value))} />
          </label>
          {platformAdmin && (
            <label>
              Tenant
              <select name="tenant" value={tenant} onChange={(e) => setTenant(e.target.value)}>
                <option value="">default</option>
                {(tenants.data ?? []).map((t) => (
                  <option key={t.id} value={t.name}>
                    {t.name}
                  </option>
                ))}
              </select>
            </label>
          )}
          <label className="wide">
            Command (run by sh -c)
            <input name="command" required value={command} onChange={(e) => setCommand(e.target.value)} />
          </label>
          <div className="wide row">
            <button type="submit" className="primary" disabled={submit.isPending}>
              Submit
            </button>
            {last && (
              <span role="status">
                Submitted <Link to={`/workloads/${last.id}`}>{last.name}</Link>.
              </span>
            )}
          </div>
          <ErrorNote error={submit.error} />
        </form>
      )}
    </Section>
  );
}

export function WorkloadPage({ id, can }: PageProps & { id: string }) {
  const detail = useQuery({
    queryKey: ["workload", id],
    queryFn: () => unwrap(api.GET("/api/v1/workloads/{id}", { params: { path: { id } } })),
    refetchInterval: pollEvery(LIVE_MS),
  });
  const active = detail.data ? ACTIVE_STATES.includes(detail.data.state) : true;
  const logs = useQuery({
    queryKey: ["workload", id, "logs"],
    queryFn: () => unwrap(api.GET("/api/v1/workloads/{id}/logs", { params: { path: { id }, query: { tail: 200 } } })),
    refetchInterval: active ? LIVE_MS : false,
  });
  if (detail.isPending) return <Loading what="the workload" />;
  if (detail.isError || !detail.data) {
    return (
      <>
        <PageHeader title="Workload" />
        <ErrorNote error={detail.error} />
        <Link to="/workloads">Back to workloads</Link>
      </>
    );
  }
  const w = detail.data;
  return (
    <>
      <PageHeader title={w.name}>
        <StateBadge state={w.state} />
        {w.gang_id != null && w.gang_rank != null && w.gang_size != null && (
          <span data-testid="workload-gang">
            <Badge>
              Gang: rank {w.gang_rank} of {w.gang_size}
            </Badge>
          </span>
        )}
        {can.cancel && <CancelButton w={w} />}
      </PageHeader>
      <p>
        <Link to="/workloads">← Workloads</Link>
      </p>
      <div className="grid2">
        <Section title="Details" id="details">
          <dl className="facts" data-testid="workload-facts">
            <dt>Tenant</dt>
            <dd>{w.tenant}</dd>
            <dt>Class</dt>
            <dd>{words(w.class)}</dd>
            <dt>Priority</dt>
            <dd>{w.priority}</dd>
            <dt>GPUs</dt>
            <dd>{gpusAcross(w)}</dd>
            <dt>State</dt>
            <dd data-testid="workload-state">{words(w.state)}</dd>
            {w.state === "pending" && (
              <>
                <dt>Why it waits</dt>
                <dd>{w.pending_reason ?? "—"}</dd>
                {w.queue_position != null && (
                  <>
                    <dt>Queue position</dt>
                    <dd>{w.queue_position}</dd>
                  </>
                )}
                {w.shortfall && (
                  <>
                    <dt>Short of</dt>
                    <dd>{w.shortfall}</dd>
                  </>
                )}
              </>
            )}
            <dt>Submitted</dt>
            <dd>{time(w.submitted_at)}</dd>
            <dt>Started</dt>
            <dd>{time(w.started_at)}</dd>
            <dt>Finished</dt>
            <dd>{time(w.finished_at)}</dd>
            <dt>Attempt</dt>
            <dd>{w.attempt}</dd>
            <dt>Command</dt>
            <dd>
              <code>{w.command.join(" ")}</code>
            </dd>
            {w.exit_code != null && (
              <>
                <dt>Exit code</dt>
                <dd>{w.exit_code}</dd>
              </>
            )}
            {w.message && (
              <>
                <dt>Message</dt>
                <dd>{w.message}</dd>
              </>
            )}
          </dl>
        </Section>
        <Section title="State history" id="history">
          <ol className="timeline" data-testid="timeline">
            {w.history.map((e, i) => {
              const next = w.history[i + 1];
              const lasted = next ? (Date.parse(next.at) - Date.parse(e.at)) / 1000 : null;
              return (
                <li key={i} className={`tl tl-${e.to_state}`}>
                  <span className="tl-dot" aria-hidden="true" />
                  <div>
                    <StateBadge state={e.to_state} /> <span className="muted small">{time(e.at)}</span>
                    {lasted != null && <span className="muted small"> · for {duration(lasted)}</span>}
                    {e.detail && <p className="small">{e.detail}</p>}
                  </div>
                </li>
              );
            })}
          </ol>
        </Section>
      </div>
      {(w.gang?.length ?? 0) > 0 && <GangMembers members={w.gang ?? []} current={w.id} />}
      <Section title="Decisions" id="workload-decisions">
        <DecisionsTable rows={w.decisions} />
      </Section>
      <Section title="Logs" id="logs">
        <ErrorNote error={logs.error} />
        <pre className="logs" tabIndex={0} aria-label="Workload output" data-testid="logs">
          {(logs.data?.lines ?? []).map((l) => `${l.stream === "stderr" ? "! " : ""}${l.text}`).join("\n") || "No output yet."}
        </pre>
      </Section>
    </>
  );
}

/** The members of a gang by rank: each one's state, attempt and node, the one shown marked. */
export function GangMembers({ members, current }: { members: GangMember[]; current: string }) {
  const byRank = [...members].sort((a, b) => a.rank - b.rank);
  return (
    <Section title="Gang members" id="gang">
      <div className="table-scroll" tabIndex={0} role="region" aria-label="Gang members">
        <table className="compact" data-testid="gang-members">
          <thead>
            <tr>
              <th scope="col">Rank</th>
              <th scope="col">Member</th>
              <th scope="col">State</th>
              <th scope="col">Attempt</th>
              <th scope="col">Node</th>
            </tr>
          </thead>
          <tbody>
            {byRank.map((m) => {
              const here = m.id === current;
              return (
                <tr key={m.id} data-rank={m.rank} className={here ? "selected" : undefined}>
                  <td>{m.rank}</td>
                  <td>
                    <Link to={`/workloads/${m.id}`} aria-current={here ? "page" : undefined} title={m.id}>
                      <code>{m.id.slice(0, 8)}</code>
                    </Link>
                    {here && <span className="muted small"> (this one)</span>}
                  </td>
                  <td>
                    <StateBadge state={m.state} />
                  </td>
                  <td>{m.attempt}</td>
                  <td>
                    {m.node_id ? (
                      <Link to={`/fleet/nodes/${m.node_id}`}>{m.node ?? m.node_id.slice(0, 8)}</Link>
                    ) : m.node ? (
                      <span className="muted" title="Where it last ran">
                        {m.node}
                      </span>
                    ) : (
                      <span className="muted">—</span>
                    )}
                  </td>
                </tr>
              );
            })}
          </tbody>
        </table>
      </div>
    </Section>
  );
}

export function goToWorkload(id: string) {
  navigate(`/workloads/${id}`);
}
