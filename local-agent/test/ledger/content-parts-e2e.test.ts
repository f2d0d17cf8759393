/**
 * A vision agent that keeps every message as content parts (smolagents and other multimodal
 * frameworks keep their memory so), end to end: the real Worker (Miniflare, D1 and R2), the real
 * agent and its gateway, and an HTTP model answering plain strings. The client sends each answer
 * back as its one text part: the same conversation to the model, so each call is stored as what
 * it adds, and the trajectory and the export give back each call's messages in the form that call
 * sent them.
 */
import { randomBytes } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { describe, expect, it } from "vitest";
import { bodyText, serveHttp } from "../support/http-server";
import { ledgerWorld } from "./ledger-world";

/** Every call answered with a short string, as a VLM server answers. */
async function answer(req: IncomingMessage, res: ServerResponse): Promise<void> {
  await bodyText(req);
  res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ id: "x", object: "chat.completion", created: 1, model: "m", choices: [{ index: 0, message: { role: "assistant", content: "click(10, 20)" }, finish_reason: "stop" }], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } }));
}

const world = ledgerWorld("content-parts", () => serveHttp(answer), (model) => `${model.origin}/v1`);

const setup = () => world.claimed({ engine: "parts", capture: "messages", weightVersion: 1, discardEpisodeTimeout: 120 });

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
    const { claim, recorded, end } = await setup();
    // A small screenshot: what a large one costs is vision-storage.test.ts's (the ledger keeps large media apart).
    const messages: unknown[] = [{ role: "system", content: [{ type: "text", text: "You operate a desktop." }] }, { role: "user", content: [{ type: "text", text: "look" }, { type: "image_url", image_url: { url: dataUrl(4500), detail: "high" } }] }];
    for (const next of ["more", "again"]) {
      const a = await send(claim, messages);
      messages.push({ role: "assistant", content: [{ type: "text", text: a }] }, { role: "user", content: [{ type: "text", text: next }] });
    }
    await send(claim, messages);
    expect((await end()).success).toBe(true);
    const t = await recorded(3, "the three calls recorded", { ended: true, timeoutMs: 30_000 });
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
    const { claim, recorded, exportLines, end } = await setup();
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
    const t = await recorded(3, "the three calls recorded", { ended: true, timeoutMs: 30_000 });
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
