/**
 * What pace (staleness_policy: pace) counts as consumed and as outstanding when a train claim or
 * a worker's batch asks to begin new work (docs/buffer.md, "Pacing instead of discarding").
 */
import { describe, expect, it } from "vitest";
import { createEngine, endBody, rollingWith } from "./support/harness";

describe("pace counts everything the trainer has not consumed", () => {
  it("counts a claim that ended without a task id (its result goes to the trainer over ZeroMQ) as unconsumed while the buffer is active", async () => {
    // An end that names no task never joins the buffer (its result goes to the runner over
    // ZeroMQ), and was counted nowhere while the buffer was in use: each such end freed a slot,
    // so pace let more claims begin per version than the trainer takes.
    const e = await createEngine("rv-pace-notask");
    const trainer = e.as("trainer");
    await trainer.startRollout({ num_repeat_per_sample: 1, job_session: "job-1" });
    await e.as("operator").configureBuffer({ staleness_policy: "pace", max_staleness: 0, rollouts_per_version: 2 });
    await rollingWith(e, 4, { zmq: true });
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 0 });
    const client = e.as("client");
    const claim = (id: string) => client.claimEpisode({ client_uuid: id, discard_episode_timeout: 600 });
    const a = await claim("a");
    const b = await claim("b");
    expect(a.success && b.success).toBe(true);
    expect((await claim("c")).success).toBe(false);
    // a ends (no task id): its result goes to the trainer's runner, which has not trained on it yet.
    expect(await client.endEpisode(endBody("a", a.episode_uuid, 1, ""))).toMatchObject({ success: true });
    expect((await e.as("viewer").health()).buffer).toMatchObject({ pending_groups: 0, ready_groups: 0 });
    // The trainer still waits for b to complete its batch of two at version 0: a third must wait.
    expect((await claim("c")).success).toBe(false);
  });
});

describe("pace across a trainer restart", () => {
  it("does not carry the old trainer's consumption at a version over to a restarted trainer at that version (deadlock)", async () => {
    // The batch the old trainer pulled at version 0 was counted as consumed at that version by
    // the restarted one too: with nothing outstanding, every claim was refused for ever (its
    // empty pulls at the same version write nothing).
    const e = await createEngine("rv-pace-restart");
    const trainer = e.as("trainer");
    await trainer.startRollout({ num_repeat_per_sample: 1, job_session: "job-1" });
    await e.as("operator").configureBuffer({ staleness_policy: "pace", max_staleness: 0, rollouts_per_version: 2 });
    await rollingWith(e, 2);
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 0 });
    const client = e.as("client");
    const claim = (id: string) => client.claimEpisode({ client_uuid: id, discard_episode_timeout: 600, throttle_policy: { current_task_id: `task-${id}` } });
    const a = await claim("a");
    const b = await claim("b");
    expect(a.success && b.success).toBe(true);
    await client.endEpisode(endBody("a", a.episode_uuid, 1, "task-a"));
    await client.endEpisode(endBody("b", b.episode_uuid, 1, "task-b"));
    expect((await trainer.getRolloutData()).data.meta_info.total_samples).toBe(2);
    // The trainer crashes while training on that batch, and is restarted from its checkpoint (version 0).
    await trainer.updateEngineStatus({ engine_status: "ENGINE.OFFLINE" });
    await trainer.updateEngineStatus({ engine_status: "ENGINE.BOOTING", weight_version: 0 });
    await rollingWith(e, 2, { prefix: "again" });
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 0 });
    // The new trainer waits for its first batch; it polls and finds nothing.
    expect((await trainer.getRolloutData()).success).toBe(false);
    // Nothing is under way or waiting: its first rollout must be let begin.
    const c = await claim("c");
    expect(c, JSON.stringify(c)).toMatchObject({ success: true });
  });
});
