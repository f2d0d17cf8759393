/**
 * The real D1 seen through hooks on what the code under test sends it: each statement as it is
 * bound, and each as it is about to run (alone, in a batch or by exec), which a hook may fail as
 * D1 fails when it cannot be reached. The one wrapper behind the tests that record bound SQL
 * (recording-d1.ts), fail chosen statements (failing-d1.ts) and count what an alarm sends.
 */
import { env } from "cloudflare:workers";

export type D1Hooks = {
  /** A statement bound to its values. */
  bound?: (sql: string, args: unknown[]) => void;
  /** A statement about to run: an Error returned is what it fails with, and it is not sent. */
  running?: (sql: string) => Error | undefined;
};

const RUNS = new Set<string | symbol>(["run", "all", "first", "raw"]);

/** A property of `target` as the code under test would get it: methods bound to their object. */
function forward(target: object, key: string | symbol): unknown {
  const v = Reflect.get(target, key, target) as unknown;
  return typeof v === "function" ? (v as (...a: unknown[]) => unknown).bind(target) : v;
}

export function watchedD1(hooks: D1Hooks, real: D1Database = env.DB): D1Database {
  // Each wrapped statement's real one and its SQL: a batch must hand D1 its own statements.
  const statements = new WeakMap<object, { real: D1PreparedStatement; sql: string }>();
  const wrap = (statement: D1PreparedStatement, sql: string): D1PreparedStatement => {
    const p = new Proxy(statement, {
      get(t, k) {
        if (k === "bind")
          return (...args: unknown[]) => {
            hooks.bound?.(sql, args);
            return wrap(t.bind(...args), sql);
          };
        if (RUNS.has(k)) {
          const failure = hooks.running?.(sql);
          if (failure !== undefined) return () => Promise.reject(failure);
        }
        return forward(t, k);
      },
    });
    statements.set(p, { real: statement, sql });
    return p;
  };
  return new Proxy(real, {
    get(t, k) {
      if (k === "prepare") return (sql: string) => wrap(t.prepare(sql), sql);
      if (k === "batch")
        return async (list: D1PreparedStatement[]) => {
          for (const s of list) {
            const failure = hooks.running?.(statements.get(s)?.sql ?? "");
            if (failure !== undefined) throw failure;
          }
          return t.batch(list.map((s) => statements.get(s)?.real ?? s));
        };
      if (k === "exec")
        return async (sql: string) => {
          const failure = hooks.running?.(sql);
          if (failure !== undefined) throw failure;
          return t.exec(sql);
        };
      return forward(t, k);
    },
  });
}
