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
