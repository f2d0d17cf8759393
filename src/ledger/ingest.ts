/**
 * Recording a batch of calls from an engine's gateway: their bodies as one R2 object (a line of
 * JSON each), their index rows in D1 in one statement. A resent batch (the same batch_id and
 * calls, after a lost answer or a D1 failure) writes the same object again and inserts nothing
 * twice: the rows are keyed by call id, and a row is only written after its body is stored. A
 * batch naming media (`rx-media:sha256:<hex>`) is stored only when its day holds them (media-store.ts).
 */
import type { CallBatch, CallBatchResponse } from "../protocol/ledger";
import { D1_MAX_ROW_BYTES, utf8Bytes } from "../protocol/limits";
import { jsonArrays } from "../db/json-arrays";
import { bodyPrefix } from "./keys";
import { hex } from "../auth/tokens";
import { mediaRefsOf } from "./media-refs";
import { missingMedia } from "./media-store";

const enc = new TextEncoder();

/** The D1 row of a call, in llm_calls' column names (the insert reads them with json_extract). */
export type IndexRow = {
  call_id: string;
  episode_uuid: string;
  fence: number;
  run: number;
  client_uuid: string;
  task_id: string;
  episode_type: string | null;
  endpoint: string;
  model: string;
  stream: number;
  weight_version: number | null;
  admitted_at: number;
  started_at: number;
  first_byte_at: number | null;
  done_at: number;
  status: number;
  error: string | null;
  finish_reason: string | null;
  prompt_tokens: number | null;
  completion_tokens: number | null;
  cached_tokens: number | null;
  reasoning_tokens: number | null;
  truncated: number;
  body_offset: number;
  body_length: number;
};

const COLUMNS: (keyof IndexRow)[] = [
  "call_id",
  "episode_uuid",
  "fence",
  "run",
  "client_uuid",
  "task_id",
  "episode_type",
  "endpoint",
  "model",
  "stream",
  "weight_version",
  "admitted_at",
  "started_at",
  "first_byte_at",
  "done_at",
  "status",
  "error",
  "finish_reason",
  "prompt_tokens",
  "completion_tokens",
  "cached_tokens",
  "reasoning_tokens",
  "truncated",
  "body_offset",
  "body_length",
];

/** Bytes of JSON bound to one statement: half of what D1 holds in one value. */
const CHUNK_BYTES = D1_MAX_ROW_BYTES / 2;

/**
 * The engine is still the one its caller was checked with: its row is there, not being deleted,
 * and was made no later than the check (?1 its name, `checkedAt` the parameter of the check's time). The caller is checked
 * with the engine's object before the batch is written; a delete (forced, while the agent runs)
 * and a new engine under the name can come in between, and the rows would then be written
 * after the delete looked for them, and read as the new engine's (fences start over in it).
 */
const liveSql = (checkedAt: string): string => `EXISTS (SELECT 1 FROM engines WHERE name = ?1 AND deleting_since IS NULL AND created_at <= ${checkedAt})`;

/**
 * The batch's rows as bound JSON parameters (D1 takes 100 parameters a statement, and a batch
 * has up to 500 calls of 24 columns), as the engine's outbox does (db/json-arrays.ts): one per
 * chunk (rowChunks).
 */
const INSERT_SQL = `WITH r(v) AS MATERIALIZED (SELECT value FROM json_each(?3))
  INSERT INTO llm_calls (engine, body_key, ${COLUMNS.join(", ")})
  SELECT ?1, ?2, ${COLUMNS.map((c) => `json_extract(v, '$.${c}')`).join(", ")} FROM r WHERE ${liveSql("?4")}
  ON CONFLICT DO NOTHING`;

/**
 * Whether a stored row of the batch's calls (?3) names the object ?2, under engine ?1 or one of
 * its archives. The names as one list, so that each row is found by its key (engine, call_id):
 * with an OR, the engine's and its archives' every call was read.
 */
const NAMED_SQL = `SELECT 1 FROM llm_calls WHERE engine IN (SELECT ?1 UNION ALL SELECT name FROM archives WHERE from_engine = ?1)
  AND call_id IN (SELECT value FROM json_each(?3)) AND body_key = ?2 LIMIT 1`;

/**
 * The object's name carries its content's digest as well as the batch id: a batch id that comes
 * again with other calls (a gateway that reuses ids) must not overwrite the object the first
 * batch's rows point into, at offsets that would then cut another body. A true resend has the
 * same content, so the same name, and writes the same bytes again.
 */
export async function digestOf(bytes: Uint8Array): Promise<string> {
  return hex(new Uint8Array(await crypto.subtle.digest("SHA-256", bytes)).subarray(0, 8));
}

/** The UTC day of `ms`, as R2 keys and retention name it. */
export const utcDay = (ms: number): string => new Date(ms).toISOString().slice(0, 10);

/** The engine a batch is recorded for, and when its caller was checked with the engine's object. */
export type RecordingEngine = { name: string; incarnation: string; checkedAt: number };

/** A batch not stored because media it refers to are not stored for its day (media-store.ts): upload them, then send it again. */
export type MediaMissing = { missingMedia: string[] };

/**
 * The batch's outcome; null when the engine was deleted since its caller was checked (nothing is
 * kept); the media it names that its day does not hold (nothing is kept either).
 */
export async function recordCalls(db: D1Database, bucket: R2Bucket, engine: RecordingEngine, batch: CallBatch, now: number): Promise<CallBatchResponse | MediaMissing | null> {
  const refs = new Set<string>();
  for (const c of batch.calls) for (const d of mediaRefsOf(c.body.messages)) refs.add(d);
  if (refs.size > 0) {
    const missing = await missingMedia(bucket, engine, refs, utcDay(now));
    if (missing.length > 0) return { missingMedia: missing };
  }
  const lines: Uint8Array[] = [];
  const rows: IndexRow[] = [];
  let offset = 0;
  for (const c of batch.calls) {
    const line = enc.encode(`${JSON.stringify(c.body)}\n`);
    lines.push(line);
    rows.push({
      call_id: c.call_id,
      episode_uuid: c.episode_uuid,
      fence: c.fence,
      run: c.run,
      client_uuid: c.client_uuid,
      task_id: c.task_id,
      episode_type: c.episode_type ?? null,
      endpoint: c.endpoint,
      model: c.model,
      stream: c.stream ? 1 : 0,
      weight_version: c.weight_version,
      admitted_at: c.admitted_at,
      started_at: c.started_at,
      first_byte_at: c.first_byte_at,
      done_at: c.done_at,
      status: c.status,
      error: c.error,
      finish_reason: c.finish_reason,
      prompt_tokens: c.usage?.prompt_tokens ?? null,
      completion_tokens: c.usage?.completion_tokens ?? null,
      cached_tokens: c.usage?.cached_tokens ?? null,
      reasoning_tokens: c.usage?.reasoning_tokens ?? null,
      truncated: c.truncated ? 1 : 0,
      body_offset: offset,
      body_length: line.length,
    });
    offset += line.length;
  }
  const object = new Uint8Array(offset);
  let at = 0;
  for (const line of lines) {
    object.set(line, at);
    at += line.length;
  }
  const key = `${bodyPrefix(engine.name, engine.incarnation)}${utcDay(now)}/${batch.batch_id}-${await digestOf(object)}.jsonl`;
  await bucket.put(key, object, { httpMetadata: { contentType: "application/x-ndjson" } });
  const statements = rowChunks(rows).map((json) => db.prepare(INSERT_SQL).bind(engine.name, key, json, engine.checkedAt));
  // One batch is one transaction: the rows of a batch are recorded together or not at all.
  const results = await db.batch(statements);
  const recorded = results.reduce((n, r) => n + r.meta.changes, 0);
  if (recorded < rows.length && (await db.prepare(`SELECT ${liveSql("?2")} AS live`).bind(engine.name, engine.checkedAt).first<{ live: number }>())?.live !== 1) {
    // The delete has listed the engine's objects already, or will not find this one's rows. But a
    // resend writes the object its first store wrote (same day, same bytes): while rows of that
    // store name it, under the engine's name or a keep_history archive's, it stays.
    const named = await db.prepare(NAMED_SQL).bind(engine.name, key, JSON.stringify(rows.map((r) => r.call_id))).first();
    if (named === null) await bucket.delete(key);
    return null;
  }
  return { recorded, duplicates: rows.length - recorded };
}

/**
 * The rows as JSON arrays of at most CHUNK_BYTES each: 500 rows are ~300 KB as calls usually go,
 * but their text fields (an error of 2,000 characters that escape to 6 bytes each) can make
 * them 6 MB, and a batch refused for its size would be sent again for ever, holding back every
 * batch behind it.
 */
export const rowChunks = (rows: readonly IndexRow[]): string[] => jsonArrays(rows.map((r) => JSON.stringify(r)), CHUNK_BYTES, utf8Bytes);
