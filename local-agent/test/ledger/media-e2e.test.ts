/**
 * Vision-language episodes through the whole ledger: the real Worker (Miniflare, D1, R2), the
 * real agent with its gateway and shipper, an HTTP model. Each screenshot is taken out of the
 * records, uploaded once and given back by reference (`rx-media:sha256:<hex>`); the conversation
 * with the media fetched back is exactly what the client sent, in the trajectory and the export,
 * and a long episode exports a call at a time (docs/ledger.md, "Media").
 */
import { randomBytes, randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { startLocalExchange, type LocalExchange } from "../../../scripts/local/exchange";
import { AdminClient, EngineClient, LedgerClient } from "../../../src/client";
import { mediaRefsOf } from "../../../src/ledger/media-refs";
import type { TrajectoryCall } from "../../../src/protocol/ledger";
import { runAgent, testConfig } from "../support/agent-harness";
import { serveHttp, type TestServer } from "../support/http-server";
import { tempDir } from "../support/temp";
import { waitUntil } from "../support/wait";

const ADMIN = "media-e2e-admin";
let ex: LocalExchange;
let model: TestServer;
let dir: ReturnType<typeof tempDir>;
const cleanups: Array<() => unknown> = [];
/** The body of every request the model got, as text. */
const received: string[] = [];

async function answer(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  received.push(Buffer.concat(chunks).toString("utf8"));
  if ((JSON.parse(received.at(-1)!) as { stream?: boolean }).stream === true) {
    const chunk = (choices: unknown[], usage?: unknown) => `data: ${JSON.stringify({ id: "s", object: "chat.completion.chunk", created: 1, model: "m", choices, ...(usage ? { usage } : {}) })}\n\n`;
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.end(chunk([{ index: 0, delta: { role: "assistant", content: "ok" }, finish_reason: null }]) + chunk([{ index: 0, delta: {}, finish_reason: "stop" }]) + chunk([], { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 }) + "data: [DONE]\n\n");
    return;
  }
  res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ id: "x", object: "chat.completion", created: 1, model: "m", choices: [{ index: 0, message: { role: "assistant", content: "click" }, finish_reason: "stop" }], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } }));
}

beforeAll(async () => {
  model = await serveHttp(answer);
  ex = await startLocalExchange({ port: 0, persistDir: null, adminToken: ADMIN, claimKeySecret: "media-e2e-claim-secret" });
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
  const created = await new AdminClient({ origin: ex.url, adminToken: ADMIN }).createEngine(`media-${randomUUID().slice(0, 8)}`);
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
  const claim = await role("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 600 });
  expect(claim.success).toBe(true);
  /** The export as text, a chunk at a time as it arrives. */
  const exportText = async (): Promise<string> => {
    const res = await fetch(`${base}/trajectories/export?format=jsonl`, { headers: { authorization: `Bearer ${tokens.viewer}` } });
    expect(res.status).toBe(200);
    return await res.text();
  };
  const end = () => role("client").endEpisode({ client_uuid: "c1", episode_uuid: "ep-1", task_id: "t1", workflow_output: { reward: 1, is_success: true, metadata: { task_id: "t1" }, log_metrics: {} } });
  /** One relayed call with `messages`; the answer's message. */
  const send = async (messages: unknown[], stream = false): Promise<unknown> => {
    const text = JSON.stringify({ model: "policy", messages, ...(stream ? { stream } : {}) });
    const res = await fetch(`${claim.openai_base_url}/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${claim.openai_api_key}`, "content-type": "application/json" }, body: text });
    const got = await res.text();
    expect(res.status, got.slice(0, 200)).toBe(200);
    expect(same(JSON.parse(received.at(-1)!)["messages"], messages)).toBe(true);
    if (stream) return null;
    return (JSON.parse(got) as { choices: { message: unknown }[] }).choices[0]!.message;
  };
  const ended = async (calls: number) =>
    waitUntil(async () => {
      const t = await ledger("viewer").trajectory("ep-1").catch(() => null);
      return t !== null && t.outcome === "ended" && t.calls.length === calls ? t : null;
    }, `the ${calls} calls recorded`, 60_000);
  return { ledger, exportText, end, send, ended };
}

const dataUrl = (raw: number): string => `data:image/png;base64,${randomBytes(raw).toString("base64")}`;
const userWithImage = (text: string, url: string) => ({ role: "user", content: [{ type: "text", text }, { type: "image_url", image_url: { url, detail: "high" } }] });
/** Compared as text: the exact bytes the client sent, key order included. */
const same = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b);

describe("ledger media, end to end", () => {
  it("records every turn after a 2 MB screenshot as what it adds, and gives it back by reference, exactly as sent, in the trajectory and the export", async () => {
    const { ledger, exportText, end, send, ended } = await setup();
    const messages: unknown[] = [{ role: "system", content: "You operate a desktop." }, userWithImage("What is on the screen?", dataUrl(1_500_000))];
    for (const next of ["and now?", "and then?"]) messages.push(await send(messages), { role: "user", content: next });
    await send(messages);
    expect((await end()).success).toBe(true);

    const t = await ended(3);
    const calls = t.calls as TrajectoryCall[];
    expect(calls.map((c) => [c.truncated, c.messages_splice, c.prefix_missing])).toEqual([
      [false, "first", false],
      [false, "extends", false],
      [false, "extends", false],
    ]);
    // By reference: one screenshot, named in every call's messages, fetched back as sent.
    const refs = calls.map((c) => [...mediaRefsOf(c.messages)]);
    expect(new Set(refs.flat()).size).toBe(1);
    expect(refs.map((r) => r.length)).toEqual([1, 1, 1]);
    expect(JSON.stringify(calls[2]!.messages).length).toBeLessThan(1000);
    expect(same(await ledger("viewer").inlineMedia(calls[2]!.messages), messages)).toBe(true);
    const lines = (await exportText()).split("\n").filter((l) => l !== "");
    expect(lines).toHaveLength(1);
    const exported = JSON.parse(lines[0]!) as { calls: TrajectoryCall[] };
    expect(same(await ledger("trainer").inlineMedia(exported.calls[2]!.messages), messages)).toBe(true);
    expect(same(exported.calls[0]!.messages, calls[0]!.messages)).toBe(true);
  }, 120_000);

  it("records a streamed vision call of 3.8 MB (three screenshots, over the record cap inline) whole, its screenshots by reference", async () => {
    const { ledger, send, end, ended } = await setup();
    const messages = [{ role: "system", content: "desk" }, userWithImage("a", dataUrl(1_000_000)), { role: "assistant", content: "ok" }, userWithImage("b", dataUrl(1_000_000)), { role: "assistant", content: "ok" }, userWithImage("c", dataUrl(900_000))];
    await send(messages, true);
    expect((await end()).success).toBe(true);
    const t = await ended(1);
    expect(t.calls.map((c) => [c.truncated, c.stream, new Set(mediaRefsOf(c.messages)).size])).toEqual([[false, true, 3]]);
    expect(same(await ledger("viewer").inlineMedia(t.calls[0]!.messages), messages)).toBe(true);
  }, 120_000);

  it("stores a 700 KB screenshot once over a three-turn episode and gives it back exactly, in the trajectory and the export", async () => {
    const { ledger, exportText, send, end, ended } = await setup();
    const messages: unknown[] = [{ role: "system", content: "desk" }, userWithImage("look", dataUrl(500_000))];
    for (const next of ["more", "again"]) messages.push(await send(messages), { role: "user", content: next });
    await send(messages);
    expect((await end()).success).toBe(true);
    const t = await ended(3);
    expect(t.calls.map((c) => [c.truncated, c.messages_splice])).toEqual([
      [false, "first"],
      [false, "extends"],
      [false, "extends"],
    ]);
    // Given by reference, one screenshot in all: a reader fetches it once, not in every call.
    expect(t.calls.map((c) => [...mediaRefsOf(c.messages)])).toEqual(Array(3).fill([...mediaRefsOf(t.calls[0]!.messages)]));
    expect(mediaRefsOf(t.calls[0]!.messages).size).toBe(1);
    expect(same(await ledger("viewer").inlineMedia(t.calls[2]!.messages), messages)).toBe(true);
    const exported = JSON.parse((await exportText()).split("\n")[0]!) as { calls: TrajectoryCall[] };
    expect(same(await ledger("viewer").inlineMedia(exported.calls[2]!.messages), messages)).toBe(true);
  }, 120_000);

  it("exports a 150-turn episode over three screenshots (3.9 MB of history) by reference, each screenshot as sent", async () => {
    const { ledger, exportText, end, send, ended } = await setup();
    // Three screenshots of ~1 MB (1.3 MB as base64), one in each of the first turns, then short text turns.
    const messages: unknown[] = [{ role: "system", content: "You operate a desktop." }];
    const CALLS = 150;
    for (let i = 0; i < CALLS; i++) {
      messages.push(i < 3 ? userWithImage(`screen ${i}`, dataUrl(980_000)) : { role: "user", content: `step ${i}` });
      messages.push(await send(messages));
    }
    expect(JSON.stringify(messages).length).toBeGreaterThan(3_900_000);
    expect((await end()).success).toBe(true);
    await ended(CALLS);

    // Whole, each call's conversation with its screenshots was ~585 MB: past V8's longest string.
    const text = await exportText();
    expect(text.length).toBeLessThan(10_000_000);
    const lines = text.split("\n").filter((l) => l !== "");
    expect(lines).toHaveLength(1);
    const t = JSON.parse(lines[0]!) as { calls: TrajectoryCall[] };
    expect(t.calls).toHaveLength(CALLS);
    expect(t.calls.map((c) => c.messages_splice).filter((s) => s !== "extends")).toEqual(["first"]);
    const last = t.calls.at(-1)!;
    expect(new Set(mediaRefsOf(last.messages)).size).toBe(3);
    expect(same(await ledger("viewer").inlineMedia(last.messages), messages.slice(0, -1))).toBe(true);
  }, 300_000);
});
