/** Call records as the engine's gateway sends them (protocol/ledger.ts), for tests that need the ledger to hold something. */
import type { CallBatch, CallRecord } from "../../src/protocol/ledger";
import { raw, type TestEngine } from "./harness";

export type LedgerClaim = { episode: string; fence: number; client: string };

let seq = 0;

/** A successful call of `c`'s claim, with `over` laid over its fields and its body's. */
export function callRecord(c: LedgerClaim, over: Partial<Omit<CallRecord, "body">> & { body: Partial<CallRecord["body"]> }): CallRecord {
  // Near the engine's test clock (2099), so that no sweep of the ledger takes them.
  const t = Date.UTC(2098, 11, 31) + 1000 * seq++;
  const { body, ...rest } = over;
  return {
    call_id: `call-${seq}-${Math.random().toString(36).slice(2)}`,
    capture: "tokens",
    client_uuid: c.client,
    task_id: "task-1",
    weight_version: 3,
    run: 1,
    admitted_at: t,
    episode_uuid: c.episode,
    fence: c.fence,
    endpoint: "/v1/chat/completions",
    model: "policy",
    stream: false,
    started_at: t + 1,
    first_byte_at: t + 5,
    done_at: t + 9,
    status: 200,
    error: null,
    finish_reason: "stop",
    usage: { prompt_tokens: 4, completion_tokens: 2 },
    truncated: false,
    ...rest,
    body: { params: { temperature: 1 }, tools: null, tools_from_prefix: false, prefix: null, messages: [], answer: null, tokens: null, ...body },
  };
}

export const batchOf = (calls: CallRecord[], id = `b${Math.random().toString(36).slice(2, 12)}`): CallBatch => ({ batch_id: id, calls });

/** POST <engine>/agent/calls, as the agent sends it (with the trainer's token unless told otherwise). */
export const postCalls = (e: TestEngine, batch: unknown, role: "trainer" | "client" = "trainer") =>
  raw(`/e/${e.name}/agent/calls`, { token: e.tokens[role], body: JSON.stringify(batch) });
