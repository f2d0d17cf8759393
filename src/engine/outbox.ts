/**
 * The outbox from an engine to D1. A row is written in the same transaction as the state change
 * it records, then flushed to D1 in batches by the alarm; a failed flush is retried with backoff,
 * so a D1 hiccup neither loses a record nor fails the request that produced it.
 */
import { drizzle } from "drizzle-orm/d1";
import { rewardHistory, trajectories } from "../db/schema";
import { backoffMs } from "./rules";

export type TrajectoryRecord = typeof trajectories.$inferInsert;
export type RewardRecord = typeof rewardHistory.$inferInsert;
export type OutboxItem = { kind: "trajectory"; row: TrajectoryRecord } | { kind: "reward"; row: RewardRecord };

type OutboxRow = { id: number; kind: string; payload: string; attempts: number };

/** Rows written in one D1 batch: bounded so a long outage does not make one giant request. */
const FLUSH_BATCH = 100;

export class Outbox {
  constructor(private readonly sql: SqlStorage) {}

  add(item: OutboxItem, dueAt: number): void {
    this.sql.exec("INSERT INTO outbox (kind, payload, next_attempt_at) VALUES (?, ?, ?)", item.kind, JSON.stringify(item.row), dueAt);
  }

  nextDue(): number | null {
    return this.sql.exec<{ t: number | null }>("SELECT MIN(next_attempt_at) AS t FROM outbox").one().t;
  }

  size(): number {
    return this.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM outbox").one().n;
  }

  /** Writes due rows to D1; returns how many were written, or the error that kept them back. */
  async flush(db: D1Database, now: number): Promise<{ written: number; error: string | null }> {
    const rows = this.sql
      .exec<OutboxRow>("SELECT id, kind, payload, attempts FROM outbox WHERE next_attempt_at <= ? ORDER BY id LIMIT ?", now, FLUSH_BATCH)
      .toArray();
    if (rows.length === 0) return { written: 0, error: null };
    const d1 = drizzle(db);
    const statements = rows.map((r) =>
      r.kind === "trajectory"
        ? d1.insert(trajectories).values(JSON.parse(r.payload) as TrajectoryRecord).onConflictDoNothing()
        : d1.insert(rewardHistory).values(JSON.parse(r.payload) as RewardRecord).onConflictDoNothing(),
    );
    try {
      await d1.batch(statements as [(typeof statements)[number], ...(typeof statements)[number][]]);
    } catch (e) {
      const error = e instanceof Error ? e.message : String(e);
      for (const r of rows) {
        this.sql.exec(
          "UPDATE outbox SET attempts = attempts + 1, next_attempt_at = ?, last_error = ? WHERE id = ?",
          now + backoffMs(r.attempts + 1),
          error,
          r.id,
        );
      }
      return { written: 0, error };
    }
    for (const r of rows) this.sql.exec("DELETE FROM outbox WHERE id = ?", r.id);
    return { written: rows.length, error: null };
  }
}
