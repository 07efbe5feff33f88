// What the next scheduling cycle would decide differently under a candidate change (priority
// settings, a tenant's quota): the placement counts and each workload whose outcome changes, from
// the server's comparison of two evaluations of the active platform policy.
import type { PreviewChange, PreviewOutcome } from "../api/types";
import { words } from "../lib/format";

function outcome(o: PreviewOutcome): string {
  if (o.action === "none") return "no change";
  return `${words(o.action)}${o.node ? ` on ${o.node}` : ""}`;
}

/** What both the settings' and a quota's previews carry. */
type Compared = { placed_now: number; placed_with_candidate: number; changes: PreviewChange[]; error?: string | null };

/** The comparison's summary and table; `candidate` names the change ("with these settings"). */
export function DecisionDiff({ comparison: c, candidate }: { comparison: Compared; candidate: string }) {
  if (c.error) {
    return (
      <p className="error" role="alert" data-testid="preview-error">
        The two runs could not be compared: {c.error}
      </p>
    );
  }
  return (
    <>
      <p data-testid="preview-summary">
        Placed now: <strong>{c.placed_now}</strong> · {candidate}: <strong>{c.placed_with_candidate}</strong> · {c.changes.length} workloads decided
        differently.
      </p>
      {c.changes.length > 0 && (
        <div className="table-scroll" tabIndex={0} role="region" aria-label="Preview of changes">
          <table data-testid="preview">
            <thead>
              <tr>
                <th scope="col">Workload</th>
                <th scope="col">Tenant</th>
                <th scope="col">Now</th>
                <th scope="col">{candidate.charAt(0).toUpperCase() + candidate.slice(1)}</th>
              </tr>
            </thead>
            <tbody>
              {c.changes.map((ch) => (
                <tr key={ch.workload_id}>
                  <td>{ch.name}</td>
                  <td>{ch.tenant}</td>
                  <td>
                    {outcome(ch.current)}
                    <br />
                    <span className="muted small">{ch.current.reason}</span>
                  </td>
                  <td>
                    {outcome(ch.candidate)}
                    <br />
                    <span className="muted small">{ch.candidate.reason}</span>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </>
  );
}
