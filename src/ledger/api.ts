/**
 * The trajectory ledger's routes as data, like ENGINE_API and RUNS_API: method, path (below the
 * engine's base URL), operation (and so the roles), path parameters, input, answer, the refusals
 * each may give, and its handler. The router (routes.ts) and the OpenAPI paths (openapi.ts) are
 * both generated from this table.
 */
import type { Context } from "hono";
import { z } from "zod";
import type { EngineOp } from "../auth/roles";
import type { ErrorStatus, Refusal } from "../openapi/error-responses";
import {
  CallBatch,
  CallBatchResponse,
  MediaUpload,
  MediaUploadResponse,
  Trajectory,
  TrajectoryExportQuery,
  TrajectoryListQuery,
  TrajectoryListResponse,
  TrajectoryReadQuery,
  type TrajectoryExportQuery as ExportQuery,
  type TrajectoryForm,
  type TrajectoryListQuery as ListQuery,
} from "../protocol/ledger";
import { envOf } from "../runs/context";
import { errorResponse, jsonResponse } from "../http/errors";
import { loggedErrorId } from "../error-id";
import { recordCalls, utcDay } from "./ingest";
import type { ClaimName } from "./compaction";
import { exportTrajectories, TOTAL_HEADER } from "./export";
import { listTrajectories, readTrajectory, type ReadRefusal } from "./read";
import { trajectoryStream } from "./trajectory-json";
import { noneMatch, trajectoryTag } from "./trajectory-tag";
import { putMedia, readMedia } from "./media-store";
import { SHA256_HEX } from "./media-refs";

const DEFAULT_PAGE = 50;

/**
 * The engine the caller was authorized on (its name, and the incarnation its R2 keys carry), and
 * when that check began. `recheck` asks the engine again, for an answer that reads on long after
 * it began (the export's pages): null while the same caller may still do the same operation on the
 * same incarnation, else why not (the token was revoked, or the engine deleted and perhaps made
 * again under its name).
 */
export type Authorized = {
  engine: string;
  incarnation: string;
  checkedAt: number;
  recheck: () => Promise<string | null>;
  /** Tells the engine the claims a batch recorded calls of (their bodies are gathered once they are over: compaction.ts). */
  recorded: (claims: ClaimName[]) => Promise<void>;
};

export type LedgerInput = { from: "body"; schema: z.ZodType } | { from: "query"; schema: z.ZodType } | { from: "none" };

/**
 * A JSON body, JSON lines of one item schema (a stream, `application/x-ndjson`), or text as stored
 * (a medium). `etag`: the answer carries an ETag and is 304 to an If-None-Match that names it.
 * `headers`: the answer's own headers, by name: what each says, and the type of its value.
 */
export type LedgerAnswer =
  | { kind: "json"; schema: z.ZodType; etag?: true }
  | { kind: "lines"; item: z.ZodType; description: string; headers?: Record<string, { description: string; type: "integer" | "string" }> }
  | { kind: "text"; description: string };

/** A path parameter: its format, and what a value that does not fit is told (a 404: it names nothing). */
/** `notFound`: the 404's code; `passOn`: a value that does not fit is left to the next route that matches (another route's path). */
export type LedgerParam = { schema: z.ZodType<string>; description: string; refusal: (value: string) => string; notFound?: string; passOn?: boolean };

export type LedgerRouteSpec = {
  method: "get" | "post" | "put";
  /** Hono's form, below the engine's base URL: `/trajectories/:episode_uuid`. */
  path: string;
  op: EngineOp;
  summary: string;
  params: Record<string, LedgerParam>;
  input: LedgerInput;
  answer: LedgerAnswer;
  /**
   * Refusals besides 401, 403, 404 and 429 (which every route may give), each with when it
   * happens; a 404 here says more of it. A 503 is a refusal by design, its code marked in the
   * document (x-refusal-codes) so that a client knows to send the same request again.
   */
  refusals: Partial<Record<Exclude<ErrorStatus, 503>, string>> & { 503?: Refusal };
  handle: (c: Context, who: Authorized, input: unknown, params: Record<string, string>) => Promise<Response>;
};

const EpisodeParam: LedgerParam = {
  schema: z.string().min(1).max(512),
  description: "The episode's episode_uuid.",
  refusal: () => "An episode_uuid is 1 to 512 characters.",
};
/** The fence that names the episode's latest claim, as `/trajectories/<episode_uuid>` does: the way to read an episode named `export`. */
const LATEST = "latest";
const FenceParam: LedgerParam = {
  // Any fence a call may be recorded with (CallRecord: a safe integer), so that every claim can be named.
  schema: z
    .string()
    .regex(/^(0|[1-9][0-9]{0,15}|latest)$/, "a fence is a non-negative integer, or latest")
    .refine((s) => s === LATEST || Number.isSafeInteger(Number(s)), "a fence is at most 2^53 - 1"),
  description:
    "The claim's fence (each claim of an episode has its own): a non-negative integer up to 2^53 - 1, no leading zeros; or `latest`, the episode's latest claim (as without a fence: `/trajectories/export` is the export, `/trajectories/export/latest` the episode named export).",
  refusal: (value) => `'${value}' is not a fence: a fence is a non-negative integer, or latest.`,
};

const refusal = (r: ReadRefusal): Response => errorResponse(r.status, r.error, r.detail);

const UNKNOWN_TRAJECTORY = "`unknown_trajectory`: the engine has no call and no ended claim of this episode (and fence); or an unknown engine.";
const BAD_CURSOR = "`bad_cursor`: a cursor this exchange did not hand out, or one that pages another engine.";

async function postCalls(c: Context, who: Authorized, batch: CallBatch): Promise<Response> {
  try {
    const recorded = await recordCalls(envOf(c).DB, envOf(c).LEDGER, { name: who.engine, incarnation: who.incarnation, checkedAt: who.checkedAt }, batch, Date.now());
    if (recorded === null) return errorResponse(404, "unknown_engine", `Engine '${who.engine}' was deleted while this batch was being recorded; nothing of it is kept.`);
    if ("missingMedia" in recorded) return errorResponse(409, "media_missing", `The batch refers to media not stored today (${recorded.missingMedia.slice(0, 5).join(", ")}${recorded.missingMedia.length > 5 ? ", ..." : ""}): upload them (PUT agent/media/<sha256>), then send the batch again; nothing of it is kept.`);
    await noteClaims(who, batch);
    return jsonResponse(recorded, 200);
  } catch (e) {
    // D1 or R2 failed: nothing of the batch is lost, the gateway keeps it and sends it again.
    const id = loggedErrorId("ledger: recording a batch failed, error", e);
    return errorResponse(503, "ledger_unavailable", `The ledger could not store this batch now (error id ${id}); send it again later.`);
  }
}

/**
 * The engine is told which claims the batch holds calls of. The batch is stored whatever happens
 * here: a claim the engine is not told of is only never gathered into one object (compaction.ts).
 */
async function noteClaims(who: Authorized, batch: CallBatch): Promise<void> {
  const claims = new Map<string, ClaimName>();
  for (const c of batch.calls) claims.set(`${c.fence}\n${c.episode_uuid}`, { episode: c.episode_uuid, fence: c.fence });
  try {
    await who.recorded([...claims.values()]);
  } catch (e) {
    loggedErrorId("ledger: telling the engine which claims a batch recorded failed (they stay in the batch's object), error", e);
  }
}

async function list(c: Context, who: Authorized, q: ListQuery): Promise<Response> {
  const { cursor, limit, ...filters } = q;
  const page = await listTrajectories(envOf(c).DB, who.engine, filters, cursor, limit ?? DEFAULT_PAGE);
  return "ok" in page ? refusal(page) : jsonResponse(page, 200);
}

async function exportAll(c: Context, who: Authorized, q: ExportQuery): Promise<Response> {
  const { cursor, format: _format, form, ...filters } = q;
  const exported = await exportTrajectories(envOf(c).DB, envOf(c).LEDGER, who.engine, filters, cursor, form ?? "whole", who.recheck);
  if ("ok" in exported) return refusal(exported);
  return new Response(exported.stream, {
    status: 200,
    headers: { "content-type": "application/x-ndjson; charset=utf-8", "cache-control": "no-store", [TOTAL_HEADER]: String(exported.total) },
  });
}

/**
 * Asked again and again while its claim is live (the dashboard's refresh), and it grows with the
 * square of the claim's length: a reader that holds the current answer is told so (304) after one
 * D1 query, without the rest of D1, R2 or the rebuild. `no-cache`: a cache may keep it, but asks
 * each time, since a live claim's answer changes.
 */
async function one(c: Context, who: Authorized, params: Record<string, string>, form: TrajectoryForm): Promise<Response> {
  const fenceText = params["fence"];
  const episode = params["episode_uuid"] as string;
  const fence = fenceText === undefined || fenceText === LATEST ? null : Number(fenceText);
  const tag = await trajectoryTag(envOf(c).DB, { name: who.engine, incarnation: who.incarnation }, episode, fence, form);
  const headers: Record<string, string> = tag === null ? {} : { etag: tag, "cache-control": "private, no-cache" };
  if (tag !== null && noneMatch(c.req.header("if-none-match"), tag)) return new Response(null, { status: 304, headers });
  const t = await readTrajectory(envOf(c).DB, envOf(c).LEDGER, who.engine, episode, fence, form);
  // Sent a call at a time: one string of a long episode's whole conversations may not fit the isolate.
  return "ok" in t ? refusal(t) : new Response(trajectoryStream(t), { status: 200, headers: { "content-type": "application/json", ...headers } });
}

const MediaParam: LedgerParam = {
  schema: z.string().regex(SHA256_HEX),
  description: "The medium's SHA-256 (of the string's UTF-8 bytes), 64 lowercase hex digits: what follows `rx-media:sha256:` in a reference.",
  refusal: (value) => `'${value.slice(0, 80)}' is not a SHA-256: 64 lowercase hex digits.`,
  notFound: "unknown_media",
};

async function uploadMedia(c: Context, who: Authorized, body: MediaUpload, sha256: string): Promise<Response> {
  try {
    const stored = await putMedia(envOf(c).LEDGER, { name: who.engine, incarnation: who.incarnation }, sha256, body.data, utcDay(Date.now()));
    return stored.ok ? jsonResponse({ sha256, bytes: stored.bytes }, 200) : errorResponse(stored.status, stored.error, stored.detail);
  } catch (e) {
    const id = loggedErrorId("ledger: storing a medium failed, error", e);
    return errorResponse(503, "ledger_unavailable", `The ledger could not store this medium now (error id ${id}); send it again later.`);
  }
}

async function media(c: Context, who: Authorized, sha256: string): Promise<Response> {
  const data = await readMedia(envOf(c).LEDGER, { name: who.engine, incarnation: who.incarnation }, sha256);
  if (data === null) return errorResponse(404, "unknown_media", `Engine '${who.engine}' holds no medium ${sha256}: never stored, or removed with its days by retention.`);
  return new Response(data, { status: 200, headers: { "content-type": "text/plain; charset=utf-8", "cache-control": "private, max-age=86400, immutable" } });
}

/** A route that reads one trajectory: the episode's latest claim, or the one its fence names. */
const oneTrajectory = (path: string, summary: string, params: Record<string, LedgerParam>): LedgerRouteSpec => ({
  method: "get",
  path,
  op: "read_trajectories",
  summary,
  params,
  input: { from: "query", schema: TrajectoryReadQuery },
  answer: { kind: "json", schema: Trajectory, etag: true },
  refusals: { 404: UNKNOWN_TRAJECTORY, 422: "A form or parameter the query does not take." },
  handle: (c, who, q, p) => one(c, who, p, (q as TrajectoryReadQuery).form ?? "whole"),
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
      409: "`media_missing`: the batch refers to media (`rx-media:sha256:<hex>`) not stored for today: upload them, then send the batch again; nothing of it is kept.",
      413: "The batch is larger than the exchange accepts (4 MiB), or a value in it is over its limit.",
      422: "The batch does not match CallBatch; nothing of it is recorded.",
      503: { code: "ledger_unavailable", when: "D1 or R2 could not store the batch now; nothing is lost, send the same batch again later." },
    },
    handle: (c, who, batch) => postCalls(c, who, batch as CallBatch),
  },
  {
    method: "put",
    path: "/agent/media/:sha256",
    op: "agent_record_calls",
    summary:
      "The gateway's upload of one medium (a content part's `data:` URL or audio) taken out of recorded messages, stored once a UTC day by its SHA-256: a batch whose messages say `rx-media:sha256:<hex>` is stored only once its media are. Idempotent.",
    params: { sha256: MediaParam },
    input: { from: "body", schema: MediaUpload },
    answer: { kind: "json", schema: MediaUploadResponse },
    refusals: {
      400: "Malformed JSON.",
      404: "`unknown_media`: the path's digest is not 64 lowercase hex digits.",
      413: "`media_too_large`: the medium is over 12,000,000 bytes (the gateway keeps such a one inline); or `payload_too_large`: the body is over 12 MiB.",
      422: "`media_hash_mismatch`: the data's SHA-256 is not the path's; or the body does not match MediaUpload. Nothing is stored.",
      503: { code: "ledger_unavailable", when: "R2 could not store it now; send it again later." },
    },
    handle: (c, who, body, p) => uploadMedia(c, who, body as MediaUpload, p["sha256"] as string),
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
    summary: "Every trajectory the filters pass, newest first, as JSON lines (one Trajectory a line, whole or in its delta form), streamed: memory stays flat whatever the size.",
    params: {},
    input: { from: "query", schema: TrajectoryExportQuery },
    answer: {
      kind: "lines",
      item: Trajectory,
      description: "JSON lines: one Trajectory (its calls included, in the form asked for) per line, each ended by a newline.",
      headers: {
        [TOTAL_HEADER]: { description: "How many trajectories pass the filters, whatever the cursor: the size of the whole export, for a progress bar.", type: "integer" },
        "Cache-Control": { description: "`no-store`: the export is read as it streams, never kept.", type: "string" },
      },
    },
    refusals: { 400: BAD_CURSOR, 422: "A filter, format, form or parameter the query does not take." },
    handle: (c, who, q) => exportAll(c, who, q as ExportQuery),
  },
  // Before `/trajectories/:episode_uuid/:fence`, which would otherwise also match it (a digest is no fence).
  {
    method: "get",
    path: "/trajectories/media/:sha256",
    op: "read_trajectories",
    summary:
      "One medium a trajectory's messages refer to as `rx-media:sha256:<hex>`: the string the client sent in its place (a `data:` URL, audio's base64), exactly, as text.",
    // Not a digest: `/trajectories/media/<fence>` is the episode named "media", read by the route below.
    params: { sha256: { ...MediaParam, passOn: true } },
    input: { from: "none" },
    answer: { kind: "text", description: "The medium's string exactly as the client sent it (UTF-8 text)." },
    refusals: { 404: "`unknown_media`: the engine holds no such medium (never stored, or removed by retention). A path that is no digest is read as an episode's (`unknown_trajectory`)." },
    handle: (c, who, _i, p) => media(c, who, p["sha256"] as string),
  },
  oneTrajectory("/trajectories/:episode_uuid", "An episode's trajectory, of its latest claim: its calls in order with their messages (and token ids), whole or in the delta form, its reward and how the claim ended.", {
    episode_uuid: EpisodeParam,
  }),
  oneTrajectory("/trajectories/:episode_uuid/:fence", "The trajectory of one claim of an episode (its fence).", { episode_uuid: EpisodeParam, fence: FenceParam }),
];
