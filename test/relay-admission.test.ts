/**
 * The engine's side of the LLM relay: admitting a call of a live claim. Calls are tallied in
 * memory and written in batches (src/engine/relay-activity.ts); these tests check that what
 * reads the counts, and the reaper, see every admitted call anyway.
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it, vi } from "vitest";
import { EngineClient } from "../src/client";
import { hashToken } from "../src/auth/tokens";
import type { EngineObject } from "../src/engine/engine-object";
import { ClaimEpisodeRequest } from "../src/protocol/swarm";
import { admin, advance, claimKeyFields, createEngine, ORIGIN, rollingWith, withGateway, workerFetch, type TestEngine } from "./support/harness";

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

describe("relay admission of a revoked token's claims", () => {
  /** A client token of its own for a laptop (operations.md: "give each client host its own"), and the engine's API with it. */
  async function laptop(e: TestEngine) {
    const issued = await admin.issueToken(e.name, "client", "laptop");
    return { issued, client: new EngineClient({ baseUrl: `${ORIGIN}/e/${e.name}`, token: issued.token, fetch: workerFetch }) };
  }

  it("stops serving the per-claim key of a claim made with a token that is then revoked, however long its holder keeps calling", async () => {
    const e = await createEngine("rvk");
    await rollingWith(e, 1);
    await withGateway(e);
    const { issued, client } = await laptop(e);
    const claimed = await client.claimEpisode({ client_uuid: "laptop-1", discard_episode_timeout: 60 });
    expect(claimed.success).toBe(true);
    const key = await claimKeyFields(claimed.openai_api_key);
    expect((await e.stub.relayBegin(key)).ok).toBe(true);

    // The laptop is lost or its token leaked: the admin revokes the token (docs/security.md: "A revoked token stops working at once").
    await admin.revokeToken(e.name, issued.id);
    await expect(client.getEngineStatus()).rejects.toMatchObject({ status: 401 });
    // Each call would push the lease on, and the dead token can end or abort nothing: the claim
    // went with the token, and its key with it, however long its holder keeps calling.
    for (let i = 0; i < 12; i++) {
      await advance(e, 50_000);
      expect(await e.stub.relayBegin(key)).toMatchObject({ ok: false, status: 401, error: "claim_not_live" });
    }
  });

  it("records a claim released by its token's revocation as reaped, with the reason, and puts its episode back in the queue", async () => {
    const e = await createEngine("rvk");
    await rollingWith(e, 3);
    await withGateway(e);
    const { issued, client } = await laptop(e);
    const lost = await client.claimEpisode({ client_uuid: "laptop-1", discard_episode_timeout: 60, throttle_policy: { ratio: 1.5, current_task_id: "task-9" } });
    // The engine's own client token and the admin claim too: their claims are none of the revocation's business.
    const other = await e.as("client").claimEpisode({ client_uuid: "desk-1", discard_episode_timeout: 60 });
    const byAdmin = await e.as("admin").claimEpisode({ client_uuid: "admin-1", discard_episode_timeout: 60 });
    for (const c of [lost, other, byAdmin]) expect(c.success).toBe(true);
    expect((await e.stub.relayBegin(await claimKeyFields(lost.openai_api_key))).ok).toBe(true);

    await admin.revokeToken(e.name, issued.id);
    const running = (await e.as("viewer").runningEpisodes()).episodes.map((r) => r.client_uuid).sort();
    expect(running).toEqual(["admin-1", "desk-1"]);
    for (const c of [other, byAdmin]) expect((await e.stub.relayBegin(await claimKeyFields(c.openai_api_key))).ok).toBe(true);
    // Back at the queue's tail, as a lease that ran out: the next claim takes it.
    const buffer = (await e.as("trainer").getEpisodeBuffer()).buffer;
    expect(buffer.find((b) => b.episode_uuid === lost.episode_uuid)).toMatchObject({ episode_status: "registered", client_uuid: "", llm_call_count: 0 });
    const again = await e.as("client").claimEpisode({ client_uuid: "desk-2", discard_episode_timeout: 60 });
    expect(again).toMatchObject({ success: true, episode_uuid: lost.episode_uuid });
    // The pool's per-task view counts it reaped; its trajectory says so, and why.
    expect((await e.as("trainer").getPoolInfo()).failed_tasks).toEqual({ "task-9": { failed_infra: 0, aborted: 0, reaped: 1, episode_uuids: [lost.episode_uuid] } });
    await advance(e, 1_000);
    const rows = await env.DB.prepare("SELECT episode_uuid, client_uuid, task_id, outcome, reward, workflow_output FROM trajectories WHERE engine = ?").bind(e.name).all();
    expect(rows.results).toEqual([
      { episode_uuid: lost.episode_uuid, client_uuid: "laptop-1", task_id: "task-9", outcome: "reaped", reward: null, workflow_output: '{"reaped_because":"token_revoked"}' },
    ]);
    // Revoking again changes nothing.
    await admin.revokeToken(e.name, issued.id);
    expect((await e.as("viewer").runningEpisodes()).total).toBe(3);
  });

  it("makes no claim for a token revoked while the claim awaited its key's signature", async () => {
    const e = await createEngine("rvk");
    await rollingWith(e, 1);
    const { issued } = await laptop(e);
    const hash = await hashToken(issued.token);
    const answer = await runInDurableObject(e.stub, async (instance: EngineObject) => {
      // The key's signature waits until the test lets it go: the revocation comes meanwhile.
      let signing!: () => void;
      const signed = new Promise<void>((r) => (signing = r));
      let asked = false;
      const sign = crypto.subtle.sign.bind(crypto.subtle);
      const held = vi.spyOn(crypto.subtle, "sign").mockImplementation(async (...args: Parameters<typeof sign>) => {
        asked = true;
        await signed;
        return sign(...args);
      });
      try {
        const claimed = instance.claimEpisode({ admin: false, tokenHash: hash }, ClaimEpisodeRequest.parse({ client_uuid: "laptop-1", discard_episode_timeout: 60 }), ORIGIN);
        for (let i = 0; !asked && i < 100; i++) await new Promise((r) => setTimeout(r, 0));
        expect(asked).toBe(true);
        instance.revokeToken(hash);
        signing();
        return await claimed;
      } finally {
        held.mockRestore();
      }
    });
    expect(answer).toMatchObject({ ok: false, status: 401, error: "invalid_token" });
    expect((await e.as("viewer").runningEpisodes()).total).toBe(0);
    expect((await e.as("client").claimEpisode({ client_uuid: "desk-1", discard_episode_timeout: 60 })).success).toBe(true);
  });
});
