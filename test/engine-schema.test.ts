import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { ENGINE_DDL, ENGINE_MIGRATIONS, migrateEngine } from "../src/engine/schema";

describe("engine schema migrations", () => {
  it("upgrades an engine created by the first schema, once", async () => {
    const stub = env.ENGINE.get(env.ENGINE.idFromName("schema-upgrade"));
    const columns = await runInDurableObject(stub, (_i, state) => {
      const sql = state.storage.sql;
      // The tables as the first version created them (ENGINE_DDL), holding a row.
      sql.exec("DROP TABLE finished");
      sql.exec("DROP TABLE commands");
      sql.exec(ENGINE_DDL);
      sql.exec("INSERT INTO finished VALUES ('old', 1, 'c', 't', 'train', 1, 'none', '')");
      sql.exec("UPDATE kv SET v = '0' WHERE k = 'schema_version'");
      expect(migrateEngine(sql)).toBe(ENGINE_MIGRATIONS.length);
      expect(migrateEngine(sql)).toBe(ENGINE_MIGRATIONS.length);
      const names = (t: string) => sql.exec<{ name: string }>(`SELECT name FROM pragma_table_info('${t}')`).toArray().map((r) => r.name);
      return [...names("finished"), ...names("commands")];
    });
    expect(columns).toEqual(expect.arrayContaining(["global_step", "reward", "leased_by"]));
  });
});
