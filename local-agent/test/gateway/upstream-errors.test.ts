/**
 * The inference upstream's error answers in the operator's log (src/gateway/upstream-errors.ts):
 * through a real gateway to a real upstream that refuses every call, and the rate of the lines
 * on the test's clock; and the upstream's word on when to try again, passed on to the client.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { signEnvelope } from "../../../src/auth/gateway-signature";
import { GATEWAY_RELAY_PATH, SIGNATURE_HEADER, TIMESTAMP_HEADER, type RelayEnvelope } from "../../../src/protocol/relay";
import { Gateway } from "../../src/gateway/server";
import { fixedSecret } from "../../src/gateway/secret";
import { EVERY_MS, UpstreamErrors } from "../../src/gateway/upstream-errors";
import { silentLogger, type Logger } from "../../src/log";
import { envelope, post } from "./envelope";
import { ownGateway } from "./own-gateway";

const SECRET = "upstream-errors-secret";
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const lines = (): { logged: string[]; logger: Logger } => {
  const logged: string[] = [];
  return { logged, logger: { info: (m) => logged.push(m), warn: (m) => logged.push(m), error: (m) => logged.push(m) } };
};

async function refusingUpstream(status: number, body: string): Promise<string> {
  const server = createServer((req, res) => {
    req.resume();
    res.writeHead(status, { "content-type": "application/json" }).end(body);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  cleanups.push(() => new Promise((r) => server.close(r)));
  return `http://user:pw@127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe("the gateway's log of an upstream that refuses calls", () => {
  it.each([
    [401, "Incorrect API key provided", /answered 401 \(the trainer's key: check the episode's openai_api_key or inferenceUpstream\): .*Incorrect API key provided/],
    [404, "The model `tiny` does not exist.", /answered 404 \(the base URL or the model name: check the episode's openai_base_url or inferenceUpstream\): .*does not exist/],
  ])("says once that it answered %i, naming the upstream without its credentials", async (status, message, said) => {
    const { logged, logger } = lines();
    const url = await ownGateway(SECRET, cleanups, { logger });
    const up = await refusingUpstream(status, JSON.stringify({ error: { message, type: "invalid_request_error", param: null, code: null } }));
    for (let i = 0; i < 5; i++) {
      const r = await post(url, envelope({ episode_uuid: `ep-${i}`, trainer_api_key: "sk-wrong-key", trainer_base_url: `${up}/v1` }), SECRET);
      expect(r.status).toBe(status);
    }
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatch(said);
    expect(logged[0]).toContain(`the inference upstream ${new URL(up).origin.replace("user:pw@", "")}/v1/chat/completions answered`);
    expect(logged[0]).not.toMatch(/pw|sk-wrong-key/);
  });

  it("says it once, not once per episode, when the episode is in the upstream's path (--upstream-session-path)", async () => {
    const { logged, logger } = lines();
    const g = new Gateway({ host: "127.0.0.1", port: 0, secret: fixedSecret(SECRET), models: ["m"], zmqReceiveTimeoutMs: 1000, logger, upstream: null, sessionPath: true });
    const url = await g.listen();
    cleanups.push(() => g.close());
    const up = await refusingUpstream(401, JSON.stringify({ error: { message: "Incorrect API key provided", type: "invalid_request_error", param: null, code: null } }));
    for (let i = 0; i < 20; i++) expect((await post(url, envelope({ episode_uuid: `ep-${i}`, trainer_api_key: "sk-wrong-key", trainer_base_url: `${up}/v1` }), SECRET)).status).toBe(401);
    expect(logged).toHaveLength(1);
    expect(logged[0]).toContain(`the inference upstream ${new URL(up).origin.replace("user:pw@", "")}/v1/chat/completions answered 401`);
  });

  it("says each upstream's status at most once per EVERY_MS, with how many came between", () => {
    const { logged, logger } = lines();
    const clock = { t: 0 };
    const errors = new UpstreamErrors(logger, () => clock.t);
    errors.note("http://a/v1/chat/completions", 401, "no");
    errors.note("http://a/v1/chat/completions", 401, "no");
    errors.note("http://a/v1/chat/completions", 500, "boom");
    errors.note("http://b/v1/chat/completions", 401, "no");
    expect(logged).toHaveLength(3);
    clock.t += EVERY_MS - 1;
    errors.note("http://a/v1/chat/completions", 401, "no");
    expect(logged).toHaveLength(3);
    clock.t += 1;
    errors.note("http://a/v1/chat/completions", 401, "no");
    expect(logged).toHaveLength(4);
    expect(logged[3]).toMatch(/answered 401 .*\(and 2 more since 30 s ago\): no$/);
  });
});

const RATE_LIMITED = JSON.stringify({ error: { message: "Rate limit reached, try again in 7s", type: "rate_limit_error", param: null, code: "rate_limit_exceeded" } });

/** An upstream that answers every call `status` with the given headers and body. */
async function limitingUpstream(status: number, headers: Record<string, string>, body = RATE_LIMITED, type = "application/json"): Promise<string> {
  const server = createServer((req, res) => {
    req.resume();
    res.writeHead(status, { "content-type": type, ...headers }).end(body);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  cleanups.push(() => new Promise((r) => server.close(r)));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
}

/** POSTs the envelope signed, keeping the answer's headers (envelope.ts's post drops them). */
async function postWithHeaders(gateway: string, env: RelayEnvelope) {
  const body = JSON.stringify(env);
  const ts = Math.floor(Date.now() / 1000);
  const res = await fetch(gateway + GATEWAY_RELAY_PATH, {
    method: "POST",
    headers: { "content-type": "application/json", [TIMESTAMP_HEADER]: String(ts), [SIGNATURE_HEADER]: await signEnvelope(SECRET, ts, body) },
    body,
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

async function quietGateway(): Promise<string> {
  const g = new Gateway({ host: "127.0.0.1", port: 0, secret: fixedSecret(SECRET), models: ["m"], zmqReceiveTimeoutMs: 1000, logger: silentLogger, upstream: null, sessionPath: false });
  const url = await g.listen();
  cleanups.push(() => g.close());
  return url;
}

describe("an upstream's rate limit through the gateway", () => {
  // What the user sees: vLLM behind a rate-limiting proxy (LiteLLM, a slime router, an API
  // gateway) answers 429 with `Retry-After: 7` (or `retry-after-ms`). The client gets the 429 and
  // the error body, but not the header: the OpenAI SDKs (which honour retry-after / retry-after-ms)
  // fall back to their own short exponential backoff, retry too early, and burn their retries
  // (and the claim's calls) against the limit. The header is the upstream's instruction to the
  // client and should reach it, as the status and the body do.
  it("passes an upstream 429's Retry-After (and retry-after-ms) on to the client", async () => {
    const url = await quietGateway();
    const up = await limitingUpstream(429, { "retry-after": "7", "retry-after-ms": "7000" });
    const r = await postWithHeaders(url, envelope({ episode_uuid: "ep-429", trainer_base_url: up }));
    expect(r.status).toBe(429);
    expect(JSON.parse(r.text)).toMatchObject({ error: { code: "rate_limit_exceeded" } });
    expect([r.headers.get("retry-after"), r.headers.get("retry-after-ms")]).toEqual(["7", "7000"]);
  });

  it("passes an HTTP-date Retry-After with an error that is not an OpenAI one, as the upstream_error it becomes", async () => {
    const url = await quietGateway();
    const when = "Wed, 21 Oct 2037 07:28:00 GMT";
    const up = await limitingUpstream(503, { "retry-after": when }, "<html>Service Unavailable</html>", "text/html");
    const r = await postWithHeaders(url, envelope({ episode_uuid: "ep-503", trainer_base_url: up }));
    expect(r.status).toBe(503);
    expect(JSON.parse(r.text)).toMatchObject({ error: { code: "upstream_error", message: expect.stringContaining("Service Unavailable") } });
    expect(r.headers.get("retry-after")).toBe(when);
  });

  it("passes on neither header when it is not well-formed, nor any other header of the upstream's", async () => {
    const url = await quietGateway();
    const up = await limitingUpstream(429, { "retry-after": "soon", "retry-after-ms": "7s", "x-ratelimit-reset-requests": "7s" });
    const r = await postWithHeaders(url, envelope({ episode_uuid: "ep-bad", trainer_base_url: up }));
    expect(r.status).toBe(429);
    expect([r.headers.get("retry-after"), r.headers.get("retry-after-ms"), r.headers.get("x-ratelimit-reset-requests")]).toEqual([null, null, null]);
  });
});
