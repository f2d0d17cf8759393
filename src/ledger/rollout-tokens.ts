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
 * With `training: "turns"` each such item gets instead each successful call's own sample, in
 * `turns` (its whole prompt and completion: the way to train a thinking model whose template drops
 * earlier thinking, and whose turns never make one sequence), and `extra_info.turns_without_tokens`
 * names its successful calls without known tokens (`turns_cut_at` the first call past those a
 * trajectory answers). Those samples together are quadratic in the claim's turns, so that answer
 * is written a sample at a time (trajectory-json.ts), never held whole.
 *
 * The mark can be trusted because only the engine sets it: the buffer refuses a posted row that
 * carries it (engine/buffer-ingest.ts), and a session named like a claim without it matches
 * nothing, so no client can have another claim's tokens put in its own group.
 */
import { CLAIM_ROW_SOURCE, type GetRolloutDataResponse, type RolloutItem, type TrainingForm } from "../protocol/buffer";
import type { TurnSample } from "../protocol/ledger";
import { claimKey, claimTurns, sequenceTurns, type ClaimTurns } from "./read";
import { trainingSequence, turnSamples } from "./training-sequence";
import { jsonStream, listJsonPieces } from "./trajectory-json";

const CLAIM_SESSION = /^(.+)#(0|[1-9][0-9]{0,14})$/;

/** The claim an item is, when the engine made it from an AgentJet claim (the mark only the engine sets). */
function claimOf(item: RolloutItem): { episode: string; fence: number } | null {
  const session = item.extra_info["session_id"];
  const m = item.extra_info["source"] === CLAIM_ROW_SOURCE && typeof session === "string" ? CLAIM_SESSION.exec(session) : null;
  return m === null ? null : { episode: m[1] as string, fence: Number(m[2]) };
}

type Turned = { item: RolloutItem; turns?: TurnSample[] };

/** `item` with what `claim` gives it to train on, in `form`. */
function trained(item: RolloutItem, claim: ClaimTurns | undefined, form: TrainingForm): Turned {
  if (claim === undefined) return { item };
  if (form === "turns") {
    const t = turnSamples(claim.turns);
    if (t === null) return { item };
    const said = { ...(t.withoutTokens.length > 0 ? { turns_without_tokens: t.withoutTokens } : {}), ...(claim.cut ? { turns_cut_at: claim.calls } : {}) };
    return { item: Object.keys(said).length === 0 ? item : { ...item, extra_info: { ...item.extra_info, ...said } }, turns: t.samples };
  }
  const s = trainingSequence(sequenceTurns(claim));
  if (s === null) return { item };
  if (s.drift_at_call !== null) return { item: { ...item, extra_info: { ...item.extra_info, drift_at_call: s.drift_at_call } } };
  return { item: { ...item, tokens: s.tokens, response_length: s.response_length, loss_mask: s.loss_mask, rollout_log_probs: s.rollout_log_probs } };
}

/** The pull with its claims' tokens: as an object, or (turns) as a JSON stream written a sample at a time. */
export async function withTrainingTokens(
  db: D1Database,
  bucket: R2Bucket,
  engine: string,
  pulled: GetRolloutDataResponse,
  form: TrainingForm = "sequence",
): Promise<GetRolloutDataResponse | ReadableStream<Uint8Array>> {
  const claims = pulled.data.data.map(claimOf);
  const named = claims.filter((c) => c !== null);
  const turns = named.length === 0 ? new Map<string, ClaimTurns>() : await claimTurns(db, bucket, engine, named);
  const items = pulled.data.data.map((item, i) => {
    const c = claims[i];
    return trained(item, c === null || c === undefined ? undefined : turns.get(claimKey(c.episode, c.fence)), form);
  });
  if (form === "sequence") return { ...pulled, data: { ...pulled.data, data: items.map((t) => t.item) } };
  // meta_info before the items: a reader whose answer broke off has the cursor to read the pull again by.
  const pieces = listJsonPieces(
    (data) => ({ ...pulled, data: { meta_info: pulled.data.meta_info, data } }),
    items,
    ({ item, turns }) => (turns === undefined ? [JSON.stringify(item)] : listJsonPieces((list) => ({ ...item, turns: list }), turns)),
  );
  return jsonStream(pieces);
}
