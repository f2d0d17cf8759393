/**
 * What the gateway's recorder stores for vision-language episodes, measured on the records it
 * ships (the real Gateway and CallRecorder, signed envelopes, a real HTTP model): a screenshot is
 * stored once per episode, not once per call (DESIGN.md section 8), when the client keeps its
 * messages as content parts, and when many claims each hold one under the agent's default
 * history bound (the gateway keeps digests of a claim's messages, not the messages).
 */
import { randomBytes, randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { describe, expect, it } from "vitest";
import type { CallRecord } from "../../../src/protocol/ledger";
import { Gateway } from "../../src/gateway/server";
import { fixedSecret } from "../../src/gateway/secret";
import { CallRecorder, DEFAULT_HISTORY_BYTES } from "../../src/ledger/recorder";
import { silentLogger } from "../../src/log";
import { post } from "../gateway/envelope";
import { bodyText } from "../support/http-server";
import { recordingGatewayOnModel } from "./recording-gateway";
import { waitUntil } from "../support/wait";

const SECRET = "vision-storage-secret";

async function answer(req: IncomingMessage, res: ServerResponse): Promise<void> {
  await bodyText(req);
  res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ id: "x", object: "chat.completion", created: 1, model: "m", choices: [{ index: 0, message: { role: "assistant", content: "click(10, 20)" }, finish_reason: "stop" }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } }));
}

const recording = recordingGatewayOnModel(SECRET, answer);

const bodyBytes = (r: CallRecord): number => Buffer.byteLength(JSON.stringify(r.body));
const image = (raw: number) => ({ type: "image_url", image_url: { url: `data:image/png;base64,${randomBytes(raw).toString("base64")}` } });

/** `turns` calls of one claim; after each, the answer goes back as its one text part, then a short user turn as parts. */
async function episodeInParts(first: unknown[], turns: number): Promise<CallRecord[]> {
  const ep = `ep-${randomUUID()}`;
  const messages = [...first];
  const records: CallRecord[] = [];
  for (let i = 0; i < turns; i++) {
    const env = recording.call(ep, { model: "tiny", messages: [...messages] }, "messages");
    const r = await recording.post(env);
    expect(r.status).toBe(200);
    records.push(await recording.recordOf(env));
    const text = (JSON.parse(r.text) as { choices: { message: { content: string } }[] }).choices[0]!.message.content;
    messages.push({ role: "assistant", content: [{ type: "text", text }] }, { role: "user", content: [{ type: "text", text: `turn ${i}` }] });
  }
  return records;
}

/** The agent's own recorder behind a gateway, with `historyBytes` as its memory bound; the records by call id. */
async function recorderGateway(historyBytes: number) {
  const records = new Map<string, CallRecord>();
  const recorder = new CallRecorder({ historyBytes, sink: (r) => void records.set(r.call_id, r), logger: silentLogger });
  const gateway = new Gateway({ host: "127.0.0.1", port: 0, secret: fixedSecret(SECRET), models: ["policy"], zmqReceiveTimeoutMs: 2000, logger: silentLogger, upstream: null, sessionPath: false, ledger: { recorder, tokenDialect: "vllm" } });
  const url = await gateway.listen();
  const send = async (episode: string, messages: unknown[]): Promise<string> => {
    const env = recording.call(episode, { model: "tiny", messages }, "messages");
    expect((await post(url, env, SECRET)).status).toBe(200);
    return env.call!.call_id;
  };
  return { recorder, records, gateway, send };
}

/**
 * Every claim's first call, then every claim's second, round-robin as concurrent rollouts call:
 * the second calls' records.
 */
async function roundRobin(g: Awaited<ReturnType<typeof recorderGateway>>, claims: number, first: (i: number) => unknown[]): Promise<CallRecord[]> {
  for (let i = 0; i < claims; i++) await g.send(`ep-${i}`, first(i));
  const second: string[] = [];
  for (let i = 0; i < claims; i++) second.push(await g.send(`ep-${i}`, [...first(i), { role: "assistant", content: "click(10, 20)" }, { role: "user", content: "next" }]));
  return waitUntil(() => (second.every((id) => g.records.has(id)) ? second.map((id) => g.records.get(id)!) : null), "the second calls recorded", 60_000);
}

describe("a screenshot's storage over an episode", () => {
  it("stores a 700 KB screenshot once over 6 calls when the client keeps its messages as content parts", async () => {
    const shot = image(500_000);
    const records = await episodeInParts([{ role: "system", content: "desk" }, { role: "user", content: [{ type: "text", text: "look" }, shot] }], 6);
    const total = records.reduce((n, r) => n + bodyBytes(r), 0);
    const once = Buffer.byteLength(JSON.stringify(shot));
    // Stored as deltas: the screenshot once, plus a few hundred bytes a call.
    expect(total, `stored ${total} bytes over 6 calls for one ${once}-byte screenshot`).toBeLessThan(once * 1.2);
    expect(records.map((r) => r.body.prefix === null)).toEqual([true, false, false, false, false, false]);
    // Each later call refers to the previous one up to its answer, and stores the answer in the form it was sent back.
    expect(records.slice(1).map((r) => [r.body.prefix?.count, r.body.messages])).toEqual(
      [2, 4, 6, 8, 10].map((count, i) => [
        count,
        [
          { role: "assistant", content: [{ type: "text", text: "click(10, 20)" }] },
          { role: "user", content: [{ type: "text", text: `turn ${i}` }] },
        ],
      ]),
    );
  });
});

describe("many concurrent episodes under the agent's history bound", () => {
  it("stores each claim's second turn as a delta when 280 claims each hold a 1 MB screenshot (round-robin, as concurrent rollouts call)", async () => {
    const g = await recorderGateway(DEFAULT_HISTORY_BYTES);
    try {
      const CLAIMS = 280;
      const shot = image(750_000);
      const rs = await roundRobin(g, CLAIMS, (i) => [{ role: "system", content: "desk" }, { role: "user", content: [{ type: "text", text: `episode ${i}` }, shot] }]);
      const whole = rs.filter((r) => r.body.prefix === null).length;
      const stored = rs.reduce((n, r) => n + bodyBytes(r), 0);
      expect(whole, `${whole} of ${CLAIMS} second calls stored whole, ${stored} bytes for ${CLAIMS} turns that each add ~60 bytes`).toBe(0);
      expect(stored).toBeLessThan(CLAIMS * 2000);
      // What the history holds for 280 claims of 1 MB each: their messages' digests, a kilobyte or so a claim.
      expect(g.recorder.history.size).toBe(CLAIMS);
      expect(g.recorder.history.bytes, `${g.recorder.history.bytes} bytes held for ${CLAIMS} claims`).toBeLessThan(CLAIMS * 2048);
    } finally {
      await g.gateway.close();
    }
  }, 240_000);

  it("keeps 40 claims that each read a 1 MB document under a 16 MiB bound, each second turn a delta", async () => {
    // Text, not media: a coding agent that read a large file. Held whole, 40 of them fill 16 MiB
    // two and a half times over, and round-robin calls evict each claim before its next.
    const g = await recorderGateway(16 * 1024 * 1024);
    try {
      const doc = "x = 1\n".repeat(175_000);
      const rs = await roundRobin(g, 40, (i) => [{ role: "system", content: "code" }, { role: "user", content: `episode ${i}\n${doc}` }]);
      expect(rs.filter((r) => r.body.prefix === null).length).toBe(0);
      expect(rs.map((r) => [r.body.prefix?.count, r.body.messages])).toEqual(new Array(40).fill([3, [{ role: "user", content: "next" }]]));
    } finally {
      await g.gateway.close();
    }
  }, 120_000);
});
