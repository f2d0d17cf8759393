/**
 * The real D1, with each statement the code under test binds noted (its SQL and values), for
 * tests of what the code sends: their query plans (EXPLAIN QUERY PLAN of exactly that SQL) and
 * how many statements one invocation sends.
 */
import { env } from "cloudflare:workers";
import { watchedD1 } from "./watched-d1";

export type Bound = { sql: string; args: unknown[] };

export function recordingD1(real: D1Database = env.DB): { db: D1Database; bound: Bound[] } {
  const bound: Bound[] = [];
  return { db: watchedD1({ bound: (sql, args) => bound.push({ sql, args }) }, real), bound };
}

/** SQLite's plan of a bound statement, one line a step ("SEARCH t USING INDEX ..."). */
export async function planOf(b: Bound): Promise<string[]> {
  const plan = await env.DB.prepare(`EXPLAIN QUERY PLAN ${b.sql}`).bind(...b.args).all<{ detail: string }>();
  return plan.results.map((r) => r.detail);
}
