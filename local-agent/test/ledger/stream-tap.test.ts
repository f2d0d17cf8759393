/**
 * The gateway's tap on streamed answers, against real upstreams: SSE framed with CRLF or with an
 * event's data over several lines (both valid SSE) is read and rewritten as with LF, and an
 * answer the gateway streams itself (SGLang's whole answer, with capture tokens) carries what
 * the upstream's own stream would have: the client's logprobs, usage only when asked. A stream's
 * usage is asked for to be recorded, and the client that did not ask gets the stream it would
 * have got without it, byte for byte. A stream that stops without ending as OpenAI streams end
 * is recorded as broken off.
 */
import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { CaptureMode } from "../../../src/protocol/ledger";
import type { RelayEnvelope } from "../../../src/protocol/relay";
import { CallTap } from "../../src/ledger/call-tap";
import { envelope, post } from "../gateway/envelope";
import { bodyText, serveHttp } from "../support/http-server";
import { callContext, recordingGateway, recordingGatewayOnModel, recordOf, type RecordingGateway } from "./recording-gateway";
import { startTokenModel, type TokenModel } from "./token-model";

const SECRET = "stream-tap-secret";
let crlf: { url: string; close(): Promise<void> };
let sglang: TokenModel;
let vllm: TokenModel;
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
    if ((r["stream_options"] as { include_usage?: boolean } | undefined)?.include_usage === true) res.write(ev({ ...base, choices: [], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } }));
    res.end(r["model"] === "multiline" ? "data: [DONE]\n\n" : "data: [DONE]\r\n\r\n");
  });
  return { url: `${server.origin}/v1`, close: server.close };
}

beforeAll(async () => {
  crlf = await startCrlfModel();
  sglang = await startTokenModel("sglang");
  vllm = await startTokenModel("vllm");
  onVllm = await recordingGateway(SECRET, "vllm");
  onSglang = await recordingGateway(SECRET, "sglang");
});
afterAll(async () => {
  await onVllm?.gateway.close();
  await onSglang?.gateway.close();
  await crlf?.close();
  await sglang?.close();
  await vllm?.close();
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
    const request = { model: "tiny", messages: [{ role: "user", content: "hi" }], stream: true };
    const env = call(crlf.url, request, "messages");
    const passed = await post(onVllm.url, env, SECRET);
    expect(passed.text).toContain("\r\n\r\n");
    // The usage chunk the gateway asked for is taken out; the rest is what the upstream sends anyone.
    const direct = await fetch(`${crlf.url}/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(request) });
    expect(passed.text).toBe(await direct.text());
    const rec = await recordOf(onVllm, env);
    expect(rec.body.answer).toEqual({ role: "assistant", content: "hi" });
    expect(rec.usage).toEqual({ prompt_tokens: 3, completion_tokens: 2 });
  });

  it("records the usage of a streamed call whose client did not ask for it, and sends the client the stream it would have got", async () => {
    const request = { model: "tiny", messages: [{ role: "user", content: "hello" }], stream: true };
    const env = call(vllm.url, request, "messages");
    const answer = await post(onVllm.url, env, SECRET);
    expect(answer.status).toBe(200);
    const served = vllm.served.at(-1)!;
    const record = await recordOf(onVllm, env);
    expect(record.status).toBe(200);
    expect(record.usage).toEqual({ prompt_tokens: served.prompt.length, completion_tokens: served.completion.length });
    expect(served.request).toEqual({ ...request, stream_options: { include_usage: true } });
    // Byte for byte the stream of a call the gateway does not record: no usage, which the client did not ask for.
    const plain = await post(onVllm.url, call(vllm.url, request, "off"), SECRET);
    expect(answer.text).toBe(plain.text);
    expect(answer.text).not.toContain('"usage"');
  });

  it("passes a stream on byte for byte however it is cut into pieces, without the usage chunk only it asked for", () => {
    const env = call("http://127.0.0.1:1/v1", { model: "tiny", messages: [{ role: "user", content: "hi" }], stream: true }, "messages");
    const events = ['data: {"id":"c","choices":[{"index":0,"delta":{"content":"h\u00e9llo"}}]}', ": keep-alive", 'data: {"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}', "data: [DONE]"];
    for (const eol of ["\n", "\r\n", "\r"]) {
      const bytes = Buffer.from(events.map((e) => e + eol + eol).join(""));
      const want = events.filter((e) => !e.includes("usage")).map((e) => e + eol + eol).join("");
      for (let cut = 1; cut < bytes.length; cut++) {
        const tap = new CallTap({ ...env, request: env.request! }, env.call!, null, "vllm", Date.now, Date.now());
        tap.answering(200);
        const out = [tap.chunk(bytes.subarray(0, cut)), tap.chunk(bytes.subarray(cut)), tap.endStream()].map(String).join("");
        expect(out, `${JSON.stringify(eol)} cut at ${cut}`).toBe(want);
        expect(tap.finish(false).answer).toMatchObject({ message: { content: "héllo" }, usage: { prompt_tokens: 3, completion_tokens: 2 } });
      }
    }
  });

  it("passes on at once an event the redaction handed on to the CR of its CRLF blank line, not with the model's next event", () => {
    const env = call("http://127.0.0.1:1/v1", { model: "tiny", messages: [{ role: "user", content: "hi" }], stream: true }, "messages");
    const tap = new CallTap({ ...env, request: env.request! }, env.call!, null, "vllm", Date.now, Date.now());
    tap.answering(200);
    const first = 'data: {"id":"c","choices":[{"index":0,"delta":{"content":"a"}}]}\r\n\r';
    // The model then takes its time over the next token: the client must have this one meanwhile.
    expect(String(tap.chunk(Buffer.from(first)))).toBe(first);
    // The LF of that CRLF goes on; the usage chunk only the tap asked for does not, nor the LF of its own CRLF.
    expect(String(tap.chunk(Buffer.from('\ndata: {"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\r\n\r')))).toBe("\n");
    expect(String(tap.chunk(Buffer.from("\ndata: [DONE]\r\n\r\n")))).toBe("data: [DONE]\r\n\r\n");
    expect(tap.endStream()).toBe("");
    expect(tap.finish(false).answer).toMatchObject({ message: { content: "a" }, usage: { prompt_tokens: 3, completion_tokens: 1 } });
  });

  it("asks for usage beside the token fields, and gives it only to a client that asked", async () => {
    const request = { model: "tiny", messages: [{ role: "user", content: "hello" }], stream: true };
    const tokens = await post(onVllm.url, call(vllm.url, request, "tokens"), SECRET);
    expect(vllm.requests.at(-1)).toMatchObject({ return_token_ids: true, stream_options: { include_usage: true } });
    expect(tokens.text).not.toContain('"usage"');
    const env = call(vllm.url, { ...request, stream_options: { include_usage: true } }, "tokens");
    const asked = await post(onVllm.url, env, SECRET);
    const events = dataEvents(asked.text);
    expect(events.at(-1)).toMatchObject({ choices: [], usage: { completion_tokens: vllm.served.at(-1)!.completion.length } });
    expect((await recordOf(onVllm, env)).usage).toMatchObject({ completion_tokens: vllm.served.at(-1)!.completion.length });
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

describe("gateway tap: capture off reads a stream only for its error", () => {
  it("fails a call whose stream's last event, without its blank line, is an error, as with capture on", () => {
    const last = Buffer.from(`data: ${JSON.stringify({ error: { message: "the model crashed", code: 500 } })}\n`);
    const errors = (["messages", "off"] as const).map((capture) => {
      const env = envelope({ request: { model: "tiny", messages: [{ role: "user", content: "a" }], stream: true }, call: callContext(capture) });
      const tap = new CallTap({ ...env, request: env.request! }, callContext(capture), null, null, () => 0, 0);
      tap.answering(200);
      // What the gateway's redaction hands on at the stream's end: its last event as it came.
      tap.chunk(last);
      tap.endStream();
      return tap.finish(false).error;
    });
    expect(errors).toEqual(["500: the model crashed", "500: the model crashed"]);
  });
});

describe("streams that do not end as OpenAI streams end", () => {
  const base = { id: "c", object: "chat.completion.chunk", created: 1, model: "tiny" };
  const ev = (o: unknown): string => `data: ${JSON.stringify(o)}\n\n`;
  /**
   * A vLLM-shaped model. Model "cut": its stream stops cleanly (the HTTP response ends) after two
   * content chunks, with no finish_reason and no [DONE], as a proxy in front of vLLM does when its
   * engine is killed or its read timeout fires. Model "no-done": a finish_reason, then no [DONE]
   * (servers that leave it out).
   */
  const m = recordingGatewayOnModel("stream-end-secret", async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const r = JSON.parse(await bodyText(req)) as Record<string, unknown>;
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write(ev({ ...base, choices: [{ index: 0, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }] }));
    if (r["model"] === "cut") {
      res.write(ev({ ...base, choices: [{ index: 0, delta: { content: "The answer is" }, logprobs: null, finish_reason: null }] }));
      res.end();
      return;
    }
    res.write(ev({ ...base, choices: [{ index: 0, delta: { content: "ok" }, logprobs: null, finish_reason: "stop" }] }));
    res.end(r["model"] === "no-done" ? "" : "data: [DONE]\n\n");
  });

  // What the user sees: the stream stops after "The answer is" with no finish_reason and no
  // `data: [DONE]` (the model server or a proxy in front of it died or timed out, closing the
  // response cleanly). The ledger records the call as a success (status 200, error null), so the
  // half answer is a turn of `training`, its tokens in the loss as if the model had chosen to stop
  // there, and the trajectory reads as complete. The gateway knows the stream ended without its
  // terminator and without a finish_reason; it should record the call as broken off
  // (`upstream_stream_broken`), as it does when the connection breaks, so it is no turn.
  it("records a stream that ended without [DONE] or a finish_reason as broken, not as a turn", async () => {
    const env = m.call(`ep-${randomUUID()}`, { model: "cut", messages: [{ role: "user", content: "hi" }], stream: true }, "messages");
    const on = await m.post(env);
    expect(on.status).toBe(200);
    expect(on.text).not.toContain("[DONE]");
    expect(dataEvents(on.text).at(-1)).toMatchObject({ error: { code: "upstream_stream_broken", type: "api_error" } });
    const rec = await m.recordOf(env);
    expect(rec.body.answer).toEqual({ role: "assistant", content: "The answer is" });
    expect(rec.finish_reason).toBeNull();
    expect(rec.error).toMatch(/^upstream_stream_broken: the inference upstream broke off mid-stream: /);
  });

  it("records a stream with a finish_reason but no [DONE] as the success it is, and passes it on as it came", async () => {
    const env = m.call(`ep-${randomUUID()}`, { model: "no-done", messages: [{ role: "user", content: "hi" }], stream: true }, "messages");
    const on = await m.post(env);
    expect(on.text).not.toContain("error");
    const rec = await m.recordOf(env);
    expect(rec).toMatchObject({ status: 200, error: null, finish_reason: "stop" });
    expect(rec.body.answer).toEqual({ role: "assistant", content: "ok" });
  });
});
