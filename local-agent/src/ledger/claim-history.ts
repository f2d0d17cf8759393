/**
 * The last few finished calls of each live claim, which the claim's next call is stored as a
 * delta of (docs/ledger.md, "Storage, within Cloudflare's limits"). A claim may hold several
 * conversations (a planner and an executor taking turns), so it keeps one head per conversation:
 * a call replaces the head it continues. Held in memory, least recently used claim first out,
 * within a bound in bytes (what a head keeps, estimated) and a few heads a claim: a head pushed out
 * only means its conversation's next call is stored whole.
 *
 * A head keeps its conversation as a digest of each message, not the messages: telling whether
 * the next call continues it needs no more, and a vision agent's screenshots would otherwise fill
 * the bound with a few hundred claims, each then evicted before its next call.
 */
import { hash } from "node:crypto";
import { messageKeys, promptOverlap, type KnownConversation, type MessageMatch, type PromptHead, type SequencePrompt } from "../../../src/ledger/splice";

/** A finished call as the recorder hands it in. */
export type LastCall = {
  call_id: string;
  /** What a chat call continuing this one begins with: its messages then its answer. */
  conversation: unknown[];
  /** What a /v1/completions call continuing this one begins with (its prompt, then its answer); null for a chat call. */
  completionPrompt: PromptHead | null;
  /** The tools' JSON, to tell whether the next call offers the same ones. */
  toolsJson: string | null;
  prompt: number[] | null;
  completion: number[];
  /** The call's size as relayed; ignored: a head is counted by what it keeps, far less than that. */
  bytes?: number;
};

/** A call as a head keeps it: its conversation as digests. */
export type Head = Omit<LastCall, "conversation" | "bytes"> & { conversation: ConversationDigests; bytes: number };

/**
 * A message's keys as kept: the key itself when short, else "#" and its SHA-256, which no key
 * (JSON, never starting with "#") is. A short message is compared by its key for less than
 * hashing it costs (a short text call then hashes nothing), and its key is held at a few hundred
 * bytes at most.
 */
const DIGEST_FROM = 256;
const digestOf = (key: string): string => (key.length < DIGEST_FROM ? key : `#${hash("sha256", key, "base64")}`);

type Digests = { key: string; form: string };

/**
 * Digests by message object: one call's messages are compared with each head, stored as a delta,
 * then kept as its successor's head, and each message is keyed and hashed once for all of that.
 * An earlier call's message is another object (each request is parsed anew) and is keyed again:
 * a call reads its conversation once, where comparing messages with messages read both sides.
 */
const keyed = new WeakMap<object, Digests>();

function digestsOf(m: unknown): Digests {
  const known = typeof m === "object" && m !== null ? keyed.get(m) : undefined;
  if (known !== undefined) return known;
  const k = messageKeys(m);
  const key = digestOf(k.key);
  const d = { key, form: k.form === k.key ? key : digestOf(k.form) };
  if (typeof m === "object" && m !== null) keyed.set(m, d);
  return d;
}

/** Bytes a kept key or digest takes, estimated: its string (two bytes a character at most) and header, its slot. */
const keptBytes = (s: string): number => 32 + 2 * s.length;
/** What a head takes besides its conversation and token ids: its object, id and arrays, and its claim's entry (measured: about 500). */
const HEAD_BYTES = 512;

/** A conversation as its messages' digests. */
export class ConversationDigests implements KnownConversation {
  private readonly keys: string[];
  /** The form digest where it differs from the key's (a message sent as content parts); null when none does. */
  private readonly forms: Map<number, string> | null;
  /** What the keys take in memory, estimated. */
  readonly bytes: number;

  constructor(messages: readonly unknown[]) {
    this.keys = new Array<string>(messages.length);
    let forms: Map<number, string> | null = null;
    let bytes = 0;
    for (let i = 0; i < messages.length; i++) {
      const d = digestsOf(messages[i]);
      this.keys[i] = d.key;
      bytes += keptBytes(d.key);
      if (d.form !== d.key) {
        (forms ??= new Map()).set(i, d.form);
        bytes += keptBytes(d.form) + 32;
      }
    }
    this.forms = forms;
    this.bytes = bytes;
  }

  get length(): number {
    return this.keys.length;
  }

  match(i: number, m: unknown): MessageMatch {
    const d = digestsOf(m);
    const form = this.forms?.get(i) ?? this.keys[i];
    return d.form === form ? "same" : d.key === this.keys[i] ? "equivalent" : "differs";
  }

  /** Whether `messages` begin with this conversation's, in any form. */
  continuedBy(messages: readonly unknown[]): boolean {
    const n = this.keys.length;
    if (n > messages.length) return false;
    for (let i = n - 1; i >= 0; i--) if (digestsOf(messages[i]).key !== this.keys[i]) return false;
    return true;
  }
}

/** What a head takes in memory, estimated: its digests, its prompt text, its tools' JSON, its token ids. */
function headBytes(h: Omit<Head, "bytes">): number {
  const text = h.completionPrompt?.text;
  const textBytes = text === undefined ? 0 : typeof text === "string" ? 2 * text.length : 8 * text.length;
  return HEAD_BYTES + h.conversation.bytes + textBytes + 2 * (h.toolsJson?.length ?? 0) + 8 * ((h.prompt?.length ?? 0) + h.completion.length);
}

/** Heads a claim keeps: its agents' conversations, and a failed call beside the one its retry continues. */
export const MAX_HEADS_PER_CLAIM = 4;

type Claim = { heads: Head[]; bytes: number };

export class ClaimHistory {
  private readonly claims = new Map<string, Claim>();
  private total = 0;

  constructor(
    private readonly maxBytes: number,
    private readonly maxHeads = MAX_HEADS_PER_CLAIM,
  ) {}

  static key(episode: string, fence: number): string {
    return `${fence}\u0000${episode}`;
  }

  /** The claim's heads, oldest first; the claim becomes the most recently used. */
  heads(key: string): readonly Head[] {
    const c = this.claims.get(key);
    if (c === undefined) return [];
    this.claims.delete(key);
    this.claims.set(key, c);
    return c.heads;
  }

  /** Keeps `entry` as a head of the claim, in place of the head `replaces` names (the call it continues). */
  add(key: string, call: LastCall, replaces: string | null): void {
    const { conversation, bytes: _relayed, ...rest } = call;
    const kept = { ...rest, conversation: new ConversationDigests(conversation) };
    const entry: Head = { ...kept, bytes: headBytes(kept) };
    let c = this.claims.get(key);
    if (c === undefined) this.claims.set(key, (c = { heads: [], bytes: 0 }));
    const at = replaces === null ? -1 : c.heads.findIndex((h) => h.call_id === replaces);
    if (at >= 0) this.drop(c, at);
    if (entry.bytes <= this.maxBytes) {
      c.heads.push(entry);
      c.bytes += entry.bytes;
      this.total += entry.bytes;
    }
    while (c.heads.length > this.maxHeads) this.drop(c, 0);
    this.evict(key);
  }

  delete(key: string): void {
    const c = this.claims.get(key);
    if (c === undefined) return;
    this.claims.delete(key);
    this.total -= c.bytes;
  }

  private drop(c: Claim, at: number): void {
    const [gone] = c.heads.splice(at, 1);
    c.bytes -= gone?.bytes ?? 0;
    this.total -= gone?.bytes ?? 0;
  }

  /** Other claims first, least recently used first; then `current`'s own oldest heads. */
  private evict(current: string): void {
    for (const k of this.claims.keys()) {
      if (this.total <= this.maxBytes) break;
      if (k !== current) this.delete(k);
    }
    const c = this.claims.get(current);
    if (c === undefined) return;
    while (this.total > this.maxBytes && c.heads.length > 1) this.drop(c, 0);
    if (c.heads.length === 0) this.claims.delete(current);
  }

  get bytes(): number {
    return this.total;
  }

  /** Claims held. */
  get size(): number {
    return this.claims.size;
  }
}

/** Claims whose capture the recorder remembers (a key each): far more than an engine has live at once. */
export const MAX_CAPTURED_CLAIMS = 50_000;

/**
 * The claims with a call relayed with capture on (`messages` or `tokens`), least recently used
 * first out. Kept apart from the heads, which the byte bound evicts while a claim goes on: a
 * bounded set of keys alone. A call of such a claim relayed with capture off is recorded as a
 * stub (recorder.ts), so that its trajectory says a turn happened that the ledger did not see.
 */
export class CapturedClaims {
  private readonly keys = new Set<string>();

  constructor(private readonly max = MAX_CAPTURED_CLAIMS) {}

  /** The claim has a call captured; it becomes the most recently used. */
  add(key: string): void {
    this.keys.delete(key);
    this.keys.add(key);
    if (this.keys.size > this.max) this.keys.delete(this.keys.values().next().value as string);
  }

  has(key: string): boolean {
    return this.keys.has(key);
  }
}

/**
 * The head that the call continues furthest, or null: by its prompt on /v1/completions (`prompt`
 * not null: text, or token ids), else by its messages.
 */
export function continuedHead(heads: readonly Head[], messages: readonly unknown[], prompt: SequencePrompt | null): Head | null {
  return prompt === null ? continuedMessages(heads, messages) : continuedPrompt(heads, prompt);
}

/**
 * A head is checked only when it is no longer than the messages, and from its last message
 * first: a head of another conversation is mostly told apart at once, whatever its length.
 */
function continuedMessages(heads: readonly Head[], messages: readonly unknown[]): Head | null {
  let best: Head | null = null;
  for (const h of heads) {
    const n = h.conversation.length;
    if (n === 0 || n > messages.length || n <= (best?.conversation.length ?? 0)) continue;
    if (h.conversation.continuedBy(messages)) best = h;
  }
  return best;
}

function continuedPrompt(heads: readonly Head[], prompt: SequencePrompt): Head | null {
  let best: Head | null = null;
  let shared = 0;
  for (const h of heads) {
    if (h.completionPrompt === null || h.completionPrompt.text.length <= shared) continue;
    const n = promptOverlap(prompt, h.completionPrompt);
    if (n > shared) [best, shared] = [h, n];
  }
  return best;
}
