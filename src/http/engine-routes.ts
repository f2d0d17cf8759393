/**
 * The engine API at /e/<engine>/... (bearer token) and /e/<engine>/t/<token>/... (token in the
 * base URL, for unmodified AgentJet clients that cannot send headers). Same paths and JSON as
 * AgentJet's swarm server. Each request costs one RPC to the engine's Durable Object, which
 * also checks the token: no D1 round trip on the hot path.
 */
import type { Hono } from "hono";
import type { Env } from "../env";
import { replyJson } from "./errors";
import { readJson, readQuery } from "./validate";
import { ENGINE_API, type EngineVars } from "./engine-api";
import { engineCaller } from "./engine-caller";

export type { EngineVars };

/** Registers the engine API under `prefix` (`/e/:engine`; the token-in-path form is routed the same: see path-token.ts). */
export function engineRoutes(app: Hono<{ Bindings: Env; Variables: EngineVars }>, prefix: string): void {
  app.use(`${prefix}/*`, async (c, next) => {
    const who = await engineCaller(c.env, c.req.param("engine") ?? "", c.req.header("authorization"), c.req.url);
    if (!who.ok) return replyJson(c, who);
    c.set("caller", who.body.caller);
    c.set("stub", who.body.stub);
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
