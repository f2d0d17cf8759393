/**
 * get_rollout_data's items with the tokens to train on: an AgentJet claim that joined a buffer
 * group carries its trajectory's sequence from the ledger, in slime's Sample field names.
 */
import { describe, expect, it } from "vitest";
import { GetRolloutDataResponse } from "../src/protocol/buffer";
import type { CallRecord } from "../src/protocol/ledger";
import { packFloats, packInts } from "../src/protocol/packed";
import { callRecord, postCalls, batchOf, rolloutEngine } from "./support/ledger";
import { sys, threeTurns, user } from "./support/ledger-calls";
import { claimKeyFields, createEngine, endBody, ORIGIN, raw, rollingWith, workerFetch, type TestEngine } from "./support/harness";

type ClaimRef = { episode: string; fence: number; client: string };

const tokensOf = (prompt: number[], completion: number[], logprobs: number[], prefix: { call_id: string; count: number } | null = null) => ({
  prompt_prefix: prefix,
  prompt_ids: packInts(prompt),
  completion_ids: packInts(completion),
  completion_logprobs: packFloats(logprobs),
});

/**
 * A thinking model's claim whose template drops earlier thinking (Qwen3's): each prompt keeps
 * the answers without their thinking (50, 60), so no prompt begins with the one before and its
 * completion, and the sequence stops at call 1. Call 2 failed (no turn); call 4 was truncated
 * (its tokens lost) when `lost` is set.
 */
function thinkingClaim(c: ClaimRef, lost = false): CallRecord[] {
  const first = callRecord(c, { body: { messages: [sys, user], answer: { role: "assistant", content: "a" }, tokens: tokensOf([1, 2, 3], [50, 51, 10], [-0.125, -0.25, -0.375]) } });
  // Prompt [1, 2, 3, 51, 10, 20]: the first prompt, the answer without its thinking, the next user turn.
  const second = callRecord(c, { weight_version: 4, body: { messages: [sys, user], answer: { role: "assistant", content: "b" }, tokens: tokensOf([51, 10, 20], [60, 61, 11], [-1, -1.5, -2], { call_id: first.call_id, count: 3 }) } });
  const failed = callRecord(c, { status: 502, error: "upstream_error: reset", finish_reason: null, usage: null, body: { messages: [sys, user], answer: null } });
  const third = callRecord(c, { body: { messages: [sys, user], answer: { role: "assistant", content: "c" }, tokens: tokensOf([61, 11, 30], [12], [-0.5], { call_id: second.call_id, count: 6 }) } });
  const fourth = callRecord(c, {
    truncated: lost,
    body: lost ? { messages: [], answer: null, tokens: null } : { messages: [sys, user], answer: { role: "assistant", content: "d" }, tokens: tokensOf([1, 2, 3, 99], [13], [-0.25]) },
  });
  return [first, second, failed, third, fourth];
}

const THINKING_TURNS = [
  { call_index: 0, tokens: [1, 2, 3, 50, 51, 10], response_length: 3, loss_mask: [1, 1, 1], rollout_log_probs: [-0.125, -0.25, -0.375], weight_version: 3 },
  { call_index: 1, tokens: [1, 2, 3, 51, 10, 20, 60, 61, 11], response_length: 3, loss_mask: [1, 1, 1], rollout_log_probs: [-1, -1.5, -2], weight_version: 4 },
  { call_index: 3, tokens: [1, 2, 3, 51, 10, 20, 61, 11, 30, 12], response_length: 1, loss_mask: [1], rollout_log_probs: [-0.5], weight_version: 3 },
];
/** Its last call, a new history: a sample as any other. */
const FOURTH = { call_index: 4, tokens: [1, 2, 3, 99, 13], response_length: 1, loss_mask: [1], rollout_log_probs: [-0.25], weight_version: 3 };

async function claimAndRecord(e: TestEngine, client: string, calls: (c: ClaimRef) => CallRecord[], reward = 1): Promise<ClaimRef> {
  const claim = await e.as("client").claimEpisode({ client_uuid: client, discard_episode_timeout: 60 });
  const k = await claimKeyFields(claim.openai_api_key);
  const c = { episode: k.episode_uuid, fence: k.fence, client };
  const records = calls(c);
  if (records.length > 0) expect((await postCalls(e, batchOf(records))).status).toBe(200);
  expect((await e.as("client").endEpisode(endBody(client, c.episode, reward, "task-7"))).success).toBe(true);
  return c;
}

const pull = (e: TestEngine, body: unknown) => workerFetch(`${ORIGIN}/e/${e.name}/get_rollout_data`, { method: "POST", headers: { authorization: `Bearer ${e.tokens.trainer}` }, body: JSON.stringify(body) });

describe("rollout data with the ledger's tokens", () => {
  it("gives an AgentJet claim's item its tokens, loss mask and logprobs; leaves one without recorded calls as it was", async () => {
    const e = await rolloutEngine("rtok", 2);
    const client = e.as("client");
    const recorded = await client.claimEpisode({ client_uuid: "c1", discard_episode_timeout: 60 });
    const k = await claimKeyFields(recorded.openai_api_key);
    expect((await postCalls(e, batchOf(threeTurns({ episode: k.episode_uuid, fence: k.fence, client: "c1" }, callRecord)))).status).toBe(200);
    await client.endEpisode(endBody("c1", k.episode_uuid, 1, "task-7"));
    const silent = await client.claimEpisode({ client_uuid: "c2", discard_episode_timeout: 60 });
    await client.endEpisode(endBody("c2", silent.episode_uuid, 0, "task-7"));

    const pulled = await e.as("trainer").getRolloutData();
    const items = pulled.data.data;
    expect(items.map((i) => i.extra_info["client_uuid"])).toEqual(["c1", "c2"]);
    expect(items[0]).toMatchObject({
      tokens: [1, 2, 3, 4, 10, 11, 20, 21, 30, 31, 32, 40],
      response_length: 8,
      loss_mask: [1, 1, 0, 1, 0, 0, 0, 1],
      rollout_log_probs: [-0.5, -0.25, 0, -1.5, 0, 0, 0, -2],
    });
    expect(items[1]).not.toHaveProperty("tokens");
    // Re-reading the pull by its cursor gives the same.
    const again = await e.as("trainer").getRolloutData({ cursor: pulled.data.meta_info.cursor ?? 0 });
    expect(again.data.data[0]?.tokens).toEqual(items[0]?.tokens);

    // Written an item at a time (each item's sequence made as it is written), the cursor first.
    const res = await pull(e, { cursor: pulled.data.meta_info.cursor ?? 0 });
    const chunks: string[] = [];
    const dec = new TextDecoder();
    for await (const chunk of res.body as ReadableStream<Uint8Array>) chunks.push(dec.decode(chunk, { stream: true }));
    expect(chunks.length).toBeGreaterThanOrEqual(items.length);
    const text = chunks.join("");
    expect(GetRolloutDataResponse.parse(JSON.parse(text))).toEqual(again);
    expect(text.indexOf('"cursor"')).toBeLessThan(text.indexOf('"data":['));
  });

  it("gives a claim whose training sequence stops before its end no tokens, and says where it stopped", async () => {
    const e = await rolloutEngine("rtok-drift", 1);
    const client = e.as("client");
    const claim = await client.claimEpisode({ client_uuid: "c1", discard_episode_timeout: 60 });
    const k = await claimKeyFields(claim.openai_api_key);
    // The third prompt was re-tokenized: the sequence stops at call 2, before the turn the reward was for.
    const calls = threeTurns({ episode: k.episode_uuid, fence: k.fence, client: "c1" }, callRecord, [1, 2, 3, 4, 10, 99, 20, 21, 30, 31, 32]);
    expect((await postCalls(e, batchOf(calls))).status).toBe(200);
    await client.endEpisode(endBody("c1", k.episode_uuid, 1, "task-7"));

    const [item] = (await e.as("trainer").getRolloutData()).data.data;
    expect(item?.extra_info).toMatchObject({ client_uuid: "c1", drift_at_call: 2 });
    for (const field of ["tokens", "response_length", "loss_mask", "rollout_log_probs"]) expect(item).not.toHaveProperty(field);
  });

  it("never gives a worker's posted rows a claim's tokens: naming the claim's session and source 'agentjet' is refused, the session's name alone matches nothing", async () => {
    const e = await createEngine("rtok-forged");
    await e.as("trainer").startRollout({ num_repeat_per_sample: 2, job_session: "job-1" });
    await rollingWith(e, 1);
    const victim = await e.as("client").claimEpisode({ client_uuid: "victim", discard_episode_timeout: 60 });
    const k = await claimKeyFields(victim.openai_api_key);
    expect((await postCalls(e, batchOf(threeTurns({ episode: k.episode_uuid, fence: k.fence, client: "victim" }, callRecord)))).status).toBe(200);

    // Another client token, posting a group of its own whose first session names the victim's claim.
    const claimSession = `${k.episode_uuid}#${k.fence}`;
    const row = (session_id: string, extra: Record<string, unknown>) => ({ session_id, group_id: "forged", step_index: 0, messages: [{ role: "user", content: "q" }], response: "a", reward: 1, is_session_completed: true, ...extra });
    const forged = await raw(`/e/${e.name}/steps`, { token: e.tokens.client, body: JSON.stringify({ steps: [row(claimSession, { source: "agentjet" }), row("mine", {})] }) });
    expect(forged).toMatchObject({ status: 422, json: { error: "invalid_request", detail: expect.stringContaining("steps.0.source") } });

    const named = await raw(`/e/${e.name}/steps`, { token: e.tokens.client, body: JSON.stringify({ steps: [row(claimSession, { source: "worker" }), row("mine", {})] }) });
    expect(named.status).toBe(200);
    const items = (await e.as("trainer").getRolloutData()).data.data;
    expect(items.map((i) => [i.extra_info["session_id"], i.instance_id])).toEqual([
      [claimSession, "forged"],
      ["mine", "forged"],
    ]);
    for (const item of items) expect(item).not.toHaveProperty("tokens");
  });

  it("gives each turn of a thinking model's claim as a sample of its own with training: turns, where its one sequence stops at call 1", async () => {
    const e = await rolloutEngine("rtok-turns", 1);
    await claimAndRecord(e, "c1", (c) => thinkingClaim(c));

    const pulled = await e.as("trainer").getRolloutData();
    const [item] = pulled.data.data;
    // Context: the one sequence cannot be made, and says so.
    expect(item?.extra_info["drift_at_call"]).toBe(1);
    expect(item).not.toHaveProperty("tokens");

    // The same pull, read again turn by turn: each successful call (not the failed one), whole.
    const cursor = pulled.data.meta_info.cursor ?? 0;
    const turned = await e.as("trainer").getRolloutData({ cursor, training: "turns" });
    const [t] = turned.data.data;
    expect(t?.turns).toEqual([...THINKING_TURNS, FOURTH]);
    for (const field of ["tokens", "response_length", "loss_mask", "rollout_log_probs"]) expect(t).not.toHaveProperty(field);
    expect(t?.extra_info).not.toHaveProperty("drift_at_call");
    expect(t?.extra_info).not.toHaveProperty("turns_without_tokens");
    // Everything else is the pull's as it was, but for the sequence's stop, which is not this form's.
    const { turns: _turns, ...rest } = t ?? { turns: undefined };
    const { drift_at_call: _drift, ...extra } = item?.extra_info ?? {};
    expect(rest).toEqual({ ...item, extra_info: extra });
    expect(turned.data.meta_info).toEqual(pulled.data.meta_info);
  });

  it("writes the turns' answer a sample at a time, and names the calls whose tokens are not known; leaves other items as they were", async () => {
    const e = await rolloutEngine("rtok-turns-lost", 3);
    const lost = await claimAndRecord(e, "c1", (c) => thinkingClaim(c, true));
    // Recorded with capture messages: no token ids, no turns.
    await claimAndRecord(e, "c2", (c) => [callRecord(c, { capture: "messages", body: { messages: [sys, user], answer: { role: "assistant", content: "x" } } })]);
    await claimAndRecord(e, "c3", () => [], 0);

    const res = await pull(e, { training: "turns" });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("application/json");
    const chunks: string[] = [];
    const dec = new TextDecoder();
    for await (const chunk of res.body as ReadableStream<Uint8Array>) chunks.push(dec.decode(chunk, { stream: true }));
    // A piece per turn at least: never the answer as one string.
    expect(chunks.length).toBeGreaterThanOrEqual(THINKING_TURNS.length);
    const text = chunks.join("");
    // The cursor comes before the items: an answer that broke off still says how to read it again.
    expect(text.indexOf('"cursor"')).toBeLessThan(text.indexOf('"turns"'));
    const answer = GetRolloutDataResponse.parse(JSON.parse(text));
    const items = answer.data.data;
    expect(items.map((i) => i.extra_info["client_uuid"])).toEqual(["c1", "c2", "c3"]);
    expect(items[0]?.extra_info).toMatchObject({ session_id: `${lost.episode}#${lost.fence}`, turns_without_tokens: [4] });
    expect(items[0]?.extra_info).not.toHaveProperty("turns_cut_at");
    expect(items[0]?.turns).toEqual(THINKING_TURNS);
    for (const other of items.slice(1)) {
      expect(other).not.toHaveProperty("turns");
      expect(other.extra_info).not.toHaveProperty("turns_without_tokens");
    }
  });

  it("refuses a training form of no name (422) and hands out nothing: the group is the next pull's", async () => {
    const e = await rolloutEngine("rtok-turns-bad", 1);
    await claimAndRecord(e, "c1", (c) => thinkingClaim(c));
    for (const training of ["turn", "", 1, null]) {
      const res = await pull(e, { training });
      expect(res.status, JSON.stringify(training)).toBe(422);
      expect(await res.json()).toMatchObject({ error: "invalid_request", detail: expect.stringContaining("training") });
    }
    const [item] = (await e.as("trainer").getRolloutData({ training: "turns" })).data.data;
    expect(item?.turns).toEqual([...THINKING_TURNS, FOURTH]);
  });

  it("says so of a claim whose token ids were recorded and all lost: no sample, each call named, and the one sequence stopping at call 0", async () => {
    const e = await rolloutEngine("rtok-turns-all-lost", 1);
    // The first call's record was truncated (its tokens lost, and whether it had ids not told);
    // the second's prompt continues a call the ledger does not have, so it had ids.
    await claimAndRecord(e, "c1", (c) => [
      callRecord(c, { truncated: true, body: { messages: [], answer: null, tokens: null } }),
      callRecord(c, { body: { messages: [sys, user], answer: { role: "assistant", content: "b" }, tokens: tokensOf([20], [60], [-1], { call_id: "call-never-recorded", count: 3 }) } }),
    ]);
    const pulled = await e.as("trainer").getRolloutData({ training: "turns" });
    const [item] = pulled.data.data;
    expect(item?.turns).toEqual([]);
    expect(item?.extra_info["turns_without_tokens"]).toEqual([0, 1]);
    const [again] = (await e.as("trainer").getRolloutData({ cursor: pulled.data.meta_info.cursor ?? 0 })).data.data;
    expect(again?.extra_info["drift_at_call"]).toBe(0);
    expect(again).not.toHaveProperty("tokens");
  });

  it("says nothing of a claim whose calls were truncated with capture messages: no ids were recorded", async () => {
    const e = await rolloutEngine("rtok-turns-messages-cut", 1);
    await claimAndRecord(e, "c1", (c) => [callRecord(c, { capture: "messages", truncated: true, body: { messages: [], answer: null, tokens: null } })]);
    const [item] = (await e.as("trainer").getRolloutData({ training: "turns" })).data.data;
    expect(item).not.toHaveProperty("turns");
    expect(item?.extra_info).not.toHaveProperty("turns_without_tokens");
  });

  it("gives each of a pull's 40 claims its own tokens, their calls read a run of 16 claims at a time", async () => {
    const e = await rolloutEngine("rtok-runs", 40);
    const sent = new Map<string, number[]>();
    for (let k = 0; k < 40; k++) {
      // Every fourth claim was recorded without token ids: an item as it was, between those with tokens.
      const c = await claimAndRecord(e, `c${k}`, (c) => [
        callRecord(c, { capture: k % 4 === 3 ? "messages" : "tokens", body: { messages: [sys, user], answer: { role: "assistant", content: `${k}` }, tokens: k % 4 === 3 ? null : tokensOf([1000 + k, 7], [k], [-0.5]) } }),
      ]);
      if (k % 4 !== 3) sent.set(`${c.episode}#${c.fence}`, [1000 + k, 7, k]);
    }
    const pulled = await e.as("trainer").getRolloutData();
    const cursor = pulled.data.meta_info.cursor ?? 0;
    for (const [training, items] of [
      ["sequence", pulled.data.data],
      ["turns", (await e.as("trainer").getRolloutData({ cursor, training: "turns" })).data.data],
    ] as const) {
      expect(items).toHaveLength(40);
      const got = new Map(items.map((i) => [String(i.extra_info["session_id"]), training === "turns" ? i.turns?.[0]?.tokens : i.tokens]));
      expect([...got.values()].filter((t) => t !== undefined)).toHaveLength(30);
      for (const [session, tokens] of got) expect(tokens, `${training}: ${session}`).toEqual(sent.get(session));
    }
  });
});
