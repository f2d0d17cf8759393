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
 * trajectory answers). Those samples together are quadratic in the claim's turns.
 *
 * A pull that holds such items is written as a stream (withTrainingTokens below): a trainer's
 * pull of many long agents' claims would not fit an isolate's 128 MB whole.
 *
 * The mark can be trusted because only the engine sets it: the buffer refuses a posted row that
 * carries it (engine/buffer-ingest.ts), and a session named like a claim without it matches
 * nothing, so no client can have another claim's tokens put in its own group.
 */
import { loggedErrorId } from "../error-id";
import { CLAIM_ROW_SOURCE, type GetRolloutDataResponse, type RolloutItem, type TrainingForm } from "../protocol/buffer";
import type { TurnSample } from "../protocol/ledger";
import { claimKey, claimObjects, claimTurns, sequenceTurns, type ClaimTurns } from "./read";
import { trainingSequence, turnSamples } from "./training-sequence";
import { aroundList, jsonStream, listed, listJsonPieces } from "./trajectory-json";

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

/** Claims whose calls are read at once, at least: a run's bodies are held while its items are written. */
const CLAIMS_PER_READ = 16;
/**
 * R2 reads one pull may make (an invocation makes at most 1,000 requests to other services, on
 * some plans). Each run reads every object its claims' calls are in, and a batch object holds the
 * calls of all the claims its gateway relayed within a second: when the runs' reads would pass
 * this, runs are longer (fewer runs read a shared object fewer times). A claim over for a few
 * seconds is one object of its own (compaction.ts), and its runs stay short.
 */
const MAX_R2_READS = 800;
/** D1 queries one pull may make (1,000 an invocation): one for the claims' objects, one a run. */
const MAX_RUNS = 900;

type Named = { item: RolloutItem; claim: { episode: string; fence: number } | null };

/** The items in runs of about `per` claims, each run read from D1 and R2 when its first item is written. */
function runsOf(items: readonly Named[], per: number): Named[][] {
  const runs: Named[][] = [];
  let run: Named[] = [];
  let claims = 0;
  for (const n of items) {
    if (n.claim !== null && claims === per) {
      runs.push(run);
      run = [];
      claims = 0;
    }
    run.push(n);
    if (n.claim !== null) claims++;
  }
  if (run.length > 0) runs.push(run);
  return runs;
}

const claimsIn = (run: readonly Named[]) => run.flatMap((n) => (n.claim === null ? [] : [n.claim]));

/** One run's claims' turns: their index rows (one D1 query), then their bodies. */
const runTurns = (db: D1Database, bucket: R2Bucket, engine: string, run: readonly Named[]): Promise<Map<string, ClaimTurns>> => claimTurns(db, bucket, engine, claimsIn(run));

/**
 * Claims a run: CLAIMS_PER_READ, or doubled until the runs' reads (each run the distinct objects of
 * its claims) are within `maxR2Reads`. When even one run would pass it (more objects than that),
 * runs stay short: longer ones would read no fewer objects, and hold more.
 */
function claimsPerRun(items: readonly Named[], objects: Map<string, string[]>, maxR2Reads: number): number {
  const claims = claimsIn(items).length;
  const reads = (per: number): number =>
    runsOf(items, per).reduce((n, run) => n + new Set(claimsIn(run).flatMap((c) => objects.get(claimKey(c.episode, c.fence)) ?? [])).size, 0);
  const floor = Math.max(CLAIMS_PER_READ, Math.ceil(claims / MAX_RUNS));
  for (let per = floor; per < claims * 2; per *= 2) if (reads(per) <= maxR2Reads) return per;
  return floor;
}

/** Each item's pieces (its sequence or samples made as it is written), the claims' bodies read a run at a time. */
async function* itemPieces(db: D1Database, bucket: R2Bucket, engine: string, runs: readonly Named[][], form: TrainingForm): AsyncGenerator<string> {
  let i = 0;
  for (const run of runs) {
    const turns = await runTurns(db, bucket, engine, run);
    for (const { item, claim } of run) {
      const t = trained(item, claim === null ? undefined : turns.get(claimKey(claim.episode, claim.fence)), form);
      yield* listed(i++, t.turns === undefined ? [JSON.stringify(t.item)] : listJsonPieces((list) => ({ ...t.item, turns: list }), t.turns));
    }
  }
}

/**
 * The pull with its claims' tokens, as a JSON stream written an item at a time (a sample at a
 * time with turns): each item's sequence or samples made as it is written, and the claims' bodies
 * read a run of 16 claims at a time (more when the reads would pass MAX_R2_READS: claimsPerRun),
 * so that a trainer's pull of hundreds of long agents' claims fits an isolate's memory: a run's
 * index rows (one D1 query) and bodies are held while its items are written. The pull as it was
 * when it holds no claim. meta_info, with the pull's cursor, comes before the items and before
 * any read of D1 or R2: the engine has handed the groups out, so a read that fails breaks the
 * answer off after the cursor, and the trainer reads the pull again by it (a 500 before the
 * cursor lost the groups).
 */
export async function withTrainingTokens(
  db: D1Database,
  bucket: R2Bucket,
  engine: string,
  pulled: GetRolloutDataResponse,
  form: TrainingForm = "sequence",
  maxR2Reads = MAX_R2_READS,
): Promise<GetRolloutDataResponse | ReadableStream<Uint8Array>> {
  const items = pulled.data.data.map((item) => ({ item, claim: claimOf(item) }));
  const named = claimsIn(items);
  if (named.length === 0) return pulled;
  const [head, tail] = aroundList((data) => ({ ...pulled, data: { meta_info: pulled.data.meta_info, data } }));
  async function* pieces(): AsyncGenerator<string> {
    yield head;
    try {
      const runs = runsOf(items, claimsPerRun(items, await claimObjects(db, engine, named), maxR2Reads));
      yield* itemPieces(db, bucket, engine, runs, form);
    } catch (err) {
      // The status line is sent: the answer breaks off (the trainer reads the pull again by its
      // cursor), and the operator finds the cause in the log as for a 500.
      loggedErrorId("internal error (get_rollout_data, answer broken off)", err);
      throw err;
    }
    yield tail;
  }
  return jsonStream(pieces());
}
