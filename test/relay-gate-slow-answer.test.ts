/**
 * A flush whose answer is slow does not hold back the calls counted after it went: they go
 * FLUSH_MS after they were counted, beside it, so that their activity reaches the engine before
 * the reaper could judge the lease they keep (docs/relay.md, "Admission": counted calls reach the
 * engine within 0.5 s). Waiting for that answer first, a client whose last call came from the
 * cache with 2.05 s of lease left was reaped when one answer took 2.8 s.
 */
import { describe, expect, it } from "vitest";
import { FLUSH_MS } from "../src/relay/claim-gate";
import { claim, gateOn, rollingEngine, running, until } from "./support/faulty-gate";

describe("a flush whose answer is slow", () => {
  it("keeps the lease of a client whose last call came from the cache while the previous flush's answer was on its way", async () => {
    const e = await rollingEngine();
    const g = gateOn(e);
    // A 3 s lease: every call keeps it for 3 s from when it was made.
    const key = await claim(e, "c1", 3);
    expect((await g.admit(key)).ok).toBe(true);
    await g.tick(400);
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
