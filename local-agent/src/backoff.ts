/**
 * Exponential backoff with full jitter for retrying the Worker. Jitter keeps a fleet of agents
 * that lost the Worker at the same moment from all coming back at the same moment.
 */
export type BackoffOptions = { initialMs: number; maxMs: number; random?: () => number };

export class Backoff {
  private failures = 0;
  constructor(private readonly opts: BackoffOptions) {}

  /** The wait before the next try, growing with each consecutive failure. */
  next(): number {
    const ceiling = Math.min(this.opts.maxMs, this.opts.initialMs * 2 ** Math.min(this.failures, 30));
    this.failures++;
    const r = (this.opts.random ?? Math.random)();
    // Never below half the ceiling: a retry storm at 0 ms would defeat the point.
    return Math.round(ceiling / 2 + (ceiling / 2) * r);
  }

  reset(): void {
    this.failures = 0;
  }

  get consecutiveFailures(): number {
    return this.failures;
  }
}
