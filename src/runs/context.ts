/**
 * Who is calling and for which engine: the token (bearer header, or the base URL's path as
 * AgentJet-style clients carry it) becomes a Caller, and the engine's Durable Object checks it
 * for the operation in one RPC. Run state lives in D1, so after that check every operation
 * works on D1 and goes back to the engine only to queue a command for its agent.
 */
import type { Context } from "hono";
import { sql } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
import type { Env } from "../env";
import type { CallerRole } from "../engine/caller";
import type { EngineOp } from "../auth/roles";
import { engineCaller, type Credentials } from "../http/engine-caller";
import type { CommandBody } from "../protocol/commands";
import type { AgentStatus } from "../protocol/agent";
import type { ScanRecord } from "../engine/command-outcomes";
import type { Db, Statement } from "./config-store";
import { runsClock } from "./clock";
import type { LedgerConfig, UpdateLedgerConfigRequest } from "../protocol/ledger";
import { refuse, type Refused, type RunsReply } from "./reply";

export type RunsCtx = {
  db: Db;
  engine: string;
  /** Begins every batch of writes that adds rows of the engine's: see liveGuard. */
  live: Statement;
  role: CallerRole;
  /** The engine's own Atropos API (src/atropos), without a token: the agent puts its own in on the GPU host. */
  atroposUrl: string;
  /** Queues a command for the engine's agent, checked against `op` for this caller. */
  enqueue(op: EngineOp, body: CommandBody): Promise<{ ok: true; seq: number } | Refused>;
  /** The engine's side of the catalog: its agent and the last scan (see engine/command-outcomes.ts). */
  catalogState(): Promise<{ ok: true; agent: AgentStatus; scan: ScanRecord | null; now: number } | Refused>;
  /** Tells the engine the agent reported a catalog. */
  catalogReported(): Promise<void>;
  /** The engine's trajectory-ledger settings, read or changed (checked for this caller by the engine). */
  ledgerConfig(patch: UpdateLedgerConfigRequest | null): Promise<{ ok: true; body: LedgerConfig } | Refused>;
  now(): number;
};

/** The caller and engine of a request, before any operation is checked. */
export type { Credentials };

/** Hono's Context is generic in the app's variables; these routes need only its bindings. */
export const envOf = (c: Context): Env => c.env as Env;

export async function credentials(c: Context): Promise<Credentials | Refused> {
  const who = await engineCaller(envOf(c), c.req.param("engine") ?? "", c.req.header("authorization"), c.req.url);
  return who.ok ? who.body : refuse(who.status, who.error, who.detail);
}

/** What a batch stopped by liveGuard fails with: SQLite's "bad JSON path" names it. */
const ENGINE_GONE = "engine_gone_since_the_check";

/**
 * A statement that fails, and the D1 batch it begins with it (a batch is one transaction), when
 * the engine is no longer the one the caller was checked with at `checkedAt`: deleted, or made
 * again under its name since. A write checked with the engine's object just before a delete
 * would otherwise land after the delete looked for the engine's rows, and a new engine of the
 * name read them as its own (the ledger's writes hold the same condition: ledger/ingest.ts).
 */
function liveGuard(db: Db, engine: string, checkedAt: number): Statement {
  // A select of one row whatever the tables hold, so the path is always read.
  const check = sql`json_extract('{}', CASE WHEN EXISTS (SELECT 1 FROM engines WHERE name = ${engine} AND deleting_since IS NULL AND created_at <= ${checkedAt}) THEN '$' ELSE ${ENGINE_GONE} END)`;
  return db.select({ check }).from(sql`(SELECT 1)`);
}

/** Whether liveGuard stopped the batch `err` is the failure of (drizzle wraps D1's error as its cause). */
function stoppedByGuard(err: unknown): boolean {
  for (let e = err; e !== undefined && e !== null; e = (e as { cause?: unknown }).cause) if (String(e).includes(ENGINE_GONE)) return true;
  return false;
}

/** The operation's answer, or a 404 when liveGuard stopped its writes. */
export async function guarded<T>(ctx: RunsCtx, work: () => Promise<RunsReply<T>>): Promise<RunsReply<T>> {
  try {
    return await work();
  } catch (err) {
    if (!stoppedByGuard(err)) throw err;
    return refuse(404, "not_found", `Engine '${ctx.engine}' was deleted while this request ran; nothing was written.`);
  }
}

/** Checks `op` for the caller with the engine (one RPC) and builds the operation's context. */
export async function authorize(env: Env, who: Credentials, op: EngineOp): Promise<RunsCtx | Refused> {
  // Before the check: an engine made after it is not the one checked.
  const checkedAt = Date.now();
  const auth = await who.stub.authorizeOp(who.caller, op);
  if (!auth.ok) return refuse(auth.status, auth.error, auth.detail);
  const db = drizzle(env.DB);
  return {
    db,
    live: liveGuard(db, auth.body.engine, checkedAt),
    engine: auth.body.engine,
    role: auth.body.role,
    atroposUrl: `${who.origin}/e/${encodeURIComponent(auth.body.engine)}/atropos`,
    now: runsClock.now,
    enqueue: async (cmdOp, body) => {
      const r = await who.stub.enqueueFor(who.caller, cmdOp, body);
      return r.ok ? { ok: true, seq: r.body.seq } : refuse(r.status, r.error, r.detail);
    },
    catalogState: async () => {
      const r = await who.stub.catalogState(who.caller);
      return r.ok ? { ok: true, ...r.body } : refuse(r.status, r.error, r.detail);
    },
    catalogReported: async () => {
      await who.stub.catalogReported(who.caller);
    },
    ledgerConfig: async (patch) => {
      const r = patch === null ? await who.stub.ledgerConfig(who.caller) : await who.stub.configureLedger(who.caller, patch);
      return r.ok ? { ok: true, body: r.body } : refuse(r.status, r.error, r.detail);
    },
  };
}
