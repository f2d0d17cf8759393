/**
 * Lines that can come in floods (a refusal per forged request, an upstream error per call), said
 * at once the first time, then at most once per interval per kind, with how many came between.
 */

/** Kinds remembered; past it the one said least recently is forgotten. */
const MAX_KINDS = 1_000;

/** How many lines of a kind were held back since it was last said, and how long ago that was (null: never). */
export type Due = { between: number; agoMs: number | null };

export class LogThrottle {
  private readonly said = new Map<string, { at: number; between: number }>();

  constructor(
    private readonly everyMs: number,
    /** A monotonic clock in ms; tests move it. */
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** Null while a line of `kind` was said within everyMs (this one is counted, not said); else what it says of the lines between. */
  due(kind: string): Due | null {
    const t = this.now();
    const last = this.said.get(kind);
    if (last !== undefined && t - last.at < this.everyMs) {
      last.between++;
      return null;
    }
    this.said.delete(kind);
    if (this.said.size >= MAX_KINDS) this.said.delete(this.said.keys().next().value as string);
    this.said.set(kind, { at: t, between: 0 });
    return last === undefined ? { between: 0, agoMs: null } : { between: last.between, agoMs: t - last.at };
  }
}
