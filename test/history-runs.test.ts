/**
 * An engine's history divided into runs: a restarted trainer's steps never merge with, or
 * overwrite, an earlier run's steps of the same number.
 */
import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { drizzle } from "drizzle-orm/d1";
import { eq } from "drizzle-orm";
import { bufferGroups, rewardHistory, trajectories } from "../src/db/schema";
import { SESSION_MEMORY_MS } from "../src/engine/buffer-outcomes";
import { stepRow } from "./support/buffer";
import { advance, createEngine, endBody, raw, reconnect, rollingWith, type TestEngine } from "./support/harness";
import { runsAs, sampleCatalog } from "./support/runs";
import { rewindSchema } from "./support/schema-rewind";

/**
 * Rolls one global step: `n` episodes registered, claimed and ended with `reward`, then the step
 * moves on. A null step rolls with no global_step at all, as a load generator does.
 */
async function step(e: TestEngine, globalStep: number | null, reward: number, n = 2): Promise<void> {
  const trainer = e.as("trainer");
  const client = e.as("client");
  await trainer.updateEngineStatus(globalStep === null ? { engine_status: "ENGINE.ROLLING" } : { engine_status: "ENGINE.ROLLING", global_step: globalStep });
  for (let i = 0; i < n; i++) {
    const id = `s${globalStep}-${Math.random().toString(36).slice(2, 8)}`;
    await trainer.registerEpisode({ episode_uuid: id });
    const c = await client.claimEpisode({ client_uuid: `c${i}`, discard_episode_timeout: 60 });
    expect(c.episode_uuid).toBe(id);
    expect(await client.endEpisode(endBody(`c${i}`, id, reward, `task-${globalStep}`))).toEqual({ success: true });
  }
}

const means = (h: { global_step: number; mean_reward: number }[]) => h.map((x) => [x.global_step, Math.round(x.mean_reward * 1000) / 1000]);

describe("runs of the history", () => {
  it("keeps a run restarted from an earlier step apart: it neither overwrites nor extends the old one", async () => {
    const e = await createEngine();
    for (const s of [1, 2, 3]) await step(e, s, 0.1);
    // Restarted outside the exchange: the trainer comes back at step 1.
    for (const s of [1, 2]) await step(e, s, 0.9);
    const viewer = e.as("viewer");
    // The AgentJet client's view is the current run's: run 1's episodes of the same steps are not in it.
    expect((await viewer.completedTasks()).tasks).toEqual([expect.objectContaining({ task_id: "task-2", episodes: 2, mean_reward: 0.9 })]);
    expect(Object.keys((await viewer.getPoolInfo()).completed_tasks_client_uuids).sort()).toEqual(["task-1", "task-2"]);
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 3 });
    const current = await viewer.getRewardHistory();
    expect(means(current.history)).toEqual([
      [1, 0.9],
      [2, 0.9],
    ]);
    const { runs, current_run } = await viewer.historyRuns();
    expect(current_run).toBe(current.run);
    expect(runs.map((r) => ({ run: r.run, current: r.current, began: r.began, steps: r.steps, episodes: r.episodes, first: r.first_step, last: r.last_step, reward: r.last_mean_reward }))).toEqual([
      { run: 2, current: true, began: "step_backwards", steps: 2, episodes: 4, first: 1, last: 2, reward: 0.9 },
      { run: 1, current: false, began: "trainer_started", steps: 3, episodes: 6, first: 1, last: 3, reward: 0.1 },
    ]);
    expect(means((await viewer.getRewardHistory({ run: 1 })).history)).toEqual([
      [1, 0.1],
      [2, 0.1],
      [3, 0.1],
    ]);
  });

  // 55 steps of register, claim and end: a few hundred requests.
  it("gives a trainer that reaches step 50, is restarted at step 1 and runs again two separate histories", { timeout: 60_000 }, async () => {
    const e = await createEngine();
    const trainer = e.as("trainer");
    await trainer.updateEngineStatus({ engine_status: "ENGINE.BOOTING" });
    for (let s = 1; s <= 50; s++) await step(e, s, s / 100, 1);
    // The AgentJet trainer boots again: BOOTING, then ROLLING at step 1.
    await trainer.updateEngineStatus({ engine_status: "ENGINE.BOOTING" });
    for (let s = 1; s <= 5; s++) await step(e, s, 1, 1);
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 6 });
    const viewer = e.as("viewer");
    const now = await viewer.getRewardHistory();
    expect(now.history.map((h) => h.global_step)).toEqual([1, 2, 3, 4, 5]);
    expect(now.history.every((h) => h.mean_reward === 1 && h.count === 1)).toBe(true);
    const before = await viewer.getRewardHistory({ run: now.run! - 1 });
    expect(before.history.map((h) => h.global_step)).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
    // Step 50's rewards were written to the run they were earned in when the trainer booted again.
    expect(before.history.at(-1)).toMatchObject({ global_step: 50, mean_reward: 0.5, count: 1 });
    expect((await viewer.historyRuns()).runs.map((r) => r.began)).toEqual(["trainer_booted", "trainer_started"]);
    // The AgentJet client's view is the current run's: pool information and completed tasks too.
    const pool = await viewer.getPoolInfo();
    expect(pool.global_step).toBe(6);
  });

  it("keeps a trainer that comes back at the step it had reached apart, after it stopped", async () => {
    const e = await createEngine();
    await step(e, 7, 0.2);
    // The agent reports the trainer's exit; a new trainer starts and carries on at step 7.
    await e.as("trainer").trainerExit({ exit_code: 1, signal: null, log_tail: "" });
    await step(e, 7, 0.8);
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 8 });
    const viewer = e.as("viewer");
    expect(means((await viewer.getRewardHistory()).history)).toEqual([[7, 0.8]]);
    expect(means((await viewer.getRewardHistory({ run: 1 })).history)).toEqual([[7, 0.2]]);
  });

  it("stays in its run through a weight sync that carries on at the same step", async () => {
    const e = await createEngine();
    const trainer = e.as("trainer");
    await step(e, 1, 0.5);
    await trainer.updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING" });
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
    await step(e, 1, 0.5);
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING_POST", global_step: 2 });
    const { runs } = await e.as("viewer").historyRuns();
    expect(runs).toHaveLength(1);
    expect(means((await e.as("viewer").getRewardHistory()).history)).toEqual([[1, 0.5]]);
    expect((await e.as("viewer").getRewardHistory()).history[0]).toMatchObject({ count: 4 });
  });

  it("counts the current run's step in progress in its episodes, once, through a weight sync and after the step is written", async () => {
    const e = await createEngine();
    const trainer = e.as("trainer");
    const counts = async () => (await e.as("viewer").historyRuns()).runs.map((r) => ({ run: r.run, steps: r.steps, episodes: r.episodes }));
    await step(e, 1, 0.5);
    expect(await counts()).toEqual([{ run: 1, steps: 0, episodes: 2 }]);
    // A weight sync clears the step's episodes; their rewards are still the step's.
    await trainer.updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING" });
    expect(await counts()).toEqual([{ run: 1, steps: 0, episodes: 2 }]);
    await step(e, 1, 0.5, 1);
    expect(await counts()).toEqual([{ run: 1, steps: 0, episodes: 3 }]);
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 2 });
    expect(await counts()).toEqual([{ run: 1, steps: 1, episodes: 3 }]);
    // An earlier run's count is its written steps': the current step belongs to the current run.
    await step(e, 2, 0.5);
    expect(await e.as("operator").beginHistoryRun()).toMatchObject({ run: 2, new_run: true });
    expect(await counts()).toEqual([
      { run: 2, steps: 0, episodes: 0 },
      { run: 1, steps: 2, episodes: 5 },
    ]);
  });

  it("counts an episode with a list reward once in its run's episodes, in progress and written, while the step's count is of reward values", async () => {
    const e = await createEngine();
    const trainer = e.as("trainer");
    const client = e.as("client");
    const episodes = async () => (await e.as("viewer").historyRuns()).runs.map((r) => r.episodes);
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
    for (const [i, reward] of [[1, 0, 1], [0.5]].entries()) {
      await trainer.registerEpisode({ episode_uuid: `list-${i}` });
      const c = await client.claimEpisode({ client_uuid: `c${i}`, discard_episode_timeout: 60 });
      expect(await client.endEpisode(endBody(`c${i}`, c.episode_uuid, reward))).toEqual({ success: true });
    }
    expect(await episodes()).toEqual([2]);
    // Folded into the meta by a weight sync, then written as the step ends.
    await trainer.updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING" });
    expect(await episodes()).toEqual([2]);
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 2 });
    expect(await episodes()).toEqual([2]);
    expect((await e.as("viewer").getRewardHistory()).history).toEqual([expect.objectContaining({ global_step: 1, count: 4 })]);
  });

  it("takes a step written before steps counted episodes, and an accumulator saved before, at their reward values", async () => {
    const e = await createEngine();
    await step(e, 1, 0.5, 3);
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 2 });
    await step(e, 2, 0.5, 2);
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING" });
    // As migration 24 left it: no episodes column, and a meta accumulator without episodes.
    await runInDurableObject(e.stub, (_i, state) => {
      rewindSchema(state.storage.sql, 25);
      const row = state.storage.sql.exec<{ v: string }>("SELECT v FROM kv WHERE k = 'meta'").one();
      const meta = JSON.parse(row.v) as { acc: Record<string, unknown> };
      delete meta.acc["episodes"];
      state.storage.sql.exec("UPDATE kv SET v = ? WHERE k = 'meta'", JSON.stringify(meta));
    });
    await expect(runInDurableObject(e.stub, (_i, state) => state.abort("restart"))).rejects.toThrow();
    await reconnect(e);
    expect((await e.as("viewer").historyRuns()).runs.map((r) => [r.steps, r.episodes])).toEqual([[1, 5]]);
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 3 });
    expect((await e.as("viewer").historyRuns()).runs.map((r) => [r.steps, r.episodes])).toEqual([[2, 5]]);
  });

  it("keeps a trainer whose global_step appears on an engine already rolling without one apart from the step-less rewards", async () => {
    const e = await createEngine();
    // A load generator rolls with no global_step (bench/loadgen.ts) ...
    await step(e, null, 100, 3);
    // ... and a trainer then reports its steps while the engine is still ROLLING.
    await step(e, 1, 0.5);
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 2 });
    const viewer = e.as("viewer");
    const now = await viewer.getRewardHistory();
    expect(now.history).toEqual([expect.objectContaining({ global_step: 1, count: 2, mean_reward: 0.5 })]);
    const { runs } = await viewer.historyRuns();
    expect(runs.map((r) => [r.run, r.began, r.steps])).toEqual([
      [2, "step_appeared", 1],
      [1, "trainer_started", 0],
    ]);
    expect(now.run).toBe(2);
  });

  it("begins a run with start_engine, which the trainer's own BOOTING does not begin again", async () => {
    const e = await createEngine();
    await step(e, 1, 0.3);
    await e.as("operator").stopEngine();
    await e.as("operator").syncTrainConfig("trainer: {}");
    await e.as("operator").startEngine();
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.BOOTING" });
    await step(e, 1, 0.6);
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 2 });
    const { runs } = await e.as("viewer").historyRuns();
    expect(runs.map((r) => [r.run, r.began, r.steps])).toEqual([
      [2, "start_engine", 1],
      [1, "trainer_started", 1],
    ]);
  });

  it("begins a run, linked to it, when a training run of the runs API starts; the trainer's BOOTING does not begin another", async () => {
    const e = await createEngine();
    await step(e, 1, 0.2);
    await runsAs(e, "trainer").reportCatalog(sampleCatalog());
    await runsAs(e, "operator").selectEnvironment({ name: "gsm8k" });
    const training = await runsAs(e, "operator").startRun();
    // The trainer the agent starts for it boots and rolls from step 1.
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.BOOTING" });
    await step(e, 1, 0.7);
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 2 });
    const viewer = e.as("viewer");
    const { runs, current_run } = await viewer.historyRuns();
    expect(current_run).toBe(2);
    expect(runs.map((r) => ({ run: r.run, began: r.began, training_run_id: r.training_run_id, steps: r.steps }))).toEqual([
      { run: 2, began: "training_run", training_run_id: training.run_id, steps: 1 },
      { run: 1, began: "trainer_started", training_run_id: null, steps: 1 },
    ]);
    expect(means((await viewer.getRewardHistory()).history)).toEqual([[1, 0.7]]);
    expect(means((await viewer.getRewardHistory({ run: 1 })).history)).toEqual([[1, 0.2]]);
  });

  it("lets an operator begin a run, keeps an empty one instead of making another, and refuses others", async () => {
    const e = await createEngine();
    await step(e, 1, 0.4);
    const op = e.as("operator");
    expect(await op.beginHistoryRun({ note: "new reward model" })).toEqual({ success: true, run: 2, new_run: true });
    // Nothing happened in run 2 yet: another begin keeps it and takes the note.
    expect(await op.beginHistoryRun({ note: "new reward model, take 2" })).toEqual({ success: true, run: 2, new_run: false });
    // The step the engine was at when run 1 ended was written to run 1.
    expect(means((await e.as("viewer").getRewardHistory({ run: 1 })).history)).toEqual([[1, 0.4]]);
    const { runs } = await e.as("viewer").historyRuns({ limit: 1 });
    expect(runs).toEqual([expect.objectContaining({ run: 2, current: true, began: "operator", note: "new reward model, take 2", steps: 0 })]);
    expect((await e.as("viewer").historyRuns({ before: 2 })).runs.map((r) => r.run)).toEqual([1]);
    for (const role of ["client", "viewer", "trainer"] as const) {
      const r = await raw(`/e/${e.name}/history/begin_run`, { token: e.tokens[role], body: "{}" });
      expect(r.status, role).toBe(403);
    }
    expect((await e.as("viewer").historyRuns()).runs).toHaveLength(2);
  });

  // The buffer forgets a decided group a week on (SESSION_MEMORY_MS); its run must not then read
  // as empty, which the next beginning would take over (a buffer-only run writes no reward history).
  it("begins a new run after a buffer-only run whose groups the engine has forgotten, also for groups from before migration 24", async () => {
    for (const rewound of [false, true]) {
      const e = await createEngine("runbuf");
      const op = e.as("operator");
      await e.as("trainer").startRollout({ num_repeat_per_sample: 2, job_session: "job-1" });
      await op.configureBuffer({ ttl_seconds: 60 });
      const first = await op.beginHistoryRun({ note: "first training" });
      // One session of a group of two: the group is dropped at its TTL, and recorded in D1 under the run.
      await e.as("client").postSteps({ steps: [stepRow("s1", "g1", 0, true)] });
      await advance(e, 61_000);
      await advance(e, 5_000);
      const rows = await drizzle(env.DB).select({ run: bufferGroups.run, group: bufferGroups.groupId }).from(bufferGroups).where(eq(bufferGroups.engine, e.name));
      expect(rows).toEqual([{ run: first.run, group: "g1" }]);
      if (rewound) {
        await runInDurableObject(e.stub, (_i, state) => rewindSchema(state.storage.sql, 24));
        await expect(runInDurableObject(e.stub, (_i, state) => state.abort("restart"))).rejects.toThrow();
        await reconnect(e);
      }
      await advance(e, SESSION_MEMORY_MS);
      expect(await op.beginHistoryRun({ note: "second training" }), rewound ? "migrated" : "fresh").toEqual({ success: true, run: first.run + 1, new_run: true });
      expect((await e.as("viewer").historyRuns({})).runs.find((r) => r.run === first.run)?.note).toBe("first training");
    }
  });

  it("answers 404 for a run it does not have and 422 for one that is not a run number", async () => {
    const e = await createEngine();
    await step(e, 1, 0.4);
    const token = e.tokens.viewer;
    const missing = await raw(`/e/${e.name}/get_reward_history?run=99`, { token });
    expect(missing.status).toBe(404);
    expect(missing.json).toMatchObject({ error: "unknown_run" });
    for (const bad of ["abc", "0", "-1", "1.5"]) {
      const r = await raw(`/e/${e.name}/get_reward_history?run=${bad}`, { token });
      expect(r.status, bad).toBe(422);
      expect(r.json).toMatchObject({ error: "invalid_request" });
    }
    const long = await raw(`/e/${e.name}/history/begin_run`, { token: e.tokens.operator, body: JSON.stringify({ note: "x".repeat(1001) }) });
    expect(long.status).toBe(413);
    expect((await e.as("viewer").historyRuns()).runs).toHaveLength(1);
  });

  it("answers the AgentJet client's plain reward history read with the current run, with no run before the first", async () => {
    const e = await createEngine();
    expect(await e.as("viewer").getRewardHistory()).toEqual({ history: [], run: null });
    expect(await e.as("viewer").historyRuns()).toEqual({ current_run: null, runs: [] });
    await rollingWith(e, 0, { step: 1 });
    expect(await e.as("viewer").getRewardHistory()).toEqual({ history: [], run: 1 });
  });

  it("writes each step's history and trajectory to D1 with its run", async () => {
    const e = await createEngine();
    await step(e, 1, 0.1, 1);
    await step(e, 0, 0.9, 1);
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
    await advance(e, 5_000);
    const db = drizzle(env.DB);
    const history = await db.select({ run: rewardHistory.run, step: rewardHistory.globalStep }).from(rewardHistory).where(eq(rewardHistory.engine, e.name)).orderBy(rewardHistory.seq);
    expect(history).toEqual([
      { run: 1, step: 1 },
      { run: 2, step: 0 },
    ]);
    const trajs = await db.select({ run: trajectories.run, step: trajectories.globalStep }).from(trajectories).where(eq(trajectories.engine, e.name)).orderBy(trajectories.endedAt);
    expect(trajs).toEqual([
      { run: 1, step: 1 },
      { run: 2, step: 0 },
    ]);
  });

  it("makes what an engine held before runs its earlier run 1, which stays current until the next run begins", async () => {
    const e = await createEngine();
    await step(e, 1, 0.2);
    await step(e, 2, 0.4);
    // As schema 5 left it: no runs table, reward history without runs, a meta without a run.
    await runInDurableObject(e.stub, (_i, state) => {
      const sql = state.storage.sql;
      sql.exec("DROP TABLE history_runs");
      sql.exec("DROP INDEX reward_history_run");
      sql.exec(
        "CREATE TABLE rh5 (seq INTEGER PRIMARY KEY AUTOINCREMENT, global_step INTEGER NOT NULL, mean_reward REAL NOT NULL, std_reward REAL NOT NULL, count INTEGER NOT NULL, min_reward REAL NOT NULL, max_reward REAL NOT NULL, timestamp REAL NOT NULL)",
      );
      sql.exec("INSERT INTO rh5 SELECT seq, global_step, mean_reward, std_reward, count, min_reward, max_reward, timestamp FROM reward_history");
      sql.exec("DROP TABLE reward_history");
      sql.exec("ALTER TABLE rh5 RENAME TO reward_history");
      sql.exec("ALTER TABLE buf_groups DROP COLUMN run");
      sql.exec("ALTER TABLE finished DROP COLUMN run");
      // And without what migration 8 added.
      for (const [t, c] of [["buf_sessions", "failed"], ["buf_groups", "failed_sessions"], ["buf_groups", "partial"], ["buf_groups", "first_row_at"], ["buf_groups", "ready_at"], ["buf_pulls", "report"], ["episodes", "claim_weight_version"], ["finished", "failed"]]) {
        sql.exec(`ALTER TABLE ${t} DROP COLUMN ${c}`);
      }
      sql.exec("DROP TABLE failed_rollouts");
      // And without what later migrations added (12, 13, 14).
      sql.exec("ALTER TABLE episodes DROP COLUMN registered_again");
      sql.exec("DROP TABLE buf_task_groups");
      sql.exec("ALTER TABLE finished DROP COLUMN claim_weight_version");
      const meta = JSON.parse(sql.exec<{ v: string }>("SELECT v FROM kv WHERE k = 'meta'").one().v) as Record<string, unknown>;
      delete meta["run"];
      sql.exec("UPDATE kv SET v = ? WHERE k = 'meta'", JSON.stringify(meta));
      rewindSchema(sql, 6);
    });
    await expect(runInDurableObject(e.stub, (_i, state) => state.abort("restart"))).rejects.toThrow();
    await reconnect(e);
    const viewer = e.as("viewer");
    expect(means((await viewer.getRewardHistory()).history)).toEqual([[1, 0.2]]);
    expect((await viewer.historyRuns()).runs).toEqual([expect.objectContaining({ run: 1, current: true, began: "earlier", steps: 1 })]);
    // The engine carries on in run 1 until a new one begins.
    await step(e, 3, 0.6);
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
    expect(means((await viewer.getRewardHistory({ run: 1 })).history)).toEqual([
      [1, 0.2],
      [2, 0.4],
      [3, 0.6],
    ]);
    expect((await viewer.historyRuns()).current_run).toBe(2);
  });
});
