/**
 * Carrying rollouts on through weight syncs (an engine option). AgentJet's semantics stay the
 * default: leaving ENGINE.ROLLING clears the pool, which the real SwarmClient relies on. With
 * keep_claims_across_sync, claims and their leases survive ENGINE.WEIGHT_SYNCING instead, and
 * a relayed call that arrives during the sync is held (up to sync_hold_seconds) and goes on to
 * the new weights rather than failing.
 */
import { z } from "zod";

export const MAX_SYNC_HOLD_SECONDS = 600;

export const SyncConfig = z.object({
  keep_claims_across_sync: z.boolean(),
  /** How long a relayed call that arrives during a sync waits for it to end before it fails. */
  sync_hold_seconds: z.number().min(0).max(MAX_SYNC_HOLD_SECONDS),
});
export type SyncConfig = z.infer<typeof SyncConfig>;

export const DEFAULT_SYNC_CONFIG: SyncConfig = { keep_claims_across_sync: false, sync_hold_seconds: 120 };

export const UpdateSyncConfigRequest = z.strictObject({
  keep_claims_across_sync: z.boolean().optional(),
  sync_hold_seconds: z.number().min(0).max(MAX_SYNC_HOLD_SECONDS).optional(),
});
export type UpdateSyncConfigRequest = z.infer<typeof UpdateSyncConfigRequest>;
