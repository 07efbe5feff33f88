// The live feed (GET /api/v1/events/stream, Server-Sent Events) drives the query cache: each
// change invalidates the queries it affects, so a page shows it within a moment instead of at the
// next poll, and polling slows down while the feed is connected. EventSource cannot send the
// bearer token, so the stream is read with fetch; a dropped stream reconnects from the last id.
import { useEffect, useState, useSyncExternalStore } from "react";
import { useQueryClient, type QueryClient } from "@tanstack/react-query";
import { token } from "../api/client";

export interface FeedEvent {
  event: string;
  id: string;
  data: unknown;
}

/** Splits an SSE text buffer into whole events and what is left of an unfinished one. */
export function parseSse(buffer: string): { events: FeedEvent[]; rest: string } {
  const events: FeedEvent[] = [];
  const blocks = buffer.split("\n\n");
  const rest = blocks.pop() ?? "";
  for (const block of blocks) {
    let event = "message";
    let id = "";
    const data: string[] = [];
    for (const line of block.split("\n")) {
      if (line.startsWith(":")) continue; // a keep-alive comment
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "event") event = value;
      else if (field === "id") id = value;
      else if (field === "data") data.push(value);
    }
    if (data.length === 0) continue;
    let parsed: unknown = data.join("\n");
    try {
      parsed = JSON.parse(parsed as string);
    } catch {
      // not JSON: kept as text
    }
    events.push({ event, id, data: parsed });
  }
  return { events, rest };
}

/** The query keys an event makes stale. */
export function staleKeys(event: string): string[][] {
  switch (event) {
    case "workload":
      return [["workloads"], ["workload"], ["tenants", "summary"], ["held-idle"], ["gpus"], ["nodes"], ["node"], ["fleet-summary"]];
    case "decision":
      return [["decisions"], ["workload"]];
    case "node":
      return [["nodes"], ["gpus"], ["node"], ["fleet-summary"]];
    case "policy_failure":
      return [["policies"]];
    default:
      return [];
  }
}

let connected = false;
const listeners = new Set<() => void>();
function setConnected(value: boolean) {
  if (connected !== value) {
    connected = value;
    listeners.forEach((l) => l());
  }
}
/** Whether the feed is connected now. */
export function isLive(): boolean {
  return connected;
}
export function useLive(): boolean {
  return useSyncExternalStore(
    (l) => {
      listeners.add(l);
      return () => listeners.delete(l);
    },
    () => connected,
  );
}

/**
 * The time (ms since the epoch), read again when each `periodMs` boundary passes: a render reads
 * this instead of calling Date.now, so a range derived from it (and the query key built on that
 * range) stays put between renders and moves on once a period.
 */
export function useClock(periodMs: number): number {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    let timer: ReturnType<typeof setTimeout>;
    const wait = () => {
      timer = setTimeout(() => {
        setNow(Date.now());
        wait();
      }, periodMs - (Date.now() % periodMs) + 1);
    };
    wait();
    return () => clearTimeout(timer);
  }, [periodMs]);
  return now;
}

/** Poll every `ms` without the feed; every 15 s (a safety net) while it is connected. */
export const pollEvery = (ms: number) => () => (connected ? Math.max(ms, 15_000) : ms);

async function follow(client: QueryClient, signal: AbortSignal): Promise<void> {
  let cursor = "";
  let backoff = 1000;
  while (!signal.aborted) {
    const session = token();
    if (!session) return;
    try {
      const query = cursor ? `?after=${encodeURIComponent(cursor)}` : "";
      const response = await fetch(`/api/v1/events/stream${query}`, {
        headers: { Authorization: `Bearer ${session}`, Accept: "text/event-stream" },
        signal,
      });
      if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
      setConnected(true);
      backoff = 1000;
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      let pending = new Set<string>();
      let flush: ReturnType<typeof setTimeout> | undefined;
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        const parsed = parseSse(buffer + value);
        buffer = parsed.rest;
        for (const e of parsed.events) {
          if (e.id) cursor = e.id;
          for (const key of staleKeys(e.event)) pending.add(JSON.stringify(key));
        }
        // A burst of changes is one refetch per query, a quarter second later.
        if (pending.size > 0 && flush === undefined) {
          flush = setTimeout(() => {
            const keys = pending;
            pending = new Set();
            flush = undefined;
            keys.forEach((k) => void client.invalidateQueries({ queryKey: JSON.parse(k) as string[] }));
          }, 250);
        }
      }
    } catch {
      if (signal.aborted) return;
      await new Promise((r) => setTimeout(r, backoff));
      backoff = Math.min(backoff * 2, 10_000);
    } finally {
      setConnected(false);
    }
  }
}

/** Follows the feed while mounted (the signed-in shell). */
export function useLiveFeed(): void {
  const client = useQueryClient();
  useEffect(() => {
    const abort = new AbortController();
    void follow(client, abort.signal);
    return () => abort.abort();
  }, [client]);
}
