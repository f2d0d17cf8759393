/**
 * What the ledger records of a thinking model's answer, against what the client got, over
 * real sockets (the real Gateway and CallRecorder in front of an HTTP model). vLLM renamed its
 * reasoning field from `reasoning_content` to `reasoning` (both sent while the old one is
 * deprecated; OpenRouter and later vLLM builds send `reasoning` alone).
 */
import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { describe, expect, it } from "vitest";
import { bodyText } from "../support/http-server";
import { recordingGatewayOnModel } from "./recording-gateway";

const base = { id: "chatcmpl-r", object: "chat.completion.chunk", created: 1, model: "policy" };
const ev = (o: unknown) => `data: ${JSON.stringify(o)}\n\n`;
// With OpenAI's details, as vLLM sends them with --enable-prompt-tokens-details.
const USAGE = { prompt_tokens: 12, completion_tokens: 30, total_tokens: 42, prompt_tokens_details: { cached_tokens: 8 }, completion_tokens_details: { reasoning_tokens: 20 } };

const m = recordingGatewayOnModel("thinking-answers", async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
  const r = JSON.parse(await bodyText(req)) as Record<string, unknown>;
  if (r["stream"] !== true) {
    const message = { role: "assistant", content: "4", reasoning: "2+2 is 4." };
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ ...base, object: "chat.completion", choices: [{ index: 0, message, logprobs: null, finish_reason: "stop" }], usage: USAGE }));
    return;
  }
  res.writeHead(200, { "content-type": "text/event-stream" });
  res.write(ev({ ...base, choices: [{ index: 0, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }] }));
  for (const piece of ["2+2", " is 4."]) res.write(ev({ ...base, choices: [{ index: 0, delta: { reasoning: piece }, logprobs: null, finish_reason: null }] }));
  res.write(ev({ ...base, choices: [{ index: 0, delta: { content: "4" }, logprobs: null, finish_reason: "stop" }] }));
  if ((r["stream_options"] as { include_usage?: boolean } | undefined)?.include_usage === true) res.write(ev({ ...base, choices: [], usage: USAGE }));
  res.end("data: [DONE]\n\n");
});

const ask = (stream: boolean, askUsage = stream) =>
  m.call(`ep-${randomUUID()}`, { model: "policy", messages: [{ role: "user", content: "2+2?" }], stream, ...(askUsage ? { stream_options: { include_usage: true } } : {}) }, "messages");

/** The streamed deltas assembled as an OpenAI client does: every string field concatenated. */
function assembled(text: string): Record<string, unknown> {
  const message: Record<string, unknown> = {};
  for (const e of text.split("\n\n")) {
    if (!e.startsWith("data: {")) continue;
    const delta = ((JSON.parse(e.slice(6)) as { choices: { delta: Record<string, unknown> }[] }).choices[0]?.delta ?? {}) as Record<string, unknown>;
    for (const [k, v] of Object.entries(delta)) if (typeof v === "string") message[k] = k === "role" ? v : String(message[k] ?? "") + v;
  }
  return message;
}

describe("a thinking model's answer as recorded against what the client got", () => {
  it("records a streamed answer's `reasoning` under the name the client got it by, as it records the same server's whole answer", async () => {
    const whole = ask(false);
    expect((await m.post(whole)).status).toBe(200);
    const wholeRecord = await m.recordOf(whole);
    // Context: the whole answer is recorded as the server sent it.
    expect(wholeRecord.body.answer).toMatchObject({ reasoning: "2+2 is 4." });

    const streamed = ask(true);
    const got = await m.post(streamed);
    expect(got.status).toBe(200);
    expect(assembled(got.text)).toEqual({ role: "assistant", content: "4", reasoning: "2+2 is 4." });
    const rec = await m.recordOf(streamed);
    expect(rec.body.answer).toEqual({ role: "assistant", content: "4", reasoning: "2+2 is 4." });
  });

  it("records the usage's cached and reasoning tokens, of a whole answer and of a stream whether or not the client asked for its usage", async () => {
    const details = { prompt_tokens: 12, completion_tokens: 30, cached_tokens: 8, reasoning_tokens: 20 };
    for (const [stream, askUsage] of [[false, false], [true, true], [true, false]] as const) {
      const call = ask(stream, askUsage);
      const got = await m.post(call);
      expect(got.status).toBe(200);
      // The gateway asked for the usage itself, and took its chunk out again: the client gets what it asked for.
      if (stream) expect(got.text.includes('"usage"')).toBe(askUsage);
      expect((await m.recordOf(call)).usage, `stream ${stream}, usage asked ${askUsage}`).toEqual(details);
    }
  });
});
