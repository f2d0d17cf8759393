/**
 * Driving the per-token rate limit (http/rate-limit.ts) through the Worker: its binding's windows
 * run on the wall clock, so a check that must see one window is repeated when it turned meanwhile.
 */
import { expect } from "vitest";
import { ORIGIN, workerFetch, type TestEngine } from "./harness";

export type Answer = { status: number; retryAfter: string | null; json: Record<string, unknown> };

/** `method`: GET without a body, POST with one, unless given. */
export async function send(path: string, token?: string, body?: unknown, method?: string): Promise<Answer> {
  const res = await workerFetch(`${ORIGIN}${path}`, {
    method: method ?? (body === undefined ? "GET" : "POST"),
    headers: { ...(token === undefined ? {} : { authorization: `Bearer ${token}` }), ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? null : JSON.stringify(body),
  });
  return { status: res.status, retryAfter: res.headers.get("retry-after"), json: (await res.json()) as Record<string, unknown> };
}

/**
 * Sends `path` with `token`, 50 at a time, until one is refused. A fixed window lets at most a
 * limit's worth through, so the refusal comes within two windows' worth even when one turns.
 */
export async function exhaust(path: string, token: string): Promise<Answer> {
  for (let sent = 0; sent < 25_000; sent += 50) {
    const batch = await Promise.all(Array.from({ length: 50 }, () => send(path, token)));
    const refused = batch.find((a) => a.status === 429);
    if (refused) return refused;
    expect(batch.map((a) => a.status)).toEqual(batch.map(() => 200));
  }
  throw new Error(`${path} was never refused`);
}

/**
 * Runs `check` right after the token ran out, until the token is still refused after it: then
 * all of `check` saw one window. A check that failed in a window that turned meanwhile is tried
 * again (the turn may be why it failed); one that failed within one window fails the test.
 */
export async function inOneWindow(e: TestEngine, token: string, check: () => Promise<void>): Promise<void> {
  let failure: unknown = new Error("the limiter's window turned during every attempt");
  for (let attempt = 0; attempt < 3; attempt++) {
    await exhaust(`/e/${e.name}/get_engine_status`, token);
    let failed = false;
    try {
      await check();
    } catch (x) {
      failed = true;
      failure = x;
    }
    if ((await send(`/e/${e.name}/get_engine_status`, token)).status === 429) {
      if (failed) throw failure;
      return;
    }
  }
  throw failure;
}
