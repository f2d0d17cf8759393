/**
 * A thinking model (Qwen3 / DeepSeek-R1 served by vLLM with a reasoning parser and a tool
 * parser) through the relay into the ledger, end to end: the real Worker (Miniflare, D1 and R2),
 * the real agent and its gateway, and an HTTP model speaking vLLM's OpenAI-compatible SSE. Its
 * answers carry `reasoning_content` deltas and two parallel tool calls whose arguments arrive in
 * fragments, interleaved by index. Its "tokenizer" renders history as Qwen3's chat template does:
 * an earlier assistant turn without its thinking.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { describe, expect, it } from "vitest";
import { bodyText, serveHttp } from "../support/http-server";
import { ledgerWorld } from "./ledger-world";
import { END, ROLE, logprobOf } from "./token-model";

const THINK = 100_020;
const END_THINK = 100_021;
const codes = (s: string): number[] => [...s].map((c) => c.codePointAt(0) as number);

type Msg = { role?: string; content?: unknown; reasoning_content?: string; tool_calls?: Array<{ function?: { name?: string; arguments?: string } }> };

/** Qwen3's template in miniature: an assistant turn in the history is rendered without its thinking. */
function promptIds(messages: Msg[]): number[] {
  const ids: number[] = [];
  for (const m of messages) {
    ids.push(ROLE[m.role ?? "user"] ?? 0);
    ids.push(...codes(typeof m.content === "string" ? m.content : ""));
    for (const c of m.tool_calls ?? []) ids.push(...codes(`${c.function?.name ?? ""}${c.function?.arguments ?? ""}`));
    ids.push(END);
  }
  ids.push(ROLE["assistant"] as number);
  return ids;
}

const REASONING_1 = "The user wants weather and time; call both.";
const CALLS = [
  { id: "chatcmpl-tool-a1", name: "get_weather", args: ['{"ci', 'ty": "Pa', 'ris"}'] },
  { id: "chatcmpl-tool-b2", name: "get_time", args: ['{"t', 'z": "Europe/', 'Paris"}'] },
];
const REASONING_2 = "Both known; answer.";
const ANSWER_2 = "Sunny, 14:00.";

type Served = { prompt: number[]; completion: number[]; sent: string };

async function startThinkingModel() {
  const served: Served[] = [];
  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const r = JSON.parse(await bodyText(req)) as Record<string, unknown>;
    const messages = r["messages"] as Msg[];
    const toolTurn = messages.at(-1)?.role !== "tool";
    const reasoning = toolTurn ? REASONING_1 : REASONING_2;
    const prompt = promptIds(messages);
    const bodyCodes = toolTurn ? CALLS.flatMap((c) => codes(c.name + c.args.join(""))) : codes(ANSWER_2);
    const completion = [THINK, ...codes(reasoning), END_THINK, ...bodyCodes, END];
    const wantIds = r["return_token_ids"] === true;
    const wantLp = r["logprobs"] === true;
    const lp = (ids: number[]) => ({ content: ids.map((id) => ({ token: String(id), logprob: logprobOf(id), bytes: [id & 0xff], top_logprobs: [] })) });
    const finish = toolTurn ? "tool_calls" : "stop";
    const usage = { prompt_tokens: prompt.length, total_tokens: prompt.length + completion.length, completion_tokens: completion.length, prompt_tokens_details: null };
    const base = { id: "chatcmpl-think", created: 9, model: String(r["model"]) };
    if (r["stream"] !== true) {
      const message = {
        role: "assistant",
        content: toolTurn ? null : ANSWER_2,
        refusal: null,
        annotations: null,
        audio: null,
        function_call: null,
        tool_calls: toolTurn ? CALLS.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.args.join("") } })) : [],
        reasoning_content: reasoning,
      };
      const out = {
        ...base,
        object: "chat.completion",
        choices: [{ index: 0, message, logprobs: wantLp ? lp(completion) : null, finish_reason: finish, stop_reason: null, token_ids: wantIds ? completion : null }],
        service_tier: null,
        system_fingerprint: null,
        usage,
        prompt_logprobs: null,
        prompt_token_ids: wantIds ? prompt : null,
        kv_transfer_params: null,
      };
      const sent = JSON.stringify(out);
      served.push({ prompt, completion, sent });
      res.writeHead(200, { "content-type": "application/json" }).end(sent);
      return;
    }
    // vLLM's stream: each chunk with its own token ids (asked) and logprobs (asked).
    const render = (wantIds: boolean, wantLp: boolean, includeUsage: boolean): string => {
    const lp = (ids: number[]) => ({ content: ids.map((id) => ({ token: String(id), logprob: logprobOf(id), bytes: [id & 0xff], top_logprobs: [] })) });
    const chunks: string[] = [];
    const chunk = (choice: Record<string, unknown>, ids: number[], extra: Record<string, unknown> = {}) =>
      chunks.push(`data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [{ index: 0, logprobs: wantLp ? lp(ids) : null, finish_reason: null, ...choice, ...(wantIds ? { token_ids: ids } : {}) }], ...extra })}\n\n`);
    chunk({ delta: { role: "assistant", content: "" } }, [], wantIds ? { prompt_token_ids: prompt } : {});
    [...reasoning].forEach((ch, i) => chunk({ delta: { reasoning_content: ch } }, i === 0 ? [THINK, ...codes(ch)] : codes(ch)));
    if (toolTurn) {
      // Both calls' openings, then their arguments' fragments interleaved by index.
      chunk({ delta: { tool_calls: [{ id: CALLS[0]!.id, type: "function", index: 0, function: { name: CALLS[0]!.name, arguments: "" } }] } }, [END_THINK, ...codes(CALLS[0]!.name)]);
      chunk({ delta: { tool_calls: [{ index: 0, function: { arguments: CALLS[0]!.args[0] } }] } }, codes(CALLS[0]!.args[0]!));
      chunk({ delta: { tool_calls: [{ id: CALLS[1]!.id, type: "function", index: 1, function: { name: CALLS[1]!.name, arguments: "" } }] } }, []);
      for (let k = 1; k < 3; k++) {
        chunk({ delta: { tool_calls: [{ index: 1, function: { arguments: CALLS[1]!.args[k - 1] } }] } }, []);
        chunk({ delta: { tool_calls: [{ index: 0, function: { arguments: CALLS[0]!.args[k] } }] } }, codes(CALLS[0]!.args[k]!));
      }
      // The second call's ids after the first's (the order the model generated them in).
      chunk({ delta: { tool_calls: [{ index: 1, function: { arguments: CALLS[1]!.args[2] } }] } }, codes(CALLS[1]!.name + CALLS[1]!.args.join("")));
    } else {
      [...ANSWER_2].forEach((ch, i) => chunk({ delta: { content: ch } }, i === 0 ? [END_THINK, ...codes(ch)] : codes(ch)));
    }
    chunk({ delta: {}, finish_reason: finish }, [END]);
    if (includeUsage) chunks.push(`data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [], usage })}\n\n`);
    chunks.push("data: [DONE]\n\n");
    return chunks.join("");
    };
    const so = r["stream_options"] as { include_usage?: boolean } | undefined;
    const sent = render(wantIds, wantLp, so?.include_usage === true);
    served.push({ prompt, completion, sent });
    res.writeHead(200, { "content-type": "text/event-stream" });
    // A few events a write, as a server's socket delivers them.
    for (let i = 0; i < sent.length; i += 700) res.write(sent.slice(i, i + 700));
    res.end();
  }
  const server = await serveHttp(handle);
  return { url: `${server.origin}/v1`, served, close: server.close };
}

const world = ledgerWorld("thinking-e2e", startThinkingModel, (m) => m.url);
const setup = (capture: "messages" | "tokens") => world.claimed({ engine: "thinking", capture, agent: { tokenDialect: "vllm" }, weightVersion: 4, discardEpisodeTimeout: 120 });

type Obj = Record<string, unknown>;

/** A call through the relay; a stream's deltas assembled as openai-python's ChatCompletionStreamState does. */
async function chat(claim: { openai_base_url: string; openai_api_key: string }, body: Obj): Promise<{ message: Obj; finish: unknown; usage: unknown; text: string }> {
  const res = await fetch(`${claim.openai_base_url}/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${claim.openai_api_key}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  expect(res.status, text).toBe(200);
  if (body["stream"] !== true) {
    const raw = JSON.parse(text) as { choices: { message: Obj; finish_reason: unknown }[]; usage: unknown };
    return { message: raw.choices[0]!.message, finish: raw.choices[0]!.finish_reason, usage: raw.usage, text };
  }
  const message: Obj = {};
  let finish: unknown = null;
  let usage: unknown = null;
  const calls: Obj[] = [];
  for (const event of text.split("\n\n")) {
    const data = event.replace(/^data: /, "").trim();
    if (data === "" || data === "[DONE]" || data.startsWith(":")) continue;
    const chunk = JSON.parse(data) as { choices: Obj[]; usage?: unknown };
    if (chunk.usage) usage = chunk.usage;
    const choice = chunk.choices[0];
    if (!choice) continue;
    if (choice["finish_reason"]) finish = choice["finish_reason"];
    const delta = choice["delta"] as Obj;
    for (const k of ["role"]) if (typeof delta[k] === "string") message[k] = delta[k];
    for (const k of ["content", "reasoning_content"]) if (typeof delta[k] === "string") message[k] = String(message[k] ?? "") + String(delta[k]);
    for (const c of (delta["tool_calls"] ?? []) as Obj[]) {
      const f = (c["function"] ?? {}) as { name?: string; arguments?: string };
      const into = (calls[Number(c["index"])] ??= { id: "", type: "function", function: { name: "", arguments: "" } }) as { id: string; function: { name: string; arguments: string } };
      into.id += typeof c["id"] === "string" ? c["id"] : "";
      into.function.name += f.name ?? "";
      into.function.arguments += f.arguments ?? "";
    }
  }
  if (calls.length > 0) message["tool_calls"] = calls;
  return { message, finish, usage, text };
}

const TOOLS = [
  { type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } },
  { type: "function", function: { name: "get_time", parameters: { type: "object", properties: { tz: { type: "string" } } } } },
];

/** Turn 1 asks, the model thinks and calls both tools; turn 2 sends the assistant message back (`back`) with both results. */
async function twoTurns(claim: { openai_base_url: string; openai_api_key: string }, stream: boolean, back: (m: Obj) => Obj) {
  const m1: Obj[] = [
    { role: "system", content: "You are an agent." },
    { role: "user", content: "Weather and time in Paris?" },
  ];
  const a1 = await chat(claim, { model: "policy", messages: m1, tools: TOOLS, stream });
  const calls = a1.message["tool_calls"] as { id: string }[];
  const m2: Obj[] = [...m1, back(a1.message), { role: "tool", tool_call_id: calls[0]!.id, content: "sunny" }, { role: "tool", tool_call_id: calls[1]!.id, content: "14:00" }];
  const a2 = await chat(claim, { model: "policy", messages: m2, tools: TOOLS, stream });
  return { m1, m2, a1, a2 };
}

/** What Qwen3's chat-template users (and most agent frameworks) send back: the answer without its reasoning. */
const withoutReasoning = (m: Obj): Obj => {
  const { reasoning_content: _r, ...rest } = m;
  return rest;
};

type Call = { messages: Obj[]; answer: Obj | null; messages_splice: string; finish_reason: string | null; usage: unknown; tokens: { splice: string } | null };

describe("a thinking model's streamed tool calls in the ledger, end to end", () => {
  it("gives back the second call's messages as the client sent them: the assistant turn without the reasoning it left out (streamed)", async () => {
    const { claim, recorded } = await setup("messages");
    const { m2, a1 } = await twoTurns(claim, true, withoutReasoning);
    const t = await recorded(2, "the two calls recorded", { timeoutMs: 30_000 });
    const calls = t.calls as unknown as Call[];
    // Context: the answer as the client assembled it (its empty text null, as a whole answer has it), and the second call extends the first.
    expect(calls[0]!.answer).toEqual({ ...a1.message, content: null });
    expect(calls.map((c) => c.messages_splice)).toEqual(["first", "extends"]);
    // The model was not given the reasoning in turn 2 (the client dropped it): the ledger must not say it was.
    expect(calls[1]!.messages[2]).not.toHaveProperty("reasoning_content");
    expect(calls[1]!.messages).toEqual(m2);
  });

  it("gives back the second call's messages as the client sent them: the assistant turn without the reasoning it left out (whole)", async () => {
    const { claim, recorded } = await setup("messages");
    const { m2 } = await twoTurns(claim, false, (m) => ({ role: "assistant", content: m["content"], tool_calls: m["tool_calls"] }));
    const t = await recorded(2, "the two calls recorded", { timeoutMs: 30_000 });
    const calls = t.calls as unknown as Call[];
    expect(calls.map((c) => c.messages_splice)).toEqual(["first", "extends"]);
    expect(calls[1]!.messages).toEqual(m2);
  });

  it("gives back the second call's messages as the client sent them: the assistant turn with the reasoning the client sent, not the model's (interleaved thinking)", async () => {
    // Templates that render an earlier turn's reasoning (MiniMax-M2, Kimi K2 thinking, GLM-4.5, Qwen3 after the last user turn)
    // give the model what the client sent back: here a shortened reasoning, as agents that summarize their thoughts send.
    const { claim, recorded } = await setup("messages");
    const { m2 } = await twoTurns(claim, true, (m) => ({ ...m, content: null, reasoning_content: "Call both tools." }));
    const t = await recorded(2, "the two calls recorded", { timeoutMs: 30_000 });
    const calls = t.calls as unknown as Call[];
    expect(calls[1]!.messages[2]).toMatchObject({ reasoning_content: "Call both tools." });
    expect(calls[1]!.messages).toEqual(m2);
  });
});
