/**
 * Leases: a claim whose lease runs out is reaped back to the queue by the alarm, except during
 * a weight sync that keeps claims, whose length the leases are given back afterwards.
 */
import type { EpisodeRow } from "./episode-views";
import { release } from "./episode-queue";
import { recordUnfinished } from "./episode-records";
import type { EpisodeState } from "./episode-state";

/** A reaping alarm handles at most this many leases per run, then re-arms at once. */
const REAP_BATCH = 500;

/** Returns the claims whose lease ran out by `now` to the queue (at most REAP_BATCH a run). */
export function reapExpired(e: EpisodeState, now: number): void {
  // Claims kept through a weight sync are not reaped during it: their clients cannot go on until it ends (extendLeases).
  if (e.store.meta.status === "ENGINE.WEIGHT_SYNCING") return;
  const expired = e.store.sql
    .exec<EpisodeRow>("SELECT * FROM episodes WHERE state = 'claimed' AND expires_at <= ? ORDER BY expires_at LIMIT ?", now, REAP_BATCH)
    .toArray();
  for (const ep of expired) {
    recordUnfinished(e, ep, "reaped", "{}");
    release(e, ep, "requeue");
  }
}

export function earliestLeaseExpiry(e: EpisodeState): number | null {
  if (e.store.meta.status === "ENGINE.WEIGHT_SYNCING") return null;
  return e.store.sql.exec<{ t: number | null }>("SELECT MIN(expires_at) AS t FROM episodes WHERE state = 'claimed'").one().t;
}

/**
 * Gives the claims kept through a weight sync the time it took back: a lease does not run
 * out while its client could not call the model. One write per sync, O(claimed).
 */
export function extendLeases(e: EpisodeState, ms: number): void {
  if (ms > 0) e.store.sql.exec("UPDATE episodes SET expires_at = expires_at + ? WHERE state = 'claimed'", ms);
  e.host.armBy(earliestLeaseExpiry(e));
}

