/**
 * The ledger's retention: an engine's recorded calls older than its retention_days are deleted,
 * their index rows from D1 in bounded chunks and their bodies from R2 a whole UTC day at a time.
 * Trajectory rows (outcomes, rewards, workflow outputs) and the reward history are not the
 * ledger's and stay.
 */
import { bodyPrefix } from "./keys";
import { utcDay } from "./ingest";

/** Rows one statement deletes: short enough not to hold D1's writer for long. */
const CHUNK_ROWS = 1000;
/** Statements and R2 calls one sweep makes at most; the next sweep carries on. */
const MAX_STEPS = 20;

export type Swept = { calls: number; objects: number; done: boolean };

export async function sweepLedger(db: D1Database, bucket: R2Bucket, engine: string, incarnation: string, cutoff: number): Promise<Swept> {
  let steps = 0;
  let calls = 0;
  for (;;) {
    if (steps++ >= MAX_STEPS) return { calls, objects: 0, done: false };
    const changed = (
      await db
        .prepare("DELETE FROM llm_calls WHERE rowid IN (SELECT rowid FROM llm_calls WHERE engine = ? AND admitted_at < ? LIMIT ?)")
        .bind(engine, cutoff, CHUNK_ROWS)
        .run()
    ).meta.changes;
    calls += changed;
    if (changed < CHUNK_ROWS) break;
  }
  // Objects are named by the day they were recorded: a day before the cutoff's holds only older calls, whose rows are gone.
  const prefix = bodyPrefix(engine, incarnation);
  const lastKept = utcDay(cutoff);
  let objects = 0;
  const days = await bucket.list({ prefix, delimiter: "/" });
  steps++;
  for (const dayPrefix of days.delimitedPrefixes) {
    const day = dayPrefix.slice(prefix.length, -1);
    if (day >= lastKept) continue;
    for (;;) {
      if (steps >= MAX_STEPS) return { calls, objects, done: false };
      const listed = await bucket.list({ prefix: dayPrefix, limit: 1000 });
      steps++;
      if (listed.objects.length === 0) break;
      await bucket.delete(listed.objects.map((o) => o.key));
      steps++;
      objects += listed.objects.length;
      if (!listed.truncated) break;
    }
  }
  return { calls, objects, done: !days.truncated };
}
