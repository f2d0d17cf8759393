/**
 * A stream whose answer was whole (choice 0's finish_reason, or `data: [DONE]`) and whose
 * connection was then dropped rather than closed (the model server or a proxy killed right after
 * the answer's last event) reaches the client as it came. The gateway appended an
 * `upstream_stream_broken` event after it, which OpenAI's SDKs raise on: a complete answer became
 * an exception (docs/relay.md: "a finish_reason without `[DONE]` ... is a whole answer").
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { ownGateway } from "./own-gateway";
import { envelope, post } from "./envelope";

const SECRET = "dropped-secret";
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A 200 event stream of `events`, 30 ms apart, whose connection is then dropped rather than ended. */
async function droppingUpstream(events: string[]): Promise<string> {
  const server = createServer((req, res) => {
    req.resume();
    void (async () => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      for (const e of events) {
        res.write(e);
        await new Promise((r) => setTimeout(r, 30));
      }
      // Killed after its last event: no chunked terminator.
      res.socket?.destroy();
    })();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  cleanups.push(() => {
    server.closeAllConnections();
    return new Promise((r) => server.close(() => r(undefined)));
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

const chunk = (content: string, finish: string | null) => `data: ${JSON.stringify({ object: "chat.completion.chunk", choices: [{ index: 0, delta: { content }, finish_reason: finish }] })}\n\n`;
const streamed = (base: string) => envelope({ trainer_base_url: `${base}/v1`, request: { model: "m", stream: true, messages: [{ role: "user", content: "hi" }] } });

describe("gateway: an upstream whose connection drops after a whole streamed answer", () => {
  it("passes an answer that ended with choice 0's finish_reason as it came, with no error event after it", async () => {
    const events = [chunk("The answer", null), chunk("", "stop")];
    const r = await post(await ownGateway(SECRET, cleanups), streamed(await droppingUpstream(events)), SECRET);
    expect(r.status).toBe(200);
    expect(r.text).toBe(events.join(""));
  });

  it("passes an answer that ended with data: [DONE] as it came, with no error event after it", async () => {
    const events = [chunk("The answer", null), chunk("", "stop"), "data: [DONE]\n\n"];
    const r = await post(await ownGateway(SECRET, cleanups), streamed(await droppingUpstream(events)), SECRET);
    expect(r.status).toBe(200);
    expect(r.text).toBe(events.join(""));
  });
});
