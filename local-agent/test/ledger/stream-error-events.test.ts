/**
 * A 200 stream that ends with an upstream's error event in a shape other than OpenAI's nested
 * `{"error": {...}}`: vLLM's and SGLang's flat `{"object": "error"}`, a proxy's `{"error": "text"}`,
 * an SSE event named `error`. The gateway ends the client's stream on any of them (stream-end.ts),
 * and the ledger records the call as failed, whatever the capture: a half answer is no turn of
 * training (docs/ledger.md).
 */
import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { describe, expect, it } from "vitest";
import { bodyText } from "../support/http-server";
import { recordingGatewayOnModel } from "./recording-gateway";

const chunk = (content: string) => `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: { role: "assistant", content }, finish_reason: null }] })}\n\n`;

/** The error event each model name ends its stream with, after half an answer. */
const ENDINGS: Record<string, { event: string; error: string }> = {
  flat: { event: `data: ${JSON.stringify({ object: "error", message: "The engine died mid-request", type: "InternalServerError", param: null, code: 500 })}\n\n`, error: "500: The engine died mid-request" },
  string: { event: `data: ${JSON.stringify({ error: "upstream overloaded" })}\n\n`, error: "upstream_error: upstream overloaded" },
  named: { event: `event: error\ndata: ${JSON.stringify({ message: "the model server is shutting down" })}\n\n`, error: "upstream_error: the model server is shutting down" },
};

async function answer(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const asked = JSON.parse(await bodyText(req)) as { model: string };
  const ending = ENDINGS[asked.model];
  if (ending === undefined) {
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ id: "x", object: "chat.completion", created: 1, model: "m", choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }] }));
    return;
  }
  res.writeHead(200, { "content-type": "text/event-stream" });
  res.write(chunk("The answer is"));
  res.end(ending.event);
}

const recording = recordingGatewayOnModel("stream-error-events", answer);

describe("a stream that ends with an upstream's error event", () => {
  for (const [shape, ending] of Object.entries(ENDINGS)) {
    it(`records a stream ending with an error event (${shape}) as failed, not as a turn`, async () => {
      const env = recording.call(`ep-${randomUUID()}`, { model: shape, messages: [{ role: "user", content: "q" }], stream: true }, "messages");
      const r = await recording.post(env);
      expect(r.status).toBe(200);
      // The gateway took the error event for the stream's end: no stream-broken error of its own.
      expect(r.text).not.toContain("upstream_stream_broken");
      expect((await recording.recordOf(env)).error).toBe(ending.error);
    });

    it(`records no stub for a call relayed with capture off whose stream ended with an error event (${shape})`, async () => {
      const episode = `ep-${randomUUID()}`;
      // A captured call first, so that the claim's capture-off calls are watched for stubs.
      const first = recording.call(episode, { model: "whole", messages: [{ role: "user", content: "a" }] }, "messages");
      await recording.post(first);
      await recording.recordOf(first);
      const off = recording.call(episode, { model: shape, messages: [{ role: "user", content: "b" }], stream: true }, "off");
      expect((await recording.post(off)).status).toBe(200);
      // Records are handed over in the order their calls end: the next call's comes after the stub would have.
      const marker = recording.call(episode, { model: "whole", messages: [{ role: "user", content: "c" }] }, "messages");
      await recording.post(marker);
      await recording.recordOf(marker);
      expect(recording.gw.records.find((x) => x.call_id === off.call?.call_id)).toBeUndefined();
    });
  }
});
