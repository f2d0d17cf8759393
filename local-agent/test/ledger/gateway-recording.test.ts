/**
 * The gateway recording relayed calls for the trajectory ledger, over real sockets: signed
 * envelopes carrying a CallContext, the real Gateway and CallRecorder, and fake vLLM and SGLang
 * servers answering token ids and logprobs in those servers' exact shapes. A claim's records grow
 * with its conversations' length: two agents taking turns, or a prompt (text, or token ids)
 * growing on /v1/completions; a batch of prompts is stored whole.
 */
import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { isDeepStrictEqual } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { unpackFloats, unpackInts } from "../../../src/protocol/packed";
import type { CallRecord, CaptureMode } from "../../../src/protocol/ledger";
import type { RelayEnvelope } from "../../../src/protocol/relay";
import { CallRecorder, RECORD_BODY_CAP_BYTES } from "../../src/ledger/recorder";
import { silentLogger } from "../../src/log";
import { agentJetKey, envelope, post } from "../gateway/envelope";
import { startZmqModel, type ZmqModel } from "../gateway/zmq-model";
import { bodyText, serveHttp, type TestServer } from "../support/http-server";
import { callContext, recordingGateway, recordOf, type RecordingGateway } from "./recording-gateway";
import { END, logprobOf, promptIds, startTokenModel, type Served, type TokenModel } from "./token-model";

const SECRET = "ledger-test-secret";
let vllm: TokenModel;
let sglang: TokenModel;
let zmq: ZmqModel;
let fixed: TestServer;
let onVllm: RecordingGateway;
let onSglang: RecordingGateway;

beforeAll(async () => {
  vllm = await startTokenModel("vllm");
  sglang = await startTokenModel("sglang");
  zmq = await startZmqModel(`ipc:///tmp/rx-ledger-${randomUUID()}.sock`);
  fixed = await serveHttp(answerFixed);
  onVllm = await recordingGateway(SECRET, "vllm");
  onSglang = await recordingGateway(SECRET, "sglang");
});

afterAll(async () => {
  await onVllm?.gateway.close();
  await onSglang?.gateway.close();
  zmq?.close();
  await fixed?.close();
  await vllm?.close();
  await sglang?.close();
});

/** Answers every call, chat or completions, with the same short text: a conversation grows only by what its client adds. */
async function answerFixed(req: IncomingMessage, res: ServerResponse): Promise<void> {
  await bodyText(req);
  const chat = (req.url ?? "").endsWith("/chat/completions");
  const choice = chat ? { index: 0, message: { role: "assistant", content: FIXED }, finish_reason: "stop" } : { index: 0, text: FIXED, finish_reason: "stop" };
  res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ id: "x", object: chat ? "chat.completion" : "text_completion", created: 1, model: "tiny", choices: [choice], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } }));
}
const FIXED = " Action: look.";

function call(model: TokenModel, episode: string, request: Record<string, unknown>, capture: CaptureMode | null = "tokens", over: Partial<RelayEnvelope> = {}): RelayEnvelope {
  return envelope({ episode_uuid: episode, trainer_base_url: model.url, request, ...(capture === null ? {} : { call: callContext(capture) }), ...over });
}

const TOOLS = [{ type: "function", function: { name: "lookup", parameters: { type: "object", properties: { q: { type: "string" } } } } }];
const system = { role: "system", content: "be brief" };

/** SSE text's data events, parsed (without [DONE]). */
const events = (text: string): Record<string, unknown>[] => text.split("\n\n").filter((e) => e.startsWith("data: {")).map((e) => JSON.parse(e.slice(6)) as Record<string, unknown>);

/** Every key anywhere in a JSON value. */
function keysIn(v: unknown, into = new Set<string>()): Set<string> {
  if (Array.isArray(v)) for (const x of v) keysIn(x, into);
  else if (typeof v === "object" && v !== null) for (const [k, x] of Object.entries(v)) (into.add(k), keysIn(x, into));
  return into;
}

const TOKEN_KEYS = ["prompt_token_ids", "token_ids", "meta_info"];

/** A three-turn conversation with a tool call: the requests, the answers each got, the records. */
async function threeTurns(r: RecordingGateway, model: TokenModel, stream: boolean, thirdModel = "tiny") {
  const episode = `ep-${randomUUID()}`;
  const m1 = [system, { role: "user", content: "tool:weather" }];
  const e1 = call(model, episode, { model: "tiny", messages: m1, tools: TOOLS, stream, temperature: 0.7 });
  const a1 = await post(r.url, e1, SECRET);
  const toolCall = { id: "chatcmpl-tool-1", type: "function", function: { name: "lookup", arguments: '{"q":"weather"}' } };
  const m2 = [...m1, { role: "assistant", content: null, tool_calls: [toolCall] }, { role: "tool", tool_call_id: "chatcmpl-tool-1", content: "sunny" }];
  const e2 = call(model, episode, { model: "tiny", messages: m2, tools: TOOLS, stream, temperature: 0.7 });
  const a2 = await post(r.url, e2, SECRET);
  const m3 = [...m2, { role: "assistant", content: "echo: sunny" }, { role: "user", content: "thanks" }];
  const e3 = call(model, episode, { model: thirdModel, messages: m3, tools: TOOLS, stream, temperature: 0.7, logprobs: true, top_logprobs: 2 });
  const a3 = await post(r.url, e3, SECRET);
  const records = [await recordOf(r, e1), await recordOf(r, e2), await recordOf(r, e3)];
  return { episode, envs: [e1, e2, e3], answers: [a1, a2, a3], records, messages: [m1, m2, m3] };
}

function expectTokens(rec: CallRecord, promptRest: number[], completion: number[]): void {
  expect(rec.body.tokens).not.toBeNull();
  const t = rec.body.tokens!;
  expect(unpackInts(t.prompt_ids)).toEqual(promptRest);
  expect(unpackInts(t.completion_ids)).toEqual(completion);
  expect(unpackFloats(t.completion_logprobs)).toEqual(completion.map((id) => Math.fround(logprobOf(id))));
}

/** Checks the three records of a conversation that splices: prefixes and only what is new. */
function expectSpliced(run: Awaited<ReturnType<typeof threeTurns>>, model: TokenModel): void {
  const [r1, r2, r3] = run.records as [CallRecord, CallRecord, CallRecord];
  const [s1, s2, s3] = run.envs.map((e) => model.served.findLast((s) => JSON.stringify(s.request["messages"]) === JSON.stringify(e.request?.["messages"]))!) as [Served, Served, Served];
  for (const r of run.records) expect(r).toMatchObject({ episode_uuid: run.episode, fence: 1, endpoint: "/v1/chat/completions", model: "tiny", status: 200, error: null, truncated: false, weight_version: 3, client_uuid: "client-1", task_id: "task-1" });

  // The first call is stored whole.
  expect(r1.body).toMatchObject({ prefix: null, messages: run.messages[0], tools: TOOLS, tools_from_prefix: false });
  expect(r1.body.params).toEqual({ model: "tiny", stream: run.envs[0]!.request!["stream"], temperature: 0.7 });
  expect(r1.body.tokens!.prompt_prefix).toBeNull();
  expectTokens(r1, s1.prompt, s1.completion);
  expect(r1.finish_reason).toBe("tool_calls");
  expect(r1.body.answer).toMatchObject({ role: "assistant", tool_calls: [{ id: "chatcmpl-tool-1", type: "function", function: { name: "lookup", arguments: '{"q":"weather"}' } }] });
  expect(r1.started_at).toBeLessThanOrEqual(r1.first_byte_at!);
  expect(r1.first_byte_at!).toBeLessThanOrEqual(r1.done_at);

  // The second: the first call's messages and answer are its prefix; only the tool's answer is new.
  // An answer the client sends back in another form than recorded (a whole answer's null fields
  // left out) ends the prefix before it, and is stored as the client sent it.
  const kept2 = isDeepStrictEqual(r1.body.answer, run.messages[1]![2]) ? 3 : 2;
  expect(r2.body).toMatchObject({ prefix: { call_id: r1.call_id, count: kept2 }, messages: run.messages[1]!.slice(kept2), tools: null, tools_from_prefix: true });
  expect(r2.body.tokens!.prompt_prefix).toEqual({ call_id: r1.call_id, count: s1.prompt.length + s1.completion.length });
  expectTokens(r2, s2.prompt.slice(s1.prompt.length + s1.completion.length), s2.completion);
  expect(r2.body.answer).toMatchObject({ role: "assistant", content: "echo: sunny" });

  // The third likewise, on the second.
  const kept3 = isDeepStrictEqual(r2.body.answer, run.messages[2]![4]) ? 5 : 4;
  expect(r3.body).toMatchObject({ prefix: { call_id: r2.call_id, count: kept3 }, messages: run.messages[2]!.slice(kept3), tools: null, tools_from_prefix: true });
  expect(r3.body.params).toMatchObject({ logprobs: true, top_logprobs: 2 });
  expect(r3.body.tokens!.prompt_prefix).toEqual({ call_id: r2.call_id, count: s2.prompt.length + s2.completion.length });
  expectTokens(r3, s3.prompt.slice(s2.prompt.length + s2.completion.length), s3.completion);
  // New in the third prompt: the user's turn and the generation prompt.
  expect(unpackInts(r3.body.tokens!.prompt_ids)).toEqual(promptIds([{ role: "user", content: "thanks" }]));
  expect(s3.completion.at(-1)).toBe(END);
}

describe("ledger: vLLM, capture tokens", () => {
  it("records a three-turn conversation with a tool call as deltas, whole answers", async () => {
    const run = await threeTurns(onVllm, vllm, false);
    expectSpliced(run, vllm);
    // vLLM's whole answers carry refusal, annotations and reasoning_content as null; the client
    // sends its answers back without them, and they are stored as it sent them.
    expect(run.records[0]!.body.answer).toMatchObject({ refusal: null, reasoning_content: null });
    expect(run.records[1]!.body.messages[0]).toEqual(run.messages[1]![2]);
    // The upstream was asked for the tokens; the client's answers carry none it did not ask for.
    const asked = vllm.requests.slice(-3);
    for (const req of asked) expect(req).toMatchObject({ return_token_ids: true, logprobs: true });
    expect(asked[2]!["top_logprobs"]).toBe(2);
    for (const a of run.answers) expect(a.status).toBe(200);
    const [b1, b2, b3] = run.answers.map((a) => JSON.parse(a.text) as { choices: Array<Record<string, unknown>> });
    for (const b of [b1, b2, b3]) for (const k of TOKEN_KEYS) expect(keysIn(b).has(k), k).toBe(false);
    expect(b1!.choices[0]!["logprobs"]).toBeNull();
    expect(b2!.choices[0]!["logprobs"]).toBeNull();
    // The third asked for logprobs and has them.
    expect((b3!.choices[0]!["logprobs"] as { content: Array<{ logprob: number }> }).content.map((e) => e.logprob)).toEqual(vllm.served.at(-1)!.completion.map(logprobOf));
    expect(b1!.choices[0]!["message"]).toMatchObject({ tool_calls: [{ function: { name: "lookup" } }] });
  });

  it("records the same conversation streamed, the answers assembled from the deltas", async () => {
    const run = await threeTurns(onVllm, vllm, true);
    expectSpliced(run, vllm);
    for (const r of run.records) expect(r.stream).toBe(true);
    // Assembled answers are what the client sends back: the prefixes take them in.
    expect(run.records.map((r) => r.body.prefix?.count ?? null)).toEqual([null, 3, 5]);
    expect(run.records[0]!.body.answer).toEqual({ role: "assistant", content: null, tool_calls: [{ id: "chatcmpl-tool-1", type: "function", function: { name: "lookup", arguments: '{"q":"weather"}' } }] });
    for (const a of run.answers) {
      expect(a.type).toContain("text/event-stream");
      expect(a.text.trim().endsWith("data: [DONE]")).toBe(true);
      for (const k of TOKEN_KEYS) expect(keysIn(events(a.text)).has(k), k).toBe(false);
    }
    const texts = (a: { text: string }) => events(a.text).map((e) => ((e["choices"] as Array<{ delta: { content?: string } }>)[0]?.delta.content ?? "")).join("");
    expect(texts(run.answers[1]!)).toBe("echo: sunny");
    for (const e of events(run.answers[0]!.text)) expect((e["choices"] as Array<Record<string, unknown>>)[0]!["logprobs"]).toBeNull();
    // The third asked for logprobs: every token's, in order.
    const lps = events(run.answers[2]!.text).flatMap((e) => ((e["choices"] as Array<{ logprobs: { content: Array<{ logprob: number }> } | null }>)[0]?.logprobs?.content ?? []).map((x) => x.logprob));
    expect(lps).toEqual(vllm.served.at(-1)!.completion.map(logprobOf));
  });

  it("stores a drifted prompt whole (prompt_prefix null) while its messages still splice", async () => {
    const run = await threeTurns(onVllm, vllm, false, "drift");
    const r3 = run.records[2]!;
    const s3 = vllm.served.at(-1)!;
    expect(r3.model).toBe("drift");
    // The second answer as the client sent it back (without the whole answer's null fields) is stored again.
    expect(r3.body.prefix).toEqual({ call_id: run.records[1]!.call_id, count: 4 });
    expect(r3.body.tokens!.prompt_prefix).toBeNull();
    expectTokens(r3, s3.prompt, s3.completion);
  });

  it("records a /v1/completions call with its prompt in params and its text as the answer", async () => {
    const env = call(vllm, `ep-${randomUUID()}`, { model: "tiny", prompt: "once upon" }, "tokens", { endpoint: "/v1/completions" });
    const a = await post(onVllm.url, env, SECRET);
    expect(a.status).toBe(200);
    const b = JSON.parse(a.text) as { choices: Array<Record<string, unknown>> };
    expect(b.choices[0]!["text"]).toBe("echo: once upon");
    expect(b.choices[0]!["logprobs"]).toBeNull();
    for (const k of TOKEN_KEYS) expect(keysIn(b).has(k), k).toBe(false);
    expect(vllm.requests.at(-1)).toMatchObject({ return_token_ids: true, logprobs: 1 });
    const rec = await recordOf(onVllm, env);
    const s = vllm.served.at(-1)!;
    expect(rec.body).toMatchObject({ messages: [], params: { model: "tiny", prompt: "once upon" }, answer: { role: "assistant", content: "echo: once upon" } });
    expectTokens(rec, s.prompt, s.completion);
  });
});

describe("ledger: a record's size as the shipper weighs its batches", () => {
  // The fields besides the body were taken at 2 KB whatever they held: 500 records with long
  // fields in UTF-8 or escaped made a batch the shipper took for 1.1 MB a 4.3 MB one, refused 413 whole.
  it("is at least its JSON's, however long its fields are in UTF-8 or escaped", async () => {
    const ctx = { ...callContext("messages"), client_uuid: "\u0001".repeat(256), task_id: "é".repeat(256) };
    const env = call(vllm, `ep-${"模".repeat(400)}`, { model: "模".repeat(500), messages: [{ role: "user", content: "hi" }] }, null, { call: ctx });
    const answered = await post(onVllm.url, env, SECRET);
    expect(answered.status, answered.text.slice(0, 300)).toBe(200);
    const rec = await recordOf(onVllm, env);
    expect(onVllm.sizes.get(rec.call_id)).toBeGreaterThanOrEqual(Buffer.byteLength(JSON.stringify(rec)));
  });
});

describe("ledger: vLLM, capture tokens, a /v1/completions echo", () => {
  // What a user saw: with capture tokens the gateway asked vLLM for token ids, and vLLM then
  // answers an echo without its prompt's text: the client's answer lost the prompt it asked back.
  it("answers an echo with its prompt's text, as the model does without the gateway, and records it without tokens", async () => {
    const env = call(vllm, `ep-${randomUUID()}`, { model: "tiny", prompt: "once upon", echo: true }, "tokens", { endpoint: "/v1/completions" });
    const a = await post(onVllm.url, env, SECRET);
    expect(a.status).toBe(200);
    expect((JSON.parse(a.text) as { choices: Array<{ text: string }> }).choices[0]?.text).toBe("once uponecho: once upon");
    expect(vllm.requests.at(-1)).toEqual({ model: "tiny", prompt: "once upon", echo: true });
    const rec = await recordOf(onVllm, env);
    expect(rec).toMatchObject({ status: 200, error: null });
    expect(rec.body).toMatchObject({ params: { model: "tiny", prompt: "once upon", echo: true }, tokens: null });
  });

  // What a user saw: an echo's logprobs cover its prompt first, so the recorded completion's
  // logprobs were the prompt's (shifted by its length less one): rollout_log_probs trained on wrong values.
  it("records the completion's own logprobs when the client asked an echo with token ids and logprobs itself", async () => {
    const env = call(vllm, `ep-${randomUUID()}`, { model: "tiny", prompt: "once upon", echo: true, return_token_ids: true, logprobs: 1 }, "tokens", { endpoint: "/v1/completions" });
    const a = await post(onVllm.url, env, SECRET);
    expect(a.status).toBe(200);
    const s = vllm.served.at(-1)!;
    expectTokens(await recordOf(onVllm, env), s.prompt, s.completion);
  });
});

describe("ledger: SGLang, capture tokens", () => {
  it("asks whole with its fields, streams to a streaming client itself, and reads meta_info", async () => {
    const run = await threeTurns(onSglang, sglang, true);
    expectSpliced(run, sglang);
    for (const req of sglang.requests.slice(-3)) {
      expect(req).toMatchObject({ stream: false, logprobs: true, return_prompt_token_ids: true, return_meta_info: true });
    }
    for (const a of run.answers) {
      expect(a.status).toBe(200);
      expect(a.type).toContain("text/event-stream");
      const ev = events(a.text);
      expect(ev).toHaveLength(1);
      expect(ev[0]!["object"]).toBe("chat.completion.chunk");
      expect(a.text.trim().endsWith("data: [DONE]")).toBe(true);
      for (const k of TOKEN_KEYS) expect(keysIn(ev).has(k), k).toBe(false);
    }
    expect((events(run.answers[1]!.text)[0]!["choices"] as Array<{ delta: { content: string } }>)[0]!.delta.content).toBe("echo: sunny");
  });

  it("answers a whole call without the fields it added", async () => {
    const env = call(sglang, `ep-${randomUUID()}`, { model: "tiny", messages: [{ role: "user", content: "hi" }] });
    const a = await post(onSglang.url, env, SECRET);
    const b = JSON.parse(a.text) as { choices: Array<Record<string, unknown>> };
    expect(b.choices[0]!["message"]).toMatchObject({ content: "echo: hi" });
    expect(b.choices[0]!["logprobs"]).toBeNull();
    for (const k of TOKEN_KEYS) expect(keysIn(b).has(k), k).toBe(false);
    const s = sglang.served.at(-1)!;
    expectTokens(await recordOf(onSglang, env), s.prompt, s.completion);
  });
});

describe("ledger: what is not recorded, and faults", () => {
  it("leaves the answer byte-identical and records nothing with capture off or no call context", async () => {
    const before = onVllm.records.length;
    for (const stream of [false, true]) {
      const request = { model: "tiny", messages: [{ role: "user", content: "same" }], stream };
      const plain = await post(onVllm.url, call(vllm, "ep-plain", request, null), SECRET);
      const off = await post(onVllm.url, call(vllm, "ep-off", request, "off"), SECRET);
      const direct = await fetch(`${vllm.url}/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(request) });
      expect(off.text).toBe(plain.text);
      expect(off.text).toBe(await direct.text());
      expect(vllm.requests.at(-2)).toEqual(request);
    }
    // Recording happens on the turn after the answer: give it some.
    await new Promise((r) => setTimeout(r, 50));
    expect(onVllm.records.length).toBe(before);
  });

  it("with capture off after calls of the claim were captured, answers as the plain path and records a stub of a successful call only", async () => {
    const episode = `ep-${randomUUID()}`;
    const captured = call(vllm, episode, { model: "tiny", messages: [{ role: "user", content: "first" }] });
    await post(onVllm.url, captured, SECRET);
    await recordOf(onVllm, captured);
    const before = onVllm.records.length;
    for (const stream of [false, true]) {
      const request = { model: "tiny", messages: [{ role: "user", content: "same" }], stream };
      const plain = await post(onVllm.url, call(vllm, "ep-plain", request, null), SECRET);
      const off = call(vllm, episode, request, "off");
      expect((await post(onVllm.url, off, SECRET)).text).toBe(plain.text);
      // Asked as the client asked: no token fields, no stream usage.
      expect(vllm.requests.at(-1)).toEqual(request);
      const stub = await recordOf(onVllm, off);
      expect(stub).toMatchObject({ capture: "off", status: 200, error: null, stream, model: "tiny", usage: null, finish_reason: null, truncated: false });
      expect(stub.body).toEqual({ params: {}, tools: null, tools_from_prefix: false, prefix: null, messages: [], answer: null, tokens: null, uncaptured: true });
      expect(stub.first_byte_at).not.toBeNull();
    }
    // A failed call with capture off is not recorded, a stream broken after its status line neither.
    const refused = call(vllm, episode, { model: "tiny", messages: [{ role: "user", content: "x" }] }, "off", { trainer_base_url: "http://127.0.0.1:1/v1" });
    expect((await post(onVllm.url, refused, SECRET)).status).toBe(502);
    const broken = call(vllm, episode, { model: "crash", messages: [{ role: "user", content: "boom" }], stream: true }, "off");
    expect((await post(onVllm.url, broken, SECRET)).text).toContain('"code":"upstream_stream_broken"');
    // The next captured call is stored against the claim's captured call, the stubs left out of its history.
    const next = call(vllm, episode, { model: "tiny", messages: [{ role: "user", content: "first" }, { role: "assistant", content: "echo: first" }, { role: "user", content: "again" }] });
    await post(onVllm.url, next, SECRET);
    const rec = await recordOf(onVllm, next);
    // The captured call's user message; its answer, sent back without the whole answer's null fields, is stored as sent.
    expect(rec.body.prefix).toEqual({ call_id: captured.call?.call_id, count: 1 });
    expect(rec.body.tokens?.prompt_prefix?.call_id).toBe(captured.call?.call_id);
    expect(onVllm.records.slice(before).map((r) => r.call_id)).not.toContain(refused.call?.call_id);
    expect(onVllm.records.slice(before).map((r) => r.call_id)).not.toContain(broken.call?.call_id);
  });

  it("remembers which claims had calls captured within a bound, least recently captured first out, apart from the history's heads", () => {
    const recorder = new CallRecorder({ historyBytes: 1, sink: () => undefined, logger: silentLogger, maxCapturedClaims: 2 });
    expect(recorder.watches("a", 1, "off")).toBe(false);
    expect(recorder.watches("a", 1, "messages")).toBe(true);
    expect(recorder.watches("b", 1, "tokens")).toBe(true);
    expect(recorder.watches("a", 1, "tokens")).toBe(true);
    expect(recorder.watches("c", 1, "messages")).toBe(true);
    expect([recorder.watches("a", 1, "off"), recorder.watches("b", 1, "off"), recorder.watches("c", 1, "off"), recorder.watches("a", 2, "off")]).toEqual([true, false, true, false]);
    // A history of 1 byte keeps no heads at all: the claims are remembered all the same.
    expect(recorder.history.size).toBe(0);
  });

  it("with capture messages, asks for no tokens and records none", async () => {
    const env = call(vllm, `ep-${randomUUID()}`, { model: "tiny", messages: [{ role: "user", content: "m" }], stream: true }, "messages");
    const a = await post(onVllm.url, env, SECRET);
    // Only the stream's usage, which the ledger counts tokens by (the client does not get it).
    expect(vllm.requests.at(-1)).toEqual({ ...env.request, stream_options: { include_usage: true } });
    const rec = await recordOf(onVllm, env);
    expect(rec.body.tokens).toBeNull();
    expect(rec.body.answer).toEqual({ role: "assistant", content: "echo: m" });
    expect(rec.finish_reason).toBe("stop");
    expect(a.text).toContain('"content":"m"');
  });

  it("records a stream that breaks after its status line with its error", async () => {
    const env = call(vllm, `ep-${randomUUID()}`, { model: "crash", messages: [{ role: "user", content: "boom" }], stream: true });
    const a = await post(onVllm.url, env, SECRET);
    expect(a.text).toContain('"code":"upstream_stream_broken"');
    const rec = await recordOf(onVllm, env);
    expect(rec.status).toBe(200);
    expect(rec.error).toMatch(/^upstream_stream_broken: the inference upstream broke off mid-stream/);
    expect(rec.body.answer).toEqual({ role: "assistant", content: "e" });
    expect(rec.finish_reason).toBeNull();
  });

  it("records an upstream's refusal and an unreachable upstream", async () => {
    const env = call(vllm, `ep-${randomUUID()}`, { model: "tiny", messages: [{ role: "user", content: "x" }] }, "messages", { trainer_base_url: "http://127.0.0.1:1/v1" });
    expect((await post(onVllm.url, env, SECRET)).status).toBe(502);
    const rec = await recordOf(onVllm, env);
    expect(rec).toMatchObject({ status: 502, first_byte_at: null, body: { answer: null } });
    expect(rec.error).toMatch(/^upstream_unreachable: /);
  });

  it("records a body over the cap truncated, answers the call whole, and stores the next call whole", async () => {
    const episode = `ep-${randomUUID()}`;
    const big = "x".repeat(RECORD_BODY_CAP_BYTES + 1000);
    // Capture messages: a fake tokenizer's 1.5 M token ids and logprobs are not what this tests.
    const env = call(vllm, episode, { model: "tiny", messages: [{ role: "user", content: big }] }, "messages");
    const a = await post(onVllm.url, env, SECRET);
    expect(a.status).toBe(200);
    // The call itself is whole: the answer echoes all of it.
    expect((JSON.parse(a.text) as { choices: Array<{ message: { content: string } }> }).choices[0]!.message.content).toBe(`echo: ${big}`);
    const rec = await recordOf(onVllm, env);
    expect(rec).toMatchObject({ truncated: true, status: 200, body: { messages: [], tokens: null, prefix: null } });
    const content = (rec.body.answer as { content: string }).content;
    expect(`echo: ${big}`.startsWith(content)).toBe(true);
    expect(content.length).toBeLessThan(RECORD_BODY_CAP_BYTES);
    expect(Buffer.byteLength(JSON.stringify(rec.body))).toBeLessThanOrEqual(RECORD_BODY_CAP_BYTES);
    // It extends the truncated call, which keeps no messages to rebuild it from: stored whole.
    const next = call(vllm, episode, { model: "tiny", messages: [{ role: "user", content: big.slice(0, 10) }] }, "messages");
    await post(onVllm.url, next, SECRET);
    const r2 = await recordOf(onVllm, next);
    expect(r2.body).toMatchObject({ prefix: null, messages: [{ role: "user", content: big.slice(0, 10) }] });
    expect(r2.truncated).toBe(false);
  });

  it("records what an AgentJet runner's answer carries", async () => {
    const env = envelope({ episode_uuid: "ep-1", trainer_api_key: agentJetKey("ep-1", zmq.addr), request: { model: "tiny", messages: [{ role: "user", content: "hey" }] }, call: callContext("tokens") });
    const a = await post(onVllm.url, env, SECRET);
    expect(a.status).toBe(200);
    const rec = await recordOf(onVllm, env);
    expect(rec).toMatchObject({ status: 200, finish_reason: "stop", usage: { prompt_tokens: 1, completion_tokens: 2 }, body: { answer: { role: "assistant", content: "echo: hey" }, tokens: null } });
    // The runner's answer went through untouched.
    expect(JSON.parse(a.text)).toMatchObject({ id: "chatcmpl-test", choices: [{ message: { content: "echo: hey" } }] });
  });
});

describe("ledger: storage linear in a claim's length", () => {
  const TURNS = 15;
  const observation = (i: number) => `\nObservation ${i}: ${"x".repeat(1000)}\n`;

  /** One call to the fixed upstream: the size of its record's body. */
  async function turn(episode: string, request: Record<string, unknown>, over: Partial<RelayEnvelope> = {}): Promise<{ rec: CallRecord; bytes: number }> {
    const env = envelope({ episode_uuid: episode, trainer_base_url: `${fixed.origin}/v1`, request, call: callContext("messages"), ...over });
    const answered = await post(onVllm.url, env, SECRET);
    expect(answered.status, answered.text.slice(0, 300)).toBe(200);
    const rec = await recordOf(onVllm, env);
    return { rec, bytes: JSON.stringify(rec.body).length };
  }

  it("stores two conversations of one claim taking turns (a planner and an executor) each as deltas of its own", async () => {
    const episode = `ep-${randomUUID()}`;
    const planner: Record<string, unknown>[] = [{ role: "system", content: "You plan." }];
    const executor: Record<string, unknown>[] = [{ role: "system", content: "You execute." }];
    let bytes = 0;
    const records: CallRecord[] = [];
    for (let i = 0; i < TURNS; i++) {
      for (const [name, conv] of [["planner", planner], ["executor", executor]] as const) {
        conv.push({ role: "user", content: `${name} step ${i}: ${observation(i)}` });
        const t = await turn(episode, { model: "tiny", messages: [...conv] });
        bytes += t.bytes;
        records.push(t.rec);
        conv.push({ role: "assistant", content: FIXED });
      }
    }
    expect(bytes).toBeLessThan(2 * (JSON.stringify(planner).length + JSON.stringify(executor).length));
    // Each call after an agent's first continues that agent's previous call, two calls back.
    records.slice(2).forEach((r, i) => expect(r.body.prefix?.call_id).toBe(records[i]!.call_id));
  });

  it("stores a growing /v1/completions conversation (prompt: the previous prompt and completion, then what is new) as deltas", async () => {
    const episode = `ep-${randomUUID()}`;
    let prompt = "You are an agent.";
    let bytes = 0;
    const records: CallRecord[] = [];
    for (let i = 0; i < TURNS; i++) {
      prompt += observation(i);
      const t = await turn(episode, { model: "tiny", prompt }, { endpoint: "/v1/completions" });
      bytes += t.bytes;
      records.push(t.rec);
      prompt += FIXED;
    }
    // What the claim said in all is `prompt`: its records hold about that, not its square.
    expect(bytes).toBeLessThan(2 * prompt.length);
    expect(records[0]!.body.params["prompt"]).toBe(`You are an agent.${observation(0)}`);
    records.slice(1).forEach((r, i) => expect(r.body.params["prompt"]).toEqual({ prefix: { call_id: records[i]!.call_id, count: expect.any(Number) }, rest: observation(i + 1) }));
  });

  /** An observation's token ids: a thousand of them, distinct per turn. */
  const observationIds = (i: number): number[] => Array.from({ length: 1000 }, (_, k) => 1000 + ((i * 7 + k) % 9000));

  it("stores a growing token-id conversation (prompt: the previous prompt and completion ids, then new ids) as deltas, as slime sends it", async () => {
    const episode = `ep-${randomUUID()}`;
    let prompt: number[] = [1, 2, 3];
    let bytes = 0;
    const records: CallRecord[] = [];
    const counts: number[] = [];
    for (let i = 0; i < TURNS; i++) {
      prompt = [...prompt, ...observationIds(i)];
      // The client asks for the ids itself, as a token-in token-out trainer does, and continues with them.
      const env = call(vllm, episode, { model: "tiny", prompt, max_tokens: 16, return_token_ids: true }, "tokens", { endpoint: "/v1/completions" });
      const a = await post(onVllm.url, env, SECRET);
      expect(a.status).toBe(200);
      const completion = (JSON.parse(a.text) as { choices: { token_ids: number[] }[] }).choices[0]!.token_ids;
      const rec = await recordOf(onVllm, env);
      bytes += JSON.stringify(rec.body).length;
      records.push(rec);
      counts.push(prompt.length + completion.length);
      prompt = [...prompt, ...completion];
    }
    // Params hold the ids as JSON, tokens.prompt_ids the same ids packed: about twice what the claim
    // said in all, where storing each prompt whole would take about TURNS / 2 times it.
    expect(bytes).toBeLessThan(3 * JSON.stringify(prompt).length);
    expect(records[0]!.body.params["prompt"]).toEqual([1, 2, 3, ...observationIds(0)]);
    records.slice(1).forEach((r, i) => {
      expect(r.body.params["prompt"]).toEqual({ prefix: { call_id: records[i]!.call_id, count: counts[i] }, rest: observationIds(i + 1) });
      expect(r.body.tokens!.prompt_prefix).toEqual({ call_id: records[i]!.call_id, count: counts[i] });
      expect(unpackInts(r.body.tokens!.prompt_ids)).toEqual(observationIds(i + 1));
    });
  });

  it("stores a token-id conversation as deltas of the previous prompt when the completion's ids are not known (capture messages)", async () => {
    const episode = `ep-${randomUUID()}`;
    // The client's own tokenization of the fixed answer: the ledger never saw its ids.
    const answerIds = [70, 71, 72];
    let prompt: number[] = [1, 2, 3];
    let bytes = 0;
    const records: CallRecord[] = [];
    for (let i = 0; i < TURNS; i++) {
      prompt = [...prompt, ...observationIds(i)];
      const t = await turn(episode, { model: "tiny", prompt }, { endpoint: "/v1/completions" });
      bytes += t.bytes;
      records.push(t.rec);
      prompt = [...prompt, ...answerIds];
    }
    expect(bytes).toBeLessThan(2 * JSON.stringify(prompt).length);
    records.slice(1).forEach((r, i) =>
      expect(r.body.params["prompt"]).toEqual({ prefix: { call_id: records[i]!.call_id, count: (i + 1) * 1000 + 3 + i * answerIds.length }, rest: [...answerIds, ...observationIds(i + 1)] }),
    );
  });

  it("stores a batch of prompts, and prompts of no valid shape, whole, without failing the call or its record", async () => {
    const episode = `ep-${randomUUID()}`;
    // Several independent prompts answered as several choices: no one of them is the claim's conversation.
    const prompts: unknown[] = [["once", "upon"], [[1, 2, 3], [1, 2, 3, 4]], [[1, 2, 3, 4, 5]], [1, "a"], [1, -2], [1.5], [], "", { ids: [1] }, null, [1, 2, 3, 4, 5, 6]];
    const records: CallRecord[] = [];
    for (const prompt of prompts) records.push((await turn(episode, { model: "tiny", prompt }, { endpoint: "/v1/completions" })).rec);
    expect(records.slice(0, -1).map((r) => r.body.params["prompt"])).toEqual(prompts.slice(0, -1));
    // Ids that begin with a batch's one prompt are not stored against it: a batch is no conversation.
    expect(records.at(-1)!.body.params["prompt"]).toEqual([1, 2, 3, 4, 5, 6]);
  });
});
