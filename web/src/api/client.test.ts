import { afterEach, describe, expect, it, vi } from "vitest";
import { ApiError, api, optional, setToken, token, unwrap } from "./client";

function answer(status: number, body?: unknown): Response {
  return new Response(body === undefined ? null : JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });
}

function serve(response: () => Response): Request[] {
  const seen: Request[] = [];
  vi.stubGlobal("fetch", async (request: Request) => {
    seen.push(request);
    return response();
  });
  return seen;
}

afterEach(() => {
  vi.unstubAllGlobals();
  setToken(null);
});

describe("the API client", () => {
  it("sends the session as a bearer token and answers the body", async () => {
    setToken("s3cret");
    const seen = serve(() => answer(200, [{ id: "n1" }]));
    const nodes = await unwrap(api.GET("/api/v1/nodes"));
    expect(nodes).toEqual([{ id: "n1" }]);
    expect(seen[0]!.headers.get("Authorization")).toBe("Bearer s3cret");
    expect(seen[0]!.headers.get("Accept")).toBe("application/json");
    expect(new URL(seen[0]!.url).pathname).toBe("/api/v1/nodes");
  });

  it("fills path and query parameters from the schema's names", async () => {
    const seen = serve(() => answer(200, { lines: [] }));
    await unwrap(api.GET("/api/v1/workloads/{id}/logs", { params: { path: { id: "a b" }, query: { tail: 200 } } }));
    const url = new URL(seen[0]!.url);
    expect(url.pathname).toBe("/api/v1/workloads/a%20b/logs");
    expect(url.search).toBe("?tail=200");
    expect(seen[0]!.headers.get("Authorization")).toBeNull();
  });

  it("throws the API's error code and message", async () => {
    serve(() => answer(409, { error: { code: "conflict", message: "the name is taken" } }));
    const err = await unwrap(api.POST("/api/v1/tenants", { body: { name: "a" } })).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect(err).toMatchObject({ status: 409, code: "conflict", message: "the name is taken" });
  });

  it("names the path and status when the error has no body", async () => {
    serve(() => new Response("upstream down", { status: 502 }));
    await expect(unwrap(api.GET("/api/v1/gpus"))).rejects.toMatchObject({ status: 502, code: "http_error", message: "/api/v1/gpus: HTTP 502" });
  });

  it("ends a refused session, but not on a failed sign-in", async () => {
    setToken("old");
    serve(() => answer(401, { error: { code: "unauthorized", message: "expired" } }));
    await expect(unwrap(api.POST("/api/v1/auth/login", { body: { email: "a", password: "b" } }))).rejects.toBeInstanceOf(ApiError);
    expect(token()).toBe("old");
    await expect(unwrap(api.GET("/api/v1/auth/me"))).rejects.toMatchObject({ status: 401 });
    expect(token()).toBeNull();
  });

  it("optional: null for a 4xx other than 401, the error otherwise", async () => {
    serve(() => answer(404, { error: { code: "not_found", message: "no such endpoint" } }));
    expect(await optional(api.GET("/api/v1/fleet/held-idle"))).toBeNull();
    serve(() => answer(500, { error: { code: "internal", message: "boom" } }));
    await expect(optional(api.GET("/api/v1/fleet/held-idle"))).rejects.toMatchObject({ status: 500 });
  });
});
