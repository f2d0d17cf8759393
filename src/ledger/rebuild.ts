/**
 * A claim's calls whole from what each added to an earlier call of the claim: the reader's side of
 * the ledger's delta encoding (protocol/ledger.ts CallBody). The Worker rebuilds calls from the
 * bodies it stores (read.ts); a client that read a trajectory in its delta form rebuilds the whole
 * one with the same rules (client/ledger-delta.ts). Calls are chains (chain.ts) that share the
 * claim's history, so all of them together hold it once.
 */
import type { PrefixRef } from "../protocol/ledger";
import { chained, chainOf, itemsOf, textOf, type Chain } from "./chain";
import { isPromptDelta, type PromptDelta, type SequencePrompt } from "./splice";

/**
 * One call as stored, whatever it is read from: its messages after `prefix.count` of the named
 * call's messages and answer; its prompt ids after `promptPrefix.count` of the named call's prompt
 * and completion ids; a /v1/completions prompt whole, or as a delta of the named call's prompt and
 * answer; its tools, or the named call's.
 */
export type StoredCall = {
  prefix: PrefixRef | null;
  messages: readonly unknown[];
  answer: unknown | null;
  tokens: { promptPrefix: PrefixRef | null; added: number[]; completion: number[] } | null;
  prompt: SequencePrompt | PromptDelta | null;
  tools: unknown[] | null;
  toolsFromPrefix: boolean;
};

/** A /v1/completions prompt: text after text, ids after ids. */
export type PromptChain = { text: Chain<string> } | { ids: Chain<readonly number[]> };

/**
 * A call as its successors continue it. `messages` and `prompt` are null when they are not known
 * whole (no body, no token ids, or a prefix call the claim does not have): a successor can then be
 * rebuilt from them no more than this call could. `next` is its messages then its answer, and
 * `sequence` its prompt ids then its completion's: what a successor continues. `added` is the
 * prompt ids it stored. `text` is a /v1/completions call's prompt as sent (a text, or token ids),
 * null for another call, a batch of prompts, or one not known whole.
 */
export type Rebuilt = {
  messages: Chain<readonly unknown[]> | null;
  next: Chain<readonly unknown[]> | null;
  answer: unknown | null;
  tools: unknown[] | null;
  prompt: Chain<readonly number[]> | null;
  completion: number[] | null;
  sequence: Chain<readonly number[]> | null;
  added: number[] | null;
  text: PromptChain | null;
};

export const UNKNOWN: Rebuilt = { messages: null, next: null, answer: null, tools: null, prompt: null, completion: null, sequence: null, added: null, text: null };

/** `rest` after the first `prefix.count` items of `base` of the call `prefix` names; null when those are not known. */
function continued<T>(prefix: PrefixRef | null, rest: readonly T[], byId: Map<string, Rebuilt>, base: (ref: Rebuilt) => Chain<readonly T[]> | null): Chain<readonly T[]> | null {
  if (prefix === null) return chainOf(rest);
  const ref = byId.get(prefix.call_id);
  const b = ref === undefined ? null : base(ref);
  return b === null ? null : chained(b, prefix.count, rest);
}

/** A /v1/completions prompt whole, as the call sent it. */
export const promptOf = (p: PromptChain): SequencePrompt => ("text" in p ? textOf(p.text) : itemsOf(p.ids));

/**
 * A /v1/completions prompt stored as what it adds to the prompt and answer (text, or completion
 * ids) of the call it names (splice.ts promptContinuation); null when those are not known.
 */
function continuedText(delta: PromptDelta, byId: Map<string, Rebuilt>): PromptChain | null {
  const base = byId.get(delta.prefix.call_id);
  if (base === undefined || base.text === null) return null;
  const { count } = delta.prefix;
  if ("text" in base.text) {
    const answered = (base.answer as Record<string, unknown> | null)?.["content"];
    const head = typeof answered === "string" ? chained(base.text.text, base.text.text.length, answered) : base.text.text;
    const text = typeof delta.rest === "string" && head !== null ? chained(head, count, delta.rest) : null;
    return text === null ? null : { text };
  }
  const head = base.completion === null ? base.text.ids : chained(base.text.ids, base.text.ids.length, base.completion);
  const ids = typeof delta.rest !== "string" && head !== null ? chained(head, count, delta.rest) : null;
  return ids === null ? null : { ids };
}

/** One call whole, from what it stored and the calls it names, rebuilt already (or not known). */
function rebuildOne(call: StoredCall | null, byId: Map<string, Rebuilt>): Rebuilt {
  if (call === null) return UNKNOWN;
  const t = call.tokens;
  const { answer, prompt: stored } = call;
  const messages = continued(call.prefix, call.messages, byId, (c) => c.next);
  const prompt = t === null ? null : continued(t.promptPrefix, t.added, byId, (c) => c.sequence);
  const completion = t?.completion ?? null;
  return {
    messages,
    next: messages === null ? null : chained(messages, messages.length, answer === null ? [] : [answer]),
    answer,
    // A truncated record keeps tools_from_prefix but drops its prefix (recorder.ts fitBody): its tools are not known.
    tools: !call.toolsFromPrefix ? call.tools : call.prefix === null ? null : (byId.get(call.prefix.call_id)?.tools ?? null),
    prompt,
    completion,
    sequence: prompt === null || completion === null ? null : chained(prompt, prompt.length, completion),
    added: t?.added ?? null,
    text: stored === null ? null : isPromptDelta(stored) ? continuedText(stored, byId) : typeof stored === "string" ? { text: chainOf(stored) } : { ids: chainOf(stored) },
  };
}

/** The calls a stored call continues: its messages' prefix call, its prompt ids', and its prompt text's. */
const prefixCalls = (call: StoredCall | null): string[] =>
  [call?.prefix?.call_id, call?.tokens?.promptPrefix?.call_id, isPromptDelta(call?.prompt) ? call.prompt.prefix.call_id : undefined].filter((id): id is string => id !== undefined);

/**
 * Every call of the claim whole, each once. A delta names a call of its claim by id, not the one
 * admitted before it: concurrent calls are stored against whichever finished last, so a prefix
 * may be a call admitted later. Depth first, each call after those it names, without recursion
 * (a chain can be as long as the claim); a prefix the claim does not hold, or one that leads back
 * to the call (a cycle, which no recorder makes but stored data may hold), is not known.
 */
export function rebuildAll(calls: ReadonlyMap<string, StoredCall | null>): Map<string, Rebuilt> {
  const byId = new Map<string, Rebuilt>();
  // The calls on the path being rebuilt: one that names any of them closes a cycle.
  const open = new Set<string>();
  for (const root of calls.keys()) {
    const stack = [root];
    while (stack.length > 0) {
      const id = stack[stack.length - 1] as string;
      if (byId.has(id)) {
        stack.pop();
        continue;
      }
      const call = calls.get(id) ?? null;
      if (!open.has(id)) {
        open.add(id);
        const pending = prefixCalls(call).filter((p) => calls.has(p) && !byId.has(p) && !open.has(p));
        if (pending.length > 0) {
          stack.push(...pending);
          continue;
        }
      }
      byId.set(id, rebuildOne(call, byId));
      open.delete(id);
      stack.pop();
    }
  }
  return byId;
}
