/**
 * The sequence slime and verl train on, from a claim's calls with token ids: the first prompt,
 * then each completion and the prompt tokens that came between turns (tool results, the next
 * user message). Only the model's own tokens are in the loss. A turn whose prompt does not begin
 * with the sequence so far (history trimmed or rewritten, text re-tokenized differently), or whose
 * tokens are not known, is not spliced in: the sequence stops before it and says at which call.
 */
import type { TrainingSequence, TurnSample } from "../protocol/ledger";
import { itemsOf, type Chain } from "./chain";
import { extendsTokens } from "./splice";

/**
 * A successful call of the claim, by its index among the claim's calls; `prompt` null when its
 * tokens are not known. Those are `unknown` when they were lost (a truncated record, a body gone,
 * a prefix call the ledger does not have), not when the call was recorded without token ids;
 * `idsLost` when its record is known to have carried ids (a prefix call missing), which a
 * truncated record or a body gone do not tell.
 */
export type TokenTurn =
  | { index: number; prompt: Chain<readonly number[]>; completion: number[]; logprobs: number[]; weightVersion: number | null }
  | { index: number; prompt: null; unknown: boolean; idsLost: boolean };

/** The claim was recorded with token ids: a turn has them, or had them and they were lost. */
const withIds = (turns: readonly TokenTurn[]): boolean => turns.some((t) => t.prompt !== null || t.idsLost);

export function trainingSequence(turns: readonly TokenTurn[]): TrainingSequence | null {
  // None with token ids: nothing to train on, not a sequence that stops.
  if (!withIds(turns)) return null;
  // Calls recorded without token ids before the first with them (capture turned on mid-claim) are
  // in its prompt, not spliced. One whose tokens were lost is not: its completion, the model's
  // own tokens, would be taken for prompt.
  const start = turns.findIndex((t) => t.prompt !== null || t.unknown);
  const first = turns[start];
  if (first === undefined) return null;
  if (first.prompt === null) return { tokens: [], response_length: 0, loss_mask: [], rollout_log_probs: [], segments: [], drift_at_call: first.index };
  const tokens = itemsOf(first.prompt);
  const promptLength = tokens.length;
  const lossMask: number[] = [];
  const logprobs: number[] = [];
  const segments: TrainingSequence["segments"] = [];
  let driftAt: number | null = null;
  for (const t of turns.slice(start)) {
    // Without its tokens, the next prompt would bring this call's completion in as prompt tokens.
    // Each turn's prompt is made whole only for its own turn: together they are quadratic in turns.
    const prompt = t.prompt === null || t === first ? null : itemsOf(t.prompt);
    if (t.prompt === null || (prompt !== null && !extendsTokens(prompt, tokens))) {
      driftAt = t.index;
      break;
    }
    if (prompt !== null) {
      const between = prompt.slice(tokens.length);
      tokens.push(...between);
      for (let i = 0; i < between.length; i++) {
        lossMask.push(0);
        logprobs.push(0);
      }
    }
    segments.push({ start: tokens.length - promptLength, length: t.completion.length, weight_version: t.weightVersion });
    tokens.push(...t.completion);
    for (let i = 0; i < t.completion.length; i++) {
      lossMask.push(1);
      logprobs.push(t.logprobs[i] ?? 0);
    }
  }
  return { tokens, response_length: tokens.length - promptLength, loss_mask: lossMask, rollout_log_probs: logprobs, segments, drift_at_call: driftAt };
}

/**
 * Each turn with known tokens as a sample of its own (docs/ledger.md, "Training turn by turn"),
 * and the indexes of the successful calls without known tokens. Each sample's `tokens` are made
 * whole when read (a getter, for JSON.stringify): together they are quadratic in turns, so a
 * reader writes one sample at a time. Null when the claim was not recorded with token ids.
 */
export function turnSamples(turns: readonly TokenTurn[]): { samples: TurnSample[]; withoutTokens: number[] } | null {
  if (!withIds(turns)) return null;
  const samples: TurnSample[] = [];
  const withoutTokens: number[] = [];
  for (const t of turns) {
    if (t.prompt === null) {
      withoutTokens.push(t.index);
      continue;
    }
    const { prompt, completion } = t;
    samples.push({
      call_index: t.index,
      get tokens() {
        return itemsOf(prompt).concat(completion);
      },
      response_length: completion.length,
      loss_mask: completion.map(() => 1),
      rollout_log_probs: completion.map((_, i) => t.logprobs[i] ?? 0),
      weight_version: t.weightVersion,
    });
  }
  return { samples, withoutTokens };
}
