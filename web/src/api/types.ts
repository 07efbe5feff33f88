// The API's shapes, generated from the control plane's OpenAPI document (`npm run gen:api`),
// plus the fields of endpoints that are being added (optional until they land).
import type { components } from "./schema";

type S = components["schemas"];
export type Me = S["Me"];
export type Role = S["Role"];
export type Session = S["Session"];
export type NodeView = S["NodeView"];
export type GpuView = S["GpuView"];
export type GpuShare = S["GpuShareView"];
export type Workload = S["WorkloadView"] & {
  /** Its position among the pending work competing for the same resources (when the API says). */
  queue_position?: number | null;
  /** What it is short of, e.g. "needs 4 GPUs of H100 on one node; the best node has 2 free". */
  shortfall?: string | null;
};
export type WorkloadDetail = Workload & { history: S["WorkloadEvent"][]; decisions: Decision[] };
export type WorkloadClass = S["WorkloadClass"];
export type SubmitWorkload = S["SubmitWorkload"];
export type Decision = S["DecisionView"];
export type PrioritySettings = S["PrioritySettings"];
export type TenantStanding = S["TenantStanding"];
export type Tenant = S["TenantView"];
export type AuditEntry = S["AuditEntry"];
export type Policy = S["PolicyView"];
export type PolicyVersion = S["VersionView"];
export type PolicyFailure = S["FailureView"];
export type PolicyLog = S["LogView"];
export type ShadowResult = S["ShadowResultView"];
export type WhatIf = S["WhatIfView"];
export type Logs = S["Logs"];

export interface UsageNumbers {
  owned_gpu_hours: number;
  allocated_gpu_hours: number;
  busy_gpu_hours: number;
  idle_gpu_hours: number;
  idle_cost: number;
  owned_cost: number;
}
export type GroupBy = "none" | "tenant" | "class" | "node" | "gpu_model";
export interface UsageReport {
  from: string;
  to: string;
  step_s: number;
  group_by: GroupBy;
  totals: UsageNumbers;
  groups: (UsageNumbers & { group: string })[];
  series: (UsageNumbers & { at: string; group: string })[];
}
export interface HeldIdle {
  workload_id: string;
  name: string;
  tenant: string;
  gpus: number;
  idle_for_s: number;
  cost_so_far: number;
  class?: string;
  held_since?: string;
}

export type PreviewAction = "place" | "preempt" | "keep_pending" | "none";
export interface PreviewOutcome {
  action: PreviewAction;
  node: string | null;
  reason: string;
}
export interface PriorityPreview {
  changes: { workload_id: string; name: string; tenant: string; current: PreviewOutcome; candidate: PreviewOutcome }[];
  placed_now: number;
  placed_with_candidate: number;
}

export const WORKLOAD_CLASSES: WorkloadClass[] = [
  "realtime_inference",
  "batch_inference",
  "training",
  "fine_tuning",
  "quantization",
  "embeddings",
  "evaluation",
];
export const ACTIVE_STATES = ["pending", "scheduled", "running", "preempting", "cancelling"];

/** GET /api/v1/gpus/{id}/history. */
export type GpuHistory = S["GpuHistory"];
export type GpuHistoryPoint = S["GpuHistoryPoint"];

/** GET /api/v1/fleet/summary. */
export type FleetSummary = S["FleetSummary"];

/** GET /api/v1/nodes/{id}/history. */
export type NodeHistory = S["NodeHistory"];
export type NodeHistoryPoint = S["NodeHistoryPoint"];

export type Service = S["ServiceView"];
export type ServiceDetail = S["ServiceDetail"];
export type ScaleEvent = S["ScaleEvent"];
export type ApiToken = S["ApiTokenView"];
export type CreatedToken = S["CreatedToken"];
export type User = S["UserView"];
