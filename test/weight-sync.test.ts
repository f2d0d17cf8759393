/**
 * Carrying rollouts on through weight syncs (keep_claims_across_sync, protocol/sync.ts): the
 * engine's side. Off, leaving ENGINE.ROLLING clears the pool as AgentJet expects; on, claims and
 * their leases survive ENGINE.WEIGHT_SYNCING and a relayed call of a live claim is answered
 * "hold" until the sync ends, then admitted on the new weights' version.
 */
import { describe, expect, it } from "vitest";
import { runInDurableObject } from "cloudflare:test";
import { EngineStore } from "../src/engine/engine-store";
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
  if (keep) expect(await e.as("operator").configureSync({ keep_claims_across_sync: true, sync_hold_seconds: 30 })).toEqual({ keep_claims_across_sync: true, sync_hold_seconds: 30, max_sync_seconds: 600 });
  await rollingWith(e, 3);
  await withGateway(e);
  await status(e, "ENGINE.ROLLING", 7);
  return e;
}

describe("weight syncs without keep_claims_across_sync (the default)", () => {
  it("refuses, without a fence, the end of a claim cleared with the rolling phase, though its client ended an earlier claim of the episode", async () => {
    const e = await createEngine("cleared-claim");
    await rollingWith(e, 1, { step: 1 });
    const client = e.as("client");
    // An eval episode serves again after its end: the same client ends one claim, then claims it again.
    const first = await client.claimEpisode({ client_uuid: "c", episode_type: "eval", discard_episode_timeout: 60 });
    expect(await client.endEpisode(endBody("c", first.episode_uuid, 0.3))).toEqual({ success: true });
    const second = await client.claimEpisode({ client_uuid: "c", episode_type: "eval", discard_episode_timeout: 60 });
    expect(second).toMatchObject({ success: true, episode_uuid: first.episode_uuid, fence: (first.fence ?? 0) + 1 });
    // The trainer leaves ROLLING while the second claim runs: the claim goes with the phase, unended.
    await status(e, "ENGINE.WEIGHT_SYNCING");
    await expect(client.endEpisode(endBody("c", first.episode_uuid, 0.9))).rejects.toMatchObject({ status: 400, code: "engine_not_rolling" });
    await expect(client.endEpisode({ ...endBody("c", first.episode_uuid, 0.9), fence: second.fence })).rejects.toMatchObject({ status: 400, code: "engine_not_rolling" });
    // The first claim's end, sent again with its fence, is still its repeat; the cleared claim is not claimed.
    expect(await client.endEpisode({ ...endBody("c", first.episode_uuid, 0.3), fence: first.fence })).toEqual({ success: true });
    expect(await e.as("trainer").isEpisodeClaimed({ episode_uuid: first.episode_uuid })).toMatchObject({ success: false });
  });

  it("answers an end sent again after the trainer left ROLLING (the batch's last end, its answer lost) as the repeat it is, during the sync and after", async () => {
    const e = await createEngine("resend-default");
    await rollingWith(e, 1, { step: 1 });
    const client = e.as("client");
    const c = await client.claimEpisode({ client_uuid: "c1", discard_episode_timeout: 60 });
    const body = endBody("c1", c.episode_uuid, 1);
    expect(await client.endEpisode(body)).toEqual({ success: true });
    await status(e, "ENGINE.WEIGHT_SYNCING");
    expect(await client.endEpisode(body)).toEqual({ success: true });
    expect(await client.endEpisode({ ...body, fence: c.fence })).toEqual({ success: true });
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 2 });
    expect(await client.endEpisode(body)).toEqual({ success: true });
    expect((await e.as("viewer").getRewardHistory()).history.map((h) => [h.global_step, h.count])).toEqual([[1, 1]]);
    // Not a repeat: another client's end, or one during the sync of a claim that never ended, is still refused.
    await expect(client.endEpisode(endBody("c2", c.episode_uuid, 1))).rejects.toMatchObject({ status: 404 });
    await status(e, "ENGINE.WEIGHT_SYNCING");
    await expect(client.endEpisode(endBody("c1", "never-claimed", 1))).rejects.toMatchObject({ status: 400, code: "engine_not_rolling" });
    // Stopping the engine forgets them all.
    await e.as("operator").stopEngine();
    const remembered = await runInDurableObject(e.stub, (_i, state) => state.storage.sql.exec("SELECT 1 FROM ends_before_sync").toArray().length);
    expect(remembered).toBe(0);
  });

  it("forgets the batch's ends when the trainer goes OFFLINE from a weight sync, as from ROLLING: its end sent again after a restart is unknown", async () => {
    const endAgainAfter = async (path: ("ENGINE.WEIGHT_SYNCING" | "ENGINE.OFFLINE" | "ENGINE.ROLLING")[]) => {
      const e = await createEngine("sync-offline-ends");
      await rollingWith(e, 1);
      const c = await e.as("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 600 });
      const body = { ...endBody("c1", c.episode_uuid, 1), fence: c.fence };
      expect(await e.as("client").endEpisode(body)).toEqual({ success: true });
      for (const s of path) await status(e, s);
      return (await raw(`/e/${e.name}/end_episode`, { token: e.tokens.client, body: JSON.stringify(body) })).status;
    };
    expect(await endAgainAfter(["ENGINE.OFFLINE", "ENGINE.ROLLING"])).toBe(404);
    expect(await endAgainAfter(["ENGINE.WEIGHT_SYNCING", "ENGINE.OFFLINE", "ENGINE.ROLLING"])).toBe(404);
  });

  it("clears the pool when the engine leaves ROLLING, as AgentJet's SwarmClient relies on", async () => {
    const e = await rolling(false);
    expect(await e.as("viewer").syncConfig()).toEqual({ keep_claims_across_sync: false, sync_hold_seconds: 120, max_sync_seconds: 600 });
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

  it("remembers an abort, for its repeat, only while its episode is: a sync forgets those of ended episodes, the engine stopping all", async () => {
    const e = await createEngine("aborts");
    await e.as("operator").configureSync({ keep_claims_across_sync: true });
    const [id, other] = await rollingWith(e, 2);
    const client = e.as("client");
    const a = await client.claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 });
    expect(a.episode_uuid).toBe(id);
    const abort = { client_uuid: "c", episode_uuid: id!, fence: a.fence };
    expect(await client.abortEpisode(abort)).toEqual({ success: true });
    const b = await client.claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 });
    expect(await client.abortEpisode({ client_uuid: "c", episode_uuid: other!, fence: b.fence })).toEqual({ success: true });
    const kept = () => runInDurableObject(e.stub, (_i, state) => state.storage.sql.exec<{ episode_uuid: string }>("SELECT episode_uuid FROM aborts ORDER BY episode_uuid").toArray().map((r) => r.episode_uuid));
    expect(await kept()).toEqual([id, other].sort());
    // The aborted episode is claimed again and ended: its row goes, its abort stays until the sync.
    const again = await client.claimEpisode({ client_uuid: "d", discard_episode_timeout: 60 });
    expect(again.episode_uuid).toBe(id);
    expect(await client.endEpisode(endBody("d", id!, 1))).toEqual({ success: true });
    expect(await kept()).toEqual([id, other].sort());
    await status(e, "ENGINE.WEIGHT_SYNCING");
    expect(await kept()).toEqual([other]);
    // A repeat of the abort whose episode ended is answered as one of an episode gone, and the kept one still as its repeat.
    expect(await client.abortEpisode(abort)).toEqual({ success: true });
    expect(await client.abortEpisode({ client_uuid: "c", episode_uuid: other!, fence: b.fence })).toEqual({ success: true });
    await status(e, "ENGINE.OFFLINE");
    expect(await kept()).toEqual([]);
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
    expect(await e.as("operator").configureSync({ sync_hold_seconds: 60 })).toEqual({ keep_claims_across_sync: true, sync_hold_seconds: 60, max_sync_seconds: 600 });
    for (const [body, code] of [
      [{ sync_hold_seconds: -1 }, 422],
      [{ sync_hold_seconds: 601 }, 422],
      [{ max_sync_seconds: 9 }, 422],
      [{ max_sync_seconds: 86_401 }, 422],
      [{ max_sync_seconds: "600" }, 422],
      [{ max_sync_seconds: null }, 422],
      [{ keep_claims_across_sync: "yes" }, 422],
      [{ unknown_field: true }, 422],
    ] as const) {
      expect((await raw(`/e/${e.name}/sync/config`, { token: e.tokens.operator, body: JSON.stringify(body) })).status, JSON.stringify(body)).toBe(code);
    }
    for (const role of ["viewer", "client", "trainer"] as const) {
      expect((await raw(`/e/${e.name}/sync/config`, { token: e.tokens[role], body: JSON.stringify({ sync_hold_seconds: 5 }) })).status).toBe(403);
    }
    expect((await raw(`/e/${e.name}/sync/config`, { body: JSON.stringify({ sync_hold_seconds: 5 }) })).status).toBe(401);
    expect(await e.as("viewer").syncConfig()).toEqual({ keep_claims_across_sync: true, sync_hold_seconds: 60, max_sync_seconds: 600 });
  });
});

const leases = async (e: TestEngine) => (await e.as("viewer").runningEpisodes()).episodes.map((r) => [r.client_uuid, r.expires_in]);

describe("how long a weight sync has lasted", () => {
  it.each([false, true])("says since when the engine has been ENGINE.WEIGHT_SYNCING, through repeated reports, keep_claims_across_sync %s", async (keep) => {
    const e = await rolling(keep);
    const rolledAt = e.clock.t;
    expect(await e.as("viewer").overview()).toMatchObject({ engine_status: "ENGINE.ROLLING", engine_status_since: rolledAt });
    await advance(e, 5_000);
    const syncStart = e.clock.t;
    await status(e, "ENGINE.WEIGHT_SYNCING");
    // The trainer says it again (a retried report): the sync began when it first said so.
    await advance(e, 60_000);
    await status(e, "ENGINE.WEIGHT_SYNCING");
    // An hour later, the trainer still has not said ROLLING: a hang, not a one-second sync.
    await advance(e, 3_600_000);
    expect(await e.as("viewer").overview()).toMatchObject({ engine_status: "ENGINE.WEIGHT_SYNCING", engine_status_since: syncStart });
    await status(e, "ENGINE.ROLLING");
    expect(await e.as("viewer").overview()).toMatchObject({ engine_status: "ENGINE.ROLLING", engine_status_since: e.clock.t });
  });
});

describe("leases through a weight sync that keeps claims (max_sync_seconds)", () => {
  it("reaps a claim once its lease and max_sync_seconds have run out, though the trainer hangs in ENGINE.WEIGHT_SYNCING for a day", async () => {
    const e = await rolling(true);
    const c = await claim(e, "c1", 60);
    await status(e, "ENGINE.WEIGHT_SYNCING");
    // The trainer hangs in its sync (an NCCL hang, say): it never reports again, the process does not exit.
    await advance(e, 24 * 3600_000);
    expect(await e.as("client").canContinueEpisode({ client_uuid: "c1", episode_uuid: c.episode })).toEqual({ can_continue: false });
    expect(await engineStats(e)).toMatchObject({ claimed: 0, registered: 3 });
    // Its key is dead, not held; the status stays the trainer's, so no new claim is handed out.
    expect(await e.stub.relayBeginOrHold(c.key)).toMatchObject({ ok: false, status: 401, error: "claim_not_live" });
    expect(await e.as("viewer").getEngineStatus()).toMatchObject({ engine_status: "ENGINE.WEIGHT_SYNCING" });
    expect((await e.as("client").claimEpisode({ client_uuid: "c2", discard_episode_timeout: 60 })).fail_cause).toBe(notReadyCause("ENGINE.WEIGHT_SYNCING"));
  });

  it("arms the alarm for a lease's expiry plus max_sync_seconds, reaps then and not before, and follows a bound changed during the sync", async () => {
    const e = await rolling(true);
    const t0 = e.clock.t;
    await claim(e, "c1", 60);
    await claim(e, "c2", 120);
    await status(e, "ENGINE.WEIGHT_SYNCING");
    // The alarm set for c1's lease fires and reaps nothing: the sync froze it.
    await advance(e, 60_000);
    expect(await engineStats(e)).toMatchObject({ claimed: 2, alarm_at: t0 + 60_000 + 600_000 });
    await advance(e, 600_000 - 1);
    expect(await engineStats(e)).toMatchObject({ claimed: 2 });
    await advance(e, 1);
    expect(await leases(e)).toEqual([["c2", -540]]);
    // A shorter bound set during the sync takes effect at once: c2 is due 120 s + 60 s after it was claimed.
    expect(await e.as("operator").configureSync({ max_sync_seconds: 60 })).toMatchObject({ max_sync_seconds: 60 });
    expect(await engineStats(e)).toMatchObject({ claimed: 1, alarm_at: t0 + 180_000 });
    await advance(e, 0);
    expect(await engineStats(e)).toMatchObject({ claimed: 0, registered: 3 });
  });

  it("takes max_sync_seconds' default for a sync config stored before the field existed", async () => {
    const e = await rolling(true);
    const sync = await runInDurableObject(e.stub, (_i, state) => {
      const sql = state.storage.sql;
      sql.exec("UPDATE kv SET v = json_remove(v, '$.sync.max_sync_seconds') WHERE k = 'meta'");
      return new EngineStore(sql, Date.now).meta.sync;
    });
    expect(sync).toEqual({ keep_claims_across_sync: true, sync_hold_seconds: 30, max_sync_seconds: 600 });
  });

  it("gives a lease at most max_sync_seconds back after a longer sync", async () => {
    const e = await rolling(true);
    await claim(e, "c1", 3600);
    await status(e, "ENGINE.WEIGHT_SYNCING");
    await advance(e, 1000_000);
    await status(e, "ENGINE.ROLLING", 8);
    // 3600 s left when the sync began, 1000 s of sync, of which 600 given back.
    expect(await leases(e)).toEqual([["c1", 3200]]);
  });

  it("gives a lease with 10 s left before a 60 s sync exactly 10 s after it", async () => {
    const e = await rolling(true);
    await claim(e, "c1", 60);
    await advance(e, 50_000);
    await status(e, "ENGINE.WEIGHT_SYNCING");
    await advance(e, 60_000);
    await status(e, "ENGINE.ROLLING", 8);
    expect(await leases(e)).toEqual([["c1", 10]]);
    await advance(e, 10_000);
    expect(await engineStats(e)).toMatchObject({ claimed: 0 });
  });

  it("gives a lease refreshed during the sync (a call the Worker's claim gate counted then) its discard_episode_timeout after the sync, no more", async () => {
    const e = await rolling(true);
    const c = await claim(e, "c1", 60);
    await advance(e, 50_000);
    await status(e, "ENGINE.WEIGHT_SYNCING");
    // The Worker's claim gate served a call from its cache (fresh for up to FRESH_MS) after the sync
    // began, and reports it in its next batch: activity during the sync, 20 s in here to make it plain.
    await advance(e, 20_000);
    const r = await e.stub.relaySync([{ key: c.key, calls: 1, idle_ms: 0, detail: false, carries: false, batch: { gate: "g1", seq: 1, settled: 1 } }]);
    expect(r.ok).toBe(true);
    await advance(e, 40_000);
    await status(e, "ENGINE.ROLLING", 8);
    // Its lease, set to 60 s after the call, does not get the sync's 60 s on top: 60 s from the sync's end.
    expect(await leases(e)).toEqual([["c1", 60]]);
  });
});

/** One finished session of group g1, rolled out on weights `version`. */
const finishedAt = (version: number) => ({
  steps: [{ session_id: "s1", group_id: "g1", step_index: 0, messages: [{ role: "user" as const, content: "q" }], response: "a", reward: 1, is_session_completed: true, weight_version: version }],
});

async function buffered(): Promise<TestEngine> {
  const e = await createEngine("ver");
  await e.as("trainer").startRollout({ num_repeat_per_sample: 1, job_session: "job-1" });
  return e;
}

describe("weight versions", () => {
  it("keeps the version served when the trainer goes OFFLINE mid-sync, as stop_engine mid-sync does: the sync's target was never served", async () => {
    const syncingTo8 = async () => {
      const e = await createEngine("sync-offline-version");
      await e.as("trainer").startRollout({ num_repeat_per_sample: 1, job_session: "job-1" });
      await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 3, weight_version: 7 });
      await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING", weight_version: 8 });
      return e;
    };
    const version = async (e: TestEngine) => (await e.as("trainer").getRolloutData()).data.meta_info.consumer_weight_version;
    const stopped = await syncingTo8();
    await stopped.as("operator").stopEngine();
    const exited = await syncingTo8();
    await status(exited, "ENGINE.OFFLINE");
    expect([await version(stopped), await version(exited)]).toEqual([7, 7]);
  });

  it("names the weights being replaced in a hold when the trainer reports the new version with ENGINE.WEIGHT_SYNCING, and takes that version when the sync ends", async () => {
    const e = await rolling(true);
    const c = await claim(e, "c1", 60);
    // "Syncing to version 8": the trainer sends the target version with the status that begins the sync.
    await status(e, "ENGINE.WEIGHT_SYNCING", 8);
    expect(await e.stub.relayBeginOrHold(c.key)).toMatchObject({ ok: true, body: { hold: "weight_syncing", weight_version_before: 7 } });
    // The status that ends the sync need not say it again.
    await status(e, "ENGINE.ROLLING");
    expect(await e.stub.relayBeginOrHold(c.key)).toMatchObject({ ok: true, body: { weight_version: 8 } });
  });

  it("names the weights being replaced in a hold when the new version comes with the status that ends the sync", async () => {
    const e = await rolling(true);
    const c = await claim(e, "c1", 60);
    await status(e, "ENGINE.WEIGHT_SYNCING");
    expect(await e.stub.relayBeginOrHold(c.key)).toMatchObject({ ok: true, body: { hold: "weight_syncing", weight_version_before: 7 } });
    await status(e, "ENGINE.ROLLING", 8);
    expect(await e.stub.relayBeginOrHold(c.key)).toMatchObject({ ok: true, body: { weight_version: 8 } });
  });

  it("refuses a weight_version lower than the one taken earlier in the run (a late, retried status report), changing nothing", async () => {
    const e = await buffered();
    const trainer = e.as("trainer");
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 5, weight_version: 5 });
    await e.as("client").postSteps(finishedAt(5));
    // An earlier report, retried after a timeout, arrives late: same run, same step, older version.
    const late = await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 5, weight_version: 3 });
    expect(late).toEqual({ success: false, failure_reason: expect.stringContaining("weight_version 3 is lower than the engine's 5") });
    // Nothing of a refused report is applied, its status, step and detail included.
    expect(await trainer.updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING", global_step: 6, engine_status_detail: "late", weight_version: 4 })).toMatchObject({ success: false });
    expect(await e.as("viewer").getEngineStatus()).toEqual({ engine_status: "ENGINE.ROLLING", engine_status_detail: null, global_step: 5 });
    const pulled = await trainer.getRolloutData();
    expect({ consumer: pulled.data.meta_info.consumer_weight_version, lag: pulled.data.meta_info.groups[0]?.lag_versions }).toEqual({ consumer: 5, lag: 0 });
  });

  it("refuses a sync report naming a lower target than the sync under way (the last sync's, retried), and the sync still ends at its own target", async () => {
    // Taken, the late "syncing to 5" replaced the target 6: the sync ended at 5 while 6 was served,
    // and every claim, row and pull after it was stamped one version behind.
    const e = await buffered();
    const trainer = e.as("trainer");
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 5, weight_version: 5 });
    await trainer.updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING", global_step: 5, weight_version: 6 });
    const late = await trainer.updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING", global_step: 5, weight_version: 5 });
    expect(late).toEqual({ success: false, failure_reason: expect.stringContaining("weight_version 5 is lower than 6, the version the weight sync under way goes to") });
    // The status that ends the sync need not name the version again.
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 6 });
    expect((await trainer.getRolloutData()).data.meta_info.consumer_weight_version).toBe(6);
  });

  it("takes a lower version with the status that ends a sync: the sync was abandoned, its target never served", async () => {
    const e = await buffered();
    const trainer = e.as("trainer");
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 5 });
    await trainer.updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING", weight_version: 6 });
    expect(await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 5 })).toEqual({ success: true, failure_reason: "" });
    expect((await trainer.getRolloutData()).data.meta_info.consumer_weight_version).toBe(5);
  });

  it("takes a lower weight_version once a new run began (a restarted trainer)", async () => {
    const e = await buffered();
    const trainer = e.as("trainer");
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 5 });
    await trainer.updateEngineStatus({ engine_status: "ENGINE.OFFLINE" });
    expect(await trainer.updateEngineStatus({ engine_status: "ENGINE.BOOTING", weight_version: 0 })).toEqual({ success: true, failure_reason: "" });
    await e.as("client").postSteps(finishedAt(0));
    expect((await trainer.getRolloutData()).data.meta_info.consumer_weight_version).toBe(0);
  });

  it("takes a trainer booted again mid-sync at its own version: the dead trainer's sync target is no floor of the new run", async () => {
    const e = await createEngine();
    const trainer = e.as("trainer");
    expect(await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 3, weight_version: 7 })).toMatchObject({ success: true });
    expect(await trainer.updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING", weight_version: 8 })).toMatchObject({ success: true });
    // The trainer dies in its sync and is booted again (a new run) from its checkpoint at version 7.
    expect(await trainer.updateEngineStatus({ engine_status: "ENGINE.BOOTING" })).toMatchObject({ success: true });
    expect(await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 3, weight_version: 7 })).toEqual({ success: true, failure_reason: "" });
    expect(await e.as("viewer").getEngineStatus()).toMatchObject({ engine_status: "ENGINE.ROLLING" });
  });
});
