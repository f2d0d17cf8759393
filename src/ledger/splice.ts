/**
 * How one call of a claim continues the previous one, for storing only what is new (the gateway)
 * and for rebuilding whole conversations (the readers). An agent resends its whole history on
 * every call, so storing each request whole costs the square of its length.
 *
 * A call "extends" the previous call when its messages begin with the previous call's messages
 * followed by the previous answer (its prompt token ids, with the previous prompt and completion
 * ids). Messages are compared by what makes a conversation (role, content, name, tool calls and
 * the tool call they answer): a client that sends the answer back without a server's extra fields
 * (`refusal: null`, reasoning) or with its keys in another order still extends. A /v1/completions
 * prompt (text, or token ids) is stored after the previous prompt followed by its answer (its
 * text, or its completion ids), or after the previous prompt alone.
 */
import type { PrefixRef } from "../protocol/ledger";
import { isRecord } from "../protocol/record";

type Json = unknown;

function toolCallKey(c: unknown): Json {
  if (!isRecord(c)) return c;
  const f = isRecord(c["function"]) ? c["function"] : {};
  return [c["id"] ?? null, f["name"] ?? null, f["arguments"] ?? null];
}

/** A message reduced to what makes the conversation, as a string that compares equal when they do. */
export function messageKey(m: unknown): string {
  if (!isRecord(m)) return JSON.stringify(m);
  const content = m["content"] ?? "";
  const calls = Array.isArray(m["tool_calls"]) && m["tool_calls"].length > 0 ? m["tool_calls"].map(toolCallKey) : null;
  return JSON.stringify([m["role"] ?? null, content, m["name"] ?? null, m["tool_call_id"] ?? null, calls]);
}

/** The conversation a call's successor extends: its messages, then its answer when it had one. */
export function continuation(messages: readonly unknown[], answer: unknown | null): unknown[] {
  return answer === null ? [...messages] : [...messages, answer];
}

/** Whether `items` begin with all of `base`. */
export function beginsWith<T>(items: readonly T[], base: readonly T[], same: (a: T, b: T) => boolean): boolean {
  if (items.length < base.length) return false;
  for (let i = 0; i < base.length; i++) if (!same(items[i] as T, base[i] as T)) return false;
  return true;
}

const sameMessage = (a: unknown, b: unknown): boolean => a === b || messageKey(a) === messageKey(b);
const sameToken = (a: number, b: number): boolean => a === b;

/** Whether `messages` extend the conversation `base` (a previous call's continuation). */
export function extendsMessages(messages: readonly unknown[], base: readonly unknown[]): boolean {
  return beginsWith(messages, base, sameMessage);
}

export function extendsTokens(ids: readonly number[], base: readonly number[]): boolean {
  return beginsWith(ids, base, sameToken);
}

export type Delta<T> = { prefixCount: number; rest: T[] } | { prefixCount: null; rest: T[] };

/** What to store of `items` given the previous call's continuation `base` (null: there is none to refer to). */
function delta<T>(items: readonly T[], base: readonly T[] | null, extend: (items: readonly T[], base: readonly T[]) => boolean): Delta<T> {
  if (base !== null && base.length > 0 && extend(items, base)) return { prefixCount: base.length, rest: items.slice(base.length) };
  return { prefixCount: null, rest: [...items] };
}

export const messageDelta = (messages: readonly unknown[], base: readonly unknown[] | null): Delta<unknown> => delta(messages, base, extendsMessages);
export const tokenDelta = (ids: readonly number[], base: readonly number[] | null): Delta<number> => delta(ids, base, extendsTokens);

/** Rebuilds a stored list: the referenced call's continuation cut to `count`, then the rest. */
export function rebuild<T>(prefix: { base: readonly T[]; count: number } | null, rest: readonly T[]): T[] | null {
  if (prefix === null) return [...rest];
  if (prefix.base.length < prefix.count) return null;
  return [...prefix.base.slice(0, prefix.count), ...rest];
}

/**
 * A /v1/completions prompt as one sequence: one string (an agent on that endpoint sends its whole
 * history as text), or token ids (vLLM's and slime's trainers send the history as ids). The other
 * forms OpenAI allows, a list of strings or of id lists, are several independent prompts answered
 * as several choices; they are stored whole (docs/ledger.md).
 */
export type SequencePrompt = string | number[];

/** Token ids as a prompt holds them: non-negative integers (a tokenizer's vocabulary indices). */
export function isTokenIds(v: unknown): v is number[] {
  return Array.isArray(v) && v.every((x) => Number.isSafeInteger(x) && (x as number) >= 0);
}

/** A prompt that can be stored as a delta: one string, or one list of ids (not empty: `[]` is no prompt). */
export function sequencePrompt(v: unknown): SequencePrompt | null {
  return typeof v === "string" || (isTokenIds(v) && v.length > 0) ? v : null;
}

/**
 * A /v1/completions prompt stored as what it adds to an earlier call's prompt and answer: `rest`
 * of the prompt's own kind (text after text, ids after ids). An object, which no valid request's
 * prompt is (OpenAI's is a string or an array), so a reader tells it from a prompt stored whole.
 */
export type PromptDelta = { prefix: PrefixRef; rest: SequencePrompt };

export function isPromptDelta(v: unknown): v is PromptDelta {
  if (!isRecord(v) || (typeof v["rest"] !== "string" && !isTokenIds(v["rest"])) || !isRecord(v["prefix"])) return false;
  const count = v["prefix"]["count"];
  return typeof v["prefix"]["call_id"] === "string" && Number.isSafeInteger(count) && (count as number) >= 0;
}

/**
 * What a call's successor on /v1/completions begins with: its prompt, then the text it answered
 * (after a prompt of ids, its completion's ids, when they were recorded). `promptLength` is where
 * the prompt ends in it: a successor that re-tokenized or edited the answer still continues the
 * prompt.
 */
export type PromptHead = { text: SequencePrompt; promptLength: number };

export function promptContinuation(prompt: SequencePrompt, answer: Record<string, unknown> | null, completionIds: readonly number[] | null): PromptHead {
  if (typeof prompt === "string") {
    const text = answer?.["content"];
    return { text: typeof text === "string" ? prompt + text : prompt, promptLength: prompt.length };
  }
  return { text: completionIds === null ? prompt : [...prompt, ...completionIds], promptLength: prompt.length };
}

function beginsWithPrompt(prompt: SequencePrompt, base: SequencePrompt): boolean {
  if (typeof prompt === "string") return typeof base === "string" && prompt.startsWith(base);
  return typeof base !== "string" && extendsTokens(prompt, base);
}

/** How much of `head` `prompt` begins with: all of it, else its prompt, else none (0). */
export function promptOverlap(prompt: SequencePrompt, head: PromptHead): number {
  if (head.text.length > 0 && beginsWithPrompt(prompt, head.text)) return head.text.length;
  if (head.promptLength > 0 && head.promptLength < head.text.length && beginsWithPrompt(prompt, head.text.slice(0, head.promptLength))) return head.promptLength;
  return 0;
}

/** `prompt` as stored: after what it shares with `base` (an earlier call's continuation), whole when nothing. */
export function promptDelta(prompt: SequencePrompt, base: ({ call_id: string } & PromptHead) | null): SequencePrompt | PromptDelta {
  const count = base === null ? 0 : promptOverlap(prompt, base);
  if (base === null || count === 0) return prompt;
  return { prefix: { call_id: base.call_id, count }, rest: prompt.slice(count) };
}

/** A prompt stored as `delta` of `base` (the named call's continuation), whole; null when `base` is shorter than the prefix. */
export function rebuildPrompt(delta: PromptDelta, base: SequencePrompt): SequencePrompt | null {
  if (base.length < delta.prefix.count) return null;
  if (typeof base === "string") return typeof delta.rest === "string" ? base.slice(0, delta.prefix.count) + delta.rest : null;
  return typeof delta.rest === "string" ? null : rebuild({ base, count: delta.prefix.count }, delta.rest);
}
