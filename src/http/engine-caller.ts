/**
 * Who calls an engine route, before any operation is checked: the engine named in the path,
 * the caller (the deployment's admin, or the hash of an engine token, whose role and revocation
 * the engine itself checks) and the stub of the engine's Durable Object. One place for the
 * engine API and the runs API, which take tokens the same way.
 */
import type { Env } from "../env";
import type { Caller } from "../engine/caller";
import type { EngineObject } from "../engine/engine-object";
import { fail, ok, type Reply } from "../engine/reply";
import { EngineName } from "../protocol/admin";
import { hashToken } from "../auth/tokens";
import { requestToken } from "./path-token";
import { cachedEngineStub, engineStub } from "./engine-stub";

/** `origin` is the request's (scheme and host), for answers that name the exchange's own URLs. */
export type Credentials = { engine: string; caller: Caller; stub: DurableObjectStub<EngineObject>; origin: string };

const hashCache = new Map<string, string>();
/** Entries the cache holds before it starts over. */
const MAX_CACHED_TOKENS = 10_000;
/**
 * The longest token kept in the cache. The exchange's tokens are about 45 characters; a caller
 * may send any header, and unchecked ones (the cache is filled before the engine checks a
 * token) of 32 KB each would fill an isolate's 128 MB long before the count bound.
 */
const MAX_CACHED_TOKEN_CHARS = 256;

/** Token hashes are deterministic, so caching them is safe; revocation is checked by the engine. */
export async function hashAndCache(token: string): Promise<string> {
  const h = await hashToken(token);
  if (token.length > MAX_CACHED_TOKEN_CHARS) return h;
  if (hashCache.size >= MAX_CACHED_TOKENS) hashCache.clear();
  hashCache.set(token, h);
  return h;
}

/** The SHA-256 of a token, from the cache when it is there. */
export const cachedTokenHash = (token: string): string | undefined => hashCache.get(token);

/**
 * 404 for a malformed engine name, 401 without a token (bearer header or token in the path),
 * 404 for an engine that does not exist (its D1 row, read once per isolate: engine-stub.ts).
 */
export async function engineCaller(env: Env, engine: string, authorization: string | undefined, url: string): Promise<Reply<Credentials>> {
  if (!EngineName.safeParse(engine).success) return fail(404, "unknown_engine", `No such engine '${engine}'.`);
  const token = requestToken(authorization, url);
  if (token === null) {
    return fail(401, "missing_token", "This route needs a token: send `Authorization: Bearer <token>` or use the base URL /e/<engine>/t/<token>.");
  }
  // The admin is recognized by the hash of its token: comparing digests leaks nothing useful
  // through timing, and both hashes come from the cache, so no request hashes or loops over a
  // secret (a character loop here ran on every engine request).
  const hash = hashCache.get(token) ?? (await hashAndCache(token));
  const adminToken = env.ADMIN_TOKEN;
  const admin = adminToken !== undefined && adminToken !== "" && hash === (hashCache.get(adminToken) ?? (await hashAndCache(adminToken)));
  const caller: Caller = admin ? { admin: true } : { admin: false, tokenHash: hash };
  const stub = cachedEngineStub(env, engine) ?? (await engineStub(env, engine));
  if (stub === null) return fail(404, "unknown_engine", `No such engine '${engine}'.`);
  return ok({ engine, caller, stub, origin: new URL(url).origin });
}
