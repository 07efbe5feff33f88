// The data the pages share, cached by TanStack Query and refetched while the tab is open.
import { useQuery } from "@tanstack/react-query";
import { api, optional, unwrap } from "../api/client";
import { pollEvery } from "./live";
import type { GroupBy } from "../api/types";

/** Live data: a few seconds old at most. */
export const LIVE_MS = 2000;

export const useMe = () => useQuery({ queryKey: ["me"], queryFn: () => unwrap(api.GET("/api/v1/auth/me")), staleTime: 60_000 });
export const useNodes = () => useQuery({ queryKey: ["nodes"], queryFn: () => unwrap(api.GET("/api/v1/nodes")), refetchInterval: pollEvery(LIVE_MS) });
export const useFleetSummary = () =>
  useQuery({ queryKey: ["fleet-summary"], queryFn: () => unwrap(api.GET("/api/v1/fleet/summary")), refetchInterval: pollEvery(LIVE_MS) });
export const useGpus = () => useQuery({ queryKey: ["gpus"], queryFn: () => unwrap(api.GET("/api/v1/gpus")), refetchInterval: pollEvery(LIVE_MS) });
export const useWorkloads = (limit = 500) =>
  useQuery({ queryKey: ["workloads", limit], queryFn: () => unwrap(api.GET("/api/v1/workloads", { params: { query: { limit } } })), refetchInterval: pollEvery(LIVE_MS) });
export const useTenantSummary = () =>
  useQuery({ queryKey: ["tenants", "summary"], queryFn: () => unwrap(api.GET("/api/v1/tenants/summary")), refetchInterval: pollEvery(5000) });
export const useTenants = () => useQuery({ queryKey: ["tenants"], queryFn: () => unwrap(api.GET("/api/v1/tenants")), staleTime: 30_000 });
/** GET /api/v1/tenants/budgets: every tenant's for platform admins, the caller's own tenant's for everyone else. */
export const useBudgets = () =>
  useQuery({ queryKey: ["tenants", "budgets"], queryFn: () => unwrap(api.GET("/api/v1/tenants/budgets")), refetchInterval: pollEvery(30_000) });
export const useDecisions = (limit = 500) =>
  useQuery({ queryKey: ["decisions", limit], queryFn: () => unwrap(api.GET("/api/v1/decisions", { params: { query: { limit } } })), refetchInterval: pollEvery(5000) });
export const usePolicies = () => useQuery({ queryKey: ["policies"], queryFn: () => unwrap(api.GET("/api/v1/policies")), refetchInterval: pollEvery(5000) });
export const usePriorities = () =>
  useQuery({ queryKey: ["priorities"], queryFn: () => unwrap(api.GET("/api/v1/settings/priorities")) });

/** GET /api/v1/usage: null until the endpoint exists (or when it refuses this caller). */
export const useUsage = (params: { from: string; to: string; step_s: number; group_by: GroupBy }) =>
  useQuery({
    queryKey: ["usage", params.group_by, params.step_s, Math.floor(Date.parse(params.to) / 60000)],
    queryFn: () => optional(api.GET("/api/v1/usage", { params: { query: params } })),
    refetchInterval: 30_000,
    placeholderData: (prev) => prev,
  });

/** GET /api/v1/fleet/held-idle: null until it exists. */
export const useHeldIdle = () =>
  useQuery({ queryKey: ["held-idle"], queryFn: () => optional(api.GET("/api/v1/fleet/held-idle")), refetchInterval: pollEvery(10_000) });
