/**
 * The engine's side of the LLM relay: admitting a call of a live claim. Calls are tallied in
 * memory and written in batches (src/engine/relay-activity.ts); these tests check that what
 * reads the counts, and the reaper, see every admitted call anyway.
 */
import { describe, expect, it } from "vitest";
import { advance, claimKeyFields, createEngine, rollingWith, withGateway, type TestEngine } from "./support/harness";

async function claim(e: TestEngine, client: string, timeoutSeconds = 60) {
  const c = await e.as("client").claimEpisode({ client_uuid: client, discard_episode_timeout: timeoutSeconds });
  expect(c.success).toBe(true);
  return claimKeyFields(c.openai_api_key);
}

const running = async (e: TestEngine) => (await e.as("viewer").runningEpisodes()).episodes;

describe("relay admission", () => {
  it("counts every admitted call, as soon as anything reads the count", async () => {
    const e = await createEngine();
    await rollingWith(e, 2);
    await withGateway(e);
    const key = await claim(e, "c1");
    for (let i = 0; i < 5; i++) expect((await e.stub.relayBegin(key)).ok).toBe(true);
    expect(await running(e)).toEqual([expect.objectContaining({ episode_uuid: key.episode_uuid, llm_call_count: 5 })]);
    expect((await e.stub.relayBegin(key)).ok).toBe(true);
    expect((await running(e))[0]?.llm_call_count).toBe(6);
  });

  it("keeps a talking client's lease alive: the reaper sees calls not yet written", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    await withGateway(e);
    const key = await claim(e, "c1", 60);
    e.clock.t += 50_000;
    expect((await e.stub.relayBegin(key)).ok).toBe(true);
    // 70 s after the claim, 20 s after the call: the lease runs to 110 s.
    await advance(e, 20_000);
    expect(await running(e)).toEqual([expect.objectContaining({ episode_uuid: key.episode_uuid, llm_call_count: 1, idle_seconds: 20 })]);
    await advance(e, 41_000);
    expect(await running(e)).toEqual([]);
    expect(await e.stub.relayBegin(key)).toMatchObject({ ok: false, status: 401, error: "claim_not_live" });
  });

  it("gives a superseded claim's calls to nobody", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    await withGateway(e);
    const first = await claim(e, "c1");
    expect((await e.stub.relayBegin(first)).ok).toBe(true);
    await e.as("client").abortEpisode({ client_uuid: "c1", episode_uuid: first.episode_uuid });
    const second = await claim(e, "c2");
    expect(second.episode_uuid).toBe(first.episode_uuid);
    expect(await e.stub.relayBegin(first)).toMatchObject({ ok: false, status: 401 });
    expect(await running(e)).toEqual([expect.objectContaining({ client_uuid: "c2", llm_call_count: 0 })]);
  });

  it("refuses calls without a registered gateway, and sees one once the agent reports it", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const key = await claim(e, "c1");
    expect(await e.stub.relayBegin(key)).toMatchObject({ ok: false, status: 503, error: "no_gateway" });
    await withGateway(e);
    expect(await e.stub.relayBegin(key)).toMatchObject({ ok: true, body: { gateway_url: "http://gpu-node-1:10087" } });
  });
});

describe("relay admission of the Worker's batches", () => {
  it("answers a batch sent again under its id, and counts its calls once", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    await withGateway(e);
    const key = await claim(e, "c1");
    const batch = (seq: number, settled: number, calls = 3) => [{ key, calls, idle_ms: 0, detail: false, carries: false, batch: { gate: "g1", seq, settled } }];
    const first = await e.stub.relaySync(batch(1, 1));
    expect(first).toMatchObject({ ok: true, body: { claims: [{ ok: true }] } });
    // Its answer was lost: the same batch again is answered as the first time, not counted.
    expect(await e.stub.relaySync(batch(1, 1))).toMatchObject({ ok: true, body: { claims: [{ ok: true }] } });
    // A later batch, sent before the first was answered, counts; a copy of the first arriving late too does not.
    expect((await e.stub.relaySync(batch(2, 1))).ok).toBe(true);
    expect((await e.stub.relaySync(batch(1, 1))).ok).toBe(true);
    // Settled: the gate sends nothing below 3 again, so a copy of 2 arriving late is not counted either.
    expect((await e.stub.relaySync(batch(3, 3))).ok).toBe(true);
    expect((await e.stub.relaySync(batch(2, 2))).ok).toBe(true);
    // Another gate's sequence numbers are its own; a batch without an id (an older Worker) counts each time.
    expect((await e.stub.relaySync([{ ...batch(1, 1)[0]!, batch: { gate: "g2", seq: 1, settled: 1 } }])).ok).toBe(true);
    expect((await e.stub.relaySync([{ key, calls: 1, idle_ms: 0, detail: false, carries: false }])).ok).toBe(true);
    expect((await e.stub.relaySync([{ key, calls: 1, idle_ms: 0, detail: false, carries: false }])).ok).toBe(true);
    expect(await running(e)).toEqual([expect.objectContaining({ llm_call_count: 3 * 4 + 2 })]);
    expect((await e.as("viewer").overview()).relay.calls).toBe(14);
  });
});
