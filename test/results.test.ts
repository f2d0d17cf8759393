import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it, vi } from "vitest";
import type { EngineObject } from "../src/engine/engine-object";
import { migrateEngine } from "../src/engine/schema";
import { rewindSchema } from "./support/schema-rewind";
import type { Caller } from "../src/engine/caller";
import { FLUSH_STATEMENTS, FLUSH_STATEMENTS_MOST, Outbox, STATEMENT_CHARS } from "../src/engine/outbox";
import { ClaimEpisodeRequest, EndEpisodeRequest, RegisterEpisodeRequest } from "../src/protocol/swarm";
import { ORIGIN, advance, createEngine, endBody, engineStats, raw, reconnect, rollingWith, type TestEngine } from "./support/harness";

const ADMIN: Caller = { admin: true };

async function trajectories(engine: string) {
  const r = await env.DB.prepare("SELECT episode_uuid, fence, client_uuid, task_id, episode_type, global_step, reward, is_success, workflow_output FROM trajectories WHERE engine = ? ORDER BY id")
    .bind(engine)
    .all();
  return r.results;
}

async function claimAndEnd(e: TestEngine, client: string, reward: number | number[], task = "task-1") {
  const c = await e.as("client").claimEpisode({ client_uuid: client, discard_episode_timeout: 60 });
  expect(c.success).toBe(true);
  expect(await e.as("client").endEpisode(endBody(client, c.episode_uuid, reward, task))).toEqual({ success: true });
  return c;
}

describe("results reach D1 through the outbox", () => {
  it("writes each ended episode's trajectory once, even when the flush repeats", async () => {
    const e = await createEngine();
    await rollingWith(e, 3);
    await claimAndEnd(e, "a", 1, "t1");
    await claimAndEnd(e, "b", [0, 1], "t2");
    expect(await engineStats(e)).toMatchObject({ outbox: 2 });
    await advance(e, 1_000);
    expect(await engineStats(e)).toMatchObject({ outbox: 0 });
    const rows = await trajectories(e.name);
    expect(rows).toEqual([
      expect.objectContaining({ episode_uuid: "ep-0", fence: 1, client_uuid: "a", task_id: "t1", episode_type: "train", global_step: 0, reward: 1, is_success: 1 }),
      expect.objectContaining({ episode_uuid: "ep-1", fence: 1, client_uuid: "b", task_id: "t2", reward: 0.5 }),
    ]);
    expect(JSON.parse(rows[1]!["workflow_output"] as string)).toMatchObject({ reward: [0, 1], metadata: { task_id: "t2" } });
  });

  it("batches: one alarm writes every result of the last batch window, not only those whose window closed", async () => {
    const e = await createEngine();
    await rollingWith(e, 3);
    await claimAndEnd(e, "a", 1, "t1");
    e.clock.t += 400;
    await claimAndEnd(e, "b", 1, "t2");
    e.clock.t += 400;
    await claimAndEnd(e, "c", 1, "t3");
    // The alarm is due a window after the first result; it takes the later two along.
    const { alarm_at } = await engineStats(e);
    expect(alarm_at).toBe(e.clock.t - 800 + 1_000);
    await advance(e, 200);
    expect(await engineStats(e)).toMatchObject({ outbox: 0, alarm_at: expect.toSatisfy((t: number | null) => t === null || t > e.clock.t + 30_000) });
    expect((await trajectories(e.name)).map((r) => r["client_uuid"])).toEqual(["a", "b", "c"]);
  });

  it("writes large outputs in several statements and keeps nulls, false and non-ASCII text as sent", async () => {
    const e = await createEngine();
    await rollingWith(e, 4);
    // 4 x 200,000 characters is more than one statement's share (outbox.ts), so the batch is split.
    const big = `é ✓ ${"x".repeat(200_000)}`;
    for (const [i, client] of ["a", "b", "c", "d"].entries()) {
      const c = await e.as("client").claimEpisode({ client_uuid: client, discard_episode_timeout: 60 });
      const body = endBody(client, c.episode_uuid, i === 0 ? null : i, `t${i}`);
      body.workflow_output = { ...body.workflow_output, is_success: i !== 1, log_metrics: { text: big } };
      expect(await e.as("client").endEpisode(body)).toEqual({ success: true });
    }
    await advance(e, 1_000);
    expect(await engineStats(e)).toMatchObject({ outbox: 0 });
    const rows = await trajectories(e.name);
    expect(rows.map((r) => [r["client_uuid"], r["reward"], r["is_success"], r["global_step"]])).toEqual([
      ["a", null, 1, 0],
      ["b", 1, 0, 0],
      ["c", 2, 1, 0],
      ["d", 3, 1, 0],
    ]);
    expect(JSON.parse(rows[3]!["workflow_output"] as string)).toMatchObject({ log_metrics: { text: big } });
  });

  it("stops a flush at its budget of D1 statements (D1 takes 1,000 queries per invocation), and the rest follow", async () => {
    const e = await createEngine();
    // One more ended episode than a batch takes: a flush would write two batches.
    const ids = await rollingWith(e, 101);
    const client = e.as("client");
    for (const id of ids) {
      const c = await client.claimEpisode({ client_uuid: `c-${id}`, discard_episode_timeout: 60 });
      expect(await client.endEpisode(endBody(`c-${id}`, c.episode_uuid, 1, "t"))).toEqual({ success: true });
    }
    const flushed = await runInDurableObject(e.stub, async (_i, state) => {
      const outbox = new Outbox(state.storage.sql);
      const now = Date.UTC(2100, 0, 1);
      // With a budget of one statement, the first batch (100 small rows of one kind: one
      // statement) goes, and the second is left for the next alarm.
      const first = await outbox.flush(env.DB, now, now, { start: 1, most: FLUSH_STATEMENTS_MOST });
      const left = outbox.size();
      const second = await outbox.flush(env.DB, now, now, { start: 1, most: FLUSH_STATEMENTS_MOST });
      return { first, left, second, after: outbox.size() };
    });
    expect(flushed).toEqual({ first: { written: 100, error: null, statements: 1 }, left: 1, second: { written: 1, error: null, statements: 1 }, after: 0 });
    expect((await trajectories(e.name)).length).toBe(101);
    expect(FLUSH_STATEMENTS).toBeLessThanOrEqual(500);
  });

  it("sends at most FLUSH_STATEMENTS statements in one alarm's flush, and the next alarm sends the rest", { timeout: 180_000 }, async () => {
    const e = await createEngine();
    await e.as("trainer").startRollout({ num_repeat_per_sample: 2, job_session: "flush-cap" });
    // Buffer rows whose outbox records are each over half a statement's text: no two share a
    // statement, so each row is one D1 statement. Ten more rows than one flush may send.
    const rows = FLUSH_STATEMENTS + 10;
    const text = "x".repeat(STATEMENT_CHARS / 2);
    const row = (i: number) => ({ session_id: `s${i}`, group_id: `g${i}`, step_index: 0, messages: [{ role: "user" as const, content: text }], response: `r${i}`, reward: 1 });
    // 14 rows of 256 KiB to a request, under its 4 MiB.
    for (let i = 0; i < rows; i += 14) {
      const steps = Array.from({ length: Math.min(14, rows - i) }, (_, j) => row(i + j));
      expect(await e.as("client").postSteps({ steps })).toMatchObject({ accepted: steps.length });
    }
    const pending = await runInDurableObject(e.stub, (_i, state) =>
      state.storage.sql.exec<{ n: number; shortest: number }>("SELECT COUNT(*) AS n, MIN(LENGTH(payload)) AS shortest FROM outbox").one(),
    );
    expect(pending.n).toBe(rows);
    expect(pending.shortest).toBeGreaterThan(STATEMENT_CHARS / 2);
    const inD1 = async () => (await env.DB.prepare("SELECT COUNT(*) AS n FROM buffer_steps WHERE engine = ?").bind(e.name).first<{ n: number }>())?.n;
    // The alarm that flushes them: five batches of 100 rows, 500 statements, then it stops.
    await advance(e, 1_000);
    expect(await inD1()).toBe(FLUSH_STATEMENTS);
    expect(await engineStats(e)).toMatchObject({ outbox: 10 });
    // The rows left are due: the alarm is set for now, and its next run writes them.
    expect(await runInDurableObject(e.stub, (_i, state) => state.storage.getAlarm())).toBeLessThanOrEqual(e.clock.t);
    await advance(e, 0);
    expect(await inD1()).toBe(rows);
    expect(await engineStats(e)).toMatchObject({ outbox: 0 });
  });

  it("a row D1 refuses waits alone: the results written beside it reach D1 at once", async () => {
    const e = await createEngine();
    await rollingWith(e, 6);
    // D1 refuses one row for its data, as it refuses a row over its size cap (SQLITE_TOOBIG).
    await env.DB.exec(
      `CREATE TRIGGER refuse_${e.name.replace(/\W/g, "_")} BEFORE INSERT ON trajectories WHEN NEW.engine = '${e.name}' AND NEW.client_uuid = 'refused' BEGIN SELECT RAISE(ABORT, 'refused for its data'); END`,
    );
    try {
      for (const client of ["a", "b", "refused", "c", "d", "e"]) await claimAndEnd(e, client, 1, `t-${client}`);
      await advance(e, 1_000);
      expect((await trajectories(e.name)).map((r) => r["client_uuid"])).toEqual(["a", "b", "c", "d", "e"]);
      const stuck = await engineStats(e);
      expect(stuck.outbox).toBe(1);
      expect(stuck.alarm_at).toBeGreaterThan(e.clock.t);
    } finally {
      await env.DB.exec(`DROP TRIGGER refuse_${e.name.replace(/\W/g, "_")}`);
    }
    // Once D1 takes it, the retry writes it, and only it.
    await advance(e, 2_000);
    expect(await engineStats(e)).toMatchObject({ outbox: 0 });
    expect((await trajectories(e.name)).map((r) => r["client_uuid"])).toEqual(["a", "b", "c", "d", "e", "refused"]);
  });

  it("sends no statement past a flush's most while it halves a batch D1 refused, leaving the rows it did not try due for the next flush", async () => {
    const e = await createEngine();
    const ids = await rollingWith(e, 100);
    const trigger = `refuse_${e.name.replace(/\W/g, "_")}`;
    await env.DB.exec(
      `CREATE TRIGGER ${trigger} BEFORE INSERT ON trajectories WHEN NEW.engine = '${e.name}' AND NEW.client_uuid = 'c-refused' BEGIN SELECT RAISE(ABORT, 'refused for its data'); END`,
    );
    try {
      for (const [i, id] of ids.entries()) {
        const client = i === 99 ? "c-refused" : `c-${id}`;
        const c = await e.as("client").claimEpisode({ client_uuid: client, discard_episode_timeout: 60 });
        expect(await e.as("client").endEpisode(endBody(client, c.episode_uuid, 1, "t"))).toEqual({ success: true });
      }
      // The last of 100 rows in one statement is refused: finding it alone takes 1 + 2 x 7 statements.
      const flushes = await runInDurableObject(e.stub, async (_i, state) => {
        const outbox = new Outbox(state.storage.sql);
        const now = Date.UTC(2100, 0, 1);
        const out: Array<{ statements: number; written: number; error: string | null; left: number; backedOff: number }> = [];
        for (let i = 0; i < 5; i++) {
          const r = await outbox.flush(env.DB, now, now, { start: 1, most: 4 });
          const backedOff = state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM outbox WHERE next_attempt_at > ?", now).one().n;
          out.push({ ...r, left: outbox.size(), backedOff });
        }
        return out;
      });
      for (const f of flushes) expect(f.statements).toBeLessThanOrEqual(4);
      // Each flush writes what its statements reach; the rows it left are due, not backed off, until the refused one stands alone.
      // The first: the 100 refused, its first 50 written, its second 50 refused, their first 25 written; then no room.
      expect(flushes[0]).toMatchObject({ statements: 4, written: 75, error: null, left: 25, backedOff: 0 });
      expect(flushes.at(-1)).toMatchObject({ left: 1, backedOff: 1 });
      expect(flushes.map((f) => f.written).reduce((a, b) => a + b, 0)).toBe(99);
    } finally {
      await env.DB.exec(`DROP TRIGGER ${trigger}`);
    }
    expect((await trajectories(e.name)).length).toBe(99);
    expect(FLUSH_STATEMENTS_MOST).toBeLessThan(1000);
  });

  it("answers end_episode while D1 is failing, keeps the record, and writes it once D1 recovers", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    await env.DB.exec("ALTER TABLE trajectories RENAME TO trajectories_away");
    try {
      await claimAndEnd(e, "a", 0.75);
      await advance(e, 1_000);
      const stats = await engineStats(e);
      expect(stats.outbox).toBe(1);
      // The failed flush is retried with backoff, by the alarm.
      expect(stats.alarm_at).toBeGreaterThan(e.clock.t);
    } finally {
      await env.DB.exec("ALTER TABLE trajectories_away RENAME TO trajectories");
    }
    await advance(e, 1_000);
    expect(await engineStats(e)).toMatchObject({ outbox: 0 });
    expect(await trajectories(e.name)).toEqual([expect.objectContaining({ episode_uuid: "ep-0", client_uuid: "a", reward: 0.75 })]);
  });

  it("shows no client D1's own words for a write it refused (they may name tables or SQL), only that it refused", async () => {
    const e = await createEngine("d1-refuses");
    await rollingWith(e, 1);
    const quiet = vi.spyOn(console, "error").mockImplementation(() => {});
    await env.DB.exec("ALTER TABLE trajectories RENAME TO trajectories_elsewhere");
    try {
      await claimAndEnd(e, "a", 1);
      await advance(e, 1_000);
      expect((await e.as("client").overview()).outbox.last_error).toBe(`D1 refused the write (its words are in the Worker's log: "writing the outbox to D1 failed")`);
      expect(quiet.mock.calls.some((c) => String(c[0]).includes("no such table: trajectories"))).toBe(true);
    } finally {
      await env.DB.exec("ALTER TABLE trajectories_elsewhere RENAME TO trajectories");
      quiet.mockRestore();
    }
  });

  it("shows an unreachable D1 in the overview: the backlog, since when, and D1's error, logged once", async () => {
    const e = await createEngine("d1-away");
    await rollingWith(e, 4);
    const setD1 = (reachable: boolean) => setEngineD1(e, reachable);
    await setD1(false);
    const logged = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      const t0 = e.clock.t;
      for (const id of ["c1", "c2", "c3"]) await claimAndEnd(e, id, 1);
      const fresh = await e.as("viewer").overview();
      expect(fresh.outbox).toEqual({ rows: 3, oldest_at: t0, last_error: null, last_error_at: null });
      // Ten minutes of failing flushes: each of these alarms finds the rows' backoff over and retries them.
      for (const wait of [1_000, 60_000, 60_000, 480_000]) await advance(e, wait);
      const lastTry = e.clock.t;
      expect(lastTry).toBe(t0 + 601_000);
      const ov = await e.as("viewer").overview();
      // D1's own words go to the log only: they may name tables or SQL, and any token reads the overview.
      expect(ov.outbox).toEqual({ rows: 3, oldest_at: t0, last_error: `D1 could not be reached (its words are in the Worker's log: "writing the outbox to D1 failed")`, last_error_at: lastTry });
      expect(logged.mock.calls.filter((c) => String(c[0]).includes(D1_ERROR))).toEqual([[`engine ${e.name}: writing the outbox to D1 failed (3 rows kept, retried with backoff): ${D1_ERROR}`]]);

      await setD1(true);
      await advance(e, 300_000);
      expect((await e.as("viewer").overview()).outbox).toEqual({ rows: 0, oldest_at: null, last_error: null, last_error_at: null });
      expect((await trajectories(e.name)).map((r) => r["client_uuid"])).toEqual(["c1", "c2", "c3"]);

      // An outage after the recovery is a change again: it is logged again.
      await setD1(false);
      await claimAndEnd(e, "c4", 1);
      await advance(e, 1_000);
      expect(logged.mock.calls.filter((c) => String(c[0]).includes(D1_ERROR))).toHaveLength(2);
    } finally {
      logged.mockRestore();
      await setD1(true);
    }
  });
});

/** What an unreachable D1 answers every batch with. */
const D1_ERROR = "D1_ERROR: Network connection lost.";

/** The engine's D1 as it is, or one whose every batch fails as an unreachable D1's does. */
function setEngineD1(e: TestEngine, reachable: boolean): Promise<void> {
  return runInDurableObject(e.stub, (instance: EngineObject) => {
    const self = instance as unknown as { env: { DB: D1Database } };
    const failing = {
      prepare: (q: string) => env.DB.prepare(q),
      batch: async () => {
        throw new Error(D1_ERROR);
      },
    } as unknown as D1Database;
    self.env = { ...self.env, DB: reachable ? env.DB : failing };
  });
}

describe("an outbox backlog across the upgrade that gave its rows an age", () => {
  it("gives the rows written before migration 19 an age from the upgrade: the overview shows how old the backlog is", async () => {
    // They kept created_at null: the overview showed a backlog of no age, and OutboxStuck
    // (time() - rx_outbox_oldest_row_timestamp_seconds) could never fire for it.
    const e = await createEngine("upgrade-age");
    await rollingWith(e, 1);
    await claimAndEnd(e, "a", 1);
    expect((await engineStats(e)).outbox).toBe(1);
    const before = Date.now();
    await runInDurableObject(e.stub, (_i, state) => {
      rewindSchema(state.storage.sql, 19);
      migrateEngine(state.storage.sql);
    });
    const { outbox } = await e.as("viewer").overview();
    expect(outbox.rows).toBe(1);
    expect(outbox.oldest_at).toBeGreaterThanOrEqual(before - 1_000);
    expect(outbox.oldest_at).toBeLessThanOrEqual(Date.now() + 1_000);
  });
});

describe("after a D1 outage", () => {
  it("writes the rows the outage held back as soon as D1 takes a write again, not a doubled backoff after newer ones", async () => {
    // Their backoff had doubled to minutes while D1 was away: D1 then held a run's later results
    // and not its earlier ones, and a list `until` a minute in the past (docs/ledger.md) was no complete set.
    const e = await createEngine("d1-back");
    await rollingWith(e, 4);
    const quiet = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      await setEngineD1(e, false);
      await claimAndEnd(e, "during-outage", 1);
      for (const wait of [1_000, 1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000]) await advance(e, wait);
      await setEngineD1(e, true);
      await claimAndEnd(e, "after", 1);
      // The new row's batch window: its flush is D1's first write since the outage, and the held row follows at once.
      await advance(e, 1_000);
      await advance(e, 0);
      expect([(await e.as("viewer").overview()).outbox.rows, (await trajectories(e.name)).map((r) => r["client_uuid"]).sort()]).toEqual([0, ["after", "during-outage"]]);
    } finally {
      quiet.mockRestore();
      await setEngineD1(e, true);
    }
  });
});

describe("reward history", () => {
  it("finalizes mean, std, count, min and max per global step, and keeps it across status changes", async () => {
    const e = await createEngine();
    await rollingWith(e, 4);
    const trainer = e.as("trainer");
    await claimAndEnd(e, "a", 1);
    await claimAndEnd(e, "b", [0, 0.5]);
    // A status change that clears episodes does not clear the accumulator or the history.
    await trainer.updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING" });
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
    await rollingWith(e, 2, { prefix: "s1", step: 1 });
    await claimAndEnd(e, "c", 0.25);
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING_POST" });
    await trainer.updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING", global_step: 2 });
    await e.as("operator").stopEngine();
    const { history } = await e.as("viewer").getRewardHistory();
    const std0 = Math.sqrt(((1 - 0.5) ** 2 + (0 - 0.5) ** 2 + 0) / 3);
    expect(history).toEqual([
      { global_step: 0, mean_reward: 0.5, std_reward: expect.closeTo(std0, 12), count: 3, min_reward: 0, max_reward: 1, timestamp: expect.any(Number) },
      { global_step: 1, mean_reward: 0.25, std_reward: 0, count: 1, min_reward: 0.25, max_reward: 0.25, timestamp: expect.any(Number) },
    ]);
    await advance(e, 1_000);
    const d1 = await env.DB.prepare("SELECT global_step, mean_reward, count, min_reward, max_reward FROM reward_history WHERE engine = ? ORDER BY seq").bind(e.name).all();
    expect(d1.results).toEqual([
      { global_step: 0, mean_reward: 0.5, count: 3, min_reward: 0, max_reward: 1 },
      { global_step: 1, mean_reward: 0.25, count: 1, min_reward: 0.25, max_reward: 0.25 },
    ]);
  });

  it("refuses rewards whose statistics would overflow, so the step still moves on, and takes the largest it accepts", async () => {
    const e = await createEngine();
    await rollingWith(e, 3);
    const c = await e.as("client").claimEpisode({ client_uuid: "a", discard_episode_timeout: 60 });
    for (const reward of [1e308, [1, -1e308], 1e15 + 1]) {
      const res = await raw(`/e/${e.name}/end_episode`, { token: e.tokens.client, body: JSON.stringify(endBody("a", c.episode_uuid, reward, "t")) });
      expect([res.status, res.json?.["detail"]]).toEqual([422, expect.stringContaining("workflow_output.reward")]);
    }
    expect(await e.as("client").endEpisode(endBody("a", c.episode_uuid, 1e15, "t"))).toEqual({ success: true });
    await claimAndEnd(e, "b", [-1e15, 1e15]);
    expect(await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 })).toEqual({ success: true, failure_reason: "" });
    const { history } = await e.as("viewer").getRewardHistory();
    expect(history).toEqual([{ global_step: 0, mean_reward: expect.closeTo(1e15 / 3, -1), std_reward: expect.any(Number), count: 3, min_reward: -1e15, max_reward: 1e15, timestamp: expect.any(Number) }]);
    expect(Number.isFinite(history[0]?.std_reward)).toBe(true);
  });

  it("counts each reward once when a step number comes back (a new run), across a restart and for eval episodes not at all", async () => {
    const e = await createEngine();
    await rollingWith(e, 6);
    const trainer = e.as("trainer");
    await claimAndEnd(e, "a", 1);
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
    await claimAndEnd(e, "b", 0.5);
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 0 });
    // Step 0 again: a's reward was counted for its first run and must not count twice.
    await claimAndEnd(e, "c", [0, 0.25]);
    const ev = await e.as("client").claimEpisode({ client_uuid: "d", episode_type: "eval", discard_episode_timeout: 60 });
    expect(await e.as("client").endEpisode(endBody("d", ev.episode_uuid, 100))).toEqual({ success: true });
    // The accumulator is read from durable rows, so a restarted engine still has it.
    await expect(runInDurableObject(e.stub, (_i, state) => state.abort("restart"))).rejects.toThrow();
    await reconnect(e);
    await trainer.updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 2 });
    // Going back to step 0 began a run of its own: the earlier run keeps its two steps.
    const current = await e.as("viewer").getRewardHistory();
    expect(current.history).toEqual([expect.objectContaining({ global_step: 0, count: 2, mean_reward: 0.125, min_reward: 0, max_reward: 0.25 })]);
    expect((await e.as("viewer").getRewardHistory({ run: current.run! - 1 })).history).toEqual([
      expect.objectContaining({ global_step: 0, count: 1, mean_reward: 1 }),
      expect.objectContaining({ global_step: 1, count: 1, mean_reward: 0.5 }),
    ]);
  });

  it("keeps what an engine accumulated before rows carried their epoch (migration 4), and counts it once", async () => {
    const e = await createEngine();
    await rollingWith(e, 2);
    await claimAndEnd(e, "a", 1);
    // As an engine at schema 3 left it: the reward in the meta's accumulator, the row without an epoch.
    await runInDurableObject(e.stub, (_i, state) => {
      const sql = state.storage.sql;
      sql.exec("UPDATE finished SET acc_epoch = NULL");
      const meta = JSON.parse(sql.exec<{ v: string }>("SELECT v FROM kv WHERE k = 'meta'").one().v) as Record<string, unknown>;
      delete meta["accEpoch"];
      sql.exec("UPDATE kv SET v = ? WHERE k = 'meta'", JSON.stringify({ ...meta, acc: { n: 1, mean: 1, m2: 0, min: 1, max: 1 } }));
    });
    // A restart in a turn of its own (an abort drops its own turn's writes), so the edited meta is read back.
    await expect(runInDurableObject(e.stub, (_i, state) => state.abort("restart"))).rejects.toThrow();
    await reconnect(e);
    expect(await runInDurableObject(e.stub, (_i, state) => state.storage.sql.exec("SELECT acc_epoch FROM finished").toArray())).toEqual([{ acc_epoch: null }]);
    await claimAndEnd(e, "b", 0);
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
    expect((await e.as("viewer").getRewardHistory()).history).toEqual([
      expect.objectContaining({ global_step: 0, count: 2, mean_reward: 0.5, min_reward: 0, max_reward: 1 }),
    ]);
  });

  it("writes no entry for a step without train rewards", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 2 });
    expect((await e.as("viewer").getRewardHistory()).history).toEqual([]);
  });
});

describe("engine status machine", () => {
  it("syncs config only while OFFLINE, starts to BOOTING, stops to OFFLINE clearing live episodes", async () => {
    const e = await createEngine();
    const op = e.as("operator");
    await expect(op.startEngine()).rejects.toMatchObject({ status: 400, code: "no_config" });
    await op.syncTrainConfig("a: 1\n");
    await op.startEngine();
    await expect(op.syncTrainConfig("a: 2\n")).rejects.toMatchObject({ status: 400, code: "engine_started" });
    // Sent again while booting (its answer lost): answered as the first, with one start command for the agent.
    expect(await op.startEngine()).toEqual({ success: true });
    expect((await e.as("trainer").pollCommands()).commands.map((c) => c.body.kind)).toEqual(["start"]);
    await rollingWith(e, 3);
    await expect(op.startEngine()).rejects.toMatchObject({ status: 409, code: "engine_started", detail: expect.stringContaining("status ENGINE.ROLLING") });
    await e.as("client").claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 });
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", engine_status_detail: "step 0 rolling", global_step: 0 });
    expect(await op.getEngineStatus()).toEqual({ engine_status: "ENGINE.ROLLING", engine_status_detail: "step 0 rolling", global_step: 0 });
    await op.stopEngine();
    expect((await op.getEngineStatus()).engine_status).toBe("ENGINE.OFFLINE");
    expect(await engineStats(e)).toMatchObject({ registered: 0, claimed: 0, alarm_at: expect.any(Number) });
    expect((await e.as("viewer").getEpisodeBuffer()).buffer).toEqual([]);
    await op.syncTrainConfig("a: 2\n");
  });

  it("leaving the rolling statuses clears episodes, as the trainer expects", async () => {
    const e = await createEngine();
    await rollingWith(e, 2);
    await e.as("client").claimEpisode({ client_uuid: "c", discard_episode_timeout: 60 });
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING_POST" });
    expect(await engineStats(e)).toMatchObject({ registered: 1, claimed: 1 });
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING" });
    expect(await engineStats(e)).toMatchObject({ registered: 0, claimed: 0 });
    // The lease alarm of the cleared claim fires harmlessly.
    await advance(e, 60_000);
    expect(await engineStats(e)).toMatchObject({ registered: 0, claimed: 0, resetting: 0 });
  });
});

describe("an end_episode that fails half-way", () => {
  /**
   * An engine with two episodes, ep-0 claimed by "a". Ending that claim will fail after the
   * claim's delete: a finished row already holds its fence. No path of the engine writes one; it
   * stands in for a storage error half-way through.
   */
  async function poisonedClaim() {
    const e = await createEngine();
    await rollingWith(e, 2);
    const c = await e.as("client").claimEpisode({ client_uuid: "a", discard_episode_timeout: 60 });
    const poison = "INSERT INTO finished (episode_uuid, fence, client_uuid, task_id, episode_type, ended_at, delivery) VALUES (?, ?, 'x', 'x', 'train', 0, 'none')";
    await runInDurableObject(e.stub, (_i, state) => void state.storage.sql.exec(poison, c.episode_uuid, c.fence));
    return { e, c };
  }

  it("keeps nothing of it: the claim stays live, nothing goes to D1, and ending it again counts once", async () => {
    const { e, c } = await poisonedClaim();
    const client = e.as("client");
    const failed = await raw(`/e/${e.name}/end_episode`, { token: e.tokens.client, body: JSON.stringify(endBody("a", c.episode_uuid, 1, "task-1", { fence: c.fence })) });
    // The storage error stays in the log: the answer names only an id to find it by.
    expect(failed).toMatchObject({ status: 500, json: { error: "internal_error", detail: expect.stringMatching(/error id [0-9a-f-]{36}/) } });
    expect(failed.text).not.toContain("UNIQUE constraint failed");
    // The engine broke itself (ctx.abort) so that none of the turn's writes committed.
    await reconnect(e);

    const after = await runInDurableObject(e.stub, (_i, state) => {
      state.storage.sql.exec("DELETE FROM finished WHERE client_uuid = 'x'");
      return state.storage.sql.exec<{ state: string; fence: number }>("SELECT state, fence FROM episodes WHERE episode_uuid = ?", c.episode_uuid).toArray();
    });
    expect(after).toEqual([{ state: "claimed", fence: c.fence }]);
    expect(await engineStats(e)).toMatchObject({ claimed: 1, registered: 1, outbox: 0 });

    expect(await client.endEpisode(endBody("a", c.episode_uuid, 1, "task-1", { fence: c.fence }))).toEqual({ success: true });
    expect(await engineStats(e)).toMatchObject({ claimed: 0, registered: 1, outbox: 1 });
    await e.as("trainer").updateEngineStatus({ engine_status: "ENGINE.ROLLING", global_step: 1 });
    expect((await e.as("viewer").getRewardHistory()).history).toEqual([expect.objectContaining({ global_step: 0, count: 1, mean_reward: 1 })]);
  });

  it("takes the writes that shared its commit down with it, and none of their callers is told success", async () => {
    const { e, c } = await poisonedClaim();
    // Called in one go, the three wait for the same shared turn: the register and the claim
    // write first, then the end fails half-way and the engine breaks itself.
    const group = runInDurableObject(e.stub, (inst: EngineObject) =>
      Promise.allSettled([
        inst.registerEpisode(ADMIN, RegisterEpisodeRequest.parse({ episode_uuid: "ep-new" })),
        inst.claimEpisode(ADMIN, ClaimEpisodeRequest.parse({ client_uuid: "b", discard_episode_timeout: 60 }), ORIGIN),
        inst.endEpisode(ADMIN, EndEpisodeRequest.parse(endBody("a", c.episode_uuid, 1, "task-1", { fence: c.fence }))),
      ]),
    );
    // The register's and the claim's answers were held for the commit that never came.
    await expect(group).rejects.toThrow();
    await reconnect(e);
    const rows = await runInDurableObject(e.stub, (_i, state) => {
      state.storage.sql.exec("DELETE FROM finished WHERE client_uuid = 'x'");
      return state.storage.sql.exec<{ episode_uuid: string; state: string; client_uuid: string }>("SELECT episode_uuid, state, client_uuid FROM episodes ORDER BY episode_uuid").toArray();
    });
    expect(rows).toEqual([
      { episode_uuid: "ep-0", state: "claimed", client_uuid: "a" },
      { episode_uuid: "ep-1", state: "registered", client_uuid: "" },
    ]);
    expect(await engineStats(e)).toMatchObject({ claimed: 1, registered: 1, outbox: 0 });
  });
});

describe("group commit", () => {
  it("runs register, end and claim in the next shared turn, in the order they came, not at once", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const c = await e.as("client").claimEpisode({ client_uuid: "a", discard_episode_timeout: 60 });
    const seen = await runInDurableObject(e.stub, async (inst: EngineObject, state) => {
      const rows = () => state.storage.sql.exec<{ episode_uuid: string; state: string }>("SELECT episode_uuid, state FROM episodes ORDER BY episode_uuid").toArray();
      const calls = [
        inst.registerEpisode(ADMIN, RegisterEpisodeRequest.parse({ episode_uuid: "ep-new" })),
        inst.endEpisode(ADMIN, EndEpisodeRequest.parse(endBody("a", c.episode_uuid, 1, "task-1", { fence: c.fence }))),
        inst.claimEpisode(ADMIN, ClaimEpisodeRequest.parse({ client_uuid: "b", discard_episode_timeout: 60 }), ORIGIN),
      ];
      const before = rows();
      const answers = await Promise.all(calls);
      return { before, answers, after: rows() };
    });
    // When the three calls returned, none had written: each waits for the shared turn.
    expect(seen.before).toEqual([{ episode_uuid: "ep-0", state: "claimed" }]);
    // In that turn they ran in the order they came: the claim took the episode registered just before it.
    expect(seen.answers.map((a) => a.ok && a.body.success)).toEqual([true, true, true]);
    expect(seen.answers[2]).toMatchObject({ ok: true, body: { episode_uuid: "ep-new" } });
    expect(seen.after).toEqual([{ episode_uuid: "ep-new", state: "claimed" }]);
  });

  it("answers every one of many concurrent claims, ends and registers, and keeps them all across a restart", async () => {
    const e = await createEngine();
    await rollingWith(e, 40);
    const client = e.as("client");
    const claims = await Promise.all(Array.from({ length: 40 }, (_, i) => client.claimEpisode({ client_uuid: `c${i}`, discard_episode_timeout: 60 })));
    expect(new Set(claims.map((c) => c.episode_uuid)).size).toBe(40);
    const ends = await Promise.all(claims.map((c, i) => client.endEpisode(endBody(`c${i}`, c.episode_uuid, i, "task-1", { fence: c.fence }))));
    expect(ends.every((r) => r.success)).toBe(true);
    const trainer = e.as("trainer");
    const regs = await Promise.all(Array.from({ length: 40 }, (_, i) => trainer.registerEpisode({ episode_uuid: `again-${i}` })));
    expect(regs.every((r) => r.success)).toBe(true);
    // A new instance reads only what was committed.
    await reconnect(e);
    expect(await engineStats(e)).toMatchObject({ claimed: 0, registered: 40, outbox: 40 });
  });
});
