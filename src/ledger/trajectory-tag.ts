/**
 * The entity tag of a trajectory's answer, from one D1 query over the index and before any R2
 * read, so that a reader that holds the answer already (the dashboard watching a live claim) is
 * told 304 instead of being sent its whole conversations again: a claim of an hour grows past
 * 10 MB, and the dashboard asks for it every few seconds.
 *
 * What the answer is built from, and how each part can change (src/ledger/read.ts):
 * - the fence: the path's, or the episode's latest (a new claim of it moves it);
 * - the claim's `trajectories` row: written once when the claim ends (the outbox's second insert
 *   of it is a no-op), removed only with the engine's history, so its id stands for all of it;
 * - its calls, the first MAX_CALLS_PER_TRAJECTORY in order, and how many there are in all (the
 *   answer says so past the bound): rows are inserted once (ON CONFLICT DO NOTHING) and never
 *   updated, and removed by retention (in chunks of rows, not in the answer's order) or all
 *   together (a deleted engine). The count changes with any insertion or removal, and the sums
 *   of their row ids, admission and end times and body lengths with one removed and another
 *   recorded: not the row ids alone, since SQLite gives a new row one more than the highest id
 *   present, which is a removed row's own when that row was the table's newest (a late batch's
 *   call). Their R2 bodies go with or after their rows; a gathering moves a row's body (its key
 *   and offset, which the tag leaves out), not the body;
 * - the engine's incarnation: an engine made again under the name starts its fences over.
 */
import { hex } from "../auth/tokens";
import type { TrajectoryForm } from "../protocol/ledger";
import { CALL_ORDER, LATEST_FENCE_SQL, MAX_CALLS_PER_TRAJECTORY } from "./read";

/**
 * The answers' version. Raised when the same rows come to be answered otherwise (read.ts,
 * trajectory-json.ts), so that what a reader held before a deploy is not confirmed after it.
 */
const ANSWER_VERSION = 3;

type TagRow = { fence: number | null; row_id: number | null; calls: number; sums: string; first_call: string | null; last_call: string | null };

const TAG_SQL = `WITH f(fence) AS (SELECT COALESCE(?3, (${LATEST_FENCE_SQL}))),
     w AS (SELECT call_id, rowid AS r, admitted_at, done_at, body_length, ROW_NUMBER() OVER (ORDER BY ${CALL_ORDER}) AS n
         FROM llm_calls WHERE engine = ?1 AND episode_uuid = ?2 AND fence = (SELECT fence FROM f))
  SELECT (SELECT fence FROM f) AS fence,
    (SELECT id FROM trajectories WHERE engine = ?1 AND episode_uuid = ?2 AND fence = (SELECT fence FROM f)) AS row_id,
    (SELECT COUNT(*) FROM w) AS calls,
    (SELECT TOTAL(r) || ' ' || TOTAL(admitted_at) || ' ' || TOTAL(done_at) || ' ' || TOTAL(body_length) FROM w) AS sums,
    (SELECT call_id FROM w WHERE n = 1) AS first_call,
    (SELECT call_id FROM w WHERE n <= ${MAX_CALLS_PER_TRAJECTORY} ORDER BY n DESC LIMIT 1) AS last_call`;

/**
 * The strong ETag (quoted) of the trajectory `fence` names (the latest when null) in `form`, or null when
 * the engine holds nothing of it (the read answers 404). Taken before the trajectory is read: a
 * call recorded in between makes the answer newer than its tag, so the reader's next request
 * finds the tag changed and reads again; the other order could confirm an answer that is stale.
 */
export async function trajectoryTag(db: D1Database, engine: { name: string; incarnation: string }, episode: string, fence: number | null, form: TrajectoryForm): Promise<string | null> {
  const r = await db.prepare(TAG_SQL).bind(engine.name, episode, fence).first<TagRow>();
  if (r === null || r.fence === null || (r.row_id === null && r.calls === 0)) return null;
  // Hashed: the episode and call ids are the clients' strings, of any length and characters an ETag may not hold.
  const parts = JSON.stringify([ANSWER_VERSION, form, engine.name, engine.incarnation, episode, fence, r.fence, r.row_id, r.calls, r.sums, r.first_call, r.last_call]);
  return `"${hex(new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(parts))).subarray(0, 16))}"`;
}

/** An entity tag, weak or strong (RFC 9110 8.8.3). */
const ENTITY_TAG = /(?:W\/)?"[\x21\x23-\x7e\x80-\xff]*"/g;

/**
 * Whether If-None-Match names `tag` (RFC 9110 13.1.2: weak comparison, `*` matches any answer
 * there is). A header of no valid form matches nothing, and the answer is sent whole.
 */
export function noneMatch(header: string | undefined, tag: string): boolean {
  if (header === undefined) return false;
  const value = header.trim();
  if (value === "*") return true;
  // Anything but tags and the commas between them: not a list of tags at all.
  if (value.replace(ENTITY_TAG, "").replace(/[\s,]/g, "") !== "") return false;
  return (value.match(ENTITY_TAG) ?? []).some((t) => t.replace(/^W\//, "") === tag);
}
