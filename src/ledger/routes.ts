/**
 * The trajectory ledger's routes under an engine's base URL (bearer header or token in the path):
 * the gateway's batches of recorded calls, and the trajectories read back, one, a page, or all of
 * them as JSON lines. The engine's Durable Object checks the caller (one RPC, no D1 read); the
 * records themselves are D1's and R2's, and the engine's object never carries them.
 */
import type { Context, Hono } from "hono";
import type { Env } from "../env";
import { z } from "zod";
import { envOf } from "../runs/context";
import type { EngineOp } from "../auth/roles";
import { engineCaller } from "../http/engine-caller";
import { errorResponse, jsonResponse, replyResponse } from "../http/errors";
import { readJson, readQuery } from "../http/validate";
import { CallBatch, TrajectoryExportQuery, TrajectoryListQuery } from "../protocol/ledger";
import { recordCalls } from "./ingest";
import { exportTrajectories, TOTAL_HEADER } from "./export";
import { listTrajectories, readTrajectory, type ReadRefusal } from "./read";

const DEFAULT_PAGE = 50;
const EpisodeParam = z.string().min(1).max(512);
const FenceParam = z.string().regex(/^(0|[1-9][0-9]{0,14})$/, "a fence is a non-negative integer");

type Authorized = { engine: string; incarnation: string };

/** The caller checked for `op` by the engine, or the refusal to answer with. */
async function authorized(c: Context, op: EngineOp): Promise<Authorized | Response> {
  const who = await engineCaller(envOf(c), c.req.param("engine") ?? "", c.req.header("authorization"), c.req.url);
  if (!who.ok) return replyResponse(who);
  const auth = await who.body.stub.authorizeOp(who.body.caller, op);
  if (!auth.ok) return replyResponse(auth);
  return { engine: auth.body.engine, incarnation: auth.body.incarnation };
}

const refusal = (r: ReadRefusal): Response => errorResponse(r.status, r.error, r.detail);

async function postCalls(c: Context): Promise<Response> {
  const who = await authorized(c, "agent_record_calls");
  if (who instanceof Response) return who;
  const batch = await readJson(c, CallBatch);
  if (!batch.ok) return batch.response;
  try {
    return jsonResponse(await recordCalls(envOf(c).DB, envOf(c).LEDGER, { name: who.engine, incarnation: who.incarnation }, batch.value, Date.now()), 200);
  } catch (e) {
    // D1 or R2 failed: nothing of the batch is lost, the gateway keeps it and sends it again.
    console.error("ledger: recording a batch failed", e);
    return errorResponse(503, "ledger_unavailable", `The ledger could not store this batch now (${e instanceof Error ? e.message : String(e)}); send it again later.`);
  }
}

async function list(c: Context): Promise<Response> {
  const who = await authorized(c, "read_trajectories");
  if (who instanceof Response) return who;
  const q = readQuery(c, TrajectoryListQuery);
  if (!q.ok) return q.response;
  const { cursor, limit, ...filters } = q.value;
  const page = await listTrajectories(envOf(c).DB, who.engine, filters, cursor, limit ?? DEFAULT_PAGE);
  return "ok" in page ? refusal(page) : jsonResponse(page, 200);
}

async function exportAll(c: Context): Promise<Response> {
  const who = await authorized(c, "read_trajectories");
  if (who instanceof Response) return who;
  const q = readQuery(c, TrajectoryExportQuery);
  if (!q.ok) return q.response;
  const { cursor, format: _format, ...filters } = q.value;
  const exported = await exportTrajectories(envOf(c).DB, envOf(c).LEDGER, who.engine, filters, cursor);
  if ("ok" in exported) return refusal(exported);
  return new Response(exported.stream, {
    status: 200,
    headers: { "content-type": "application/x-ndjson; charset=utf-8", "cache-control": "no-store", [TOTAL_HEADER]: String(exported.total) },
  });
}

async function one(c: Context): Promise<Response> {
  const who = await authorized(c, "read_trajectories");
  if (who instanceof Response) return who;
  const episode = EpisodeParam.safeParse(c.req.param("episode_uuid"));
  if (!episode.success) return errorResponse(404, "unknown_trajectory", "An episode_uuid is 1 to 512 characters.");
  const fenceText = c.req.param("fence");
  let fence: number | null = null;
  if (fenceText !== undefined) {
    const f = FenceParam.safeParse(fenceText);
    if (!f.success) return errorResponse(404, "unknown_trajectory", `'${fenceText}' is not a fence: a fence is a non-negative integer.`);
    fence = Number(f.data);
  }
  const t = await readTrajectory(envOf(c).DB, envOf(c).LEDGER, who.engine, episode.data, fence);
  return "ok" in t ? refusal(t) : jsonResponse(t, 200);
}

/** Registers the ledger's routes under `prefix` (`/e/:engine`; token-in-path URLs route the same: http/path-token.ts). */
export function ledgerRoutes<E extends { Bindings: Env }>(app: Hono<E>, prefix: string): void {
  app.post(`${prefix}/agent/calls`, postCalls);
  app.get(`${prefix}/trajectories`, list);
  app.get(`${prefix}/trajectories/export`, exportAll);
  app.get(`${prefix}/trajectories/:episode_uuid`, one);
  app.get(`${prefix}/trajectories/:episode_uuid/:fence`, one);
}
