/**
 * The bytes of rows the rollout buffer holds, which its config's max_stored_bytes bounds: a
 * counter kept with every row stored and deleted, so that no check reads the table. Engines
 * whose counters were saved before it count their table once.
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

/** Deletes the steps `where` selects, and their bytes from the counter. */
export function deleteSteps(s: BufferState, where: string, ...params: SqlStorageValue[]): void {
  const held = heldBytes(s);
  let freed = 0;
  for (const r of s.sql.exec<{ b: number }>(`DELETE FROM buf_steps WHERE ${where} RETURNING ${STORED_ROW_BYTES} AS b`, ...params)) freed += r.b;
  if (freed !== 0) s.bump((c) => ({ ...c, storedBytes: held - freed }));
}

/**
 * Why a batch may not be stored for the bytes it adds, or null: the rows it would store (not
 * those stored before, nor late ones for groups decided) passing max_stored_bytes with what is
 * held is a 503 that a pull resolves; more than the bound alone is a 413, which none would.
 */
export function bytesRefusal(s: BufferState, rows: CheckedStep[]): Failure | null {
  const { max_stored_bytes: bound } = s.config();
  const seen = new Set<string>();
  let adding = 0;
  for (const step of rows) {
    const { session_id, step_index, group_id } = step.row;
    const key = JSON.stringify([session_id, step_index]);
    if (seen.has(key)) continue;
    seen.add(key);
    const state = s.group(group_id)?.state;
    if (state === "delivered" || state === "dropped") continue;
    if (s.sql.exec("SELECT 1 FROM buf_steps WHERE session_id = ? AND step_index = ?", session_id, step_index).toArray().length > 0) continue;
    adding += rowBytes(step);
  }
  if (adding === 0) return null;
  if (adding > bound) {
    return fail(413, "payload_too_large", `These rows are ${formatBytes(adding)} (messages, response and extra fields); this buffer holds at most ${formatBytes(bound)} of rows (max_stored_bytes): send fewer rows per batch.`);
  }
  const held = heldBytes(s);
  if (held + adding <= bound) return null;
  s.bump((c) => ({ ...c, fullRefusals: c.fullRefusals + 1 }));
  return full(
    "buffer_full",
    `This buffer holds ${formatBytes(held)} of rows and takes at most ${formatBytes(bound)} (max_stored_bytes); these rows are ${formatBytes(adding)}: nothing was stored. Rows go as the trainer pulls their groups (and those of its last pulls as it pulls again) or as incomplete groups reach their TTL; send the batch again then.`,
    BUFFER_FULL_RETRY_SECONDS,
  );
}
