/**
 * The usage the ledger keeps of each call, in workerd with real D1 and R2: prompt and completion
 * tokens, and, when the upstream gave them, the prompt tokens its prefix cache served and the
 * completion tokens spent thinking, per call and summed per trajectory in the read, the list
 * and the export. A record from an agent older than the details reads them as not known.
 */
import { describe, expect, it } from "vitest";
import { LedgerClient } from "../src/client";
import { Trajectory, type CallRecord } from "../src/protocol/ledger";
import { batchOf, callRecord as call, checkingDeltaForm, postCalls as post } from "./support/ledger";
import { sys, toolCall, toolResult, user } from "./support/ledger-calls";
import { advance, claimKeyFields, createEngine, endBody, ORIGIN, rollingWith, workerFetch, type TestEngine } from "./support/harness";

const viewer = (e: TestEngine) => checkingDeltaForm(new LedgerClient({ baseUrl: `${ORIGIN}/e/${e.name}`, token: e.tokens.viewer, fetch: workerFetch }));

async function claimOne(e: TestEngine) {
  const c = await e.as("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 600 });
  expect(c.success).toBe(true);
  const k = await claimKeyFields(c.openai_api_key);
  return { episode: k.episode_uuid, fence: k.fence, client: "c1" };
}

type Claim = Awaited<ReturnType<typeof claimOne>>;

/** Three calls: one with both details, one with the cache's only, one as an older agent records it (no details). */
function threeCalls(c: Claim): CallRecord[] {
  const first = call(c, { usage: { prompt_tokens: 100, completion_tokens: 40, cached_tokens: 0, reasoning_tokens: 30 }, body: { messages: [sys, user], answer: toolCall } });
  return [
    first,
    call(c, { usage: { prompt_tokens: 160, completion_tokens: 10, cached_tokens: 128 }, body: { prefix: { call_id: first.call_id, count: 3 }, messages: [toolResult] } }),
    call(c, { usage: { prompt_tokens: 180, completion_tokens: 5 }, body: { messages: [sys, user] } }),
  ];
}

describe("ledger: usage details", () => {
  it("keeps each call's cached and reasoning tokens, null where not given, and sums them in the trajectory, the list and the export", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const c = await claimOne(e);
    expect((await post(e, batchOf(threeCalls(c)))).status).toBe(200);
    expect((await e.as("client").endEpisode(endBody(c.client, c.episode, 1))).success).toBe(true);
    await advance(e, 2000);

    const t = await viewer(e).trajectory(c.episode);
    expect(t.calls.map((x) => x.usage)).toEqual([
      { prompt_tokens: 100, completion_tokens: 40, cached_tokens: 0, reasoning_tokens: 30 },
      { prompt_tokens: 160, completion_tokens: 10, cached_tokens: 128, reasoning_tokens: null },
      { prompt_tokens: 180, completion_tokens: 5, cached_tokens: null, reasoning_tokens: null },
    ]);
    const sums = { prompt_tokens: 440, completion_tokens: 55, cached_tokens: 128, reasoning_tokens: 30 };
    expect(t).toMatchObject(sums);

    const list = await viewer(e).list({});
    expect(list.trajectories).toHaveLength(1);
    expect(list.trajectories[0]).toMatchObject({ episode_uuid: c.episode, calls: 3, ...sums });

    const lines: Trajectory[] = [];
    for await (const line of viewer(e).export({})) lines.push(line);
    expect(lines.map((l) => ({ prompt_tokens: l.prompt_tokens, completion_tokens: l.completion_tokens, cached_tokens: l.cached_tokens, reasoning_tokens: l.reasoning_tokens }))).toEqual([sums]);
    expect(lines[0]?.calls.map((x) => x.usage?.cached_tokens)).toEqual([0, 128, null]);

    // The typed client reads an exchange from before the details: not known per call, 0 summed.
    const old = JSON.parse(JSON.stringify(t)) as Record<string, unknown> & { calls: { usage: Record<string, unknown> }[] };
    delete old["cached_tokens"];
    delete old["reasoning_tokens"];
    for (const x of old.calls) for (const k of ["cached_tokens", "reasoning_tokens"]) delete x.usage[k];
    const read = Trajectory.parse(old);
    expect([read.cached_tokens, read.reasoning_tokens, read.calls[0]?.usage]).toEqual([0, 0, { prompt_tokens: 100, completion_tokens: 40, cached_tokens: null, reasoning_tokens: null }]);
  });

  it("sums a live claim's calls as its list entry will", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const c = await claimOne(e);
    expect((await post(e, batchOf(threeCalls(c)))).status).toBe(200);
    const live = await viewer(e).trajectory(c.episode);
    expect(live.outcome).toBeNull();
    expect(live).toMatchObject({ cached_tokens: 128, reasoning_tokens: 30 });
  });

  it("refuses a batch whose usage details are not counts (422), and records none of it", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const c = await claimOne(e);
    for (const usage of [
      { prompt_tokens: 10, completion_tokens: 5, cached_tokens: -1 },
      { prompt_tokens: 10, completion_tokens: 5, reasoning_tokens: 2.5 },
      { prompt_tokens: 10, completion_tokens: 5, cached_tokens: "8" },
    ]) {
      const good = call(c, { body: { messages: [sys, user] } });
      const bad = { ...call(c, { body: { messages: [sys, user] } }), usage };
      const r = await post(e, batchOf([good, bad as CallRecord]));
      expect(r.status, JSON.stringify(usage)).toBe(422);
      expect(JSON.stringify(r.json)).toContain("usage");
    }
    const live = await viewer(e).trajectory(c.episode).catch((err: unknown) => err);
    expect(live).toMatchObject({ status: 404 });
  });

});
