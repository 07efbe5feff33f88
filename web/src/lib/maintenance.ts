// A node's maintenance (cordon, drain, uncordon): what the node page shows of a hold and which
// requests its buttons send. The API checks all of it again; this keeps the page's words and forms.
import type { CordonRequest, DrainAction, DrainRequest, Maintenance, NodeState, NodeWork } from "../api/types";

export type { CordonRequest, DrainRequest, NodeWork };

/** A drain's deadline is at most a week (the API refuses more). */
export const MAX_DEADLINE_S = 7 * 24 * 3600;
/** A reason is at most 500 characters. */
export const MAX_REASON = 500;

export type NodeAction = "cordon" | "drain" | "uncordon";

/**
 * The buttons that change something for a node in this state: a ready node can be cordoned or
 * drained; a cordoned one drained or uncordoned; a draining one cordoned (stops moving work),
 * drained again (replaces the deadline) or uncordoned. A lost node's hold is not visible in its
 * state, so all three are offered and `held` (whether it has a maintenance record) decides uncordon.
 */
export function nodeActions(state: NodeState, held: boolean): NodeAction[] {
  switch (state) {
    case "ready":
      return ["cordon", "drain"];
    case "cordoned":
      return ["drain", "uncordon"];
    case "draining":
      return ["cordon", "drain", "uncordon"];
    case "lost":
      return held ? ["cordon", "drain", "uncordon"] : ["cordon", "drain"];
  }
}

/** What a drain does with one workload, in words. */
export function drainWords(action: DrainAction, deadline?: string | null): string {
  switch (action) {
    case "requeue":
      return "checkpoint signal, then requeued";
    case "replace":
      return "replaced on another node, then stopped";
    case "finish":
      return deadline ? "left to finish, requeued at the deadline" : "left to finish";
    case "stopping":
      return "stopping";
  }
}

/** "2 workloads left (1 to finish, 1 stopping)", as `airtime nodes drain --wait` prints it; "drained" when none is. */
export function remainingWords(m: Pick<Maintenance, "remaining" | "drained" | "mode">, work: NodeWork[] = []): string {
  if (m.mode === "draining" && m.drained) return "drained: nothing left, the node may be taken down";
  const n = m.remaining;
  const head = `${n} workload${n === 1 ? "" : "s"} left`;
  if (work.length === 0) return head;
  const order: [DrainAction, string][] = [
    ["requeue", "to requeue"],
    ["replace", "to replace"],
    ["finish", "to finish"],
    ["stopping", "stopping"],
  ];
  const parts = order
    .map(([action, label]) => [work.filter((w) => w.drain === action).length, label] as const)
    .filter(([count]) => count > 0)
    .map(([count, label]) => `${count} ${label}`);
  return parts.length ? `${head} (${parts.join(", ")})` : head;
}

/** A form's reason: trimmed, absent when empty. */
function reasonOf(text: string): { reason?: string } | { error: string } {
  const reason = text.trim();
  if (reason.length > MAX_REASON) return { error: `The reason is at most ${MAX_REASON} characters.` };
  return reason ? { reason } : {};
}

/** The body of POST /nodes/{id}/cordon from the form, or what is wrong with it. */
export function cordonBody(reason: string): { body: CordonRequest } | { error: string } {
  const r = reasonOf(reason);
  return "error" in r ? r : { body: r };
}

/**
 * The body of POST /nodes/{id}/drain from the form, or what is wrong with it: the deadline is
 * whole seconds from 1 to a week, or empty (the work left to finish may take as long as it takes).
 */
export function drainBody(reason: string, deadline: string): { body: DrainRequest } | { error: string } {
  const r = reasonOf(reason);
  if ("error" in r) return r;
  const text = deadline.trim();
  if (!text) return { body: r };
  if (!/^\d+$/.test(text)) return { error: "The deadline is a whole number of seconds." };
  const deadline_s = Number(text);
  if (deadline_s < 1 || deadline_s > MAX_DEADLINE_S) return { error: `The deadline is from 1 s to a week (${MAX_DEADLINE_S} s).` };
  return { body: { ...r, deadline_s } };
}
