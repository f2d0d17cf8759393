/**
 * docs/relay.md, "Deadlines": every relayed call has one, `RELAY_DEADLINE_SECONDS` (600) by
 * default, "then 504 `upstream_timeout`", and a streamed call's deadline "covers every token".
 * The gateway forwarded to an HTTP upstream with undici's default `headersTimeout` and
 * `bodyTimeout` of 300 s, so a model taking more than 5 minutes to answer, within the deadline,
 * was cut at 300 s with 502 `upstream_unreachable` (the whole call below). Those bounds are off
 * now: the deadline ends the call. A stream whose next token is as long in coming goes on too.
 * The clock is faked (undici's timers, the gateway's deadline and the model's wait all run on
 * setTimeout), so the 5 minutes pass at once.
 */
import { createServer, request as httpRequest, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it, vi } from "vitest";
import { signEnvelope } from "../../../src/auth/gateway-signature";
import { GATEWAY_RELAY_PATH, SIGNATURE_HEADER, TIMESTAMP_HEADER, type RelayEnvelope } from "../../../src/protocol/relay";
import { ownGateway } from "./own-gateway";
import { envelope } from "./envelope";

const SECRET = "slow-model-secret";
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  vi.useRealTimers();
  for (const c of cleanups.splice(0).reverse()) await c();
});

const ANSWER_AFTER_MS = 305_000;

/**
 * The envelope signed as the Worker signs it, POSTed with node:http: the test's own client must
 * not have a 300 s bound of its own (Node's fetch is undici too).
 */
async function postPatient(gateway: string, env: RelayEnvelope): Promise<{ status: number; text: string }> {
  const body = JSON.stringify(env);
  const ts = Math.floor(Date.now() / 1000);
  const signature = await signEnvelope(SECRET, ts, body);
  return new Promise((resolve, reject) => {
    const req = httpRequest(gateway + GATEWAY_RELAY_PATH, { method: "POST", headers: { "content-type": "application/json", [TIMESTAMP_HEADER]: String(ts), [SIGNATURE_HEADER]: signature } }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (text += c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, text }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(body);
  });
}

/** The model server listening, closed after the test; its base URL. */
async function listening(upstream: Server): Promise<string> {
  await new Promise<void>((r) => upstream.listen(0, "127.0.0.1", r));
  cleanups.push(() => {
    upstream.closeAllConnections();
    return new Promise((r) => upstream.close(() => r(undefined)));
  });
  return `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/v1`;
}

const completion = JSON.stringify({ id: "c1", object: "chat.completion", created: 0, model: "m", choices: [{ index: 0, message: { role: "assistant", content: "done" }, finish_reason: "stop" }] });
const chunk = (content: string, finish: string | null) =>
  `data: ${JSON.stringify({ id: "c1", object: "chat.completion.chunk", created: 0, model: "m", choices: [{ index: 0, delta: { content }, finish_reason: finish }] })}\n\n`;

/**
 * A model server that answers `first` at once (nothing when null) and `rest` ANSWER_AFTER_MS
 * later, the gateway in front of it, and the call's answer once the faked clock passed that wait.
 */
async function slowCall(type: string, first: string | null, rest: string): Promise<{ status: number; text: string }> {
  let received!: () => void;
  const asked = new Promise<void>((r) => (received = r));
  const upstream = createServer((req, res) => {
    req.resume();
    if (first !== null) res.writeHead(200, { "content-type": type }).write(first);
    received();
    const t = setTimeout(() => (first === null ? res.writeHead(200, { "content-type": type }) : res).end(rest), ANSWER_AFTER_MS);
    res.on("close", () => clearTimeout(t));
  });
  upstream.requestTimeout = 0;
  const base = await listening(upstream);
  const url = await ownGateway(SECRET, cleanups);
  vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "setInterval", "clearInterval", "Date"] });
  // The Worker's default deadline: 600 s.
  const answered = postPatient(url, envelope({ trainer_base_url: base, deadline_seconds: 600, request: { model: "m", messages: [], stream: first !== null } }));
  await asked;
  await vi.advanceTimersByTimeAsync(ANSWER_AFTER_MS + 1000);
  return await answered;
}

describe("gateway: a model slower than 5 minutes, within the relay's deadline", () => {
  it("answers a whole call it took that long to begin", async () => {
    expect(await slowCall("application/json", null, completion)).toEqual({ status: 200, text: completion });
  });

  it("streams on after a token that long in coming", async () => {
    const answer = chunk("do", null) + chunk("ne", "stop") + "data: [DONE]\n\n";
    const got = await slowCall("text/event-stream", chunk("do", null), chunk("ne", "stop") + "data: [DONE]\n\n");
    expect(got).toEqual({ status: 200, text: answer });
  });
});

describe("gateway: a relay deadline longer than a timer can wait", () => {
  it("waits for the model when RELAY_DEADLINE_SECONDS is 30 days (past setTimeout's 24.8 days)", async () => {
    // Node fires a timer asked for more than 2^31-1 ms at once: every call was a 504 the moment it began.
    const upstream = createServer((req, res) => {
      req.resume();
      setTimeout(() => res.writeHead(200, { "content-type": "application/json" }).end(completion), 200);
    });
    const base = await listening(upstream);
    const url = await ownGateway(SECRET, cleanups);
    const got = await postPatient(url, envelope({ trainer_base_url: base, deadline_seconds: 30 * 86_400, request: { model: "m", messages: [] } }));
    expect(got).toEqual({ status: 200, text: completion });
  });
});
