/**
 * Group commit for the engine's hot writes. workerd commits a Durable Object's implicit
 * transaction once per turn of its event loop, for everything written in that turn, and holds
 * every answer that depends on it (the output gate) until that commit is done. Each RPC call
 * arrives as an event of its own, so a write done as soon as its call arrives gets a commit of
 * its own: 3.0 commits per claim/end/register cycle under the benchmark's load (BENCHMARKS.md,
 * session 9), and a commit (with its WAL frames, its output-gate lock and the kj events around
 * it) costs more than the statements it makes durable.
 *
 * A call that waits for `next()` instead does its writes in the next turn that a timer starts,
 * together with every call that arrived meanwhile: one commit for all of them, each page they
 * share (the queue's tail, the newest leases, the outbox's tail) written once. Durability is
 * unchanged: no answer leaves before the commit that holds its writes. What it costs is one
 * timer per group, and the wait for a 0 ms timer before each hot write.
 *
 * The calls of a group run in the order they arrived, each up to its first real await, so the
 * engine still changes one call at a time; they are only made durable together.
 */
export class SharedTurn {
  private waiting: (() => void)[] = [];
  private scheduled = false;

  /** Resolves at the start of the next shared turn. */
  next(): Promise<void> {
    return new Promise<void>((resolve) => {
      this.waiting.push(resolve);
      if (this.scheduled) return;
      this.scheduled = true;
      setTimeout(() => this.release(), 0);
    });
  }

  private release(): void {
    this.scheduled = false;
    const group = this.waiting;
    this.waiting = [];
    for (const resolve of group) resolve();
  }
}
