import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { SESSION_MEMORY_MS } from "../src/engine/buffer-outcomes";
import { BUFFER_DDL, ENGINE_DDL, ENGINE_MIGRATIONS, migrateEngine } from "../src/engine/schema";

describe("engine schema migrations", () => {
  it("upgrades an engine created by the first schema, once", async () => {
    const stub = env.ENGINE.get(env.ENGINE.idFromName("schema-upgrade"));
    const schema = await runInDurableObject(stub, (_i, state) => {
      const sql = state.storage.sql;
      // The tables as the first version created them (ENGINE_DDL), holding a row.
      // (history_runs came later, with migration 6, which makes it again; atropos_groups with 9; ends_before_sync with 11.)
      for (const t of ["episodes", "finished", "commands", "outbox", "buf_groups", "buf_sessions", "buf_steps", "buf_pulls", "failed_rollouts", "history_runs", "atropos_groups", "ends_before_sync"]) sql.exec(`DROP TABLE ${t}`);
      sql.exec(ENGINE_DDL);
      sql.exec(BUFFER_DDL);
      sql.exec("INSERT INTO finished VALUES ('old', 1, 'c', 't', 'train', 1, 'none', '')");
      sql.exec("INSERT INTO episodes (episode_uuid, state, queue_seq, openai_base_url, openai_api_key, zmq_addr, last_activity, fence) VALUES ('ep', 'registered', 7, 'u', 'k', '', 1, 3)");
      sql.exec("INSERT INTO outbox (kind, payload, next_attempt_at) VALUES ('trajectory', '{}', 5)");
      // A delivered group whose pull is kept: one session with its steps, one whose steps went (it never completed).
      sql.exec("INSERT INTO buf_groups (group_id, state, completed_sessions, last_row_at, pull_cursor) VALUES ('g', 'delivered', 1, 9, 1)");
      sql.exec("INSERT INTO buf_sessions (session_id, group_id, completed) VALUES ('done', 'g', 1), ('open', 'g', 0)");
      // A delivered group whose pull went, a dropped one, and a pending one, none with steps left.
      sql.exec("INSERT INTO buf_groups (group_id, state, last_row_at) VALUES ('old', 'delivered', 100), ('gone', 'dropped', 200), ('live', 'pending', 300)");
      for (const i of [0, 1, 2]) {
        sql.exec("INSERT INTO buf_steps (uid, session_id, step_index, group_id, messages, response, reward, truncated, is_session_completed, weight_version, extra, created_at) VALUES (?, 'done', ?, 'g', '[]', '', 1, 0, ?, 0, '{}', 9)", `u${i}`, i, i === 2 ? 1 : 0);
      }
      sql.exec("UPDATE kv SET v = '0' WHERE k = 'schema_version'");
      expect(migrateEngine(sql)).toBe(ENGINE_MIGRATIONS.length);
      expect(migrateEngine(sql)).toBe(ENGINE_MIGRATIONS.length);
      const names = (t: string) => sql.exec<{ name: string }>(`SELECT name FROM pragma_table_info('${t}')`).toArray().map((r) => r.name);
      return {
        columns: [...names("finished"), ...names("commands")],
        withoutRowid: sql.exec<{ name: string; wr: number }>("SELECT name, wr FROM pragma_table_list WHERE name IN ('episodes', 'finished', 'outbox') ORDER BY name").toArray(),
        autoincrement: sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM sqlite_schema WHERE name = 'outbox' AND sql LIKE '%AUTOINCREMENT%'").one().n,
        indexes: sql.exec<{ name: string }>("SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name IN ('episodes', 'outbox') AND sql IS NOT NULL ORDER BY name").toArray().map((r) => r.name),
        bufferColumns: [...names("buf_sessions"), ...names("buf_groups")],
        bufferIndexes: sql.exec<{ name: string }>("SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'buf_groups' AND sql IS NOT NULL ORDER BY name").toArray().map((r) => r.name),
        sessions: sql.exec("SELECT session_id, group_id, completed, max_step FROM buf_sessions ORDER BY session_id").toArray(),
        groupsExpire: sql.exec("SELECT group_id, sessions_expire_at FROM buf_groups ORDER BY group_id").toArray(),
        groupsV8: sql.exec("SELECT group_id, failed_sessions, partial, first_row_at, ready_at FROM buf_groups ORDER BY group_id").toArray(),
        columnsV8: [...names("episodes"), ...names("buf_pulls"), ...names("buf_sessions")],
        failedRollouts: sql.exec("SELECT COUNT(*) AS n FROM failed_rollouts").one().n,
        bufferCounters: JSON.parse(sql.exec<{ v: string }>("SELECT v FROM kv WHERE k = 'buffer_counters'").one().v) as unknown,
        rows: [
          sql.exec("SELECT episode_uuid, state, queue_seq, fence FROM episodes").toArray(),
          sql.exec("SELECT episode_uuid, fence, client_uuid FROM finished").toArray(),
          sql.exec("SELECT kind, payload, next_attempt_at FROM outbox").toArray(),
        ],
      };
    });
    expect(schema.columns).toEqual(expect.arrayContaining(["global_step", "reward", "leased_by", "acc_epoch", "reward_values"]));
    // Migration 3: the hot tables keyed by their own text key, the outbox without sqlite_sequence.
    expect(schema.withoutRowid).toEqual([
      { name: "episodes", wr: 1 },
      { name: "finished", wr: 1 },
      { name: "outbox", wr: 0 },
    ]);
    expect(schema.autoincrement).toBe(0);
    expect(schema.indexes).toEqual(["episodes_lease", "episodes_queue", "episodes_resetting", "outbox_due"]);
    // Migration 5: sessions remember their highest stored step (none for one whose steps went), and groups when to forget them.
    expect(schema.bufferColumns).toEqual(expect.arrayContaining(["max_step", "sessions_expire_at"]));
    expect(schema.bufferIndexes).toEqual(["buf_groups_pull", "buf_groups_ready", "buf_groups_sessions_expire", "buf_groups_ttl"]);
    expect(schema.sessions).toEqual([
      { session_id: "done", group_id: "g", completed: 1, max_step: 2 },
      { session_id: "open", group_id: "g", completed: 0, max_step: null },
    ]);
    // Migration 7: decided groups with no kept pull are forgotten, rows and all, 7 days after their last row.
    expect(schema.groupsExpire).toEqual([
      { group_id: "g", sessions_expire_at: null },
      { group_id: "gone", sessions_expire_at: 200 + SESSION_MEMORY_MS },
      { group_id: "live", sessions_expire_at: null },
      { group_id: "old", sessions_expire_at: 100 + SESSION_MEMORY_MS },
    ]);
    // Migration 8: failed sessions, partial groups, when a group began (its last row, for groups made before) and became ready.
    expect(schema.groupsV8).toEqual([
      { group_id: "g", failed_sessions: 0, partial: 0, first_row_at: 9, ready_at: null },
      { group_id: "gone", failed_sessions: 0, partial: 0, first_row_at: 200, ready_at: null },
      { group_id: "live", failed_sessions: 0, partial: 0, first_row_at: 300, ready_at: null },
      { group_id: "old", failed_sessions: 0, partial: 0, first_row_at: 100, ready_at: null },
    ]);
    expect(schema.columnsV8).toEqual(expect.arrayContaining(["claim_weight_version", "report", "failed"]));
    // Migration 12: an episode remembers a registration that arrived during its runner's reset.
    expect(schema.columnsV8).toEqual(expect.arrayContaining(["registered_again"]));
    // Migration 17: a claim remembers the token that made it (none for the rows from before).
    expect(schema.columnsV8).toEqual(expect.arrayContaining(["claimed_by"]));
    expect(schema.columns).toContain("failed");
    expect(schema.failedRollouts).toBe(0);
    // Migration 16: the buffer's byte counters, from its rows ('[]', '' and '{}': 4 bytes each), all of a delivered group's.
    expect(schema.bufferCounters).toEqual({ storedBytes: 12, keptBytes: 12 });
    expect(schema.rows).toEqual([
      [{ episode_uuid: "ep", state: "registered", queue_seq: 7, fence: 3 }],
      [{ episode_uuid: "old", fence: 1, client_uuid: "c" }],
      [{ kind: "trajectory", payload: "{}", next_attempt_at: 5 }],
    ]);
  });
});
