/**
 * Vision-language episodes through the whole ledger: the real Worker (Miniflare, D1, R2), the
 * real agent with its gateway and shipper, an HTTP model. Each screenshot is taken out of the
 * records, uploaded once and given back by reference (`rx-media:sha256:<hex>`); the conversation
 * with the media fetched back is exactly what the client sent, in the trajectory and the export,
 * and a long episode exports a call at a time (docs/ledger.md, "Media").
 */
import { randomBytes } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { describe, expect, it } from "vitest";
import { mediaRefsOf } from "../../../src/ledger/media-refs";
import type { TrajectoryCall } from "../../../src/protocol/ledger";
import { serveHttp } from "../support/http-server";
import { ledgerWorld } from "./ledger-world";

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

const world = ledgerWorld("media-e2e", () => serveHttp(answer), (model) => `${model.origin}/v1`);

async function setup() {
  const { claim, ledger, exportText, end, recorded } = await world.claimed({ engine: "media", capture: "messages", weightVersion: 1, discardEpisodeTimeout: 600 });
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
  const ended = async (calls: number) => recorded(calls, `the ${calls} calls recorded`, { ended: true, timeoutMs: 60_000 });
  return { ledger, exportText, end, send, ended };
}

const dataUrl = (raw: number): string => `data:image/png;base64,${randomBytes(raw).toString("base64")}`;
const userWithImage = (text: string, url: string) => ({ role: "user", content: [{ type: "text", text }, { type: "image_url", image_url: { url, detail: "high" } }] });
/** Compared as text: the exact bytes the client sent, key order included. */
const same = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b);

describe("ledger media, end to end", () => {
  it("records a call whose data: URL of JSON text would be refused as an upload: left in the record, which is cut to its cap", async () => {
    const { end, send, ended } = await setup();
    // 9 MB of JSON text: its upload's JSON body, escapes counted (13.5 MB), would be over the media
    // route's 12 MiB, though the call (escaped the same) is within the relay's 16 MiB.
    await send([{ role: "user", content: [{ type: "text", text: "What does this file hold?" }, { type: "image_url", image_url: { url: `data:application/json,${'{"k":"v"}\n'.repeat(900_000)}` } }] }]);
    expect((await end()).success).toBe(true);
    const t = await ended(1);
    expect(t.calls[0]).toMatchObject({ truncated: true, status: 200 });
  }, 120_000);

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
