/**
 * A trajectory read in its delta form (`form: "delta"`: each call with what it added to the call it
 * names) made whole again, as the exchange writes the whole form: every call's messages, prompt ids
 * and /v1/completions prompt whole. The delta form grows with the claim's turns, the whole form
 * with their square (a 400-turn agent's trajectory is hundreds of MB whole): read the delta form,
 * and make whole only what is needed. The rules are the exchange's own (src/ledger/rebuild.ts).
 */
import type { Trajectory, TrajectoryCall } from "../protocol/ledger";
import { itemsOf } from "../ledger/chain";
import { promptOf, rebuildAll, type StoredCall } from "../ledger/rebuild";
import { isTokenIds, sequencePrompt } from "../ledger/splice";

/** A delta-form call as the rebuild reads it: its tools are written whole in either form. */
function storedOf(c: TrajectoryCall): StoredCall {
  const prompt = c.params["prompt"];
  return {
    prefix: c.messages_from ?? null,
    messages: c.messages,
    answer: c.answer,
    tokens: c.tokens === null ? null : { promptPrefix: c.tokens.prompt_from ?? null, added: c.tokens.prompt_ids, completion: c.tokens.completion_ids },
    prompt: c.prompt_from && (typeof prompt === "string" || isTokenIds(prompt)) ? { prefix: c.prompt_from, rest: prompt } : sequencePrompt(prompt),
    tools: c.tools,
    toolsFromPrefix: false,
  };
}

/** The trajectory with every call whole (one already whole is given back as it is). */
export function wholeTrajectory(t: Trajectory): Trajectory {
  if (t.form !== "delta") return t;
  const byId = rebuildAll(new Map(t.calls.map((c) => [c.call_id, storedOf(c)])));
  const calls = t.calls.map((c): TrajectoryCall => {
    const { messages_from: _m, prompt_from: _p, ...call } = c;
    const whole = byId.get(c.call_id);
    if (whole === undefined) return call;
    const params = c.prompt_from && whole.text !== null ? { ...c.params, prompt: promptOf(whole.text) } : c.params;
    const messages = whole.messages === null ? c.messages : itemsOf(whole.messages);
    if (c.tokens === null) return { ...call, params, messages };
    const { prompt_from: _t, ...tokens } = c.tokens;
    return { ...call, params, messages, tokens: { ...tokens, prompt_ids: whole.prompt === null ? tokens.prompt_ids : itemsOf(whole.prompt) } };
  });
  return { ...t, form: "whole", calls };
}
