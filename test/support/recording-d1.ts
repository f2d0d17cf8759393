/**
 * The real D1, with each statement the code under test binds noted (its SQL and values), for
 * tests of what the code sends: their query plans (EXPLAIN QUERY PLAN of exactly that SQL) and
 * how many statements one invocation sends.
 */
import { env } from "cloudflare:workers";

export type Bound = { sql: string; args: unknown[] };

export function recordingD1(real: D1Database = env.DB): { db: D1Database; bound: Bound[] } {
  const bound: Bound[] = [];
  const forward = <T extends object>(target: T, key: string | symbol): unknown => {
    const v = (target as Record<string | symbol, unknown>)[key];
    return typeof v === "function" ? v.bind(target) : v;
  };
  const db = new Proxy(real, {
    get: (target, key) =>
      key !== "prepare"
        ? forward(target, key)
        : (sql: string) =>
            new Proxy(real.prepare(sql), {
              get: (statement, k) =>
                k !== "bind"
                  ? forward(statement, k)
                  : (...args: unknown[]) => {
                      bound.push({ sql, args });
                      return statement.bind(...args);
                    },
            }),
  });
  return { db, bound };
}

/** SQLite's plan of a bound statement, one line a step ("SEARCH t USING INDEX ..."). */
export async function planOf(b: Bound): Promise<string[]> {
  const plan = await env.DB.prepare(`EXPLAIN QUERY PLAN ${b.sql}`).bind(...b.args).all<{ detail: string }>();
  return plan.results.map((r) => r.detail);
}
