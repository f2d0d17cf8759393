/**
 * The trajectory ledger on the Worker's side, in workerd with real D1 and R2: the gateway's
 * batches recorded, trajectories rebuilt from the stored deltas, their token sequences, the
 * list's filters and cursor, the export, the settings, the roles, and every refusal changing nothing.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { LedgerClient, wholeTrajectory } from "../src/client";
import { recordCalls } from "../src/ledger/ingest";
import { summaryPage } from "../src/ledger/read";
import { MAX_CALLS_PER_BATCH, type CallRecord, type Trajectory } from "../src/protocol/ledger";
import { D1_MAX_ROW_BYTES, utf8Bytes } from "../src/protocol/limits";
import { packFloats, packInts } from "../src/protocol/packed";
import { batchOf, callRecord as call, checkingDeltaForm, postCalls as post } from "./support/ledger";
import { answer2, answer3, sys, threeTurns as threeTurnsOf, toolCall, toolResult, tools, user, user3 } from "./support/ledger-calls";
import { EXPORT_INTERRUPTED } from "../src/client/ledger-client";
import { ADMIN_TOKEN, admin, advance, claimKeyFields, createEngine, endBody, engineStats, ORIGIN, raw, rollingWith, withGateway, workerFetch, type TestEngine } from "./support/harness";

const ledgerOf = (e: TestEngine, role: "viewer" | "operator" | "trainer" | "client" | "admin") =>
  checkingDeltaForm(new LedgerClient({ baseUrl: `${ORIGIN}/e/${e.name}`, token: role === "admin" ? ADMIN_TOKEN : e.tokens[role], fetch: workerFetch }));

type Claim = { episode: string; fence: number; client: string; key?: Awaited<ReturnType<typeof claimKeyFields>> };

async function claimOne(e: TestEngine, client: string): Promise<Claim> {
  const c = await e.as("client").claimEpisode({ client_uuid: client, discard_episode_timeout: 600 });
  expect(c.success).toBe(true);
  const k = await claimKeyFields(c.openai_api_key);
  return { episode: k.episode_uuid, fence: k.fence, client, key: k };
}

const threeTurns = (c: Claim, thirdPrompt?: number[]): CallRecord[] => threeTurnsOf(c, call, thirdPrompt);

async function endAndFlush(e: TestEngine, c: Claim, reward: number): Promise<void> {
  expect((await e.as("client").endEpisode(endBody(c.client, c.episode, reward))).success).toBe(true);
  await advance(e, 2000);
}

const countRows = async (engine: string) =>
  (await env.DB.prepare("SELECT COUNT(*) AS n FROM llm_calls WHERE engine = ?").bind(engine).first<{ n: number }>())?.n ?? 0;

/** `n` ended claims of `e` named `<prefix>-<i>`, written as the engine's outbox writes them. */
async function seedEnded(e: TestEngine, n: number, prefix: string, endedFrom: number): Promise<void> {
  await env.DB.prepare(
    `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?2)
     INSERT INTO trajectories (engine, episode_uuid, fence, client_uuid, task_id, episode_type, global_step, run, reward, is_success, workflow_output, ended_at)
     SELECT ?1, ?3 || '-' || i, 1, 'c', 'task-1', 'train', 0, 1, 0.5, 1, '{"reward":0}', ?4 + i FROM n`,
  )
    .bind(e.name, n, prefix, endedFrom)
    .run();
}

/**
 * Reads an export's JSON lines one at a time: the next line, null at the stream's end, or
 * `{ broke }` when the stream broke off (the exchange cut the answer off before its end).
 */
function lineReader(body: ReadableStream<Uint8Array>) {
  const reader = body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  return async (): Promise<Record<string, unknown> | null | { broke: unknown }> => {
    for (;;) {
      const nl = buf.indexOf("\n");
      if (nl >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        return JSON.parse(line) as Record<string, unknown>;
      }
      let r: Awaited<ReturnType<typeof reader.read>>;
      try {
        r = await reader.read();
      } catch (broke) {
        return { broke };
      }
      if (r.done) return null;
      buf += dec.decode(r.value, { stream: true });
    }
  };
}

/** The rest of an export's lines, and whether it broke off rather than ended. */
async function drain(next: ReturnType<typeof lineReader>): Promise<{ lines: Record<string, unknown>[]; broke: boolean }> {
  const lines: Record<string, unknown>[] = [];
  for (;;) {
    const l = await next();
    if (l === null) return { lines, broke: false };
    if ("broke" in l) return { lines, broke: true };
    lines.push(l);
  }
}

const openExport = (e: TestEngine, token: string) => workerFetch(`${ORIGIN}/e/${e.name}/trajectories/export`, { headers: { authorization: `Bearer ${token}` } });

describe("trajectory ledger", () => {
  it("rebuilds a three-turn conversation with a tool call, and the exact tokens, loss mask and logprobs", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const c = await claimOne(e, "c1");
    const calls = threeTurns(c);
    const first = await post(e, batchOf(calls.slice(0, 2)));
    expect(first.status).toBe(200);
    expect(first.json).toEqual({ recorded: 2, duplicates: 0 });
    expect((await post(e, batchOf(calls.slice(2)))).json).toEqual({ recorded: 1, duplicates: 0 });

    // Live: the calls so far, no outcome yet.
    const live = await ledgerOf(e, "viewer").trajectory(c.episode);
    expect(live.outcome).toBeNull();
    expect(live.calls).toHaveLength(3);

    await endAndFlush(e, c, 0.75);
    const t = await ledgerOf(e, "viewer").trajectory(c.episode);
    expect(t).toMatchObject({ episode_uuid: c.episode, fence: c.fence, client_uuid: "c1", outcome: "ended", reward: 0.75, prompt_tokens: 12, completion_tokens: 6 });
    expect(t.calls.map((x) => x.messages)).toEqual([
      [sys, user],
      [sys, user, toolCall, toolResult],
      [sys, user, toolCall, toolResult, answer2, user3],
    ]);
    expect(t.calls.map((x) => x.messages_splice)).toEqual(["first", "extends", "extends"]);
    expect(t.calls.map((x) => x.tools)).toEqual([tools, tools, tools]);
    expect(t.calls[2]?.answer).toEqual(answer3);
    expect(t.calls.map((x) => x.tokens?.splice)).toEqual(["first", "extends", "extends"]);
    expect(t.calls[2]?.tokens?.prompt_ids).toEqual([1, 2, 3, 4, 10, 11, 20, 21, 30, 31, 32]);
    expect(t.training).toEqual({
      tokens: [1, 2, 3, 4, 10, 11, 20, 21, 30, 31, 32, 40],
      response_length: 8,
      loss_mask: [1, 1, 0, 1, 0, 0, 0, 1],
      rollout_log_probs: [-0.5, -0.25, 0, -1.5, 0, 0, 0, -2],
      segments: [
        { start: 0, length: 2, weight_version: 3 },
        { start: 3, length: 1, weight_version: 4 },
        { start: 7, length: 1, weight_version: 3 },
      ],
      drift_at_call: null,
    });
    expect(t.workflow_output).toMatchObject({ reward: 0.75 });
  });

  it("answers a batch D1 cannot store 503 ledger_unavailable with an error id, not D1's text, and takes it when sent again", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const c = await claimOne(e, "c1");
    const batch = batchOf(threeTurns(c));
    // A real D1 failure: the calls' table is gone while the batch comes in.
    await env.DB.exec("ALTER TABLE llm_calls RENAME TO llm_calls_away");
    let refused: Awaited<ReturnType<typeof post>>;
    try {
      refused = await post(e, batch);
    } finally {
      await env.DB.exec("ALTER TABLE llm_calls_away RENAME TO llm_calls");
    }
    expect(refused).toMatchObject({ status: 503, json: { error: "ledger_unavailable", detail: expect.stringMatching(/error id [0-9a-f-]{36}.*send it again later/) } });
    expect(refused.text).not.toMatch(/llm_calls|SQL|D1_ERROR|no such table/i);
    // As the gateway does: the same batch again, stored once.
    expect((await post(e, batch)).json).toEqual({ recorded: 3, duplicates: 0 });
    expect((await ledgerOf(e, "viewer").trajectory(c.episode)).calls).toHaveLength(3);
  });

  it("says at which turn the prompt drifted instead of splicing it", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const c = await claimOne(e, "c1");
    // The third prompt re-tokenized the answer "It is 4." as 22 instead of 21.
    expect((await post(e, batchOf(threeTurns(c, [1, 2, 3, 4, 10, 11, 20, 22, 30, 31, 32])))).status).toBe(200);
    const t = await ledgerOf(e, "trainer").trajectory(c.episode, c.fence);
    expect(t.calls.map((x) => x.tokens?.splice)).toEqual(["first", "extends", "rewritten"]);
    expect(t.training).toMatchObject({ tokens: [1, 2, 3, 4, 10, 11, 20, 21], loss_mask: [1, 1, 0, 1], drift_at_call: 2 });
  });

  it("marks a rewritten history, and a call that finished after its claim ended", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const c = await claimOne(e, "c1");
    const [a, b] = threeTurns(c);
    if (a === undefined || b === undefined) throw new Error("two calls");
    // The client trimmed its history: the second call is stored whole.
    // It also finished after the claim ended (the engine's test clock runs in 2099).
    const trimmed = call(c, { done_at: Date.UTC(2100, 0, 1), body: { messages: [sys, { role: "user", content: "Summary so far." }], answer: answer2 } });
    expect((await post(e, batchOf([a, trimmed]))).status).toBe(200);
    await endAndFlush(e, c, 1);
    const t = await ledgerOf(e, "viewer").trajectory(c.episode);
    expect(t.calls.map((x) => x.messages_splice)).toEqual(["first", "rewritten"]);
    expect(t.calls.map((x) => x.after_claim_end)).toEqual([false, true]);
    expect(b.call_id).not.toBe(trimmed.call_id);
  });

  it("judges a call finished after its claim's end on the exchange's clock, not the GPU host's, which may be days off", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const c = await claimOne(e, "c1");
    const DAYS = 2 * 86_400_000;
    const [a] = threeTurns(c);
    if (a === undefined) throw new Error("a call");
    const shifted = (r: CallRecord, by: number, admitted = r.admitted_at): CallRecord => ({ ...r, admitted_at: admitted, started_at: r.started_at + by, first_byte_at: r.first_byte_at === null ? null : r.first_byte_at + by, done_at: r.done_at + by });
    // A host two days fast: done_at is past the end, though the call took 8 ms a day before it.
    const early = shifted(a, DAYS);
    // A host two days slow: this call, admitted 5 ms before the end, ran 8 ms: it finished after the end.
    const late = shifted({ ...call(c, { body: {} }), started_at: e.clock.t - 4, first_byte_at: e.clock.t, done_at: e.clock.t + 4 }, -DAYS, e.clock.t - 5);
    expect((await post(e, batchOf([early, late]))).status).toBe(200);
    await endAndFlush(e, c, 1);
    const t = await ledgerOf(e, "viewer").trajectory(c.episode);
    expect(t.calls.map((x) => [x.call_id, x.after_claim_end])).toEqual([
      [early.call_id, false],
      [late.call_id, true],
    ]);
  });

  it("leaves a stream that broke after its status line out of the training sequence, which the client's retry continues", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const c = await claimOne(e, "c1");
    const [first] = threeTurns(c);
    if (first === undefined) throw new Error("a call");
    // Answered 200, then broken off after one token: the gateway records the error and the partial answer.
    const broken = call(c, {
      error: "upstream_stream_broken: the inference upstream broke off mid-stream: terminated",
      finish_reason: null,
      body: {
        prefix: { call_id: first.call_id, count: 3 },
        messages: [toolResult],
        answer: { role: "assistant", content: "It" },
        tokens: { prompt_prefix: { call_id: first.call_id, count: 6 }, prompt_ids: packInts([20]), completion_ids: packInts([21]), completion_logprobs: packFloats([-1.5]) },
      },
    });
    // The client sent the same messages again: stored whole, since they do not extend the broken answer.
    const retry = call(c, {
      body: {
        messages: [sys, user, toolCall, toolResult],
        answer: answer2,
        tokens: { prompt_prefix: null, prompt_ids: packInts([1, 2, 3, 4, 10, 11, 20]), completion_ids: packInts([22, 23]), completion_logprobs: packFloats([-1, -2]) },
      },
    });
    expect((await post(e, batchOf([first, broken, retry]))).status).toBe(200);
    const t = await ledgerOf(e, "trainer").trajectory(c.episode, c.fence);
    expect(t.calls.map((x) => x.messages_splice)).toEqual(["first", "extends", "extends"]);
    expect(t.calls.map((x) => x.tokens?.splice)).toEqual(["first", "extends", "extends"]);
    expect(t.training).toMatchObject({ tokens: [1, 2, 3, 4, 10, 11, 20, 22, 23], loss_mask: [1, 1, 0, 1, 1], rollout_log_probs: [-0.5, -0.25, 0, -1, -2], drift_at_call: null });
  });

  it("ends the training sequence at a call whose tokens were not recorded, instead of splicing its completion in as prompt", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const c = await claimOne(e, "c1");
    const [first] = threeTurns(c);
    if (first === undefined) throw new Error("a call");
    // Over the record cap: kept without messages and tokens, so the gateway stores the next call whole.
    const truncated = call(c, { truncated: true, body: { answer: { role: "assistant", content: "It is" } } });
    const next = call(c, {
      body: {
        messages: [sys, user, toolCall, toolResult, answer2, user3],
        answer: answer3,
        tokens: { prompt_prefix: null, prompt_ids: packInts([1, 2, 3, 4, 10, 11, 20, 21, 30]), completion_ids: packInts([40]), completion_logprobs: packFloats([-2]) },
      },
    });
    expect((await post(e, batchOf([first, truncated, next]))).status).toBe(200);
    const t = await ledgerOf(e, "trainer").trajectory(c.episode, c.fence);
    expect(t.training).toMatchObject({ tokens: [1, 2, 3, 4, 10, 11], loss_mask: [1, 1], drift_at_call: 1 });
  });

  it("ends the training sequence at a truncated first call, unlike a first call recorded without token ids, which is in the next call's prompt", async () => {
    const e = await createEngine();
    await rollingWith(e, 2);
    const c = await claimOne(e, "c1");
    // The first call's record was over the cap (recorder.ts fitBody): no messages, no tokens, its answer kept.
    const truncated = call(c, { truncated: true, body: { tools: null, answer: toolCall } });
    // The gateway stores the next call whole: its prompt holds the first call's completion [10, 11], the model's own tokens.
    const whole = (): CallRecord["body"]["tokens"] => ({ prompt_prefix: null, prompt_ids: packInts([1, 2, 3, 4, 10, 11, 20]), completion_ids: packInts([21]), completion_logprobs: packFloats([-1.5]) });
    const next = call(c, { body: { messages: [sys, user, toolCall, toolResult], answer: answer2, tokens: whole() } });
    expect((await post(e, batchOf([truncated, next]))).status).toBe(200);
    const t = await ledgerOf(e, "trainer").trajectory(c.episode, c.fence);
    expect(t.calls.map((x) => [x.status, x.truncated])).toEqual([
      [200, true],
      [200, false],
    ]);
    expect(t.training).toEqual({ tokens: [], response_length: 0, loss_mask: [], rollout_log_probs: [], segments: [], drift_at_call: 0 });

    // Capture turned on after the first call: that call is part of the next one's prompt.
    const d = await claimOne(e, "c2");
    const untokenized = call(d, { body: { messages: [sys, user], answer: toolCall } });
    const after = call(d, { body: { messages: [sys, user, toolCall, toolResult], answer: answer2, tokens: whole() } });
    expect((await post(e, batchOf([untokenized, after]))).status).toBe(200);
    const u = await ledgerOf(e, "trainer").trajectory(d.episode, d.fence);
    expect(u.training).toMatchObject({ tokens: [1, 2, 3, 4, 10, 11, 20, 21], loss_mask: [1], drift_at_call: null });
  });

  it("reads a call relayed with capture off (an uncaptured stub) as a turn without token ids: training ends there, or it is in the first token call's prompt", async () => {
    const e = await createEngine();
    await rollingWith(e, 2);
    const stub = (c: Claim) => call(c, { capture: "off", finish_reason: null, usage: null, body: { params: {}, uncaptured: true } });
    // The third turn, stored against the claim's first call (the stub is no head of its history).
    const thirdAfter = (c: Claim, first: CallRecord, tokens: CallRecord["body"]["tokens"]) =>
      call(c, { body: { prefix: { call_id: first.call_id, count: 3 }, messages: [toolResult, answer2, user3], answer: answer3, tokens } });
    // Tokens, then off, then tokens.
    const c = await claimOne(e, "c1");
    const [first] = threeTurns(c);
    if (first === undefined) throw new Error("a call");
    const off = stub(c);
    const third = thirdAfter(c, first, { prompt_prefix: { call_id: first.call_id, count: 6 }, prompt_ids: packInts([20, 21, 30]), completion_ids: packInts([40]), completion_logprobs: packFloats([-2]) });
    expect((await post(e, batchOf([first, off, third]))).status).toBe(200);
    const t = await ledgerOf(e, "trainer").trajectory(c.episode, c.fence);
    expect(t.calls.map((x) => [x.uncaptured, x.messages_splice, x.prefix_missing])).toEqual([
      [false, "first", false],
      [true, "extends", false],
      [false, "extends", false],
    ]);
    expect(t.calls[1]).toMatchObject({ messages: [], answer: null, tokens: null, truncated: false });
    expect(t.calls[2]?.messages).toEqual([sys, user, toolCall, toolResult, answer2, user3]);
    // The stub's completion [21] is in the third prompt: never taken for prompt tokens.
    expect(t.training).toMatchObject({ tokens: [1, 2, 3, 4, 10, 11], loss_mask: [1, 1], drift_at_call: 1 });

    // Messages, then off, then tokens: capture turned on mid-claim, the calls before are the prompt.
    const d = await claimOne(e, "c2");
    const untokenized = call(d, { body: { messages: [sys, user], answer: toolCall } });
    const offToo = stub(d);
    const after = thirdAfter(d, untokenized, { prompt_prefix: null, prompt_ids: packInts([1, 2, 3, 4, 10, 11, 20, 21, 30]), completion_ids: packInts([40]), completion_logprobs: packFloats([-2]) });
    expect((await post(e, batchOf([untokenized, offToo, after]))).status).toBe(200);
    const u = await ledgerOf(e, "trainer").trajectory(d.episode, d.fence);
    expect(u.calls.map((x) => x.uncaptured)).toEqual([false, true, false]);
    expect(u.training).toMatchObject({ tokens: [1, 2, 3, 4, 10, 11, 20, 21, 30, 40], loss_mask: [1], drift_at_call: null });
  });

  it("marks a call whose prefix call the ledger does not have, shows what it added, and ends the training sequence there", async () => {
    const e = await createEngine();
    await rollingWith(e, 2);
    const c = await claimOne(e, "c1");
    const [first, dropped, third] = threeTurns(c);
    if (first === undefined || dropped === undefined || third === undefined) throw new Error("three calls");
    // The second call's batch never reached the exchange: the third continues it.
    expect((await post(e, batchOf([first, third]))).status).toBe(200);
    const t = await ledgerOf(e, "trainer").trajectory(c.episode, c.fence);
    expect(t.calls.map((x) => x.prefix_missing)).toEqual([false, true]);
    expect(t.calls[1]?.messages).toEqual([user3]);
    expect(t.calls[1]?.tools).toBeNull();
    expect(t.training).toMatchObject({ tokens: [1, 2, 3, 4, 10, 11], loss_mask: [1, 1], drift_at_call: 1 });

    // The same when the prefix call's row is there but its body is not (an R2 object removed).
    const d = await claimOne(e, "c2");
    const [a, b] = threeTurns(d);
    if (a === undefined || b === undefined) throw new Error("two calls");
    expect((await post(e, batchOf([a]))).status).toBe(200);
    expect((await post(e, batchOf([b]))).status).toBe(200);
    const key = await env.DB.prepare("SELECT body_key FROM llm_calls WHERE engine = ? AND call_id = ?").bind(e.name, a.call_id).first<{ body_key: string }>();
    await env.LEDGER.delete(key?.body_key ?? "");
    const u = await ledgerOf(e, "trainer").trajectory(d.episode, d.fence);
    expect(u.calls.map((x) => x.prefix_missing)).toEqual([false, true]);
    expect(u.calls[1]?.messages).toEqual([toolResult]);
    // Its ids were recorded and lost, so the sequence says it stops before it starts, rather than that the claim had none.
    expect(u.training).toMatchObject({ tokens: [], response_length: 0, drift_at_call: 0 });
  });

  it("rebuilds /v1/completions prompts of token ids stored as deltas exactly, in the trajectory and the export", async () => {
    const e = await createEngine();
    await rollingWith(e, 2);
    const c = await claimOne(e, "c1");
    const tokens = (prompt: number[], completion: number[], prefix: { call_id: string; count: number } | null = null) => ({
      prompt_prefix: prefix,
      prompt_ids: packInts(prompt),
      completion_ids: packInts(completion),
      completion_logprobs: packFloats(completion.map(() => -0.5)),
    });
    const completion = (over: Parameters<typeof call>[1]) => call(c, { endpoint: "/v1/completions", ...over });
    // As relayed: the first prompt; the second continues its prompt and completion ids; the third
    // re-tokenized the second's answer (99 for [21]) and continues only the second's prompt.
    const sent = [
      { model: "policy", prompt: [1, 2, 3, 4], max_tokens: 8 },
      { model: "policy", prompt: [1, 2, 3, 4, 10, 11, 20], max_tokens: 8 },
      { model: "policy", prompt: [1, 2, 3, 4, 10, 11, 20, 99, 30], max_tokens: 8 },
    ];
    const first = completion({ body: { params: sent[0]!, tokens: tokens([1, 2, 3, 4], [10, 11]) } });
    const second = completion({
      body: { params: { ...sent[1]!, prompt: { prefix: { call_id: first.call_id, count: 6 }, rest: [20] } }, tokens: tokens([20], [21], { call_id: first.call_id, count: 6 }) },
    });
    const third = completion({
      body: { params: { ...sent[2]!, prompt: { prefix: { call_id: second.call_id, count: 7 }, rest: [99, 30] } }, tokens: tokens([1, 2, 3, 4, 10, 11, 20, 99, 30], [31]) },
    });
    expect((await post(e, batchOf([first, second, third]))).status).toBe(200);
    const t = await ledgerOf(e, "viewer").trajectory(c.episode, c.fence);
    expect(JSON.stringify(t.calls.map((x) => x.params))).toBe(JSON.stringify(sent));
    expect(t.calls.map((x) => x.prefix_missing)).toEqual([false, false, false]);
    await endAndFlush(e, c, 1);
    const exported = [];
    for await (const x of ledgerOf(e, "viewer").export()) exported.push(x);
    expect(exported).toHaveLength(1);
    expect(JSON.stringify(exported[0]!.calls.map((x) => x.params))).toBe(JSON.stringify(sent));

    // The second call's batch never reached the exchange: the third shows what it added, and says so.
    const d = await claimOne(e, "c2");
    const [d1, d2, d3] = [first, second, third].map((x) => ({ ...x, call_id: `${x.call_id}-d`, episode_uuid: d.episode, fence: d.fence, client_uuid: d.client }));
    d3!.body = { ...d3!.body, params: { ...sent[2]!, prompt: { prefix: { call_id: d2!.call_id, count: 7 }, rest: [99, 30] } } };
    expect((await post(e, batchOf([d1!, d3!]))).status).toBe(200);
    const u = await ledgerOf(e, "viewer").trajectory(d.episode, d.fence);
    expect(u.calls.map((x) => [x.prefix_missing, x.params["prompt"]])).toEqual([
      [false, [1, 2, 3, 4]],
      [true, [99, 30]],
    ]);
  });

  it("reads prompt deltas of no valid shape, or that do not fit the call they name, without failing", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const c = await claimOne(e, "c1");
    const completion = (prompt: unknown) => call(c, { endpoint: "/v1/completions", body: { params: { prompt }, answer: { role: "assistant", content: "ok" } } });
    const ids = completion([1, 2]);
    const text = completion("ab");
    const ref = (base: CallRecord, count: number) => ({ call_id: base.call_id, count });
    // A delta longer than its base, ids after text and text after ids, with no completion ids known (capture messages).
    const unfit = [completion({ prefix: ref(ids, 3), rest: [5] }), completion({ prefix: ref(text, 1), rest: [5] }), completion({ prefix: ref(ids, 1), rest: "x" })];
    // Not deltas at all: shown as stored.
    const shapes = [{ prefix: ref(ids, -1), rest: [5] }, { prefix: ref(ids, 1), rest: [1, "a"] }, { prefix: ref(ids, 1.5), rest: [5] }, { prefix: null, rest: [5] }, { rest: [5] }];
    const odd = shapes.map(completion);
    expect((await post(e, batchOf([ids, text, ...unfit, ...odd]))).status).toBe(200);
    const t = await ledgerOf(e, "viewer").trajectory(c.episode, c.fence);
    expect(t.calls.map((x) => [x.prefix_missing, x.params["prompt"]])).toEqual([
      [false, [1, 2]],
      [false, "ab"],
      [true, [5]],
      [true, [5]],
      [true, "x"],
      ...shapes.map((p) => [false, p]),
    ]);
    // Within what is known they fit: the ids' prompt (no completion ids), the text's prompt and part of its answer.
    const fits = [completion({ prefix: ref(ids, 2), rest: [5] }), completion({ prefix: ref(text, 3), rest: "c" })];
    expect((await post(e, batchOf(fits))).status).toBe(200);
    const u = await ledgerOf(e, "viewer").trajectory(c.episode, c.fence);
    expect(u.calls.slice(-2).map((x) => [x.prefix_missing, x.params["prompt"]])).toEqual([
      [false, [1, 2, 5]],
      [false, "aboc"],
    ]);
  });

  it("takes a call's tools from the call its prefix names, not from the call admitted before it", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const c = await claimOne(e, "c1");
    const search = [{ type: "function", function: { name: "search", parameters: { type: "object" } } }];
    // Two agents of one claim: A1 admitted before B1, B1 finished first; A2 continues A1 with A1's tools.
    const a1 = call(c, { body: { tools, messages: [sys, user], answer: toolCall } });
    const b1 = call(c, { body: { tools: search, messages: [{ role: "user", content: "search cats" }], answer: { role: "assistant", content: "cats" } } });
    const a2 = call(c, { body: { tools_from_prefix: true, prefix: { call_id: a1.call_id, count: 3 }, messages: [toolResult], answer: answer2 } });
    // Over the record cap, the gateway keeps tools_from_prefix but drops the prefix (recorder.ts fitBody).
    const a3 = call(c, { truncated: true, body: { tools_from_prefix: true, answer: { role: "assistant", content: "6" } } });
    expect((await post(e, batchOf([b1, a1, a2, a3]))).status).toBe(200);
    const t = await ledgerOf(e, "viewer").trajectory(c.episode, c.fence);
    expect(t.calls.map((x) => x.call_id)).toEqual([a1.call_id, b1.call_id, a2.call_id, a3.call_id]);
    expect(t.calls[2]?.messages).toEqual([sys, user, toolCall, toolResult]);
    expect(t.calls.map((x) => x.tools)).toEqual([tools, search, tools, null]);
  });

  it("rebuilds a call from the call its prefix names even when that was admitted after it, and takes a prefix cycle for missing", async () => {
    const e = await createEngine();
    await rollingWith(e, 2);
    const c = await claimOne(e, "c1");
    // Concurrent calls of one claim with the same history: B, admitted after A, failed first, and the
    // gateway stored A against it (the claim's last call to finish); C continues A.
    const b = call(c, { status: 400, finish_reason: null, usage: null, body: { tools, messages: [sys, user], answer: null } });
    const a = call(c, {
      admitted_at: b.admitted_at - 500,
      body: {
        tools_from_prefix: true,
        prefix: { call_id: b.call_id, count: 2 },
        messages: [],
        answer: toolCall,
        tokens: { prompt_prefix: null, prompt_ids: packInts([1, 2, 3, 4]), completion_ids: packInts([10, 11]), completion_logprobs: packFloats([-0.5, -0.25]) },
      },
    });
    const next = call(c, {
      body: {
        tools_from_prefix: true,
        prefix: { call_id: a.call_id, count: 3 },
        messages: [toolResult],
        answer: answer2,
        tokens: { prompt_prefix: { call_id: a.call_id, count: 6 }, prompt_ids: packInts([20]), completion_ids: packInts([21]), completion_logprobs: packFloats([-1.5]) },
      },
    });
    expect((await post(e, batchOf([b, a, next]))).status).toBe(200);
    const t = await ledgerOf(e, "trainer").trajectory(c.episode, c.fence);
    expect(t.calls.map((x) => x.call_id)).toEqual([a.call_id, b.call_id, next.call_id]);
    expect(t.calls.map((x) => x.prefix_missing)).toEqual([false, false, false]);
    expect(t.calls[0]?.messages).toEqual([sys, user]);
    expect(t.calls[2]?.messages).toEqual([sys, user, toolCall, toolResult]);
    expect(t.calls.map((x) => x.tools)).toEqual([tools, tools, tools]);
    expect(t.training).toMatchObject({ tokens: [1, 2, 3, 4, 10, 11, 20, 21], loss_mask: [1, 1, 0, 1], drift_at_call: null });

    // Stored data that names calls in a circle rebuilds neither, and says so.
    const d = await claimOne(e, "c2");
    const p = call(d, { body: { messages: [user3], answer: answer3 } });
    const q = call(d, { body: { prefix: { call_id: p.call_id, count: 1 }, messages: [user3], answer: answer3 } });
    p.body.prefix = { call_id: q.call_id, count: 1 };
    expect((await post(e, batchOf([p, q]))).status).toBe(200);
    const u = await ledgerOf(e, "viewer").trajectory(d.episode, d.fence);
    expect(u.calls.map((x) => [x.prefix_missing, x.messages])).toEqual([
      [true, [user3]],
      [true, [user3]],
    ]);
  });

  it("keeps aborted and reaped claims as trajectories, with their calls and no reward", async () => {
    const e = await createEngine();
    await rollingWith(e, 2);
    const a = await claimOne(e, "ca");
    await post(e, batchOf([call(a, { body: { messages: [user], answer: answer2 } })]));
    const abort = await e.as("client").abortEpisode({ ...endBody(a.client, a.episode, 0, ""), task_id: "" });
    expect(abort.success).toBe(true);
    const r = await e.as("client").claimEpisode({ client_uuid: "cr", discard_episode_timeout: 60 });
    const reaped = await claimKeyFields(r.openai_api_key);
    await advance(e, 61_000);
    await advance(e, 2_000);
    const v = ledgerOf(e, "viewer");
    const list = await v.list();
    expect(list.trajectories.map((t) => [t.client_uuid, t.outcome, t.reward, t.calls])).toEqual([
      ["cr", "reaped", null, 0],
      ["ca", "aborted", null, 1],
    ]);
    expect((await v.list({ outcome: "reaped" })).trajectories.map((t) => t.episode_uuid)).toEqual([reaped.episode_uuid]);
    const t = await v.trajectory(a.episode, a.fence);
    expect(t).toMatchObject({ outcome: "aborted", reward: null });
    expect(t.calls).toHaveLength(1);
  });

  it("keeps a claim aborted without a workflow output as a trajectory", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const a = await claimOne(e, "ca");
    // abort_episode's workflow_output is optional: the trajectory's row must not need it.
    expect((await e.as("client").abortEpisode({ client_uuid: a.client, episode_uuid: a.episode })).success).toBe(true);
    await advance(e, 2_000);
    expect(await ledgerOf(e, "viewer").trajectory(a.episode, a.fence)).toMatchObject({ outcome: "aborted", reward: null, workflow_output: {} });
    expect((await engineStats(e)).outbox).toBe(0);
  });

  it("deletes calls older than retention_days from D1 and R2 in the engine's alarm, hourly once the ledger is used", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    await ledgerOf(e, "operator").configure({ retention_days: 2 });
    await withGateway(e);
    const c = await claimOne(e, "c1");
    if (c.key === undefined) throw new Error("claimed");
    expect((await e.stub.relayBegin(c.key)).ok).toBe(true);
    const day = 86_400_000;
    const old = call(c, { admitted_at: e.clock.t - 3 * day, body: { messages: [user] } });
    const recent = call(c, { admitted_at: e.clock.t - day, body: { messages: [user] } });
    await post(e, batchOf([old, recent]));
    const objects = async () => (await env.LEDGER.list({ prefix: `ledger/${encodeURIComponent(e.name)}/` })).objects.length;
    expect(await objects()).toBe(1);
    // Not yet: the first sweep is an hour after the first call with capture on.
    await advance(e, 1000);
    expect(await countRows(e.name)).toBe(2);
    await advance(e, 3_600_000);
    const left = await env.DB.prepare("SELECT call_id FROM llm_calls WHERE engine = ?").bind(e.name).all<{ call_id: string }>();
    expect(left.results.map((r) => r.call_id)).toEqual([recent.call_id]);
    // The object's day (the Worker's real clock) is long before the engine's test clock's cutoff.
    expect(await objects()).toBe(0);
    expect((await engineStats(e)).alarm_at).toBeLessThanOrEqual(e.clock.t + 3_600_000);
  });

  it("records a resent batch once", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const c = await claimOne(e, "c1");
    const batch = batchOf(threeTurns(c));
    expect((await post(e, batch)).json).toEqual({ recorded: 3, duplicates: 0 });
    expect((await post(e, batch)).json).toEqual({ recorded: 0, duplicates: 3 });
    expect(await countRows(e.name)).toBe(3);
    expect((await ledgerOf(e, "viewer").trajectory(c.episode)).calls).toHaveLength(3);
  });

  it("keeps each call's body when a batch id comes again with other calls", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const c = await claimOne(e, "c1");
    const [first, second] = threeTurns(c);
    if (first === undefined || second === undefined) throw new Error("three turns");
    expect((await post(e, batchOf([first], "batch-again"))).json).toEqual({ recorded: 1, duplicates: 0 });
    // The same id, other content (a gateway that reuses ids, or a mistake): the first call's body
    // must still read as it was sent, not as whatever the second batch has at its offset.
    expect((await post(e, batchOf([second, first], "batch-again"))).json).toEqual({ recorded: 1, duplicates: 1 });
    const t = await ledgerOf(e, "viewer").trajectory(c.episode);
    expect(t.calls.map((x) => x.messages)).toEqual([[sys, user], [sys, user, toolCall, toolResult]]);
    expect(t.calls[0]?.tokens?.prompt_ids).toEqual([1, 2, 3, 4]);
  });

  it("lists ended claims newest first, filtered, a page at a time with a cursor that names its engine", async () => {
    const e = await createEngine();
    await rollingWith(e, 5);
    const rewards = [0.1, 0.9, 0.5, 0.3, 0.7];
    for (const [i, r] of rewards.entries()) {
      const c = await claimOne(e, `c${i}`);
      await post(e, batchOf([call(c, { body: { messages: [user], answer: answer2 } })]));
      await endAndFlush(e, c, r);
    }
    const v = ledgerOf(e, "viewer");
    const all = await v.list();
    expect(all.trajectories.map((t) => t.reward)).toEqual([...rewards].reverse());
    expect(all.trajectories.every((t) => t.calls === 1 && t.prompt_tokens === 4)).toBe(true);
    expect(all.next_cursor).toBeNull();
    expect((await v.list({ min_reward: 0.4, max_reward: 0.8 })).trajectories.map((t) => t.reward)).toEqual([0.7, 0.5]);
    expect((await v.list({ outcome: "aborted" })).trajectories).toEqual([]);
    expect((await v.list({ task_id: "nope" })).trajectories).toEqual([]);

    const p1 = await v.list({ limit: 2 });
    expect(p1.trajectories.map((t) => t.reward)).toEqual([0.7, 0.3]);
    const p2 = await v.list({ limit: 2, cursor: p1.next_cursor ?? "" });
    expect(p2.trajectories.map((t) => t.reward)).toEqual([0.5, 0.9]);
    const p3 = await v.list({ limit: 2, cursor: p2.next_cursor ?? "" });
    expect(p3.trajectories.map((t) => t.reward)).toEqual([0.1]);
    expect(p3.next_cursor).toBeNull();

    const other = await createEngine();
    const wrong = await raw(`/e/${other.name}/trajectories?cursor=${p1.next_cursor}`, { token: other.tokens.viewer });
    expect(wrong.status).toBe(400);
    expect(wrong.json).toMatchObject({ error: "bad_cursor" });
    expect((await raw(`/e/${e.name}/trajectories?cursor=garbage!!`, { token: e.tokens.viewer })).status).toBe(400);
    // A blank value names no number (not 0).
    for (const q of ["limit=0", "limit=201", "outcome=lost", "min_reward=abc", "global_step=1.5", "colour=blue", "global_step=", "run=", "min_reward=", "max_reward=%20", "until=", "limit="]) {
      const r = await raw(`/e/${e.name}/trajectories?${q}`, { token: e.tokens.viewer });
      expect(r.status, q).toBe(422);
    }
  });

  it("exports every trajectory as JSON lines, streamed past its page size, and refuses a foreign cursor", async () => {
    const e = await createEngine();
    // 450 ended claims: more than two export pages. Written as the engine's outbox writes them.
    await env.DB.prepare(
      `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 450)
       INSERT INTO trajectories (engine, episode_uuid, fence, client_uuid, task_id, episode_type, global_step, run, reward, is_success, workflow_output, ended_at)
       SELECT ?, 'ep-' || i, 1, 'c', 'task-' || (i % 3), 'train', i / 100, 1, i / 450.0, 1, '{"reward":0}', 1000 + i FROM n`,
    )
      .bind(e.name)
      .run();
    const c: Claim = { episode: "ep-450", fence: 1, client: "c" };
    await post(e, batchOf(threeTurns(c)));
    const v = ledgerOf(e, "viewer");
    const seen: string[] = [];
    let withCalls = 0;
    for await (const t of v.export()) {
      seen.push(t.episode_uuid);
      if (t.calls.length > 0) {
        withCalls++;
        expect(t.training?.tokens).toEqual([1, 2, 3, 4, 10, 11, 20, 21, 30, 31, 32, 40]);
      }
    }
    expect(seen).toHaveLength(450);
    // Announced up front, for a progress bar: what the filters pass, whatever page the cursor starts at.
    const head = await workerFetch(`${ORIGIN}/e/${e.name}/trajectories/export?task_id=task-1`, { headers: { authorization: `Bearer ${e.tokens.viewer}` } });
    expect(head.headers.get("x-trajectories-total")).toBe("150");
    await head.body?.cancel();
    expect(new Set(seen).size).toBe(450);
    expect(seen[0]).toBe("ep-450");
    expect(withCalls).toBe(1);
    let filtered = 0;
    for await (const t of v.export({ task_id: "task-0", global_step: 2 })) {
      expect(t).toMatchObject({ task_id: "task-0", global_step: 2 });
      filtered++;
    }
    expect(filtered).toBe(33);

    const other = await createEngine();
    const page = await v.list({ limit: 1 });
    const foreign = await raw(`/e/${other.name}/trajectories/export?cursor=${page.next_cursor}`, { token: other.tokens.viewer });
    expect(foreign.status).toBe(400);
    expect((await raw(`/e/${e.name}/trajectories/export?format=csv`, { token: e.tokens.viewer })).status).toBe(422);
  });

  it("exports and reads in the delta form: each call what it added, made whole again the same trajectories, and a form of no name refused", async () => {
    const e = await createEngine();
    await rollingWith(e, 2);
    const claims = [await claimOne(e, "c1"), await claimOne(e, "c2")];
    for (const c of claims) {
      await post(e, batchOf(threeTurns(c)));
      await endAndFlush(e, c, 1);
    }
    const v = ledgerOf(e, "viewer");
    const whole: Trajectory[] = [];
    for await (const t of v.export()) whole.push(t);
    const delta: Trajectory[] = [];
    for await (const t of v.export({ form: "delta" })) delta.push(t);
    expect(whole.map((t) => t.form)).toEqual(["whole", "whole"]);
    expect(delta.map((t) => t.form)).toEqual(["delta", "delta"]);
    expect(delta.map(wholeTrajectory)).toEqual(whole);
    // The third call as stored: the messages and prompt ids it added to the second, which it names.
    const [, second, third] = delta[0]?.calls ?? [];
    expect(third?.messages_from).toEqual({ call_id: second?.call_id, count: 5 });
    expect(third?.messages).toEqual([user3]);
    expect(third?.tokens?.prompt_from).toEqual({ call_id: second?.call_id, count: 8 });
    expect(third?.tokens?.prompt_ids).toEqual([30, 31, 32]);
    expect(delta[0]?.calls[0]?.messages_from).toBeNull();
    // The whole form names no call: those fields are the delta form's only.
    expect(whole[0]?.calls[2]).not.toHaveProperty("messages_from");
    expect(whole[0]?.calls[2]?.tokens).not.toHaveProperty("prompt_from");
    // The one trajectory's read takes the same form; ledgerOf checks it made whole is the whole read.
    expect((await v.trajectory(claims[0]?.episode as string, undefined, { form: "delta" })).calls[2]?.messages).toEqual([user3]);

    for (const path of [`/trajectories/export?form=diff`, `/trajectories/${claims[0]?.episode}?form=Delta`, `/trajectories/${claims[0]?.episode}?forms=delta`]) {
      const res = await raw(`/e/${e.name}${path}`, { token: e.tokens.viewer });
      expect(res.status, path).toBe(422);
      expect((res.json as { error: string }).error, path).toBe("invalid_request");
    }
  });

  it("says an export line it cannot read is the exchange's answer (ExchangeError), not a bare parse error", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const c = await claimOne(e, "c");
    expect((await post(e, batchOf(threeTurns(c)))).status).toBe(200);
    await endAndFlush(e, c, 1);
    // A line of the wrong type, and a line that is no JSON.
    const served = (edit: (line: string) => string) =>
      new LedgerClient({
        baseUrl: `${ORIGIN}/e/${e.name}`,
        token: e.tokens.viewer,
        fetch: async (input, init) => new Response(edit(await (await workerFetch(input, init)).text()), { status: 200 }),
      });
    const first = async (client: LedgerClient) => {
      for await (const t of client.export()) return t;
      return null;
    };
    await expect(first(served((l) => l.replace('"outcome":"ended"', '"outcome":7')))).rejects.toMatchObject({ name: "ExchangeError", status: 200, code: "unreadable_answer", detail: expect.stringContaining("outcome") });
    await expect(first(served(() => "<html>a proxy's page</html>\n"))).rejects.toMatchObject({ name: "ExchangeError", code: "bad_response" });
    expect(await first(served((l) => l))).toMatchObject({ episode_uuid: c.episode, outcome: "ended" });
    // The same exchange one version newer: a way a claim ends, or a call continues, this client does not know.
    // A pinned SDK refused the whole export (unreadable_answer) for one new value.
    const newer = served((l) => l.replace('"outcome":"ended"', '"outcome":"expired"').replaceAll('splice":"extends"', 'splice":"resumed"'));
    const t = await first(newer);
    expect(t).toMatchObject({ episode_uuid: c.episode, outcome: "expired" });
    expect(t?.calls.map((k) => [k.messages_splice, k.tokens?.splice])).toEqual([
      ["first", "first"],
      ["resumed", "resumed"],
      ["resumed", "resumed"],
    ]);
  });

  // What a user saw: an operator revokes a viewer token (a leaked laptop, a departing
  // contractor) while that token is exporting the engine's trajectories (every client's prompts
  // and answers). The export carried on, page after page from D1, to the last trajectory: the
  // revocation cut off nothing. docs/security.md: "A revoked token stops working at once".
  // The export re-reads D1 for every page (200 trajectories); it stops at the next page.
  it("keeps paging an export for a token revoked after its first line", async () => {
    const e = await createEngine("iso-exp");
    await seedEnded(e, 650, "ep", 1000);
    const res = await openExport(e, e.tokens.viewer);
    expect(res.status).toBe(200);
    const next = lineReader(res.body!);
    expect(await next()).toMatchObject({ episode_uuid: "ep-650" });
    await admin.revokeToken(e.name, e.tokenIds.viewer);
    // The token is refused now for a new request...
    expect((await openExport(e, e.tokens.viewer)).status).toBe(401);
    // ...and the open stream sends the rest of the page it had read, then breaks off (not an
    // end: a reader must not take the part for the whole export).
    const after = await drain(next);
    expect(after.lines.length, "trajectories sent to a revoked token after its revocation").toBeLessThan(200);
    expect(after.broke).toBe(true);

    // The client says so: an ExchangeError, after the trajectories it did send.
    const op = ledgerOf(e, "operator");
    let got = 0;
    const reading = (async () => {
      for await (const _t of op.export()) if (++got === 1) await admin.revokeToken(e.name, e.tokenIds.operator);
    })();
    await expect(reading).rejects.toMatchObject({ name: "ExchangeError", status: 200, code: EXPORT_INTERRUPTED, detail: expect.stringContaining("after 200 trajectories") });
    expect(got).toBe(200);
  });

  // What a user saw: team A's engine `x` is deleted (forced) and `x` is made again for team B.
  // A viewer of the old `x` who had an export open kept reading, and once its first page was
  // used up the stream paged through team B's trajectories: the new engine's data, read with a
  // token of a deleted engine. The export's pages are keyed by the engine's name
  // (ledger/export.ts summaryPage(db, engine, ...)), not by the incarnation it authorized.
  it("pages into a new engine made under the deleted one's name", async () => {
    const old = await createEngine("iso-inc");
    await seedEnded(old, 450, "teamA", 10_000);
    // A viewer's export, and the admin's: the admin's token passes on the new engine too, so only
    // the incarnation the export began with tells the engines apart.
    const opened = await Promise.all([openExport(old, old.tokens.viewer), openExport(old, ADMIN_TOKEN)]);
    const readers = opened.map((res) => {
      expect(res.status).toBe(200);
      return lineReader(res.body!);
    });
    for (const next of readers) expect(String(((await next()) as Record<string, unknown> | null)?.["episode_uuid"])).toMatch(/^teamA-/);

    await admin.deleteEngine(old.name, { force: true });
    const fresh = await createEngine(undefined, { name: old.name });
    // Team B's trajectories: older ended_at than the cursor, so they come next in its order.
    await seedEnded(fresh, 300, "teamB", 0);
    // A token of the deleted engine is refused by the new one.
    expect((await openExport(fresh, old.tokens.viewer)).status).toBe(401);

    for (const [i, next] of readers.entries()) {
      const rest = await drain(next);
      const leaked = rest.lines.map((t) => String(t["episode_uuid"])).filter((id) => id.startsWith("teamB-"));
      expect(leaked.length, `team B's trajectories streamed to the deleted engine's ${i === 0 ? "viewer" : "admin"} (e.g. ${leaked.slice(0, 3).join(", ")})`).toBe(0);
      expect(rest.lines.length).toBeLessThan(200);
      expect(rest.broke).toBe(true);
    }
  });

  it("answers 404 for a trajectory it does not have", async () => {
    const e = await createEngine();
    const v = ledgerOf(e, "viewer");
    await expect(v.trajectory("nobody")).rejects.toMatchObject({ status: 404, code: "unknown_trajectory" });
    for (const fence of ["01", "-1", "x", "1e0"]) {
      expect((await raw(`/e/${e.name}/trajectories/ep/${fence}`, { token: e.tokens.viewer })).status, fence).toBe(404);
    }
  });

  it("reads a claim by any fence a call may be recorded with", async () => {
    const e = await createEngine();
    const c: Claim = { episode: "ep-far", fence: Number.MAX_SAFE_INTEGER, client: "c" };
    expect((await post(e, batchOf([call(c, { body: { messages: [user] } })]))).status).toBe(200);
    expect((await ledgerOf(e, "viewer").trajectory(c.episode, c.fence)).calls).toHaveLength(1);
    expect((await raw(`/e/${e.name}/trajectories/ep-far/${Number.MAX_SAFE_INTEGER}`, { token: e.tokens.viewer })).status).toBe(200);
    for (const fence of ["9007199254740992", "99999999999999999"]) {
      expect((await raw(`/e/${e.name}/trajectories/ep-far/${fence}`, { token: e.tokens.viewer })).status, fence).toBe(404);
    }
  });

  it("lets viewers, operators and trainers read, not clients; only the trainer records", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const c = await claimOne(e, "c1");
    for (const role of ["viewer", "operator", "trainer", "admin"] as const) expect((await ledgerOf(e, role).list()).trajectories).toEqual([]);
    expect((await raw(`/e/${e.name}/trajectories`, { token: e.tokens.client })).status).toBe(403);
    expect((await raw(`/e/${e.name}/trajectories/${c.episode}`, { token: e.tokens.client })).status).toBe(403);
    expect((await raw(`/e/${e.name}/trajectories/export`, { token: e.tokens.client })).status).toBe(403);
    expect((await raw(`/e/${e.name}/trajectories`)).status).toBe(401);
    const batch = batchOf([call(c, { body: { messages: [user] } })]);
    expect((await post(e, batch, "client")).status).toBe(403);
    expect((await raw(`/e/${e.name}/agent/calls`, { token: e.tokens.operator, body: JSON.stringify(batch) })).status).toBe(403);
    expect((await raw(`/e/no-such-engine/trajectories`, { token: e.tokens.viewer })).status).toBe(404);
    // The token in the path works as for every engine route.
    expect((await raw(`/e/${e.name}/t/${e.tokens.viewer}/trajectories`)).status).toBe(200);
    expect(await countRows(e.name)).toBe(0);
  });

  it("refuses a malformed batch whole, and records nothing of it", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const c = await claimOne(e, "c1");
    const good = call(c, { body: { messages: [user] } });
    const bad: unknown[] = [
      "not json",
      {},
      { batch_id: "short", calls: [good] },
      { batch_id: "batch-0001", calls: [] },
      { batch_id: "batch-0001", calls: [good, { ...good, fence: -1 }] },
      { batch_id: "batch-0001", calls: [{ ...good, body: { ...good.body, tokens: { prompt_prefix: null, prompt_ids: "!!", completion_ids: "", completion_logprobs: "" } } }] },
      { batch_id: "batch-0001", calls: [{ ...good, capture: "everything" }] },
      // Base64 that is not whole 32-bit values, or a logprob JSON cannot carry: readers could not decode them.
      ...[
        { prompt_ids: "=", completion_ids: "", completion_logprobs: "" },
        { prompt_ids: "AAA=", completion_ids: "", completion_logprobs: "" },
        { prompt_ids: packInts([1]), completion_ids: "A", completion_logprobs: "" },
        { prompt_ids: packInts([1]), completion_ids: packInts([2]), completion_logprobs: packFloats([Number.NaN]) },
        { prompt_ids: packInts([1]), completion_ids: packInts([2]), completion_logprobs: packFloats([Number.NEGATIVE_INFINITY]) },
      ].map((t) => ({ batch_id: "batch-0001", calls: [{ ...good, body: { ...good.body, tokens: { prompt_prefix: null, ...t } } }] })),
      // An id with a lone surrogate: D1 would keep it as U+FFFD, and the call could not be named again.
      ...[{ episode_uuid: "ep\ud800" }, { call_id: "call\udc00" }, { client_uuid: "c\ud800" }, { task_id: "\ud800" }].map((id) => ({ batch_id: "batch-0001", calls: [{ ...good, ...id }] })),
      { batch_id: "batch-0001", calls: [{ ...good, body: { ...good.body, prefix: { call_id: "\ud800", count: 1 } } }] },
      // Longer than a claim's own fields may be: no claim's call carries them.
      ...[{ client_uuid: "c".repeat(257) }, { task_id: "t".repeat(257) }, { episode_type: "e".repeat(65) }].map((f) => ({ batch_id: "batch-0001", calls: [{ ...good, ...f }] })),
    ];
    for (const b of bad) {
      const r = await raw(`/e/${e.name}/agent/calls`, { token: e.tokens.trainer, body: typeof b === "string" ? b : JSON.stringify(b) });
      expect([400, 422], JSON.stringify(b).slice(0, 80)).toContain(r.status);
    }
    expect(await countRows(e.name)).toBe(0);
  });

  it("keeps capture and retention per engine: messages by default, set by the operator, given to each admitted call", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    expect(await ledgerOf(e, "client").config()).toEqual({ capture: "messages", retention_days: 30 });
    expect(await ledgerOf(e, "operator").configure({ capture: "tokens", retention_days: 7 })).toEqual({ capture: "tokens", retention_days: 7 });
    expect(await ledgerOf(e, "viewer").config()).toEqual({ capture: "tokens", retention_days: 7 });
    for (const [role, body, status] of [
      ["client", { capture: "off" }, 403],
      ["trainer", { capture: "off" }, 403],
      ["operator", { capture: "everything" }, 422],
      ["operator", { retention_days: 0 }, 422],
      ["operator", { retention_days: 1.5 }, 422],
      ["operator", { capture: "off", colour: "blue" }, 422],
    ] as const) {
      expect((await raw(`/e/${e.name}/ledger/config`, { token: e.tokens[role], body: JSON.stringify(body) })).status, JSON.stringify(body)).toBe(status);
    }
    expect(await ledgerOf(e, "viewer").config()).toEqual({ capture: "tokens", retention_days: 7 });

    await withGateway(e);
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 0, weight_version: 5 });
    const c = await claimOne(e, "c9");
    if (c.key === undefined) throw new Error("claimed");
    const admitted = await e.stub.relayBegin(c.key);
    expect(admitted.ok ? admitted.body : admitted).toMatchObject({ capture: "tokens", client_uuid: c.client, weight_version: 5 });
  });
});

describe("ledger: what D1 holds", () => {
  /**
   * D1 holds at most 2 MB in one value, a bound parameter too ("string or blob too big"); the
   * local D1 holds more. This passes statements to the real D1 and refuses, as D1 does, a value
   * over the limit.
   */
  function d1HoldingAtMost(db: D1Database, max: number): D1Database {
    const prepare = (sql: string): D1PreparedStatement => {
      const statement = db.prepare(sql);
      return new Proxy(statement, {
        get: (target, prop) =>
          prop === "bind"
            ? (...values: unknown[]) => {
                for (const v of values) if (typeof v === "string" && utf8Bytes(v) > max) throw new Error("D1_ERROR: string or blob too big: SQLITE_TOOBIG");
                return target.bind(...values);
              }
            : Reflect.get(target, prop),
      });
    };
    return new Proxy(db, { get: (target, prop) => (prop === "prepare" ? prepare : Reflect.get(target, prop)) });
  }

  it("records a batch of 500 calls whose text fields make 6 MB of rows, in statements D1 holds, and a resend of it once", async () => {
    const made = await createEngine();
    const engine = { name: made.name, incarnation: "inc-1", checkedAt: Date.now() };
    // Control characters escape to six bytes of JSON each: 12 KB of row per call.
    const calls = Array.from({ length: MAX_CALLS_PER_BATCH }, (_, i) => call({ episode: "ep-big", fence: 1, client: "c" }, { status: 502, error: "\u0001".repeat(2000), finish_reason: null, usage: null, call_id: `big-${i}`, body: {} }));
    const batch = batchOf(calls, "batch-big-0001");
    const db = d1HoldingAtMost(env.DB, D1_MAX_ROW_BYTES);
    expect(await recordCalls(db, env.LEDGER, engine, batch, Date.UTC(2098, 11, 31))).toEqual({ recorded: 500, duplicates: 0 });
    expect(await recordCalls(db, env.LEDGER, engine, batch, Date.UTC(2098, 11, 31))).toEqual({ recorded: 0, duplicates: 500 });
    const stored = await env.DB.prepare("SELECT COUNT(*) AS n, MIN(LENGTH(error)) AS shortest FROM llm_calls WHERE engine = ?").bind(engine.name).first<{ n: number; shortest: number }>();
    expect(stored).toEqual({ n: 500, shortest: 2000 });
  });

  it("reads a page of an early run without walking every later trajectory", async () => {
    const engine = `run-pages-${crypto.randomUUID().slice(0, 8)}`;
    // Run 1: 40 rows written before runs (run NULL) and 60 with run 1; then 20,000 rows of later runs.
    await env.DB.prepare(
      `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < 20100)
       INSERT INTO trajectories (engine, episode_uuid, fence, client_uuid, task_id, episode_type, global_step, run, reward, is_success, workflow_output, ended_at, outcome)
       SELECT ?1, 'ep-' || i, 1, 'c', 't', 'train', i / 100, CASE WHEN i < 40 THEN NULL WHEN i < 100 THEN 1 ELSE 2 + (i - 100) / 1000 END, 1.0, 1, '{}', 1000000 + i, 'ended' FROM n`,
    )
      .bind(engine)
      .run();
    const read = { rows: 0 };
    const db = new Proxy(env.DB, {
      get: (target, prop) =>
        prop === "prepare"
          ? (sql: string) => {
              const statement = target.prepare(sql);
              return new Proxy(statement, {
                get: (st, p) =>
                  p === "bind"
                    ? (...values: unknown[]) => {
                        const bound = st.bind(...values);
                        return Object.assign(Object.create(bound) as D1PreparedStatement, {
                          all: async <T,>() => {
                            const r = await bound.all<T>();
                            read.rows += r.meta.rows_read;
                            return r;
                          },
                        });
                      }
                    : Reflect.get(st, p),
              });
            }
          : Reflect.get(target, prop),
    });
    const pages: string[] = [];
    let cursor: string | undefined;
    do {
      const page = await summaryPage(db, engine, { run: 1 }, cursor, 30);
      if ("ok" in page) throw new Error(`refused: ${JSON.stringify(page)}`);
      pages.push(...page.rows.map((r) => r.episode_uuid));
      cursor = page.next ?? undefined;
    } while (cursor !== undefined);
    expect(pages).toEqual(Array.from({ length: 100 }, (_, i) => `ep-${99 - i}`));
    // The run's own rows and their cursors' neighbours, not the 20,000 after them.
    expect(read.rows).toBeLessThan(1_000);
  });
});
