/**
 * HEAD on a GET that changes the engine's state (`x-changes-state` in the document: the agent's
 * command poll, Atropos's /batch, /status-env and /reset_data). HEAD is a safe method: link
 * checkers, uptime probes and `curl -I` send it freely, and a token in the URL authorises them.
 * Answered as its GET without the body, it would take a batch and throw it away, reset a run,
 * or lease the agent's commands. It is refused instead, once the engine has checked the caller
 * (no state is touched).
 */
import { tryDecodeURIComponent } from "hono/utils/url";
import { ATROPOS_API } from "../atropos/routes";
import type { Env } from "../env";
import { ENGINE_API } from "./engine-api";
import { ENGINE_PATH, tokenRefusal } from "./engine-routes";
import { errorResponse } from "./errors";
import { routingPath, withoutTrailingSlash } from "./path-token";

const UNSAFE_OPS = new Set([
  ...ENGINE_API.filter((s) => s.method === "get" && s.changesState).map((s) => s.path),
  ...ATROPOS_API.filter((s) => s.method === "GET" && s.changesState).map((s) => `/atropos${s.path}`),
]);

/**
 * The 405 for a HEAD of a GET that changes state, or null to serve the request. The caller is
 * checked first, as on every path under an engine (docs/security.md): without a token the
 * engine knows, the answer is its 401 or 404, and the route's existence is not told.
 */
export function unsafeHead(request: Request, env: Env): Promise<Response> | null {
  if (request.method !== "HEAD") return null;
  const m = ENGINE_PATH.exec(routingPath(request));
  const op = m?.[2];
  // With its one trailing slash too, which the GET serves as the route (FastAPI's redirect_slashes).
  if (m === null || op === undefined || !UNSAFE_OPS.has(withoutTrailingSlash(op))) return null;
  return refusedOr405(request, env, tryDecodeURIComponent(m[1] ?? ""), withoutTrailingSlash(op));
}

async function refusedOr405(request: Request, env: Env, engine: string, op: string): Promise<Response> {
  const refused = await tokenRefusal(env, engine, request.headers.get("authorization") ?? undefined, request.url);
  if (refused !== null) return refused;
  const res = errorResponse(405, "method_not_allowed", `GET ${op} changes the engine's state, so it is not answered to HEAD; send GET.`);
  res.headers.set("allow", "GET");
  return res;
}
