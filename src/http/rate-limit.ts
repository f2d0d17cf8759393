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
 * A per-token count alone lets a caller who makes up a fresh token for every request ask the
 * engine without end (each made-up token has a full budget, and each costs the engine its token
 * check). So a token this isolate has not yet seen the engine accept for this engine also counts
 * against RATE_LIMIT_UNVERIFIED, keyed by the caller's address (`CF-Connecting-IP`, which
 * Cloudflare sets on every request; without it nothing is counted there). A token is accepted
 * when the engine answered it 2xx (every route under `/e/<engine>` checks its token first), and
 * forgotten when it is answered 401; a client's first request per isolate is the only one
 * that counts.
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

/** An engine route: the engine, and its operation path with `/e/<engine>` (and any `/t/<token>`) taken off; "" for `/e/<engine>` itself. */
const ENGINE_OP = /^\/e\/([^/]+)(\/.*)?$/;
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

/** `<engine> <token hash>` of the tokens this isolate saw an engine accept; bounded as the hash cache is. */
const accepted = new Set<string>();
const MAX_ACCEPTED = 10_000;

/** What to do with a counted request: refuse it, or serve it and pass its answer through `served`. */
export type Verdict = { refusal: Response; served?: never } | { refusal: null; served: (answer: Response) => Response };

/**
 * The verdict on a request that counts against a limit, or null (at once, no promise) for
 * one that counts against none.
 */
export function rateLimited(request: Request, env: Env): Promise<Verdict> | null {
  if (env.RATE_LIMIT_CLIENT === undefined && env.RATE_LIMIT_TRAINER === undefined && env.RATE_LIMIT_UNVERIFIED === undefined) return null;
  const path = routingPath(request);
  const m = ENGINE_OP.exec(path);
  if (m === null) return null;
  // Any other path under the engine with an engine token costs the engine its token check.
  const op = m[2] ?? "";
  // The relay's calls carry a per-claim key and never ask the engine about a token; its paths'
  // other methods go to the router, which does.
  if (relayRoute(request.method, path) !== null) return null;
  const token = requestToken(request.headers.get("authorization") ?? undefined, request.url);
  if (token === null) return null;
  const c = counter(env, ROLE_PREFIX.exec(token)?.[1], op, request.method);
  const address = env.RATE_LIMIT_UNVERIFIED === undefined ? null : request.headers.get("cf-connecting-ip");
  if (c === null && address === null) return null;
  return check(env, token, m[1]!, c, address);
}

const serveAsIs: Verdict = { refusal: null, served: (answer) => answer };

async function check(env: Env, token: string, engine: string, c: { limiter: RateLimit; suffix: string } | null, address: string | null): Promise<Verdict> {
  const hash = cachedTokenHash(token) ?? (await hashAndCache(token));
  const admin = env.ADMIN_TOKEN ? (cachedTokenHash(env.ADMIN_TOKEN) ?? (await hashAndCache(env.ADMIN_TOKEN))) : null;
  if (hash === admin) return serveAsIs;
  if (c !== null && !(await c.limiter.limit({ key: hash + c.suffix })).success) {
    return refusal(`This token sent more requests than its limit allows in ${RATE_LIMIT_PERIOD_SECONDS} s; retry after ${RATE_LIMIT_PERIOD_SECONDS} s. Limits are per token: give each client host its own token.`);
  }
  if (address === null || env.RATE_LIMIT_UNVERIFIED === undefined) return serveAsIs;
  const key = `${engine} ${hash}`;
  if (!accepted.has(key) && !(await env.RATE_LIMIT_UNVERIFIED.limit({ key: `address ${address}` })).success) {
    return refusal(
      `Too many requests from this address carried a token this exchange has not accepted yet (unknown, revoked, or new to it) in ${RATE_LIMIT_PERIOD_SECONDS} s; retry after ${RATE_LIMIT_PERIOD_SECONDS} s. Requests with a token the engine has accepted are not held back.`,
    );
  }
  return { refusal: null, served: (answer) => noteAnswer(key, answer) };
}

function noteAnswer(key: string, answer: Response): Response {
  if (answer.status === 401) accepted.delete(key);
  else if (answer.ok && !accepted.has(key)) {
    if (accepted.size >= MAX_ACCEPTED) accepted.clear();
    accepted.add(key);
  }
  return answer;
}

function refusal(detail: string): Verdict {
  const res = errorResponse(429, "rate_limited", detail);
  res.headers.set("retry-after", String(RATE_LIMIT_PERIOD_SECONDS));
  return { refusal: res };
}
