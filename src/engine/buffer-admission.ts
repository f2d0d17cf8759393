/**
 * What of a worker's batch of steps the buffer takes now. Pace (buffer-pace.ts) and the bound
 * on the bytes of rows waiting (buffer-bytes.ts) hold back new work, never work begun: when
 * either refuses the groups a batch would open, the rows of groups already begun are stored all
 * the same, and the 503 says how many were. Held back with the rest, they would keep their
 * groups from completing, and a worker whose batches each carry the end of one rollout and the
 * start of the next would be refused for ever: the oldest work, which is what holds pace back,
 * could never be consumed.
 */
import type { BufferState } from "./buffer-state";
import { bytesRefusal } from "./buffer-bytes";
import { paceRefusal } from "./buffer-pace";
import type { CheckedStep } from "./buffer-step-size";
import type { Failure } from "./reply";

export type Admitted = { take: CheckedStep[]; refusal: Failure | null };

export function admitSteps(s: BufferState, rows: CheckedStep[]): Admitted {
  const bytes = bytesRefusal(s, rows);
  // Rows more than the bound alone: no retry takes them, nor any part of the batch.
  if (bytes !== null && bytes.status === 413) return { take: [], refusal: bytes };
  if (bytes === null && s.config().staleness_policy !== "pace") return { take: rows, refusal: null };
  const opening = openingRows(s, rows);
  const refusal = bytes ?? paceRefusal(s, [...opening].map((r) => r.row));
  if (refusal === null) return { take: rows, refusal: null };
  const take = rows.filter((r) => !opening.has(r));
  if (take.length === 0) return { take, refusal };
  const stored = `${take.length} row${take.length === 1 ? "" : "s"} of groups already begun ${take.length === 1 ? "was" : "were"} stored: sent again, ${take.length === 1 ? "it is answered as a duplicate" : "they are answered as duplicates"}.`;
  return { take, refusal: { ...refusal, detail: `${refusal.detail} Its ${stored}` } };
}

/** The rows of sessions that belong to no group yet: they open one. A session restart_training discarded has its group still. */
function openingRows(s: BufferState, rows: readonly CheckedStep[]): Set<CheckedStep> {
  const begun = new Map<string, boolean>();
  const opening = new Set<CheckedStep>();
  for (const r of rows) {
    const { session_id, group_id } = r.row;
    let known = begun.get(session_id);
    if (known === undefined) begun.set(session_id, (known = s.groupOfRow(session_id, group_id) !== null));
    if (!known) opening.add(r);
  }
  return opening;
}
