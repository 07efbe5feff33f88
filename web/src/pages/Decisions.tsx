import { useState } from "react";
import { createColumnHelper } from "@tanstack/react-table";
import type { PageProps } from "../App";
import type { Decision } from "../api/types";
import { DataTable } from "../components/DataTable";
import { ErrorNote, PageHeader, Section, WordSelect } from "../components/ui";
import { ago, words } from "../lib/format";
import { useDecisions } from "../lib/queries";
import { Link } from "../lib/router";

const col = createColumnHelper<Decision>();
const columns = [
  col.accessor("decided_at", { header: "When", cell: (c) => <time dateTime={c.getValue()}>{ago(c.getValue())}</time> }),
  col.accessor("workload_name", { header: "Workload", cell: (c) => <Link to={`/workloads/${c.row.original.workload_id}`}>{c.getValue()}</Link> }),
  col.accessor("kind", { header: "Decision", cell: (c) => <span className={`kind kind-${c.getValue()}`}>{words(c.getValue())}</span> }),
  col.accessor((d) => d.node_name ?? "", { id: "node", header: "Where" }),
  col.accessor("reason", { header: "Reason", enableSorting: false }),
  col.accessor("policy_name", { header: "Policy" }),
  col.accessor("cycle_id", { header: "Cycle" }),
];

export function DecisionsTable({ rows }: { rows: Decision[] }) {
  return <DataTable data={rows} columns={columns} label="Decision list" testId="decisions" rowKey={(d) => String(d.id)} empty="No decision yet." />;
}

export function Decisions(_: PageProps) {
  const decisions = useDecisions(2000);
  const [kind, setKind] = useState("");
  const rows = (decisions.data ?? []).filter((d) => !kind || d.kind === kind);
  const kinds = [...new Set((decisions.data ?? []).map((d) => d.kind))].sort();
  return (
    <>
      <PageHeader title="Decisions">
        <label className="inline">
          Kind{" "}
          <WordSelect value={kind} options={kinds} onChange={setKind} all="all" />
        </label>
      </PageHeader>
      <Section title={`Latest ${rows.length} decisions`} id="decisions">
        <ErrorNote error={decisions.error} />
        <DecisionsTable rows={rows} />
      </Section>
    </>
  );
}
