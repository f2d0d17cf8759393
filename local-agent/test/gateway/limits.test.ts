/**
 * What anyone who can reach the gateway (through a public tunnel) can make the agent hold
 * before a signature is checked: unsigned requests are refused from their headers; well-formed,
 * fresh, forged signature headers pass that check, so their bodies are bounded in time, one by
 * one, all together, and by connections. Real gateway, real sockets.
 */
import { connect, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { Gateway, type GatewayOptions } from "../../src/gateway/server";
import { fixedSecret } from "../../src/gateway/secret";
import type { Logger } from "../../src/log";
import { GATEWAY_RELAY_PATH, SIGNATURE_HEADER, TIMESTAMP_HEADER } from "../../../src/protocol/relay";
import { agentJetKey, envelope, post } from "./envelope";
import { waitUntil } from "../support/wait";

const SECRET = "the-real-secret";
const MiB = 1024 * 1024;
const logged: string[] = [];
const logger: Logger = { info: (m) => logged.push(m), warn: (m) => logged.push(m), error: (m) => logged.push(m) };
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  logged.length = 0;
});

/** The default bounds and body deadline (60 s), as the agent runs it, unless `over` says otherwise. */
async function gateway(over: Partial<GatewayOptions> = {}): Promise<{ gw: Gateway; url: string }> {
  const gw = new Gateway({ host: "127.0.0.1", port: 0, secret: fixedSecret(SECRET), models: ["m"], zmqReceiveTimeoutMs: 300, logger, upstream: null, sessionPath: false, ...over });
  const url = await gw.listen();
  cleanups.push(() => gw.close());
  return { gw, url };
}

type Raw = { sock: Socket; seen: { answer: string; closed: boolean } };

async function raw(url: string): Promise<Raw> {
  const u = new URL(url);
  const sock = connect(Number(u.port), u.hostname);
  cleanups.push(() => sock.destroy());
  const seen = { answer: "", closed: false };
  sock.on("data", (b) => (seen.answer += b.toString("latin1")));
  sock.on("close", () => (seen.closed = true));
  sock.on("error", () => undefined);
  await new Promise<void>((r) => sock.once("connect", () => r()));
  return { sock, seen };
}

/** Headers anyone can make: the current time, and 64 hex digits that are no HMAC of anything. `length` null: a chunked body. */
function forged(length: number | null, signed = true): string {
  const size = length === null ? "transfer-encoding: chunked" : `content-length: ${length}`;
  const signature = signed ? `${TIMESTAMP_HEADER}: ${Math.floor(Date.now() / 1000)}\r\n${SIGNATURE_HEADER}: ${"ab".repeat(32)}\r\n` : "";
  return `POST ${GATEWAY_RELAY_PATH} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n${signature}${size}\r\n\r\n`;
}

const spaces = (n: number): Buffer => Buffer.alloc(n, 0x20);
const chunk = (n: number): Buffer => Buffer.concat([Buffer.from(`${n.toString(16)}\r\n`), spaces(n), Buffer.from("\r\n")]);

/** Refused and closed by the gateway, long before the body deadline. */
async function refused(c: Raw, what: string): Promise<string> {
  await waitUntil(() => c.seen.closed, what, 5000);
  return c.seen.answer;
}

/** A call the Worker signs: AgentJet's model list, which needs no model. */
const signedCall = (url: string) => post(url, envelope({ endpoint: "/v1/models", request: null, trainer_api_key: agentJetKey("ep-1", "ipc:///tmp/none") }), SECRET);

describe("gateway: forged requests before the signature check", () => {
  it("refuses an unsigned request 401 from its headers, without waiting for its body, and closes the connection", async () => {
    const { url } = await gateway();
    const c = await raw(url);
    // No x-rx-timestamp, no x-rx-signature: nothing the exchange signed, announcing 32 MiB it sends only part of.
    c.sock.write(forged(32 * MiB, false));
    c.sock.write(spaces(MiB));
    const answer = await refused(c, "the gateway to answer and close the connection");
    expect(answer).toMatch(/^HTTP\/1\.1 401/);
    expect(answer).toContain("invalid_signature");
  });

  it("gives a signed-looking request's body a deadline: a stalled body gets 408 and its connection closed", async () => {
    const { url } = await gateway({ bodyDeadlineMs: 300 });
    const c = await raw(url);
    c.sock.write(forged(100_000) + '{"endpoint":');
    // Node's server checks the deadline on its own clock (no clock can be injected into it): real time, shortened.
    expect(await refused(c, "the stalled request to be cut off")).toMatch(/^HTTP\/1\.1 408/);
  });

  it("refuses from its headers a declared body larger than any envelope: 413, the body unread, the connection closed", async () => {
    const { gw, url } = await gateway();
    const c = await raw(url);
    c.sock.write(forged(1024 * MiB));
    c.sock.write(spaces(64 * 1024));
    expect(await refused(c, "the gateway to refuse a 1 GiB body from its content-length")).toMatch(/^HTTP\/1\.1 413 .*[\s\S]*connection: close[\s\S]*"code":"too_large"/i);
    expect(gw.unverifiedBytes).toBe(0);
  }, 15_000);

  it("holds at most its bound of forged bodies across connections: past it, 503 with Retry-After and the connection closed", async () => {
    const { gw, url } = await gateway({ unverifiedBodyBytes: 8 * MiB });
    // Within the bound: held while it trickles, up to the body deadline.
    const held = await raw(url);
    held.sock.write(forged(6 * MiB));
    held.sock.write(spaces(5 * MiB));
    await waitUntil(() => gw.unverifiedBytes === 5 * MiB, "the gateway to buffer the first forged body");

    // One whose declared length would pass the bound is refused from its headers.
    const declared = await raw(url);
    declared.sock.write(forged(4 * MiB));
    const answer = await refused(declared, "a declared body past the bound to be refused");
    expect(answer).toMatch(/^HTTP\/1\.1 503 /);
    expect(answer).toMatch(/\r\nretry-after: 1\r\n/i);
    expect(answer).toContain('"code":"gateway_busy"');

    // A chunked body declares nothing: it is refused as soon as its bytes pass the bound.
    const chunked = await raw(url);
    chunked.sock.write(forged(null));
    chunked.sock.write(chunk(1 * MiB));
    chunked.sock.write(chunk(3 * MiB));
    expect(await refused(chunked, "a chunked body past the bound to be refused")).toMatch(/^HTTP\/1\.1 503 /);
    expect(gw.unverifiedBytes).toBe(5 * MiB);
    expect(logged.filter((m) => m.includes("refused relay requests 503"))).toHaveLength(1);

    // A hang-up gives its bytes back: the Worker's calls go on.
    held.sock.destroy();
    await waitUntil(() => gw.unverifiedBytes === 0, "the hung-up body's bytes to be given back");
    expect((await signedCall(url)).status).toBe(200);
    expect(gw.unverifiedBytes).toBe(0);
  }, 15_000);

  it("serves hundreds of the Worker's envelopes at once within the default bounds, and gives back every byte", async () => {
    const { gw, url } = await gateway();
    const answers = await Promise.all(Array.from({ length: 300 }, () => signedCall(url)));
    expect(answers.map((a) => a.status)).toEqual(answers.map(() => 200));
    expect(gw.unverifiedBytes).toBe(0);
  }, 30_000);

  it("keeps at most maxConnections open: a further one is closed at once, and logged", async () => {
    const { url } = await gateway({ maxConnections: 2 });
    const open = [await raw(url), await raw(url)];
    const extra = await raw(url);
    await waitUntil(() => extra.seen.closed, "the connection past the bound to be closed");
    expect(extra.seen.answer).toBe("");
    expect(open.every((c) => !c.seen.closed)).toBe(true);
    expect(logged.some((m) => m.includes("gateway: refused connections: 2 are open"))).toBe(true);
    for (const c of open) c.sock.destroy();
    await waitUntil(async () => (await signedCall(url).catch(() => ({ status: 0 }))).status === 200, "a call once connections closed");
  }, 15_000);
});
