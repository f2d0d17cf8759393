/**
 * The engine's one alarm, always set no later than its earliest deadline (a lease's expiry, a
 * command's redelivery, an outbox row's flush, a buffer group's TTL), and the outbox that the
 * alarm flushes to D1.
 */
import type { Outbox, OutboxItem } from "./outbox";
import type { Budget } from "../ledger/retention";

/**
 * How long outbox rows wait so that one D1 flush carries many of them. Results are durable in
 * the engine before anyone is answered; only their copy in D1 waits this long.
 */
export const OUTBOX_BATCH_MS = 1000;

export class AlarmSchedule {
  /** When the alarm is set for, as far as this instance knows; null until read (load). */
  private armedAt: number | null = null;
  /** The earliest outbox deadline added inside the running transaction; armed once it commits. */
  private armAfterCommit: number | null = null;
  /** The outbox flush under way, if any. */
  private flushRun: Promise<unknown> | null = null;
  /** The last flush's error as logged: an outage fails every alarm, and is logged once. */
  private loggedError: string | null = null;

  constructor(
    private readonly storage: DurableObjectStorage,
    private readonly outbox: Outbox,
    private readonly now: () => number,
    private readonly engine: () => string,
  ) {}

  /** Reads when the alarm is set. Once, at start-up, before any request (blockConcurrencyWhile). */
  async load(): Promise<void> {
    this.armedAt = await this.storage.getAlarm();
  }

  /** Makes sure the alarm fires no later than `t`. Cheap: no query, one storage call at most. */
  armBy(t: number | null): void {
    if (t === null) return;
    if (this.armedAt === null || t < this.armedAt) {
      this.armedAt = t;
      void this.storage.setAlarm(t);
    }
  }

  /** Sets the alarm to the earliest of `deadlines`, or clears it when there is none. */
  rearm(deadlines: (number | null)[]): void {
    const due = deadlines.filter((t): t is number => t !== null);
    if (due.length === 0) {
      this.armedAt = null;
      void this.storage.deleteAlarm();
      return;
    }
    this.armedAt = Math.min(...due);
    void this.storage.setAlarm(this.armedAt);
  }

  /** The alarm fired, or storage was wiped: nothing is set any more. */
  cleared(): void {
    this.armedAt = null;
  }

  /** Queues a record for D1; the alarm that flushes it is armed once the running transaction commits. */
  addOutbox(item: OutboxItem): void {
    const due = this.now() + OUTBOX_BATCH_MS;
    this.outbox.add(item, due, this.now());
    if (this.armAfterCommit === null || due < this.armAfterCommit) this.armAfterCommit = due;
  }

  /** Arms the alarm for the deadlines that writes just made durable added (addOutbox). */
  armDeferred(): void {
    this.armBy(this.armAfterCommit);
    this.armAfterCommit = null;
  }

  /** The transaction that added them rolled back. */
  discardDeferred(): void {
    this.armAfterCommit = null;
  }

  /**
   * Writes the outbox's due rows to D1, within `queries` (the invocation's D1 statements, counted
   * down): it starts no batch past half of them and sends at most three quarters, leaving the
   * rest to the alarm's other work.
   */
  async flushOutbox(db: D1Database, now: number, queries: Budget): Promise<void> {
    if (this.flushRun !== null) return;
    try {
      const run = this.outbox.flush(db, now, now + OUTBOX_BATCH_MS, { start: Math.floor(queries.left / 2), most: Math.floor((queries.left * 3) / 4) });
      this.flushRun = run;
      const { error, written, statements } = await run;
      queries.left -= statements;
      // A flush that found no row due (all backing off) says nothing of D1.
      if (error === null && written === 0) return;
      if (error !== this.loggedError) {
        const rows = this.outbox.size();
        if (error !== null) console.error(`engine ${this.engine()}: writing the outbox to D1 failed (${rows} row${rows === 1 ? "" : "s"} kept, retried with backoff): ${error}`);
        else console.log(`engine ${this.engine()}: the outbox writes to D1 again (${written} row${written === 1 ? "" : "s"} written)`);
        this.loggedError = error;
      }
    } finally {
      this.flushRun = null;
    }
  }

  /** Resolves once the flush under way, if any, is over. */
  async flushed(): Promise<void> {
    await this.flushRun;
  }
}
