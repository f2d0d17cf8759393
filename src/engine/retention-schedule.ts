/**
 * When the engine sweeps what it keeps for a bounded time: from its alarm, hourly, each kind of
 * record once the engine has written one. The ledger's recorded calls (src/ledger/retention.ts)
 * from the first call admitted with capture on, under the ledger's retention_days; the rollout
 * buffer's step rows in D1 from its first stored step, under the buffer's d1_retention_days.
 * Engines that use neither never wake for it.
 */
import { deleteOlder, sweepLedger, SWEEP_STEPS, type Budget } from "../ledger/retention";
import type { EngineStore } from "./engine-store";

/** What is swept: the ledger's calls (D1 and R2), the buffer's step rows (D1; its groups' outcomes stay). */
export type Kept = "buffer" | "ledger";
const KEPT: readonly Kept[] = ["buffer", "ledger"];

/** The ledger's own name for it, kept: engines already hold their next sweep under it. */
const AT_KEY = "ledger_sweep_at";
const USES_KEY = "retention_uses";
export const SWEEP_EVERY_MS = 3_600_000;
/** A sweep cut short by its budget carries on this soon. */
const CARRY_ON_MS = 60_000;
const DAY_MS = 86_400_000;

export class RetentionSchedule {
  private nextAt: number | null = null;
  private uses = new Set<Kept>();

  constructor(
    private readonly store: EngineStore,
    private readonly armBy: (t: number) => void,
  ) {
    this.reload();
  }

  /** Reads what is stored again: a transaction that noted a use rolled back. */
  reload(): void {
    this.nextAt = this.store.getKv<number>(AT_KEY);
    // Before the buffer's rows were swept, a sweep was set only once the ledger was used.
    this.uses = new Set(this.store.getKv<Kept[]>(USES_KEY) ?? (this.nextAt !== null ? ["ledger"] : []));
  }

  /** `kept` was written: from now on it is swept. Writes once for each. */
  noteUse(kept: Kept, now: number): void {
    if (this.uses.has(kept)) return;
    this.uses.add(kept);
    this.store.setKv(USES_KEY, [...this.uses]);
    if (this.nextAt === null) this.set(now + SWEEP_EVERY_MS);
  }

  /**
   * The next sweep, for the alarm's schedule; null while nothing is kept, and while the engine
   * has no name (an object whose engine was deleted, with a time left over): sweepIfDue does not
   * move the time then, so a past one would have the alarm fire again at once, for ever.
   */
  next(): number | null {
    return this.store.meta.name === null ? null : this.nextAt;
  }

  /** Whether a sweep is due at `now`. */
  due(now: number): boolean {
    const at = this.next();
    return at !== null && now >= at;
  }

  /**
   * Sweeps what is due, within `queries` (the invocation's D1 statements, counted down).
   * `deleted` says the engine's delete began (EngineObject.destroy): the sweep then stops, and
   * writes no next time, since that write and its alarm would land in the deleted engine's
   * wiped storage, for an engine made again under the name to inherit.
   */
  async sweepIfDue(db: D1Database, bucket: R2Bucket, retentionDays: Record<Kept, number>, now: number, deleted: () => boolean, queries: Budget): Promise<void> {
    if (!this.due(now)) return;
    const { name, incarnation } = this.store.meta;
    if (name === null) return;
    const kept = KEPT.filter((k) => this.uses.has(k));
    // Its steps are D1 statements and R2 calls: all are charged to the invocation's D1 statements, an overcount, never an undercount.
    const all = Math.min(SWEEP_STEPS, queries.left);
    let left = all;
    let done = true;
    for (const [i, k] of kept.entries()) {
      // What is left is the delete's to remove.
      if (deleted()) return;
      // Each gets its share of the run's statements and what those before it left: a long backlog of one does not stop the other's sweep.
      const budget: Budget = { left: Math.ceil(left / (kept.length - i)) };
      const share = budget.left;
      const cutoff = now - retentionDays[k] * DAY_MS;
      try {
        const r = k === "ledger" ? await sweepLedger(db, bucket, name, incarnation, cutoff, budget, deleted) : await deleteOlder(db, "buffer_steps", name, cutoff, budget);
        done &&= r.done;
      } catch (e) {
        console.error(`engine: sweeping the ${k}'s old records failed; trying again later`, e);
        done = false;
      }
      left -= share - budget.left;
    }
    queries.left -= all - left;
    // Checked after the last await: a delete that began during it may have wiped the storage already.
    if (deleted()) return;
    this.set(now + (done ? SWEEP_EVERY_MS : CARRY_ON_MS));
  }

  private set(t: number): void {
    this.nextAt = t;
    this.store.setKv(AT_KEY, t);
    this.armBy(t);
  }
}
