/**
 * Each live claim's last finished call, which the claim's next call is stored as a delta of
 * (docs/ledger.md, "Storage, within Cloudflare's limits"). Held in memory, least recently used
 * first out, within a bound in bytes (the JSON the entries came from, an estimate of what they
 * hold): a claim pushed out only means its next call is stored whole.
 */
export type LastCall = {
  call_id: string;
  messages: unknown[];
  answer: Record<string, unknown> | null;
  /** The tools' JSON, to tell whether the next call offers the same ones. */
  toolsJson: string | null;
  prompt: number[] | null;
  completion: number[];
  bytes: number;
};

export class ClaimHistory {
  private readonly entries = new Map<string, LastCall>();
  private total = 0;

  constructor(private readonly maxBytes: number) {}

  static key(episode: string, fence: number): string {
    return `${fence}\u0000${episode}`;
  }

  get(key: string): LastCall | undefined {
    const e = this.entries.get(key);
    if (e !== undefined) {
      this.entries.delete(key);
      this.entries.set(key, e);
    }
    return e;
  }

  set(key: string, entry: LastCall): void {
    this.delete(key);
    if (entry.bytes > this.maxBytes) return;
    this.entries.set(key, entry);
    this.total += entry.bytes;
    for (const [k, e] of this.entries) {
      if (this.total <= this.maxBytes) break;
      this.entries.delete(k);
      this.total -= e.bytes;
    }
  }

  delete(key: string): void {
    const old = this.entries.get(key);
    if (old === undefined) return;
    this.entries.delete(key);
    this.total -= old.bytes;
  }

  get bytes(): number {
    return this.total;
  }

  get size(): number {
    return this.entries.size;
  }
}
