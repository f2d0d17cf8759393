/**
 * D1 is one SQLite database for every engine of a deployment: trajectories, recorded calls and
 * runs grow with each engine's whole history. The queries of paths that answer a page, or run on
 * every poll, must seek an index to their rows, not walk every row of the engine and check each.
 * Each test takes the SQL the code itself binds (test/support/recording-d1.ts) and asks SQLite for
 * its plan against the real schema.
 */
import { env } from "cloudflare:workers";
import { drizzle } from "drizzle-orm/d1";
import { describe, expect, it } from "vitest";
import { countTrajectories, summaryPage } from "../src/ledger/read";
import { recordCalls } from "../src/ledger/ingest";
import { activeRun, activeRuns } from "../src/runs/run-store";
import type { Db } from "../src/runs/config-store";
import { batchOf, callRecord } from "./support/ledger";
import { planOf, recordingD1 } from "./support/recording-d1";

const ENGINE = "plan-engine";

/** The plan of the one statement `f` sends. */
async function planOfOne(f: (db: D1Database) => Promise<unknown>): Promise<string[]> {
  const { db, bound } = recordingD1();
  await f(db);
  expect(bound.map((b) => b.sql)).toHaveLength(1);
  return planOf(bound[0]!);
}

/** How the plan reaches the trajectories (aliased t): one step, which must seek by `wanted`. */
function seeksTrajectories(plan: string[], wanted: RegExp): void {
  const access = plan.filter((d) => /^(SEARCH|SCAN) t\b/.test(d));
  expect(access, plan.join("\n")).toHaveLength(1);
  expect(access[0], plan.join("\n")).toMatch(wanted);
}

describe("the trajectory list's and the export's queries", () => {
  it("seek a step of a run (the dashboard's chart), a step, a task: not every trajectory of the run or the engine", async () => {
    seeksTrajectories(await planOfOne((db) => summaryPage(db, ENGINE, { run: 2, global_step: 7 }, undefined, 50)), /^SEARCH t USING .*global_step=\?/);
    seeksTrajectories(await planOfOne((db) => summaryPage(db, ENGINE, { global_step: 7 }, undefined, 50)), /^SEARCH t USING .*global_step=\?/);
    seeksTrajectories(await planOfOne((db) => summaryPage(db, ENGINE, { task_id: "task-1" }, undefined, 50)), /^SEARCH t USING .*task_id=\?/);
    // The export's total, for its progress bar.
    seeksTrajectories(await planOfOne((db) => countTrajectories(db, ENGINE, { run: 2, global_step: 7 })), /^SEARCH t USING .*global_step=\?/);
  });

  it("seek a page after the first from its cursor, not from the newest trajectory (an export is 500 pages)", async () => {
    for (const [i, ended] of [[1, 1000], [2, 2000]] as const) {
      await env.DB.prepare("INSERT INTO trajectories (engine, episode_uuid, fence, client_uuid, task_id, episode_type, workflow_output, ended_at, run) VALUES (?, ?, 1, 'c', 't', 'train', '{}', ?, 2)")
        .bind(ENGINE, `ep-${i}`, ended)
        .run();
    }
    for (const filters of [{}, { run: 2 }]) {
      const first = await summaryPage(env.DB, ENGINE, filters, undefined, 1);
      if ("ok" in first || first.next === null) throw new Error(`no cursor: ${JSON.stringify(first)}`);
      expect(first.rows.map((r) => r.episode_uuid)).toEqual(["ep-2"]);
      seeksTrajectories(await planOfOne((db) => summaryPage(db, ENGINE, filters, first.next ?? undefined, 200)), /ended_at<\?/);
      // And the page is the rest, as before.
      const second = await summaryPage(env.DB, ENGINE, filters, first.next, 200);
      expect("ok" in second ? second : second.rows.map((r) => r.episode_uuid)).toEqual(["ep-1"]);
    }
  });
});

describe("other queries on paths that run often", () => {
  it("a batch's recorded calls, checked after a delete began, are found by their keys, not among every call of the engine and its archives", async () => {
    const { db, bound } = recordingD1();
    const batch = batchOf([callRecord({ episode: "ep-plan", fence: 1, client: "c1" }, { capture: "messages", body: { messages: [{ role: "user", content: "hello" }], answer: { role: "assistant", content: "hi" } } })], "batch-plan-0001");
    // No such engine: the insert records nothing and the engine is not live, so the object's names are looked for.
    expect(await recordCalls(db, env.LEDGER, { name: "plan-gone", incarnation: "inc", checkedAt: Date.now() }, batch, Date.now())).toBeNull();
    const named = bound.find((b) => /^SELECT 1 FROM llm_calls\b/.test(b.sql));
    expect(named, bound.map((b) => b.sql).join("\n---\n")).toBeDefined();
    const plan = await planOf(named!);
    const onCalls = plan.filter((d) => /^(SEARCH|SCAN) llm_calls\b/.test(d));
    expect(onCalls.length, plan.join("\n")).toBeGreaterThan(0);
    for (const d of onCalls) expect(d, plan.join("\n")).toMatch(/\(engine=\? AND call_id=\?\)/);
  });

  it("an engine's active run is found through the index of active runs, not among every run it had (GET /runs, the agent's poll)", async () => {
    for (const find of [activeRun, activeRuns]) {
      const plan = await planOfOne((db) => find(drizzle(db) as unknown as Db, ENGINE));
      expect(plan.join("\n")).toMatch(/^SEARCH runs USING (COVERING )?INDEX runs_one_active_idx\b/m);
    }
  });
});
