import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { EngineObject } from "../src/engine/engine-object";
import { advance, claimKeyFields, createEngine, endBody, engineStats, ORIGIN, rollingWith, type TestEngine } from "./support/harness";

/** The trainer registers episode `id` again, as AgentJet never does (its uuids are fresh) but nothing forbids. */
const registerAgain = (e: TestEngine, id: string) =>
  e.as("trainer").registerEpisode({ episode_uuid: id, openai_base_url: "http://trainer.internal:8000/v1", openai_api_key: "sk-2", zmq_listen_result_addr: "" });

/** The finished rows of `id`, by fence. */
const finishedRows = (e: TestEngine, id: string) =>
  runInDurableObject(e.stub, (_i: EngineObject, state) =>
    state.storage.sql
      .exec<{ fence: number; reward: number | null; task_id: string }>("SELECT fence, reward, task_id FROM finished WHERE episode_uuid = ? ORDER BY fence", id)
      .toArray()
      .map((r) => ({ ...r })),
  );

/** A registration of `id` by a runner other than the one rollingWith's { zmq: true } registered it from. */
const NEW_RUNNER = { openai_base_url: "http://trainer.internal:9000/v1", openai_api_key: "sk-ajet-new", zmq_listen_result_addr: "tcp://10.0.0.2:30000" };

/** `id`, claimed by "c" and aborted: it waits for its runner's reset. */
async function resetting(e: TestEngine, id: string): Promise<void> {
  await e.as("client").claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 });
  expect(await e.as("client").abortEpisode({ client_uuid: "c", episode_uuid: id })).toEqual({ success: true });
  expect(await engineStats(e)).toMatchObject({ resetting: 1, registered: 0 });
}

/** The reset the agent is asked for, after checking that it goes to the runner the episode was claimed from. */
async function resetCommand(e: TestEngine, id: string): Promise<number> {
  const { commands } = await e.as("trainer").pollCommands();
  expect(commands).toEqual([expect.objectContaining({ body: { kind: "reset", episode_uuid: id, fence: 1, zmq_listen_result_addr: "tcp://10.0.0.1:20000" } })]);
  return commands[0]!.seq;
}

describe("leases", () => {
  it("reaps an idle claim when its discard timeout passes, not before", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const client = e.as("client");
    const c = await client.claimEpisode({ client_uuid: "slow", discard_episode_timeout: 60 });
    expect((await engineStats(e)).alarm_at).toBe(e.clock.t + 60_000);
    await advance(e, 59_000);
    expect(await client.canContinueEpisode({ client_uuid: "slow", episode_uuid: c.episode_uuid })).toEqual({ can_continue: true });
    await advance(e, 1_000);
    expect(await client.canContinueEpisode({ client_uuid: "slow", episode_uuid: c.episode_uuid })).toEqual({ can_continue: false });
    expect(await engineStats(e)).toMatchObject({ registered: 1, claimed: 0 });
    const again = await client.claimEpisode({ client_uuid: "fast", discard_episode_timeout: 60 });
    expect(again).toMatchObject({ success: true, episode_uuid: c.episode_uuid, fence: 2 });
  });

  it("keeps one alarm at the earliest deadline as claims come and go", async () => {
    const e = await createEngine();
    await rollingWith(e, 3);
    const client = e.as("client");
    const t0 = e.clock.t;
    await client.claimEpisode({ client_uuid: "a", discard_episode_timeout: 300 });
    expect((await engineStats(e)).alarm_at).toBe(t0 + 300_000);
    await client.claimEpisode({ client_uuid: "b", discard_episode_timeout: 30 });
    expect((await engineStats(e)).alarm_at).toBe(t0 + 30_000);
    await client.claimEpisode({ client_uuid: "c", discard_episode_timeout: 120 });
    expect((await engineStats(e)).alarm_at).toBe(t0 + 30_000);
    // b expires; the alarm re-arms at the next lease (c at 120 s), then at a's.
    await advance(e, 30_000);
    expect(await engineStats(e)).toMatchObject({ claimed: 2, registered: 1, alarm_at: t0 + 120_000 });
    await advance(e, 90_000);
    expect(await engineStats(e)).toMatchObject({ claimed: 1, registered: 2, alarm_at: t0 + 300_000 });
    await advance(e, 180_000);
    expect(await engineStats(e)).toMatchObject({ claimed: 0, registered: 3, alarm_at: null });
    expect(await runDurableObjectAlarm(e.stub)).toBe(false);
  });

  it("fences a late end from a reaped claim: refused, and counted nowhere", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const client = e.as("client");
    const first = await client.claimEpisode({ client_uuid: "late", discard_episode_timeout: 10 });
    await advance(e, 10_000);
    // Reaped and requeued: the late result is refused.
    await expect(client.endEpisode(endBody("late", first.episode_uuid, 1))).rejects.toMatchObject({ status: 409, code: "claim_lost" });
    // Claimed again by someone else: still refused for the old claimant.
    const second = await client.claimEpisode({ client_uuid: "new", discard_episode_timeout: 60 });
    expect(second.fence).toBe(2);
    await expect(client.endEpisode(endBody("late", first.episode_uuid, 1))).rejects.toMatchObject({ status: 409 });
    // The same client re-claiming it: its old fence is refused, the new one accepted.
    await client.abortEpisode({ client_uuid: "new", episode_uuid: second.episode_uuid });
    const third = await client.claimEpisode({ client_uuid: "late", discard_episode_timeout: 60 });
    expect(third.fence).toBe(3);
    await expect(client.endEpisode(endBody("late", first.episode_uuid, 1, "task-1", { fence: first.fence }))).rejects.toMatchObject({
      status: 409,
      detail: expect.stringContaining("superseded"),
    });
    expect(await client.endEpisode(endBody("late", third.episode_uuid, 0, "task-1", { fence: third.fence }))).toEqual({ success: true });
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
    expect((await e.as("viewer").getRewardHistory()).history).toEqual([expect.objectContaining({ global_step: 0, count: 1, mean_reward: 0 })]);
  });

  it("refuses a fenceless late end of a reaped claim although the same client ended an earlier claim of the episode", async () => {
    const e = await createEngine();
    const [id] = await rollingWith(e, 1);
    const client = e.as("client");
    // An eval episode serves again after its end, so the same client claiming it again is the ordinary case.
    const first = await client.claimEpisode({ client_uuid: "C", episode_type: "eval", discard_episode_timeout: 60 });
    expect(await client.endEpisode(endBody("C", id!, 1))).toEqual({ success: true });
    // A repeat of that end (AgentJet sends no fence) is still answered as the repeat it is.
    expect(await client.endEpisode(endBody("C", id!, 1))).toEqual({ success: true });
    const second = await client.claimEpisode({ client_uuid: "C", episode_type: "eval", discard_episode_timeout: 10 });
    expect(second).toMatchObject({ success: true, episode_uuid: id, fence: first.fence! + 1 });
    await advance(e, 10_000);
    expect(await client.canContinueEpisode({ client_uuid: "C", episode_uuid: id! })).toEqual({ can_continue: false });
    await expect(client.endEpisode(endBody("C", id!, 0.25))).rejects.toMatchObject({ status: 409, code: "claim_lost", detail: expect.stringContaining("not counted") });
    const fences = await runInDurableObject(e.stub, (_i: EngineObject, state) =>
      state.storage.sql.exec<{ fence: number }>("SELECT fence FROM finished WHERE episode_uuid = ? ORDER BY fence", id!).toArray().map((r) => r.fence),
    );
    expect(fences).toEqual([first.fence]);
  });

  it("refuses a fenceless late end of a reaped claim of a uuid registered again after the same client ended it", async () => {
    const e = await createEngine();
    const [id] = await rollingWith(e, 1);
    const client = e.as("client");
    await client.claimEpisode({ client_uuid: "C", discard_episode_timeout: 60 });
    expect(await client.endEpisode(endBody("C", id!, 1))).toEqual({ success: true });
    expect(await registerAgain(e, id!)).toMatchObject({ success: true });
    expect(await client.claimEpisode({ client_uuid: "C", discard_episode_timeout: 10 })).toMatchObject({ success: true, episode_uuid: id });
    await advance(e, 10_000);
    await expect(client.endEpisode(endBody("C", id!, 0.25))).rejects.toMatchObject({ status: 409, code: "claim_lost" });
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
    expect((await e.as("viewer").getRewardHistory()).history).toEqual([expect.objectContaining({ global_step: 0, count: 1, mean_reward: 1 })]);
  });

  it("a uuid registered again after it ended continues its fences: the new claim ends and counts, the old one stays fenced", async () => {
    const e = await createEngine();
    const [id] = await rollingWith(e, 1);
    const client = e.as("client");
    const trainer = e.as("trainer");
    const first = await client.claimEpisode({ client_uuid: "a", discard_episode_timeout: 60 });
    expect(await client.endEpisode(endBody("a", id!, 1, "task-1", { fence: first.fence }))).toEqual({ success: true });
    expect(await registerAgain(e, id!)).toMatchObject({ success: true });
    const second = await client.claimEpisode({ client_uuid: "a", discard_episode_timeout: 60 });
    // A fence is never reused for a uuid: the first claim's key and fence must not name this claim.
    expect(second).toMatchObject({ success: true, episode_uuid: id, fence: first.fence! + 1 });
    expect(second.openai_api_key).not.toBe(first.openai_api_key);
    expect(await client.endEpisode(endBody("a", id!, 0, "task-1", { fence: second.fence }))).toEqual({ success: true });
    // The first claim's fence is history now: a repeat of its end is answered as the repeat it is, and counted once.
    expect(await client.endEpisode(endBody("a", id!, 1, "task-1", { fence: first.fence }))).toEqual({ success: true });
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
    expect((await e.as("viewer").getRewardHistory()).history).toEqual([expect.objectContaining({ global_step: 0, count: 2, mean_reward: 0.5 })]);
  });

  it("a fenced repeat of a claim's end, sent after the same client claimed the uuid again, leaves the new claim live, and its own end is stored", async () => {
    const e = await createEngine();
    const [id] = await rollingWith(e, 1);
    const client = e.as("client");
    // Claim #1, ended with reward 1 on task t1 (its answer lost on the way, say).
    const first = await client.claimEpisode({ client_uuid: "C", discard_episode_timeout: 60 });
    const end1 = { workflow_output: { reward: 1, metadata: { task_id: "t1" } }, task_id: "t1" };
    expect(await client.endClaim(first, end1)).toEqual({ success: true });
    expect(await registerAgain(e, id!)).toMatchObject({ success: true });
    const second = await client.claimEpisode({ client_uuid: "C", discard_episode_timeout: 60 });
    expect(second).toMatchObject({ success: true, episode_uuid: id, fence: first.fence! + 1 });
    // C sends end #1 again, with its fence: the repeat it is, which does not touch claim #2.
    expect(await client.endClaim(first, end1)).toEqual({ success: true });
    expect(await client.canContinueEpisode({ client_uuid: "C", episode_uuid: id! })).toEqual({ can_continue: true });
    expect(await client.endClaim(second, { workflow_output: { reward: 0, metadata: { task_id: "t2" } }, task_id: "t2" })).toEqual({ success: true });
    expect(await finishedRows(e, id!)).toEqual([
      { fence: first.fence, reward: 1, task_id: "t1" },
      { fence: second.fence, reward: 0, task_id: "t2" },
    ]);
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
    expect((await e.as("viewer").getRewardHistory()).history).toEqual([expect.objectContaining({ global_step: 0, count: 2, mean_reward: 0.5 })]);
  });

  it("a fenced repeat of an eval claim's end, sent after the same client claimed the episode again, leaves the new claim live", async () => {
    const e = await createEngine();
    const [id] = await rollingWith(e, 1);
    const client = e.as("client");
    const first = await client.claimEpisode({ client_uuid: "C", episode_type: "eval", discard_episode_timeout: 60 });
    const end1 = endBody("C", id!, 1, "t1", { fence: first.fence });
    expect(await client.endEpisode(end1)).toEqual({ success: true });
    // An eval episode serves again after its end (as the seed does): the same client claims it again.
    const second = await client.claimEpisode({ client_uuid: "C", episode_type: "eval", discard_episode_timeout: 60 });
    expect(second).toMatchObject({ success: true, episode_uuid: id, fence: first.fence! + 1 });
    expect(await client.endEpisode(end1)).toEqual({ success: true });
    expect(await client.canContinueEpisode({ client_uuid: "C", episode_uuid: id! })).toEqual({ can_continue: true });
    expect(await client.endEpisode(endBody("C", id!, 0, "t2", { fence: second.fence }))).toEqual({ success: true });
    expect(await finishedRows(e, id!)).toEqual([
      { fence: first.fence, reward: 1, task_id: "t1" },
      { fence: second.fence, reward: 0, task_id: "t2" },
    ]);
  });

  it("a uuid registered again in a later rolling phase, or after it was unregistered, never reuses a fence", async () => {
    const e = await createEngine();
    const [id] = await rollingWith(e, 1);
    const client = e.as("client");
    const trainer = e.as("trainer");
    const first = await client.claimEpisode({ client_uuid: "a", discard_episode_timeout: 60 });
    expect(first.fence).toBe(1);
    // The step ends with the claim still open: leaving the rolling statuses clears every episode.
    for (const engine_status of ["ENGINE.ROLLING_POST", "ENGINE.WEIGHT_SYNCING", "ENGINE.ROLLING"] as const) await trainer.updateEngineStatus({ engine_status, global_step: 1 });
    await registerAgain(e, id!);
    const second = await client.claimEpisode({ client_uuid: "b", discard_episode_timeout: 60 });
    expect(second).toMatchObject({ success: true, episode_uuid: id, fence: 2 });
    // The old claim's key stays dead, and its late end (with its fence) counts nowhere.
    expect(await e.stub.relayBegin(await claimKeyFields(first.openai_api_key))).toMatchObject({ ok: false, status: 401, error: "claim_not_live" });
    await expect(client.endEpisode(endBody("a", id!, 1, "task-1", { fence: first.fence }))).rejects.toMatchObject({ status: 409 });
    // Given back, unregistered, registered again: above every fence issued so far.
    await client.abortEpisode({ client_uuid: "b", episode_uuid: id! });
    expect(await trainer.isEpisodeClaimed({ episode_uuid: id!, unregister_if_not_claimed: true })).toMatchObject({ success: false });
    expect(await engineStats(e)).toMatchObject({ registered: 0, claimed: 0 });
    await registerAgain(e, id!);
    expect(await client.claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 })).toMatchObject({ success: true, fence: 3 });
    // The floor is kept in the engine's meta for a restarted object, whose rows no longer hold fence 2.
    const floor = await runInDurableObject(e.stub, (_i, state) => JSON.parse(state.storage.sql.exec<{ v: string }>("SELECT v FROM kv WHERE k = 'meta'").one().v).fenceFloor);
    expect(floor).toBe(2);
    // A restarted object (a new instance over the same storage) starts above fence 3, which no row holds once its episode is unregistered.
    await client.abortEpisode({ client_uuid: "c", episode_uuid: id! });
    await trainer.isEpisodeClaimed({ episode_uuid: id!, unregister_if_not_claimed: true });
    const afterRestart = await runInDurableObject(e.stub, async (_i, state) => {
      const restarted = new EngineObject(state, env);
      const admin = { admin: true } as const;
      await restarted.registerEpisode(admin, { episode_uuid: id!, openai_base_url: "http://trainer.internal:8000/v1", openai_api_key: "sk-3", zmq_listen_result_addr: "" });
      return restarted.claimEpisode(admin, { client_uuid: "d", episode_type: "train", discard_episode_timeout: 60 }, ORIGIN);
    });
    expect(afterRestart).toMatchObject({ ok: true, body: { success: true, episode_uuid: id, fence: 4 } });
  });

  it("sends a reaped episode with a runner to reset, and requeues it only after the runner's ack", async () => {
    const e = await createEngine();
    await rollingWith(e, 1, { zmq: true });
    const client = e.as("client");
    const trainer = e.as("trainer");
    const c = await client.claimEpisode({ client_uuid: "c", discard_episode_timeout: 5 });
    await advance(e, 5_000);
    expect(await engineStats(e)).toMatchObject({ resetting: 1, registered: 0 });
    // Nobody can claim it while the runner resets, and the trainer still sees it as taken.
    expect((await client.claimEpisode({ client_uuid: "d", discard_episode_timeout: 60 })).success).toBe(false);
    expect(await trainer.isEpisodeClaimed({ episode_uuid: c.episode_uuid, unregister_if_not_claimed: true })).toMatchObject({ success: true });
    const { commands } = await trainer.pollCommands();
    expect(commands).toEqual([
      expect.objectContaining({ attempt: 1, body: { kind: "reset", episode_uuid: c.episode_uuid, fence: 1, zmq_listen_result_addr: "tcp://10.0.0.1:20000" } }),
    ]);
    await trainer.ackCommand({ seq: commands[0]!.seq, ok: true, detail: "runner acked" });
    expect(await engineStats(e)).toMatchObject({ resetting: 0, registered: 1 });
    expect(await client.claimEpisode({ client_uuid: "d", discard_episode_timeout: 60 })).toMatchObject({ success: true, fence: 2 });
  });

  it("a registration that arrives while the episode waits for its runner's reset is what the episode serves with once the reset is acked", async () => {
    const e = await createEngine();
    const [id] = await rollingWith(e, 1, { zmq: true });
    await resetting(e, id!);
    expect(await e.as("trainer").registerEpisode({ episode_uuid: id!, ...NEW_RUNNER })).toEqual({ success: true, failure_reason: "" });
    // The runner to reset is still the one the aborted claim ran against.
    const seq = await resetCommand(e, id!);
    expect(await engineStats(e)).toMatchObject({ resetting: 1, registered: 0 });
    await e.as("trainer").ackCommand({ seq, ok: true, detail: "runner acked" });
    const row = (await e.as("trainer").getEpisodeBuffer()).buffer.find((x) => x.episode_uuid === id);
    expect(row).toMatchObject({ episode_status: "registered", ...NEW_RUNNER });
    // Its next claim's result goes to the new runner.
    const c = await e.as("client").claimEpisode({ client_uuid: "d", discard_episode_timeout: 60 });
    expect(c).toMatchObject({ success: true, episode_uuid: id, fence: 2 });
    expect(await e.as("client").endEpisode(endBody("d", id!, 1, "task-1", { fence: c.fence }))).toEqual({ success: true });
    const { commands } = await e.as("trainer").pollCommands();
    expect(commands.map((x) => x.body)).toContainEqual(expect.objectContaining({ kind: "deliver", episode_uuid: id, fence: 2, zmq_listen_result_addr: NEW_RUNNER.zmq_listen_result_addr }));
  });

  it("keeps an episode registered again during its reset, with the new registration, although the old runner cannot be reset", async () => {
    const e = await createEngine();
    const [id] = await rollingWith(e, 1, { zmq: true });
    await resetting(e, id!);
    expect(await e.as("trainer").registerEpisode({ episode_uuid: id!, ...NEW_RUNNER })).toEqual({ success: true, failure_reason: "" });
    const seq = await resetCommand(e, id!);
    await e.as("trainer").ackCommand({ seq, ok: false, detail: "no ack from runner in 30 s" });
    // The registration was acknowledged: the episode is there to claim, from the new runner.
    expect(await engineStats(e)).toMatchObject({ resetting: 0, registered: 1 });
    const row = (await e.as("trainer").getEpisodeBuffer()).buffer.find((x) => x.episode_uuid === id);
    expect(row).toMatchObject({ episode_status: "registered", ...NEW_RUNNER });
    expect(await e.as("client").claimEpisode({ client_uuid: "d", discard_episode_timeout: 60 })).toMatchObject({ success: true, episode_uuid: id, fence: 2 });
  });

  it("drops an episode whose runner cannot be reset", async () => {
    const e = await createEngine();
    await rollingWith(e, 1, { zmq: true });
    const c = await e.as("client").claimEpisode({ client_uuid: "c", discard_episode_timeout: 5 });
    await e.as("client").abortEpisode({ client_uuid: "c", episode_uuid: c.episode_uuid });
    const { commands } = await e.as("trainer").pollCommands();
    expect(commands[0]?.body.kind).toBe("reset");
    await e.as("trainer").ackCommand({ seq: commands[0]!.seq, ok: false, detail: "no ack from runner in 30 s" });
    expect(await engineStats(e)).toMatchObject({ resetting: 0, registered: 0, claimed: 0 });
  });
});
