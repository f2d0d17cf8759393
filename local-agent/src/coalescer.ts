/**
 * Gathers calls that arrive within a short window and sends them as one request.
 *
 * Why this never changes an answer: the batch is sent after every call in it has arrived and
 * is answered before any of them is answered, so each call still observes the engine at a
 * moment between its own request and its own response, exactly as if it had been sent alone.
 * Nothing is cached: a call arriving after a batch left waits for the next batch.
 */
export type Schedule = (fn: () => void, ms: number) => () => void;

export const timerSchedule: Schedule = (fn, ms) => {
  const t = setTimeout(fn, ms);
  return () => clearTimeout(t);
};

type Pending<I, O> = { item: I; resolve: (o: O) => void; reject: (e: unknown) => void };

export class Coalescer<I, O> {
  private queue: Array<Pending<I, O>> = [];
  private cancelTimer: (() => void) | null = null;

  constructor(
    private readonly windowMs: number,
    private readonly maxBatch: number,
    /** Sends a batch; must answer one result per item, in order. */
    private readonly send: (items: I[]) => Promise<O[]>,
    private readonly schedule: Schedule = timerSchedule,
  ) {}

  submit(item: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      if (this.queue.length >= this.maxBatch) this.flush();
      else if (this.cancelTimer === null) this.cancelTimer = this.schedule(() => this.flush(), this.windowMs);
    });
  }

  /** Sends everything queued now. */
  flush(): void {
    this.cancelTimer?.();
    this.cancelTimer = null;
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, this.maxBatch);
      void this.run(batch);
    }
  }

  private async run(batch: Array<Pending<I, O>>): Promise<void> {
    try {
      const results = await this.send(batch.map((p) => p.item));
      if (results.length !== batch.length) throw new Error(`a batch of ${batch.length} got ${results.length} answers`);
      batch.forEach((p, i) => p.resolve(results[i] as O));
    } catch (e) {
      for (const p of batch) p.reject(e);
    }
  }
}
