/**
 * Long episodes in the ledger: one claim of hundreds of turns, recorded as the gateway records it
 * (each call a delta of the one before: its new tool output, its new prompt ids), stored through
 * `<engine>/agent/calls` into real D1 and R2 in workerd, read back through the trajectory API,
 * the export and the rollout buffer; and a claim of more calls than a trajectory answers.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { LedgerClient } from "../src/client";
import { MAX_CALLS_PER_TRAJECTORY } from "../src/ledger/read";
import type { CallRecord } from "../src/protocol/ledger";
import { packFloats, packInts } from "../src/protocol/packed";
import { batchOf, callRecord as call, checkingDeltaForm, postCalls as post } from "./support/ledger";
import { advance, claimKeyFields, createEngine, endBody, ORIGIN, raw, rollingWith, workerFetch, type TestEngine } from "./support/harness";

type Claim = { episode: string; fence: number; client: string };

async function claimOne(e: TestEngine, client: string): Promise<Claim> {
  const c = await e.as("client").claimEpisode({ client_uuid: client, discard_episode_timeout: 3600 });
  expect(c.success).toBe(true);
  const k = await claimKeyFields(c.openai_api_key);
  return { episode: k.episode_uuid, fence: k.fence, client };
}

const sys = { role: "system", content: "You are a software engineering agent." };
const task = { role: "user", content: "Make the failing test pass." };
const answerOf = (i: number) => ({ role: "assistant", content: null, tool_calls: [{ id: `c${i}`, type: "function", function: { name: "bash", arguments: `{"cmd":"cat file_${i}.py"}` } }] });
const toolOf = (i: number, chars: number) => ({ role: "tool", tool_call_id: `c${i}`, content: `file_${i}.py\n${String.fromCharCode(97 + (i % 26)).repeat(chars)}` });
const idsOf = (i: number, n: number, salt: number) => Array.from({ length: n }, (_, k) => (i * 7919 + k * 31 + salt) % 150_000);
const lpOf = (i: number, n: number) => Array.from({ length: n }, (_, k) => -((i + k) % 97) / 64);

type Episode = { records: CallRecord[]; messages: unknown[][]; prompts: number[][]; completions: number[][] };

/**
 * `turns` calls of one claim, each stored as a delta of the one before, as the gateway stores them.
 * With `ownMessages`, only the token ids carry over: each call's messages are its own, since a
 * conversation carried across 2,000 calls would make the trajectory's answer hundreds of MB (every
 * call's messages whole), which the call bound is not about.
 */
function longEpisode(c: Claim, turns: number, toolChars: number, newIds: number, completionIds: number, ownMessages = false): Episode {
  const records: CallRecord[] = [];
  const messages: unknown[][] = [];
  const prompts: number[][] = [];
  const completions: number[][] = [];
  let whole: unknown[] = [sys, task];
  let prompt: number[] = [];
  for (let i = 0; i < turns; i++) {
    const prev = records.at(-1);
    const added = ownMessages ? [sys, { role: "user", content: `turn ${i}` }] : i === 0 ? [sys, task] : [toolOf(i - 1, toolChars)];
    if (ownMessages) whole = added;
    else if (i > 0) whole = [...whole, answerOf(i - 1), toolOf(i - 1, toolChars)];
    const newPrompt = idsOf(i, newIds, 1);
    const completion = idsOf(i, completionIds, 2);
    const prevLen = prompt.length + (completions.at(-1)?.length ?? 0);
    prompt = i === 0 ? newPrompt : [...prompt, ...(completions.at(-1) ?? []), ...newPrompt];
    const r = call(c, {
      usage: { prompt_tokens: prompt.length, completion_tokens: completion.length },
      body: {
        prefix: prev === undefined || ownMessages ? null : { call_id: prev.call_id, count: whole.length - 1 },
        messages: added,
        answer: answerOf(i),
        tokens: {
          prompt_prefix: prev === undefined ? null : { call_id: prev.call_id, count: prevLen },
          prompt_ids: packInts(newPrompt),
          completion_ids: packInts(completion),
          completion_logprobs: packFloats(lpOf(i, completion.length)),
        },
      },
    });
    records.push(r);
    messages.push(whole);
    prompts.push(prompt);
    completions.push(completion);
  }
  return { records, messages, prompts, completions };
}

/** Posts the records in batches of at most ~1.2 MB of JSON, as the gateway's shipper batches them. */
async function ship(e: TestEngine, records: CallRecord[]): Promise<void> {
  let batch: CallRecord[] = [];
  let bytes = 0;
  const flush = async () => {
    if (batch.length === 0) return;
    const r = await post(e, batchOf(batch));
    expect(r.status, JSON.stringify(r.json)).toBe(200);
    batch = [];
    bytes = 0;
  };
  for (const r of records) {
    const n = JSON.stringify(r).length;
    if (bytes + n > 1_200_000 || batch.length === 500) await flush();
    batch.push(r);
    bytes += n;
  }
  await flush();
}

async function r2Bytes(engine: string): Promise<number> {
  let total = 0;
  let cursor: string | undefined;
  do {
    const page = await env.LEDGER.list({ prefix: `ledger/${engine}/`, cursor });
    for (const o of page.objects) total += o.size;
    cursor = page.truncated ? page.cursor : undefined;
  } while (cursor !== undefined);
  return total;
}

const ledgerOf = (e: TestEngine) => checkingDeltaForm(new LedgerClient({ baseUrl: `${ORIGIN}/e/${e.name}`, token: e.tokens.viewer, fetch: workerFetch }));

describe("ledger: one very long episode", () => {
  it("stores a long claim in R2 and D1, and answers it in the delta form, linearly in its turns (N and 2N turns)", async () => {
    const sizes: { turns: number; r2: number; rows: number; delta: number; whole: number }[] = [];
    for (const turns of [60, 120]) {
      const e = await createEngine("longlin");
      await rollingWith(e, 1);
      const c = await claimOne(e, "c1");
      await ship(e, longEpisode(c, turns, 4_000, 300, 30).records);
      const rows = (await env.DB.prepare("SELECT COUNT(*) AS n FROM llm_calls WHERE engine = ?").bind(e.name).first<{ n: number }>())?.n ?? 0;
      const answer = async (form: string) => (await (await workerFetch(`${ORIGIN}/e/${e.name}/trajectories/${c.episode}?form=${form}`, { headers: { authorization: `Bearer ${e.tokens.viewer}` } })).arrayBuffer()).byteLength;
      sizes.push({ turns, r2: await r2Bytes(e.name), rows, delta: await answer("delta"), whole: await answer("whole") });
    }
    console.log("ledger long episode: storage and answers", JSON.stringify(sizes));
    const [a, b] = sizes as [(typeof sizes)[0], (typeof sizes)[0]];
    expect(a.rows).toBe(60);
    expect(b.rows).toBe(120);
    // Linear: twice the turns, about twice the bytes (quadratic would be four times), as the
    // delta form's answer; the whole form's is quadratic by its form.
    expect(b.r2 / a.r2, JSON.stringify(sizes)).toBeLessThan(2.2);
    expect(b.delta / a.delta, JSON.stringify(sizes)).toBeLessThan(2.2);
    expect(b.whole / a.whole, JSON.stringify(sizes)).toBeGreaterThan(3.5);
  });

  it("reads a 150-turn claim back exactly: every call's messages, prompt ids, completion ids, logprobs and the training sequence", async () => {
    const e = await createEngine("longread");
    await rollingWith(e, 1);
    const c = await claimOne(e, "c1");
    const ep = longEpisode(c, 150, 1_500, 200, 20);
    await ship(e, ep.records);
    const t = await ledgerOf(e).trajectory(c.episode);
    expect(t.calls).toHaveLength(150);
    const wrong: string[] = [];
    t.calls.forEach((x, i) => {
      if (JSON.stringify(x.messages) !== JSON.stringify(ep.messages[i])) wrong.push(`messages of #${i}`);
      if (JSON.stringify(x.tokens?.prompt_ids) !== JSON.stringify(ep.prompts[i])) wrong.push(`prompt of #${i}`);
      if (JSON.stringify(x.tokens?.completion_ids) !== JSON.stringify(ep.completions[i])) wrong.push(`completion of #${i}`);
      if (JSON.stringify(x.tokens?.completion_logprobs) !== JSON.stringify(lpOf(i, 20).map((v) => Math.fround(v)))) wrong.push(`logprobs of #${i}`);
      if (x.prefix_missing || x.truncated || x.messages_splice === "rewritten") wrong.push(`marks of #${i}`);
    });
    expect(wrong.slice(0, 10)).toEqual([]);
    const last = ep.prompts.at(-1)!;
    expect(t.training?.drift_at_call).toBeNull();
    expect(t.training?.tokens).toEqual([...last, ...ep.completions.at(-1)!]);
  });

  it("ends a long claim with a large workflow output (1.8 MB of log_metrics) and reads it back; refuses a larger one 413", async () => {
    const e = await createEngine("longend");
    await rollingWith(e, 1);
    const c = await claimOne(e, "c1");
    await ship(e, longEpisode(c, 20, 1_000, 50, 10).records);
    const withMetrics = (trace: string) => {
      const b = endBody(c.client, c.episode, 1, "task-1");
      return { ...b, workflow_output: { ...b.workflow_output, log_metrics: { trace } } };
    };
    const tooBig = withMetrics("t".repeat(2_500_000));
    const refused = await raw(`/e/${e.name}/end_episode`, { token: e.tokens.client, body: JSON.stringify(tooBig) });
    expect(refused.status, refused.text.slice(0, 300)).toBe(413);
        const big = withMetrics("m".repeat(1_800_000));
    const ended = await raw(`/e/${e.name}/end_episode`, { token: e.tokens.client, body: JSON.stringify(big) });
    expect(ended.status, ended.text.slice(0, 300)).toBe(200);
    await advance(e, 2000);
    const t = await ledgerOf(e).trajectory(c.episode);
    expect(t.outcome).toBe("ended");
    expect(t.calls).toHaveLength(20);
    expect(String((t.workflow_output?.["log_metrics"] as { trace: string }).trace).length).toBe(1_800_000);
  });
});

/** The Worker's answer as a network delivers it: in chunks of 16 KiB (what undici and workerd's fetch hand a reader). */
const chunked =
  (size: number): typeof workerFetch =>
  async (input, init) => {
    const res = await workerFetch(input, init);
    if (res.body === null) return res;
    const reader = res.body.getReader();
    let held = new Uint8Array(0);
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        while (held.length < size) {
          const r = await reader.read();
          if (r.done) {
            if (held.length > 0) controller.enqueue(held);
            held = new Uint8Array(0);
            controller.close();
            return;
          }
          const next = new Uint8Array(held.length + r.value.length);
          next.set(held);
          next.set(r.value, held.length);
          held = next;
        }
        controller.enqueue(held.slice(0, size));
        held = held.slice(size);
      },
    });
    return new Response(body, { status: res.status, headers: res.headers });
  };

describe("ledger: exporting one very long episode with LedgerClient", () => {
  it("parses a long trajectory's export line in time linear in its bytes, as a plain read and JSON.parse of the same answer", async () => {
    const e = await createEngine("longexp");
    await rollingWith(e, 1);
    const c = await claimOne(e, "c1");
    await ship(e, longEpisode(c, 80, 4_000, 50, 10).records);
    expect((await e.as("client").endEpisode(endBody(c.client, c.episode, 1))).success).toBe(true);
    await advance(e, 2000);
    const fetch16k = chunked(16 * 1024);

    // The same answer read whole and parsed: the baseline.
    let t0 = Date.now();
    const res = await fetch16k(`${ORIGIN}/e/${e.name}/trajectories/export?format=jsonl`, { headers: { authorization: `Bearer ${e.tokens.viewer}` } });
    const text = await res.text();
    const baseline = JSON.parse(text.trim()) as { calls: unknown[] };
    const plainMs = Date.now() - t0;
    expect(baseline.calls).toHaveLength(80);

    t0 = Date.now();
    const got: number[] = [];
    for await (const t of new LedgerClient({ baseUrl: `${ORIGIN}/e/${e.name}`, token: e.tokens.viewer, fetch: fetch16k }).export()) got.push(t.calls.length);
    const clientMs = Date.now() - t0;
    expect(got).toEqual([80]);
    console.log(`ledger long episode export: line ${text.length} bytes, plain read+parse ${plainMs} ms, LedgerClient.export ${clientMs} ms`);
    expect(clientMs, `LedgerClient.export took ${clientMs} ms for one ${(text.length / 1e6).toFixed(1)} MB line; reading and parsing it took ${plainMs} ms`).toBeLessThan(5 * plainMs + 1000);
  }, 120_000);
});

describe("ledger: a claim of more calls than a trajectory answers", () => {
  const turns = MAX_CALLS_PER_TRAJECTORY + 1;

  /** One claim of `calls` calls recorded on a new engine (a rollout started first, for the buffer's items). */
  async function recorded(calls: number, rollout = false): Promise<{ e: TestEngine; c: Claim; ep: Episode }> {
    const e = await createEngine("longcap");
    if (rollout) await e.as("trainer").startRollout({ num_repeat_per_sample: 1, job_session: "job-1" });
    await rollingWith(e, 1);
    const c = await claimOne(e, "c1");
    const ep = longEpisode(c, calls, 0, 1, 1, true);
    await ship(e, ep.records);
    return { e, c, ep };
  }

  it("answers its first 2,000 calls, says it was cut, and stops the training sequence at the bound", async () => {
    const { e, c, ep } = await recorded(turns);
    expect((await e.as("client").endEpisode(endBody(c.client, c.episode, 1))).success).toBe(true);
    await advance(e, 2000);
    const listed = (await ledgerOf(e).list({})).trajectories.find((t) => t.episode_uuid === c.episode);
    expect(listed?.calls).toBe(turns);
    const t = await ledgerOf(e).trajectory(c.episode);
    expect(t.calls).toHaveLength(MAX_CALLS_PER_TRAJECTORY);
    // The turns it answers, spliced, then a stop where the calls it does not answer begin: their
    // tokens are not known, so the sequence is not the claim's whole one.
    expect(t.training?.drift_at_call, "a cut claim's training sequence reads as whole").toBe(MAX_CALLS_PER_TRAJECTORY);
    expect(t.training?.tokens).toEqual([...ep.prompts[MAX_CALLS_PER_TRAJECTORY - 1]!, ...ep.completions[MAX_CALLS_PER_TRAJECTORY - 1]!]);
    expect({ calls_recorded: t.calls_recorded, calls_cut: t.calls_cut }).toEqual({ calls_recorded: turns, calls_cut: true });

    // The export reads the same builder, and says the same.
    const exported: { calls: number; cut: boolean; drift: number | null | undefined }[] = [];
    for await (const x of ledgerOf(e).export()) exported.push({ calls: x.calls.length, cut: x.calls_cut, drift: x.training?.drift_at_call });
    expect(exported).toEqual([{ calls: MAX_CALLS_PER_TRAJECTORY, cut: true, drift: MAX_CALLS_PER_TRAJECTORY }]);
  }, 120_000);

  it("says a claim of exactly 2,000 calls is whole", async () => {
    const { e, c, ep } = await recorded(MAX_CALLS_PER_TRAJECTORY);
    const t = await ledgerOf(e).trajectory(c.episode);
    expect({ calls: t.calls.length, calls_recorded: t.calls_recorded, calls_cut: t.calls_cut, drift_at_call: t.training?.drift_at_call }).toEqual({
      calls: MAX_CALLS_PER_TRAJECTORY,
      calls_recorded: MAX_CALLS_PER_TRAJECTORY,
      calls_cut: false,
      drift_at_call: null,
    });
    expect(t.training?.tokens).toEqual([...ep.prompts.at(-1)!, ...ep.completions.at(-1)!]);
  }, 120_000);

  it("gives the rollout buffer's item of a cut claim no tokens, and says where they stop, rather than its first 2,000 calls' tokens with the whole claim's reward", async () => {
    const { e, c } = await recorded(turns, true);
    expect((await e.as("client").endEpisode(endBody(c.client, c.episode, 1, "task-7"))).success).toBe(true);
    const [item] = (await e.as("trainer").getRolloutData()).data.data;
    expect(item).toBeDefined();
    expect((item as { tokens?: number[] }).tokens).toBeUndefined();
    expect(item?.extra_info["drift_at_call"]).toBe(MAX_CALLS_PER_TRAJECTORY);
  }, 120_000);

  it("gives the same pull turn by turn: each of the 2,000 calls it answers a sample, and where the turns stop", async () => {
    const { e, c, ep } = await recorded(turns, true);
    expect((await e.as("client").endEpisode(endBody(c.client, c.episode, 1, "task-7"))).success).toBe(true);
    const [item] = (await e.as("trainer").getRolloutData({ training: "turns" })).data.data;
    expect(item?.extra_info).toMatchObject({ turns_cut_at: MAX_CALLS_PER_TRAJECTORY });
    expect(item?.extra_info).not.toHaveProperty("turns_without_tokens");
    expect(item?.turns).toHaveLength(MAX_CALLS_PER_TRAJECTORY);
    const last = MAX_CALLS_PER_TRAJECTORY - 1;
    for (const i of [0, 1, last]) expect(item?.turns?.[i]?.tokens, `turn ${i}`).toEqual([...ep.prompts[i]!, ...ep.completions[i]!]);
    expect(item?.turns?.every((t, i) => t.call_index === i && t.response_length === ep.completions[i]!.length)).toBe(true);
  }, 120_000);
});
