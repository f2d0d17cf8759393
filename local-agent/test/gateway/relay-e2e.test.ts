/**
 * The LLM relay end to end: the real Worker (Miniflare), the real agent with its gateway, the
 * model behind a pyzmq REP socket (AgentJet) and behind a Node HTTP server (vLLM-like). A
 * client claims, chats several turns (streamed and not), and ends or aborts; the engine counts
 * every call and keeps the claim's activity clock fresh; the key dies with the claim.
 */
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, beforeEach, afterEach, describe, expect, it } from "vitest";
import { startLocalExchange, type LocalExchange } from "../../../scripts/local/exchange";
import { signEnvelope } from "../../../src/auth/gateway-signature";
import { AdminClient, EngineClient } from "../../../src/client";
import { GATEWAY_RELAY_PATH, SIGNATURE_HEADER, TIMESTAMP_HEADER } from "../../../src/protocol/relay";
import { DEFAULT_RELAY_MAX_BODY_BYTES } from "../../../src/protocol/relay-endpoint";
import { runAgent, testConfig } from "../support/agent-harness";
import { headersOnly } from "../support/headers-only";
import { tempDir } from "../support/temp";
import { waitUntil } from "../support/wait";
import { agentJetKey, envelope } from "./envelope";
import { startModelServer, type ModelServer } from "./model-server";
import { PyModel } from "./py-model";

const ADMIN = "relay-e2e-admin";
const DEADLINE_SECONDS = 3;
let ex: LocalExchange;
let http: ModelServer;
let dir: ReturnType<typeof tempDir>;
const cleanups: Array<() => unknown> = [];

beforeAll(async () => {
  http = await startModelServer();
  ex = await startLocalExchange({
    port: 0,
    persistDir: null,
    adminToken: ADMIN,
    claimKeySecret: "relay-e2e-claim-secret",
    vars: { RELAY_DEADLINE_SECONDS: String(DEADLINE_SECONDS), RELAY_KEEPALIVE_MS: "200" },
  });
});
afterAll(async () => {
  await ex?.stop();
  await http?.close();
});
beforeEach(() => {
  dir = tempDir();
});
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  dir.remove();
});

/** A fresh engine, the agent serving it, the engine ROLLING and one episode registered. */
async function setup(episode: { openai_base_url: string; openai_api_key: string }) {
  const created = await new AdminClient({ origin: ex.url, adminToken: ADMIN }).createEngine(`relay-${randomUUID().slice(0, 8)}`);
  const base = `${ex.url}/e/${created.engine}`;
  const tokens = created.tokens as Record<"operator" | "trainer" | "client" | "viewer", string>;
  const role = (r: keyof typeof tokens) => new EngineClient({ baseUrl: base, token: tokens[r] });
  const agent = await runAgent(testConfig(ex.url, { name: created.engine, baseUrl: base, tokens, operator: role("operator"), trainer: role("trainer"), client: role("client"), viewer: role("viewer") }, dir.path));
  cleanups.push(() => agent.stop());
  const trainer = role("trainer");
  const client = role("client");
  await waitUntil(async () => (await role("trainer").overview()).agent.gateway_url === agent.gatewayUrl, "the heartbeat to report the gateway");
  await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
  await trainer.registerEpisode({ episode_uuid: "ep-1", zmq_listen_result_addr: "", ...episode });
  const claim = await client.claimEpisode({ client_uuid: "c1", discard_episode_timeout: 60 });
  expect(claim).toMatchObject({ success: true, episode_uuid: "ep-1" });
  return { agent, trainer, client, claim, engine: created.engine };
}

async function chat(claim: { openai_base_url: string; openai_api_key: string }, body: Record<string, unknown>) {
  const res = await fetch(`${claim.openai_base_url}/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${claim.openai_api_key}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: res.status, type: res.headers.get("content-type") ?? "", text: await res.text() };
}

/** The content of a whole answer, or of a stream's deltas joined. */
function content(r: { type: string; text: string }): string {
  if (!r.type.includes("text/event-stream")) return (JSON.parse(r.text) as { choices: { message: { content: string } }[] }).choices[0]!.message.content;
  return r.text
    .split("\n\n")
    .filter((e) => e.startsWith("data: {"))
    .map((e) => (JSON.parse(e.slice(6)) as { choices: { delta: { content?: string } }[] }).choices[0]?.delta.content ?? "")
    .join("");
}

const turn = (history: { role: string; content: string }[], text: string) => [...history, { role: "user", content: text }];

async function running(client: EngineClient) {
  return (await client.runningEpisodes()).episodes[0]!;
}

describe("relay end to end", () => {
  it("AgentJet: turns go over ZeroMQ to the episode's pyzmq runner, streamed and not; counted; the key dies at end", async () => {
    const addr = `ipc://${dir.path}/ep-1-llm.sock`;
    const py = new PyModel([addr]);
    cleanups.push(() => py.kill());
    await py.ready();
    const e = await setup({ openai_base_url: "http://127.0.0.1:1/v1", openai_api_key: agentJetKey("ep-1", addr) });

    let history: { role: string; content: string }[] = [];
    const answers: string[] = [];
    for (const [i, stream] of [false, true, false].entries()) {
      history = turn(history, `question ${i + 1}`);
      const r = await chat(e.claim, { model: "agentjet", messages: history, stream });
      expect(r.status).toBe(200);
      expect(r.type).toContain(stream ? "text/event-stream" : "application/json");
      answers.push(content(r));
      history.push({ role: "assistant", content: answers.at(-1)! });
    }
    expect(answers).toEqual(["turn 1: echo: question 1", "turn 2: echo: question 2", "turn 3: echo: question 3"]);
    expect(py.calls.map((c) => c.call.episode_uuid)).toEqual(["ep-1", "ep-1", "ep-1"]);
    expect(new Set(py.calls.map((c) => c.call.timeline_uuid)).size).toBe(3);
    expect(py.calls[2]!.call).toMatchObject({ agent_name: "agent", target_tag: "policy", preserve_sampling_params: false });
    expect(py.calls[2]!.call.completion_request["messages"]).toEqual(history.slice(0, -1));

    // The activity clock: idle while silent, fresh again after a call.
    expect(await running(e.client)).toMatchObject({ llm_call_count: 3 });
    await new Promise((r) => setTimeout(r, 2200));
    expect((await running(e.client)).idle_seconds).toBeGreaterThanOrEqual(2);
    const models = await fetch(`${e.claim.openai_base_url}/models`, { headers: { authorization: `Bearer ${e.claim.openai_api_key}` } });
    expect((await models.json()) as unknown).toMatchObject({ object: "list", data: [{ id: "agentjet" }] });
    const after = await running(e.client);
    expect(after.llm_call_count).toBe(4);
    expect(after.idle_seconds).toBeLessThan(1);

    await e.client.endEpisode({ client_uuid: "c1", episode_uuid: "ep-1", task_id: "t", workflow_output: { reward: 1, metadata: { task_id: "t" } } });
    const dead = await chat(e.claim, { model: "agentjet", messages: turn(history, "more?") });
    expect(dead.status).toBe(401);
    expect(py.calls).toHaveLength(3);
  });

  it("HTTP upstream: several turns, then an unknown model, garbage, a hang and a crash mid-stream, each a clear error; the key dies at abort", async () => {
    const e = await setup({ openai_base_url: `${http.url}/v1`, openai_api_key: "sk-plain-trainer-key" });
    const whole = await chat(e.claim, { model: "tiny", messages: turn([], "one") });
    expect(content(whole)).toBe("echo: one");
    const streamed = await chat(e.claim, { model: "tiny", messages: turn([], "two words"), stream: true });
    expect(streamed.type).toContain("text/event-stream");
    expect(content(streamed)).toBe("echo: two words");
    expect(streamed.text.trim().endsWith("data: [DONE]")).toBe(true);
    // The trainer's key reached the upstream, with the episode id; the client never saw either.
    expect(http.seen.at(-1)).toMatchObject({ path: "/v1/chat/completions", authorization: "Bearer sk-plain-trainer-key", episode: "ep-1" });
    expect(whole.text + streamed.text).not.toContain("sk-plain-trainer-key");
    // The upstream gets the client's request as sent: every sampling field, nested and non-ASCII text.
    const rich = { model: "tiny", messages: turn([], "trois é ✓"), temperature: 0.2, top_k: 5, extra_body: { guided: ["a", { b: null }] } };
    expect(content(await chat(e.claim, rich))).toBe("echo: trois é ✓");
    expect(http.seen.at(-1)?.body).toEqual(rich);

    const unknown = await chat(e.claim, { model: "gpt-nope", messages: turn([], "x") });
    expect(unknown.status).toBe(404);
    expect(JSON.parse(unknown.text).error.message).toContain("gpt-nope");
    const garbage = await chat(e.claim, { model: "garbage", messages: turn([], "x") });
    expect(garbage.status).toBe(502);
    expect(JSON.parse(garbage.text).error.code).toBe("upstream_garbage");
    const hang = await chat(e.claim, { model: "hang", messages: turn([], "x") });
    expect(hang.status).toBe(504);
    expect(JSON.parse(hang.text).error).toMatchObject({ code: "upstream_timeout", message: expect.stringContaining(`${DEADLINE_SECONDS} s`) });
    const crash = await chat(e.claim, { model: "crash", messages: turn([], "x"), stream: true });
    expect(crash.text).toContain('"content":"echo:"');
    expect(crash.text).toContain("upstream_stream_broken");

    // Still claimed by c1, every call counted; another turn works.
    expect(await e.client.canContinueEpisode({ client_uuid: "c1", episode_uuid: "ep-1" })).toEqual({ can_continue: true });
    expect(content(await chat(e.claim, { model: "tiny", messages: turn([], "still here") }))).toBe("echo: still here");
    expect((await running(e.client)).llm_call_count).toBe(8);

    await e.client.abortEpisode({ client_uuid: "c1", episode_uuid: "ep-1" });
    expect((await chat(e.claim, { model: "tiny", messages: turn([], "x") })).status).toBe(401);
  }, 60_000);

  it("relays a vision agent's call with 6 MB of screenshots to the model as sent, and refuses one past RELAY_MAX_BODY_BYTES naming it", async () => {
    const e = await setup({ openai_base_url: `${http.url}/v1`, openai_api_key: "sk-plain-trainer-key" });
    // A third turn: three 1.5 MB screenshots, 2 MB each as base64, resent in every call of the episode.
    const screenshot = (seed: number) => ({ type: "image_url", image_url: { url: `data:image/png;base64,${Buffer.alloc(1_500_000, seed).toString("base64")}`, detail: "high" } });
    const messages = [1, 2, 3].flatMap((i) => [{ role: "user", content: [{ type: "text", text: `step ${i}` }, screenshot(i)] }, { role: "assistant", content: `act ${i}` }]).slice(0, -1);
    const body = { model: "tiny", messages: [...messages, { role: "user", content: "what now?" }] };
    expect(JSON.stringify(body).length).toBeGreaterThan(6_000_000);
    expect(content(await chat(e.claim, body))).toBe("echo: what now?");
    expect(http.seen.at(-1)?.body).toEqual(body);
    // Headers only: the relay refuses the declared length unread, and a client still writing races the closed connection.
    const over = await headersOnly(`${e.claim.openai_base_url}/chat/completions`, "POST", { authorization: `Bearer ${e.claim.openai_api_key}` }, DEFAULT_RELAY_MAX_BODY_BYTES + 1);
    expect({ status: over.status, error: JSON.parse(over.text).error }).toEqual({
      status: 413,
      error: { message: `The request body exceeds ${DEFAULT_RELAY_MAX_BODY_BYTES} bytes, the most a relayed call may send (RELAY_MAX_BODY_BYTES).`, type: "invalid_request_error", param: null, code: "payload_too_large" },
    });
  }, 60_000);

  it("the agent's gateway takes only the exchange's signature", async () => {
    const e = await setup({ openai_base_url: `${http.url}/v1`, openai_api_key: "sk-plain" });
    const body = JSON.stringify(envelope({ engine: e.engine, trainer_base_url: `${http.url}/v1` }));
    const send = async (secret: string | null) => {
      const ts = Math.floor(Date.now() / 1000);
      const headers: Record<string, string> = { "content-type": "application/json" };
      if (secret !== null) Object.assign(headers, { [TIMESTAMP_HEADER]: String(ts), [SIGNATURE_HEADER]: await signEnvelope(secret, ts, body) });
      return (await fetch(e.agent.gatewayLocalUrl + GATEWAY_RELAY_PATH, { method: "POST", headers, body })).status;
    };
    expect(await send(null)).toBe(401);
    expect(await send("a-guessed-secret")).toBe(401);
    expect(await send((await e.trainer.gatewaySecret()).secret)).toBe(200);
  });
});
