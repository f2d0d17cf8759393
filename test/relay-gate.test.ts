/**
 * The Worker's claim gate (src/relay/claim-gate.ts) against a real engine: calls admitted from
 * the isolate's cache, sent to the engine in batches, and the bound within which an ended claim
 * or an engine that left ROLLING stops being served. The gate's clock is the engine's, moved by
 * the test (test/support/faulty-gate.ts): FRESH_MS, FLUSH_MS and the lease margin are checked
 * exactly, not slept on.
 */
import { describe, expect, it } from "vitest";
import type { ClaimKeyFields } from "../src/auth/claim-key";
import { env } from "cloudflare:workers";
import { ACTIVE_MS, FLUSH_MS, FLUSH_STUCK_MS, FRESH_MS, IDLE_MS, REFRESH_AFTER_MS } from "../src/relay/claim-gate";
import { afterEngineOp, claimGate } from "../src/relay/claim-gates";
import { createEngine, endBody, raw, rollingWith, admin, claimKeyFields, ORIGIN, workerFetch } from "./support/harness";
import { EngineClient } from "../src/client";
import { checkEnvelope } from "../src/auth/gateway-signature";
import { SIGNATURE_HEADER, TIMESTAMP_HEADER } from "../src/protocol/relay";
import { serveRelay } from "../src/relay/relay-routes";
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { claim, gateOn, rollingEngine, running, until } from "./support/faulty-gate";

describe("the relay's claim gate", () => {
  it("admits a claim's calls from its cache: one engine request for the first, one batch for the rest", async () => {
    const e = await rollingEngine();
    const g = gateOn(e);
    const key = await claim(e, "c1");
    const first = await g.admit(key);
    expect(first).toMatchObject({ ok: true, body: { gateway_url: "http://gpu-node-1:10087", trainer_api_key: "sk-ajet-secret-0", client_uuid: "c1" } });
    expect(g.sent).toHaveLength(1);
    for (let i = 0; i < 99; i++) expect(await g.admit(key)).toEqual(first);
    expect(g.sent).toHaveLength(1);
    // The counted calls go within FLUSH_MS, in one request.
    await g.tick(FLUSH_MS);
    expect(g.sent).toHaveLength(2);
    // Its id: the second batch with calls (the first carried the first call), none before it unanswered.
    expect(g.sent[1]).toEqual([{ key, calls: 99, idle_ms: FLUSH_MS, detail: false, carries: false, batch: { gate: expect.any(String), seq: 2, settled: 2 } }]);
    expect(await running(e)).toEqual([expect.objectContaining({ llm_call_count: 100 })]);
    expect((await e.as("viewer").overview()).relay).toEqual({ calls: 100, engine_requests: 2, failures: {}, last_failure: null });
  });

  it("refreshes the claims in use before their answers go stale, in one request for all of them that carries their calls", async () => {
    const e = await rollingEngine(3);
    const g = gateOn(e);
    const keys = [await claim(e, "c1"), await claim(e, "c2"), await claim(e, "c3")];
    for (const k of keys) await g.admit(k);
    expect(g.sent).toHaveLength(3);
    await g.tick(REFRESH_AFTER_MS);
    for (const k of keys) expect((await g.admit(k)).ok).toBe(true);
    await g.tick(0);
    // Counted, not yet sent: FLUSH_MS after the first of them, one request carries the three
    // calls and asks about the three claims.
    expect(g.sent).toHaveLength(3);
    await g.tick(FLUSH_MS);
    expect(g.sent).toHaveLength(4);
    expect(g.sent[3]?.map((it) => [it.key.episode_uuid, it.calls]).sort()).toEqual([
      ["ep-0", 1],
      ["ep-1", 1],
      ["ep-2", 1],
    ]);
    // Fresh again, until FRESH_MS after that request.
    await g.tick(FRESH_MS - 1);
    for (const k of keys) expect(g.gate.cached(k)).toBe(true);
    await g.tick(1);
    for (const k of keys) expect(g.gate.cached(k)).toBe(false);
    expect(await running(e)).toEqual([0, 1, 2].map(() => expect.objectContaining({ llm_call_count: 2 })));
  });

  it("keeps claims that call less often than FRESH_MS fresh too: the engine's requests follow time, not calls", async () => {
    const e = await rollingEngine(20);
    const g = gateOn(e);
    const keys: ClaimKeyFields[] = [];
    for (let i = 0; i < 20; i++) keys.push(await claim(e, `c${i}`));
    for (const k of keys) expect((await g.admit(k)).ok).toBe(true);
    const asked = g.sent.length;
    // 20 claims, each calling every 2 s, one call every 100 ms in all: 200 calls in 20 s.
    for (let i = 0; i < 200; i++) {
      await g.tick(100);
      expect((await g.admit(keys[i % 20]!)).ok).toBe(true);
    }
    const steady = g.sent.length - asked;
    expect(steady).toBeLessThanOrEqual(20_000 / REFRESH_AFTER_MS + 2);
    // Every call of the steady part came from the cache: no claim was asked about alone.
    expect(g.sent.slice(asked).every((batch) => batch.length === 20 || batch.every((it) => it.calls > 0))).toBe(true);
    await g.tick(FLUSH_MS);
    expect((await running(e)).reduce((a, x) => a + x.llm_call_count, 0)).toBe(220);
  });

  it("after a pause, makes stale calls wait for the refresh on its way instead of each asking the engine", async () => {
    const e = await rollingEngine(20);
    const g = gateOn(e);
    const keys: ClaimKeyFields[] = [];
    for (let i = 0; i < 20; i++) keys.push(await claim(e, `c${i}`));
    for (const k of keys) expect((await g.admit(k)).ok).toBe(true);
    // 15 s without a call (a trainer's step, say): every answer is stale.
    await g.tick(15_000);
    const asked = g.sent.length;
    const release = g.holdAnswers();
    // All stale: the first call sends the refresh of all twenty, the other nineteen wait for it.
    const calls = keys.map((k) => g.admitNow(k));
    expect(g.sent.length - asked).toBe(1);
    expect(g.sent.at(-1)).toHaveLength(20);
    release();
    for (const r of await Promise.all(calls)) expect(r.ok).toBe(true);
    expect(g.sent.length - asked).toBe(1);
  });

  it("sends calls flowing steadily in one request per REFRESH_AFTER_MS: the flush and the refresh go together", async () => {
    const e = await rollingEngine(3);
    const g = gateOn(e);
    const keys = [await claim(e, "c1", 3600), await claim(e, "c2", 3600), await claim(e, "c3", 3600)];
    for (const k of keys) await g.admit(k);
    const before = g.sent.length;
    // 10 s of calls, each claim every 50 ms.
    for (let t = 0; t < 10_000; t += 50) {
      for (const k of keys) expect((await g.admit(k)).ok).toBe(true);
      await g.tick(50);
    }
    await g.tick(FLUSH_MS);
    expect(g.sent.length - before).toBeLessThanOrEqual(10_000 / REFRESH_AFTER_MS + 2);
    expect(await running(e)).toEqual(keys.map(() => expect.objectContaining({ llm_call_count: 201 })));
  });

  it("sends calls counted while a batch was on its way with the next, though no call comes after them", async () => {
    const e = await rollingEngine();
    const g = gateOn(e);
    const key = await claim(e, "c1", 3600);
    await g.admit(key);
    expect(g.cached(key)?.ok).toBe(true);
    const release = g.holdAnswers();
    // The flush goes, and its answer waits: two calls are counted meanwhile.
    await g.tick(FLUSH_MS, { settle: false });
    await until(() => g.sent.length === 2);
    expect(g.cached(key)?.ok).toBe(true);
    expect(g.cached(key)?.ok).toBe(true);
    release();
    await g.settle();
    // No call after them: they still go, FLUSH_MS later.
    await g.tick(FLUSH_MS);
    expect(g.sent).toHaveLength(3);
    expect(g.sent[2]).toEqual([expect.objectContaining({ key, calls: 2 })]);
    expect(await running(e)).toEqual([expect.objectContaining({ llm_call_count: 4 })]);
  });

  it("gives up a flush that never ended after FLUSH_STUCK_MS: a later call arms another, which sends the lost batch again", async () => {
    const e = await rollingEngine();
    const g = gateOn(e);
    const key = await claim(e, "c1", 3600);
    await g.admit(key);
    expect(g.cached(key)?.ok).toBe(true);
    // The flush's request is cut off: its answer never comes.
    g.fault("cut-off");
    await g.tick(FLUSH_MS, { settle: false });
    await until(() => g.sent.length === 2);
    await g.tick(FLUSH_STUCK_MS, { settle: false });
    // Stale by now: the call asks the engine, which answers again, and the next is counted.
    expect((await g.admitNow(key)).ok).toBe(true);
    expect(g.cached(key)?.ok).toBe(true);
    await g.tick(FLUSH_MS, { settle: false });
    await until(() => g.sent.length === 5);
    // The lost batch goes again under its id (the engine counts whichever copy reaches it), the new call in a batch of its own.
    const lost = g.sent[1]?.[0]?.batch;
    expect(lost).toMatchObject({ seq: 2 });
    expect(g.sent[3]).toEqual([expect.objectContaining({ key, calls: 1, batch: { ...lost, settled: 2 } })]);
    expect(g.sent[4]).toEqual([expect.objectContaining({ key, calls: 1, batch: expect.objectContaining({ seq: 4 }) })]);
  });

  it("sends a batch that got no answer again, backing off while the engine stays unreachable, and counts it once", async () => {
    const e = await rollingEngine();
    const g = gateOn(e);
    const key = await claim(e, "c1", 3600);
    await g.admit(key);
    for (let i = 0; i < 3; i++) expect(g.cached(key)?.ok).toBe(true);
    // The engine is unreachable for five requests: the flush and its first four resends.
    g.fault("throw-before", "throw-before", "throw-before", "throw-before", "throw-before");
    const times: number[] = [];
    const start = e.clock.t;
    for (let t = 0; t < 10_000; t += 50) {
      const before = g.sent.length;
      await g.tick(50);
      if (g.sent.length > before) times.push(e.clock.t - start);
    }
    // The flush, then five resends: each later by twice as long, up to RESEND_MAX_MS; the last is answered.
    expect(times).toEqual([500, 750, 1250, 2250, 4250, 6250]);
    expect(g.sent.slice(1).every((b) => b[0]?.batch?.seq === 2 && b[0]?.calls === 3)).toBe(true);
    expect(await running(e)).toEqual([expect.objectContaining({ llm_call_count: 4 })]);
  });

  it("keeps refreshing the claims in use after a refresh's request was cut off", async () => {
    const e = await rollingEngine(20);
    const g = gateOn(e);
    const keys: ClaimKeyFields[] = [];
    for (let i = 0; i < 20; i++) keys.push(await claim(e, `c${i}`, 3600));
    for (const k of keys) expect((await g.admit(k)).ok).toBe(true);
    /** 20 claims calling every 2 s, 200 calls over 20 s: the engine's requests for them. */
    const steady = async (): Promise<number> => {
      const before = g.sent.length;
      for (let i = 0; i < 200; i++) {
        await g.tick(100);
        expect((await g.admit(keys[i % keys.length]!)).ok).toBe(true);
      }
      return g.sent.length - before;
    };
    expect(await steady()).toBeLessThanOrEqual(20_000 / REFRESH_AFTER_MS + 2);
    // A call from the cache arms a flush, which is the refresh of all twenty; its request is cut off.
    expect(g.cached(keys[0]!)?.ok).toBe(true);
    g.fault("cut-off");
    const sentBefore = g.sent.length;
    await g.tick(FLUSH_MS, { settle: false });
    await until(() => g.sent.length === sentBefore + 1);
    expect(g.sent.at(-1)).toHaveLength(20);
    g.abandon();
    await g.tick(FLUSH_STUCK_MS + FRESH_MS, { settle: false });
    // Given up like the flush: the refreshes go on, rather than each stale claim asking alone.
    expect(await steady()).toBeLessThanOrEqual(20_000 / REFRESH_AFTER_MS + 2);
  });

  it("stops serving an ended, an aborted and a re-claimed claim within FRESH_MS", async () => {
    const e = await rollingEngine(2);
    const g = gateOn(e);
    const ended = await claim(e, "c1");
    const aborted = await claim(e, "c2");
    expect((await g.admit(ended)).ok).toBe(true);
    expect((await g.admit(aborted)).ok).toBe(true);
    // Ended and aborted in another isolate: this gate hears nothing of it.
    expect((await e.as("client").endEpisode(endBody("c1", ended.episode_uuid, 1))).success).toBe(true);
    await e.as("client").abortEpisode({ client_uuid: "c2", episode_uuid: aborted.episode_uuid });
    const again = await claim(e, "c3");
    expect(again.episode_uuid).toBe(aborted.episode_uuid);
    await g.tick(FRESH_MS - 1);
    expect((await g.admit(ended)).ok).toBe(true);
    await g.tick(1);
    expect(await g.admit(ended)).toMatchObject({ ok: false, status: 401, error: "claim_not_live" });
    expect(await g.admit(aborted)).toMatchObject({ ok: false, status: 401, error: "claim_not_live" });
    expect(await g.admit(again)).toMatchObject({ ok: true, body: { client_uuid: "c3" } });
    // The new claim got none of the old one's calls.
    expect(await running(e)).toEqual([expect.objectContaining({ client_uuid: "c3", llm_call_count: 1 })]);
  });

  it("forgets one episode's claims and no other's, also once idle claims were dropped and came back", async () => {
    const e = await rollingEngine(3);
    const g = gateOn(e);
    const keys = [await claim(e, "c1", 3600), await claim(e, "c2", 3600), await claim(e, "c3", 3600)];
    for (const k of keys) await g.admit(k);
    g.gate.forget(keys[1]!.episode_uuid);
    expect(keys.map((k) => g.gate.cached(k))).toEqual([true, false, true]);
    // Idle past IDLE_MS, all three are dropped at the next batch; one comes back with a call.
    await g.tick(IDLE_MS + FRESH_MS);
    expect((await g.admit(keys[0]!)).ok).toBe(true);
    expect(g.gate.size).toBe(1);
    expect((await g.admit(keys[2]!)).ok).toBe(true);
    g.gate.forget(keys[2]!.episode_uuid);
    expect(keys.map((k) => g.gate.cached(k))).toEqual([true, false, false]);
    g.gate.forget();
    expect(keys.map((k) => g.gate.cached(k))).toEqual([false, false, false]);
  });

  it("answers a dead key from its cache too: a client hammering with it costs the engine one request a second", async () => {
    const e = await rollingEngine();
    const g = gateOn(e);
    const key = await claim(e, "c1");
    await e.as("client").abortEpisode({ client_uuid: "c1", episode_uuid: key.episode_uuid });
    for (let i = 0; i < 50; i++) expect(await g.admit(key)).toMatchObject({ ok: false, status: 401 });
    expect(g.sent).toHaveLength(1);
    await g.tick(FRESH_MS);
    expect(await g.admit(key)).toMatchObject({ ok: false, status: 401 });
    expect(g.sent).toHaveLength(2);
  });

  it("stops every call within FRESH_MS when the engine leaves ROLLING, and refuses from the cache until it is back", async () => {
    const e = await rollingEngine();
    const g = gateOn(e);
    const key = await claim(e, "c1");
    expect((await g.admit(key)).ok).toBe(true);
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING" });
    await g.tick(FRESH_MS - 1);
    expect((await g.admit(key)).ok).toBe(true);
    await g.tick(1);
    expect(await g.admit(key)).toMatchObject({ ok: false, status: 503, error: "engine_not_rolling" });
    const asked = g.sent.length;
    for (let i = 0; i < 20; i++) expect(await g.admit(key)).toMatchObject({ ok: false, status: 503 });
    expect(g.sent).toHaveLength(asked);
    // In the isolate that handled the change, at once.
    g.gate.forget();
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING" });
    expect(await g.admit(key)).toMatchObject({ ok: false, status: 401, error: "claim_not_live" });
  });

  it("keeps a talking client's lease: calls from the cache reach the engine before the reaper judges it", async () => {
    const e = await rollingEngine();
    const g = gateOn(e);
    const key = await claim(e, "c1", 10);
    // 30 s of calls 100 ms apart, three times the lease: most from the cache, all counted.
    for (let i = 0; i < 300; i++) {
      expect((await g.admit(key)).ok).toBe(true);
      await g.tick(100);
    }
    await g.tick(FLUSH_MS);
    expect(await running(e)).toEqual([expect.objectContaining({ episode_uuid: key.episode_uuid, llm_call_count: 300 })]);
    // About one request per REFRESH_AFTER_MS, not one per call.
    expect(g.sent.length).toBeLessThanOrEqual(30_000 / REFRESH_AFTER_MS + 2);
    // Silent, it is reaped when its lease runs out.
    await g.tick(10_000);
    expect(await running(e)).toEqual([]);
    await g.tick(FRESH_MS);
    expect(await g.admit(key)).toMatchObject({ ok: false, status: 401 });
  });

  it("asks the engine with each call once the lease is short, so that a call never comes after the lease it should have kept", async () => {
    const e = await rollingEngine();
    const g = gateOn(e);
    const key = await claim(e, "c1", 2);
    for (let i = 0; i < 40; i++) {
      expect((await g.admit(key)).ok).toBe(true);
      await g.tick(100);
    }
    // A 2 s lease is inside the gate's margin: every call asked, and each was written before its answer.
    expect(g.sent).toHaveLength(40);
    expect(await running(e)).toEqual([expect.objectContaining({ llm_call_count: 40 })]);
  });

  it("does not take an answer that an end in this isolate overtook", async () => {
    const e = await rollingEngine();
    const g = gateOn(e);
    const key = await claim(e, "c1");
    const pending = g.admit(key);
    g.gate.forget(key.episode_uuid);
    // The engine's answer (live) came from before the forget: the gate asks again and gets it live still, as it is.
    expect((await pending).ok).toBe(true);
    expect(g.sent).toHaveLength(2);
  });
});

describe("the relay's claim gate without a promise (admitCached)", () => {
  it("answers from its cache as admit would, and leaves to admit what needs the engine", async () => {
    const e = await rollingEngine(2);
    const g = gateOn(e);
    const key = await claim(e, "c1");
    // Nothing known of the claim: admit asks the engine.
    expect(g.cached(key)).toBeNull();
    expect(g.sent).toHaveLength(0);
    const first = await g.admit(key);
    for (let i = 0; i < 9; i++) expect(g.cached(key)).toEqual(first);
    expect(g.sent).toHaveLength(1);
    // Its calls are counted and sent as admit's are.
    await g.tick(FLUSH_MS);
    expect(g.sent[1]).toEqual([{ key, calls: 9, idle_ms: FLUSH_MS, detail: false, carries: false, batch: { gate: expect.any(String), seq: 2, settled: 2 } }]);
    expect(await running(e)).toEqual([expect.objectContaining({ llm_call_count: 10 })]);
    // Stale: admit asks again.
    await g.tick(FRESH_MS);
    expect(g.cached(key)).toBeNull();
    expect((await g.admit(key)).ok).toBe(true);
    expect(g.cached(key)).toEqual(first);
    // Forgotten in this isolate (an end handled here): at once.
    g.gate.forget(key.episode_uuid);
    expect(g.cached(key)).toBeNull();
  });

  it("refuses from its cache what admit refuses from it: a dead claim, an engine that left ROLLING", async () => {
    const e = await rollingEngine(2);
    const g = gateOn(e);
    const dead = await claim(e, "c1");
    const live = await claim(e, "c2");
    await e.as("client").abortEpisode({ client_uuid: "c1", episode_uuid: dead.episode_uuid });
    expect(await g.admit(dead)).toMatchObject({ ok: false, status: 401, error: "claim_not_live" });
    expect(g.cached(dead)).toMatchObject({ ok: false, status: 401, error: "claim_not_live" });
    expect((await g.admit(live)).ok).toBe(true);
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING" });
    await g.tick(FRESH_MS);
    expect(await g.admit(live)).toMatchObject({ ok: false, status: 503, error: "engine_not_rolling" });
    const asked = g.sent.length;
    expect(g.cached(live)).toMatchObject({ ok: false, status: 503, error: "engine_not_rolling" });
    expect(g.sent).toHaveLength(asked);
  });
});

describe("the relay's gate through a weight sync that keeps the claims", () => {
  async function keeping(holdSeconds: number) {
    const e = await rollingEngine();
    await e.as("operator").configureSync({ keep_claims_across_sync: true, sync_hold_seconds: holdSeconds });
    const g = gateOn(e);
    const key = await claim(e, "c1");
    const first = await g.admit(key);
    expect(first).toMatchObject({ ok: true, body: { weight_version: null } });
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING" });
    return { e, g, key };
  }
  const through = (g: ReturnType<typeof gateOn>, key: ClaimKeyFields) => g.gate.admitThroughSync(key, () => {});

  it("holds a call during the sync and lets it go on to the new weights", async () => {
    const { e, g, key } = await keeping(30);
    // Past FRESH_MS the gate learns of the sync: the call waits instead of failing.
    await g.tick(FRESH_MS);
    let settled = false;
    const held = through(g, key).finally(() => (settled = true));
    for (let i = 0; i < 6; i++) await g.tick(500);
    expect(settled).toBe(false);
    // A held call is no call the cache can answer: admitThroughSync waits for it.
    expect(g.cached(key)).toBeNull();
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 8 });
    for (let i = 0; i < 4 && !settled; i++) await g.tick(500);
    expect(await held).toMatchObject({ ok: true, body: { weight_version: 8, client_uuid: "c1" } });
    // The held call is counted once, when it went on; the asks while it waited were not calls.
    await g.tick(FLUSH_MS);
    expect(await running(e)).toEqual([expect.objectContaining({ llm_call_count: 2 })]);
  });

  it("gives up after sync_hold_seconds with a clear 503, and the claim lives on", async () => {
    const { e, g, key } = await keeping(2);
    await g.tick(FRESH_MS);
    let settled = false;
    const held = through(g, key).finally(() => (settled = true));
    for (let i = 0; i < 5 && !settled; i++) await g.tick(500);
    expect(await held).toMatchObject({ ok: false, status: 503, error: "sync_hold_expired" });
    expect(await running(e)).toEqual([expect.objectContaining({ episode_uuid: key.episode_uuid })]);
  });

  it("keeps the claims of held calls in its refreshes for the whole sync: about one engine request a second, not one per claim", async () => {
    const e = await rollingEngine(20);
    await e.as("operator").configureSync({ keep_claims_across_sync: true, sync_hold_seconds: 120 });
    const g = gateOn(e);
    const keys: ClaimKeyFields[] = [];
    for (let i = 0; i < 20; i++) keys.push(await claim(e, `c${i}`, 3600));
    for (const k of keys) expect((await g.admit(k)).ok).toBe(true);
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING" });
    await g.tick(FRESH_MS);
    const done = keys.map(() => false);
    const held = keys.map((k, i) => through(g, k).finally(() => (done[i] = true)));
    const step = async (): Promise<void> => {
      await g.tick(250);
      for (let i = 0; i < 4; i++) await new Promise((r) => setTimeout(r, 3));
    };
    // Past ACTIVE_MS too: a held call is no call, but its claim is in use.
    const counts: number[] = [];
    for (const _ of [0, 1]) {
      const before = g.sent.length;
      for (let t = 0; t < ACTIVE_MS; t += 250) await step();
      counts.push(g.sent.length - before);
    }
    expect(done.some(Boolean)).toBe(false);
    for (const n of counts) expect(n).toBeLessThanOrEqual((2 * ACTIVE_MS) / 1000);
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 2 });
    for (let i = 0; i < 12 && !done.every(Boolean); i++) await step();
    for (const r of await Promise.all(held)) expect(r).toMatchObject({ ok: true, body: { weight_version: 2 } });
  });

  it("refuses a dead key at once during the sync, without holding it", async () => {
    const { e, g, key } = await keeping(30);
    await e.as("client").abortEpisode({ client_uuid: "c1", episode_uuid: key.episode_uuid });
    await g.tick(FRESH_MS);
    expect(await through(g, key)).toMatchObject({ ok: false, status: 401, error: "claim_not_live" });
  });
});

describe("the relay's gate in the Worker", () => {
  it("never lets a forged key reach the engine", async () => {
    const e = await rollingEngine();
    const c = await e.as("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 60 });
    const parts = c.openai_api_key.split(".");
    parts[parts.length - 1] = "A".repeat(parts.at(-1)?.length ?? 43);
    const forged = parts.join(".");
    for (const path of [`/v1/chat/completions`, `/e/${e.name}/v1/chat/completions`]) {
      const res = await raw(path, { token: forged, body: JSON.stringify({ model: "m", messages: [] }) });
      expect(res.status).toBe(401);
    }
    expect((await e.as("viewer").overview()).relay).toEqual({ calls: 0, engine_requests: 0, failures: {}, last_failure: null });
  });

  it("says a deployment without CLAIM_KEY_SECRET lacks the secret, not that the client's key is bad", async () => {
    const e = await rollingEngine();
    const c = await e.as("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 60 });
    const ctx = createExecutionContext();
    const req = new Request(`${ORIGIN}/e/${e.name}/v1/models`, { headers: { authorization: `Bearer ${c.openai_api_key}` } });
    const res = await serveRelay(req, { ...env, CLAIM_KEY_SECRET: undefined as unknown as string }, ctx)!;
    const body: unknown = await res.json();
    await waitOnExecutionContext(ctx);
    expect(res.status).toBe(500);
    expect(body).toEqual({ error: { message: expect.stringMatching(/^CLAIM_KEY_SECRET is not configured/), type: "api_error", param: null, code: "misconfigured" } });
    expect((await e.as("viewer").overview()).relay).toEqual({ calls: 0, engine_requests: 0, failures: {}, last_failure: null });
  });

  it("forgets an ended claim at once in the isolate that handled the end", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    // A gateway that refuses connections: the call is admitted (the gate knows the claim), then fails 502.
    await e.as("trainer").heartbeat({ agent_id: "a", host: "h", pid: 1, version: "0.1.0", trainer: { state: "running", pid: 2, started_at: null }, gateway_url: "http://127.0.0.1:9" });
    const c = await e.as("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 60 });
    const path = `/e/${e.name}/v1/models`;
    const unreachable = await raw(path, { token: c.openai_api_key });
    expect(unreachable).toMatchObject({ status: 502, json: { error: { code: "gateway_unreachable", message: expect.stringMatching(/error id [0-9a-f-]{36}/) } } });
    // The gateway's address is the operator's business, never a client's.
    expect(unreachable.text).not.toContain("127.0.0.1");
    await e.as("client").endEpisode(endBody("c1", c.episode_uuid, 1));
    const after = await raw(path, { token: c.openai_api_key });
    expect(after.status).toBe(401);
    expect(after.json).toMatchObject({ error: { code: "claim_not_live" } });
  });

  it("forgets on an agent's heartbeat only when it names another gateway", async () => {
    const e = await rollingEngine();
    const key = await claim(e, "c1");
    const gate = claimGate(env, e.name);
    const background: Promise<unknown>[] = [];
    const admit = () => gate.admit(key, (w) => void background.push(w));
    expect((await admit()).ok).toBe(true);
    expect(gate.cached(key)).toBe(true);
    const ok = { ok: true as const, body: { success: true } };
    afterEngineOp(env, e.name, "agent_heartbeat", { gateway_url: "http://gpu-node-1:10087" }, ok);
    expect(gate.cached(key)).toBe(true);
    await e.as("trainer").heartbeat({ agent_id: "agent-1", host: "gpu-node-2", pid: 1, version: "0.1.0", trainer: { state: "running", pid: 2, started_at: null }, gateway_url: "http://gpu-node-2:10087" });
    afterEngineOp(env, e.name, "agent_heartbeat", { gateway_url: "http://gpu-node-2:10087" }, ok);
    expect(gate.cached(key)).toBe(false);
    expect(await admit()).toMatchObject({ ok: true, body: { gateway_url: "http://gpu-node-2:10087" } });
    await Promise.all(background);
  });
});

describe("the relay's gates after a token is revoked", () => {
  it("stops serving a revoked token's claims at once in the isolate that revoked it, and within FRESH_MS in the others", async () => {
    const e = await rollingEngine(2);
    const issued = await admin.issueToken(e.name, "client", "laptop");
    const laptop = new EngineClient({ baseUrl: `${ORIGIN}/e/${e.name}`, token: issued.token, fetch: workerFetch });
    const c = await laptop.claimEpisode({ client_uuid: "laptop-1", discard_episode_timeout: 60 });
    const key = await claimKeyFields(c.openai_api_key);
    const kept = await claim(e, "desk-1");
    // This isolate's gate (the Worker's own, which the admin route forgets) and another isolate's.
    const here = claimGate(env, e.name);
    const background: Promise<unknown>[] = [];
    const other = gateOn(e);
    expect((await here.admit(key, (w) => void background.push(w))).ok).toBe(true);
    expect(here.cached(key)).toBe(true);
    expect((await other.admit(key)).ok).toBe(true);
    expect((await other.admit(kept)).ok).toBe(true);

    await admin.revokeToken(e.name, issued.id);
    expect(here.cached(key)).toBe(false);
    expect(await here.admit(key, (w) => void background.push(w))).toMatchObject({ ok: false, status: 401, error: "claim_not_live" });
    await other.tick(FRESH_MS - 1);
    expect((await other.admit(key)).ok).toBe(true);
    await other.tick(1);
    expect(await other.admit(key)).toMatchObject({ ok: false, status: 401, error: "claim_not_live" });
    expect((await other.admit(kept)).ok).toBe(true);
    await Promise.all(background);
  });

  it("signs with the engine's new gateway secret once a trainer's token is revoked: at once in this isolate, within FRESH_MS in the others", async () => {
    const e = await rollingEngine(1);
    const c = await e.as("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 60 });
    const key = await claimKeyFields(c.openai_api_key);
    const before = (await e.as("trainer").gatewaySecret()).secret;
    // A second trainer token, for the agent that goes on; the first one leaked.
    const spare = await admin.issueToken(e.name, "trainer", "gpu host, again");
    const trainer = new EngineClient({ baseUrl: `${ORIGIN}/e/${e.name}`, token: spare.token, fetch: workerFetch });
    // A gateway that checks the envelope's signature as the agent's does, with the secret it was given.
    const signatures: string[] = [];
    const gateway = (secret: string): Fetcher => ({
      fetch: async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
        const req = new Request(input, init);
        const why = await checkEnvelope(secret, req.headers.get(TIMESTAMP_HEADER) ?? undefined, req.headers.get(SIGNATURE_HEADER) ?? undefined, await req.text(), Math.floor(Date.now() / 1000));
        signatures.push(why ?? "good");
        return why === null ? Response.json({ object: "list", data: [] }) : Response.json({ error: { message: why, type: "auth", param: null, code: "invalid_signature" } }, { status: 401 });
      },
      connect: () => {
        throw new Error("the relay opens no sockets");
      },
    });
    const call = async (secret: string): Promise<void> => {
      const ctx = createExecutionContext();
      const res = await serveRelay(new Request(`${ORIGIN}/v1/models`, { headers: { authorization: `Bearer ${c.openai_api_key}` } }), { ...env, RELAY_NETWORK: gateway(secret) }, ctx)!;
      await res.text();
      await waitOnExecutionContext(ctx);
    };
    await call(before);
    const other = gateOn(e);
    expect(await other.admit(key)).toMatchObject({ ok: true, body: { gateway_generation: 0 } });

    await admin.revokeToken(e.name, e.tokenIds.trainer);
    const after = (await trainer.gatewaySecret()).secret;
    expect(after).not.toBe(before);
    // This isolate's gate, which admitted the claim's call just before, signs with the new secret at once.
    await call(after);
    await call(before);
    expect(signatures).toEqual(["good", "good", "bad signature"]);
    // Another isolate signs with what the engine last said: the old generation until FRESH_MS, then the new one.
    await other.tick(FRESH_MS - 1);
    expect(await other.admit(key)).toMatchObject({ ok: true, body: { gateway_generation: 0 } });
    await other.tick(1);
    expect(await other.admit(key)).toMatchObject({ ok: true, body: { gateway_generation: 1 } });
  });
});
