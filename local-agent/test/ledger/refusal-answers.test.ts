/**
 * A refusal as the ledger records it (the real Gateway and CallRecorder in front of an HTTP
 * model): OpenAI streams it as `delta.refusal` pieces, and the same answer whole has
 * `message.refusal` beside null content. Both are recorded as the whole answer has it.
 */
import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { describe, expect, it } from "vitest";
import { bodyText } from "../support/http-server";
import { recordingGatewayOnModel } from "./recording-gateway";

async function answer(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const r = JSON.parse(await bodyText(req)) as Record<string, unknown>;
  const base = { id: "c", object: "chat.completion.chunk", created: 1, model: "policy" };
  if (r["stream"] !== true) {
    res.writeHead(200, { "content-type": "application/json" }).end(
      JSON.stringify({ id: "c", object: "chat.completion", created: 1, model: "policy", choices: [{ index: 0, message: { role: "assistant", content: null, refusal: "I can't help with that." }, finish_reason: "stop" }], usage: { prompt_tokens: 3, completion_tokens: 6, total_tokens: 9 } }),
    );
    return;
  }
  res.writeHead(200, { "content-type": "text/event-stream" });
  const ev = (o: unknown) => res.write(`data: ${JSON.stringify(o)}\n\n`);
  ev({ ...base, choices: [{ index: 0, delta: { role: "assistant", content: null, refusal: "" }, finish_reason: null }] });
  ev({ ...base, choices: [{ index: 0, delta: { refusal: "I can't " }, finish_reason: null }] });
  ev({ ...base, choices: [{ index: 0, delta: { refusal: "help with that." }, finish_reason: null }] });
  ev({ ...base, choices: [{ index: 0, delta: {}, finish_reason: "stop" }] });
  ev({ ...base, choices: [], usage: { prompt_tokens: 3, completion_tokens: 6, total_tokens: 9 } });
  res.end("data: [DONE]\n\n");
}

const m = recordingGatewayOnModel("refusal-answers", answer);

describe("a refusal", () => {
  it("is recorded from a stream as the whole answer has it: the refusal assembled, the content null", async () => {
    const request = { model: "policy", messages: [{ role: "user", content: "do something bad" }] };
    const whole = m.call(`ep-${randomUUID()}`, request, "messages");
    await m.post(whole);
    const wholeRec = await m.recordOf(whole);
    const refused = { role: "assistant", content: null, refusal: "I can't help with that." };
    expect(wholeRec.body.answer).toEqual(refused);
    const streamed = m.call(`ep-${randomUUID()}`, { ...request, stream: true }, "messages");
    const passed = await m.post(streamed);
    expect(passed.text).toContain("help with that.");
    const rec = await m.recordOf(streamed);
    expect(rec.body.answer).toEqual(refused);
  });
});
