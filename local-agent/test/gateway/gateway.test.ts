/**
 * The gateway on its own, over real sockets: envelopes signed with the shared code, a Node
 * ZeroMQ REP model (AgentJet's runner side) and a Node OpenAI-compatible HTTP model.
 */
import { randomUUID } from "node:crypto";
import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { Reply } from "zeromq";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { Gateway, type GatewayOptions } from "../../src/gateway/server";
import { FetchedSecret, fixedSecret } from "../../src/gateway/secret";
import type { Logger } from "../../src/log";
import { signEnvelope } from "../../../src/auth/gateway-signature";
import { GATEWAY_RELAY_PATH, SIGNATURE_HEADER, TIMESTAMP_HEADER, type RelayEnvelope } from "../../../src/protocol/relay";
import type { CaptureMode } from "../../../src/protocol/ledger";
import { agentJetKey, envelope, post } from "./envelope";
import { ownGateway } from "./own-gateway";
import { startModelServer, type ModelServer } from "./model-server";
import { startZmqModel, type ZmqModel } from "./zmq-model";
import { waitUntil } from "../support/wait";
import { callContext, recordingGateway, recordOf } from "../ledger/recording-gateway";

const SECRET = "gateway-test-secret";
let http: ModelServer;
let zmq: ZmqModel;
let gw: Gateway;
let gwSession: Gateway;
let url: string;
let sessionUrl: string;
/** What the gateways told the operator. */
const logged: string[] = [];
const logger: Logger = { info: (m) => logged.push(m), warn: (m) => logged.push(m), error: (m) => logged.push(m) };

beforeAll(async () => {
  http = await startModelServer();
  zmq = await startZmqModel(`ipc:///tmp/rx-gw-${randomUUID()}.sock`, { slowMs: 700 });
  const common = { host: "127.0.0.1", port: 0, secret: fixedSecret(SECRET), models: ["policy-a", "policy-b"], zmqReceiveTimeoutMs: 300, logger };
  gw = new Gateway({ ...common, upstream: null, sessionPath: false });
  gwSession = new Gateway({ ...common, upstream: `${http.url}/v1`, sessionPath: true });
  url = await gw.listen();
  sessionUrl = await gwSession.listen();
});

afterAll(async () => {
  await gw?.close();
  await gwSession?.close();
  zmq?.close();
  await http?.close();
});

const ajet = (request: Record<string, unknown>, over: Parameters<typeof envelope>[0] = {}) =>
  envelope({ trainer_api_key: agentJetKey("ep-1", zmq.addr), request, ...over });
const plain = (request: Record<string, unknown> | null, over: Parameters<typeof envelope>[0] = {}) =>
  envelope({ trainer_api_key: "sk-trainer-plain", trainer_base_url: `${http.url}/v1`, request, ...over });
const chat = (model: string, extra: Record<string, unknown> = {}) => ({ model, messages: [{ role: "user", content: "hello there" }], ...extra });

describe("gateway: signatures", () => {
  it("refuses unsigned, forged, tampered and stale envelopes with 401 and an OpenAI error", async () => {
    const env = plain(chat("tiny"));
    for (const r of [
      await post(url, env, null),
      await post(url, env, "not-the-secret"),
      await post(url, env, SECRET, { tamper: true }),
      await post(url, env, SECRET, { ts: Math.floor(Date.now() / 1000) - 3600 }),
    ]) {
      expect(r.status).toBe(401);
      expect(JSON.parse(r.text)).toMatchObject({ error: { type: "authentication_error", code: "invalid_signature" } });
    }
    expect(http.seen).toHaveLength(0);
    expect((await post(url, env, SECRET)).status).toBe(200);
  });

  it("says a stale envelope's clocks differ, and by how much: every call fails while they do", async () => {
    const env = plain(chat("tiny"));
    const now = Math.floor(Date.now() / 1000);
    const behind = await post(url, env, SECRET, { ts: now - 3600 });
    expect(JSON.parse(behind.text).error.message).toMatch(/^stale signature timestamp: the exchange signed it 1\.0 h before this host's clock \(at most 300 s is taken\); if the clocks differ, set this host's right \(NTP/);
    const ahead = await post(url, env, SECRET, { ts: now + 400 });
    expect(JSON.parse(ahead.text).error.message).toMatch(/signed it (399|400) s after this host's clock/);
    for (const skew of [-280, 280]) expect((await post(url, env, SECRET, { ts: now + skew })).status).toBe(200);
  });
});

describe("gateway: AgentJet over ZeroMQ", () => {
  it("sends the interchange JSON to the key's episode address and answers the ChatCompletion", async () => {
    const r = await post(url, ajet(chat("tiny", { stream: true, temperature: 0.3 })), SECRET);
    expect(r.status).toBe(200);
    expect(JSON.parse(r.text)).toMatchObject({ object: "chat.completion", choices: [{ message: { content: "echo: hello there" } }] });
    const call = zmq.received.at(-1)!;
    expect(call).toMatchObject({ agent_name: "agent", target_tag: "policy", episode_uuid: "ep-1", preserve_sampling_params: false });
    expect(call["completion_request"]).toEqual({ model: "tiny", messages: [{ role: "user", content: "hello there" }], temperature: 0.3 });
    expect(call["timeline_uuid"]).toMatch(/^[0-9a-f]{32}$/);
  });

  it("resends on a fresh socket after a receive timeout, within the deadline", async () => {
    const before = zmq.received.length;
    const r = await post(url, ajet(chat("slow-first")), SECRET);
    expect(r.status).toBe(200);
    // The runner is busy for 700 ms and answers the dropped socket first: 2 or 3 sends of 300 ms each.
    expect(zmq.received.length - before).toBeGreaterThanOrEqual(2);
    // Each call gets its own timeline; the resend is the same call.
    expect(zmq.received.at(-1)!["completion_request"]).toEqual(zmq.received.at(-2)!["completion_request"]);
  });

  it("answers 504 at the deadline when no runner listens, 502 for garbage and for a key it cannot route", async () => {
    const t0 = Date.now();
    const gone = await post(url, envelope({ trainer_api_key: agentJetKey("ep-1", "ipc:///tmp/rx-nobody-here.sock"), deadline_seconds: 1.5 }), SECRET);
    expect(gone.status).toBe(504);
    expect(JSON.parse(gone.text)).toMatchObject({ error: { code: "upstream_timeout", type: "api_error" } });
    expect(Date.now() - t0).toBeLessThan(1500);
    const garbage = await post(url, ajet(chat("garbage")), SECRET);
    expect(garbage.status).toBe(502);
    expect(JSON.parse(garbage.text).error.code).toBe("upstream_garbage");
    const bad = await post(url, envelope({ trainer_api_key: "sk-ajet-!!!" }), SECRET);
    expect(bad.status).toBe(502);
    expect(JSON.parse(bad.text).error.code).toBe("bad_trainer_key");
    const other = await post(url, ajet(chat("tiny"), { episode_uuid: "ep-2" }), SECRET);
    expect(JSON.parse(other.text).error.message).toContain("names episode ep-1");
  });

  it("answers 502 at once for a runner address ZeroMQ refuses, without stalling the agent until the deadline", async () => {
    // An ipc path longer than a socket address holds passes the key's check, and connect() throws
    // at once: a retry loop would never wait, and hold the event loop (heartbeats, facade, other calls).
    const address = `ipc:///tmp/${"x".repeat(200)}.sock`;
    let last = Date.now();
    let longestStall = 0;
    const tick = setInterval(() => {
      longestStall = Math.max(longestStall, Date.now() - last);
      last = Date.now();
    }, 20);
    const t0 = Date.now();
    const r = await post(url, envelope({ trainer_api_key: agentJetKey("ep-1", address), deadline_seconds: 3 }), SECRET);
    const took = Date.now() - t0;
    clearInterval(tick);
    expect(r.status).toBe(502);
    expect(JSON.parse(r.text).error).toMatchObject({ code: "bad_trainer_key", message: expect.stringContaining("cannot connect to the runner of episode ep-1: ") });
    expect(r.text).not.toContain("xxxxxxxx");
    expect(logged).toContainEqual(expect.stringContaining(`cannot connect to the runner at ${address}: `));
    expect(took).toBeLessThan(1000);
    expect(longestStall).toBeLessThan(500);
  });

  it("refuses at once, as a key it cannot route, a runner address no other process can bind", async () => {
    // ZeroMQ's connect() takes port 0, a port past 65535 and inproc:// (the agent's own process
    // only): each call was sent again and again until the deadline, then a 504 "did not answer".
    for (const address of ["tcp://127.0.0.1:0", "tcp://127.0.0.1:99999", "inproc://runner", "tcp://127.0.0.1"]) {
      const r = await post(url, envelope({ trainer_api_key: agentJetKey("ep-1", address), deadline_seconds: 3 }), SECRET);
      expect([r.status, JSON.parse(r.text).error.code, r.text.includes(address)], address).toEqual([502, "bad_trainer_key", false]);
    }
  });

  it("names the episode, not the runner's ZeroMQ address, when the runner is silent; the operator's log has the address", async () => {
    // Clients never see the trainer's ZeroMQ addresses (docs/security.md), and the Worker
    // passes a gateway's OpenAI error on to the client as it is.
    const address = "tcp://127.0.0.1:1";
    const r = await post(url, envelope({ trainer_api_key: agentJetKey("ep-1", address), deadline_seconds: 1 }), SECRET);
    expect(r.status).toBe(504);
    expect(JSON.parse(r.text).error).toMatchObject({ code: "upstream_timeout", message: expect.stringMatching(/^the runner of episode ep-1 did not answer within 1 s/) });
    expect(r.text).not.toContain("127.0.0.1");
    expect(logged).toContainEqual(expect.stringContaining(`episode ep-1: the runner at ${address} did not answer within 1 s`));
  });

  it("lists the configured models, and refuses /v1/completions", async () => {
    const m = await post(url, ajet(chat("tiny"), { endpoint: "/v1/models", request: null }), SECRET);
    expect(JSON.parse(m.text).data.map((d: { id: string }) => d.id)).toEqual(["policy-a", "policy-b"]);
    const c = await post(url, ajet({ model: "tiny", prompt: "x" }, { endpoint: "/v1/completions" }), SECRET);
    expect(c.status).toBe(404);
  });
});

describe("gateway: plain HTTP upstream", () => {
  it("forwards with the trainer's key and the episode id, whole and streamed", async () => {
    const r = await post(url, plain(chat("tiny")), SECRET);
    expect(r.status).toBe(200);
    expect(JSON.parse(r.text).choices[0].message.content).toBe("echo: hello there");
    expect(http.seen.at(-1)).toMatchObject({ path: "/v1/chat/completions", authorization: "Bearer sk-trainer-plain", episode: "ep-1" });
    const s = await post(url, plain(chat("tiny", { stream: true })), SECRET);
    expect(s.type).toContain("text/event-stream");
    const deltas = s.text.split("\n\n").filter((e) => e.startsWith("data: {")).map((e) => JSON.parse(e.slice(6)).choices[0].delta.content ?? "");
    expect(deltas.join("")).toBe("echo: hello there");
    expect(s.text.trim().endsWith("data: [DONE]")).toBe(true);
  });

  it("passes each streamed token on as it comes, not held for the ones after it", async () => {
    // The upstream sends token k+1 only once the client has token k through the gateway, so a
    // gateway that held writes back (it coalesces those of one event-loop turn) would stall here.
    const seen: (() => void)[] = [];
    const reached = [0, 1, 2].map((k) => new Promise<void>((resolve) => (seen[k] = resolve)));
    const upstream = createServer((req, res) => {
      req.resume();
      void (async () => {
        res.writeHead(200, { "content-type": "text/event-stream" });
        for (let k = 0; k < 3; k++) {
          res.write(`data: ${JSON.stringify({ object: "chat.completion.chunk", choices: [{ index: 0, delta: { content: `t${k}` } }] })}\n\n`);
          await reached[k];
        }
        res.end("data: [DONE]\n\n");
      })();
    });
    await new Promise<void>((r) => upstream.listen(0, "127.0.0.1", r));
    try {
      const env = plain(chat("tiny", { stream: true }), { trainer_base_url: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/v1` });
      const body = JSON.stringify(env);
      const ts = Math.floor(Date.now() / 1000);
      const res = await fetch(url + GATEWAY_RELAY_PATH, {
        method: "POST",
        headers: { "content-type": "application/json", [TIMESTAMP_HEADER]: String(ts), [SIGNATURE_HEADER]: await signEnvelope(SECRET, ts, body) },
        body,
      });
      let text = "";
      const dec = new TextDecoder();
      for await (const chunk of res.body!) {
        text += dec.decode(chunk, { stream: true });
        for (let k = 0; k < 3; k++) if (text.includes(`"t${k}"`)) seen[k]!();
      }
      expect(text.split("\n\n").filter((e) => e.startsWith("data: {")).map((e) => JSON.parse(e.slice(6)).choices[0].delta.content)).toEqual(["t0", "t1", "t2"]);
      expect(text.trim().endsWith("data: [DONE]"), JSON.stringify(text)).toBe(true);
    } finally {
      upstream.closeAllConnections();
      await new Promise((r) => upstream.close(r));
    }
  });

  it("uses the configured upstream and the session path form; forwards /v1/models", async () => {
    expect((await post(sessionUrl, plain(chat("tiny"), { trainer_base_url: "http://127.0.0.1:1/v1" }), SECRET)).status).toBe(200);
    expect(http.seen.at(-1)!.path).toBe("/v1/ep-1/chat/completions");
    const m = await post(sessionUrl, plain(null, { endpoint: "/v1/models" }), SECRET);
    expect(JSON.parse(m.text).data.map((d: { id: string }) => d.id)).toContain("tiny");
    expect(http.seen.at(-1)!.path).toBe("/v1/models");
  });

  it("passes the upstream's own 404 through, and answers garbage 502, a hang 504, a crash mid-stream as an error event", async () => {
    const unknown = await post(url, plain(chat("gpt-nope")), SECRET);
    expect(unknown.status).toBe(404);
    expect(JSON.parse(unknown.text).error.message).toContain("gpt-nope");
    const garbage = await post(url, plain(chat("garbage")), SECRET);
    expect(garbage.status).toBe(502);
    expect(JSON.parse(garbage.text).error.code).toBe("upstream_garbage");
    const t0 = Date.now();
    const hang = await post(url, plain(chat("hang"), { deadline_seconds: 1.5 }), SECRET);
    expect(hang.status).toBe(504);
    expect(JSON.parse(hang.text).error).toMatchObject({ code: "upstream_timeout", message: expect.stringContaining("1.5 s") });
    expect(Date.now() - t0).toBeLessThan(1500);
    const crash = await post(url, plain(chat("crash", { stream: true })), SECRET);
    expect(crash.text).toContain('"content":"echo:"');
    expect(crash.text).toContain('"code":"upstream_stream_broken"');
    const nowhere = await post(url, plain(chat("tiny"), { trainer_base_url: "http://127.0.0.1:1/v1" }), SECRET);
    expect(nowhere.status).toBe(502);
    expect(JSON.parse(nowhere.text).error.code).toBe("upstream_unreachable");
  });

  it("names the episode, not the upstream's base URL, when the upstream cannot be reached; the operator's log has the URL", async () => {
    // Clients never see the trainer's base URLs (docs/security.md), and the Worker passes a
    // gateway's OpenAI error on to the client as it is.
    const r = await post(url, plain(chat("tiny"), { trainer_base_url: "http://127.0.0.1:1/trainer-path/v1" }), SECRET);
    expect(r.status).toBe(502);
    expect(JSON.parse(r.text).error).toMatchObject({ code: "upstream_unreachable", message: "the inference upstream could not be reached: ECONNREFUSED (episode ep-1)" });
    expect(r.text).not.toContain("127.0.0.1");
    expect(logged).toContainEqual(expect.stringContaining("episode ep-1: the inference upstream http://127.0.0.1:1/trainer-path/v1/chat/completions could not be reached: connect ECONNREFUSED 127.0.0.1:1"));
  });

  it("hides the upstream's address where the upstream's own error names it", async () => {
    const upstream = createServer((req, res) => {
      req.resume();
      if (req.url?.startsWith("/json/")) res.writeHead(503, { "content-type": "application/json" }).end(JSON.stringify({ error: { message: `http://${req.headers.host}/v1 is overloaded`, type: "server_error" } }));
      else res.writeHead(500).end(`proxy ${req.headers.host} failed`);
    });
    await new Promise<void>((r) => upstream.listen(0, "127.0.0.1", r));
    try {
      const host = `127.0.0.1:${(upstream.address() as AddressInfo).port}`;
      const own = await post(url, plain(chat("tiny"), { trainer_base_url: `http://${host}/json/v1` }), SECRET);
      expect(own.status).toBe(503);
      expect(JSON.parse(own.text).error).toEqual({ message: "[hidden]/v1 is overloaded", type: "server_error" });
      const text = await post(url, plain(chat("tiny"), { trainer_base_url: `http://${host}/v1` }), SECRET);
      expect(JSON.parse(text.text).error).toMatchObject({ code: "upstream_error", message: "the inference upstream answered 500: proxy [hidden] failed" });
    } finally {
      upstream.closeAllConnections();
      await new Promise((r) => upstream.close(r));
    }
  });
});

describe("gateway: an episode's base URL it cannot use", () => {
  it("answers 502 no_upstream for a base URL that is not http(s) or not a URL, and calls nothing", async () => {
    const before = http.seen.length;
    // The exchange keeps any string as an episode's openai_base_url.
    for (const base of ["ftp://host/v1", "http://[not-a-host/v1", "zmq-only"]) {
      const r = await post(url, plain(chat("tiny"), { trainer_base_url: base }), SECRET);
      expect(r.status).toBe(502);
      expect(JSON.parse(r.text).error).toMatchObject({ code: "no_upstream", type: "api_error" });
    }
    expect(http.seen.length).toBe(before);
  });
});

/** Servers and gateways a test made for itself, closed after it. */
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const gatewayOfItsOwn = (over: Partial<GatewayOptions> = {}): Promise<string> => ownGateway(SECRET, cleanups, { logger, ...over });

/** An HTTP upstream answering `status` with what `body` makes of the key it was sent. */
async function upstreamAnswering(status: number, type: string, body: (key: string) => string): Promise<string> {
  const server = createServer((req, res) => {
    req.resume();
    res.writeHead(status, { "content-type": type }).end(body((req.headers.authorization ?? "").replace(/^Bearer /, "")));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  cleanups.push(() => new Promise((r) => server.close(() => r(undefined))));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe("gateway: the trainer's key in an upstream's or runner's answer", () => {
  const KEY = "sk-trainer-9f8e7d6c5b4a-private";

  it.each([
    ["an OpenAI error object", "application/json", (k: string) => JSON.stringify({ error: { message: `Incorrect API key provided: ${k}.`, type: "invalid_request_error", param: null, code: "invalid_api_key" } })],
    ["a plain-text error", "text/plain", (k: string) => `Unauthorized: key ${k} (Authorization: Bearer ${k}) is not allowed`],
  ])("is hidden from the client when an HTTP upstream's 401 repeats it (%s)", async (_what, type, body) => {
    const upstream = await upstreamAnswering(401, type, body);
    const r = await post(await gatewayOfItsOwn(), envelope({ trainer_api_key: KEY, trainer_base_url: `${upstream}/v1` }), SECRET);
    expect(r.status).toBe(401);
    expect(r.text).not.toContain(KEY);
    expect(JSON.parse(r.text).error.message).toContain("[hidden]");
  });

  it("is hidden from the client when an AgentJet runner's answer repeats it", async () => {
    const addr = `ipc:///tmp/rx-gw-leak-${randomUUID()}.sock`;
    const key = agentJetKey("ep-1", addr);
    const runner = new Reply({ linger: 0 });
    await runner.bind(addr);
    cleanups.push(() => runner.close());
    void (async () => {
      for await (const _msg of runner) await runner.send(`refused: the key ${key} has no swarm`);
    })().catch(() => undefined);
    const r = await post(await gatewayOfItsOwn(), envelope({ trainer_api_key: key }), SECRET);
    expect(r.status).toBe(502);
    expect(JSON.parse(r.text).error).toMatchObject({ code: "upstream_garbage", message: expect.stringContaining("refused: the key [hidden] has no swarm") });
    expect(r.text).not.toContain(key);
  });
});

describe("gateway: an HTTP upstream's 200 that is an error", () => {
  it.each([
    ["vLLM's flat error", { object: "error", message: "model x does not exist (key KEY)", type: "NotFoundError", param: null, code: 404 }, 404, { message: "model x does not exist (key [hidden])", type: "NotFoundError", code: "404" }],
    ["an OpenAI error object", { error: { message: "overloaded (key KEY)", type: "server_error", code: "busy" } }, 502, { message: "overloaded (key [hidden])", type: "server_error", code: "busy" }],
  ])("goes to the client as an error, not a 200 (%s)", async (_what, answer, status, error) => {
    const upstream = await upstreamAnswering(200, "application/json", (k) => JSON.stringify(answer).replaceAll("KEY", k));
    const r = await post(await gatewayOfItsOwn(), envelope({ trainer_api_key: "sk-trainer-200", trainer_base_url: `${upstream}/v1` }), SECRET);
    expect(r.status).toBe(status);
    expect(JSON.parse(r.text).error).toMatchObject(error);
  });
});

/** An HTTP upstream answering 200 text/event-stream with `pieces(key, its own host:port)`, each its own chunk, 30 ms apart. */
async function sseUpstream(pieces: (key: string, self: string) => Array<string | Buffer>): Promise<string> {
  let self = "";
  const server = createServer((req, res) => {
    req.resume();
    const key = (req.headers.authorization ?? "").replace(/^Bearer /, "");
    void (async () => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      for (const p of pieces(key, self)) {
        res.write(p);
        await new Promise((r) => setTimeout(r, 30));
      }
      res.end();
    })();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  self = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  cleanups.push(() => {
    server.closeAllConnections();
    return new Promise((r) => server.close(() => r(undefined)));
  });
  return `http://${self}`;
}

describe("gateway: the trainer's key and the upstream's address in an HTTP upstream's 200 event stream", () => {
  const KEY = "sk-trainer-5e5e5e-stream-private-key";
  const streamed = (base: string, over: Parameters<typeof envelope>[0] = {}) =>
    envelope({ trainer_api_key: KEY, trainer_base_url: `${base}/v1`, request: { model: "m", stream: true, messages: [{ role: "user", content: "hi" }] }, ...over });
  const content = `data: {"choices":[{"delta":{"content":"he"}}]}\n\n`;

  it("hides the key in an error event, and passes the events before it as they came", async () => {
    const base = await sseUpstream((key) => [content, `data: {"error": {"message": "invalid key ${key}", "code": 401}}\n\n`]);
    const r = await post(await gatewayOfItsOwn(), streamed(base), SECRET);
    expect(r.status).toBe(200);
    expect(r.type).toContain("text/event-stream");
    expect(r.text).not.toContain(KEY);
    expect(r.text).toBe(`${content}data: {"error":{"message":"invalid key [hidden]","code":401}}\n\n`);
  });

  it("hides the key in an error event when the key arrives split across two chunks", async () => {
    const base = await sseUpstream((key) => [`data: {"error": {"message": "invalid key ${key.slice(0, 12)}`, `${key.slice(12)}"}}\n\n`]);
    const r = await post(await gatewayOfItsOwn(), streamed(base), SECRET);
    expect(r.status).toBe(200);
    expect(r.text).not.toContain(KEY);
    expect(JSON.parse(r.text.replace(/^data: /, "")).error.message).toBe("invalid key [hidden]");
  });

  it("hides the upstream's own address in an error event naming it", async () => {
    const base = await sseUpstream((_key, self) => [content, `data: {"error": {"message": "backend http://${self}/v1 overloaded"}}\n\n`]);
    const r = await post(await gatewayOfItsOwn(), streamed(base), SECRET);
    expect(r.status).toBe(200);
    expect(r.text).not.toContain(new URL(base).host);
    expect(r.text).toBe(`${content}data: {"error": {"message": "backend [hidden] overloaded"}}\n\n`);
  });

  it("hides the key in an `event: error` with CRLF line ends, split inside the key and inside a UTF-8 character", async () => {
    const base = await sseUpstream((key) => {
      const bytes = Buffer.from(`event: error\r\ndata: {"message": "キー ${key} は無効"}\r\n\r\n`);
      const inKey = bytes.indexOf(key.slice(0, 8)) + 8;
      const inChar = bytes.indexOf(Buffer.from("は")) + 1;
      return [Buffer.from(content), bytes.subarray(0, inKey), bytes.subarray(inKey, inChar), bytes.subarray(inChar)];
    });
    const r = await post(await gatewayOfItsOwn(), streamed(base), SECRET);
    expect(r.text).not.toContain(KEY);
    expect(r.text).toBe(`${content}event: error\ndata: {"message":"キー [hidden] は無効"}\r\n\r\n`);
  });

  it("passes a completion's content as the model wrote it, the key split across chunks included, as it does a 200 JSON completion", async () => {
    // The rule of a whole answer: only errors are rewritten; a completion (which may name an
    // address such as 127.0.0.1 for its own reasons) goes to the client byte for byte.
    const event = (text: string) => `data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: text } }] })}\n\n`;
    const base = await sseUpstream((key) => {
      const bytes = Buffer.from(`${event(`the key is ${key}`)}${event("日本語")}data: [DONE]\n\n`);
      const inKey = bytes.indexOf(key.slice(0, 8)) + 8;
      const inChar = bytes.indexOf(Buffer.from("本")) + 2;
      return [bytes.subarray(0, inKey), bytes.subarray(inKey, inChar), bytes.subarray(inChar)];
    });
    const r = await post(await gatewayOfItsOwn(), streamed(base), SECRET);
    expect(r.text).toBe(`${event(`the key is ${KEY}`)}${event("日本語")}data: [DONE]\n\n`);
    const whole = await upstreamAnswering(200, "application/json", (k) => JSON.stringify({ object: "chat.completion", choices: [{ index: 0, message: { role: "assistant", content: `the key is ${k}` } }] }));
    const w = await post(await gatewayOfItsOwn(), streamed(whole, { request: { model: "m", messages: [] } }), SECRET);
    expect(JSON.parse(w.text).choices[0].message.content).toBe(`the key is ${KEY}`);
  });

  it("records in the ledger the error event as the client got it, with the key hidden", async () => {
    const base = await sseUpstream((key) => [content, `data: {"error": {"message": "invalid key ${key.slice(0, 10)}`, `${key.slice(10)}", "code": "invalid_api_key"}}\n\n`]);
    const recording = await recordingGateway(SECRET, "vllm");
    cleanups.push(() => recording.gateway.close());
    const env = streamed(base, { call: callContext("messages") });
    const r = await post(recording.url, env, SECRET);
    expect(r.text).not.toContain(KEY);
    const rec = await recordOf(recording, env);
    expect(rec.error).toBe("invalid_api_key: invalid key [hidden]");
    expect(JSON.stringify(rec)).not.toContain(KEY);
  });
});

describe("gateway: an HTTP upstream's 200 event stream that stops short", () => {
  const streamed = (base: string) => envelope({ trainer_base_url: `${base}/v1`, request: { model: "m", stream: true, n: 2, messages: [{ role: "user", content: "hi" }] } });
  const chunk = (index: number, content: string, finish: string | null) => `data: ${JSON.stringify({ choices: [{ index, delta: { content }, finish_reason: finish }] })}\n\n`;
  const lastEvent = (text: string): unknown => JSON.parse(text.trim().split("\n\n").at(-1)!.replace(/^data: /, ""));

  it("ends a stream that stopped without [DONE] or choice 0's finish_reason with an upstream_stream_broken event, and says so in the log", async () => {
    // Choice 1's finish_reason does not finish choice 0's answer.
    const base = await sseUpstream(() => [chunk(0, "The answer", null), chunk(1, "Other", "stop")]);
    const r = await post(await gatewayOfItsOwn(), streamed(base), SECRET);
    expect(r.status).toBe(200);
    expect(r.text.startsWith(chunk(0, "The answer", null) + chunk(1, "Other", "stop"))).toBe(true);
    expect(lastEvent(r.text)).toMatchObject({ error: { code: "upstream_stream_broken", type: "api_error", message: expect.stringMatching(/^the inference upstream broke off mid-stream: .*\(episode ep-1\)$/) } });
    expect(logged.some((l) => l.includes("ep-1") && l.includes(new URL(base).host) && l.includes("broke off mid-stream"))).toBe(true);
  });

  it("keeps the error event apart from a last event that came without its blank line", async () => {
    const base = await sseUpstream(() => [chunk(0, "The", null), `data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: " answer" }, finish_reason: null }] })}\n`]);
    const r = await post(await gatewayOfItsOwn(), streamed(base), SECRET);
    const events = r.text.split(/\n\n+/).filter((e) => e.startsWith("data: "));
    expect(events.map((e) => JSON.parse(e.slice(6)) as unknown)).toMatchObject([{ choices: [{ delta: { content: "The" } }] }, { choices: [{ delta: { content: " answer" } }] }, { error: { code: "upstream_stream_broken" } }]);
  });

  it("passes a stream that ended after choice 0's finish_reason without [DONE], or with [DONE] alone, as it came", async () => {
    const finished = [chunk(0, "ok", null), chunk(1, "fine", null), chunk(0, "", "stop"), chunk(1, "", "length")];
    const noDone = await post(await gatewayOfItsOwn(), streamed(await sseUpstream(() => finished)), SECRET);
    expect(noDone.text).toBe(finished.join(""));
    const doneOnly = [chunk(0, "ok", null), "data: [DONE]\n\n"];
    const done = await post(await gatewayOfItsOwn(), streamed(await sseUpstream(() => doneOnly)), SECRET);
    expect(done.text).toBe(doneOnly.join(""));
  });
});

describe("gateway: an HTTP upstream's event stream whose media type is not in lower case", () => {
  it("passes it on as a stream, as the media type is case-insensitive (RFC 9110), not as a whole answer that is garbage", async () => {
    const chunk = (content: string, finish: string | null) => `data: ${JSON.stringify({ object: "chat.completion.chunk", choices: [{ index: 0, delta: { content }, finish_reason: finish }] })}\n\n`;
    const stream = `${chunk("hello", null)}${chunk("", "stop")}data: [DONE]\n\n`;
    const base = await upstreamAnswering(200, "Text/Event-Stream; charset=UTF-8", () => stream);
    const r = await post(await gatewayOfItsOwn(), envelope({ trainer_base_url: `${base}/v1`, request: { model: "m", stream: true, messages: [{ role: "user", content: "hi" }] } }), SECRET);
    expect(r.status, r.text).toBe(200);
    expect(r.text).toBe(stream);
  });
});

describe("gateway: a client that hangs up while the gateway fetches its secret", () => {
  it("is not called upstream for once the secret arrives", async () => {
    let upstreamCalls = 0;
    const model = createServer((req: IncomingMessage, res: ServerResponse) => {
      upstreamCalls++;
      req.resume();
      res.writeHead(200, { "content-type": "text/event-stream" });
      const tick = setInterval(() => res.write(`data: {"choices":[{"delta":{"content":"x"}}]}\n\n`), 100);
      res.on("close", () => clearInterval(tick));
    });
    await new Promise<void>((r) => model.listen(0, "127.0.0.1", r));
    cleanups.push(() => {
      model.closeAllConnections();
      return new Promise((r) => model.close(() => r(undefined)));
    });
    let release!: (s: string) => void;
    let asked = false;
    const secret = new FetchedSecret(() => {
      asked = true;
      return new Promise<string>((r) => (release = r));
    }, logger);
    const gw = await gatewayOfItsOwn({ secret });

    const env = envelope({ trainer_base_url: `http://127.0.0.1:${(model.address() as AddressInfo).port}/v1`, deadline_seconds: 30, request: { model: "m", stream: true, messages: [{ role: "user", content: "hi" }] } });
    const body = JSON.stringify(env);
    const ts = Math.floor(Date.now() / 1000);
    const req = httpRequest(gw + GATEWAY_RELAY_PATH, { method: "POST", headers: { "content-type": "application/json", [TIMESTAMP_HEADER]: String(ts), [SIGNATURE_HEADER]: await signEnvelope(SECRET, ts, body) } });
    req.on("error", () => undefined);
    req.end(body);
    await waitUntil(() => asked, "the gateway to ask for its secret");
    const closed = new Promise((r) => req.once("close", r));
    req.destroy();
    await closed;
    // Long enough for the gateway to see the hang-up (its socket's FIN) before the secret comes.
    await new Promise((r) => setTimeout(r, 50));
    release(SECRET);
    // The old gateway reached the upstream within a few milliseconds of the secret.
    await new Promise((r) => setTimeout(r, 300));
    expect(upstreamCalls).toBe(0);
  });
});

describe("gateway: an envelope from a Worker newer than this agent", () => {
  /** The envelope with a capture mode this agent does not know, as a newer Worker signs it in. */
  const capturing = (env: RelayEnvelope, capture: string): RelayEnvelope => ({ ...env, call: { ...callContext("off"), capture: capture as CaptureMode } });

  it("relays a call whose capture mode it does not know as with capture off: nothing recorded, or a stub for a claim that had calls captured; a warning once per mode", async () => {
    const said: string[] = [];
    const rec = await recordingGateway(SECRET, "vllm", { info: () => {}, warn: (m) => said.push(m), error: () => {} });
    try {
      const fresh = capturing(plain(chat("tiny"), { episode_uuid: `ep-${randomUUID()}` }), "tokens_and_images");
      const r = await post(rec.url, fresh, SECRET);
      expect({ status: r.status, content: JSON.parse(r.text).choices[0].message.content }).toEqual({ status: 200, content: "echo: hello there" });

      const episode = `ep-${randomUUID()}`;
      const captured = plain(chat("tiny"), { episode_uuid: episode, call: callContext("messages") });
      await post(rec.url, captured, SECRET);
      await recordOf(rec, captured);
      const turn = capturing(plain(chat("tiny"), { episode_uuid: episode }), "tokens_and_images");
      expect((await post(rec.url, turn, SECRET)).status).toBe(200);
      expect(await recordOf(rec, turn)).toMatchObject({ capture: "off", status: 200, body: { uncaptured: true, messages: [] } });
      expect((await post(rec.url, capturing(plain(chat("tiny")), "audio"), SECRET)).status).toBe(200);
      // Recording happens on the turn after the answer: give the first call's some.
      await new Promise((r) => setTimeout(r, 50));
      expect({
        recordedFresh: rec.records.some((x) => x.call_id === fresh.call?.call_id),
        warnings: said.map((m) => m.match(/capture mode "([a-z_]+)"/)?.[1]),
      }).toEqual({ recordedFresh: false, warnings: ["tokens_and_images", "audio"] });
    } finally {
      await rec.gateway.close();
    }
  });

  it("refuses an endpoint it does not serve naming it and saying the agent may need upgrading, not as an envelope that does not parse", async () => {
    const before = http.seen.length;
    const r = await post(url, plain(chat("tiny"), { endpoint: "/v1/responses" as RelayEnvelope["endpoint"] }), SECRET);
    const error = (JSON.parse(r.text) as { error: { message: string; code: string } }).error;
    expect({ status: r.status, code: error.code, names: error.message.includes("/v1/responses"), upgrade: /agent .*may need upgrading/.test(error.message), upstreamCalls: http.seen.length - before }).toEqual({
      status: 404,
      code: "unsupported_endpoint",
      names: true,
      upgrade: true,
      upstreamCalls: 0,
    });
  });
});
