// The REST client: the session token (from POST /api/v1/auth/login) stays in this tab's
// sessionStorage, as the first dashboard kept it, and goes with every request as a bearer token.
export const TOKEN_KEY = "airtime.session";

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export function token(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

const listeners = new Set<() => void>();
export function onSessionChange(listener: () => void): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}
export function setToken(value: string | null): void {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
  listeners.forEach((l) => l());
}

export interface RequestOptions {
  method?: string;
  body?: unknown;
  raw?: Blob | ArrayBuffer;
  contentType?: string;
  signal?: AbortSignal;
}

export async function api<T>(path: string, options: RequestOptions = {}): Promise<T> {
  const headers: Record<string, string> = { Accept: "application/json" };
  const session = token();
  if (session) headers.Authorization = `Bearer ${session}`;
  let body: BodyInit | undefined;
  if (options.raw !== undefined) {
    body = options.raw;
    headers["Content-Type"] = options.contentType ?? "application/octet-stream";
  } else if (options.body !== undefined) {
    body = JSON.stringify(options.body);
    headers["Content-Type"] = "application/json";
  }
  const response = await fetch(path, { method: options.method ?? "GET", headers, body, signal: options.signal });
  const text = await response.text();
  let parsed: unknown = undefined;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = undefined;
  }
  if (!response.ok) {
    const err = (parsed as { error?: { code?: string; message?: string } } | undefined)?.error;
    if (response.status === 401 && !path.endsWith("/auth/login") && session) setToken(null);
    throw new ApiError(response.status, err?.code ?? "http_error", err?.message ?? `${path}: HTTP ${response.status}`);
  }
  return parsed as T;
}

/** For endpoints that may not exist yet (or not for this role): null unless they answer 200. */
export async function optional<T>(path: string, options: RequestOptions = {}): Promise<T | null> {
  try {
    return await api<T>(path, options);
  } catch (err) {
    if (err instanceof ApiError && err.status >= 400 && err.status < 500 && err.status !== 401) return null;
    throw err;
  }
}
