/**
 * The batches of counted calls this engine applied, per Worker claim gate that sent them
 * (src/relay/claim-gate.ts). A gate sends a batch again, under the same id, when it has no
 * answer to it: its request failed (the engine may have applied it before the answer was lost),
 * or a read in its isolate would not wait for it. The engine answers a repeat as any batch but
 * counts its calls once.
 *
 * Kept in this object's memory, which is enough for a gate's resends (seconds, at most
 * RESEND_FOR_MS): a repeat that reaches the object after it restarted (evicted, redeployed, reset)
 * cannot be told from a new batch and is counted again. An exception that cut off the answer
 * is often such a reset, so a batch of calls can be counted twice then; writing the ids with
 * the counts would cost a row write per batch for that rare case.
 */

/**
 * A batch's id: its gate (random, one per engine and Worker isolate) and its sequence number
 * there, with `settled`, the lowest sequence number the gate may still send again (every batch
 * below it was answered or given up): what the engine keeps of a gate stays that small.
 */
export type RelayBatchId = { gate: string; seq: number; settled: number };

/** Gates remembered; past it the one heard from least recently is forgotten (a repeat of its batches would count again). */
const MAX_GATES = 10_000;
/** Batches remembered per gate above its `settled`; a gate answered promptly has a handful. */
const MAX_PER_GATE = 4_096;

type Seen = { settled: number; applied: Set<number> };

export class RelayBatches {
  private readonly gates = new Map<string, Seen>();

  /** Whether the batch `id` was applied already (a repeat); if not, it counts as applied from now on. */
  repeat(id: RelayBatchId): boolean {
    const seen = this.seen(id.gate);
    if (id.settled > seen.settled) {
      seen.settled = id.settled;
      for (const seq of seen.applied) if (seq < id.settled) seen.applied.delete(seq);
    }
    // Below `settled` the gate sends nothing again: such a batch is a copy that came late.
    if (id.seq < seen.settled || seen.applied.has(id.seq)) return true;
    seen.applied.add(id.seq);
    if (seen.applied.size > MAX_PER_GATE) seen.applied.delete(seen.applied.values().next().value as number);
    return false;
  }

  /** The gate's record, made the most recently used. */
  private seen(gate: string): Seen {
    let seen = this.gates.get(gate);
    if (seen === undefined) {
      if (this.gates.size >= MAX_GATES) this.gates.delete(this.gates.keys().next().value as string);
      seen = { settled: 0, applied: new Set() };
    } else {
      this.gates.delete(gate);
    }
    this.gates.set(gate, seen);
    return seen;
  }
}
