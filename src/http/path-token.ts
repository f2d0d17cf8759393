/**
 * The token-in-path form, `/e/<engine>/t/<token>/...`, for unmodified AgentJet clients that take
 * only a base URL. The router sees such a path without its `/t/<token>` part, so every route is
 * registered once (half the routes, and a table hono's RegExpRouter can compile instead of falling
 * back to its slower trie); handlers read the token back from the URL when no header carries one.
 */
import { getPath } from "hono/utils/url";

const TOKEN_IN_PATH = /^\/e\/([^/]+)\/t\/([^/]+)(\/.*)?$/;

/** Hono's `getPath`: the request's path with any `/t/<token>` after the engine name removed. */
export function routingPath(request: Request): string {
  const path = getPath(request);
  const m = TOKEN_IN_PATH.exec(path);
  return m ? `/e/${m[1]}${m[3] ?? ""}` : path;
}

/**
 * An engine operation's path without one trailing slash: the route it names (FastAPI's
 * redirect_slashes, which the seeds' clients follow; engine-routes.ts), counted as it (rate-limit.ts).
 */
export function withoutTrailingSlash(path: string): string {
  return path.length > 1 && path.endsWith("/") ? path.slice(0, -1) : path;
}

/** The token carried in the URL's path, or null. */
export function pathToken(url: string): string | null {
  // The path starts at the first "/" after the authority; only the path is searched, never the query.
  const start = url.indexOf("/", url.indexOf("//") + 2);
  if (start < 0) return null;
  const path = url.slice(start).split(/[?#]/, 1)[0] ?? "";
  return TOKEN_IN_PATH.exec(path)?.[2] ?? null;
}

/** The token a request carries: `Authorization: Bearer <token>` first, then the path form. */
export function requestToken(authorization: string | undefined, url: string): string | null {
  const m = authorization ? /^Bearer\s+(\S+)\s*$/i.exec(authorization) : null;
  return m?.[1] ?? pathToken(url);
}
