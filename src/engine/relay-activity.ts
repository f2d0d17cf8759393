/**
 * LLM calls admitted by the engine but not yet written to its episodes: a call count and the
 * latest activity per live claim. Admitting a call is then a read, not a write and a commit
 * per call; the tally is written in one transaction shortly after, and before anything reads
 * the counts or reaps leases. A tally lost with an evicted object costs a fraction of a
 * second of counts and activity, which the next call restores.
 */

/** How long admitted calls wait so that one write carries many of them. */
export const ACTIVITY_FLUSH_MS = 250;

export type PendingActivity = { episodeUuid: string; fence: number; calls: number; at: number; expiresAt: number };

export class RelayActivity {
  private pending = new Map<string, PendingActivity>();

  /** `calls` admitted calls of the claim (`episodeUuid`, `fence`), the last at `at`; its lease now runs to `expiresAt`. */
  note(episodeUuid: string, fence: number, calls: number, at: number, expiresAt: number): void {
    this.add({ episodeUuid, fence, calls, at, expiresAt });
  }

  get size(): number {
    return this.pending.size;
  }

  /** Everything pending, which is forgotten here: the caller writes it. */
  take(): PendingActivity[] {
    const all = [...this.pending.values()];
    this.pending.clear();
    return all;
  }

  /** Puts back what a failed write took, under anything noted since. */
  restore(items: PendingActivity[]): void {
    for (const it of items) this.add(it);
  }

  /** Adds to the claim's tally; a newer claim of the episode replaces what an older one left (that claim is over). */
  private add(it: PendingActivity): void {
    const p = this.pending.get(it.episodeUuid);
    if (p === undefined || p.fence < it.fence) {
      this.pending.set(it.episodeUuid, { ...it });
    } else if (p.fence === it.fence) {
      p.calls += it.calls;
      p.at = Math.max(p.at, it.at);
      p.expiresAt = Math.max(p.expiresAt, it.expiresAt);
    }
  }
}
