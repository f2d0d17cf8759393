/**
 * The rollout buffer's step rows in D1 (`buffer_steps`, each with its whole conversation) are
 * kept d1_retention_days, then deleted by the engine's alarm in bounded chunks. Without it D1,
 * one database every engine shares, fills with them and every engine's writes to it fail.
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { SWEEP_EVERY_MS } from "../src/engine/retention-schedule";
import { stepRow as step } from "./support/buffer";
import { advance, createEngine, engineStats, raw, reconnect, type TestEngine } from "./support/harness";

const DAY_MS = 86_400_000;
/** Long enough for the outbox to have written what the engine holds to D1. */
const FLUSH_MS = 5_000;

async function buffered(groupSize: number): Promise<TestEngine> {
  const e = await createEngine("bret");
  await e.as("trainer").startRollout({ num_repeat_per_sample: groupSize, job_session: "job-1" });
  return e;
}

const stepGroups = async (engine: string) =>
  (await env.DB.prepare("SELECT group_id, COUNT(*) AS n FROM buffer_steps WHERE engine = ? GROUP BY group_id ORDER BY group_id").bind(engine).all<{ group_id: string; n: number }>()).results;
const stepCount = async (engine: string) => (await env.DB.prepare("SELECT COUNT(*) AS n FROM buffer_steps WHERE engine = ?").bind(engine).first<{ n: number }>())?.n;
const outcomes = async (engine: string) =>
  (await env.DB.prepare("SELECT group_id, outcome FROM buffer_groups WHERE engine = ? ORDER BY group_id").bind(engine).all<{ group_id: string; outcome: string }>()).results;

const configure = (e: TestEngine, body: unknown) => raw(`/e/${e.name}/buffer/config`, { token: e.tokens.operator, body: JSON.stringify(body) });

describe("the buffer's step rows in D1", () => {
  it("deletes an engine's step rows older than d1_retention_days in its alarm, keeping newer ones, its groups' outcomes and other engines' rows", async () => {
    const e = await buffered(2);
    const other = await buffered(1);
    const w = e.as("client");
    // Old: a group delivered and one dropped at its TTL (one session of two).
    await w.postSteps({ steps: [step("a1", "old", 0, false), step("a1", "old", 1, true), step("a2", "old", 0, true), step("b1", "short", 0, true)] });
    expect((await e.as("trainer").getRolloutData()).success).toBe(true);
    await other.as("client").postSteps({ steps: [step("o1", "theirs", 0, true)] });
    await advance(other, FLUSH_MS);
    await advance(e, FLUSH_MS);
    await advance(e, 3600_000);
    expect(await stepGroups(e.name)).toEqual([
      { group_id: "old", n: 3 },
      { group_id: "short", n: 1 },
    ]);
    // 20 days on: a newer group, and the alarm's sweeps find nothing old enough yet.
    await advance(e, 20 * DAY_MS);
    await w.postSteps({ steps: [step("c1", "new", 0, true), step("c2", "new", 0, true)] });
    await advance(e, FLUSH_MS);
    expect(await stepCount(e.name)).toBe(6);
    // 30 days and two hours after the old rows: the next hourly sweep takes them, not the 10-day-old ones.
    await advance(e, 10 * DAY_MS + 2 * 3600_000);
    await advance(e, SWEEP_EVERY_MS);
    expect(await stepGroups(e.name)).toEqual([{ group_id: "new", n: 2 }]);
    expect(await outcomes(e.name)).toEqual([
      { group_id: "old", outcome: "delivered" },
      { group_id: "short", outcome: "dropped" },
    ]);
    // Just as old by the same clock, but another engine's.
    expect(await stepGroups(other.name)).toEqual([{ group_id: "theirs", n: 1 }]);
  });

  it("goes by the engine's d1_retention_days", async () => {
    const e = await buffered(1);
    expect((await e.as("operator").configureBuffer({ d1_retention_days: 2 })).d1_retention_days).toBe(2);
    await e.as("client").postSteps({ steps: [step("s1", "g1", 0, true)] });
    await advance(e, FLUSH_MS);
    await advance(e, DAY_MS);
    expect(await stepCount(e.name)).toBe(1);
    await advance(e, DAY_MS + SWEEP_EVERY_MS);
    expect(await stepCount(e.name)).toBe(0);
  });

  it("deletes a large backlog over several alarm runs, carrying on a minute later until it is done", async () => {
    const e = await buffered(1);
    await e.as("operator").configureBuffer({ d1_retention_days: 1 });
    await e.as("client").postSteps({ steps: [step("s1", "g1", 0, true)] });
    await advance(e, FLUSH_MS);
    // 25,000 rows written a day before: more than one run's budget (20 statements of 1000 rows) deletes.
    const at = e.clock.t - DAY_MS;
    await env.DB.prepare(
      `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 25000)
       INSERT INTO buffer_steps (engine, uid, session_id, step_index, group_id, run, reward, truncated, is_session_completed, weight_version, messages, response, extra, created_at)
       SELECT ?, 'bulk-' || i, 'bulk-' || i, 0, 'bulk', 1, 0, 0, 1, 0, '[]', '', '{}', ? FROM n`,
    )
      .bind(e.name, at)
      .run();
    expect(await stepCount(e.name)).toBe(25_001);
    // The first sweep, an hour after the first step.
    await advance(e, SWEEP_EVERY_MS);
    expect(await stepCount(e.name)).toBe(5_001);
    expect((await engineStats(e)).alarm_at).toBe(e.clock.t + 60_000);
    await advance(e, 60_000);
    expect(await stepGroups(e.name)).toEqual([{ group_id: "g1", n: 1 }]);
    // Done: the next sweep is an hour away.
    expect((await engineStats(e)).alarm_at).toBe(e.clock.t + SWEEP_EVERY_MS);
  });

  it("does not wake an engine that has stored no step for it", async () => {
    const e = await buffered(1);
    await e.as("operator").configureBuffer({ d1_retention_days: 1 });
    expect((await engineStats(e)).alarm_at).toBeNull();
    await e.as("client").postSteps({ steps: [step("s1", "g1", 0, true)] });
    await advance(e, FLUSH_MS);
    expect((await engineStats(e)).alarm_at).toBe(e.clock.t - FLUSH_MS + SWEEP_EVERY_MS);
  });
});

describe("d1_retention_days", () => {
  it("is 30 by default, set by the operator from 1 to 3650, and anything else is a 422 that changes nothing", async () => {
    const e = await buffered(1);
    expect((await e.as("viewer").health()).buffer.config.d1_retention_days).toBe(30);
    expect((await configure(e, { d1_retention_days: 7 })).json).toMatchObject({ d1_retention_days: 7 });
    const before = (await e.as("viewer").health()).buffer.config;
    expect(before.d1_retention_days).toBe(7);
    for (const bad of [0, 3651, 1.5, "30", null, -1]) {
      const r = await configure(e, { d1_retention_days: bad, ttl_seconds: 60 });
      expect(r.status, JSON.stringify(bad)).toBe(422);
      expect(String(r.json?.["detail"])).toContain("d1_retention_days");
    }
    expect((await e.as("viewer").health()).buffer.config).toEqual(before);
    expect((await configure(e, { d1_retention_days: 1 })).status).toBe(200);
    expect((await configure(e, { d1_retention_days: 3650 })).json).toMatchObject({ d1_retention_days: 3650 });
  });

  it("reads a config stored before it as 30", async () => {
    const e = await buffered(1);
    await e.as("operator").configureBuffer({ d1_retention_days: 9 });
    await runInDurableObject(e.stub, (_i, state) => {
      state.storage.sql.exec("UPDATE kv SET v = json_remove(v, '$.d1_retention_days') WHERE k = 'buffer_config'");
    });
    await expect(runInDurableObject(e.stub, (_i, state) => state.abort("restart"))).rejects.toThrow();
    await reconnect(e);
    expect((await e.as("viewer").health()).buffer.config).toMatchObject({ d1_retention_days: 30, group_size: 1 });
  });
});
