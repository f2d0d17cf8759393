/** Call records as the engine's gateway sends them (protocol/ledger.ts), for tests that need the ledger to hold something. */
import type { CallRecord } from "../../src/protocol/ledger";
import { callAt, type CallOverrides, type ClaimRef } from "./ledger-calls";
import { raw, type TestEngine } from "./harness";

export { batchOf } from "./ledger-calls";
export type LedgerClaim = ClaimRef;

let seq = 0;

/** A successful call of `c`'s claim, with `over` laid over its fields and its body's, a second after the one before. */
export function callRecord(c: LedgerClaim, over: CallOverrides): CallRecord {
  // Near the engine's test clock (2099), so that no sweep of the ledger takes them.
  return callAt(c, Date.UTC(2098, 11, 31) + 1000 * seq++, over);
}

/** POST <engine>/agent/calls, as the agent sends it (with the trainer's token unless told otherwise). */
export const postCalls = (e: TestEngine, batch: unknown, role: "trainer" | "client" = "trainer") =>
  raw(`/e/${e.name}/agent/calls`, { token: e.tokens[role], body: JSON.stringify(batch) });
