/**
 * A client's claim of the queue's head: a lease with a fence (the claim's attempt number) and a
 * per-claim key signed for it, unless the engine is not rolling or pace holds train claims back.
 */
import type { ClaimEpisodeRequest, ClaimEpisodeResponse } from "../protocol/swarm";
import { signClaimKey } from "../auth/claim-key";
import type { ClaimsOutstanding } from "./buffer-state";
import { mayActOn, type EpisodeState } from "./episode-state";
import { olderVersion, paceAdmits } from "./pacing";
import { fail, ok, type Failure, type Reply } from "./reply";
import { NO_EPISODES_CAUSE, notReadyCause, PACED_CAUSE } from "./rules";

/**
 * How many queue heads a claim tries when another call changed the one it signed for meanwhile,
 * before it answers as a claim that found none (the client asks again in 2 s).
 */
const CLAIM_ATTEMPTS = 4;

/**
 * Who makes a claim: the hash of its token (null for the admin), kept on the claim so that
 * revoking the token releases it (episode-leases.ts releaseClaimsOf), and why it may claim no
 * more (its token revoked while the claim awaited its key's signature), or null.
 */
export type Claimant = { tokenHash: string | null; refusal(): Failure | null };

/**
 * What each use of CLAIM_KEY_SECRET answers when the deployment lacks it (a claim, the relay,
 * the agent's gateway secret): the operator is told which secret to set, not that a key is bad.
 */
export const CLAIM_KEY_SECRET_MISSING: Failure = fail(
  500,
  "misconfigured",
  "CLAIM_KEY_SECRET is not configured: per-claim keys and gateway secrets cannot be signed or checked. Set it with `wrangler secret put CLAIM_KEY_SECRET` (locally, in .dev.vars).",
);

export async function claim(e: EpisodeState, req: ClaimEpisodeRequest, origin: string, keySecret: string, claimant: Claimant): Promise<Reply<ClaimEpisodeResponse>> {
  const refuse = (fail_cause: string): Reply<ClaimEpisodeResponse> =>
    ok({ success: false, client_uuid: req.client_uuid, episode_uuid: "", openai_base_url: "", openai_api_key: "", fail_cause });
  const meta = e.store.meta;
  if (meta.status !== "ENGINE.ROLLING") return refuse(notReadyCause(meta.status));
  // Checked before anything is claimed, so a misconfigured deployment leaks no claims.
  if (!keySecret) return CLAIM_KEY_SECRET_MISSING;
  const train = req.episode_type === "train";
  if (train && paced(e, req)) return refuse(PACED_CAUSE);
  // The key is signed before anything is written, so a claim whose key cannot be signed leaves
  // nothing behind: its client is answered an error and the episode stays at the queue's head.
  for (let attempt = 0; attempt < CLAIM_ATTEMPTS; attempt++) {
    const head = queueHead(e);
    if (head === null) break;
    const fence = head.fence + 1;
    // Calls run while this one awaits the signature (the other claims of its shared turn, at
    // least): they pick heads behind this one instead of all signing for the same one.
    e.claimsSigning.set(head.queue_seq, train);
    let key: string;
    try {
      key = await signClaimKey(keySecret, { engine: meta.name ?? "", incarnation: meta.incarnation, episode_uuid: head.episode_uuid, fence });
    } finally {
      e.claimsSigning.delete(head.queue_seq);
    }
    // What the other calls may have changed meanwhile: the engine's status, even the engine.
    const after = e.store.meta;
    if (after.status !== "ENGINE.ROLLING") return refuse(notReadyCause(after.status));
    if (after.incarnation !== meta.incarnation) break;
    // A revocation meanwhile released the token's claims: it makes none after it.
    const revoked = claimant.refusal();
    if (revoked !== null) return revoked;
    if (take(e, req, head.episode_uuid, head.fence, claimant.tokenHash)) {
      if (fence > e.fenceHigh) e.fenceHigh = fence;
      return ok({
        success: true,
        client_uuid: req.client_uuid,
        episode_uuid: head.episode_uuid,
        openai_base_url: `${origin}/v1`,
        openai_api_key: key,
        fail_cause: "",
        fence,
      });
    }
    // The episode was taken back, or claimed, meanwhile: the key names a claim that never was.
  }
  return refuse(NO_EPISODES_CAUSE);
}

/**
 * The queue's first episode behind those that claims signing their key have picked: one probe
 * of the queue's index. Those claims pick in queue order, so every registered episode before
 * the last of them is one of them, unless its claim failed (then it waits only until the claims
 * in flight are done, at the latest at the end of their turn).
 */
function queueHead(e: EpisodeState): { episode_uuid: string; fence: number; queue_seq: number } | null {
  let after = 0; // queue positions start at 1 (EpisodeState)
  for (const seq of e.claimsSigning.keys()) if (seq > after) after = seq;
  return (
    e.store.sql
      .exec<{ episode_uuid: string; fence: number; queue_seq: number }>(
        "SELECT episode_uuid, fence, queue_seq FROM episodes WHERE state = 'registered' AND queue_seq > ? ORDER BY queue_seq LIMIT 1",
        after,
      )
      .toArray()[0] ?? null
  );
}

/**
 * Claims `uuid` with fence `fence + 1` if it is still registered at the fence its key was signed
 * for; one statement, atomic by itself. Whether it was is all that comes back.
 */
function take(e: EpisodeState, req: ClaimEpisodeRequest, uuid: string, fence: number, claimedBy: string | null): boolean {
  const now = e.host.now();
  const expiresAt = now + Math.ceil(req.discard_episode_timeout * 1000);
  const taken =
    e.store.sql
      .exec(
        `UPDATE episodes SET state = 'claimed', queue_seq = NULL, episode_type = ?, client_uuid = ?, fence = fence + 1,
           last_activity = ?, discard_timeout = ?, expires_at = ?, llm_call_count = 0, task_id = ?, claim_weight_version = ?, claimed_by = ?
         WHERE episode_uuid = ? AND state = 'registered' AND fence = ?
         RETURNING 1`,
        req.episode_type,
        req.client_uuid,
        now,
        req.discard_episode_timeout,
        expiresAt,
        req.throttle_policy?.current_task_id ?? "",
        // Before the trainer reported a version, it serves its first weights: version 0, not the
        // version it reports by the claim's end (which would make a slow rollout look fresh).
        e.store.meta.weightVersion ?? 0,
        claimedBy,
        uuid,
        fence,
      )
      .toArray().length > 0;
  if (taken) e.host.armBy(expiresAt);
  return taken;
}

/**
 * Whether pace holds this train claim back: the rollouts not yet consumed (an O(claimed) read,
 * and O(ended in the batch) without the buffer, made only under pace) could be consumed too late.
 */
function paced(e: EpisodeState, req: ClaimEpisodeRequest): boolean {
  if (e.buffer.config().staleness_policy !== "pace") return false;
  const t = req.throttle_policy;
  const batch = t?.expected_batch_size !== undefined && t.expected_num_repeat !== undefined ? t.expected_batch_size * t.expected_num_repeat : null;
  if (paceAdmits(e.buffer.paceState(claimsOutstanding(e), false, batch))) return false;
  e.buffer.notePaced();
  return true;
}

/**
 * The train rollouts begun by claims and not consumed, which pace weighs besides the buffer's
 * sessions (for a claim, and for a worker's batch opening groups: one bound for both): the
 * claims under way, those still signing their key included (not written yet), and the ends the
 * engine does not see consumed (endedUnconsumed); with the oldest version they began at.
 */
export function claimsOutstanding(e: EpisodeState): ClaimsOutstanding {
  const live = e.store.sql
    .exec<{ count: number; oldest: number | null }>(
      "SELECT COUNT(*) AS count, MIN(claim_weight_version) AS oldest FROM episodes WHERE state = 'claimed' AND episode_type = 'train'",
    )
    .one();
  let signing = 0;
  for (const isTrain of e.claimsSigning.values()) if (isTrain) signing++;
  const others = endedUnconsumed(e) + signing;
  // Those ended, and those signing, began at the current version, which no live claim is newer than.
  return { count: live.count + others, oldest: others > 0 ? olderVersion(live.oldest, e.store.meta.weightVersion) : live.oldest };
}

/**
 * Rollouts that ended but that the trainer has not consumed, when the buffer does not show what
 * it consumed (AgentJet's results go to its runner over ZeroMQ): the usable ends of claims begun
 * at the trainer's current version. A trainer takes its batch before its version moves, so those
 * begun before are counted consumed; until it moves, an ended rollout still waits to be trained
 * on and counts toward the bound as much as one under way. With the buffer in use, ended claims
 * that name a task are its sessions until pulled, counted there (paceState); those that name
 * none never join it (episode-ends.ts) and are counted here. Failed ends are never trained on,
 * and aborted or reaped claims went back to the queue; a result the agent could not deliver never
 * reached the trainer, which registers its episode again. None is counted, or a trainer waiting
 * for its batch could wait for ever.
 */
function endedUnconsumed(e: EpisodeState): number {
  const version = e.store.meta.weightVersion;
  if (version === null) return 0;
  return e.store.sql
    .exec<{ n: number }>(
      `SELECT COUNT(*) AS n FROM finished WHERE episode_type = 'train' AND failed = 0 AND delivery != 'undeliverable' AND claim_weight_version = ?${e.buffer.active() ? " AND task_id = ''" : ""}`,
      version,
    )
    .one().n;
}

/** Whether the claim lives and is the caller's: by its client_uuid, and its token (`actor`, mayActOn), as its end is judged. */
export function canContinue(e: EpisodeState, clientUuid: string, episodeUuid: string, actor: string | null): { can_continue: boolean } {
  if (!e.live()) return { can_continue: false };
  const ep = e.episode(episodeUuid);
  return { can_continue: ep !== null && ep.state === "claimed" && ep.client_uuid === clientUuid && mayActOn(ep.claimed_by, actor) };
}

