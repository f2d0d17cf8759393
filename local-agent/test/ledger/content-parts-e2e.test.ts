/**
 * A vision agent that keeps every message as content parts (smolagents and other multimodal
 * frameworks keep their memory so), end to end: the real Worker (Miniflare, D1 and R2), the real
 * agent and its gateway, and an HTTP model answering plain strings. The client sends each answer
 * back as its one text part: the same conversation to the model, so each call is stored as what
 * it adds, and the trajectory and the export give back each call's messages in the form that call
 * sent them.
 */
import { randomBytes, randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { startLocalExchange, type LocalExchange } from "../../../scripts/local/exchange";
import { AdminClient, EngineClient, LedgerClient } from "../../../src/client";
import { runAgent, testConfig } from "../support/agent-harness";
import { bodyText, serveHttp, type TestServer } from "../support/http-server";
import { tempDir } from "../support/temp";
import { waitUntil } from "../support/wait";

const ADMIN = "content-parts-admin";
let ex: LocalExchange;
let model: TestServer;
let dir: ReturnType<typeof tempDir>;
const cleanups: Array<() => unknown> = [];

/** Every call answered with a short string, as a VLM server answers. */
async function answer(req: IncomingMessage, res: ServerResponse): Promise<void> {
  await bodyText(req);
  res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ id: "x", object: "chat.completion", created: 1, model: "m", choices: [{ index: 0, message: { role: "assistant", content: "click(10, 20)" }, finish_reason: "stop" }], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } }));
}

beforeAll(async () => {
  model = await serveHttp(answer);
  ex = await startLocalExchange({ port: 0, persistDir: null, adminToken: ADMIN, claimKeySecret: "content-parts-claim-secret" });
});
afterAll(async () => {
  await ex?.stop();
  await model?.close();
});
beforeEach(() => {
  dir = tempDir();
});
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  dir.remove();
});

type Role = "operator" | "trainer" | "client" | "viewer";

async function setup() {
  const created = await new AdminClient({ origin: ex.url, adminToken: ADMIN }).createEngine(`parts-${randomUUID().slice(0, 8)}`);
  const base = `${ex.url}/e/${created.engine}`;
  const tokens = created.tokens as Record<Role, string>;
  const role = (r: Role) => new EngineClient({ baseUrl: base, token: tokens[r] });
  const ledger = (r: Role) => new LedgerClient({ baseUrl: base, token: tokens[r] });
  await ledger("operator").configure({ capture: "messages" });
  const engine = { name: created.engine, baseUrl: base, tokens, operator: role("operator"), trainer: role("trainer"), client: role("client"), viewer: role("viewer") };
  const agent = await runAgent(testConfig(ex.url, engine, dir.path, { inferenceUpstream: `${model.origin}/v1` }));
  cleanups.push(() => agent.stop());
  await waitUntil(async () => (await role("viewer").overview()).agent.gateway_url === agent.gatewayUrl, "the heartbeat to report the gateway");
  await role("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1, weight_version: 1 });
  await role("trainer").registerEpisode({ episode_uuid: "ep-1", openai_base_url: `${model.origin}/v1`, openai_api_key: "sk-trainer", zmq_listen_result_addr: "" });
  const claim = await role("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 120 });
  expect(claim.success).toBe(true);
  /** The export's JSONL, a trajectory a line. */
  const exportLines = async (): Promise<Record<string, unknown>[]> => {
    const res = await fetch(`${base}/trajectories/export?format=jsonl`, { headers: { authorization: `Bearer ${tokens.viewer}` } });
    expect(res.status).toBe(200);
    return (await res.text()).split("\n").filter((l) => l !== "").map((l) => JSON.parse(l) as Record<string, unknown>);
  };
  const end = () => role("client").endEpisode({ client_uuid: "c1", episode_uuid: "ep-1", task_id: "t1", workflow_output: { reward: 1, is_success: true, metadata: { task_id: "t1" }, log_metrics: {} } });
  return { claim, ledger, exportLines, end };
}

async function send(claim: { openai_base_url: string; openai_api_key: string }, messages: unknown[]): Promise<string> {
  const res = await fetch(`${claim.openai_base_url}/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${claim.openai_api_key}`, "content-type": "application/json" }, body: JSON.stringify({ model: "policy", messages }) });
  const text = await res.text();
  expect(res.status, text.slice(0, 300)).toBe(200);
  return (JSON.parse(text) as { choices: { message: { content: string } }[] }).choices[0]!.message.content;
}

const dataUrl = (rawBytes: number): string => `data:image/png;base64,${randomBytes(rawBytes).toString("base64")}`;

type Call = { messages: unknown[]; answer: unknown; messages_splice: string; prefix_missing: boolean };

describe("content parts in the delta encoding, end to end", () => {
  it("stores a turn as what it adds when the client sends the model's answer back as a content array of one text part (smolagents-style)", async () => {
    const { claim, ledger, end } = await setup();
    // A small screenshot: what a large one costs is vision-storage.test.ts's (the ledger keeps large media apart).
    const messages: unknown[] = [{ role: "system", content: [{ type: "text", text: "You operate a desktop." }] }, { role: "user", content: [{ type: "text", text: "look" }, { type: "image_url", image_url: { url: dataUrl(4500), detail: "high" } }] }];
    for (const next of ["more", "again"]) {
      const a = await send(claim, messages);
      messages.push({ role: "assistant", content: [{ type: "text", text: a }] }, { role: "user", content: [{ type: "text", text: next }] });
    }
    await send(claim, messages);
    expect((await end()).success).toBe(true);
    const t = await waitUntil(async () => {
      const got = await ledger("viewer").trajectory("ep-1").catch(() => null);
      return got !== null && got.outcome === "ended" && got.calls.length === 3 ? got : null;
    }, "the three calls recorded", 30_000);
    const calls = t.calls as unknown as Call[];
    expect(calls[2]!.messages).toEqual(messages);
    // "rewritten" would mean stored whole: the screenshot once per call, the square of the episode's length.
    expect(calls.map((c) => [c.messages_splice, c.prefix_missing])).toEqual([
      ["first", false],
      ["extends", false],
      ["extends", false],
    ]);
  });

  it("gives back each call's messages as that call sent them, the answer a string in the call that got it and a text part in the calls after", async () => {
    const { claim, ledger, exportLines, end } = await setup();
    const sent: unknown[][] = [];
    const messages: unknown[] = [{ role: "system", content: "You operate a desktop." }, { role: "user", content: [{ type: "text", text: "look" }, { type: "image_url", image_url: { url: dataUrl(3000) } }] }];
    sent.push([...messages]);
    const a1 = await send(claim, messages);
    // The answer back as its one text part (keys in another order), the system prompt now a part too.
    messages.push({ content: [{ text: a1, type: "text" }], role: "assistant" }, { role: "user", content: "next" });
    sent.push([...messages]);
    const a2 = await send(claim, messages);
    // Now the answer as the string it was: the parts of the call before stay that call's.
    messages.push({ role: "assistant", content: a2 }, { role: "user", content: [{ type: "text", text: "done?" }] });
    sent.push([...messages]);
    await send(claim, messages);
    expect((await end()).success).toBe(true);
    const t = await waitUntil(async () => {
      const got = await ledger("viewer").trajectory("ep-1").catch(() => null);
      return got !== null && got.outcome === "ended" && got.calls.length === 3 ? got : null;
    }, "the three calls recorded", 30_000);
    const calls = t.calls as unknown as Call[];
    expect(calls.map((c) => c.messages)).toEqual(sent);
    expect(calls.map((c) => c.answer)).toEqual([{ role: "assistant", content: a1 }, { role: "assistant", content: a2 }, { role: "assistant", content: "click(10, 20)" }]);
    expect(calls.map((c) => [c.messages_splice, c.prefix_missing])).toEqual([
      ["first", false],
      ["extends", false],
      ["extends", false],
    ]);
    const exported = (await exportLines())[0] as { calls: Call[] };
    expect(exported.calls.map((c) => c.messages)).toEqual(sent);
  });
});
