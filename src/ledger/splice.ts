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
 * call extends when its prompt begins with the previous prompt followed by the previous text.
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
 * A /v1/completions prompt stored as what it adds to an earlier call's prompt and text (an agent
 * on that endpoint sends its whole history as one string). An object, which no valid request's
 * prompt is (OpenAI's is a string or an array), so a reader tells it from a prompt stored whole.
 */
export type PromptDelta = { prefix: PrefixRef; rest: string };

export function isPromptDelta(v: unknown): v is PromptDelta {
  if (!isRecord(v) || typeof v["rest"] !== "string" || !isRecord(v["prefix"])) return false;
  return typeof v["prefix"]["call_id"] === "string" && Number.isSafeInteger(v["prefix"]["count"]);
}

/** `prompt` as stored: after `base.text` (an earlier call's prompt then its text) when it begins with it. */
export function promptDelta(prompt: string, base: { call_id: string; text: string | null } | null): string | PromptDelta {
  const text = base?.text ?? "";
  if (base === null || text === "" || !prompt.startsWith(text)) return prompt;
  return { prefix: { call_id: base.call_id, count: text.length }, rest: prompt.slice(text.length) };
}

/** What a call's successor on /v1/completions begins with: its prompt, then the text it answered. */
export function promptContinuation(prompt: string, answer: Record<string, unknown> | null): string {
  const text = answer?.["content"];
  return typeof text === "string" ? prompt + text : prompt;
}
