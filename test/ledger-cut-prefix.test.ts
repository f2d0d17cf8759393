/**
 * A claim of more than 2,000 calls answers its first 2,000 (docs/ledger.md, "Limits"). A call is
 * stored as what it adds to the call of its claim that finished last, which may have been admitted
 * after it; so the last calls shown can be stored against calls past the bound. The read loads
 * those too (read.ts withBodies), through a chain of them, and the calls shown read whole, in the
 * trajectory (both forms) and in the export, as the ledger holds them.
 */
import { describe, expect, it } from "vitest";
import { LedgerClient } from "../src/client";
import type { CallRecord } from "../src/protocol/ledger";
import { packFloats, packInts } from "../src/protocol/packed";
import { MAX_CALLS_PER_TRAJECTORY } from "../src/ledger/read";
import { batchOf, callRecord as call, checkingDeltaForm, postCalls as post } from "./support/ledger";
import { answer2, answer3, sys, user, user3 } from "./support/ledger-calls";
import { advance, claimKeyFields, createEngine, endBody, ORIGIN, rollingWith, workerFetch } from "./support/harness";

const user4 = { role: "user", content: "And 4+4?" };
const answer4 = { role: "assistant", content: "8." };
const tokens = (prefix: { call_id: string; count: number } | null, prompt: number[], completion: number[]) => ({
  prompt_prefix: prefix,
  prompt_ids: packInts(prompt),
  completion_ids: packInts(completion),
  completion_logprobs: packFloats(completion.map(() => -0.5)),
});

describe("ledger: the last calls a cut trajectory answers", () => {
  it("are rebuilt whole from the calls past the bound they were stored against, through a chain of them", async () => {
    const e = await createEngine("cutprefix");
    await rollingWith(e, 1);
    const claim = await e.as("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 600 });
    const k = await claimKeyFields(claim.openai_api_key);
    const c = { episode: k.episode_uuid, fence: k.fence, client: "c1" };
    // 1,999 calls of sub-agents, each whole.
    const fillers: CallRecord[] = [];
    for (let i = 0; i < MAX_CALLS_PER_TRAJECTORY - 1; i++) fillers.push(call(c, { body: { messages: [{ role: "user", content: `task ${i}` }], answer: { role: "assistant", content: `done ${i}` } } }));
    // Three concurrent calls, admitted x, y, z and finished z, y, x: z is whole, y stored against
    // z, x against y. x is the 2,000th call; y and z are past the bound.
    const z = call(c, { body: { messages: [sys, user], answer: answer2, tokens: tokens(null, [1, 2, 3], [10, 11]) } });
    const y = call(c, {
      admitted_at: z.admitted_at - 1,
      started_at: z.started_at - 1,
      body: { prefix: { call_id: z.call_id, count: 3 }, messages: [user3], answer: answer3, tokens: tokens({ call_id: z.call_id, count: 5 }, [20], [30]) },
    });
    const x = call(c, {
      admitted_at: z.admitted_at - 2,
      started_at: z.started_at - 2,
      body: { prefix: { call_id: y.call_id, count: 5 }, messages: [user4], answer: answer4, tokens: tokens({ call_id: y.call_id, count: 7 }, [40], [50]) },
    });
    for (let i = 0; i < fillers.length; i += 500) expect((await post(e, batchOf(fillers.slice(i, i + 500)))).status).toBe(200);
    expect((await post(e, batchOf([z, y, x]))).status).toBe(200);

    const ledger = checkingDeltaForm(new LedgerClient({ baseUrl: `${ORIGIN}/e/${e.name}`, token: e.tokens.viewer, fetch: workerFetch }));
    const lastCall = async () => {
      const t = await ledger.trajectory(c.episode);
      expect({ calls: t.calls.length, calls_recorded: t.calls_recorded, calls_cut: t.calls_cut }).toEqual({ calls: MAX_CALLS_PER_TRAJECTORY, calls_recorded: MAX_CALLS_PER_TRAJECTORY + 2, calls_cut: true });
      return t.calls.at(-1);
    };
    const sent = { call_id: x.call_id, prefix_missing: false, messages: [sys, user, answer2, user3, answer3, user4], prompt_ids: [1, 2, 3, 10, 11, 20, 30, 40] };
    const shown = (t: Awaited<ReturnType<typeof lastCall>>) => ({ call_id: t?.call_id, prefix_missing: t?.prefix_missing, messages: t?.messages, prompt_ids: t?.tokens?.prompt_ids });
    // Live, then ended and read again and exported (the export reads claims a page at a time).
    expect(shown(await lastCall())).toEqual(sent);
    expect((await e.as("client").endEpisode(endBody("c1", c.episode, 1))).success).toBe(true);
    await advance(e, 2000);
    expect(shown(await lastCall())).toEqual(sent);
    const exported: Awaited<ReturnType<typeof lastCall>>[] = [];
    for await (const t of ledger.export()) exported.push(t.calls.at(-1));
    expect(exported.map(shown)).toEqual([sent]);
  }, 120_000);
});
