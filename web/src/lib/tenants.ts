// A tenant's controls on the tenants page: its GPU limit in the quota form, what archiving it ended,
// and how its GPU-hour budgets burn down. The API checks all of it again; this keeps the page's
// words and the requests its forms send.
import type { Archived, Budget, BudgetAction } from "../api/types";
import { gpuHours, pct, words } from "./format";

/** The most a GPU limit may be (the API refuses more); 0 in a change removes the limit. */
export const MAX_GPU_LIMIT = 100_000;

/**
 * The GPU limit a quota form sends, if any: `noLimit` removes a limit the tenant has (0); otherwise
 * the field's text, when it is a whole number that differs from the limit now. An empty field
 * changes nothing.
 */
export function limitChange(now: number | null | undefined, text: string, noLimit: boolean): number | undefined {
  const current = now ?? null;
  if (noLimit) return current == null ? undefined : 0;
  const trimmed = text.trim();
  if (trimmed === "") return undefined;
  const n = Number(trimmed);
  if (!Number.isInteger(n) || n === current) return undefined;
  return n;
}

/** A tenant's GPU limit in words: "8 GPUs", "1 GPU", "none". */
export function limitWords(limit: number | null | undefined): string {
  if (limit == null) return "none";
  return `${limit} GPU${limit === 1 ? "" : "s"}`;
}

const count = (n: number, one: string, many: string) => `${n} ${n === 1 ? one : many}`;

/** What archiving a tenant ended, as the page confirms it. */
export function archivedWords(a: Archived): string {
  return (
    `Archived ${a.tenant.name}: ${count(a.cancelled_pending, "pending workload", "pending workloads")} cancelled, ` +
    `${count(a.stopping, "workload", "workloads")} stopping with ${a.stopping === 1 ? "its" : "their"} grace period, ` +
    `${count(a.draining_services, "service", "services")} draining. It admits nothing new; its history and accounting remain.`
  );
}

/** What happens to new work once a budget is used up. */
export function budgetActionWords(action: BudgetAction): string {
  switch (action) {
    case "warn":
      return "warn: new work is still admitted";
    case "best_effort":
      return "best effort: new work is admitted preemptible at priority 0";
    case "stop":
      return "stop: new work is refused";
  }
}

const clamp01 = (x: number) => (Number.isFinite(x) ? Math.min(1, Math.max(0, x)) : 0);

export interface BurnDown {
  /** The share of the budget left, 0..1. */
  remaining: number;
  /** The share of the period gone, 0..1. */
  elapsed: number;
  /** The share that would be left if the budget were used evenly over the period: 1 - elapsed. */
  pace: number;
  /** Used faster than the period passes: less is left than the even pace would leave. */
  overPace: boolean;
}

/** Where a budget stands in its period at `now` (ms since the epoch). */
export function burnDown(b: Budget, now: number): BurnDown {
  const remaining = b.exhausted ? 0 : b.gpu_hours > 0 ? clamp01(b.remaining_gpu_hours / b.gpu_hours) : 0;
  const start = Date.parse(b.period_start);
  const end = Date.parse(b.period_end);
  const elapsed = end > start ? clamp01((now - start) / (end - start)) : 1;
  const pace = 1 - elapsed;
  return { remaining, elapsed, pace, overPace: remaining < pace };
}

/** A budget's burn-down in words, for those who cannot see its bar. */
export function burnDownWords(b: Budget, d: BurnDown): string {
  return (
    `${b.tenant}, ${words(b.period)}: ${gpuHours(b.used_gpu_hours)} of ${gpuHours(b.gpu_hours)} GPU-hours used, ` +
    `${pct(d.remaining)} left with ${pct(d.pace)} of the ${b.period} to go`
  );
}
