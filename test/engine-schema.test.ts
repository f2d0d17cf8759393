import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { ENGINE_DDL, ENGINE_MIGRATIONS, migrateEngine } from "../src/engine/schema";

describe("engine schema migrations", () => {
  it("upgrades an engine created by the first schema, once", async () => {
    const stub = env.ENGINE.get(env.ENGINE.idFromName("schema-upgrade"));
    const schema = await runInDurableObject(stub, (_i, state) => {
      const sql = state.storage.sql;
      // The tables as the first version created them (ENGINE_DDL), holding a row.
      for (const t of ["episodes", "finished", "commands", "outbox"]) sql.exec(`DROP TABLE ${t}`);
      sql.exec(ENGINE_DDL);
      sql.exec("INSERT INTO finished VALUES ('old', 1, 'c', 't', 'train', 1, 'none', '')");
      sql.exec("INSERT INTO episodes (episode_uuid, state, queue_seq, openai_base_url, openai_api_key, zmq_addr, last_activity, fence) VALUES ('ep', 'registered', 7, 'u', 'k', '', 1, 3)");
      sql.exec("INSERT INTO outbox (kind, payload, next_attempt_at) VALUES ('trajectory', '{}', 5)");
      sql.exec("UPDATE kv SET v = '0' WHERE k = 'schema_version'");
      expect(migrateEngine(sql)).toBe(ENGINE_MIGRATIONS.length);
      expect(migrateEngine(sql)).toBe(ENGINE_MIGRATIONS.length);
      const names = (t: string) => sql.exec<{ name: string }>(`SELECT name FROM pragma_table_info('${t}')`).toArray().map((r) => r.name);
      return {
        columns: [...names("finished"), ...names("commands")],
        withoutRowid: sql.exec<{ name: string; wr: number }>("SELECT name, wr FROM pragma_table_list WHERE name IN ('episodes', 'finished', 'outbox') ORDER BY name").toArray(),
        autoincrement: sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM sqlite_schema WHERE name = 'outbox' AND sql LIKE '%AUTOINCREMENT%'").one().n,
        indexes: sql.exec<{ name: string }>("SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name IN ('episodes', 'outbox') AND sql IS NOT NULL ORDER BY name").toArray().map((r) => r.name),
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
    expect(schema.rows).toEqual([
      [{ episode_uuid: "ep", state: "registered", queue_seq: 7, fence: 3 }],
      [{ episode_uuid: "old", fence: 1, client_uuid: "c" }],
      [{ kind: "trajectory", payload: "{}", next_attempt_at: 5 }],
    ]);
  });
});
