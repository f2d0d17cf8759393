/**
 * D1 migrations applied to a database that already holds rows, the way a deployment meets them:
 * the files up to one migration first, rows written under that schema, then the rest. The
 * Worker's own tests start from an empty database, which would not notice a migration that
 * loses or refuses what is already there.
 */
import { copyFileSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REPO_ROOT } from "../scripts/local/exchange";
import { applyMigrations } from "../scripts/local/migrations";

const MIGRATIONS = join(REPO_ROOT, "migrations");

let mf: Miniflare;
let dir: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "rollout-d1-migrations-"));
  const script = "export default { fetch() { return new Response(null, { status: 204 }); } };";
  mf = new Miniflare({
    workers: [
      {
        config: {
          name: "d1-only",
          compatibilityDate: "2026-01-01",
          env: { DB: { type: "d1", id: "DB" } },
          manifest: { mainModule: "index.js", modulesRoot: "/", modules: { "index.js": { type: "esm", contents: script } } },
        },
      },
    ],
  });
  await mf.ready;
});

afterAll(async () => {
  await mf?.dispose();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Copies the migration files whose names sort before `upTo` (all of them for null) into `dir`. */
function stage(upTo: string | null): void {
  for (const f of readdirSync(MIGRATIONS).filter((f) => f.endsWith(".sql") && (upTo === null || f < upTo))) copyFileSync(join(MIGRATIONS, f), join(dir, f));
}

const stepRow = (uid: string, session: string, group: string) => [
  "e1", uid, session, 0, group, 1, 0.5, 0, 1, 3, '[{"role":"user","content":"hi"}]', "ok", "{}", 1_700_000_000_000,
];
const INSERT_STEP =
  "INSERT INTO buffer_steps (engine, uid, session_id, step_index, group_id, run, reward, truncated, is_session_completed, weight_version, messages, response, extra, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

describe("0008: buffer_steps keyed by the engine's uid", () => {
  it("keeps the rows written before it, and then takes a second life of a session beside its first", async () => {
    const db = await mf.getD1Database("DB");
    stage("0008");
    expect(await applyMigrations(db, dir)).toHaveLength(8);
    await db.batch([db.prepare(INSERT_STEP).bind(...stepRow("u1", "s1", "g1")), db.prepare(INSERT_STEP).bind(...stepRow("u2", "s2", "g1"))]);
    // Under the old key the session's new life is the same row: the outbox's ON CONFLICT DO NOTHING dropped it.
    await expect(db.prepare(INSERT_STEP).bind(...stepRow("u3", "s1", "g9")).run()).rejects.toThrow(/UNIQUE constraint failed/);

    // Up to 0008 alone: the later migrations have their own cases, or need none (an index).
    stage("0009");
    expect(await applyMigrations(db, dir)).toEqual(["0008_buffer_steps_by_uid.sql"]);
    await db.prepare(INSERT_STEP).bind(...stepRow("u3", "s1", "g9")).run();
    const rows = await db.prepare("SELECT uid, session_id, group_id, messages FROM buffer_steps ORDER BY uid").all();
    expect(rows.results).toEqual([
      { uid: "u1", session_id: "s1", group_id: "g1", messages: '[{"role":"user","content":"hi"}]' },
      { uid: "u2", session_id: "s2", group_id: "g1", messages: '[{"role":"user","content":"hi"}]' },
      { uid: "u3", session_id: "s1", group_id: "g9", messages: '[{"role":"user","content":"hi"}]' },
    ]);
    // A retried outbox write of the same row is still one row.
    await db.prepare(`${INSERT_STEP} ON CONFLICT DO NOTHING`).bind(...stepRow("u3", "s1", "g9")).run();
    expect((await db.prepare("SELECT COUNT(*) AS n FROM buffer_steps").first<{ n: number }>())?.n).toBe(3);
    // The group index the engine's delete and readers use came back with the table.
    const indexes = await db.prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'buffer_steps' AND name NOT LIKE 'sqlite_%'").all();
    expect(indexes.results).toEqual([{ name: "buffer_steps_group_idx" }]);
  });
});

describe("0011: archives, backfilled", () => {
  it("records every history kept under an archive name before it, with its engine, time and calls' incarnation, and nothing else", async () => {
    const db = await mf.getD1Database("DB");
    // Whatever the cases before left applied, up to 0011.
    stage("0011");
    await applyMigrations(db, dir);
    const trajectory = (engine: string) =>
      db
        .prepare("INSERT INTO trajectories (engine, episode_uuid, fence, client_uuid, task_id, episode_type, workflow_output, ended_at) VALUES (?, 'ep', 1, 'c', 't', 'train', '{}', 1)")
        .bind(engine);
    const call = (engine: string, id: string, key: string) =>
      db
        .prepare(
          `INSERT INTO llm_calls (engine, call_id, episode_uuid, fence, run, client_uuid, task_id, endpoint, model, stream, admitted_at, started_at, done_at, status, truncated, body_key, body_offset, body_length)
           VALUES (?, ?, 'ep', 1, 1, 'c', 't', '/v1/chat/completions', 'm', 0, 1, 1, 1, 200, 0, ?, 0, 1)`,
        )
        .bind(engine, id, key);
    const run = (engine: string, id: string) =>
      db
        .prepare("INSERT INTO runs (id, engine, environment, environment_file, status, config_yaml, edits, created_at, updated_at) VALUES (?, ?, 'env', 'f', 'stopped', '', '{}', 1, 1)")
        .bind(id, engine);
    await db.batch([
      // An archive with trajectories and calls (of one incarnation), another with a run only, and live engines.
      trajectory("nightly@1735689600000"),
      call("nightly@1735689600000", "c1", "ledger/nightly/inc-a/2025-01-01/b-0.jsonl"),
      call("nightly@1735689600000", "c2", "ledger/nightly/inc-a/2025-01-01/b-1.jsonl"),
      run("other@1735776000000", "r1"),
      trajectory("nightly"),
      call("nightly", "c1", "ledger/nightly/inc-b/2025-01-02/b-0.jsonl"),
      run("other", "r2"),
    ]);

    stage("0012");
    expect(await applyMigrations(db, dir)).toEqual(["0011_archives.sql"]);
    const rows = await db.prepare("SELECT name, from_engine, body_prefix, created_at FROM archives ORDER BY name").all();
    expect(rows.results).toEqual([
      { name: "nightly@1735689600000", from_engine: "nightly", body_prefix: "ledger/nightly/inc-a/", created_at: 1735689600000 },
      { name: "other@1735776000000", from_engine: "other", body_prefix: null, created_at: 1735776000000 },
    ]);
  });
});

describe("0012: usage details", () => {
  it("adds the columns to the calls already recorded, not known on each", async () => {
    const db = await mf.getD1Database("DB");
    const before = await db.prepare("SELECT COUNT(*) AS n FROM llm_calls").first<{ n: number }>();
    expect(before?.n).toBeGreaterThan(0);
    stage("0013");
    expect(await applyMigrations(db, dir)).toEqual(["0012_usage_details.sql"]);
    const rows = await db.prepare("SELECT call_id, prompt_tokens, cached_tokens, reasoning_tokens FROM llm_calls").all<{ cached_tokens: number | null; reasoning_tokens: number | null }>();
    expect(rows.results.length).toBe(before?.n);
    expect(rows.results.every((r) => r.cached_tokens === null && r.reasoning_tokens === null)).toBe(true);
  });
});

describe("0013: a call's episode type", () => {
  it("adds the column to the calls already recorded, null on each (they read as train)", async () => {
    const db = await mf.getD1Database("DB");
    const before = await db.prepare("SELECT COUNT(*) AS n FROM llm_calls").first<{ n: number }>();
    expect(before?.n).toBeGreaterThan(0);
    stage("0014");
    expect(await applyMigrations(db, dir)).toEqual(["0013_llm_calls_episode_type.sql"]);
    const rows = await db.prepare("SELECT episode_type FROM llm_calls").all<{ episode_type: string | null }>();
    expect(rows.results.length).toBe(before?.n);
    expect(rows.results.every((r) => r.episode_type === null)).toBe(true);
  });
});

describe("0014: which way an engine's delete began", () => {
  it("adds the column to the engines already there, null on each: a delete under way then takes its repeat's word", async () => {
    const db = await mf.getD1Database("DB");
    await db.prepare("INSERT INTO engines (name, created_at, deleting_since) VALUES ('half-deleted', 1, 1700000000000), ('live', 2, NULL)").run();
    stage("0015");
    expect(await applyMigrations(db, dir)).toEqual(["0014_engines_deleting_keeps_history.sql"]);
    const rows = await db.prepare("SELECT name, deleting_since, deleting_keeps_history FROM engines WHERE name IN ('half-deleted', 'live') ORDER BY name").all();
    expect(rows.results).toEqual([
      { name: "half-deleted", deleting_since: 1700000000000, deleting_keeps_history: null },
      { name: "live", deleting_since: null, deleting_keeps_history: null },
    ]);
  });
});

describe("0015: the trajectory list's filters by step and task have indexes of their own", () => {
  it("replaces the step and run indexes, the trajectories already there kept and found by them", async () => {
    const db = await mf.getD1Database("DB");
    await db
      .prepare("INSERT INTO trajectories (engine, episode_uuid, fence, client_uuid, task_id, episode_type, workflow_output, ended_at, run, global_step) VALUES ('m15', 'a', 1, 'c', 'task-a', 'train', '{}', 10, NULL, 3), ('m15', 'b', 1, 'c', 'task-b', 'train', '{}', 20, 2, 3)")
      .run();
    stage(null);
    expect(await applyMigrations(db, dir)).toEqual(["0015_trajectory_filter_indexes.sql"]);
    const indexes = await db.prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'trajectories' AND name LIKE 'trajectories_%' ORDER BY name").all<{ name: string }>();
    expect(indexes.results.map((r) => r.name)).toEqual([
      "trajectories_claim_idx",
      "trajectories_ended_idx",
      "trajectories_run_ended_idx",
      "trajectories_run_step_ended_idx",
      "trajectories_step_ended_idx",
      "trajectories_task_ended_idx",
    ]);
    const byRunStep = await db.prepare("SELECT episode_uuid FROM trajectories INDEXED BY trajectories_run_step_ended_idx WHERE engine = 'm15' AND COALESCE(run, 1) = 1 AND global_step = 3").all();
    expect(byRunStep.results).toEqual([{ episode_uuid: "a" }]);
    const byTask = await db.prepare("SELECT episode_uuid FROM trajectories INDEXED BY trajectories_task_ended_idx WHERE engine = 'm15' AND task_id = 'task-b'").all();
    expect(byTask.results).toEqual([{ episode_uuid: "b" }]);
  });
});
