/**
 * The trajectory ledger's routes (LEDGER_API) under an engine's base URL (bearer header or token
 * in the path): the gateway's batches of recorded calls, and the trajectories read back, one, a
 * page, or all of them as JSON lines. The engine's Durable Object checks the caller (one RPC, no
 * D1 read); the records themselves are D1's and R2's, and the engine's object never carries them.
 */
import type { Context, Hono, Next } from "hono";
import type { Env } from "../env";
import { envOf } from "../runs/context";
import type { EngineOp } from "../auth/roles";
import { engineCaller } from "../http/engine-caller";
import { engineStub } from "../http/engine-stub";
import { errorResponse, replyResponse } from "../http/errors";
import { readJson, readQuery } from "../http/validate";
import { LEDGER_API, type Authorized, type LedgerRouteSpec } from "./api";
import type { ClaimName } from "./compaction";

/** The caller checked for `op` by the engine, or the refusal to answer with. */
async function authorized(c: Context, op: EngineOp): Promise<Authorized | Response> {
  const who = await engineCaller(envOf(c), c.req.param("engine") ?? "", c.req.header("authorization"), c.req.url);
  if (!who.ok) return replyResponse(who);
  const checkedAt = Date.now();
  const { stub, caller } = who.body;
  const auth = await stub.authorizeOp(caller, op);
  if (!auth.ok) return replyResponse(auth);
  const { engine, incarnation } = auth.body;
  const env = envOf(c);
  // For answers that read on after they began (the export, before each page). A stub made afresh
  // each time, from the kept route (no I/O; a D1 read once a minute when the route is read
  // again): the first stub's instance is reset when its engine is deleted and made again in the
  // same object, and every call on it then throws; a fresh one reaches whatever engine holds the
  // name now, which refuses the caller or answers another incarnation.
  const recheck = async (): Promise<string | null> => {
    const now = await engineStub(env, engine);
    if (now === null) return `unknown_engine: engine '${engine}' was deleted.`;
    const again = await now.authorizeOp(caller, op);
    if (!again.ok) return `${again.error}: ${again.detail}`;
    // The admin's token passes on any engine: only the incarnation tells the engine deleted and made again.
    if (again.body.incarnation !== incarnation) return `unknown_engine: engine '${engine}' was deleted; an engine of that name now is another one.`;
    return null;
  };
  const recorded = async (claims: ClaimName[]): Promise<void> => {
    const told = await stub.ledgerRecorded(caller, incarnation, claims);
    if (!told.ok) throw new Error(`${told.error}: ${told.detail}`);
  };
  return { engine, incarnation, checkedAt, recheck, recorded };
}

/** The caller first, then the path's parameters (a value that does not fit names nothing: 404), then the input. */
async function handle(c: Context, spec: LedgerRouteSpec, next: Next): Promise<Response | void> {
  for (const [name, param] of Object.entries(spec.params)) if (param.passOn === true && !param.schema.safeParse(c.req.param(name) ?? "").success) return next();
  const who = await authorized(c, spec.op);
  if (who instanceof Response) return who;
  const params: Record<string, string> = {};
  for (const [name, param] of Object.entries(spec.params)) {
    const value = c.req.param(name) ?? "";
    const parsed = param.schema.safeParse(value);
    if (!parsed.success) return errorResponse(404, param.notFound ?? "unknown_trajectory", param.refusal(value));
    params[name] = parsed.data;
  }
  const input = spec.input;
  const parsed = input.from === "body" ? await readJson(c, input.schema) : input.from === "query" ? readQuery(c, input.schema) : { ok: true as const, value: undefined };
  if (!parsed.ok) return parsed.response;
  return spec.handle(c, who, parsed.value, params);
}

/** Registers the ledger's routes under `prefix` (`/e/:engine`; token-in-path URLs route the same: http/path-token.ts). */
export function ledgerRoutes<E extends { Bindings: Env }>(app: Hono<E>, prefix: string): void {
  for (const spec of LEDGER_API) app.on(spec.method.toUpperCase(), `${prefix}${spec.path}`, (c, next) => handle(c, spec, next));
}
