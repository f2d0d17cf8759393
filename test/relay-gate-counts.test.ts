/**
 * The calls a Worker isolate served from its claim gate's cache count when they reach the
 * engine, whatever stands by then: the claim over, the engine out of ROLLING, its gateway gone.
 * They were relayed to the model while the claim lived (docs/relay.md, "Admission"); only the
 * call a batch carries to ask is decided by what stands now. A live claim's served calls also
 * keep its lease, the gateway gone or not.
 */
import { describe, expect, it } from "vitest";
import { FLUSH_MS } from "../src/relay/claim-gate";
import { endBody } from "./support/harness";
import { claim, gateOn, rollingEngine, running } from "./support/faulty-gate";

describe("calls served from the cache that reach the engine after a change", () => {
  it("counts the calls a claim made from the cache just before its client ended it", async () => {
    const e = await rollingEngine();
    const g = gateOn(e);
    const key = await claim(e, "c1", 3600);
    // The first call asks the engine (counted there); three more are served from the cache.
    expect((await g.admit(key)).ok).toBe(true);
    for (let i = 0; i < 3; i++) expect(g.cached(key)?.ok).toBe(true);
    // The client's last answer came; it ends its episode at once, before the flush (FLUSH_MS) went.
    expect((await e.as("client").endEpisode(endBody("c1", key.episode_uuid, 1))).success).toBe(true);
    // Handled in this isolate: the end forgets the claim (afterEngineOp), then a read flushes first.
    g.gate.forget(key.episode_uuid);
    await g.gate.flush();
    await g.tick(FLUSH_MS);
    // The three went to the engine, in a batch of their own, after the end.
    expect(g.sent.at(-1)).toEqual([expect.objectContaining({ key, calls: 3 })]);
    // Four calls were admitted and relayed to the model.
    expect((await e.as("viewer").overview()).relay.calls).toBe(4);
  });

  it("counts the calls served before the engine left ROLLING, refusing the batch as not rolling", async () => {
    const e = await rollingEngine();
    const g = gateOn(e);
    const key = await claim(e, "c1", 3600);
    expect((await g.admit(key)).ok).toBe(true);
    for (let i = 0; i < 2; i++) expect(g.cached(key)?.ok).toBe(true);
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.OFFLINE" });
    await g.tick(FLUSH_MS);
    expect(g.sent.at(-1)).toEqual([expect.objectContaining({ key, calls: 2 })]);
    expect((await e.as("viewer").overview()).relay.calls).toBe(3);
  });

  it("counts the calls served before the agent's gateway went away, and keeps the lease they earned", async () => {
    const e = await rollingEngine();
    const g = gateOn(e);
    const key = await claim(e, "c1", 3600);
    expect((await g.admit(key)).ok).toBe(true);
    for (let i = 0; i < 2; i++) expect(g.cached(key)?.ok).toBe(true);
    // The agent restarts without a gateway: its heartbeat says none.
    await e.as("trainer").heartbeat({ agent_id: "agent-1", host: "gpu-node-1", pid: 1, trainer: { state: "running", pid: 2, started_at: null }, gateway_url: null });
    await g.tick(FLUSH_MS);
    expect(g.sent.at(-1)).toEqual([expect.objectContaining({ key, calls: 2 })]);
    expect((await e.as("viewer").overview()).relay.calls).toBe(3);
    expect(await running(e)).toEqual([expect.objectContaining({ episode_uuid: key.episode_uuid, llm_call_count: 3 })]);
  });

  it("counts the calls of a claim the gate forgets to make room for another (MAX_CLAIMS; two here)", async () => {
    const e = await rollingEngine(3);
    const g = gateOn(e, { maxClaims: 2 });
    const [a, b, c] = [await claim(e, "c1", 3600), await claim(e, "c2", 3600), await claim(e, "c3", 3600)];
    expect((await g.admit(a)).ok).toBe(true);
    expect((await g.admit(b)).ok).toBe(true);
    // The first claim's client keeps talking: two calls from the cache.
    for (let i = 0; i < 2; i++) expect(g.cached(a)?.ok).toBe(true);
    // A third claim's first call: the first claim is forgotten, its two calls go to the engine.
    expect((await g.admit(c)).ok).toBe(true);
    expect(g.gate.size).toBe(2);
    await g.tick(FLUSH_MS);
    const counts = new Map((await running(e)).map((x) => [x.episode_uuid, x.llm_call_count]));
    expect(counts).toEqual(new Map([[a.episode_uuid, 3], [b.episode_uuid, 1], [c.episode_uuid, 1]]));
    // Its next call asks the engine again, and counts.
    expect((await g.admit(a)).ok).toBe(true);
    expect((await running(e)).find((x) => x.episode_uuid === a.episode_uuid)?.llm_call_count).toBe(4);
  });
});
