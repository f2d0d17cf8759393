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
import { watchedD1 } from "./watched-d1";

export function failingD1(fails: (sql: string) => boolean): D1Database {
  return watchedD1({ running: (sql) => (fails(sql) ? new Error(`D1_ERROR: Network connection lost. (while running: ${sql})`) : undefined) });
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
