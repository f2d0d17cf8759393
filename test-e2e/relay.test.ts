/**
 * The LLM relay through the real Worker (Miniflare, as `npm start` serves it). The inference
 * gateway here is a small fixture server that checks the Worker's signatures with the shared
 * code and answers as upstreams do: whole completions, streams, slow streams, errors, garbage,
 * hangs and a stream that breaks off. (The agent's real gateway has its own end-to-end tests.)
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startLocalExchange, type LocalExchange } from "../scripts/local/exchange";
import { AdminClient, EngineClient } from "../src/client";
import { checkEnvelope } from "../src/auth/gateway-signature";
import { RelayEnvelope, SIGNATURE_HEADER, TIMESTAMP_HEADER } from "../src/protocol/relay";

const ADMIN = "relay-admin-token";
let exchange: LocalExchange;
let gateway: Server;
let gatewayUrl: string;
const seen: RelayEnvelope[] = [];
/** Per engine, whether its relayed calls came through Miniflare's outbound Worker (it adds CF-Worker). */
const viaOutboundWorker = new Map<string, boolean>();
const rejected: string[] = [];
let secrets = new Map<string, string>();

const completion = (content: string, model: string) => ({
  id: "chatcmpl-1",
  object: "chat.completion",
  created: 1,
  model,
  choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: "stop" }],
  usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
});

async function answer(env: RelayEnvelope, res: ServerResponse): Promise<void> {
  const model = String(env.request?.["model"] ?? "");
  const stream = env.request?.["stream"] === true;
  if (env.endpoint === "/v1/models") {
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ object: "list", data: [{ id: "tiny", object: "model" }] }));
    return;
  }
  switch (model) {
    case "tiny":
      if (stream) {
        res.writeHead(200, { "content-type": "text/event-stream" });
        for (const piece of ["Hel", "lo"]) res.write(`data: ${JSON.stringify({ object: "chat.completion.chunk", choices: [{ index: 0, delta: { content: piece } }] })}\n\n`);
        res.end("data: [DONE]\n\n");
      } else {
        res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(completion("Hello", model)));
      }
      return;
    case "drip": // tokens as a model sends them: one chunk at a time, a few ms apart
      res.writeHead(200, { "content-type": "text/event-stream" });
      for (let i = 0; i < 40; i++) {
        res.write(`data: ${JSON.stringify({ object: "chat.completion.chunk", choices: [{ index: 0, delta: { content: ` t${i}` } }] })}\n\n`);
        await new Promise((r) => setTimeout(r, 2));
      }
      res.end("data: [DONE]\n\n");
      return;
    case "zmq-like": // a runner that answers one whole ChatCompletion, late
      await new Promise((r) => setTimeout(r, 600));
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(completion("whole", model)));
      return;
    case "hang":
      return; // never answers
    case "garbage":
      res.writeHead(200, { "content-type": "text/html" }).end("<html>oops</html>");
      return;
    case "break":
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(`data: ${JSON.stringify({ object: "chat.completion.chunk", choices: [{ index: 0, delta: { content: "par" } }] })}\n\n`);
      setTimeout(() => res.socket?.destroy(), 50);
      return;
    default:
      res.writeHead(404, { "content-type": "application/json" }).end(
        JSON.stringify({ error: { message: `The model '${model}' does not exist`, type: "invalid_request_error", param: "model", code: "model_not_found" } }),
      );
  }
}

async function onGateway(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const body = Buffer.concat(chunks).toString("utf8");
  const env = RelayEnvelope.parse(JSON.parse(body));
  const secret = secrets.get(env.engine) ?? "";
  const why = await checkEnvelope(secret, req.headers[TIMESTAMP_HEADER] as string | undefined, req.headers[SIGNATURE_HEADER] as string | undefined, body, Date.now() / 1000);
  if (why !== null) {
    rejected.push(why);
    res.writeHead(401, { "content-type": "application/json" }).end(JSON.stringify({ error: { message: why, type: "authentication_error", param: null, code: null } }));
    return;
  }
  seen.push(env);
  viaOutboundWorker.set(env.engine, req.headers["cf-worker"] !== undefined);
  await answer(env, res);
}

beforeAll(async () => {
  gateway = createServer((req, res) => void onGateway(req, res));
  await new Promise<void>((r) => gateway.listen(0, "127.0.0.1", r));
  gatewayUrl = `http://127.0.0.1:${(gateway.address() as AddressInfo).port}`;
  exchange = await startLocalExchange({
    port: 0,
    persistDir: null,
    adminToken: ADMIN,
    claimKeySecret: "relay-claim-secret",
    vars: { RELAY_DEADLINE_SECONDS: "2", RELAY_KEEPALIVE_MS: "100" },
  });
});

afterAll(async () => {
  await exchange?.stop();
  gateway?.closeAllConnections();
  await new Promise((r) => gateway?.close(r));
});

let n = 0;
async function engineWithClaim(opts: { gateway?: boolean; timeout?: number; on?: LocalExchange } = {}) {
  const origin = (opts.on ?? exchange).url;
  const admin = new AdminClient({ origin, adminToken: ADMIN });
  const created = await admin.createEngine(`relay-${Date.now().toString(36)}-${n++}`);
  const base = `${origin}/e/${created.engine}`;
  const trainer = new EngineClient({ baseUrl: base, token: created.tokens["trainer"] });
  const client = new EngineClient({ baseUrl: base, token: created.tokens["client"] });
  secrets.set(created.engine, (await trainer.gatewaySecret()).secret);
  await trainer.heartbeat({
    agent_id: "a",
    host: "gpu",
    pid: 1,
    gateway_url: opts.gateway === false ? null : gatewayUrl,
    trainer: { state: "running" },
  });
  await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 0 });
  await trainer.registerEpisode({ episode_uuid: "ep-1", openai_base_url: "http://10.0.0.9:8000/v1", openai_api_key: "sk-ajet-trainer-secret", zmq_listen_result_addr: "" });
  await trainer.registerEpisode({ episode_uuid: "ep-2", openai_api_key: "sk-ajet-two" });
  const claim = await client.claimEpisode({ client_uuid: "c1", discard_episode_timeout: opts.timeout ?? 60 });
  return { engine: created.engine, tokens: created.tokens, base, trainer, client, claim };
}

async function chat(url: string, key: string, body: Record<string, unknown>) {
  const res = await fetch(`${url}/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ messages: [{ role: "user", content: "hi" }], ...body }),
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

describe("relay", () => {
  it("relays a claim's calls at the origin's /v1, the engine's /v1 and the URL-token form, counting each and refreshing the lease", async () => {
    const e = await engineWithClaim();
    expect(e.claim.openai_base_url).toBe(`${exchange.url}/v1`);
    const swarmBase = `${exchange.url}/e/${e.engine}/t/${e.tokens["client"]}`;
    const forms = [e.claim.openai_base_url, `${e.base}/v1`, e.claim.openai_base_url.replace(/^https?:\/\/[^/]+/, swarmBase)];
    for (const url of forms) {
      const r = await chat(url, e.claim.openai_api_key, { model: "tiny" });
      expect(r.status).toBe(200);
      expect(JSON.parse(r.text)).toMatchObject({ object: "chat.completion", choices: [{ message: { content: "Hello" } }] });
    }
    const env = seen.filter((s) => s.engine === e.engine);
    expect(env).toHaveLength(3);
    expect(env[0]).toMatchObject({ endpoint: "/v1/chat/completions", episode_uuid: "ep-1", fence: 1, trainer_api_key: "sk-ajet-trainer-secret", trainer_base_url: "http://10.0.0.9:8000/v1" });
    const running = await e.client.runningEpisodes();
    expect(running.episodes[0]).toMatchObject({ episode_uuid: "ep-1", llm_call_count: 3 });
    expect(running.episodes[0]!.idle_seconds).toBeLessThan(5);
    // The request reaches the gateway as the client sent it: every field, however nested or unusual.
    const rich = { model: "tiny", temperature: 0.7, top_k: 20, logprobs: true, extra: { nested: [1, { "é ✓": null }] }, messages: [{ role: "user", content: "héllo \u2028 \"quoted\"" }] };
    expect((await chat(e.claim.openai_base_url, e.claim.openai_api_key, rich)).status).toBe(200);
    expect(seen.at(-1)?.request).toEqual(rich);
    const models = await fetch(`${e.base}/v1/models`, { headers: { authorization: `Bearer ${e.claim.openai_api_key}` } });
    expect(await models.json()).toEqual({ object: "list", data: [{ id: "tiny", object: "model" }] });
    // The local server sends them out through workerd's network service, not Miniflare's outbound Worker.
    expect(viaOutboundWorker.get(e.engine)).toBe(false);
  });

  it("relays through the global fetch too, as a deployed Worker (no RELAY_NETWORK binding) does", async () => {
    const deployedLike = await startLocalExchange({ port: 0, persistDir: null, adminToken: ADMIN, claimKeySecret: "relay-claim-secret", relayNetwork: false });
    try {
      const e = await engineWithClaim({ on: deployedLike });
      const whole = await chat(e.claim.openai_base_url, e.claim.openai_api_key, { model: "tiny" });
      expect(JSON.parse(whole.text)).toMatchObject({ object: "chat.completion", choices: [{ message: { content: "Hello" } }] });
      const stream = await chat(e.claim.openai_base_url, e.claim.openai_api_key, { model: "drip", stream: true });
      expect(stream.text.split("\n\n").filter((x) => x.startsWith("data: {"))).toHaveLength(40);
      expect(viaOutboundWorker.get(e.engine)).toBe(true);
      expect((await e.client.runningEpisodes()).episodes[0]).toMatchObject({ llm_call_count: 2 });
    } finally {
      await deployedLike.stop();
    }
  });

  it("streams: passes SSE through, and turns a late whole completion into a chunk after keep-alives", async () => {
    const e = await engineWithClaim();
    const s = await chat(e.claim.openai_base_url, e.claim.openai_api_key, { model: "tiny", stream: true });
    expect(s.status).toBe(200);
    expect(s.headers.get("content-type")).toContain("text/event-stream");
    expect(s.text).toContain('"content":"Hel"');
    expect(s.text.trim().endsWith("data: [DONE]")).toBe(true);
    // Tokens sent one by one arrive all, in order, each as its own event, and the stream ends with [DONE].
    const drip = await chat(e.claim.openai_base_url, e.claim.openai_api_key, { model: "drip", stream: true });
    const tokens = drip.text.split("\n\n").filter((x) => x.startsWith("data: {")).map((x) => (JSON.parse(x.slice(6)) as { choices: { delta: { content: string } }[] }).choices[0]!.delta.content);
    expect(tokens).toEqual(Array.from({ length: 40 }, (_, i) => ` t${i}`));
    expect(drip.text.trim().endsWith("data: [DONE]")).toBe(true);
    const late = await chat(e.claim.openai_base_url, e.claim.openai_api_key, { model: "zmq-like", stream: true });
    expect(late.text.startsWith(": keep-alive\n\n")).toBe(true);
    const events = late.text.split("\n\n").filter((x) => x.startsWith("data: "));
    expect(JSON.parse(events[0]!.slice(6))).toMatchObject({ object: "chat.completion.chunk", choices: [{ delta: { role: "assistant", content: "whole" }, finish_reason: "stop" }] });
    expect(events[1]).toBe("data: [DONE]");
  });

  it("answers upstream faults with OpenAI errors: unknown model, garbage, a hang, a broken stream", async () => {
    const e = await engineWithClaim();
    const key = e.claim.openai_api_key;
    const unknown = await chat(e.claim.openai_base_url, key, { model: "gpt-nope" });
    expect(unknown.status).toBe(404);
    expect(JSON.parse(unknown.text)).toMatchObject({ error: { code: "model_not_found", type: "invalid_request_error" } });
    const garbage = await chat(e.claim.openai_base_url, key, { model: "garbage" });
    expect(garbage.status).toBe(502);
    expect(JSON.parse(garbage.text)).toMatchObject({ error: { code: "upstream_garbage", type: "api_error" } });
    const hang = await chat(e.claim.openai_base_url, key, { model: "hang" });
    expect(hang.status).toBe(504);
    expect(JSON.parse(hang.text)).toMatchObject({ error: { code: "upstream_timeout", message: expect.stringContaining("within 2 s") } });
    const broken = await chat(e.claim.openai_base_url, key, { model: "break", stream: true });
    expect(broken.status).toBe(200);
    expect(broken.text).toContain('"content":"par"');
    expect(broken.text).toMatch(/"code":"upstream_stream_broken"|"code":"upstream_timeout"/);
    // The episode is still consistent: claimed by c1, every call counted.
    expect(await e.client.canContinueEpisode({ client_uuid: "c1", episode_uuid: "ep-1" })).toEqual({ can_continue: true });
    expect((await e.client.runningEpisodes()).episodes[0]?.llm_call_count).toBe(4);
  }, 30_000);

  it("fails each waiting call at its deadline while the isolate's one deadline watch passes from call to call", async () => {
    const e = await engineWithClaim();
    const key = e.claim.openai_api_key;
    const timed = async (model: string, opts: { after: number; abortAt?: number }) => {
      await new Promise((r) => setTimeout(r, opts.after));
      const started = Date.now();
      const abort = new AbortController();
      if (opts.abortAt !== undefined) setTimeout(() => abort.abort(), opts.abortAt);
      try {
        const res = await fetch(`${e.claim.openai_base_url}/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
          body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }] }),
          signal: abort.signal,
        });
        const body = JSON.parse(await res.text()) as { error?: { code?: string } };
        return { status: res.status, code: body.error?.code ?? null, ms: Date.now() - started };
      } catch {
        return { status: 0, code: "client_left", ms: Date.now() - started };
      }
    };
    // The first call holds the watch and is answered after 600 ms: the watch goes to the newest
    // waiting call (a client that left, whose request may be gone: then it goes on to another),
    // and every hanging call still gets its 504 at its own deadline (2 s here).
    const calls = await Promise.all([
      timed("zmq-like", { after: 0 }),
      timed("hang", { after: 50 }),
      timed("tiny", { after: 80 }),
      timed("hang", { after: 100 }),
      timed("hang", { after: 150, abortAt: 100 }),
      timed("zmq-like", { after: 200 }),
    ]);
    expect(calls.map((c) => c.status)).toEqual([200, 504, 200, 504, 0, 200]);
    for (const c of calls.filter((x) => x.status === 504)) {
      expect(c.code).toBe("upstream_timeout");
      expect(c.ms).toBeGreaterThanOrEqual(1_900);
      expect(c.ms).toBeLessThan(2_500);
    }
    // One more, alone, after all that: the watch was not lost on the way.
    const last = await timed("hang", { after: 0 });
    expect([last.status, last.code]).toEqual([504, "upstream_timeout"]);
    expect(last.ms).toBeLessThan(3_200);
  }, 30_000);

  it("refuses forged, foreign and dead keys, bad bodies, and engines that cannot serve", async () => {
    const e = await engineWithClaim();
    const other = await engineWithClaim();
    const key = e.claim.openai_api_key;
    const parts = key.split(".");
    const forged = [parts[0], parts[1], parts[2], parts[3], "AAAA"].join(".");
    expect((await chat(e.claim.openai_base_url, forged, { model: "tiny" })).status).toBe(401);
    expect((await chat(e.claim.openai_base_url, "sk-ajet-trainer-secret", { model: "tiny" })).status).toBe(401);
    const foreign = await chat(`${other.base}/v1`, key, { model: "tiny" });
    expect(foreign.status).toBe(401);
    expect(JSON.parse(foreign.text).error.message).toContain("belongs to engine");
    const noModel = await chat(e.claim.openai_base_url, key, {});
    expect(noModel.status).toBe(400);
    const badJson = await fetch(`${e.claim.openai_base_url}/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${key}` }, body: "{" });
    expect(badJson.status).toBe(400);
    const missing = await fetch(`${e.claim.openai_base_url}/chat/completions`, { method: "POST", body: "{}" });
    expect(missing.status).toBe(401);

    await e.trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING_POST" });
    expect((await chat(e.claim.openai_base_url, key, { model: "tiny" })).status).toBe(200);
    await e.trainer.updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING" });
    const syncing = await chat(e.claim.openai_base_url, key, { model: "tiny" });
    expect(syncing.status).toBe(503);

    const noGateway = await engineWithClaim({ gateway: false });
    const ng = await chat(noGateway.claim.openai_base_url, noGateway.claim.openai_api_key, { model: "tiny" });
    expect(ng.status).toBe(503);
    expect(JSON.parse(ng.text).error.code).toBe("no_gateway");
  });

  it("kills the key with its claim: after end, after abort and a new claim, after reaping", async () => {
    const e = await engineWithClaim();
    const key = e.claim.openai_api_key;
    await e.client.endEpisode({ client_uuid: "c1", episode_uuid: "ep-1", task_id: "t", workflow_output: { reward: 1, metadata: { task_id: "t" } } });
    const ended = await chat(e.claim.openai_base_url, key, { model: "tiny" });
    expect(ended.status).toBe(401);
    expect(JSON.parse(ended.text).error.message).toContain("no longer live");

    const c2 = await e.client.claimEpisode({ client_uuid: "c2", discard_episode_timeout: 60 });
    await e.client.abortEpisode({ client_uuid: "c2", episode_uuid: c2.episode_uuid });
    const c3 = await e.client.claimEpisode({ client_uuid: "c3", discard_episode_timeout: 60 });
    expect(c3.episode_uuid).toBe(c2.episode_uuid);
    expect((await chat(c3.openai_base_url, c2.openai_api_key, { model: "tiny" })).status).toBe(401);
    expect((await chat(c3.openai_base_url, c3.openai_api_key, { model: "tiny" })).status).toBe(200);

    const short = await engineWithClaim({ timeout: 1 });
    const deadline = Date.now() + 15_000;
    while ((await short.client.runningEpisodes()).total > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    expect((await chat(short.claim.openai_base_url, short.claim.openai_api_key, { model: "tiny" })).status).toBe(401);
  }, 30_000);

  it("holds a call through a weight sync that keeps the claims, then relays it on the new weights", async () => {
    const e = await engineWithClaim();
    const operator = new EngineClient({ baseUrl: e.base, token: e.tokens["operator"] });
    await operator.configureSync({ keep_claims_across_sync: true, sync_hold_seconds: 30 });
    await e.trainer.updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING", weight_version: 3 });
    let done = false;
    const held = chat(e.claim.openai_base_url, e.claim.openai_api_key, { model: "tiny" }).finally(() => (done = true));
    // The call waits while the engine syncs (real time here: the gate's clock is the Worker's).
    await new Promise((r) => setTimeout(r, 1500));
    expect(done).toBe(false);
    await e.trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 4 });
    const r = await held;
    expect(r.status).toBe(200);
    expect(seen.filter((s) => s.engine === e.engine).at(-1)?.call).toMatchObject({ weight_version: 4 });
    // A short hold runs out with a clear error, and the claim lives on.
    await operator.configureSync({ sync_hold_seconds: 1 });
    await e.trainer.updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING" });
    const expired = await chat(e.claim.openai_base_url, e.claim.openai_api_key, { model: "tiny" });
    expect(expired.status).toBe(503);
    expect(JSON.parse(expired.text).error.code).toBe("sync_hold_expired");
    expect((await e.client.runningEpisodes()).total).toBe(1);
  }, 30_000);

  it("signs every envelope: the gateway refused none of the Worker's calls", () => {
    expect(rejected).toEqual([]);
    expect(seen.length).toBeGreaterThan(10);
  });
});
