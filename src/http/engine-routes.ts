/**
 * The engine API at /e/<engine>/... (bearer token) and /e/<engine>/t/<token>/... (token in the
 * base URL, for unmodified AgentJet clients that cannot send headers). Same paths and JSON as
 * AgentJet's swarm server. Each request costs one RPC to the engine's Durable Object, which
 * also checks the token: no D1 round trip on the hot path.
 *
 * These routes are served straight from the ENGINE_API table, before hono sees the request:
 * going through the router cost about 90 us of workerd CPU per request, about 8% of a
 * claim/end/register cycle (`npm run bench:ab`, BENCHMARKS.md), and workerd runs the Worker
 * and the engines on one thread. The answers are the router's: the same checks in the same
 * order (body size, engine name, token, input, then the engine).
 */
import type { Hono } from "hono";
import { tryDecodeURIComponent } from "hono/utils/url";
import type { Env } from "../env";
import { internalError, replyResponse } from "./errors";
import { readBodyText, tooLarge } from "./body";
import { checkQuery, parseJsonText } from "./validate";
import { ENGINE_API, type RouteSpec } from "./engine-api";
import { engineCaller, type Credentials } from "./engine-caller";
import type { EngineOp } from "../auth/roles";
import { isUnknownEngine, movedEngineStub } from "./engine-stub";
import { routingPath, withoutTrailingSlash } from "./path-token";
import { afterEngineOp, beforeEngineRead } from "../relay/claim-gates";

/** `/e/<engine>/<operation path>`, once a `/t/<token>` part has been taken out (path-token.ts). */
export const ENGINE_PATH = /^\/e\/([^/]+)(\/.+)$/;

const routes = new Map<string, RouteSpec>(ENGINE_API.map((s) => [`${s.method.toUpperCase()} ${s.path}`, s]));

/**
 * The route of a method and path. A path with one trailing slash is its route's too: FastAPI
 * (redirect_slashes, on in both seeds) answers `POST /claim_episode/` with a 307 to
 * `/claim_episode`, which requests and aiohttp follow with the body; served here directly, so
 * that httpx, which does not follow it, is served as well. Not for HEAD, which no client of the
 * seeds sends: unsafeHead refuses HEAD of a GET that changes state by its exact path only.
 */
function routeOf(sent: string, method: string, path: string): RouteSpec | undefined {
  const exact = routes.get(`${method} ${path}`);
  const route = withoutTrailingSlash(path);
  if (exact !== undefined || sent === "HEAD" || route === path) return exact;
  return routes.get(`${method} ${route}`);
}

/**
 * The answer to an engine API request, or null for any other request (hono serves those). A
 * HEAD is answered as its GET without the body, as hono does.
 */
export function serveEngineApi(request: Request, env: Env): Promise<Response> | null {
  const method = request.method === "HEAD" ? "GET" : request.method;
  if (method !== "GET" && method !== "POST") return null;
  // What hono would route on: the path without its query or token, percent-decoded.
  const m = ENGINE_PATH.exec(routingPath(request));
  const spec = m ? routeOf(request.method, method, m[2] ?? "") : undefined;
  if (m === null || spec === undefined) return null;
  const engine = tryDecodeURIComponent(m[1] ?? "");
  const answer = serve(request, env, engine, spec).catch(internalError);
  return request.method === "HEAD" ? answer.then((r) => new Response(null, r)) : answer;
}

async function serve(request: Request, env: Env, engine: string, spec: RouteSpec): Promise<Response> {
  const input = spec.input;
  const url = request.url;
  // The size is checked first, as the router's body limit did, before the token or the body is looked at.
  const text = input.from === "body" ? await readBodyText(request) : "";
  if (text === null) return tooLarge();
  const who = await engineCaller(env, engine, request.headers.get("authorization") ?? undefined, url);
  if (!who.ok) return replyResponse(who);
  const parsed =
    input.from === "body"
      ? parseJsonText(text, input.schema, input.emptyAs, input.unparsableAs)
      : input.from === "query"
        ? checkQuery(input.schema, url)
        : { ok: true as const, value: undefined };
  if (!parsed.ok) return (await refusedCaller(env, who.body, spec.op)) ?? parsed.response;
  if (spec.prepare !== undefined) parsed.value = spec.prepare(parsed.value, text);
  const { stub, caller } = who.body;
  if (spec.method === "get" || spec.op === "get_episode_buffer") await beforeEngineRead(env, engine);
  let reply = await spec.call(stub, caller, parsed.value, url);
  if (isUnknownEngine(reply)) {
    // The engine's object says it is none: deleted, or made again elsewhere since its route was read.
    const moved = await movedEngineStub(env, engine, stub);
    if (moved !== null) reply = await spec.call(moved, caller, parsed.value, url);
  }
  afterEngineOp(env, engine, spec.op, parsed.value, reply);
  if (spec.after !== undefined) {
    const after = await spec.after(env, engine, reply, parsed.value);
    if (after instanceof Response) return after;
    reply = after;
  }
  if (spec.text !== undefined && reply.ok && typeof reply.body === "string") return new Response(reply.body, { headers: { "content-type": spec.text } });
  return replyResponse(reply);
}

/**
 * Any other path under an engine (not the engine API, the runs API or the relay) is checked as
 * the engine's routes are before it is a 404: a malformed engine name is a 404, a missing
 * token a 401, and so is a token the engine does not know (revoked, or another engine's), so
 * that no path under an engine answers such a token differently from a route. That takes one
 * RPC to the engine, which holds the token hashes; a path that is no route is rare.
 */
export function engineRouteGate<E extends { Bindings: Env }>(app: Hono<E>, prefix: string): void {
  app.use(`${prefix}/*`, async (c, next) => {
    const refused = await tokenRefusal(c.env, c.req.param("engine") ?? "", c.req.header("authorization"), c.req.url);
    if (refused !== null) return refused;
    await next();
  });
}

/**
 * The 401 or 404 a request under an engine gets before anything else is looked at (a missing,
 * unknown or revoked token; no such engine), or null for a token of the engine, whatever its
 * role: every role may read the engine's status. One RPC to the engine.
 */
export async function tokenRefusal(env: Env, engine: string, authorization: string | undefined, url: string): Promise<Response | null> {
  const who = await engineCaller(env, engine, authorization, url);
  if (!who.ok) return replyResponse(who);
  return refusedCaller(env, who.body, "get_engine_status");
}

/**
 * The engine's 401 or 403 for the caller and `op` (an unknown or revoked token, a role the route
 * is not for), or null when it may. The engine checks the caller when it serves a request; a
 * request refused before it reaches the engine (its input) asks first, so that such a caller
 * is answered 401 or 403 whatever it sent, as on every path under an engine (docs/security.md):
 * one RPC, on the refusal path alone.
 */
export async function refusedCaller(env: Env, who: Credentials, op: EngineOp): Promise<Response | null> {
  let auth = await who.stub.authorizeOp(who.caller, op);
  if (isUnknownEngine(auth)) {
    const moved = await movedEngineStub(env, who.engine, who.stub);
    if (moved !== null) auth = await moved.authorizeOp(who.caller, op);
  }
  return auth.ok ? null : replyResponse(auth);
}
