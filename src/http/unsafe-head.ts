/**
 * HEAD on a GET that changes the engine's state (`x-changes-state` in the document: the agent's
 * command poll, Atropos's /batch, /status-env and /reset_data). HEAD is a safe method: link
 * checkers, uptime probes and `curl -I` send it freely, and a token in the URL authorises them.
 * Answered as its GET without the body, it would take a batch and throw it away, reset a run,
 * or lease the agent's commands. It is refused instead, before any engine sees it.
 */
import { ATROPOS_API } from "../atropos/routes";
import { ENGINE_API } from "./engine-api";
import { ENGINE_PATH } from "./engine-routes";
import { errorResponse } from "./errors";
import { routingPath, withoutTrailingSlash } from "./path-token";

const UNSAFE_OPS = new Set([
  ...ENGINE_API.filter((s) => s.method === "get" && s.changesState).map((s) => s.path),
  ...ATROPOS_API.filter((s) => s.method === "GET" && s.changesState).map((s) => `/atropos${s.path}`),
]);

/** The 405 for a HEAD of a GET that changes state, or null to serve the request. */
export function unsafeHead(request: Request): Response | null {
  if (request.method !== "HEAD") return null;
  const op = ENGINE_PATH.exec(routingPath(request))?.[2];
  // With its one trailing slash too, which the GET serves as the route (FastAPI's redirect_slashes).
  if (op === undefined || !UNSAFE_OPS.has(withoutTrailingSlash(op))) return null;
  const res = errorResponse(405, "method_not_allowed", `GET ${withoutTrailingSlash(op)} changes the engine's state, so it is not answered to HEAD; send GET.`);
  res.headers.set("allow", "GET");
  return res;
}
