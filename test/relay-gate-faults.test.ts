/**
 * The per-isolate claim gate (src/relay/claim-gate.ts) when its requests to the engine fail or
 * answer late, as a network does: a refused call is never counted, a failed batch is sent again
 * under its id and counted once, an older answer never overrules a newer one (nor a newer one the
 * engine's answer to a call's own question), an answer is used only while fresh, and a read waits
 * for the calls already on their way. The engine is real; only its RPC is made to misbehave
 * (test/support/faulty-gate.ts).
 */
import { describe, expect, it } from "vitest";
import { FLUSH_MS, FLUSH_STUCK_MS, FRESH_MS } from "../src/relay/claim-gate";
import { endBody, withGateway } from "./support/harness";
import { claim, gateOn, rollingEngine, running, until } from "./support/faulty-gate";
import { runInDurableObject } from "cloudflare:test";
import type { EngineObject } from "../src/engine/engine-object";
import type { TestEngine } from "./support/harness";

/** When the engine last saw the episode's claim active. */
const lastActivity = (e: TestEngine, episode: string) =>
  runInDurableObject(e.stub, (_i: EngineObject, state) => state.storage.sql.exec<{ t: number }>("SELECT last_activity AS t FROM episodes WHERE episode_uuid = ?", episode).one().t);


describe("the claim gate when the engine fails or answers late: a refused call is not counted", () => {
  it("counts only the calls admitted: a call refused 503 engine_unreachable is no relayed call", async () => {
    const e = await rollingEngine();
    const g = gateOn(e);
    const key = await claim(e, "c1", 3600);
    // The engine cannot be reached for the claim's first call: the client gets a 503, nothing is relayed.
    g.fault("throw-before");
    expect(await g.admit(key)).toMatchObject({ ok: false, status: 503, error: "engine_unreachable" });
    // The client tries again and is admitted: one call relayed in all.
    expect((await g.admit(key)).ok).toBe(true);
    await g.tick(FLUSH_MS);
    expect(await running(e)).toEqual([expect.objectContaining({ episode_uuid: key.episode_uuid, llm_call_count: 1 })]);
    expect((await e.as("viewer").overview()).relay.calls).toBe(1);
  });

  it("writes no activity for the refused call when the batch that carried it goes again: the claim's last call is the one before", async () => {
    const e = await rollingEngine();
    const g = gateOn(e);
    const key = await claim(e, "c1", 3600);
    const t0 = e.clock.t;
    expect((await g.admit(key)).ok).toBe(true);
    await g.tick(100);
    // Served from the cache at t0 + 100, not sent yet.
    expect(g.cached(key)?.ok).toBe(true);
    await g.tick(200);
    // An engine-wide change handled in this isolate (configure_sync, say) at t0 + 300; the claim lives.
    g.gate.forget();
    g.fault("throw-before");
    // The next call asks, carrying itself beside the served one; no answer comes: refused.
    expect(await g.admit(key)).toMatchObject({ ok: false, status: 503, error: "engine_unreachable" });
    // The batch goes again (RESEND_MS) with the served call alone.
    await g.tick(250);
    await g.tick(250);
    const [ep] = await running(e);
    expect(ep).toMatchObject({ llm_call_count: 2 });
    expect(await lastActivity(e, key.episode_uuid)).toBe(t0 + 100);
  });
});

describe("the claim gate when the engine fails or answers late: a failed flush is sent again", () => {
  it("sends calls counted from the cache within FLUSH_MS, though a resend backed off to a second is armed", async () => {
    const e = await rollingEngine();
    const g = gateOn(e);
    const key = await claim(e, "c1", 3600);
    expect((await g.admit(key)).ok).toBe(true);
    expect(g.cached(key)?.ok).toBe(true);
    // The engine cannot be reached for three requests: the flush at 500 ms, resends at 750 and 1250; the next waits a second.
    g.fault("throw-before", "throw-before", "throw-before");
    await g.tick(500);
    await g.tick(250);
    await g.tick(500);
    // Reachable again at 1300 ms: a call asks and is admitted; at 1400 one comes from the cache.
    await g.tick(50);
    expect((await g.admit(key)).ok).toBe(true);
    await g.tick(100);
    expect(g.cached(key)?.ok).toBe(true);
    // FLUSH_MS later every call admitted is at the engine, not at 2250 ms with the backed-off resend.
    await g.tick(FLUSH_MS);
    expect(await running(e)).toEqual([expect.objectContaining({ llm_call_count: 4 })]);
  });

  it("sends calls whose flush failed once, without waiting for another call", async () => {
    const e = await rollingEngine();
    const g = gateOn(e);
    const key = await claim(e, "c1", 3600);
    expect((await g.admit(key)).ok).toBe(true);
    // Two calls from the cache; their flush meets a transient RPC failure.
    expect(g.cached(key)?.ok).toBe(true);
    expect(g.cached(key)?.ok).toBe(true);
    g.fault("throw-before");
    await g.tick(FLUSH_MS);
    expect(g.sent).toHaveLength(2);
    // The client is busy with its model's answer for a while: no other call comes.
    for (let t = 0; t < FLUSH_STUCK_MS; t += FLUSH_MS) await g.tick(FLUSH_MS);
    expect(await running(e)).toEqual([expect.objectContaining({ llm_call_count: 3 })]);
  });

  /** A client with a 3 s lease (every call keeps it for 3 s from when it was made), its first call admitted 400 ms ago. */
  async function admittedWith3sLease() {
    const e = await rollingEngine();
    const g = gateOn(e);
    const key = await claim(e, "c1", 3);
    expect((await g.admit(key)).ok).toBe(true);
    await g.tick(400);
    return { e, g, key };
  }

  it("keeps the lease of a client whose last call was admitted from the cache when that call's flush failed", async () => {
    const { e, g, key } = await admittedWith3sLease();
    // Its last call, from the cache (the lease runs 2.6 s more, past the margin); its flush fails once.
    expect(g.cached(key)?.ok).toBe(true);
    g.fault("throw-before");
    await g.tick(FLUSH_MS);
    // 2.7 s after that call: inside the 3 s lease it earned, the claim must still be live.
    for (let i = 0; i < 11; i++) await g.tick(200);
    expect((await running(e)).map((x) => x.episode_uuid)).toEqual([key.episode_uuid]);
  });

  // Calls counted behind a flush whose answer is slow go FLUSH_MS after they were counted, beside
  // it: waiting for that answer first (2.8 s here), the client was reaped inside the lease it earned.
  it("keeps the lease of a client whose last call came from the cache while the previous flush's answer was on its way", async () => {
    const { e, g, key } = await admittedWith3sLease();
    // A call from the cache arms the flush; that flush reaches the engine at once, its answer is slow.
    expect(g.cached(key)?.ok).toBe(true);
    g.fault("late-answer");
    await g.tick(FLUSH_MS, { settle: false });
    await until(() => g.processed === 2 && g.held === 1);
    const sentAfterFlush = g.sent.length;
    // The client's last call, 50 ms later, from the cache (fresh, its lease 2.05 s ahead: past the margin).
    await g.tick(50, { settle: false });
    expect(g.cached(key)?.ok).toBe(true);
    const lastCall = e.clock.t;
    // The engine is reachable (a new request gets there at once); only that one answer is slow.
    // FLUSH_MS later the last call's count should be on its way.
    await g.tick(FLUSH_MS, { settle: false });
    // (The clock stands still while the gate's background work runs: what it sends now was due by now.)
    await until(() => g.sent.slice(sentAfterFlush).some((b) => b.some((it) => it.calls > 0)));
    // 2.7 s after that call, inside the 3 s lease it earned, the claim must still be live.
    while (e.clock.t < lastCall + 2_700) await g.tick(100, { settle: false });
    const live = (await running(e)).map((x) => x.episode_uuid);
    g.release();
    await g.settle();
    expect(live).toEqual([key.episode_uuid]);
  });
});

describe("the claim gate when the engine fails or answers late: a batch is counted once", () => {
  it("does not count again the calls of a batch the engine applied before its answer was lost", async () => {
    const e = await rollingEngine();
    const g = gateOn(e);
    const key = await claim(e, "c1", 3600);
    expect((await g.admit(key)).ok).toBe(true);
    for (let i = 0; i < 5; i++) expect(g.cached(key)?.ok).toBe(true);
    // The flush reaches the engine, which writes the five calls; the connection is lost on the way back.
    g.fault("throw-after");
    await g.tick(FLUSH_MS);
    expect(g.processed).toBe(2);
    // The client goes on: one more call (it asks the engine, the cache having gone stale).
    await g.tick(1_000);
    expect((await g.admit(key)).ok).toBe(true);
    await g.tick(FLUSH_MS);
    // 1 + 5 + 1 calls were relayed.
    expect(await running(e)).toEqual([expect.objectContaining({ llm_call_count: 7 })]);
    expect((await e.as("viewer").overview()).relay.calls).toBe(7);
  });
});

describe("the claim gate when the engine fails or answers late: an older answer does not overrule a newer one", () => {
  it("keeps holding calls during a weight sync when an answer from before the sync arrives late", async () => {
    const e = await rollingEngine(2);
    await e.as("operator").configureSync({ keep_claims_across_sync: true, sync_hold_seconds: 120 });
    const g = gateOn(e);
    const k1 = await claim(e, "c1", 3600);
    const k2 = await claim(e, "c2", 3600);
    expect((await g.admit(k1)).ok).toBe(true);
    await g.tick(FRESH_MS);
    // k1's stale call asks the engine (rolling): the engine answers at once, the answer is slow to come back.
    g.fault("late-answer");
    const first = g.admitNow(k1);
    await until(() => g.processed === 2 && g.held === 1);
    // The trainer begins a weight sync that keeps the claims.
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING" });
    await g.tick(3_000, { settle: false });
    // k2's first call, 3 s into the sync: the engine says hold.
    const second = await g.admitNow(k2);
    expect(second).toMatchObject({ ok: true, body: { hold: "weight_syncing" } });
    expect(g.cached(k2), "before the late answer").toBeNull();
    // The old answer (from before the sync) arrives now.
    g.release();
    await first;
    // Still syncing, 3 s in: no call of k2 may go to the model.
    expect(g.cached(k2), "after the late answer, 3 s into the sync").toBeNull();
    expect(await g.admitNow(k2)).toMatchObject({ ok: true, body: { hold: "weight_syncing" } });
  });

  it("refuses a call as the engine answered its own question (no gateway), though a later answer that came first admits the claim", async () => {
    const e = await rollingEngine(2);
    const g = gateOn(e);
    const k1 = await claim(e, "c1");
    const k2 = await claim(e, "c2");
    // A refresh now: the next questions within REFRESH_AFTER_MS go alone.
    expect((await g.admit(k1)).ok).toBe(true);
    // The agent loses its gateway (heard in another isolate), and k2's first call asks: its answer is slow.
    await withGateway(e, null);
    g.fault("late-answer");
    const first = g.admitNow(k2);
    await until(() => g.held === 1);
    // The gateway is back; a second call of k2 asks again, and is answered first.
    await withGateway(e);
    expect(await g.admitNow(k2)).toMatchObject({ ok: true, body: { gateway_url: "http://gpu-node-1:10087" } });
    g.release();
    // The engine refused the first call (and did not count it): it is refused, not admitted without the engine's terms.
    expect(await first).toMatchObject({ ok: false, status: 503, error: "no_gateway" });
  });

  it("does not admit a waiting call on a refresh's answer that came more than FRESH_MS after the refresh was sent: it asks the engine", async () => {
    const e = await rollingEngine(1);
    const g = gateOn(e);
    const key = await claim(e, "c1");
    expect((await g.admit(key)).ok).toBe(true); // t=0
    await g.tick(600);
    expect((await g.admit(key)).ok).toBe(true); // from the cache: arms a flush for t=1100
    g.fault("late-answer");
    await g.tick(FLUSH_MS, { settle: false }); // t=1100: the flush refreshes the claim; its answer is slow
    await until(() => g.held === 1);
    const refreshSentAt = e.clock.t;
    // Ended in another isolate just after the refresh reached the engine.
    expect((await e.as("client").endEpisode(endBody("c1", key.episode_uuid, 1))).success).toBe(true);
    await g.tick(400, { settle: false }); // t=1500: stale, the call waits for the refresh on its way
    const call = g.admitNow(key);
    await g.tick(800, { settle: false }); // t=2300
    expect(e.clock.t).toBeGreaterThan(refreshSentAt + FRESH_MS);
    g.release();
    expect(await call).toMatchObject({ ok: false, status: 401, error: "claim_not_live" });
  });
});

describe("the claim gate when the engine fails or answers late: a read in the isolate sees every call it admitted", () => {
  it("waits for the batch already carrying the counted calls before the read goes", async () => {
    const e = await rollingEngine();
    const g = gateOn(e);
    const key = await claim(e, "c1", 3600);
    expect((await g.admit(key)).ok).toBe(true);
    for (let i = 0; i < 3; i++) expect(g.cached(key)?.ok).toBe(true);
    // The flush timer sends the three calls; its request is slow to reach the engine (a route read, a slow link).
    g.fault("late-send");
    await g.tick(FLUSH_MS, { settle: false });
    await until(() => g.held === 1);
    // A read handled in this isolate: its flush, then the read.
    await g.gate.flush();
    const seen = await running(e);
    g.release();
    await g.settle();
    expect(seen).toEqual([expect.objectContaining({ llm_call_count: 4 })]);
  });
});
