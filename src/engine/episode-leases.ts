/**
 * Leases: a claim whose lease runs out is reaped back to the queue by the alarm. A weight sync
 * that keeps claims freezes the leases, for at most the sync config's max_sync_seconds: during
 * it a claim is reaped only once its lease and that bound have both run out, and when it ends
 * every lease gets the sync's length back (at most the bound).
 */
import type { EpisodeRow } from "./episode-views";
import { release } from "./episode-queue";
import { recordUnfinished } from "./episode-records";
import type { EpisodeState } from "./episode-state";

/** A reaping alarm handles at most this many leases per run, then re-arms at once. */
const REAP_BATCH = 500;

/**
 * How long a lease may stand frozen past its expiry now: during a weight sync that keeps the
 * claims, max_sync_seconds (their clients cannot go on until it ends, but a trainer that hangs
 * in its sync must not keep them for ever); otherwise nothing.
 */
function frozenMs(e: EpisodeState): number {
  const meta = e.store.meta;
  return meta.status === "ENGINE.WEIGHT_SYNCING" ? meta.sync.max_sync_seconds * 1000 : 0;
}

/** Returns the claims whose lease ran out by `now` (during a sync: their lease and max_sync_seconds) to the queue, at most REAP_BATCH a run. */
export function reapExpired(e: EpisodeState, now: number): void {
  const expired = e.store.sql
    .exec<EpisodeRow>("SELECT * FROM episodes WHERE state = 'claimed' AND expires_at <= ? ORDER BY expires_at LIMIT ?", now - frozenMs(e), REAP_BATCH)
    .toArray();
  for (const ep of expired) {
    recordUnfinished(e, ep, "reaped", "{}");
    release(e, ep, "requeue");
  }
}

/**
 * What a claim released because its token was revoked records as its workflow output: it is
 * reaped (the engine took it back, its client did not end it), and this says why.
 */
export const REVOKED_CLAIM_OUTPUT = JSON.stringify({ reaped_because: "token_revoked" });

/**
 * Releases every live claim made with the token of hash `tokenHash`, which is being revoked (in
 * the revocation's transaction): each is recorded as reaped, with REVOKED_CLAIM_OUTPUT, and its
 * episode goes back to the queue (through its runner's reset for AgentJet), as a lease that ran
 * out. Its per-claim key dies with it, so the revoked token's holder keeps no model by calling.
 * O(claimed): the lease index holds exactly the claimed rows, and revocations are rare.
 */
export function releaseClaimsOf(e: EpisodeState, tokenHash: string): number {
  const held = e.store.sql.exec<EpisodeRow>("SELECT * FROM episodes WHERE state = 'claimed' AND claimed_by = ? ORDER BY expires_at", tokenHash).toArray();
  for (const ep of held) {
    recordUnfinished(e, ep, "reaped", REVOKED_CLAIM_OUTPUT);
    release(e, ep, "requeue");
  }
  return held.length;
}

/** When the alarm is next to reap a claim: the earliest lease's expiry, during a sync plus max_sync_seconds. */
export function earliestLeaseExpiry(e: EpisodeState): number | null {
  const t = e.store.sql.exec<{ t: number | null }>("SELECT MIN(expires_at) AS t FROM episodes WHERE state = 'claimed'").one().t;
  return t === null ? null : t + frozenMs(e);
}

/** The alarm fires no later than the earliest lease's deadline (after the sync config changed, say). */
export function armForLeases(e: EpisodeState): void {
  e.host.armBy(earliestLeaseExpiry(e));
}

/**
 * Gives the claims kept through a weight sync that ran from `since` to `until` its length back,
 * at most max_sync_seconds: a lease does not run out while its client could not call the model.
 * A lease set before the sync keeps exactly the time it had left; one refreshed during it (a
 * relayed call the Worker's claim gate counted then) gets at most its discard_episode_timeout
 * after the sync's end, as if its last activity were then. One write per sync, O(claimed).
 */
export function extendLeases(e: EpisodeState, since: number, until: number): void {
  const ms = Math.min(Math.max(0, until - since), e.store.meta.sync.max_sync_seconds * 1000);
  if (ms > 0) {
    // The timeout in ms rounded up, as a claim and a relayed call set their lease (no CEIL in every SQLite).
    e.store.sql.exec(
      `UPDATE episodes SET expires_at = MIN(expires_at + ?, ? + CAST(discard_timeout * 1000 AS INTEGER) + (discard_timeout * 1000 > CAST(discard_timeout * 1000 AS INTEGER)))
       WHERE state = 'claimed'`,
      ms,
      until,
    );
  }
  armForLeases(e);
}
