/**
 * One call's messages whole, from a trajectory read in its delta form (docs/ledger.md, "Delta
 * form"): the page holds the delta form, which grows with the claim's turns, and makes whole only
 * the call it shows; the whole form grows with their square (hundreds of MB for a long agent's
 * claim, read again each time a live claim records a call). The rule is the exchange's
 * (src/ledger/rebuild.ts): `messages_from: {call_id, count}` says the call's messages follow the
 * first `count` of the named call's messages and then its answer. The exchange names a call only
 * when it knows that call whole, so the walk ends at a call without `messages_from`.
 */
import type { Trajectory } from "../../protocol/ledger";

type Call = Trajectory["calls"][number];

export function deltaMessagesModule() {
  /** Call `i`'s messages as it was given them: walked down to a whole call, then built up once (linear in the history). */
  function messagesOf(t: Trajectory, i: number): unknown[] {
    const own = t.calls[i];
    if (own === undefined) return [];
    if (t.form !== "delta") return own.messages;
    const byId = new Map(t.calls.map((c) => [c.call_id, c]));
    const path: Call[] = [own];
    const seen = new Set([own.call_id]);
    for (let c: Call = own; c.messages_from != null; ) {
      const named = byId.get(c.messages_from.call_id);
      // Not one the exchange writes: shown as what the call added.
      if (named === undefined || seen.has(named.call_id)) return own.messages;
      seen.add(named.call_id);
      path.push(named);
      c = named;
    }
    const out = [...(path[path.length - 1] as Call).messages];
    for (let k = path.length - 2; k >= 0; k--) {
      const parent = path[k + 1] as Call;
      const child = path[k] as Call;
      if (parent.answer !== null) out.push(parent.answer);
      out.length = Math.min(out.length, child.messages_from?.count ?? 0);
      for (const m of child.messages) out.push(m);
    }
    return out;
  }

  return { messagesOf };
}

export type DeltaMessages = ReturnType<typeof deltaMessagesModule>;
