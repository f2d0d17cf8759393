/**
 * The real D1, but for the statements `fails` picks, which throw as D1 does when it cannot be
 * reached; and the Worker served with it: for tests of what a route answers, and leaves written,
 * when D1 fails part-way through a request.
 */
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import worker from "../../src/index";
import type { Env } from "../../src/env";
import { ADMIN_TOKEN, jsonOrNull, ORIGIN } from "./harness";

export function failingD1(fails: (sql: string) => boolean): D1Database {
  const real = env.DB;
  const statements = new WeakMap<object, { real: D1PreparedStatement; sql: string }>();
  const boom = (sql: string): Error => new Error(`D1_ERROR: Network connection lost. (while running: ${sql})`);
  const forward = (target: object, key: string | symbol): unknown => {
    const v = Reflect.get(target, key, target) as unknown;
    return typeof v === "function" ? (v as (...a: unknown[]) => unknown).bind(target) : v;
  };
  const wrap = (statement: D1PreparedStatement, sql: string): D1PreparedStatement => {
    const p = new Proxy(statement, {
      get(t, k) {
        if (k === "bind") return (...args: unknown[]) => wrap(t.bind(...args), sql);
        if ((k === "run" || k === "all" || k === "first" || k === "raw") && fails(sql)) return () => Promise.reject(boom(sql));
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
            const sql = statements.get(s)?.sql ?? "";
            if (fails(sql)) throw boom(sql);
          }
          return t.batch(list.map((s) => statements.get(s)?.real ?? s));
        };
      return forward(t, k);
    },
  });
}

/** The Worker's answer to `path` with `db` as its D1 (the admin's token unless told). */
export async function fetchWithD1(db: D1Database, path: string, init: RequestInit & { token?: string } = {}): Promise<{ status: number; json: unknown; text: string }> {
  const headers = new Headers(init.headers);
  headers.set("authorization", `Bearer ${init.token ?? ADMIN_TOKEN}`);
  if (init.body !== undefined) headers.set("content-type", "application/json");
  const ctx = createExecutionContext();
  const res = await worker.fetch(new Request(`${ORIGIN}${path}`, { ...init, headers }) as Request<unknown, IncomingRequestCfProperties>, { ...(env as unknown as Env), DB: db }, ctx);
  const text = await res.text();
  await waitOnExecutionContext(ctx);
  return { status: res.status, json: jsonOrNull(text), text };
}
