/**
 * Gathering a claim's calls (engine/ledger-compactions.ts, ledger/compaction.ts) while the engine
 * goes on: its Durable Object takes other requests while a gathering waits on R2 and D1.
 *
 * - A batch of the claim's calls recorded meanwhile (its last calls after its end, or a gateway
 *   that was down) re-queues it; the gathering, which did not read those calls, must not take
 *   it off the queue: they are gathered with the rest SETTLE_MS later.
 * - A claim whose objects are gone (retention, an operator), more of them than one run reads,
 *   gathers nothing however often it is tried: it is let go rather than bring the alarm back at
 *   once for ever, 200 R2 reads each time.
 * - A delete that begins during a gathering and fails (keep_history whose outbox could not be
 *   written reopens the engine) leaves the claims it kept from being written queued, for the
 *   engine that lives on.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { CallRecord } from "../src/protocol/ledger";
import { LedgerCompactions, READS_PER_ALARM, SETTLE_MS } from "../src/engine/ledger-compactions";
import { callRecord, groupOfClaims, postCalls } from "./support/ledger";
import { sys } from "./support/ledger-calls";
import type { TestEngine } from "./support/harness";

type Claim = { episode: string; fence: number; client: string };

const call = (c: Claim, t: number): CallRecord =>
  callRecord(c, { body: { messages: [sys, { role: "user", content: `turn ${t} ${"x".repeat(200)}` }], answer: { role: "assistant", content: `a${t}` } } });

const objectsOf = async (e: TestEngine, c: Claim): Promise<string[]> => [
  ...new Set(
    (await env.DB.prepare("SELECT body_key FROM llm_calls WHERE engine = ? AND episode_uuid = ? AND fence = ?").bind(e.name, c.episode, c.fence).all<{ body_key: string }>()).results.map(
      (r) => r.body_key,
    ),
  ),
];

describe("a batch recorded while its claim is being gathered", () => {
  it("keeps the claim queued, and gathers the late calls with the rest", async () => {
    const { e, claims } = await groupOfClaims("gather-race", 1);
    const c = claims[0]!;
    for (let t = 0; t < 3; t++) expect((await postCalls(e, { batch_id: `gather-race-${t}`, calls: [call(c, t)] })).status).toBe(200);
    expect(await objectsOf(e, c)).toHaveLength(3);
    const { incarnation } = await e.as("trainer").pollCommands({ wait: 0.01 });
    const engine = { name: e.name, incarnation: incarnation ?? "" };

    const result = await runInDurableObject(e.stub, async (_i, state) => {
      let t = e.clock.t + 10 * SETTLE_MS;
      const q = new LedgerCompactions(state.storage.sql, { now: () => t, armBy: () => {}, live: () => false, engine: () => engine, closed: () => false });
      q.recorded([{ episode: c.episode, fence: c.fence }]);
      t += SETTLE_MS;
      // While the gathering reads its objects, the gateway's late batch of the claim is recorded,
      // and the engine told of it (what the Worker's postCalls -> ledgerRecorded does).
      let late = false;
      const bucket = {
        get: async (key: string, o?: R2GetOptions) => {
          if (!late) {
            late = true;
            expect((await postCalls(e, { batch_id: "gather-race-late", calls: [call(c, 3)] })).status).toBe(200);
            q.recorded([{ episode: c.episode, fence: c.fence }]);
          }
          return env.LEDGER.get(key, o);
        },
        put: (k: string, v: Uint8Array, o?: R2PutOptions) => env.LEDGER.put(k, v, o),
        delete: (k: string) => env.LEDGER.delete(k),
      } as unknown as R2Bucket;
      await q.runDue(env.DB, bucket, { left: 1000 });
      const queuedAfterRace = q.size();
      // Its late calls come due SETTLE_MS after they were recorded.
      t += SETTLE_MS;
      await q.runDue(env.DB, env.LEDGER, { left: 1000 });
      return { queuedAfterRace, queuedAtEnd: q.size() };
    });
    // The first run gathered the three calls it had read; the late call kept the claim queued ...
    expect(result.queuedAfterRace).toBe(1);
    // ... and the claim is one object in the end, its late call included.
    expect(await objectsOf(e, c)).toHaveLength(1);
    expect(result.queuedAtEnd).toBe(0);
  });
});

describe("a claim whose objects are partly gone, past one run's reads", () => {
  it("does not keep the alarm coming at once for ever", { timeout: 120_000 }, async () => {
    const { e, claims } = await groupOfClaims("gather-gone", 1);
    const c = claims[0]!;
    const n = READS_PER_ALARM + 5;
    // One object per call, as a gateway relaying a long claim ships them (a batch a second).
    const calls = Array.from({ length: n }, (_, t) => call(c, t));
    for (let i = 0; i < n; i += 8) {
      const sent = await Promise.all(calls.slice(i, i + 8).map((x, k) => postCalls(e, { batch_id: `gather-gone-${i + k}`, calls: [x] })));
      for (const r of sent) expect(r.status).toBe(200);
    }
    const rows = (
      await env.DB.prepare("SELECT body_key FROM llm_calls WHERE engine = ? AND episode_uuid = ? AND fence = ? ORDER BY admitted_at").bind(e.name, c.episode, c.fence).all<{ body_key: string }>()
    ).results;
    expect(new Set(rows.map((r) => r.body_key)).size).toBe(n);
    // The claim's first 200 objects are gone (an operator, a bucket lifecycle rule); its last 5 are there.
    for (let i = 0; i < READS_PER_ALARM; i += 100) await env.LEDGER.delete(rows.slice(i, Math.min(i + 100, READS_PER_ALARM)).map((r) => r.body_key));

    const { incarnation } = await e.as("trainer").pollCommands({ wait: 0.01 });
    const engine = { name: e.name, incarnation: incarnation ?? "" };
    const out = await runInDurableObject(e.stub, async (_i, state) => {
      let t = e.clock.t + 10 * SETTLE_MS;
      let gets = 0;
      const bucket = {
        get: (k: string, o?: R2GetOptions) => (gets++, env.LEDGER.get(k, o)),
        put: (k: string, v: Uint8Array, o?: R2PutOptions) => env.LEDGER.put(k, v, o),
        delete: (k: string) => env.LEDGER.delete(k),
      } as unknown as R2Bucket;
      const q = new LedgerCompactions(state.storage.sql, { now: () => t, armBy: () => {}, live: () => false, engine: () => engine, closed: () => false });
      q.recorded([{ episode: c.episode, fence: c.fence }]);
      t += SETTLE_MS;
      // The alarm's runs, each fired when the queue next asks (next() <= now: at once).
      const runs: { dueAtOnce: boolean; queued: number }[] = [];
      for (let k = 0; k < 10; k++) {
        await q.runDue(env.DB, bucket, { left: 1000 });
        const next = q.next();
        runs.push({ dueAtOnce: next !== null && next <= t, queued: q.size() });
        if (next === null || next > t) break;
        t += 1;
      }
      return { runs, gets };
    });
    // One run's reads find the objects gone, and the claim is let go: no alarm comes at once for it again.
    expect(out.gets).toBeLessThanOrEqual(5 * READS_PER_ALARM);
    expect(out.runs.at(-1)!.dueAtOnce).toBe(false);
  });
});

describe("a delete that began during a gathering, and failed", () => {
  it("leaves the claims it kept from being gathered queued for the reopened engine", async () => {
    const { e, claims } = await groupOfClaims("gather-reopen", 1);
    const c = claims[0]!;
    for (let t = 0; t < 3; t++) expect((await postCalls(e, { batch_id: `gather-reopen-${t}`, calls: [call(c, t)] })).status).toBe(200);
    const keys = async () =>
      new Set(
        (await env.DB.prepare("SELECT body_key FROM llm_calls WHERE engine = ? AND episode_uuid = ? AND fence = ?").bind(e.name, c.episode, c.fence).all<{ body_key: string }>()).results.map(
          (r) => r.body_key,
        ),
      ).size;
    expect(await keys()).toBe(3);
    const { incarnation } = await e.as("trainer").pollCommands({ wait: 0.01 });
    const engine = { name: e.name, incarnation: incarnation ?? "" };

    const queued = await runInDurableObject(e.stub, async (_i, state) => {
      let t = e.clock.t + 10 * SETTLE_MS;
      // The delete begins while the gathering reads (closed); its outbox drain fails and it
      // reopens the engine (closed false again) before the gathering is over.
      let deleting = false;
      const closed = () => {
        const was = deleting;
        deleting = false;
        return was;
      };
      const bucket = {
        get: (k: string, o?: R2GetOptions) => ((deleting = true), env.LEDGER.get(k, o)),
        put: (k: string, v: Uint8Array, o?: R2PutOptions) => env.LEDGER.put(k, v, o),
        delete: (k: string) => env.LEDGER.delete(k),
      } as unknown as R2Bucket;
      const q = new LedgerCompactions(state.storage.sql, { now: () => t, armBy: () => {}, live: () => false, engine: () => engine, closed });
      q.recorded([{ episode: c.episode, fence: c.fence }]);
      t += SETTLE_MS;
      await q.runDue(env.DB, bucket, { left: 1000 });
      return q.size();
    });
    // Nothing of it was gathered ...
    expect(await keys()).toBe(3);
    // ... so it must still wait to be.
    expect(queued).toBe(1);
  });
});
