/**
 * What one call's answer may make the gateway hold (MAX_ANSWER_BYTES): an upstream or proxy that
 * sends without end, a stream's event that never gets its blank line or a whole answer (an error
 * page) that never ends, is cut off past it, the upstream's request aborted and the client told
 * 502 upstream_answer_too_large, rather than read on into the GPU host's memory until the call's
 * deadline. A real gateway and a real HTTP upstream that keeps sending.
 */
import type { ServerResponse } from "node:http";
import { afterEach, describe, expect, it } from "vitest";
import { MAX_ANSWER_BYTES } from "../../src/gateway/http-upstream";
import { ownGateway } from "./own-gateway";
import { envelope, post } from "./envelope";
import { serveHttp } from "../support/http-server";
import { waitUntil } from "../support/wait";

const SECRET = "answer-bound-secret";
const MiB = 1024 * 1024;
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const drained = (res: ServerResponse): Promise<void> =>
  new Promise((r) => {
    const done = (): void => void (res.off("drain", done), res.off("close", done), r());
    res.on("drain", done).on("close", done);
  });

/** An upstream answering `status` with `type`: `first`, then 'x's without a line end, up to twice the bound, then it stalls. */
async function endless(status: number, type: string, first: string): Promise<{ origin: string; sent: () => number; closed: () => boolean }> {
  let sent = 0;
  let closed = false;
  const filler = Buffer.alloc(MiB, "x");
  const model = await serveHttp(async (req, res) => {
    req.resume();
    res.on("close", () => (closed = true));
    res.writeHead(status, { "content-type": type });
    res.write(first);
    while (!res.destroyed && sent < 2 * MAX_ANSWER_BYTES) {
      sent += filler.length;
      if (!res.write(filler)) await drained(res);
    }
  });
  cleanups.push(() => model.close());
  return { origin: model.origin, sent: () => sent, closed: () => closed };
}

/** The bound, and what the sockets between the upstream and the gateway hold beyond it. */
const READ_AT_MOST = MAX_ANSWER_BYTES + 16 * MiB;

describe("gateway: an upstream's answer without end", () => {
  it("cuts off a stream's event that never ends: the client's stream ends with an upstream_answer_too_large event", async () => {
    const up = await endless(200, "text/event-stream", 'data: {"choices":[{"index":0,"delta":{"content":"');
    const r = await post(await ownGateway(SECRET, cleanups), envelope({ trainer_base_url: `${up.origin}/v1`, request: { model: "m", stream: true, messages: [{ role: "user", content: "hi" }] } }), SECRET);
    expect(r.status).toBe(200);
    expect(JSON.parse(r.text.trim().replace(/^data: /, ""))).toMatchObject({ error: { code: "upstream_answer_too_large", message: expect.stringContaining("an event of its stream past 64 MiB") } });
    await waitUntil(() => up.closed(), "the upstream's request to be aborted");
    expect(up.sent()).toBeLessThanOrEqual(READ_AT_MOST);
  }, 30_000);

  it("cuts off a whole answer that never ends: 502 upstream_answer_too_large", async () => {
    const up = await endless(500, "text/plain", "Internal Server Error ");
    const r = await post(await ownGateway(SECRET, cleanups), envelope({ trainer_base_url: `${up.origin}/v1` }), SECRET);
    expect(r.status).toBe(502);
    expect(JSON.parse(r.text)).toMatchObject({ error: { code: "upstream_answer_too_large" } });
    await waitUntil(() => up.closed(), "the upstream's request to be aborted");
    expect(up.sent()).toBeLessThanOrEqual(READ_AT_MOST);
  }, 30_000);
});
