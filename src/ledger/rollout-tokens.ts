/**
 * get_rollout_data's items with the tokens to train on: an AgentJet claim that joined a buffer
 * group (extra_info.source "agentjet", session_id "<episode>#<fence>") gets its trajectory's
 * training sequence from the ledger, in slime's Sample field names. The engine's Durable Object
 * answers the pull; the Worker adds these from D1 and R2 (one query, one R2 read per object),
 * and only when the pull holds such items. A claim whose calls are not recorded yet (the gateway
 * sends its records within a second or so) or carried no token ids is left as it is. So is one
 * whose sequence stops before its last turn (`drift_at_call`: a turn re-tokenized, or without
 * known tokens, or past the 2,000 calls a trajectory answers): its reward is the whole claim's,
 * and the turns up to the drift are not the claim. Its item says so instead, in
 * `extra_info.drift_at_call` (as the tokens, it may first show on a re-read, once the records of
 * the claim's last calls arrive); the trajectory (docs/ledger.md) has the sequence up to there.
 *
 * The mark can be trusted because only the engine sets it: the buffer refuses a posted row that
 * carries it (engine/buffer-ingest.ts), and a session named like a claim without it matches
 * nothing, so no client can have another claim's tokens put in its own group.
 */
import { CLAIM_ROW_SOURCE, type GetRolloutDataResponse } from "../protocol/buffer";
import { claimKey, trainingSequences } from "./read";

const CLAIM_SESSION = /^(.+)#(0|[1-9][0-9]{0,14})$/;

export async function withTrainingTokens(db: D1Database, bucket: R2Bucket, engine: string, pulled: GetRolloutDataResponse): Promise<GetRolloutDataResponse> {
  const claims: { episode: string; fence: number }[] = [];
  for (const item of pulled.data.data) {
    const session = item.extra_info["session_id"];
    const m = item.extra_info["source"] === CLAIM_ROW_SOURCE && typeof session === "string" ? CLAIM_SESSION.exec(session) : null;
    if (m) claims.push({ episode: m[1] as string, fence: Number(m[2]) });
  }
  if (claims.length === 0) return pulled;
  const sequences = await trainingSequences(db, bucket, engine, claims);
  if (sequences.size === 0) return pulled;
  const data = pulled.data.data.map((item) => {
    const m = CLAIM_SESSION.exec(String(item.extra_info["session_id"] ?? ""));
    const t = m && item.extra_info["source"] === CLAIM_ROW_SOURCE ? sequences.get(claimKey(m[1] as string, Number(m[2]))) : undefined;
    if (t === undefined) return item;
    if (t.drift_at_call !== null) return { ...item, extra_info: { ...item.extra_info, drift_at_call: t.drift_at_call } };
    return { ...item, tokens: t.tokens, response_length: t.response_length, loss_mask: t.loss_mask, rollout_log_probs: t.rollout_log_probs };
  });
  return { ...pulled, data: { ...pulled.data, data } };
}
