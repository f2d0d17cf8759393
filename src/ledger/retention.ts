/**
 * The ledger's retention: an engine's recorded calls older than its retention_days are deleted,
 * their index rows from D1 in bounded chunks and their bodies from R2 a whole UTC day at a time.
 * Trajectory rows (outcomes, rewards, workflow outputs) and the reward history are not the
 * ledger's and stay. The rollout buffer's step rows in D1 go by the same chunked delete
 * (deleteOlder), under the buffer's own d1_retention_days.
 */
import { bodyPrefix } from "./keys";
import { utcDay } from "./ingest";

/** Rows one statement deletes: short enough not to hold D1's writer for long. */
const CHUNK_ROWS = 1000;
/** Statements and R2 calls one sweep makes at most; the next sweep carries on. */
export const SWEEP_STEPS = 20;
/** Keys one R2 list answers and one R2 delete takes, at most. */
const R2_PAGE = 1000;

/** What one invocation may still spend on D1 statements and R2 calls; each takes one. */
export type Budget = { left: number };

/** Takes one step of `budget`; false when none is left. */
export function spend(budget: Budget): boolean {
  if (budget.left <= 0) return false;
  budget.left--;
  return true;
}

/**
 * Deletes every object under `prefix`, a list and a delete of a page at a time, while `budget`
 * lasts: an engine's bodies can be far more than one invocation may touch. `done` when none are left.
 */
export async function deleteUnder(bucket: R2Bucket, prefix: string, budget: Budget): Promise<{ objects: number; done: boolean }> {
  let objects = 0;
  for (;;) {
    // A list is only worth its step with one left to delete what it finds.
    if (budget.left < 2) return { objects, done: false };
    spend(budget);
    const listed = await bucket.list({ prefix, limit: R2_PAGE });
    if (listed.objects.length === 0) return { objects, done: true };
    spend(budget);
    await bucket.delete(listed.objects.map((o) => o.key));
    objects += listed.objects.length;
    if (!listed.truncated) return { objects, done: true };
  }
}

/** The tables swept by age, each with the column its rows' time is in (each indexed with engine first). */
const TIMED = { llm_calls: "admitted_at", buffer_steps: "created_at" } as const;

/**
 * Deletes the engine's rows of `table` from before `cutoff`, a chunk per statement, while
 * `budget` lasts. `done` when none are left.
 */
export async function deleteOlder(db: D1Database, table: keyof typeof TIMED, engine: string, cutoff: number, budget: Budget): Promise<{ rows: number; done: boolean }> {
  const at = TIMED[table];
  const sql = `DELETE FROM ${table} WHERE rowid IN (SELECT rowid FROM ${table} WHERE engine = ? AND ${at} < ? LIMIT ?)`;
  let rows = 0;
  for (;;) {
    if (!spend(budget)) return { rows, done: false };
    const changed = (await db.prepare(sql).bind(engine, cutoff, CHUNK_ROWS).run()).meta.changes;
    rows += changed;
    if (changed < CHUNK_ROWS) return { rows, done: true };
  }
}

export type Swept = { calls: number; objects: number; done: boolean };

/**
 * `deleted` says the engine's delete began (EngineObject.destroy, which does not wait for a
 * sweep): checked after the rows' delete and before each day's objects go, since a delete that
 * keeps the history re-files the rows under the archive's name meanwhile, and their bodies must stay.
 */
export async function sweepLedger(
  db: D1Database,
  bucket: R2Bucket,
  engine: string,
  incarnation: string,
  cutoff: number,
  budget: Budget = { left: SWEEP_STEPS },
  deleted: () => boolean = () => false,
): Promise<Swept> {
  const { rows: calls, done: rowsDone } = await deleteOlder(db, "llm_calls", engine, cutoff, budget);
  if (!rowsDone || deleted()) return { calls, objects: 0, done: false };
  // Objects are named by the day they were recorded: a day before the cutoff's holds only older calls, whose rows are gone.
  const prefix = bodyPrefix(engine, incarnation);
  const lastKept = utcDay(cutoff);
  let objects = 0;
  if (!spend(budget)) return { calls, objects, done: false };
  const days = await bucket.list({ prefix, delimiter: "/" });
  for (const dayPrefix of days.delimitedPrefixes) {
    if (dayPrefix.slice(prefix.length, -1) >= lastKept) continue;
    if (deleted()) return { calls, objects, done: false };
    const r = await deleteUnder(bucket, dayPrefix, budget);
    objects += r.objects;
    if (!r.done) return { calls, objects, done: false };
  }
  // Days are listed in order: past a kept one, the days the list left off are kept too.
  const last = days.delimitedPrefixes.at(-1);
  return { calls, objects, done: !days.truncated || (last !== undefined && last.slice(prefix.length, -1) >= lastKept) };
}
