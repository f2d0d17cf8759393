/** A call relayed with capture off whose 200 stream carries an error event is a failed call, not a turn: no stub of it. */
import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { afterAll, beforeAll, expect, it } from "vitest";
import type { CaptureMode } from "../../../src/protocol/ledger";
import type { RelayEnvelope } from "../../../src/protocol/relay";
import { envelope, post } from "../gateway/envelope";
import { bodyText, serveHttp, type TestServer } from "../support/http-server";
import { callContext, recordingGateway, recordOf, type RecordingGateway } from "./recording-gateway";

const SECRET = "capture-off-secret";
let up: TestServer;
let gw: RecordingGateway;

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

beforeAll(async () => {
  up = await serveHttp(answer);
  gw = await recordingGateway(SECRET, "vllm");
});
afterAll(async () => {
  await gw?.gateway.close();
  await up?.close();
});

const call = (episode: string, request: Record<string, unknown>, capture: CaptureMode): RelayEnvelope =>
  envelope({ episode_uuid: episode, trainer_base_url: `${up.origin}/v1`, request, call: callContext(capture) });

it("an error event in a 200 stream fails the call whatever the capture; with capture off it is not recorded as a successful stub", async () => {
  const episode = `ep-${randomUUID()}`;
  const first = call(episode, { model: "tiny", messages: [{ role: "user", content: "a" }] }, "messages");
  await post(gw.url, first, SECRET);
  await recordOf(gw, first);
  // The same streamed call with capture messages: recorded as failed (not a turn).
  const onCapture = call(episode, { model: "tiny", messages: [{ role: "user", content: "b" }], stream: true }, "messages");
  await post(gw.url, onCapture, SECRET);
  const captured = await recordOf(gw, onCapture);
  expect(captured.error).not.toBeNull();
  // With capture off: a stub would say a successful turn happened.
  const off = call(episode, { model: "tiny", messages: [{ role: "user", content: "c" }], stream: true }, "off");
  await post(gw.url, off, SECRET);
  const marker = call(episode, { model: "tiny", messages: [{ role: "user", content: "d" }] }, "messages");
  await post(gw.url, marker, SECRET);
  await recordOf(gw, marker);
  const stub = gw.records.find((r) => r.call_id === off.call?.call_id);
  expect(stub === undefined || stub.error !== null, `stub recorded as success: ${JSON.stringify(stub)}`).toBe(true);
});
