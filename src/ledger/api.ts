/**
 * The trajectory ledger's routes as data, like ENGINE_API and RUNS_API: method, path (below the
 * engine's base URL), operation (and so the roles), path parameters, input, answer, the refusals
 * each may give, and its handler. The router (routes.ts) and the OpenAPI paths (openapi.ts) are
 * both generated from this table.
 */
import type { Context } from "hono";
import { z } from "zod";
import type { EngineOp } from "../auth/roles";
import type { ErrorStatus } from "../openapi/error-responses";
import {
  CallBatch,
  CallBatchResponse,
  Trajectory,
  TrajectoryExportQuery,
  TrajectoryListQuery,
  TrajectoryListResponse,
  type TrajectoryExportQuery as ExportQuery,
  type TrajectoryListQuery as ListQuery,
} from "../protocol/ledger";
import { envOf } from "../runs/context";
import { errorResponse, jsonResponse } from "../http/errors";
import { loggedErrorId } from "../error-id";
import { recordCalls } from "./ingest";
import { exportTrajectories, TOTAL_HEADER } from "./export";
import { listTrajectories, readTrajectory, type ReadRefusal } from "./read";

const DEFAULT_PAGE = 50;

/** The engine the caller was authorized on (its name, and the incarnation its R2 keys carry), and when that check began. */
export type Authorized = { engine: string; incarnation: string; checkedAt: number };

export type LedgerInput = { from: "body"; schema: z.ZodType } | { from: "query"; schema: z.ZodType } | { from: "none" };

/** A JSON body, or JSON lines of one item schema (a stream, `application/x-ndjson`). */
export type LedgerAnswer = { kind: "json"; schema: z.ZodType } | { kind: "lines"; item: z.ZodType; description: string };

/** A path parameter: its format, and what a value that does not fit is told (a 404: it names nothing). */
export type LedgerParam = { schema: z.ZodType<string>; description: string; refusal: (value: string) => string };

export type LedgerRouteSpec = {
  method: "get" | "post";
  /** Hono's form, below the engine's base URL: `/trajectories/:episode_uuid`. */
  path: string;
  op: EngineOp;
  summary: string;
  params: Record<string, LedgerParam>;
  input: LedgerInput;
  answer: LedgerAnswer;
  /** Refusals besides 401, 403, 404 and 429 (which every route may give), each with when it happens; a 404 here says more of it. */
  refusals: Partial<Record<ErrorStatus, string>>;
  handle: (c: Context, who: Authorized, input: unknown, params: Record<string, string>) => Promise<Response>;
};

const EpisodeParam: LedgerParam = {
  schema: z.string().min(1).max(512),
  description: "The episode's episode_uuid.",
  refusal: () => "An episode_uuid is 1 to 512 characters.",
};
const FenceParam: LedgerParam = {
  // Any fence a call may be recorded with (CallRecord: a safe integer), so that every claim can be named.
  schema: z
    .string()
    .regex(/^(0|[1-9][0-9]{0,15})$/, "a fence is a non-negative integer")
    .refine((s) => Number.isSafeInteger(Number(s)), "a fence is at most 2^53 - 1"),
  description: "The claim's fence (each claim of an episode has its own): a non-negative integer up to 2^53 - 1, no leading zeros.",
  refusal: (value) => `'${value}' is not a fence: a fence is a non-negative integer.`,
};

const refusal = (r: ReadRefusal): Response => errorResponse(r.status, r.error, r.detail);

const UNKNOWN_TRAJECTORY = "`unknown_trajectory`: the engine has no call and no ended claim of this episode (and fence); or an unknown engine.";
const BAD_CURSOR = "`bad_cursor`: a cursor this exchange did not hand out, or one that pages another engine.";

async function postCalls(c: Context, who: Authorized, batch: CallBatch): Promise<Response> {
  try {
    const recorded = await recordCalls(envOf(c).DB, envOf(c).LEDGER, { name: who.engine, incarnation: who.incarnation, checkedAt: who.checkedAt }, batch, Date.now());
    if (recorded === null) return errorResponse(404, "unknown_engine", `Engine '${who.engine}' was deleted while this batch was being recorded; nothing of it is kept.`);
    return jsonResponse(recorded, 200);
  } catch (e) {
    // D1 or R2 failed: nothing of the batch is lost, the gateway keeps it and sends it again.
    const id = loggedErrorId("ledger: recording a batch failed, error", e);
    return errorResponse(503, "ledger_unavailable", `The ledger could not store this batch now (error id ${id}); send it again later.`);
  }
}

async function list(c: Context, who: Authorized, q: ListQuery): Promise<Response> {
  const { cursor, limit, ...filters } = q;
  const page = await listTrajectories(envOf(c).DB, who.engine, filters, cursor, limit ?? DEFAULT_PAGE);
  return "ok" in page ? refusal(page) : jsonResponse(page, 200);
}

async function exportAll(c: Context, who: Authorized, q: ExportQuery): Promise<Response> {
  const { cursor, format: _format, ...filters } = q;
  const exported = await exportTrajectories(envOf(c).DB, envOf(c).LEDGER, who.engine, filters, cursor);
  if ("ok" in exported) return refusal(exported);
  return new Response(exported.stream, {
    status: 200,
    headers: { "content-type": "application/x-ndjson; charset=utf-8", "cache-control": "no-store", [TOTAL_HEADER]: String(exported.total) },
  });
}

async function one(c: Context, who: Authorized, params: Record<string, string>): Promise<Response> {
  const fence = params["fence"];
  const t = await readTrajectory(envOf(c).DB, envOf(c).LEDGER, who.engine, params["episode_uuid"] as string, fence === undefined ? null : Number(fence));
  return "ok" in t ? refusal(t) : jsonResponse(t, 200);
}

/** A route that reads one trajectory: the episode's latest claim, or the one its fence names. */
const oneTrajectory = (path: string, summary: string, params: Record<string, LedgerParam>): LedgerRouteSpec => ({
  method: "get",
  path,
  op: "read_trajectories",
  summary,
  params,
  input: { from: "none" },
  answer: { kind: "json", schema: Trajectory },
  refusals: { 404: UNKNOWN_TRAJECTORY },
  handle: (c, who, _i, p) => one(c, who, p),
});

export const LEDGER_API: LedgerRouteSpec[] = [
  {
    method: "post",
    path: "/agent/calls",
    op: "agent_record_calls",
    summary: "The gateway's batch of recorded LLM calls: index rows to D1, bodies to R2. A resent batch (the same batch_id) records each call once.",
    params: {},
    input: { from: "body", schema: CallBatch },
    answer: { kind: "json", schema: CallBatchResponse },
    refusals: {
      400: "Malformed JSON.",
      413: "The batch is larger than the exchange accepts (4 MiB), or a value in it is over its limit.",
      422: "The batch does not match CallBatch; nothing of it is recorded.",
      503: "`ledger_unavailable`: D1 or R2 could not store the batch now; nothing is lost, send the same batch again later.",
    },
    handle: (c, who, batch) => postCalls(c, who, batch as CallBatch),
  },
  {
    method: "get",
    path: "/trajectories",
    op: "read_trajectories",
    summary: "Trajectory summaries (one per claim that ended), newest first, filtered, a page at a time: pass next_cursor back as cursor.",
    params: {},
    input: { from: "query", schema: TrajectoryListQuery },
    answer: { kind: "json", schema: TrajectoryListResponse },
    refusals: { 400: BAD_CURSOR, 422: "A filter, limit or parameter the query does not take." },
    handle: (c, who, q) => list(c, who, q as ListQuery),
  },
  // Before `/trajectories/:episode_uuid`, which would otherwise also match it.
  {
    method: "get",
    path: "/trajectories/export",
    op: "read_trajectories",
    summary: "Every trajectory the filters pass, newest first, as JSON lines (one whole Trajectory a line), streamed: memory stays flat whatever the size.",
    params: {},
    input: { from: "query", schema: TrajectoryExportQuery },
    answer: { kind: "lines", item: Trajectory, description: "JSON lines: one whole Trajectory (its calls included) per line, each ended by a newline." },
    refusals: { 400: BAD_CURSOR, 422: "A filter, format or parameter the query does not take." },
    handle: (c, who, q) => exportAll(c, who, q as ExportQuery),
  },
  oneTrajectory("/trajectories/:episode_uuid", "An episode's trajectory, of its latest claim: its calls in order with whole messages (and token ids), its reward and how the claim ended.", {
    episode_uuid: EpisodeParam,
  }),
  oneTrajectory("/trajectories/:episode_uuid/:fence", "The trajectory of one claim of an episode (its fence).", { episode_uuid: EpisodeParam, fence: FenceParam }),
];
