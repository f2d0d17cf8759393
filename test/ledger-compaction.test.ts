/**
 * A claim's recorded calls gathered into one R2 object once it is over (ledger/compaction.ts,
 * engine/ledger-compactions.ts): the gateway ships every concurrent claim's calls of a second as
 * one object, so a long claim's bodies are spread over as many objects as it has turns, each
 * shared with the claims beside it. Once gathered, reading the claim reads one object, and reads
 * it the same: trajectories, their delta form and a pull's tokens do not change. Real D1, R2 and
 * the engine's Durable Object, its alarm run on the test's clock.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import { LedgerClient } from "../src/client";
import { GetRolloutDataResponse } from "../src/protocol/buffer";
import type { CallRecord } from "../src/protocol/ledger";
import { packFloats, packInts } from "../src/protocol/packed";
import { compactClaims } from "../src/ledger/compaction";
import { bodyPrefix } from "../src/ledger/keys";
import { withTrainingTokens } from "../src/ledger/rollout-tokens";
import { LedgerCompactions, LIVE_WAIT_MS, SETTLE_MS } from "../src/engine/ledger-compactions";
import { callRecord, checkingDeltaForm, groupOfClaims, postCalls } from "./support/ledger";
import { sys } from "./support/ledger-calls";
import { advance, endBody, ORIGIN, workerFetch, type TestEngine } from "./support/harness";

type Claim = { episode: string; fence: number; client: string };

/**
 * `turns` turns of each claim, chained as a gateway records them (each turn only what it adds to
 * the one before), shipped one batch per turn holding that turn of every claim, as a gateway
 * relaying them side by side does.
 */
async function interleaved(e: TestEngine, claims: readonly Claim[], turns: number, from = 0): Promise<void> {
  for (let t = from; t < from + turns; t++) {
    const calls: CallRecord[] = claims.map((c, k) => turn(c, k, t));
    expect((await postCalls(e, { batch_id: `turn-${t}-${Math.random().toString(36).slice(2, 8)}`, calls })).status).toBe(200);
  }
}

const last = new Map<string, string>();
/** Claim k's turn t: prompt ids [1000 + k] then [7] each later turn, completion [t], a line of text to make the bodies a size. */
function turn(c: Claim, k: number, t: number): CallRecord {
  const before = last.get(c.episode + c.fence);
  const tokens = { prompt_ids: packInts([t === 0 ? 1000 + k : 7]), completion_ids: packInts([t]), completion_logprobs: packFloats([-0.5]) };
  const r = callRecord(c, {
    body:
      t === 0 || before === undefined
        ? { messages: [sys, { role: "user", content: `claim ${k} ${"x".repeat(300)}` }], answer: { role: "assistant", content: `a${t}` }, tokens: { prompt_prefix: null, ...tokens } }
        : {
            prefix: { call_id: before, count: 2 * t + 1 },
            messages: [{ role: "user", content: `turn ${t} of ${k}` }],
            answer: { role: "assistant", content: `a${t}` },
            tokens: { prompt_prefix: { call_id: before, count: 2 * t }, ...tokens },
          },
  });
  last.set(c.episode + c.fence, r.call_id);
  return r;
}

/** The claim's own sequence after `turns` turns. */
const sequence = (k: number, turns: number): number[] => Array.from({ length: turns }, (_, t) => [t === 0 ? 1000 + k : 7, t]).flat();

type Placed = { call_id: string; body_key: string; body_offset: number; body_length: number };
const placed = async (e: TestEngine, c: Claim): Promise<Placed[]> =>
  (
    await env.DB.prepare("SELECT call_id, body_key, body_offset, body_length FROM llm_calls WHERE engine = ? AND episode_uuid = ? AND fence = ? ORDER BY admitted_at")
      .bind(e.name, c.episode, c.fence)
      .all<Placed>()
  ).results;
const objectsOf = async (e: TestEngine, c: Claim): Promise<string[]> => [...new Set((await placed(e, c)).map((r) => r.body_key))];

const ledgerOf = (e: TestEngine) => checkingDeltaForm(new LedgerClient({ baseUrl: `${ORIGIN}/e/${e.name}`, token: e.tokens.trainer, fetch: workerFetch }));
const end = (e: TestEngine, c: Claim) => e.as("client").endEpisode(endBody(c.client, c.episode, 1, "task-7"));

describe("a claim's recorded calls gathered into one object once it is over", () => {
  it("gathers each ended claim's bodies, spread over one shared object a turn, into one object of its own; its trajectory reads the same", async () => {
    const { e, claims } = await groupOfClaims("compact", 3);
    await interleaved(e, claims, 5);
    for (const c of claims) expect(await objectsOf(e, c)).toHaveLength(5);
    const shared = await objectsOf(e, claims[0]!);
    for (const c of claims) expect((await end(e, c)).success).toBe(true);
    // Their ends are in D1 a second later; their calls not gathered yet.
    await advance(e, 1000);
    const ledger = ledgerOf(e);
    const before = await Promise.all(claims.map((c) => ledger.trajectory(c.episode, c.fence)));
    expect(await objectsOf(e, claims[0]!)).toEqual(shared);

    await advance(e, SETTLE_MS - 1000);

    for (const c of claims) {
      const objects = await objectsOf(e, c);
      expect(objects).toHaveLength(1);
      expect(objects[0]).toMatch(/^ledger\/[^/]+\/[^/]+\/\d{4}-\d{2}-\d{2}\/claim-[0-9a-f]{16}\.jsonl$/);
      // The object is the claim's lines, in order, one after the other.
      const rows = await placed(e, c);
      const text = await (await env.LEDGER.get(objects[0]!))!.text();
      expect(rows.map((r) => r.body_offset)).toEqual(rows.map((_, i) => rows.slice(0, i).reduce((n, r) => n + r.body_length, 0)));
      expect(new TextEncoder().encode(text).byteLength).toBe(rows.reduce((n, r) => n + r.body_length, 0));
    }
    expect(await Promise.all(claims.map((c) => ledger.trajectory(c.episode, c.fence)))).toEqual(before);
    // The shared objects stay for retention to delete with their day.
    for (const k of shared) expect(await env.LEDGER.head(k)).not.toBeNull();
    // Nothing is left to do: the alarm is not kept coming for it.
    expect(await runInDurableObject(e.stub, (_i, s) => s.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM ledger_compactions").one().n)).toBe(0);
  });

  it("lets a live claim be, and gathers it once it ends, its last records included", async () => {
    const { e, claims } = await groupOfClaims("compact-live", 2);
    await interleaved(e, claims, 3);
    await advance(e, SETTLE_MS);
    for (const c of claims) expect(await objectsOf(e, c)).toHaveLength(3);
    // Still live a minute later (the lease is 600 s): looked at again, left again.
    await advance(e, LIVE_WAIT_MS);
    for (const c of claims) expect(await objectsOf(e, c)).toHaveLength(3);

    const [a, b] = claims as [Claim, Claim];
    const waiting = async () => (await e.as("viewer").overview()).ledger.claims_to_gather;
    expect(await waiting()).toBe(2);
    // One engine request a recorded batch, whatever its calls.
    expect((await e.as("viewer").overview()).ledger.engine_requests).toBe(3);
    expect((await end(e, a)).success).toBe(true);
    // The ended claim's last call's record arrives after its end, as a gateway ships it.
    await interleaved(e, [a], 1, 3);
    await advance(e, SETTLE_MS - 1);
    expect(await objectsOf(e, a)).toHaveLength(4);
    await advance(e, 1);
    expect(await objectsOf(e, a)).toHaveLength(1);
    expect(await objectsOf(e, b)).toHaveLength(3);
    expect(await waiting()).toBe(1);
    expect((await ledgerOf(e).trajectory(a.episode, a.fence)).training?.tokens).toEqual(sequence(0, 4));
  });

  it("sets aside all the live claims that came due at once in one alarm, not one alarm per run", async () => {
    const { e, claims } = await groupOfClaims("compact-many-live", 40);
    await interleaved(e, claims, 2);
    await advance(e, SETTLE_MS);
    const dues = await runInDurableObject(e.stub, (_i, s) => s.storage.sql.exec<{ due_at: number }>("SELECT due_at FROM ledger_compactions").toArray().map((r) => r.due_at));
    expect(dues).toEqual(claims.map(() => e.clock.t + LIVE_WAIT_MS));
  });

  it("gathers again what arrived after it was gathered, with what it gathered before", async () => {
    const { e, claims } = await groupOfClaims("compact-late", 1);
    const c = claims[0]!;
    await interleaved(e, [c], 3);
    expect((await end(e, c)).success).toBe(true);
    await advance(e, SETTLE_MS);
    const first = await objectsOf(e, c);
    expect(first).toHaveLength(1);
    // A batch the gateway could only send much later (it was down).
    await interleaved(e, [c], 2, 3);
    expect(await objectsOf(e, c)).toHaveLength(3);
    await advance(e, SETTLE_MS);
    const again = await objectsOf(e, c);
    expect(again).toHaveLength(1);
    expect(again).not.toEqual(first);
    expect((await ledgerOf(e).trajectory(c.episode, c.fence)).training?.tokens).toEqual(sequence(0, 5));
  });

  it("gives a trainer's pull each claim's tokens from one read per claim once they are gathered", async () => {
    const n = 16;
    const { e, claims } = await groupOfClaims("compact-pull", n);
    await interleaved(e, claims, 4);
    for (const c of claims) expect((await end(e, c)).success).toBe(true);
    await advance(e, SETTLE_MS);
    // CLAIMS_PER_ALARM a run: the alarm comes again at once for the rest.
    for (let i = 0; i < 3; i++) await advance(e, 0);
    for (const c of claims) expect(await objectsOf(e, c)).toHaveLength(1);
    const pulled = GetRolloutDataResponse.parse(await e.as("trainer").getRolloutData());
    const raw = { ...pulled, data: { ...pulled.data, data: pulled.data.data.map(({ tokens: _t, response_length: _r, loss_mask: _l, rollout_log_probs: _p, ...item }) => item) } } as GetRolloutDataResponse;
    const keys: string[] = [];
    const bucket = { get: (key: string, o?: R2GetOptions) => (keys.push(key), env.LEDGER.get(key, o)) } as unknown as R2Bucket;
    const answer = await withTrainingTokens(env.DB, bucket, e.name, raw, "sequence");
    const items = GetRolloutDataResponse.parse(JSON.parse(await new Response(answer as ReadableStream).text())).data.data;
    expect(items.map((i) => i.tokens)).toEqual(items.map((i) => sequence(claims.findIndex((c) => `${c.episode}#${c.fence}` === i.extra_info["session_id"]), 4)));
    expect(keys).toHaveLength(n);
    expect(new Set(keys).size).toBe(n);
  });
});

describe("gathering's bounds and failures", () => {
  async function spreadClaim(name: string, turns: number) {
    const { e, claims } = await groupOfClaims(name, 1);
    const c = claims[0]!;
    await interleaved(e, [c], turns);
    // Where its bodies live (ledger/keys.ts): the agent hears it with its commands.
    const { incarnation } = await e.as("trainer").pollCommands({ wait: 0.01 });
    return { e, c, engine: { name: e.name, incarnation: incarnation ?? "" } };
  }

  it("reads no more objects than it may, and carries on from what it gathered", async () => {
    const { e, c, engine } = await spreadClaim("compact-reads", 5);
    const opts = { reads: 3 };
    const [g] = await compactClaims(env.DB, env.LEDGER, engine, [c], opts);
    expect(g).toMatchObject({ state: "more", moved: 3 });
    expect(opts.reads).toBe(0);
    expect(await objectsOf(e, c)).toHaveLength(3);
    const [g2] = await compactClaims(env.DB, env.LEDGER, engine, [c], { reads: 3 });
    expect(g2).toMatchObject({ state: "done", moved: 5 });
    expect(await objectsOf(e, c)).toHaveLength(1);
    expect((await ledgerOf(e).trajectory(c.episode, c.fence)).training?.tokens).toEqual(sequence(0, 5));
  });

  it("reads each object the run's claims share once, and holds no more bytes than it may: a claim that does not fit waits for a run of its own", async () => {
    const { e, claims } = await groupOfClaims("compact-shared", 3);
    await interleaved(e, claims, 5);
    const { incarnation } = await e.as("trainer").pollCommands({ wait: 0.01 });
    const engine = { name: e.name, incarnation: incarnation ?? "" };
    const gets: string[] = [];
    const counted = { get: (k: string, o?: R2GetOptions) => (gets.push(k), env.LEDGER.get(k, o)), put: (k: string, v: Uint8Array, o?: R2PutOptions) => env.LEDGER.put(k, v, o) } as unknown as R2Bucket;
    const sizes = await Promise.all(claims.map(async (c) => (await placed(e, c)).reduce((n, r) => n + r.body_length, 0)));
    // Room for the first two claims' bytes, not the third's as well.
    const out = await compactClaims(env.DB, counted, engine, claims, { reads: 100, maxBytes: sizes[0]! + sizes[1]! + 10 });
    expect(out.map((g) => [g.moved, g.state])).toEqual([[5, "done"], [5, "done"], [0, "more"]]);
    expect(gets).toHaveLength(5);
    expect(new Set(gets).size).toBe(5);
    // Alone in its run, it fits.
    const [third] = await compactClaims(env.DB, counted, engine, [claims[2]!], { reads: 100, maxBytes: sizes[0]! + sizes[1]! + 10 });
    expect(third).toMatchObject({ moved: 5, state: "done" });
    for (const c of claims) expect(await objectsOf(e, c)).toHaveLength(1);
  });

  it("moves a long claim's rows in statements of 200, all of them", async () => {
    const { e, c, engine } = await spreadClaim("compact-long", 0);
    const calls = Array.from({ length: 450 }, (_, t) => turn(c, 0, t));
    for (let i = 0; i < calls.length; i += 150) expect((await postCalls(e, { batch_id: `long-claim-${i}`, calls: calls.slice(i, i + 150) })).status).toBe(200);
    expect(await objectsOf(e, c)).toHaveLength(3);
    const [g] = await compactClaims(env.DB, env.LEDGER, engine, [c], { reads: 10 });
    expect(g).toMatchObject({ moved: 450, state: "done" });
    expect(await objectsOf(e, c)).toHaveLength(1);
    expect((await ledgerOf(e).trajectory(c.episode, c.fence)).training?.tokens).toEqual(sequence(0, 450));
  });

  it("gathers a claim's first 2,000 calls, all that its readers read, and leaves the rest", async () => {
    const { e, c, engine } = await spreadClaim("compact-capped", 0);
    const calls = Array.from({ length: 2100 }, (_, t) => turn(c, 0, t));
    for (let i = 0; i < calls.length; i += 420) expect((await postCalls(e, { batch_id: `capped-claim-${i}`, calls: calls.slice(i, i + 420) })).status).toBe(200);
    const [g] = await compactClaims(env.DB, env.LEDGER, engine, [c], { reads: 10 });
    expect(g).toMatchObject({ moved: 2000, state: "done" });
    const rows = await placed(e, c);
    expect(new Set(rows.slice(0, 2000).map((r) => r.body_key)).size).toBe(1);
    // The last 100 stay in the batch they came in.
    expect(new Set(rows.slice(2000).map((r) => r.body_key)).size).toBe(1);
    expect(rows[2000]!.body_key).toMatch(/\/capped-claim-1680-[0-9a-f]+\.jsonl$/);
  });

  it("leaves alone the calls whose object is gone, and those that would pass its bytes", async () => {
    const { e, c, engine } = await spreadClaim("compact-gone", 4);
    const rows = await placed(e, c);
    await env.LEDGER.delete(rows[1]!.body_key);
    const [g] = await compactClaims(env.DB, env.LEDGER, engine, [c], { reads: 10, maxBytes: rows[0]!.body_length + rows[1]!.body_length + rows[2]!.body_length });
    expect(g).toMatchObject({ state: "done", moved: 2 });
    const after = await placed(e, c);
    expect(after[1]).toEqual(rows[1]);
    expect(after[3]).toEqual(rows[3]);
    expect(after[0]!.body_key).toBe(after[2]!.body_key);
    expect(after[0]!.body_key).not.toBe(rows[0]!.body_key);
  });

  it("writes nothing once the engine's delete began", async () => {
    const { e, c, engine } = await spreadClaim("compact-stop", 3);
    const rows = await placed(e, c);
    const listed = async () => (await env.LEDGER.list({ prefix: bodyPrefix(engine.name, engine.incarnation) })).objects.map((o) => o.key).sort();
    const objects = await listed();
    let checks = 0;
    // The delete begins while the gathered object is being written.
    const out = await compactClaims(env.DB, env.LEDGER, engine, [c], { reads: 10, stop: () => ++checks > 2 });
    expect(out[0]).toMatchObject({ moved: 0, state: "stopped" });
    expect(await placed(e, c)).toEqual(rows);
    expect(await listed()).toEqual(objects);
  });

  it("moves a row only from where it read it: a row moved meanwhile stays where the other moved it", async () => {
    const { e, c, engine } = await spreadClaim("compact-race", 3);
    const rows = await placed(e, c);
    // Another compaction moved the first row between this one's read and its update.
    let moved = false;
    const racing = {
      get: async (key: string, o?: R2GetOptions) => {
        if (!moved) {
          moved = true;
          await env.DB.prepare("UPDATE llm_calls SET body_key = 'elsewhere', body_offset = 0 WHERE engine = ? AND call_id = ?").bind(e.name, rows[0]!.call_id).run();
        }
        return env.LEDGER.get(key, o);
      },
      put: (k: string, v: Uint8Array, o?: R2PutOptions) => env.LEDGER.put(k, v, o),
    } as unknown as R2Bucket;
    const [g] = await compactClaims(env.DB, racing, engine, [c], { reads: 10 });
    expect(g).toMatchObject({ moved: 2 });
    expect((await placed(e, c))[0]).toMatchObject({ body_key: "elsewhere", body_offset: 0 });
  });

  it("counts a claim whose object could not be written as failed, and gathers the others of its run", async () => {
    const { e, claims } = await groupOfClaims("compact-one-fails", 2);
    await interleaved(e, claims, 3);
    const { incarnation } = await e.as("trainer").pollCommands({ wait: 0.01 });
    let puts = 0;
    const firstPutFails = {
      get: (k: string, o?: R2GetOptions) => env.LEDGER.get(k, o),
      put: async (k: string, v: Uint8Array, o?: R2PutOptions) => (++puts === 1 ? Promise.reject(new Error("R2 refused it")) : env.LEDGER.put(k, v, o)),
    } as unknown as R2Bucket;
    const out = await compactClaims(env.DB, firstPutFails, { name: e.name, incarnation: incarnation ?? "" }, claims, { reads: 10 });
    expect(out.map((g) => [g.state, g.moved])).toEqual([["failed", 0], ["done", 3]]);
    expect(String(out[0]!.error)).toContain("R2 refused it");
    expect(await objectsOf(e, claims[0]!)).toHaveLength(3);
    expect(await objectsOf(e, claims[1]!)).toHaveLength(1);
  });

  it("tries a failed gathering again, further apart each time, and lets it go after eight failures", async () => {
    const { e, c, engine } = await spreadClaim("compact-fail", 3);
    const logged = vi.spyOn(console, "error").mockImplementation(() => undefined);
    try {
      const failingPut = { get: (k: string, o?: R2GetOptions) => env.LEDGER.get(k, o), put: async () => Promise.reject(new Error("R2 is down")) } as unknown as R2Bucket;
      const attempts = await runInDurableObject(e.stub, async (_i, state) => {
        let t = e.clock.t;
        const q = new LedgerCompactions(state.storage.sql, { now: () => t, armBy: () => {}, live: () => false, engine: () => engine, closed: () => false });
        q.recorded([{ episode: c.episode, fence: c.fence }]);
        const seen: { queued: number; waits: number | null }[] = [];
        t += SETTLE_MS;
        for (let k = 0; k < 8; k++) {
          await q.runDue(env.DB, failingPut, { left: 1000 });
          const next = q.next();
          seen.push({ queued: q.size(), waits: next === null ? null : next - t });
          if (next !== null) t = next;
        }
        return seen;
      });
      expect(attempts).toEqual([
        ...[1, 2, 4, 8, 16, 32, 64].map((k) => ({ queued: 1, waits: 30_000 * k })),
        { queued: 0, waits: null },
      ]);
      expect(logged.mock.calls.filter((x) => String(x[0]).includes("gathering claims' recorded calls")).length).toBe(8);
      expect(await objectsOf(e, c)).toHaveLength(3);
    } finally {
      logged.mockRestore();
    }
  });
});
