/**
 * The bytes of rows the rollout buffer holds, and of those kept only for re-reading the last
 * pulls; max_stored_bytes bounds the difference. Counters kept with every row stored, delivered
 * and deleted, so that no check reads the table; engines older than the counters had them
 * counted from their tables once, by a migration (schema.ts).
 */
import { formatBytes, isWellFormed, utf8Bytes } from "../protocol/limits";
import type { BufferState } from "./buffer-state";
import type { CheckedStep } from "./buffer-step-size";
import { fail, full, type Failure } from "./reply";

/** Seconds a worker whose batch found the buffer full waits: the trainer's pulls free it. */
export const BUFFER_FULL_RETRY_SECONDS = 5;

/** A stored row's bytes as SQLite holds its texts (UTF-8), the same figure rowBytes gives before it is stored. */
const STORED_ROW_BYTES = "length(CAST(messages AS BLOB)) + length(CAST(response AS BLOB)) + length(CAST(extra AS BLOB))";

/** Bytes of UTF-8 of a row's messages, response and extra fields, as the buffer stores them (STORED_ROW_BYTES). */
export function rowBytes(step: CheckedStep): number {
  return utf8Bytes(step.messages) + utf8Bytes(storedResponse(step.row.response)[0]) + utf8Bytes(step.extra);
}

/**
 * The response as buf_steps keeps it, and whether escaped: as its JSON when it holds a lone
 * surrogate (schema.ts, migration 21), else as it is, so that rows need no decoding.
 */
export function storedResponse(response: string): [string, number] {
  return isWellFormed(response) ? [response, 0] : [JSON.stringify(response), 1];
}

/** Moves both counters in one write: `held` bytes stored (negative: freed), `kept` of them kept for re-reads. */
function addBytes(s: BufferState, held: number, kept: number): void {
  if (held !== 0 || kept !== 0) s.bump((c) => ({ ...c, storedBytes: c.storedBytes + held, keptBytes: Math.max(0, c.keptBytes + kept) }));
}

/** Adds `n` bytes stored to the counter. */
export function addHeld(s: BufferState, n: number): void {
  addBytes(s, n, 0);
}

/** Deletes the rows `where` selects; returns their bytes. */
function deleted(s: BufferState, where: string, params: SqlStorageValue[]): number {
  let freed = 0;
  for (const r of s.sql.exec<{ b: number }>(`DELETE FROM buf_steps WHERE ${where} RETURNING ${STORED_ROW_BYTES} AS b`, ...params)) freed += r.b;
  return freed;
}

/** Deletes the steps `where` selects, none of them kept for re-reads, and their bytes from the counter. */
export function deleteSteps(s: BufferState, where: string, ...params: SqlStorageValue[]): void {
  addBytes(s, -deleted(s, where, params), 0);
}

/** Adds the rows of groups just delivered to the bytes kept for re-reads. */
export function keepDelivered(s: BufferState, groups: string[]): void {
  const added = s.sql
    .exec<{ b: number }>(`SELECT COALESCE(SUM(${STORED_ROW_BYTES}), 0) AS b FROM buf_steps WHERE group_id IN (SELECT value FROM json_each(?))`, JSON.stringify(groups))
    .one().b;
  addBytes(s, 0, added);
}

/** Deletes the rows of the groups delivered by pulls up to `cursor`, no longer kept for re-reads: their bytes leave both counters. */
export function deletePulled(s: BufferState, cursor: number): void {
  const freed = deleted(s, "group_id IN (SELECT group_id FROM buf_groups WHERE pull_cursor <= ?)", [cursor]);
  addBytes(s, -freed, -freed);
}

/**
 * Why a batch may not be stored for the bytes it adds, or null. The bound is on rows still
 * waiting to be pulled (pending and ready groups): those of delivered groups, kept for re-reads,
 * go only as later pulls deliver something, so counting them could refuse for ever. Only a batch
 * that opens a new group is refused 503 for it (its rows of groups already open are stored all the
 * same: buffer-admission.ts): rows of groups already open are taken, or pending
 * groups filling the bound (with the TTL off, for ever) could never complete and be pulled; the
 * engine-wide storage guard still bounds the object. Rows more than the bound alone are a 413,
 * which no pull would resolve. Rows stored before, and late ones for groups decided, add nothing.
 */
export function bytesRefusal(s: BufferState, rows: CheckedStep[]): Failure | null {
  const { max_stored_bytes: bound } = s.config();
  const { storedBytes, keptBytes } = s.counters();
  const waiting = Math.max(0, storedBytes - keptBytes);
  const sizes = rows.map(rowBytes);
  // Taking every row as new and opening a group gives the most the batch can add: when that
  // fits, what it really adds does too, and the queries per row (on every POST /steps) are spared.
  if (sizes.reduce((a, b) => a + b, 0) <= bound - waiting) return null;
  const seen = new Set<string>();
  let adding = 0;
  let opens = false;
  for (const [i, step] of rows.entries()) {
    const { session_id, step_index, group_id } = step.row;
    const key = JSON.stringify([session_id, step_index]);
    if (seen.has(key)) continue;
    seen.add(key);
    // The session's group: a row of a session restart_training discarded is late.
    const group = s.groupOfRow(session_id, group_id);
    if (group?.state === "delivered" || group?.state === "dropped") continue;
    if (s.sql.exec("SELECT 1 FROM buf_steps WHERE session_id = ? AND step_index = ?", session_id, step_index).toArray().length > 0) continue;
    adding += sizes[i]!;
    if (group === null) opens = true;
  }
  if (adding === 0) return null;
  if (adding > bound) {
    return fail(413, "payload_too_large", `These rows are ${formatBytes(adding)} (messages, response and extra fields); this buffer holds at most ${formatBytes(bound)} of rows (max_stored_bytes): send fewer rows per batch.`);
  }
  if (!opens) return null;
  if (waiting + adding <= bound) return null;
  s.bump((c) => ({ ...c, fullRefusals: c.fullRefusals + 1 }));
  return full(
    "buffer_full",
    `This buffer holds ${formatBytes(waiting)} of rows waiting to be pulled and opens no new group past ${formatBytes(bound)} of them (max_stored_bytes); these rows are ${formatBytes(adding)} and open a new group: none of its rows that open a new group was stored. Rows of groups already open are always taken. Room is made as the trainer pulls ready groups, as incomplete groups reach their TTL, or with restart_training; send the batch again then.`,
    BUFFER_FULL_RETRY_SECONDS,
  );
}
