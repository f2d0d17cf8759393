/** A call relayed with capture off whose 200 stream carries an error event is a failed call, not a turn: no stub of it. */
import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { expect, it } from "vitest";
import { bodyText } from "../support/http-server";
import { recordingGatewayOnModel } from "./recording-gateway";

async function answer(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const body = JSON.parse(await bodyText(req)) as { stream?: boolean };
  if (body.stream === true) {
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.end(`data: ${JSON.stringify({ error: { message: "the model crashed", code: 500 } })}\n\ndata: [DONE]\n\n`);
    return;
  }
  res.writeHead(200, { "content-type": "application/json" }).end(
    JSON.stringify({ id: "x", object: "chat.completion", created: 1, model: "tiny", choices: [{ index: 0, message: { role: "assistant", content: "hi" }, finish_reason: "stop" }] }),
  );
}

const recording = recordingGatewayOnModel("capture-off-secret", answer);
const call = recording.call;

it("an error event in a 200 stream fails the call whatever the capture; with capture off it is not recorded as a successful stub", async () => {
  const episode = `ep-${randomUUID()}`;
  const first = call(episode, { model: "tiny", messages: [{ role: "user", content: "a" }] }, "messages");
  await recording.post(first);
  await recording.recordOf(first);
  // The same streamed call with capture messages: recorded as failed (not a turn).
  const onCapture = call(episode, { model: "tiny", messages: [{ role: "user", content: "b" }], stream: true }, "messages");
  await recording.post(onCapture);
  const captured = await recording.recordOf(onCapture);
  expect(captured.error).not.toBeNull();
  // With capture off: a stub would say a successful turn happened.
  const off = call(episode, { model: "tiny", messages: [{ role: "user", content: "c" }], stream: true }, "off");
  await recording.post(off);
  const marker = call(episode, { model: "tiny", messages: [{ role: "user", content: "d" }] }, "messages");
  await recording.post(marker);
  await recording.recordOf(marker);
  const stub = recording.gw.records.find((r) => r.call_id === off.call?.call_id);
  expect(stub === undefined || stub.error !== null, `stub recorded as success: ${JSON.stringify(stub)}`).toBe(true);
});
