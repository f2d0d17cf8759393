/**
 * docs/relay.md, "Deadlines": a streamed call's deadline "covers every token". A client (the
 * Worker) that stops reading a stream held the gateway's copy waiting for `drain` for as long as
 * it neither read nor hung up: past the deadline the upstream was aborted, but the call never
 * ended, its connection and buffered bytes were held, and the ledger never heard of it. The
 * deadline now ends it as timed out, and the connection goes. A real model streaming ~64 MiB, a
 * real gateway, a client socket that pauses after the first bytes; the deadline is the
 * gateway's own timer (real time: 1 s is the least an envelope may give).
 */
import { connect, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { signEnvelope } from "../../../src/auth/gateway-signature";
import { GATEWAY_RELAY_PATH, SIGNATURE_HEADER, TIMESTAMP_HEADER } from "../../../src/protocol/relay";
import { envelope } from "./envelope";
import { callContext, recordingGateway, recordOf } from "../ledger/recording-gateway";
import { serveHttp } from "../support/http-server";
import { waitUntil } from "../support/wait";

const SECRET = "stalled-client-secret";
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe("a streamed call whose client stops reading", () => {
  it("ends at its deadline all the same: the upstream aborted, the call recorded as timed out, its connection closed", async () => {
    let upstreamClosed = false;
    const model = await serveHttp(async (req, res) => {
      req.resume();
      res.on("close", () => (upstreamClosed = true));
      res.writeHead(200, { "content-type": "text/event-stream" });
      const event = `data: ${JSON.stringify({ object: "chat.completion.chunk", choices: [{ index: 0, delta: { content: "x".repeat(16 * 1024) }, finish_reason: null }] })}\n\n`;
      // Far more than the sockets between the gateway and a paused client hold.
      for (let i = 0; i < 4096 && !res.destroyed; i++) {
        if (!res.write(event))
          await new Promise<void>((r) => {
            const done = (): void => void (res.off("drain", done), res.off("close", done), r());
            res.on("drain", done).on("close", done);
          });
      }
      res.end("data: [DONE]\n\n");
    });
    cleanups.push(() => model.close());
    const gw = await recordingGateway(SECRET, "vllm");
    cleanups.push(() => gw.gateway.close());

    const env = envelope({ trainer_base_url: `${model.origin}/v1`, deadline_seconds: 1, request: { model: "m", stream: true, messages: [{ role: "user", content: "hi" }] }, call: callContext("messages") });
    const body = JSON.stringify(env);
    const ts = Math.floor(Date.now() / 1000);
    const sig = await signEnvelope(SECRET, ts, body);
    const sock: Socket = connect(Number(new URL(gw.url).port), "127.0.0.1");
    cleanups.push(() => sock.destroy());
    await new Promise((r) => sock.once("connect", r));
    let closed = false;
    sock.on("close", () => (closed = true));
    // It reads the head and the first bytes, then stalls (a hung isolate, a full tunnel).
    sock.once("data", () => sock.pause());
    sock.write(`POST ${GATEWAY_RELAY_PATH} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${TIMESTAMP_HEADER}: ${ts}\r\n${SIGNATURE_HEADER}: ${sig}\r\n\r\n${body}`);

    const record = await recordOf(gw, env);
    expect(record).toMatchObject({ status: 200, error: expect.stringMatching(/^upstream_timeout: /) });
    expect(upstreamClosed).toBe(true);
    // The gateway let the connection go: the client, reading again, comes to its end.
    sock.resume();
    await waitUntil(() => closed, "the client's connection to close");
  }, 20_000);
});
