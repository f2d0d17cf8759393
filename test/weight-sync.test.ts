/**
 * Carrying rollouts on through weight syncs (keep_claims_across_sync, protocol/sync.ts): the
 * engine's side. Off, leaving ENGINE.ROLLING clears the pool as AgentJet expects; on, claims and
 * their leases survive ENGINE.WEIGHT_SYNCING and a relayed call of a live claim is answered
 * "hold" until the sync ends, then admitted on the new weights' version.
 */
import { describe, expect, it } from "vitest";
import { runInDurableObject } from "cloudflare:test";
import { SYNCED_END_MEMORY_MS } from "../src/engine/episode-queue";
import { notReadyCause } from "../src/engine/rules";
import { advance, claimKeyFields, createEngine, endBody, engineStats, raw, rollingWith, withGateway, type TestEngine } from "./support/harness";

async function claim(e: TestEngine, client: string, timeoutSeconds = 60) {
  const c = await e.as("client").claimEpisode({ client_uuid: client, discard_episode_timeout: timeoutSeconds });
  expect(c.success).toBe(true);
  return { episode: c.episode_uuid, key: await claimKeyFields(c.openai_api_key) };
}

const status = (e: TestEngine, engine_status: "ENGINE.ROLLING" | "ENGINE.WEIGHT_SYNCING" | "ENGINE.OFFLINE", weight_version?: number) =>
  e.as("trainer").updateEngineStatus({ engine_status, ...(weight_version !== undefined ? { weight_version } : {}) });

async function rolling(keep: boolean): Promise<TestEngine> {
  const e = await createEngine("sync");
  if (keep) expect(await e.as("operator").configureSync({ keep_claims_across_sync: true, sync_hold_seconds: 30 })).toEqual({ keep_claims_across_sync: true, sync_hold_seconds: 30 });
  await rollingWith(e, 3);
  await withGateway(e);
  await status(e, "ENGINE.ROLLING", 7);
  return e;
}

describe("weight syncs without keep_claims_across_sync (the default)", () => {
  it("clears the pool when the engine leaves ROLLING, as AgentJet's SwarmClient relies on", async () => {
    const e = await rolling(false);
    expect(await e.as("viewer").syncConfig()).toEqual({ keep_claims_across_sync: false, sync_hold_seconds: 120 });
    const c = await claim(e, "c1");
    await status(e, "ENGINE.WEIGHT_SYNCING");
    expect(await engineStats(e)).toMatchObject({ registered: 0, claimed: 0 });
    expect(await e.as("client").canContinueEpisode({ client_uuid: "c1", episode_uuid: c.episode })).toEqual({ can_continue: false });
    expect(await e.stub.relayBeginOrHold(c.key)).toMatchObject({ ok: false, status: 503, error: "engine_not_rolling" });
    await expect(e.as("client").endEpisode(endBody("c1", c.episode, 1))).rejects.toMatchObject({ status: 400, code: "engine_not_rolling" });
  });
});

describe("weight syncs with keep_claims_across_sync", () => {
  it("keeps claims through the sync, holds their calls, and admits them after it on the new weights' version", async () => {
    const e = await rolling(true);
    const inFlight = await claim(e, "c1", 60);
    const idle = await claim(e, "c2", 60);
    const other = await claim(e, "c3", 60);
    // A call admitted before the sync is in flight at the gateway when it begins.
    expect(await e.stub.relayBeginOrHold(inFlight.key)).toMatchObject({ ok: true, body: { weight_version: 7 } });
    await advance(e, 10_000);
    await status(e, "ENGINE.WEIGHT_SYNCING");
    expect(await engineStats(e)).toMatchObject({ registered: 0, claimed: 3 });
    expect(await e.as("client").canContinueEpisode({ client_uuid: "c1", episode_uuid: inFlight.episode })).toEqual({ can_continue: true });
    // A call that arrives now is to be held, not refused; the Worker that cannot hold gets the old 503, named.
    expect(await e.stub.relayBeginOrHold(other.key)).toEqual({
      ok: true,
      body: { hold: "weight_syncing", weight_version_before: 7, hold_seconds: 30, retry_after_ms: 500, syncing_since: e.clock.t },
    });
    expect(await e.stub.relayBegin(other.key)).toMatchObject({ ok: false, status: 503, error: "weight_syncing" });
    // No new claims during the sync, with the seed's cause (the client asks again later).
    const refused = await e.as("client").claimEpisode({ client_uuid: "c4", discard_episode_timeout: 60 });
    expect(refused.success).toBe(false);
    expect(refused.fail_cause).toBe(notReadyCause("ENGINE.WEIGHT_SYNCING"));
    // The rollout whose call was in flight finishes during the sync: its result is taken.
    expect(await e.as("client").endEpisode(endBody("c1", inFlight.episode, 1))).toEqual({ success: true });
    // A sync longer than the leases reaps nothing: their clients could not go on.
    await advance(e, 120_000);
    expect(await engineStats(e)).toMatchObject({ claimed: 2 });
    await status(e, "ENGINE.ROLLING", 8);
    // The leases got the sync's 120 s back: 50 s were left of them when it began.
    const running = (await e.as("viewer").runningEpisodes()).episodes;
    expect(running.map((r) => [r.client_uuid, r.expires_in])).toEqual([
      ["c2", 50],
      ["c3", 50],
    ]);
    // The held call goes on to the new weights, and says so.
    expect(await e.stub.relayBeginOrHold(other.key)).toMatchObject({ ok: true, body: { weight_version: 8, client_uuid: "c3" } });
    // The idle claim's lease still runs out, 50 s on.
    await advance(e, 50_000);
    expect(await e.stub.relayBeginOrHold(idle.key)).toMatchObject({ ok: false, status: 401, error: "claim_not_live" });
    expect((await e.as("viewer").runningEpisodes()).episodes.map((r) => r.client_uuid)).toEqual(["c3"]);
  });

  it("gives an episode aborted during the sync back to the queue, and clears everything if the sync ends the engine", async () => {
    const e = await rolling(true);
    const c = await claim(e, "c1");
    await status(e, "ENGINE.WEIGHT_SYNCING");
    expect(await e.as("client").abortEpisode(endBody("c1", c.episode, 0, ""))).toEqual({ success: true });
    expect(await engineStats(e)).toMatchObject({ registered: 3, claimed: 0 });
    await status(e, "ENGINE.OFFLINE");
    expect(await engineStats(e)).toMatchObject({ registered: 0, claimed: 0 });
  });

  it("ends the batch at each sync: the pool lists the claims ended since, live claims stay, and every step's rewards are counted", async () => {
    const e = await createEngine("sync");
    await e.as("operator").configureSync({ keep_claims_across_sync: true });
    const trainer = e.as("trainer");
    const client = e.as("client");
    const n = 3;
    for (let step = 0; step < 3; step++) {
      await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: step });
      for (let i = 0; i < n; i++) {
        await trainer.registerEpisode({ episode_uuid: `s${step}-ep${i}`, openai_base_url: "", openai_api_key: "", zmq_listen_result_addr: "" });
        const c = await client.claimEpisode({ client_uuid: `c${i}`, discard_episode_timeout: 600, throttle_policy: { current_task_id: `task-${step}-${i}`, ratio: 1.5 } });
        // The last claim of each step is still running when its sync begins.
        if (i < n - 1) expect(await client.endEpisode(endBody(`c${i}`, c.episode_uuid, step, `task-${step}-${i}`))).toEqual({ success: true });
      }
      expect(Object.keys((await e.as("viewer").getPoolInfo()).completed_tasks_client_uuids)).toHaveLength(step === 0 ? n - 1 : n);
      await trainer.updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING", global_step: step + 1 });
      expect((await e.as("viewer").getPoolInfo()).completed_tasks_client_uuids).toEqual({});
      expect(await engineStats(e)).toMatchObject({ claimed: 1 });
      // It ends during the sync, in the next batch.
      expect(await client.endEpisode(endBody(`c${n - 1}`, `s${step}-ep${n - 1}`, step + 1, `task-${step}-${n - 1}`))).toEqual({ success: true });
    }
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 3 });
    expect(Object.keys((await e.as("viewer").getPoolInfo()).completed_tasks_client_uuids)).toEqual(["task-2-2"]);
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 4 });
    expect((await e.as("viewer").getRewardHistory()).history.map((h) => [h.global_step, h.count])).toEqual([
      [0, 2],
      [1, 3],
      [2, 3],
      [3, 1],
    ]);
  });

  it("answers an end sent again after the sync began as the repeat it is, counted once, for a while and until the engine stops", async () => {
    const e = await createEngine("resend");
    await e.as("operator").configureSync({ keep_claims_across_sync: true });
    const [id, late] = await rollingWith(e, 2);
    const client = e.as("client");
    const trainer = e.as("trainer");
    const c = await client.claimEpisode({ client_uuid: "c", discard_episode_timeout: 60, throttle_policy: { current_task_id: "task-1" } });
    expect(c.episode_uuid).toBe(id);
    // The first end is stored; its answer is lost on the way back to the client.
    expect(await client.endEpisode(endBody("c", id!, 1))).toEqual({ success: true });
    expect((await e.as("viewer").getPoolInfo()).completed_tasks_client_uuids).toEqual({ "task-1": ["c"] });
    await status(e, "ENGINE.WEIGHT_SYNCING");
    // The sync ended the batch: the pool no longer lists the end.
    expect((await e.as("viewer").getPoolInfo()).completed_tasks_client_uuids).toEqual({});
    // The client sends it again, as AgentJet's client does on a lost answer (it raises on anything but 2xx); with our fence too.
    const answer = async (extra: Record<string, unknown> = {}) => {
      const r = await raw(`/e/${e.name}/end_episode`, { token: e.tokens.client, body: JSON.stringify(endBody("c", id!, 1, "task-1", extra)) });
      return { status: r.status, body: r.json };
    };
    const repeat = { status: 200, body: { success: true } };
    expect(await answer()).toEqual(repeat);
    expect(await answer({ fence: c.fence })).toEqual(repeat);
    expect(await engineStats(e)).toMatchObject({ registered: 1, claimed: 0 });
    // Counted once, toward the step it ended in.
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
    expect((await e.as("viewer").getRewardHistory()).history.map((h) => [h.global_step, h.count])).toEqual([[0, 1]]);
    expect((await e.as("viewer").getPoolInfo()).completed_tasks_client_uuids).toEqual({});
    // Still known through the next sync; a sync SYNCED_END_MEMORY_MS later forgets it (and the engine stopping, everything).
    await status(e, "ENGINE.WEIGHT_SYNCING");
    expect(await answer()).toEqual(repeat);
    await status(e, "ENGINE.ROLLING");
    const d = await client.claimEpisode({ client_uuid: "d", discard_episode_timeout: 60 });
    expect(d.episode_uuid).toBe(late);
    expect(await client.endEpisode(endBody("d", late!, 0))).toEqual({ success: true });
    await advance(e, SYNCED_END_MEMORY_MS + 1);
    await status(e, "ENGINE.WEIGHT_SYNCING");
    expect(await answer()).toEqual({ status: 404, body: expect.objectContaining({ error: "unknown_episode" }) });
    const remembered = () => runInDurableObject(e.stub, (_i, state) => state.storage.sql.exec<{ episode_uuid: string }>("SELECT episode_uuid FROM ends_before_sync").toArray());
    expect(await remembered()).toEqual([{ episode_uuid: late }]);
    await status(e, "ENGINE.OFFLINE");
    expect(await remembered()).toEqual([]);
  });

  it("counts an ended episode whose result is on its way to its runner as claimed through syncs, until the agent acks it", async () => {
    const e = await createEngine("deliv");
    await e.as("operator").configureSync({ keep_claims_across_sync: true });
    const [id] = await rollingWith(e, 1, { zmq: true });
    const trainer = e.as("trainer");
    expect(await e.as("client").claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 })).toMatchObject({ episode_uuid: id });
    expect(await e.as("client").endEpisode(endBody("c", id!, 1))).toEqual({ success: true });
    await status(e, "ENGINE.WEIGHT_SYNCING");
    // Even a sync long after, which forgets older ends, keeps one whose result has not reached its runner.
    await advance(e, SYNCED_END_MEMORY_MS + 1);
    await status(e, "ENGINE.ROLLING");
    await status(e, "ENGINE.WEIGHT_SYNCING");
    expect(await trainer.isEpisodeClaimed({ episode_uuid: id!, unregister_if_not_claimed: true })).toMatchObject({ success: true });
    // The overview still counts it as on its way, though the syncs ended its batch.
    expect((await e.as("viewer").overview()).deliveries).toEqual({ pending: 1, delivered: 0, undeliverable: 0 });
    const { commands } = await trainer.pollCommands();
    expect(commands.map((c) => c.body)).toEqual([expect.objectContaining({ kind: "deliver", episode_uuid: id })]);
    await trainer.ackCommand({ seq: commands[0]!.seq, ok: true, detail: "runner acked" });
    expect(await trainer.isEpisodeClaimed({ episode_uuid: id!, unregister_if_not_claimed: true })).toMatchObject({ success: false });
    // Delivered once it is: what the overview counts is the pending deliveries, not the batch's.
    expect((await e.as("viewer").overview()).deliveries.pending).toBe(0);
  });

  it("refuses to turn the option over during a sync, and bad values, changing nothing", async () => {
    const e = await rolling(true);
    await status(e, "ENGINE.WEIGHT_SYNCING");
    await expect(e.as("operator").configureSync({ keep_claims_across_sync: false })).rejects.toMatchObject({ status: 409, code: "engine_syncing" });
    // The hold may change during a sync.
    expect(await e.as("operator").configureSync({ sync_hold_seconds: 60 })).toEqual({ keep_claims_across_sync: true, sync_hold_seconds: 60 });
    for (const [body, code] of [
      [{ sync_hold_seconds: -1 }, 422],
      [{ sync_hold_seconds: 601 }, 422],
      [{ keep_claims_across_sync: "yes" }, 422],
      [{ unknown_field: true }, 422],
    ] as const) {
      expect((await raw(`/e/${e.name}/sync/config`, { token: e.tokens.operator, body: JSON.stringify(body) })).status, JSON.stringify(body)).toBe(code);
    }
    for (const role of ["viewer", "client", "trainer"] as const) {
      expect((await raw(`/e/${e.name}/sync/config`, { token: e.tokens[role], body: JSON.stringify({ sync_hold_seconds: 5 }) })).status).toBe(403);
    }
    expect((await raw(`/e/${e.name}/sync/config`, { body: JSON.stringify({ sync_hold_seconds: 5 }) })).status).toBe(401);
    expect(await e.as("viewer").syncConfig()).toEqual({ keep_claims_across_sync: true, sync_hold_seconds: 60 });
  });
});
