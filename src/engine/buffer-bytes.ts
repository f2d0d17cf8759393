/**
 * The bytes of rows the rollout buffer holds, and of those kept only for re-reading the last
 * pulls; max_stored_bytes bounds the difference. Counters kept with every row stored, delivered
 * and deleted, so that no check reads the table. Engines whose counters were saved before them
 * count their table once.
 */
import { formatBytes, utf8Bytes } from "../protocol/limits";
import type { BufferState } from "./buffer-state";
import type { CheckedStep } from "./buffer-step-size";
import { fail, full, type Failure } from "./reply";

/** Seconds a worker whose batch found the buffer full waits: the trainer's pulls free it. */
export const BUFFER_FULL_RETRY_SECONDS = 5;

/** A stored row's bytes as SQLite holds its texts (UTF-8), the same figure rowBytes gives before it is stored. */
const STORED_ROW_BYTES = "length(CAST(messages AS BLOB)) + length(CAST(response AS BLOB)) + length(CAST(extra AS BLOB))";

/** Bytes of UTF-8 of a row's messages, response and extra fields, as the buffer stores them. */
export function rowBytes(step: CheckedStep): number {
  return utf8Bytes(step.messages) + utf8Bytes(step.row.response) + utf8Bytes(step.extra);
}

/** The bytes held: the counter, or for an engine that never kept it, its table counted now and the counter set. */
export function heldBytes(s: BufferState): number {
  const kept = s.counters().storedBytes;
  if (kept !== null) return kept;
  const counted = s.sql.exec<{ b: number }>(`SELECT COALESCE(SUM(${STORED_ROW_BYTES}), 0) AS b FROM buf_steps`).one().b;
  s.bump((c) => ({ ...c, storedBytes: counted }));
  return counted;
}

/** Adds `n` bytes stored (negative: freed) to the counter. */
export function addHeld(s: BufferState, n: number): void {
  const held = heldBytes(s);
  if (n !== 0) s.bump((c) => ({ ...c, storedBytes: held + n }));
}

/** Deletes the steps `where` selects, and their bytes from the counter; returns the bytes freed. */
export function deleteSteps(s: BufferState, where: string, ...params: SqlStorageValue[]): number {
  const held = heldBytes(s);
  let freed = 0;
  for (const r of s.sql.exec<{ b: number }>(`DELETE FROM buf_steps WHERE ${where} RETURNING ${STORED_ROW_BYTES} AS b`, ...params)) freed += r.b;
  if (freed !== 0) s.bump((c) => ({ ...c, storedBytes: held - freed }));
  return freed;
}

/**
 * The bytes of delivered groups' rows, kept for re-reads: the counter, or for an engine that never
 * kept it, its table counted now. A pull counts it before it marks groups delivered, or it would
 * count their rows twice.
 */
export function keptBytes(s: BufferState): number {
  const kept = s.counters().keptBytes;
  if (kept !== null) return kept;
  const counted = s.sql
    .exec<{ b: number }>(`SELECT COALESCE(SUM(${STORED_ROW_BYTES}), 0) AS b FROM buf_steps WHERE group_id IN (SELECT group_id FROM buf_groups WHERE state = 'delivered')`)
    .one().b;
  s.bump((c) => ({ ...c, keptBytes: counted }));
  return counted;
}

/** Adds the rows of groups just delivered to the bytes kept for re-reads. */
export function keepDelivered(s: BufferState, groups: string[]): void {
  const kept = keptBytes(s);
  let added = 0;
  for (const id of groups) added += s.sql.exec<{ b: number }>(`SELECT COALESCE(SUM(${STORED_ROW_BYTES}), 0) AS b FROM buf_steps WHERE group_id = ?`, id).one().b;
  if (added !== 0) s.bump((c) => ({ ...c, keptBytes: kept + added }));
}

/** Takes `freed` bytes of rows no longer kept for re-reads off their count. */
export function releaseKept(s: BufferState, freed: number): void {
  const kept = keptBytes(s);
  if (freed !== 0) s.bump((c) => ({ ...c, keptBytes: Math.max(0, kept - freed) }));
}

/**
 * Why a batch may not be stored for the bytes it adds, or null. The bound is on rows still
 * waiting to be pulled (pending and ready groups): those of delivered groups, kept for re-reads,
 * go only as later pulls deliver something, so counting them could refuse for ever. Only a batch
 * that opens a new group is refused 503 for it: rows of groups already open are taken, or pending
 * groups filling the bound (with the TTL off, for ever) could never complete and be pulled; the
 * engine-wide storage guard still bounds the object. Rows more than the bound alone are a 413,
 * which no pull would resolve. Rows stored before, and late ones for groups decided, add nothing.
 */
export function bytesRefusal(s: BufferState, rows: CheckedStep[]): Failure | null {
  const { max_stored_bytes: bound } = s.config();
  const seen = new Set<string>();
  let adding = 0;
  let opens = false;
  for (const step of rows) {
    const { session_id, step_index, group_id } = step.row;
    const key = JSON.stringify([session_id, step_index]);
    if (seen.has(key)) continue;
    seen.add(key);
    const group = s.group(group_id);
    if (group?.state === "delivered" || group?.state === "dropped") continue;
    if (s.sql.exec("SELECT 1 FROM buf_steps WHERE session_id = ? AND step_index = ?", session_id, step_index).toArray().length > 0) continue;
    adding += rowBytes(step);
    if (group === null) opens = true;
  }
  if (adding === 0) return null;
  if (adding > bound) {
    return fail(413, "payload_too_large", `These rows are ${formatBytes(adding)} (messages, response and extra fields); this buffer holds at most ${formatBytes(bound)} of rows (max_stored_bytes): send fewer rows per batch.`);
  }
  if (!opens) return null;
  const waiting = Math.max(0, heldBytes(s) - keptBytes(s));
  if (waiting + adding <= bound) return null;
  s.bump((c) => ({ ...c, fullRefusals: c.fullRefusals + 1 }));
  return full(
    "buffer_full",
    `This buffer holds ${formatBytes(waiting)} of rows waiting to be pulled and opens no new group past ${formatBytes(bound)} of them (max_stored_bytes); these rows are ${formatBytes(adding)} and open a new group: nothing was stored. Rows of groups already open are always taken. Room is made as the trainer pulls ready groups, as incomplete groups reach their TTL, or with restart_training; send the batch again then.`,
    BUFFER_FULL_RETRY_SECONDS,
  );
}
