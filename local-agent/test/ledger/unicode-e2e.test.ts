/**
 * Unicode that is not BMP-only ASCII, end to end through the real Worker (Miniflare, D1, R2),
 * the real agent and its gateway, and an HTTP model that keeps the exact bytes it was sent:
 * non-BMP characters, combining marks, lone surrogates escaped as Python's json.dumps writes
 * them, one message serialized two ways, a surrogate pair split across a stream's events. What
 * the client sent == what the model got == what the ledger gives back.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { describe, expect, it } from "vitest";
import { serveHttp } from "../support/http-server";
import { ledgerWorld } from "./ledger-world";

/** Every request the model got: its path and its body's exact bytes. */
const received: { path: string; bytes: Buffer }[] = [];

/** Non-BMP (emoji, CJK extension B, math alphanumerics), combining marks, ZWJ sequence. */
const UNI_ANSWER = "好的 𠀋𝕏😀 e\u0301 👩‍👩‍👧 done";

async function answer(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const bytes = Buffer.concat(chunks);
  received.push({ path: req.url ?? "", bytes });
  const body = JSON.parse(bytes.toString("utf8")) as Record<string, unknown>;
  const chat = (req.url ?? "").endsWith("/chat/completions");
  const content = body["model"] === "uni" ? UNI_ANSWER : "ok";
  if (body["stream"] === true) {
    res.writeHead(200, { "content-type": "text/event-stream" });
    // The emoji's surrogate pair split across two events (each a lone surrogate in its JSON), and
    // the UTF-8 bytes of a 4-byte character split across two writes.
    const pieces = chat ? [content.slice(0, 4), content.slice(4, 6), content.slice(6)] : [content];
    const events = pieces.map((p) => `data: ${JSON.stringify({ id: "s", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: { role: "assistant", content: p }, finish_reason: null }] })}\n\n`);
    events.push(`data: ${JSON.stringify({ id: "s", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: {}, finish_reason: "stop" }] })}\n\n`);
    if (body["stream_options"] !== undefined) events.push(`data: ${JSON.stringify({ id: "s", object: "chat.completion.chunk", created: 1, model: "m", choices: [], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } })}\n\n`);
    events.push("data: [DONE]\n\n");
    const all = Buffer.from(events.join(""), "utf8");
    const at = all.indexOf(Buffer.from("𝕏", "utf8")) + 2;
    res.write(all.subarray(0, at));
    await new Promise((r) => setTimeout(r, 20));
    res.end(all.subarray(at));
    return;
  }
  const choice = chat ? { index: 0, message: { role: "assistant", content }, finish_reason: "stop" } : { index: 0, text: content, finish_reason: "stop" };
  res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ id: "x", object: chat ? "chat.completion" : "text_completion", created: 1, model: "m", choices: [choice], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } }));
}

const world = ledgerWorld("unicode-e2e", () => serveHttp(answer), (model) => `${model.origin}/v1`);

const setup = (capture: "messages" | "tokens" = "messages") => world.claimed({ engine: "rmm", capture, weightVersion: 1, discardEpisodeTimeout: 120 });

/** A relayed call with the body's exact text; the status and the answer's text. */
async function send(claim: { openai_base_url: string; openai_api_key: string }, path: string, text: string): Promise<{ status: number; text: string }> {
  const res = await fetch(`${claim.openai_base_url}${path}`, { method: "POST", headers: { authorization: `Bearer ${claim.openai_api_key}`, "content-type": "application/json" }, body: text });
  return { status: res.status, text: await res.text() };
}

/** A user's text: non-BMP, combining marks, a ZWJ sequence, and a lone surrogate. */
const USER = "証明せよ: 𝔸∀x 😀𠀋 e\u0301 👩‍👩‍👧 lone:\ud800 end";

/** As Python's json.dumps writes it by default: ASCII only, every other unit an escape (a lone surrogate too). */
const ensureAscii = (v: unknown): string => JSON.stringify(v).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);

/** As json.dumps(ensure_ascii=False) writes it: raw UTF-8, with Python's ", " and ": ". */
const pythonish = (v: unknown): string =>
  Array.isArray(v)
    ? `[${v.map(pythonish).join(", ")}]`
    : v !== null && typeof v === "object"
      ? `{${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}: ${pythonish(x)}`).join(", ")}}`
      : JSON.stringify(v);

type Call = { messages: unknown[]; truncated: boolean; messages_splice: string; prefix_missing: boolean };

describe("Unicode through the relay and the ledger", () => {
  it("keeps non-BMP text, combining marks and a lone surrogate exact from client to model to ledger export, across two serializations and a stream", async () => {
    const { claim, recorded, exportLines, end } = await setup();
    const m1 = [{ role: "system", content: "数学" }, { role: "user", content: USER }];
    const t1 = ensureAscii({ model: "uni", messages: m1 });
    expect(t1).toContain("\\ud800");
    expect(/^[\x00-\x7f]*$/.test(t1)).toBe(true);
    const r1 = await send(claim, "/chat/completions", t1);
    expect(r1.status, r1.text).toBe(200);
    expect(received.at(-1)!.bytes.toString("utf8")).toBe(t1);
    const a1 = (JSON.parse(r1.text) as { choices: { message: Record<string, unknown> }[] }).choices[0]!.message;
    expect(a1["content"]).toBe(UNI_ANSWER);

    // Call 2: the same history, serialized another way (raw UTF-8, other key order, Python's spacing), streamed.
    const m2 = [...m1.map((m) => ({ content: m.content, role: m.role })), { content: a1["content"], role: "assistant" }, { content: "𝕏 続けて", role: "user" }];
    const t2 = pythonish({ stream: true, messages: m2, model: "uni" });
    const r2 = await send(claim, "/chat/completions", t2);
    expect(r2.status).toBe(200);
    expect(received.at(-1)!.bytes.toString("utf8").startsWith(t2.slice(0, -1))).toBe(true);
    expect(JSON.parse(received.at(-1)!.bytes.toString("utf8"))).toMatchObject(JSON.parse(t2));
    let streamed = "";
    for (const e of r2.text.split("\n\n")) {
      const d = e.replace(/^data: /, "").trim();
      if (d === "" || d === "[DONE]" || d.startsWith(":")) continue;
      streamed += ((JSON.parse(d) as { choices: { delta: { content?: string } }[] }).choices[0]?.delta.content ?? "");
    }
    expect(streamed).toBe(UNI_ANSWER);
    const m3 = [...m2, { role: "assistant", content: streamed }, { role: "user", content: "🙂" }];
    expect((await send(claim, "/chat/completions", ensureAscii({ model: "uni", messages: m3 }))).status).toBe(200);
    expect((await end()).success).toBe(true);

    const t = await recorded(3, "the three calls recorded", { ended: true, timeoutMs: 30_000 });
    const calls = t.calls as unknown as (Call & { answer: Record<string, unknown> })[];
    expect(calls.map((c) => c.messages_splice)).toEqual(["first", "extends", "extends"]);
    expect(calls[0]!.messages).toEqual(m1);
    expect(calls[1]!.answer["content"]).toBe(UNI_ANSWER);
    expect((calls[2]!.messages as { content: unknown }[]).map((m) => m.content)).toEqual(m3.map((m) => m.content));
    const exported = (await exportLines())[0] as { calls: Call[] };
    expect((exported.calls[2]!.messages as { content: unknown }[]).map((m) => m.content)).toEqual(m3.map((m) => m.content));
  });

  it("with capture tokens (the gateway rewrites the request), the model still gets the client's text exactly, lone surrogate included", async () => {
    const { claim, recorded } = await setup("tokens");
    const m1 = [{ role: "user", content: USER }];
    const t1 = ensureAscii({ model: "uni", messages: m1, seed: 7 });
    const r1 = await send(claim, "/chat/completions", t1);
    expect(r1.status).toBe(200);
    const got = JSON.parse(received.at(-1)!.bytes.toString("utf8")) as Record<string, unknown>;
    expect(JSON.stringify(got["messages"]) === JSON.stringify(m1)).toBe(true);
    expect(got["seed"]).toBe(7);
    const t = await recorded(1, "the call recorded", { timeoutMs: 30_000 });
    expect(JSON.stringify((t.calls[0] as unknown as Call).messages) === JSON.stringify(m1)).toBe(true);
  });

  it("keeps a /v1/completions text prompt exact when a delta boundary falls inside a surrogate pair", async () => {
    const { claim, recorded, exportLines, end } = await setup();
    // The prompt ends with the high half of an emoji; the next prompt completes it.
    const p1 = "Q: 😀 \ud83d";
    const r1 = await send(claim, "/completions", ensureAscii({ model: "policy", prompt: p1 }));
    expect(r1.status).toBe(200);
    const a1 = (JSON.parse(r1.text) as { choices: { text: string }[] }).choices[0]!.text;
    const p2 = `${p1}${a1}\ude00 𠀋 more`;
    expect((await send(claim, "/completions", ensureAscii({ model: "policy", prompt: p2 }))).status).toBe(200);
    const p3 = `${p1}\ude00 rewritten`;
    expect((await send(claim, "/completions", ensureAscii({ model: "policy", prompt: p3 }))).status).toBe(200);
    expect((await end()).success).toBe(true);
    await recorded(3, "the three calls recorded", { ended: true, timeoutMs: 30_000 });
    const exported = (await exportLines())[0] as { calls: { params: { prompt: unknown } }[] };
    expect(exported.calls.map((c) => c.params.prompt)).toEqual([p1, p2, p3]);
  });
});
