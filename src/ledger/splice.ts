/**
 * How one call of a claim continues the previous one, for storing only what is new (the gateway)
 * and for rebuilding whole conversations (the readers). An agent resends its whole history on
 * every call, so storing each request whole costs the square of its length.
 *
 * A call "extends" the previous call when its messages begin with the previous call's messages
 * followed by the previous answer (its prompt token ids, with the previous prompt and completion
 * ids). Messages are compared by what makes a conversation (role, content, name, tool calls and
 * the tool call they answer): a client that sends the answer back without a server's extra fields
 * (`refusal: null`, reasoning) or with its keys in another order still extends, and so does one
 * that keeps every message as content parts and sends a string answer back as its one text part.
 * A message that continues its prefix only in another form is stored again in this call's form,
 * so that readers give back each call's messages as it sent them. A /v1/completions
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

/** `v` with every object's keys in one order: parts that differ only in key order compare equal. */
function canonical(v: unknown): Json {
  if (Array.isArray(v)) return v.map(canonical);
  if (!isRecord(v)) return v;
  const out: Record<string, Json> = {};
  for (const k of Object.keys(v).sort()) out[k] = canonical(v[k]);
  return out;
}

/**
 * The text of content that is exactly one text part (`[{type: "text", text}]`, no other key),
 * which every chat template renders as that string; null for any other content. Several text
 * parts are not their concatenation: servers join them differently (vLLM with a newline).
 */
function onlyText(content: unknown[]): string | null {
  if (content.length !== 1) return null;
  const p = content[0];
  if (!isRecord(p) || p["type"] !== "text" || typeof p["text"] !== "string") return null;
  for (const k in p) if (k !== "type" && k !== "text") return null;
  return p["text"];
}

const keyOf = (m: Record<string, unknown>, content: Json, calls: Json): string => JSON.stringify([m["role"] ?? null, content, m["name"] ?? null, m["tool_call_id"] ?? null, calls]);

/** Fields whose string values `key` holds whole: a message of only these (role and content among them) has no form but its key. */
const KEYED = new Set(["role", "content", "name", "tool_call_id"]);

/** What makes the conversation of a record (not any other value): see messageKeys. */
function conversationKey(m: Record<string, unknown>): string {
  const content = m["content"] ?? "";
  const calls = Array.isArray(m["tool_calls"]) && m["tool_calls"].length > 0 ? m["tool_calls"].map(toolCallKey) : null;
  const text = Array.isArray(content) ? onlyText(content) : null;
  return keyOf(m, Array.isArray(content) ? (text ?? canonical(content)) : content, calls);
}

/**
 * A message's two keys: `key` compares equal for messages that make the same conversation (a
 * string and its one text part alike, an answer with or without a server's extra fields); `form`
 * is the whole message as sent, its keys in one order, so that a stored prefix gives back exactly
 * what a call sent: never a field it left out (a thinking model's reasoning, `refusal: null`), nor
 * another reasoning than the one it sent back, nor null content for "". A message of only string
 * role, content, name and tool_call_id (users' and tools' messages, mostly) has its key as form.
 */
export function messageKeys(m: unknown): { key: string; form: string } {
  if (!isRecord(m)) {
    const key = JSON.stringify(m) ?? "undefined";
    return { key, form: key };
  }
  const key = conversationKey(m);
  // Told from a whole message's form by its shape: a key is a JSON array, a message an object.
  // Without role or content a key stands for other messages too (content "" and none alike).
  const plain = "role" in m && "content" in m && Object.keys(m).every((k) => KEYED.has(k) && typeof m[k] === "string");
  return { key, form: plain ? key : JSON.stringify(canonical(m)) };
}

/** A message reduced to what makes the conversation, as a string that compares equal when they do. */
export const messageKey = (m: unknown): string => (isRecord(m) ? conversationKey(m) : (JSON.stringify(m) ?? "undefined"));

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

export const sameMessage = (a: unknown, b: unknown): boolean => a === b || messageKey(a) === messageKey(b);
export const sameToken = (a: number, b: number): boolean => a === b;

export function extendsTokens(ids: readonly number[], base: readonly number[]): boolean {
  return beginsWith(ids, base, sameToken);
}

export type Delta<T> = { prefixCount: number; rest: T[] } | { prefixCount: null; rest: T[] };

/** What to store of `items` given the previous call's continuation `base` (null: there is none to refer to). */
function delta<T>(items: readonly T[], base: readonly T[] | null, extend: (items: readonly T[], base: readonly T[]) => boolean): Delta<T> {
  if (base !== null && base.length > 0 && extend(items, base)) return { prefixCount: base.length, rest: items.slice(base.length) };
  return { prefixCount: null, rest: [...items] };
}

/**
 * How a message compares with a conversation's message: not the same (`differs`), the same in
 * another form (`equivalent`: a string and its one text part), or the same as stored (`same`).
 */
export type MessageMatch = "differs" | "equivalent" | "same";

/** A conversation as the gateway remembers it: enough to compare messages with it, not necessarily the messages. */
export interface KnownConversation {
  readonly length: number;
  /** How `m` compares with the conversation's message `i` (below `length`). */
  match(i: number, m: unknown): MessageMatch;
}

function matchKeys(a: { key: string; form: string }, b: { key: string; form: string }): MessageMatch {
  return a.form === b.form ? "same" : a.key === b.key ? "equivalent" : "differs";
}

const isKnown = (b: readonly unknown[] | KnownConversation): b is KnownConversation => !Array.isArray(b);

/** A conversation held whole, as KnownConversation. */
export function knownMessages(base: readonly unknown[]): KnownConversation {
  return { length: base.length, match: (i, m) => (m === base[i] ? "same" : matchKeys(messageKeys(m), messageKeys(base[i]))) };
}

/**
 * What to store of `messages` given the previous call's continuation `base`: after the messages it
 * shares with `base` as they are stored there. When `messages` extend `base` but some message in
 * another form (the answer sent back as a text part), the prefix ends before it and the rest is
 * stored as this call sent it; a prefix of none is no prefix.
 */
export function messageDelta(messages: readonly unknown[], base: readonly unknown[] | KnownConversation | null): Delta<unknown> {
  const known = base === null ? null : isKnown(base) ? base : knownMessages(base);
  const n = known?.length ?? 0;
  if (known === null || n === 0 || messages.length < n) return { prefixCount: null, rest: [...messages] };
  let firstInOtherForm = n;
  for (let i = n - 1; i >= 0; i--) {
    // From the last message first: a rewritten history mostly differs there, and is told at once.
    const m = known.match(i, messages[i]);
    if (m === "differs") return { prefixCount: null, rest: [...messages] };
    if (m === "equivalent") firstInOtherForm = i;
  }
  const count = firstInOtherForm;
  return count === 0 ? { prefixCount: null, rest: [...messages] } : { prefixCount: count, rest: messages.slice(count) };
}

export const tokenDelta = (ids: readonly number[], base: readonly number[] | null): Delta<number> => delta(ids, base, extendsTokens);

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
