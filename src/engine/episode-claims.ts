/**
 * A client's claim of the queue's head: a lease with a fence (the claim's attempt number) and a
 * per-claim key signed for it, unless the engine is not rolling or pace holds train claims back.
 */
import type { ClaimEpisodeRequest, ClaimEpisodeResponse } from "../protocol/swarm";
import { signClaimKey } from "../auth/claim-key";
import type { EpisodeState } from "./episode-state";
import { paceAdmits } from "./pacing";
import { fail, ok, type Reply } from "./reply";
import { NO_EPISODES_CAUSE, notReadyCause, PACED_CAUSE } from "./rules";

export async function claim(e: EpisodeState, req: ClaimEpisodeRequest, origin: string, keySecret: string): Promise<Reply<ClaimEpisodeResponse>> {
  const meta = e.store.meta;
  const refuse = (fail_cause: string): Reply<ClaimEpisodeResponse> =>
    ok({ success: false, client_uuid: req.client_uuid, episode_uuid: "", openai_base_url: "", openai_api_key: "", fail_cause });
  if (meta.status !== "ENGINE.ROLLING") return refuse(notReadyCause(meta.status));
  // Checked before anything is claimed, so a misconfigured deployment leaks no claims.
  if (!keySecret) return fail(500, "misconfigured", "CLAIM_KEY_SECRET is not configured: per-claim keys cannot be signed.");
  if (req.episode_type === "train" && paced(e, req)) return refuse(PACED_CAUSE);
  const now = e.host.now();
  const expiresAt = now + Math.ceil(req.discard_episode_timeout * 1000);
  // The FIFO head, claimed in one statement: atomic by itself, so it needs no explicit
  // transaction (transactionSync costs about as much as the statement here).
  const claimed =
    e.store.sql
      .exec<{ episode_uuid: string; fence: number }>(
        `UPDATE episodes SET state = 'claimed', queue_seq = NULL, episode_type = ?, client_uuid = ?, fence = fence + 1,
           last_activity = ?, discard_timeout = ?, expires_at = ?, llm_call_count = 0, task_id = ?, claim_weight_version = ?
         WHERE episode_uuid = (SELECT episode_uuid FROM episodes WHERE state = 'registered' ORDER BY queue_seq LIMIT 1)
         RETURNING episode_uuid, fence`,
        req.episode_type,
        req.client_uuid,
        now,
        req.discard_episode_timeout,
        expiresAt,
        req.throttle_policy?.current_task_id ?? "",
        meta.weightVersion,
      )
      .toArray()[0] ?? null;
  if (claimed === null) return refuse(NO_EPISODES_CAUSE);
  if (claimed.fence > e.fenceHigh) e.fenceHigh = claimed.fence;
  e.host.armBy(expiresAt);
  const key = await signClaimKey(keySecret, { engine: meta.name ?? "", incarnation: meta.incarnation, ...claimed });
  return ok({
    success: true,
    client_uuid: req.client_uuid,
    episode_uuid: claimed.episode_uuid,
    openai_base_url: `${origin}/v1`,
    openai_api_key: key,
    fail_cause: "",
    fence: claimed.fence,
  });
}

/**
 * Whether pace holds this train claim back: the claims under way (an O(claimed) read, made
 * only under pace) and the buffer's groups not yet consumed could be consumed too late.
 */
function paced(e: EpisodeState, req: ClaimEpisodeRequest): boolean {
  if (e.buffer.config().staleness_policy !== "pace") return false;
  const claims = e.store.sql
    .exec<{ count: number; oldest: number | null }>(
      "SELECT COUNT(*) AS count, MIN(claim_weight_version) AS oldest FROM episodes WHERE state = 'claimed' AND episode_type = 'train'",
    )
    .one();
  const t = req.throttle_policy;
  const batch = t?.expected_batch_size !== undefined && t.expected_num_repeat !== undefined ? t.expected_batch_size * t.expected_num_repeat : null;
  if (paceAdmits(e.buffer.paceState(claims, false, batch))) return false;
  e.buffer.notePaced();
  return true;
}

export function canContinue(e: EpisodeState, clientUuid: string, episodeUuid: string): { can_continue: boolean } {
  if (!e.live()) return { can_continue: false };
  const ep = e.episode(episodeUuid);
  return { can_continue: ep !== null && ep.state === "claimed" && ep.client_uuid === clientUuid };
}

