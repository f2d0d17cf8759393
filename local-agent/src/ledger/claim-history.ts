/**
 * The last few finished calls of each live claim, which the claim's next call is stored as a
 * delta of (docs/ledger.md, "Storage, within Cloudflare's limits"). A claim may hold several
 * conversations (a planner and an executor taking turns), so it keeps one head per conversation:
 * a call replaces the head it continues. Held in memory, least recently used claim first out,
 * within a bound in bytes (the JSON the entries came from, an estimate of what they hold) and a
 * few heads a claim: a head pushed out only means its conversation's next call is stored whole.
 */
import { extendsMessages, messageKey, promptOverlap, type PromptHead, type SequencePrompt } from "../../../src/ledger/splice";

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
  bytes: number;
};

/** Heads a claim keeps: its agents' conversations, and a failed call beside the one its retry continues. */
export const MAX_HEADS_PER_CLAIM = 4;

type Claim = { heads: LastCall[]; bytes: number };

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
  heads(key: string): readonly LastCall[] {
    const c = this.claims.get(key);
    if (c === undefined) return [];
    this.claims.delete(key);
    this.claims.set(key, c);
    return c.heads;
  }

  /** Keeps `entry` as a head of the claim, in place of the head `replaces` names (the call it continues). */
  add(key: string, entry: LastCall, replaces: string | null): void {
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
    for (const [k, c] of this.claims) {
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
export function continuedHead(heads: readonly LastCall[], messages: readonly unknown[], prompt: SequencePrompt | null): LastCall | null {
  return prompt === null ? continuedMessages(heads, messages) : continuedPrompt(heads, prompt);
}

/**
 * A head is checked only when it is no longer than the messages, and from its last message
 * first: a head of another conversation is mostly told apart at once, whatever its length.
 */
function continuedMessages(heads: readonly LastCall[], messages: readonly unknown[]): LastCall | null {
  let best: LastCall | null = null;
  for (const h of heads) {
    const n = h.conversation.length;
    if (n === 0 || n > messages.length || n <= (best?.conversation.length ?? 0)) continue;
    if (messageKey(messages[n - 1]) === messageKey(h.conversation[n - 1]) && extendsMessages(messages, h.conversation)) best = h;
  }
  return best;
}

function continuedPrompt(heads: readonly LastCall[], prompt: SequencePrompt): LastCall | null {
  let best: LastCall | null = null;
  let shared = 0;
  for (const h of heads) {
    if (h.completionPrompt === null || h.completionPrompt.text.length <= shared) continue;
    const n = promptOverlap(prompt, h.completionPrompt);
    if (n > shared) [best, shared] = [h, n];
  }
  return best;
}
