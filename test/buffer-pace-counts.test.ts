/**
 * What pace (staleness_policy: pace) counts as consumed and as outstanding when a train claim or
 * a worker's batch asks to begin new work (docs/buffer.md, "Pacing instead of discarding").
 */
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { EngineObject } from "../src/engine/engine-object";
import { migrateEngine } from "../src/engine/schema";
import { rewindSchema } from "./support/schema-rewind";
import { stepRow as row } from "./support/buffer";
import { advance, createEngine, endBody, raw, rollingWith } from "./support/harness";

/**
 * An engine with the buffer in use under pace, at most 0 versions late and 2 rollouts per
 * version, `episodes` registered, rolling at version 0; `claim` names a task when `tasks`.
 */
async function pacedEngine(name: string, episodes: number, o: { tasks: boolean; zmq?: boolean }) {
  const e = await createEngine(name);
  const trainer = e.as("trainer");
  await trainer.startRollout({ num_repeat_per_sample: 1, job_session: "job-1" });
  await e.as("operator").configureBuffer({ staleness_policy: "pace", max_staleness: 0, rollouts_per_version: 2 });
  await rollingWith(e, episodes, o.zmq === true ? { zmq: true } : {});
  await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 0 });
  const client = e.as("client");
  const claim = (id: string) => client.claimEpisode({ client_uuid: id, discard_episode_timeout: 600, ...(o.tasks ? { throttle_policy: { current_task_id: `task-${id}` } } : {}) });
  return { e, trainer, client, claim };
}

describe("pace counts everything the trainer has not consumed", () => {
  it("holds a worker's new group back while AgentJet claims under way already fill the bound (one buffer, both sources)", async () => {
    // A worker's batch was weighed without the claims under way, though their ends join the
    // same buffer: with claims filling the bound, its group was let in, and one of the rollouts
    // pace let begin was consumed past max_staleness.
    const { e, trainer, client, claim } = await pacedEngine("pace-mixed", 4, { tasks: true });
    const a = await claim("a");
    const b = await claim("b");
    expect(a.success && b.success).toBe(true);
    // Two per version at max_staleness 0: the bound is full, a third claim is refused.
    expect((await claim("c")).success).toBe(false);
    // A worker's batch opening a new group at the same version: it should be refused as the claim was.
    const posted = await raw(`/e/${e.name}/steps`, { token: e.tokens.client, body: JSON.stringify({ steps: [row("w", "w-group", 0, true)] }) });
    // Whatever the answer, follow the trainer: it takes two rollouts per version.
    await client.endEpisode(endBody("a", a.episode_uuid, 1, "task-a"));
    await client.endEpisode(endBody("b", b.episode_uuid, 1, "task-b"));
    const lags: { group: string; lag: number | null }[] = [];
    for (let v = 0; v < 3; v++) {
      const pulled = await trainer.getRolloutData({ max_groups: 2 });
      for (const g of pulled.data.meta_info.groups) lags.push({ group: g.group_id, lag: g.lag_versions });
      await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: v + 1 });
    }
    // Pace's promise: nothing it let begin is consumed more than max_staleness (0) versions late.
    expect(lags.filter((l) => l.lag === null || l.lag > 0), `worker's batch answered ${posted.status}`).toEqual([]);
  });

  it("counts a claim that ended without a task id (its result goes to the trainer over ZeroMQ) as unconsumed while the buffer is active", async () => {
    // An end that names no task never joins the buffer (its result goes to the runner over
    // ZeroMQ), and was counted nowhere while the buffer was in use: each such end freed a slot,
    // so pace let more claims begin per version than the trainer takes.
    const { e, client, claim } = await pacedEngine("pace-notask", 4, { tasks: false, zmq: true });
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
    const { e, trainer, client, claim } = await pacedEngine("pace-restart", 2, { tasks: true });
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

describe("pace weighs a group as its pull would hand it out", () => {
  /** A buffer under pace at version 0, groups of 2, at most `maxStaleness` versions late and `perVersion` rollouts a version. */
  async function pacedBuffer(name: string, maxStaleness: number, perVersion: number) {
    const e = await createEngine(name);
    const trainer = e.as("trainer");
    await trainer.startRollout({ num_repeat_per_sample: 2, job_session: "job-1" });
    await e.as("operator").configureBuffer({ staleness_policy: "pace", max_staleness: maxStaleness, rollouts_per_version: perVersion });
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 0 });
    const post = (rows: unknown[]) => raw(`/e/${e.name}/steps`, { token: e.tokens.client, body: JSON.stringify({ steps: rows }) });
    return { e, trainer, post };
  }

  it("by its usable sessions' oldest version, not a failed session's (which no pull hands out)", async () => {
    const { trainer, post } = await pacedBuffer("pace-failed-oldest", 1, 10);
    expect((await post([{ ...row("dead", "g", 0, true), weight_version: 0, failed_infra: true }])).status).toBe(200);
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 5 });
    expect((await post([row("s1", "g", 0, true), row("s2", "g", 0, true)])).json).toMatchObject({ groups_ready: ["g"] });
    // g's usable sessions are at version 5: a new group at 5 is consumed at 5 at worst, within 1.
    expect(await post([row("n1", "h", 0, false), row("n2", "h", 0, false)])).toMatchObject({ status: 200, json: { accepted: 2 } });
    const g = (await trainer.getRolloutData()).data.meta_info.groups.find((r) => r.group_id === "g");
    expect({ oldest: g?.oldest_weight_version, lag: g?.lag_versions }).toEqual({ oldest: 5, lag: 0 });
  });

  it("by its usable sessions, not the ones that never completed (its pull clears them)", async () => {
    const { trainer, post } = await pacedBuffer("pace-incomplete", 1, 2);
    expect((await post([row("s1", "g", 0, true), row("s2", "g", 0, true), row("s3", "g", 0, false)])).json).toMatchObject({ groups_ready: ["g"] });
    // Outstanding: g's 2 usable sessions, then h's 2: consumed at version 1 at worst, within 1.
    expect(await post([row("n1", "h", 0, false), row("n2", "h", 0, false)])).toMatchObject({ status: 200, json: { accepted: 2 } });
    // A third group would be consumed at version 2: refused.
    expect(await post([row("m1", "k", 0, false), row("m2", "k", 0, false)])).toMatchObject({ status: 503, json: { error: "paced" } });
    expect((await trainer.getRolloutData({ max_groups: 1 })).data.meta_info.total_samples).toBe(2);
  });

  it("and a trainer restarted with restart_training, at the version its predecessor pulled at, has consumed nothing yet (deadlock)", async () => {
    const { e, trainer, post } = await pacedBuffer("pace-restart-training", 0, 2);
    await e.as("operator").configureBuffer({ group_size: 1 });
    expect((await post([row("a", "ga", 0, true)])).status).toBe(200);
    expect((await post([row("b", "gb", 0, true)])).status).toBe(200);
    expect((await trainer.getRolloutData()).data.meta_info.total_samples).toBe(2);
    // Two consumed at version 0 of 2 a version: a new group would be consumed at version 1.
    expect((await post([row("x", "gx", 0, true)])).status).toBe(503);
    // The trainer crashes while training on that batch and is restarted from its checkpoint, restarting its job.
    await advance(e, 5 * 60_000);
    await trainer.startRollout({ num_repeat_per_sample: 1, job_session: "job-1", restart_training: true });
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", weight_version: 0 });
    expect((await trainer.getRolloutData()).success).toBe(false);
    // Nothing is under way or waiting, and it has consumed nothing: its first group is taken.
    expect((await post([row("c", "gc", 0, true)])).json).toMatchObject({ groups_ready: ["gc"] });
    expect((await trainer.getRolloutData()).data.meta_info.finished_groups).toEqual(["gc"]);
  });

  it("knows each session's oldest version on an engine from before it kept one (engine migration 31)", async () => {
    const e = await createEngine("pace-migration-31");
    const sessions = await runInDurableObject(e.stub, (_i: EngineObject, state) => {
      const sql = state.storage.sql;
      rewindSchema(sql, 31);
      sql.exec("INSERT INTO buf_sessions (session_id, group_id, completed) VALUES ('s', 'g', 1), ('none', 'g', 0)");
      for (const [i, v] of [7, 4, 9].entries()) {
        sql.exec("INSERT INTO buf_steps (uid, session_id, step_index, group_id, messages, response, reward, truncated, is_session_completed, weight_version, extra, created_at) VALUES (?, 's', ?, 'g', '[]', '', 1, 0, 0, ?, '{}', 9)", `u${i}`, i, v);
      }
      migrateEngine(sql);
      return sql.exec("SELECT session_id, min_weight_version FROM buf_sessions ORDER BY session_id").toArray();
    });
    expect(sessions).toEqual([
      { session_id: "none", min_weight_version: null },
      { session_id: "s", min_weight_version: 4 },
    ]);
  });
});

