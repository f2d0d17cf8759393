/**
 * The engine API at /e/<engine>/... (bearer token) and /e/<engine>/t/<token>/... (token in the
 * base URL, for unmodified AgentJet clients that cannot send headers). Same paths and JSON as
 * AgentJet's swarm server. Each request costs one RPC to the engine's Durable Object, which
 * also checks the token: no D1 round trip on the hot path.
 */
import type { Hono } from "hono";
import type { Env } from "../env";
import { EngineName } from "../protocol/admin";
import { constantTimeEqual, hashToken } from "../auth/tokens";
import { errorJson, replyJson } from "./errors";
import { readJson, readQuery } from "./validate";
import { ENGINE_API, type EngineVars } from "./engine-api";
import { requestToken } from "./path-token";

export type { EngineVars };

const hashCache = new Map<string, string>();

/** Token hashes are deterministic, so caching them is safe; revocation is checked by the engine. */
async function cachedHash(token: string): Promise<string> {
  let h = hashCache.get(token);
  if (h === undefined) {
    if (hashCache.size > 10_000) hashCache.clear();
    h = await hashToken(token);
    hashCache.set(token, h);
  }
  return h;
}

/** Registers the engine API under `prefix` (`/e/:engine`; the token-in-path form is routed the same: see path-token.ts). */
export function engineRoutes(app: Hono<{ Bindings: Env; Variables: EngineVars }>, prefix: string): void {
  app.use(`${prefix}/*`, async (c, next) => {
    const engine = c.req.param("engine") ?? "";
    if (!EngineName.safeParse(engine).success) return errorJson(c, 404, "unknown_engine", `No such engine '${engine}'.`);
    const token = requestToken(c.req.header("authorization"), c.req.url);
    if (token === null) {
      return errorJson(c, 401, "missing_token", "This route needs a token: send `Authorization: Bearer <token>` or use the base URL /e/<engine>/t/<token>.");
    }
    const admin = c.env.ADMIN_TOKEN !== undefined && c.env.ADMIN_TOKEN !== "" && constantTimeEqual(token, c.env.ADMIN_TOKEN);
    c.set("caller", admin ? { admin: true } : { admin: false, tokenHash: await cachedHash(token) });
    c.set("stub", c.env.ENGINE.get(c.env.ENGINE.idFromName(engine)));
    await next();
  });

  for (const spec of ENGINE_API) {
    app.on(spec.method.toUpperCase(), `${prefix}${spec.path}`, async (c) => {
      const input = spec.input;
      const parsed = input.from === "body" ? await readJson(c, input.schema, input.emptyAs) : input.from === "query" ? readQuery(c, input.schema) : { ok: true as const, value: undefined };
      if (!parsed.ok) return parsed.response;
      return replyJson(c, await spec.call(c.get("stub"), c.get("caller"), parsed.value, c));
    });
  }
}
