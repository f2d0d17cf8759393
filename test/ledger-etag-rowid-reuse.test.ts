/**
 * A trajectory's tag changes when one call is removed and another recorded between the same first
 * and last (docs/ledger.md, "Reading it": 304 only while the answer is the same), also when the
 * new call takes the removed one's row id: SQLite gives a new row one more than the highest id
 * present, the removed row's own when it was the table's newest (a late batch's call). With the
 * sum of row ids alone, count, first, last and sum all stayed the same and the old answer got a 304.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { Trajectory } from "../src/protocol/ledger";
import { batchOf, callRecord as call, postCalls as post } from "./support/ledger";
import { user } from "./support/ledger-calls";
import { claimKeyFields, createEngine, ORIGIN, rollingWith, workerFetch, type TestEngine } from "./support/harness";

async function read(e: TestEngine, path: string, headers: Record<string, string> = {}) {
  const res = await workerFetch(`${ORIGIN}/e/${e.name}${path}`, { headers: { authorization: `Bearer ${e.tokens.viewer}`, ...headers } });
  return { status: res.status, etag: res.headers.get("etag"), text: await res.text() };
}

describe("a trajectory's ETag", () => {
  it("changes when the call removed was the newest row and the next call recorded takes its row id", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const claim = await e.as("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 600 });
    const k = await claimKeyFields(claim.openai_api_key);
    const c = { episode: k.episode_uuid, fence: k.fence, client: "c1" };
    const at = (t: number, text: string) => call(c, { admitted_at: Date.UTC(2098, 11, 1) + t, body: { messages: [{ ...user, content: text }] } });
    const [first, middle, last] = [at(1000, "first"), at(2000, "middle"), at(4000, "last")];
    // The middle call's batch came late (a gateway that could not send it for a while): its row is the newest.
    expect((await post(e, batchOf([first, last]))).status).toBe(200);
    expect((await post(e, batchOf([middle]))).status).toBe(200);
    const before = await read(e, `/trajectories/${c.episode}`);
    expect(before.status).toBe(200);
    expect((JSON.parse(before.text) as Trajectory).calls.map((x) => x.call_id)).toEqual([first.call_id, middle.call_id, last.call_id]);

    // Retention deletes in chunks of rows, not in the answer's order (as test/ledger-etag.test.ts
    // simulates): the middle call goes first; then a late batch brings another call between.
    await env.DB.prepare("DELETE FROM llm_calls WHERE engine = ? AND call_id = ?").bind(e.name, middle.call_id).run();
    const other = at(3000, "another");
    expect((await post(e, batchOf([other]))).status).toBe(200);

    const now = await read(e, `/trajectories/${c.episode}`);
    expect((JSON.parse(now.text) as Trajectory).calls.map((x) => x.call_id)).toEqual([first.call_id, other.call_id, last.call_id]);
    // The answer changed, so its tag must have.
    expect(now.etag).not.toBe(before.etag);
    const revalidated = await read(e, `/trajectories/${c.episode}`, { "if-none-match": before.etag as string });
    expect(revalidated.status).toBe(200);
  });
});
