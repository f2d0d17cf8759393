/**
 * Recorded LLM calls as an engine's gateway sends them to the ledger (protocol/ledger.ts), and a
 * three-turn conversation with a tool call stored as the gateway stores it: each call only what
 * it adds to the one before. Plain data, so the Worker tests (workerd, through ./ledger.ts) and
 * the dashboard's tests (Node) share it.
 */
import type { CallBatch, CallRecord } from "../../src/protocol/ledger";
import { packFloats, packInts } from "../../src/protocol/packed";

/** The claim a call belongs to. */
export type ClaimRef = { episode: string; fence: number; client: string };

export type CallOverrides = Partial<Omit<CallRecord, "body">> & { body: Partial<CallRecord["body"]> };

/** A call admitted at `t` (ms since the epoch) that took 9 ms, first byte after 4. */
export function callAt(c: ClaimRef, t: number, over: CallOverrides): CallRecord {
  const { body, ...rest } = over;
  return {
    call_id: `call-${t}-${Math.random().toString(36).slice(2)}`,
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

export const sys = { role: "system", content: "You are a tool user." };
export const user = { role: "user", content: "What is 2+2? Use the calculator." };
export const toolCall = { role: "assistant", content: null, tool_calls: [{ id: "t1", type: "function", function: { name: "calc", arguments: '{"x":"2+2"}' } }] };
export const toolResult = { role: "tool", tool_call_id: "t1", content: "4" };
export const answer2 = { role: "assistant", content: "It is 4." };
export const user3 = { role: "user", content: "Thanks. And 3+3?" };
export const answer3 = { role: "assistant", content: "6." };
export const tools = [{ type: "function", function: { name: "calc", parameters: { type: "object" } } }];

/**
 * Three turns with a tool call, each made by `call` (which picks its time). A `thirdPrompt` that
 * does not begin with the first two turns' tokens is a re-tokenization drift: stored whole.
 */
export function threeTurns(c: ClaimRef, call: (c: ClaimRef, over: CallOverrides) => CallRecord, thirdPrompt: number[] = [1, 2, 3, 4, 10, 11, 20, 21, 30, 31, 32]): CallRecord[] {
  const first = call(c, {
    body: {
      tools,
      messages: [sys, user],
      answer: toolCall,
      tokens: { prompt_prefix: null, prompt_ids: packInts([1, 2, 3, 4]), completion_ids: packInts([10, 11]), completion_logprobs: packFloats([-0.5, -0.25]) },
    },
  });
  const second = call(c, {
    weight_version: 4,
    body: {
      tools: null,
      tools_from_prefix: true,
      prefix: { call_id: first.call_id, count: 3 },
      messages: [toolResult],
      answer: answer2,
      tokens: { prompt_prefix: { call_id: first.call_id, count: 6 }, prompt_ids: packInts([20]), completion_ids: packInts([21]), completion_logprobs: packFloats([-1.5]) },
    },
  });
  const spliced = [1, 2, 3, 4, 10, 11, 20, 21];
  const drift = thirdPrompt.slice(0, spliced.length).join() !== spliced.join();
  const third = call(c, {
    body: {
      tools: null,
      tools_from_prefix: true,
      prefix: { call_id: second.call_id, count: 5 },
      messages: [user3],
      answer: answer3,
      tokens: drift
        ? { prompt_prefix: null, prompt_ids: packInts(thirdPrompt), completion_ids: packInts([40]), completion_logprobs: packFloats([-2]) }
        : { prompt_prefix: { call_id: second.call_id, count: 8 }, prompt_ids: packInts(thirdPrompt.slice(8)), completion_ids: packInts([40]), completion_logprobs: packFloats([-2]) },
    },
  });
  return [first, second, third];
}
