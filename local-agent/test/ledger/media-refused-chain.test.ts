/**
 * A medium an older exchange refuses 413: the calls naming it were sent `truncated` (no messages,
 * no prefix), while the recorder had kept such a call as the claim's head, so the claim's next
 * call, a delta of it, and every call after it rebuilt as unknown (prefix_missing). The shipper
 * now sends them with a marker in the medium's place: the claim's calls rebuild whole, short of
 * that medium. A real gateway, recorder and shipper (wired as agent.ts does), a real model.
 */
import { createHash, randomBytes, randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ExchangeError } from "../../../src/client";
import { itemsOf } from "../../../src/ledger/chain";
import { MEDIA_REF_PREFIX, missingMediaRef } from "../../../src/ledger/media-refs";
import { rebuildAll, type StoredCall } from "../../../src/ledger/rebuild";
import type { CallBatch, CallRecord } from "../../../src/protocol/ledger";
import { Gateway } from "../../src/gateway/server";
import { fixedSecret } from "../../src/gateway/secret";
import { realClock } from "../../src/clock";
import { CallRecorder } from "../../src/ledger/recorder";
import { CallShipper } from "../../src/ledger/shipper";
import { silentLogger } from "../../src/log";
import { envelope, post } from "../gateway/envelope";
import { callContext } from "./recording-gateway";
import { serveHttp, type TestServer } from "../support/http-server";
import { waitUntil } from "../support/wait";

const SECRET = "media-refused-chain";
let model: TestServer;
let gateway: Gateway;
let url: string;
let shipper: CallShipper;
const sent: CallBatch[] = [];

beforeAll(async () => {
  model = await serveHttp(async (req: IncomingMessage, res: ServerResponse) => {
    for await (const _ of req) void _;
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ id: "x", object: "chat.completion", created: 1, model: "m", choices: [{ index: 0, message: { role: "assistant", content: "click(10, 20)" }, finish_reason: "stop" }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } }));
  });
  shipper = new CallShipper({
    post: async (b) => (sent.push(b), { recorded: b.calls.length, duplicates: 0 }),
    // An exchange older than the agent: its 4 MiB body limit refuses a large medium.
    putMedia: () => Promise.reject(new ExchangeError(413, "payload_too_large", "The request body exceeds 4194304 bytes.")),
    clock: realClock,
    logger: silentLogger,
    backoff: { initialMs: 50, maxMs: 200, random: () => 0 },
    lingerMs: 20,
  });
  const recorder = new CallRecorder({ historyBytes: 64 * 1024 * 1024, sink: (r, bytes, m) => shipper.enqueue(r, bytes, m), logger: silentLogger });
  gateway = new Gateway({ host: "127.0.0.1", port: 0, secret: fixedSecret(SECRET), models: ["policy"], zmqReceiveTimeoutMs: 2000, logger: silentLogger, upstream: null, sessionPath: false, ledger: { recorder, tokenDialect: "vllm" } });
  url = await gateway.listen();
});
afterAll(async () => {
  await shipper?.close(0);
  await gateway?.close();
  await model?.close();
});

const stored = (r: CallRecord): StoredCall => ({ prefix: r.body.prefix, messages: r.body.messages, answer: r.body.answer, tokens: null, prompt: null, tools: r.body.tools, toolsFromPrefix: r.body.tools_from_prefix });

describe("a medium the exchange refused, and the calls after the one naming it", () => {
  it("sends the calls naming it with a marker in its place, so the claim's later calls rebuild whole", async () => {
    const episode = `ep-${randomUUID()}`;
    const image = `data:image/png;base64,${randomBytes(12 * 1024).toString("base64")}`;
    const u1 = { role: "user", content: [{ type: "text", text: "what is on the screen?" }, { type: "image_url", image_url: { url: image } }] };
    const a1 = { role: "assistant", content: "click(10, 20)" };
    const u2 = { role: "user", content: "done; next?" };
    const calls = [[u1], [u1, a1, u2]].map((messages) => envelope({ episode_uuid: episode, trainer_base_url: `${model.origin}/v1`, request: { model: "m", messages }, call: callContext("messages") }));
    for (const env of calls) {
      expect((await post(url, env, SECRET)).status).toBe(200);
      await waitUntil(() => sent.flatMap((b) => b.calls).some((c) => c.call_id === env.call?.call_id), "the call shipped");
    }
    const records = calls.map((env) => sent.flatMap((b) => b.calls).find((c) => c.call_id === env.call?.call_id)!);
    // The medium's place holds a marker that names it; no record names a medium the exchange lacks.
    const marker = missingMediaRef(createHash("sha256").update(image).digest("hex"));
    expect(JSON.stringify(records)).not.toContain(MEDIA_REF_PREFIX);
    expect(records.map((r) => r.truncated)).toEqual([false, false]);
    // The second call is stored as what it adds to the first, and rebuilds whole.
    expect(records[1]!.body.prefix?.call_id).toBe(records[0]!.call_id);
    const rebuilt = rebuildAll(new Map(records.map((r) => [r.call_id, stored(r)])));
    const second = rebuilt.get(records[1]!.call_id)!;
    expect(second.messages === null ? null : itemsOf(second.messages)).toEqual([
      { role: "user", content: [{ type: "text", text: "what is on the screen?" }, { type: "image_url", image_url: { url: marker } }] },
      a1,
      u2,
    ]);
  });
});
