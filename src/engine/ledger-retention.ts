/**
 * When the engine sweeps its ledger (src/ledger/retention.ts): from its alarm, hourly, once the
 * ledger has been used (the first call admitted with capture on). Engines that never relay a
 * call never wake for it.
 */
import { sweepLedger } from "../ledger/retention";
import type { EngineStore } from "./engine-store";

const KEY = "ledger_sweep_at";
export const SWEEP_EVERY_MS = 3_600_000;
/** A sweep cut short by its budget carries on this soon. */
const CARRY_ON_MS = 60_000;
const DAY_MS = 86_400_000;

export class LedgerRetention {
  private nextAt: number | null;

  constructor(
    private readonly store: EngineStore,
    private readonly armBy: (t: number) => void,
  ) {
    this.nextAt = store.getKv<number>(KEY);
  }

  /** A call was admitted with capture on: from now on the ledger is swept. Writes once. */
  noteUse(now: number): void {
    if (this.nextAt !== null) return;
    this.set(now + SWEEP_EVERY_MS);
  }

  /** The next sweep, for the alarm's schedule; null while the ledger is unused. */
  next(): number | null {
    return this.nextAt;
  }

  async sweepIfDue(db: D1Database, bucket: R2Bucket, retentionDays: number, now: number): Promise<void> {
    if (this.nextAt === null || now < this.nextAt) return;
    const { name, incarnation } = this.store.meta;
    if (name === null) return;
    try {
      const r = await sweepLedger(db, bucket, name, incarnation, now - retentionDays * DAY_MS);
      this.set(now + (r.done ? SWEEP_EVERY_MS : CARRY_ON_MS));
    } catch (e) {
      console.error("engine: sweeping the ledger failed; trying again later", e);
      this.set(now + CARRY_ON_MS);
    }
  }

  private set(t: number): void {
    this.nextAt = t;
    this.store.setKv(KEY, t);
    this.armBy(t);
  }
}
