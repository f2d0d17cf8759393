/** Operations under way that a shutdown waits out before it stops what they started. */
export class InFlight {
  private readonly ops = new Set<Promise<unknown>>();

  /** Keeps `op` until it settles; returns it. */
  track<T>(op: Promise<T>): Promise<T> {
    this.ops.add(op);
    void op.finally(() => this.ops.delete(op)).catch(() => undefined);
    return op;
  }

  get size(): number {
    return this.ops.size;
  }

  /** Resolves once the operations under way now have settled; those tracked later are not waited for. */
  async settled(): Promise<void> {
    await Promise.allSettled([...this.ops]);
  }
}
