/**
 * The agent's link to the exchange against a real HTTP server answering what the Worker does not
 * send today but a proxy or the edge in front of it may: answers that carry no body by
 * definition, and pages that are no JSON.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { ExchangeError } from "../../src/client";
import { EngineLink } from "../src/engine-link";

let server: Server | null = null;
afterEach(async () => {
  await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
  server = null;
});

async function answering(status: number, headers: Record<string, string> = { etag: '"v1"' }, body = ""): Promise<string> {
  server = createServer((_req, res) => {
    res.writeHead(status, headers);
    res.end(body);
  });
  await new Promise<void>((r) => server!.listen(0, "127.0.0.1", r));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe("the engine link", () => {
  it.each([204, 304])("passes a %i on as the answer it is, with no body, instead of failing the call", async (status) => {
    // new Response(body, { status: 204 }) throws for any body, an empty one too: the trainer got a 502 "cannot reach the exchange".
    const link = new EngineLink(await answering(status), "e1", "t", 5000);
    const answer = await link.forward("GET", "/get_engine_status", null, undefined);
    expect({ status: answer.status, bytes: answer.body.length }).toEqual({ status, bytes: 0 });
  });

  it("keeps the Retry-After of an answer that is no JSON (the edge's or a proxy's 503 page), so the agent waits it out", async () => {
    const link = new EngineLink(await answering(503, { "content-type": "text/html", "retry-after": "30" }, "<html>Service Temporarily Unavailable</html>"), "e1", "t", 5000);
    const err = await link.client.gatewaySecret().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ExchangeError);
    expect({ code: (err as ExchangeError).code, retryAfter: (err as ExchangeError).retryAfterSeconds }).toEqual({ code: "bad_response", retryAfter: 30 });
  });
});
