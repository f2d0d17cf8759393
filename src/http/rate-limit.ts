/**
 * Per-token request limits on the engine routes, so that one runaway client cannot starve an
 * engine of its Durable Object's time. The counters are Cloudflare's rate limiting bindings
 * (wrangler.toml `[[ratelimits]]`), one counter per token, keyed by the token's hash; which
 * limit applies is read off the token's role prefix (`rx_<role>_`, auth/tokens.ts), with no
 * lookup: a token that claims a role it does not have is refused by the engine anyway.
 *
 * - client, operator and viewer tokens count against RATE_LIMIT_CLIENT, except a client's
 *   `end_episode` and `abort_episode` POSTs, which count apart (under the same limit): a client
 *   held back on its claims still hands in the episodes it holds, and no client ends more than
 *   it claimed.
 * - trainer tokens count against RATE_LIMIT_TRAINER, and the agent's channel (`/agent/...`,
 *   `/runs/agent/...`) apart from the rest, so a busy trainer process that shares the agent's
 *   token cannot starve its polls and acks. Clients never touch the trainer's counters.
 * - the admin token, requests without a token (refused with 401 later) and LLM calls (the
 *   relay's routes, by method and path: their calls carry a per-claim key, not a token) are not
 *   counted. Any other request under `/e/<engine>`, unknown paths, a relay path's other methods
 *   and `/e/<engine>` itself included, is: the engine checks its token before it answers even a 404.
 *
 * A refused request gets 429 with `Retry-After` and the usual error body, before it costs a
 * Durable Object call. A deployment without the bindings limits nothing.
 */
import type { Env } from "../env";
import { errorResponse } from "./errors";
import { cachedTokenHash, hashAndCache } from "./engine-caller";
import { requestToken, routingPath, withoutTrailingSlash } from "./path-token";
import { relayRoute } from "../relay/relay-routes";

/** The bindings' period in wrangler.toml: a refused token has a fresh count at most this long after. */
export const RATE_LIMIT_PERIOD_SECONDS = 10;

/** The operation path of an engine route, `/e/<engine>` (and any `/t/<token>`) taken off; "" for `/e/<engine>` itself. */
const ENGINE_OP = /^\/e\/[^/]+(\/.*)?$/;
const ROLE_PREFIX = /^rx_(operator|trainer|client|viewer)_/;
/** A client's ends and aborts: POSTs only, as a GET there is neither (and costs the engine its token check before its 404). */
const COUNTED_APART = new Set(["/end_episode", "/abort_episode"]);

function counter(env: Env, role: string | undefined, op: string, method: string): { limiter: RateLimit; suffix: string } | null {
  if (role === "trainer") {
    if (env.RATE_LIMIT_TRAINER === undefined) return null;
    return { limiter: env.RATE_LIMIT_TRAINER, suffix: op.startsWith("/agent/") || op.startsWith("/runs/agent/") ? ":agent" : "" };
  }
  if (env.RATE_LIMIT_CLIENT === undefined) return null;
  return { limiter: env.RATE_LIMIT_CLIENT, suffix: role === "client" && method === "POST" && COUNTED_APART.has(withoutTrailingSlash(op)) ? ":end" : "" };
}

/**
 * The 429 for a request over its token's limit, or null to serve it. Null at once (no promise)
 * for requests that are not counted.
 */
export function rateLimited(request: Request, env: Env): Promise<Response | null> | null {
  if (env.RATE_LIMIT_CLIENT === undefined && env.RATE_LIMIT_TRAINER === undefined) return null;
  const path = routingPath(request);
  const m = ENGINE_OP.exec(path);
  if (m === null) return null;
  // Any other path under the engine with an engine token costs the engine its token check.
  const op = m[1] ?? "";
  // The relay's calls carry a per-claim key and never ask the engine about a token; its paths'
  // other methods go to the router, which does.
  if (relayRoute(request.method, path) !== null) return null;
  const token = requestToken(request.headers.get("authorization") ?? undefined, request.url);
  if (token === null) return null;
  const c = counter(env, ROLE_PREFIX.exec(token)?.[1], op, request.method);
  if (c === null) return null;
  return check(env, token, c.limiter, c.suffix);
}

async function check(env: Env, token: string, limiter: RateLimit, suffix: string): Promise<Response | null> {
  const hash = cachedTokenHash(token) ?? (await hashAndCache(token));
  const admin = env.ADMIN_TOKEN ? (cachedTokenHash(env.ADMIN_TOKEN) ?? (await hashAndCache(env.ADMIN_TOKEN))) : null;
  if (hash === admin) return null;
  if ((await limiter.limit({ key: hash + suffix })).success) return null;
  const res = errorResponse(
    429,
    "rate_limited",
    `This token sent more requests than its limit allows in ${RATE_LIMIT_PERIOD_SECONDS} s; retry after ${RATE_LIMIT_PERIOD_SECONDS} s. Limits are per token: give each client host its own token.`,
  );
  res.headers.set("retry-after", String(RATE_LIMIT_PERIOD_SECONDS));
  return res;
}
