import { useState } from "react";
import { useQuery } from "@tanstack/react-query";
import { createColumnHelper } from "@tanstack/react-table";
import type { PageProps } from "../App";
import { api, unwrap } from "../api/client";
import type { AuditEntry } from "../api/types";
import { DataTable } from "../components/DataTable";
import { ErrorNote, PageHeader, Section } from "../components/ui";
import { time } from "../lib/format";

const col = createColumnHelper<AuditEntry>();
const columns = [
  col.accessor("at", { header: "When", cell: (c) => time(c.getValue()) }),
  col.accessor("actor_name", { header: "Who", cell: (c) => `${c.getValue()} (${c.row.original.actor_kind})` }),
  col.accessor("action", { header: "Action" }),
  col.accessor((a) => a.tenant ?? "platform", { id: "tenant", header: "Tenant" }),
  col.accessor((a) => `${a.target_kind}${a.target_id ? ` ${a.target_id.slice(0, 8)}` : ""}`, { id: "target", header: "Target" }),
  col.accessor((a) => JSON.stringify(a.detail), { id: "detail", header: "Detail", enableSorting: false, cell: (c) => <code className="detail">{c.getValue()}</code> }),
  col.accessor((a) => a.source_ip ?? "", { id: "from", header: "From" }),
];

export function Audit(_: PageProps) {
  const [action, setAction] = useState("");
  const audit = useQuery({
    queryKey: ["audit", action],
    queryFn: () => unwrap(api.GET("/api/v1/audit", { params: { query: { limit: 1000, ...(action ? { action } : {}) } } })),
    refetchInterval: 10_000,
  });
  return (
    <>
      <PageHeader title="Audit log">
        <label className="inline">
          Action{" "}
          <input value={action} placeholder="e.g. policy.activate" onChange={(e) => setAction(e.target.value.trim())} />
        </label>
      </PageHeader>
      <Section title="Every change, newest first" id="audit">
        <ErrorNote error={audit.error} />
        <DataTable data={audit.data ?? []} columns={columns} label="Audit log" testId="audit" rowKey={(a) => String(a.id)} />
      </Section>
    </>
  );
}
