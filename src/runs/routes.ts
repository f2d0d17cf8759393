/**
 * Registers the training-runs API (RUNS_API) and the MCP endpoint under an engine's base URL,
 * in both forms: `/e/<engine>/...` with a bearer header and `/e/<engine>/t/<token>/...`.
 * Mounted before the engine routes, so these paths are answered here.
 */
import type { Context, Hono } from "hono";
import type { Env } from "../env";
import { tokenRefusal } from "../http/engine-routes";
import { readJson, readQuery } from "../http/validate";
import { RUNS_API, type RunRouteSpec } from "./api";
import { authorize, credentials, envOf, guarded } from "./context";
import { mcpHandler } from "./mcp/handler";
import type { Refused, RunsReply } from "./reply";

/** A refusal as JSON: `{error, detail}` plus its hints (e.g. `locked_value`, `available`). */
export function refusalJson(c: Context, r: Refused): Response {
  return c.json({ error: r.error, detail: r.detail, ...r.hints }, r.status);
}

function answer(c: Context, r: RunsReply<unknown>): Response {
  return r.ok ? c.json(r.body as object, 200) : refusalJson(c, r);
}

async function handle(c: Context, spec: RunRouteSpec): Promise<Response> {
  const who = await credentials(c);
  if ("ok" in who) return refusalJson(c, who);
  const ctx = await authorize(envOf(c), who, spec.op);
  if ("ok" in ctx) return refusalJson(c, ctx);
  const params: Record<string, string> = {};
  for (const [name, schema] of Object.entries(spec.params)) {
    const value = c.req.param(name) ?? "";
    const parsed = schema.safeParse(value);
    if (!parsed.success) return c.json({ error: "not_found", detail: `'${value}' is not a valid ${name}: ${parsed.error.issues[0]?.message ?? "bad format"}.` }, 404);
    params[name] = parsed.data;
  }
  const input = spec.input;
  const parsed = input.from === "body" ? await readJson(c, input.schema, input.emptyAs) : input.from === "query" ? readQuery(c, input.schema) : { ok: true as const, value: undefined };
  if (!parsed.ok) return parsed.response;
  return answer(c, await guarded(ctx, () => spec.handle(ctx, parsed.value, params)));
}

/** Registers the runs API and the MCP endpoint under `prefix` (`/e/:engine`; token-in-path URLs route the same: see http/path-token.ts). */
export function runRoutes<E extends { Bindings: Env }>(app: Hono<E>, prefix: string): void {
  for (const spec of RUNS_API) app.on(spec.method.toUpperCase(), `${prefix}${spec.path}`, (c) => handle(c, spec));
  app.post(`${prefix}/mcp`, (c) => mcpHandler(c));
  // Streamable HTTP lets a server decline the GET event stream and session ends with 405.
  // After the token check every path under an engine has (a 401 or 404 first).
  app.on(["GET", "DELETE"], `${prefix}/mcp`, async (c) => {
    const refused = await tokenRefusal(c.env, c.req.param("engine") ?? "", c.req.header("authorization"), c.req.url);
    return refused ?? c.json({ error: "method_not_allowed", detail: "This MCP endpoint answers POST only (no server-sent event stream, no sessions)." }, 405, { allow: "POST" });
  });
}
