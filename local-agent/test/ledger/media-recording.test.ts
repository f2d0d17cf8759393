/**
 * What the gateway's recorder makes of a vision-language episode (the real Gateway and
 * CallRecorder, signed envelopes, a real HTTP model): each large screenshot taken out of the
 * records and handed to the shipper once, the records holding its reference, so that one
 * screenshot over the record cap no longer truncates every call of its episode and later calls
 * are stored as what they add (docs/ledger.md, "Media").
 */
import { createHash, randomBytes, randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { describe, expect, it } from "vitest";
import type { CallRecord } from "../../../src/protocol/ledger";
import { inlineMedia, mediaRef } from "../../../src/ledger/media-refs";
import { recordingGatewayOnModel } from "./recording-gateway";

async function answer(req: IncomingMessage, res: ServerResponse): Promise<void> {
  for await (const _ of req) void _;
  res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ id: "x", object: "chat.completion", created: 1, model: "m", choices: [{ index: 0, message: { role: "assistant", content: "click(10, 20)" }, finish_reason: "stop" }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } }));
}

const recording = recordingGatewayOnModel("media-recording-secret", answer);

const dataUrl = (raw: number): string => `data:image/png;base64,${randomBytes(raw).toString("base64")}`;
const sha = (s: string): string => createHash("sha256").update(s, "utf8").digest("hex");
const bodyBytes = (r: CallRecord): number => Buffer.byteLength(JSON.stringify(r.body));

/** `turns` calls of one claim, each answer then a short user turn appended; the records and the messages each call sent. */
async function episode(first: unknown[], turns: number): Promise<{ records: CallRecord[]; sent: unknown[][] }> {
  const ep = `ep-${randomUUID()}`;
  const messages = [...first];
  const records: CallRecord[] = [];
  const sent: unknown[][] = [];
  for (let i = 0; i < turns; i++) {
    sent.push([...messages]);
    const env = recording.call(ep, { model: "tiny", messages: [...messages] }, "messages");
    const r = await recording.post(env);
    expect(r.status).toBe(200);
    records.push(await recording.recordOf(env));
    messages.push((JSON.parse(r.text) as { choices: { message: unknown }[] }).choices[0]!.message, { role: "user", content: `turn ${i}` });
  }
  return { records, sent };
}

describe("ledger media: the recorder", () => {
  it("records the short turns after a 2 MB screenshot whole, as deltas, and hands the screenshot to the shipper once", async () => {
    const url = dataUrl(1_500_000);
    const shot = { type: "image_url", image_url: { url, detail: "high" } };
    const { records, sent } = await episode([{ role: "system", content: "desk" }, { role: "user", content: [{ type: "text", text: "look" }, shot] }], 4);
    expect(records.map((r) => [r.truncated, r.body.prefix === null, r.body.messages.length])).toEqual([
      [false, true, 2],
      // Each later call adds one user turn to the one before and its answer.
      [false, false, 1],
      [false, false, 1],
      [false, false, 1],
    ]);
    // The first record refers to the screenshot; only it carries the screenshot, once.
    expect(records[0]!.body.messages[1]).toEqual({ role: "user", content: [{ type: "text", text: "look" }, { type: "image_url", image_url: { url: mediaRef(sha(url)), detail: "high" } }] });
    expect(records.map((r) => [...(recording.gw.media.get(r.call_id)?.keys() ?? [])])).toEqual([[sha(url)], [], [], []]);
    expect(recording.gw.media.get(records[0]!.call_id)!.get(sha(url)) === url).toBe(true);
    // The screenshot put back gives the first call's messages exactly.
    expect(JSON.stringify(inlineMedia(records[0]!.body.messages, recording.gw.media.get(records[0]!.call_id)!)) === JSON.stringify(sent[0])).toBe(true);
    const stored = records.reduce((n, r) => n + bodyBytes(r), 0);
    expect(stored, `${stored} bytes of records for 4 calls`).toBeLessThan(2000);
  });

  it("keeps small images inline, and stores a client's own string that begins with rx-media: by reference, so no stored string is mistaken for one", async () => {
    const small = dataUrl(3000);
    const lookalike = `${mediaRef("0".repeat(64))}`;
    const { records } = await episode([{ role: "user", content: [{ type: "text", text: lookalike }, { type: "image_url", image_url: { url: small } }] }], 1);
    const r = records[0]!;
    const media = recording.gw.media.get(r.call_id)!;
    expect([...media.keys()]).toEqual([sha(lookalike)]);
    expect(r.body.messages).toEqual([{ role: "user", content: [{ type: "text", text: mediaRef(sha(lookalike)) }, { type: "image_url", image_url: { url: small } }] }]);
    expect(inlineMedia(r.body.messages, media)).toEqual([{ role: "user", content: [{ type: "text", text: lookalike }, { type: "image_url", image_url: { url: small } }] }]);
  });

  it("keeps a text part's text in the record though it begins with data: (pasted server-sent events)", async () => {
    const events = `data: ${JSON.stringify({ choices: [{ delta: { content: "x".repeat(20_000) } }] })}\n\n`;
    const { records } = await episode([{ role: "user", content: [{ type: "text", text: events }] }], 1);
    expect(records[0]!.body.messages).toEqual([{ role: "user", content: [{ type: "text", text: events }] }]);
    expect(recording.gw.media.get(records[0]!.call_id)!.size).toBe(0);
  });

  it("takes audio (input_audio's base64) out as it does images", async () => {
    const audio = randomBytes(40_000).toString("base64");
    const { records } = await episode([{ role: "user", content: [{ type: "input_audio", input_audio: { data: audio, format: "wav" } }] }], 2);
    expect(records[0]!.body.messages).toEqual([{ role: "user", content: [{ type: "input_audio", input_audio: { data: mediaRef(sha(audio)), format: "wav" } }] }]);
    expect(records.map((r) => recording.gw.media.get(r.call_id)!.size)).toEqual([1, 0]);
    expect(records[1]!.body.prefix).not.toBeNull();
  });
});
