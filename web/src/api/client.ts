// The REST client: openapi-fetch typed by the generated schema's `paths`, so a path, its
// parameters, its body and its answer are checked against the control plane's OpenAPI document.
// The session token (from POST /api/v1/auth/login) stays in this tab's sessionStorage, as the first
// dashboard kept it, and goes with every request as a bearer token.
import createClient, { type Middleware } from "openapi-fetch";
import type { paths } from "./schema";

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

/** Which request each answer is to, for the message of an error without a body. */
const requested = new WeakMap<Response, string>();

/** The session as a bearer token on the way out; a refused session (401) is ended on the way back. */
const session: Middleware = {
  onRequest({ request }) {
    const value = token();
    if (value) request.headers.set("Authorization", `Bearer ${value}`);
    return request;
  },
  onResponse({ request, response, schemaPath }) {
    if (response.status === 401 && schemaPath !== "/api/v1/auth/login" && request.headers.has("Authorization")) setToken(null);
    const url = new URL(request.url);
    requested.set(response, url.pathname + url.search);
    return undefined;
  },
};

/** Same-origin requests; fetch is looked up at each call, so a test can stand in for it. */
export const api = createClient<paths>({
  baseUrl: location.origin,
  headers: { Accept: "application/json" },
  fetch: (request) => globalThis.fetch(request),
});
api.use(session);

/** What each of the client's methods answers (openapi-fetch's FetchResponse, reduced to what is read here). */
interface Answer<T> {
  data?: T;
  error?: unknown;
  response: Response;
}

function errorBody(body: unknown): { code?: string; message?: string } {
  if (typeof body !== "object" || body === null || !("error" in body)) return {};
  const inner: unknown = body.error;
  if (typeof inner !== "object" || inner === null) return {};
  return {
    code: "code" in inner && typeof inner.code === "string" ? inner.code : undefined,
    message: "message" in inner && typeof inner.message === "string" ? inner.message : undefined,
  };
}

/**
 * The body of a successful answer; an error answer throws an ApiError with the code and message of
 * the API's error body (`{"error": {"code", "message"}}`), or `http_error` and the status without one.
 */
export async function unwrap<T>(call: Promise<Answer<T>>): Promise<T> {
  const { data, error, response } = await call;
  if (!response.ok) {
    const body = errorBody(error);
    throw new ApiError(response.status, body.code ?? "http_error", body.message ?? `${requested.get(response) ?? "the API"}: HTTP ${response.status}`);
  }
  // A success whose schema declares no body (204) reads as undefined, which its type (never) covers.
  return data as T;
}

/** For endpoints that may not exist yet (or not for this role): null unless they answer 2xx. */
export async function optional<T>(call: Promise<Answer<T>>): Promise<T | null> {
  try {
    return await unwrap(call);
  } catch (err) {
    if (err instanceof ApiError && err.status >= 400 && err.status < 500 && err.status !== 401) return null;
    throw err;
  }
}
