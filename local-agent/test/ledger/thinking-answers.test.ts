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
const USAGE = { prompt_tokens: 12, completion_tokens: 30, total_tokens: 42 };

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

const ask = (stream: boolean) => m.call(`ep-${randomUUID()}`, { model: "policy", messages: [{ role: "user", content: "2+2?" }], stream, ...(stream ? { stream_options: { include_usage: true } } : {}) }, "messages");

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

});
