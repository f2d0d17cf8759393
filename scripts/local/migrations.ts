/**
 * Applies a D1 database's pending migrations the way `wrangler d1 migrations apply` does:
 * every `*.sql` file of the migrations directory, in name order, that is not yet recorded in
 * the migrations table (`d1_migrations` unless wrangler.toml names another) is run, and
 * recorded in the same batch, so a migration is applied whole or not at all.
 */
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import type { Miniflare } from "miniflare";
import { unstable_splitSqlQuery } from "wrangler";

/** drizzle-kit's separator between the statements of one migration file. */
const BREAKPOINT = "--> statement-breakpoint";

/**
 * The statements of one migration file: split at drizzle's breakpoints, then by wrangler's
 * own SQL splitter, so a hand-written file with several statements per chunk works too.
 */
export function migrationStatements(sql: string): string[] {
  return sql
    .split(BREAKPOINT)
    .flatMap((chunk) => unstable_splitSqlQuery(chunk))
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
}

type D1Database = Awaited<ReturnType<Miniflare["getD1Database"]>>;

const quoteIdent = (name: string) => `"${name.replace(/"/g, '""')}"`;

/** Applies what is pending and returns the names of the files it applied. */
export async function applyMigrations(db: D1Database, dir: string, table = "d1_migrations"): Promise<string[]> {
  const t = quoteIdent(table);
  await db
    .prepare(
      `CREATE TABLE IF NOT EXISTS ${t}(id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE, applied_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP NOT NULL)`,
    )
    .run();
  const done = new Set((await db.prepare(`SELECT name FROM ${t}`).all<{ name: string }>()).results.map((r) => r.name));
  const files = (await readdir(dir)).filter((f) => f.endsWith(".sql")).sort();
  const applied: string[] = [];
  for (const name of files) {
    if (done.has(name)) continue;
    const statements = migrationStatements(await readFile(join(dir, name), "utf8"));
    await db.batch([...statements.map((s) => db.prepare(s)), db.prepare(`INSERT INTO ${t} (name) VALUES (?)`).bind(name)]);
    applied.push(name);
  }
  return applied;
}
