/**
 * Carrying rollouts on through weight syncs (an engine option). AgentJet's semantics stay the
 * default: leaving ENGINE.ROLLING clears the pool, which the real SwarmClient relies on. With
 * keep_claims_across_sync, claims and their leases survive ENGINE.WEIGHT_SYNCING instead, and
 * a relayed call that arrives during the sync is held (up to sync_hold_seconds) and goes on to
 * the new weights rather than failing. A sync freezes the leases for at most max_sync_seconds:
 * a trainer that hangs in its sync does not keep claims alive for ever.
 */
import { z } from "zod";

export const MAX_SYNC_HOLD_SECONDS = 600;
/** Bounds of max_sync_seconds: from ten seconds to a day. */
export const MIN_MAX_SYNC_SECONDS = 10;
export const MAX_MAX_SYNC_SECONDS = 86_400;

const syncHoldSeconds = z.number().min(0).max(MAX_SYNC_HOLD_SECONDS);
const maxSyncSeconds = z.number().min(MIN_MAX_SYNC_SECONDS).max(MAX_MAX_SYNC_SECONDS);

export const SyncConfig = z.object({
  keep_claims_across_sync: z.boolean(),
  /** How long a relayed call that arrives during a sync waits for it to end before it fails. */
  sync_hold_seconds: syncHoldSeconds,
  /**
   * How long a sync may freeze the leases of the claims it keeps: during a longer one, a claim is
   * reaped once its lease and this have run out, and a lease gets at most this back when it ends.
   */
  max_sync_seconds: maxSyncSeconds,
});
export type SyncConfig = z.infer<typeof SyncConfig>;

export const DEFAULT_SYNC_CONFIG: SyncConfig = { keep_claims_across_sync: false, sync_hold_seconds: 120, max_sync_seconds: 600 };

export const UpdateSyncConfigRequest = z.strictObject({
  keep_claims_across_sync: z.boolean().optional(),
  sync_hold_seconds: syncHoldSeconds.optional(),
  max_sync_seconds: maxSyncSeconds.optional(),
});
export type UpdateSyncConfigRequest = z.infer<typeof UpdateSyncConfigRequest>;
