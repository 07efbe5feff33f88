// The API's shapes: short names for the schemas of the control plane's OpenAPI document, generated
// into schema.d.ts by `npm run gen:api` (`make test` fails when that file differs from the served
// document). Declare no API shape by hand here: alias the schema's.
import type { components } from "./schema";

type S = components["schemas"];
export type Me = S["Me"];
export type Role = S["Role"];
export type Session = S["Session"];
export type NodeView = S["NodeView"];
export type GpuView = S["GpuView"];
export type GpuShare = S["GpuShareView"];
export type Workload = S["WorkloadView"];
export type WorkloadDetail = S["WorkloadDetail"];
/** One member of a gang across nodes, as a member's detail lists them. */
export type GangMember = S["GangMember"];
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

/** A node's cordon or drain, and what a drain does with its work. */
export type NodeState = S["NodeState"];
export type DrainAction = S["DrainAction"];
export type Maintenance = S["Maintenance"];
export type NodeWork = S["NodeWork"];
export type CordonRequest = S["CordonRequest"];
export type DrainRequest = S["DrainRequest"];

/** GET /api/v1/usage. */
export type UsageNumbers = S["UsageNumbers"];
export type GroupBy = S["GroupBy"];
export type UsageReport = S["UsageReport"];
/** GET /api/v1/fleet/held-idle. */
export type HeldIdle = S["HeldIdle"];

/** POST /api/v1/settings/priorities/preview. */
export type PriorityPreview = S["Preview"];
export type PreviewOutcome = S["PreviewOutcome"];
export type PreviewChange = S["PreviewChange"];
export type QuotaPreview = S["QuotaPreview"];
export type TenantQuota = S["TenantQuota"];

/** POST /api/v1/tenants/{id}/archive: the tenant, archived, and what that ended. */
export type Archived = S["Archived"];
/** GET /api/v1/tenants/budgets, PUT /api/v1/tenants/{id}/budgets/{period}. */
export type Budget = S["BudgetView"];
export type BudgetAction = S["BudgetAction"];
export type BudgetPeriod = S["Period"];
export type SetBudget = S["SetBudget"];
export const BUDGET_PERIODS: BudgetPeriod[] = ["week", "month"];
export const BUDGET_ACTIONS: BudgetAction[] = ["warn", "best_effort", "stop"];

export const WORKLOAD_CLASSES: WorkloadClass[] = [
  "realtime_inference",
  "batch_inference",
  "training",
  "fine_tuning",
  "quantization",
  "embeddings",
  "evaluation",
];
export const ACTIVE_STATES: S["WorkloadState"][] = ["pending", "scheduled", "running", "preempting", "cancelling"];

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
/** A token-priced service's serving over the last hour (ServiceDetail.serving_report). */
export type ServingReport = S["ServingReport"];
export type VariantServing = S["VariantServing"];
export type LearnedCapacity = S["LearnedCapacity"];
export type ServingPoint = S["ServingPoint"];
export type ServingObjective = S["ServingObjective"];
export type ReplicaVariant = S["ReplicaVariant"];
export type ApiToken = S["ApiTokenView"];
export type CreatedToken = S["CreatedToken"];
export type User = S["UserView"];
