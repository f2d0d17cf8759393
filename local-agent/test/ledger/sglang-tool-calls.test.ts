/**
 * A thinking model on SGLang with capture `tokens`, asked for a stream. SGLang refuses to
 * stream with prompt ids, so the gateway asks it whole and streams the answer to the client
 * itself (completionToChunks). SGLang's whole answer gives each tool call an `index`: the
 * position of its tool in the request's `tools` (its parsers' `tool_index`), not the call's
 * position, so two parallel calls of one tool both say `index: 0`. OpenAI clients merge a
 * stream's tool-call deltas by `index`.
 */
import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { describe, expect, it } from "vitest";
import { bodyText } from "../support/http-server";
import { recordingGatewayOnModel } from "./recording-gateway";

const TOOLS = [
  { type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } },
  { type: "function", function: { name: "get_time", parameters: { type: "object", properties: { tz: { type: "string" } } } } },
];

/** SGLang's whole chat answer, with the token fields the gateway asks for. */
async function answer(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const r = JSON.parse(await bodyText(req)) as Record<string, unknown>;
  const completion = [11, 12, 13, 14];
  const message = {
    role: "assistant",
    content: null,
    reasoning_content: "Two cities: call get_weather twice.",
    tool_calls: [
      { id: "call_a", index: 0, type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } },
      { id: "call_b", index: 0, type: "function", function: { name: "get_weather", arguments: '{"city": "Rome"}' } },
    ],
  };
  const choice: Record<string, unknown> = { index: 0, message, logprobs: null, finish_reason: "tool_calls", matched_stop: null };
  if (r["return_prompt_token_ids"] === true) choice["prompt_token_ids"] = [1, 2, 3];
  if (r["return_meta_info"] === true) choice["meta_info"] = { id: "x", prompt_tokens: 3, completion_tokens: 4, output_token_logprobs: completion.map((id) => [-0.5, id, null]) };
  const usage = { prompt_tokens: 3, total_tokens: 7, completion_tokens: 4, prompt_tokens_details: null, reasoning_tokens: 0 };
  res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ id: "sg", object: "chat.completion", created: 1, model: "policy", choices: [choice], usage }));
}

const m = recordingGatewayOnModel("sglang-tool-calls", answer, "sglang");

/** The stream's tool-call deltas merged by index, as OpenAI clients merge them. */
function toolCallsOf(text: string): { id: string; function: { name: string; arguments: string } }[] {
  const calls: { id: string; function: { name: string; arguments: string } }[] = [];
  for (const e of text.split("\n\n")) {
    if (!e.startsWith("data: {")) continue;
    const chunk = JSON.parse(e.slice(6)) as { choices: { delta?: { tool_calls?: Record<string, unknown>[] } }[] };
    for (const c of chunk.choices[0]?.delta?.tool_calls ?? []) {
      const f = (c["function"] ?? {}) as { name?: string; arguments?: string };
      const into = (calls[Number(c["index"])] ??= { id: "", function: { name: "", arguments: "" } });
      into.id += typeof c["id"] === "string" ? c["id"] : "";
      into.function.name += f.name ?? "";
      into.function.arguments += f.arguments ?? "";
    }
  }
  return calls;
}

describe("SGLang's parallel tool calls streamed by the gateway", () => {
  it("streams two parallel calls of one tool as two tool calls, as the ledger records them", async () => {
    const env = m.call(`ep-${randomUUID()}`, { model: "policy", messages: [{ role: "user", content: "Weather in Paris and Rome?" }], tools: TOOLS, stream: true }, "tokens");
    const got = await m.post(env);
    expect(got.status).toBe(200);
    const rec = await m.recordOf(env);
    const recorded = (rec.body.answer?.["tool_calls"] as { id: string; function: unknown }[]).map((c) => ({ id: c.id, function: c.function }));
    // Context: the ledger has both calls, as SGLang answered them.
    expect(recorded).toHaveLength(2);
    // The client must get the same two calls, not one call with both ids and both arguments run together.
    expect(toolCallsOf(got.text)).toEqual(recorded);
  });
});
