import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { ENGINE_MIGRATIONS, migrateEngine } from "../src/engine/schema";

describe("engine schema migrations", () => {
  it("upgrades an engine created before finished episodes kept their step and reward", async () => {
    const stub = env.ENGINE.get(env.ENGINE.idFromName("schema-upgrade"));
    const columns = await runInDurableObject(stub, (_i, state) => {
      const sql = state.storage.sql;
      sql.exec("DROP TABLE finished");
      sql.exec(`CREATE TABLE finished (episode_uuid TEXT NOT NULL, fence INTEGER NOT NULL, client_uuid TEXT NOT NULL, task_id TEXT NOT NULL,
        episode_type TEXT NOT NULL, ended_at INTEGER NOT NULL, delivery TEXT NOT NULL, delivery_detail TEXT NOT NULL DEFAULT '', PRIMARY KEY (episode_uuid, fence))`);
      sql.exec("INSERT INTO finished VALUES ('old', 1, 'c', 't', 'train', 1, 'none', '')");
      sql.exec("UPDATE kv SET v = '0' WHERE k = 'schema_version'");
      expect(migrateEngine(sql)).toBe(ENGINE_MIGRATIONS.length);
      expect(migrateEngine(sql)).toBe(ENGINE_MIGRATIONS.length);
      return sql.exec<{ name: string }>("SELECT name FROM pragma_table_info('finished')").toArray().map((r) => r.name);
    });
    expect(columns).toEqual(expect.arrayContaining(["global_step", "reward"]));
  });
});
