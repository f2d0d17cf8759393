/**
 * Call records shaped like the ones the engine's gateway sends for an agentic rollout with
 * capture `tokens`: the first call carries a system and a user message and the tools; each later
 * call only what it adds to the claim's previous call (the prefix reference, one new tool result)
 * and its new prompt token ids, as the gateway's delta encoding stores them (protocol/ledger.ts).
 */
import { packFloats, packInts } from "../../src/protocol/packed";
import type { CallRecord } from "../../src/protocol/ledger";

export type WorkloadShape = {
  /** Prompt token ids the first call's prompt has (system, user, tools). */
  firstPromptTokens: number;
  /** New prompt token ids each later call adds (the tool result and the chat template around it). */
  newPromptTokens: number;
  completionTokens: number;
  /** Characters of the assistant's answer text. */
  answerChars: number;
};

export const DEFAULT_SHAPE: WorkloadShape = { firstPromptTokens: 300, newPromptTokens: 100, completionTokens: 50, answerChars: 200 };

const TOOLS = [
  { type: "function", function: { name: "run_shell", description: "Runs a shell command in the task's sandbox and returns its output.", parameters: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } } },
  { type: "function", function: { name: "read_file", description: "Reads a file of the task's repository.", parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] } } },
];
const SYSTEM = { role: "system", content: "You are a software engineering agent. Work in the sandbox with the tools until the task's tests pass, then answer with a summary of the change." };

/** Deterministic filler text of `n` characters. */
const text = (seed: number, n: number): string => {
  const words = ["the", "test", "fails", "because", "parser", "returns", "null", "when", "input", "is", "empty", "so", "we", "check", "length", "first"];
  let s = "";
  for (let i = 0; s.length < n; i++) s += `${words[(seed + i * 7) % words.length]} `;
  return s.slice(0, n);
};

const ids = (seed: number, n: number): number[] => Array.from({ length: n }, (_, i) => (seed * 7919 + i * 104_729) % 151_936);
const logprobs = (seed: number, n: number): number[] => Array.from({ length: n }, (_, i) => -(((seed + i) % 97) / 40));

export type ClaimRef = { episode_uuid: string; fence: number; client_uuid: string };

/** The `k` calls of one claim, in order, each only what it adds to the one before. */
export function claimCalls(c: ClaimRef, k: number, shape: WorkloadShape = DEFAULT_SHAPE, t0 = Date.now()): CallRecord[] {
  const out: CallRecord[] = [];
  let messages = 0; // the previous call's messages
  let promptTokens = 0; // the previous call's prompt
  for (let i = 0; i < k; i++) {
    const prev = out[i - 1];
    const seed = out.length + c.fence * 31 + c.episode_uuid.length;
    const at = t0 + i * 2000;
    const newPrompt = prev === undefined ? shape.firstPromptTokens : shape.newPromptTokens;
    const prompt = prev === undefined ? newPrompt : promptTokens + shape.completionTokens + newPrompt;
    const answer = {
      role: "assistant",
      content: text(seed, shape.answerChars),
      tool_calls: [{ id: `call_${i}`, type: "function", function: { name: "run_shell", arguments: JSON.stringify({ command: `pytest -x tests/test_${i}.py` }) } }],
    };
    out.push({
      call_id: `${c.episode_uuid}-${c.fence}-${i}`,
      capture: "tokens",
      client_uuid: c.client_uuid,
      task_id: "bench-task",
      weight_version: 1,
      run: 1,
      admitted_at: at,
      episode_uuid: c.episode_uuid,
      fence: c.fence,
      endpoint: "/v1/chat/completions",
      model: "policy",
      stream: true,
      started_at: at + 1,
      first_byte_at: at + 300,
      done_at: at + 1500,
      status: 200,
      error: null,
      finish_reason: "tool_calls",
      usage: { prompt_tokens: prompt, completion_tokens: shape.completionTokens },
      truncated: false,
      body: {
        params: { model: "policy", temperature: 1, top_p: 1, max_tokens: 2048, stream: true },
        tools: prev === undefined ? TOOLS : null,
        tools_from_prefix: prev !== undefined,
        prefix: prev === undefined ? null : { call_id: prev.call_id, count: messages + 1 },
        messages:
          prev === undefined
            ? [SYSTEM, { role: "user", content: `Fix the failing test in the repository: ${text(seed, 300)}` }]
            : [{ role: "tool", tool_call_id: `call_${i - 1}`, content: text(seed + 3, shape.newPromptTokens * 4) }],
        answer,
        tokens: {
          prompt_prefix: prev === undefined ? null : { call_id: prev.call_id, count: promptTokens + shape.completionTokens },
          prompt_ids: packInts(ids(seed, newPrompt)),
          completion_ids: packInts(ids(seed + 1, shape.completionTokens)),
          completion_logprobs: packFloats(logprobs(seed, shape.completionTokens)),
        },
      },
    });
    messages = prev === undefined ? 2 : messages + 2;
    promptTokens = prompt;
  }
  return out;
}
