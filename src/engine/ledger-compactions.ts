/**
 * When the engine gathers a claim's recorded calls into one object (ledger/compaction.ts): the
 * Worker names the claims of each batch it records (EngineObject.ledgerRecorded), and the
 * alarm gathers each once it is over and its records have settled: SETTLE_MS after its end or
 * its last batch, whichever is later. One found still live waits LIVE_WAIT_MS, or its end.
 *
 * Gathering only makes reads cheaper: a claim that is never gathered (its attempts spent, the
 * engine deleted first) reads as it always did.
 */
import { compactClaims, type ClaimName, type Gathered } from "../ledger/compaction";
import type { Budget } from "../ledger/retention";

/** A batch's records arrive within a second or so of their calls; a resent one within seconds more. */
export const SETTLE_MS = 5_000;
/** A claim still live when it came due is looked at again this much later, unless it ends first. */
export const LIVE_WAIT_MS = 60_000;
/** Claims gathered per alarm, and the R2 reads they may make: the rest come due at once, for the next alarm. */
export const CLAIMS_PER_ALARM = 32;
export const READS_PER_ALARM = 200;
/** Claims due that one alarm looks at, to set the live ones aside. */
const LOOKED_AT_PER_ALARM = 1000;
/**
 * A claim whose gathering failed this many times is let go (it reads as it is), its tries 30 s,
 * 1, 2, 4, ... min apart: about an hour of R2 or D1 failing.
 */
const MAX_ATTEMPTS = 8;
const RETRY_MS = 30_000;

export type CompactionHost = {
  now(): number;
  armBy(t: number): void;
  /** Whether the claim is still its episode's live claim. */
  live(episode: string, fence: number): boolean;
  /** The engine's name and incarnation; null name once it has none (deleted). */
  engine(): { name: string | null; incarnation: string };
  /** The engine's delete began. */
  closed(): boolean;
};

export class LedgerCompactions {
  /** The Worker's requests naming the claims of a recorded batch, since this object started (the overview). */
  requests = 0;

  constructor(
    private readonly sql: SqlStorage,
    private readonly host: CompactionHost,
  ) {}

  /** Claims a batch recorded calls of: each comes due SETTLE_MS from now, or later if it was already to. */
  recorded(claims: readonly ClaimName[]): void {
    if (claims.length === 0) return;
    const due = this.host.now() + SETTLE_MS;
    this.sql.exec(
      `INSERT INTO ledger_compactions (episode_uuid, fence, due_at)
       SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), ? FROM json_each(?) WHERE true
       ON CONFLICT (episode_uuid, fence) DO UPDATE SET due_at = MAX(due_at, excluded.due_at)`,
      due,
      JSON.stringify(claims.map((c) => [c.episode, c.fence])),
    );
    this.host.armBy(due);
  }

  /** A claim ended (ended, aborted, reaped): if its calls were recorded, it comes due SETTLE_MS from now. */
  ended(episode: string, fence: number): void {
    const due = this.host.now() + SETTLE_MS;
    const changed = this.sql.exec("UPDATE ledger_compactions SET due_at = ? WHERE episode_uuid = ? AND fence = ?", due, episode, fence).rowsWritten;
    if (changed > 0) this.host.armBy(due);
  }

  next(): number | null {
    return this.sql.exec<{ t: number | null }>("SELECT MIN(due_at) AS t FROM ledger_compactions").one().t;
  }

  /** How many claims wait to be gathered (the overview). */
  size(): number {
    return this.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM ledger_compactions").one().n;
  }

  /**
   * Gathers the claims due, CLAIMS_PER_ALARM at most; those still live wait. A claim is taken off
   * the queue only if it was not queued again while it was gathered (a batch of its calls
   * recorded meanwhile, which this run did not read). `queries`: the D1 statements it may send,
   * counted down; the claims they leave no room for stay due.
   */
  async runDue(db: D1Database, bucket: R2Bucket, queries: Budget): Promise<void> {
    const { name, incarnation } = this.host.engine();
    if (name === null) return;
    const now = this.host.now();
    // The live ones among many due at once (an engine of a thousand live claims, a minute after
    // their first calls) are set aside in one pass, not an alarm for each CLAIMS_PER_ALARM.
    const due = this.sql
      .exec<{ episode_uuid: string; fence: number; due_at: number }>("SELECT episode_uuid, fence, due_at FROM ledger_compactions WHERE due_at <= ? ORDER BY due_at LIMIT ?", now, LOOKED_AT_PER_ALARM)
      .toArray();
    const over: (ClaimName & { seen: number })[] = [];
    for (const d of due) {
      if (this.host.live(d.episode_uuid, d.fence)) this.sql.exec("UPDATE ledger_compactions SET due_at = ? WHERE episode_uuid = ? AND fence = ?", now + LIVE_WAIT_MS, d.episode_uuid, d.fence);
      else if (over.length < CLAIMS_PER_ALARM) over.push({ episode: d.episode_uuid, fence: d.fence, seen: d.due_at });
    }
    if (over.length === 0) return;
    let gathered: Gathered[];
    const opts = { reads: READS_PER_ALARM, statements: queries.left, stop: () => this.host.closed() };
    try {
      gathered = await compactClaims(db, bucket, { name, incarnation }, over, opts);
    } catch (e) {
      gathered = over.map((c) => ({ episode: c.episode, fence: c.fence, moved: 0, state: "failed", error: e }));
    }
    queries.left = opts.statements;
    // Written after the last await: a delete that began during it may have wiped the storage already.
    if (this.host.closed()) return;
    const at = this.host.now();
    const seen = new Map(over.map((c) => [`${c.fence}\n${c.episode}`, c.seen]));
    let failure: unknown = null;
    for (const g of gathered) {
      const was = seen.get(`${g.fence}\n${g.episode}`) ?? 0;
      if (g.state === "done") this.sql.exec("DELETE FROM ledger_compactions WHERE episode_uuid = ? AND fence = ? AND due_at = ?", g.episode, g.fence, was);
      // `more` stays where it is in the queue, due: the next alarm, at once, takes it first.
      else if (g.state === "failed") {
        failure ??= g.error;
        this.sql.exec(
          "UPDATE ledger_compactions SET attempts = attempts + 1, due_at = MAX(due_at, ? + ?) WHERE episode_uuid = ? AND fence = ?",
          at,
          RETRY_MS * 2 ** Math.min(10, this.attempts(g)),
          g.episode,
          g.fence,
        );
      }
      // `stopped`: a delete began and failed; the claim is still due, for the engine it reopened.
    }
    if (failure !== null) {
      console.error(`engine ${name}: gathering claims' recorded calls into one object each failed; trying again later`, failure);
      this.sql.exec("DELETE FROM ledger_compactions WHERE attempts >= ?", MAX_ATTEMPTS);
    }
  }

  private attempts(c: ClaimName): number {
    return this.sql.exec<{ n: number }>("SELECT attempts AS n FROM ledger_compactions WHERE episode_uuid = ? AND fence = ?", c.episode, c.fence).toArray()[0]?.n ?? 0;
  }
}
