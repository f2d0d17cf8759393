/**
 * The gateway's tap on streamed answers, against real upstreams: SSE framed with CRLF or with an
 * event's data over several lines (both valid SSE) is read and rewritten as with LF, and an
 * answer the gateway streams itself (SGLang's whole answer, with capture tokens) carries what
 * the upstream's own stream would have: the client's logprobs, usage only when asked.
 */
import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { CaptureMode } from "../../../src/protocol/ledger";
import type { RelayEnvelope } from "../../../src/protocol/relay";
import { envelope, post } from "../gateway/envelope";
import { bodyText, serveHttp } from "../support/http-server";
import { callContext, recordingGateway, recordOf, type RecordingGateway } from "./recording-gateway";
import { startTokenModel, type TokenModel } from "./token-model";

const SECRET = "stream-tap-secret";
let crlf: { url: string; close(): Promise<void> };
let sglang: TokenModel;
let onVllm: RecordingGateway;
let onSglang: RecordingGateway;

/** A vLLM-shaped streaming server whose SSE lines end in CRLF (as some servers and proxies send), or, for model "multiline", whose events put their JSON over several data lines. */
async function startCrlfModel() {
  const server = await serveHttp(async (req: IncomingMessage, res: ServerResponse) => {
    const r = JSON.parse(await bodyText(req)) as Record<string, unknown>;
    const ids = r["return_token_ids"] === true;
    const base = { id: "c", object: "chat.completion.chunk", created: 1, model: "tiny" };
    const ev = r["model"] === "multiline" ? (o: unknown) => `data: ${JSON.stringify(o, null, 1).replace(/\n/g, "\ndata: ")}\n\n` : (o: unknown) => `data: ${JSON.stringify(o)}\r\n\r\n`;
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write(ev({ ...base, choices: [{ index: 0, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }], ...(ids ? { prompt_token_ids: [1, 2, 3] } : {}) }));
    res.write(ev({ ...base, choices: [{ index: 0, delta: { content: "hi" }, logprobs: r["logprobs"] === true ? { content: [{ token: "hi", logprob: -0.5, bytes: [], top_logprobs: [] }] } : null, finish_reason: null, ...(ids ? { token_ids: [7] } : {}) }] }));
    res.write(ev({ ...base, choices: [{ index: 0, delta: {}, logprobs: r["logprobs"] === true ? { content: [{ token: "", logprob: -0.25, bytes: [], top_logprobs: [] }] } : null, finish_reason: "stop", ...(ids ? { token_ids: [9] } : {}) }] }));
    res.end(r["model"] === "multiline" ? "data: [DONE]\n\n" : "data: [DONE]\r\n\r\n");
  });
  return { url: `${server.origin}/v1`, close: server.close };
}

beforeAll(async () => {
  crlf = await startCrlfModel();
  sglang = await startTokenModel("sglang");
  onVllm = await recordingGateway(SECRET, "vllm");
  onSglang = await recordingGateway(SECRET, "sglang");
});
afterAll(async () => {
  await onVllm?.gateway.close();
  await onSglang?.gateway.close();
  await crlf?.close();
  await sglang?.close();
});

const call = (base: string, request: Record<string, unknown>, capture: CaptureMode): RelayEnvelope => envelope({ episode_uuid: `ep-${randomUUID()}`, trainer_base_url: base, request, call: callContext(capture) });
const dataEvents = (text: string) => text.split(/\r?\n/).filter((l) => l.startsWith("data: {")).map((l) => JSON.parse(l.slice(6)) as Record<string, any>);

describe("the call tap on streamed answers", () => {
  it("reads CRLF-framed SSE: the client gets no token field it did not ask for, the record has the answer and its tokens", async () => {
    const request = { model: "tiny", messages: [{ role: "user", content: "hi" }], stream: true };
    const env = call(crlf.url, request, "tokens");
    const on = await post(onVllm.url, env, SECRET);
    const rec = await recordOf(onVllm, env);
    expect(on.text).not.toContain("token_ids");
    expect(rec.body.answer).toEqual({ role: "assistant", content: "hi" });
    expect(rec.body.tokens).not.toBeNull();
  });

  it("records a CRLF-framed answer with capture messages too, passing its bytes through as they came", async () => {
    const env = call(crlf.url, { model: "tiny", messages: [{ role: "user", content: "hi" }], stream: true }, "messages");
    const passed = await post(onVllm.url, env, SECRET);
    expect(passed.text).toContain("\r\n\r\n");
    const rec = await recordOf(onVllm, env);
    expect(rec.body.answer).toEqual({ role: "assistant", content: "hi" });
  });

  it("reads an event whose data spans several lines as one value, and sends it on as one line", async () => {
    const env = call(crlf.url, { model: "multiline", messages: [{ role: "user", content: "hi" }], stream: true }, "tokens");
    const on = await post(onVllm.url, env, SECRET);
    const rec = await recordOf(onVllm, env);
    expect(on.text).not.toContain("token_ids");
    expect(rec.body.tokens).not.toBeNull();
    expect(dataEvents(on.text).map((e) => e["choices"]?.[0]?.delta?.content ?? "").join("")).toBe("hi");
  });

  it("keeps the logprobs a streaming client asked for when it streams an SGLang answer itself", async () => {
    const request = { model: "tiny", messages: [{ role: "user", content: "hi" }], stream: true, logprobs: true };
    // Without recording tokens the call streams straight from SGLang, with logprobs in each chunk.
    const plain = await post(onSglang.url, call(sglang.url, request, "messages"), SECRET);
    const tokens = await post(onSglang.url, call(sglang.url, request, "tokens"), SECRET);
    const lp = (t: string) => dataEvents(t).flatMap((e) => (e["choices"]?.[0]?.logprobs?.content ?? []).map((x: { logprob: number }) => x.logprob));
    expect(lp(tokens.text)).toEqual(lp(plain.text));
  });

  it("sends usage in a stream it makes only when asked, in a last chunk without choices", async () => {
    const request = { model: "tiny", messages: [{ role: "user", content: "hi" }], stream: true };
    const plain = await post(onSglang.url, call(sglang.url, request, "messages"), SECRET);
    const tokens = await post(onSglang.url, call(sglang.url, request, "tokens"), SECRET);
    const hasUsage = (t: string) => dataEvents(t).some((e) => e["usage"] != null);
    expect(hasUsage(tokens.text)).toBe(hasUsage(plain.text));
    const asked = await post(onSglang.url, call(sglang.url, { ...request, stream_options: { include_usage: true } }, "tokens"), SECRET);
    const events = dataEvents(asked.text);
    expect(events.at(-1)).toMatchObject({ object: "chat.completion.chunk", choices: [], usage: { completion_tokens: expect.any(Number) } });
    expect(events.slice(0, -1).some((e) => e["usage"] != null)).toBe(false);
  });
});
