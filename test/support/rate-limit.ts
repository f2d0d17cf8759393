/**
 * Driving the per-token rate limit (http/rate-limit.ts) through the Worker: its binding's windows
 * run on the wall clock, so a check that must see one window is repeated when it turned meanwhile.
 */
import { expect } from "vitest";
import { ORIGIN, workerFetch, type TestEngine } from "./harness";

export type Answer = { status: number; retryAfter: string | null; json: Record<string, unknown> };

/** `method`: GET without a body, POST with one, unless given. `from`: the caller's address, as Cloudflare gives it. */
export async function send(path: string, token?: string, body?: unknown, method?: string, from?: string): Promise<Answer> {
  const res = await workerFetch(`${ORIGIN}${path}`, {
    method: method ?? (body === undefined ? "GET" : "POST"),
    headers: {
      ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
      ...(body === undefined ? {} : { "content-type": "application/json" }),
      ...(from === undefined ? {} : { "cf-connecting-ip": from }),
    },
    body: body === undefined ? null : JSON.stringify(body),
  });
  return { status: res.status, retryAfter: res.headers.get("retry-after"), json: (await res.json()) as Record<string, unknown> };
}

/**
 * Sends `request`, 50 at a time, until one is refused; every answer before must be `served`. A
 * fixed window lets at most a limit's worth through, so the refusal comes within two windows'
 * worth even when one turns.
 */
export async function exhaust(request: () => Promise<Answer>, served = 200): Promise<Answer> {
  for (let sent = 0; sent < 25_000; sent += 50) {
    const batch = await Promise.all(Array.from({ length: 50 }, request));
    const refused = batch.find((a) => a.status === 429);
    if (refused) return refused;
    expect(batch.map((a) => a.status)).toEqual(batch.map(() => served));
  }
  throw new Error("the request was never refused");
}

/** A limit to run out: `exhaust` sends until refused, `probe` is refused while the window holds. */
export type Limit = { exhaust: () => Promise<Answer>; probe: () => Promise<Answer> };

/** The token's own limit on the engine's status route. */
const tokenLimit = (e: TestEngine, token: string): Limit => {
  const probe = (): Promise<Answer> => send(`/e/${e.name}/get_engine_status`, token);
  return { exhaust: () => exhaust(probe), probe };
};

/**
 * Runs `check` right after the limit ran out (a token's own, unless given), until it is still
 * refused after it: then all of `check` saw one window. A check that failed in a window that
 * turned meanwhile is tried again (the turn may be why it failed); one that failed within one
 * window fails the test.
 */
export async function inOneWindow(e: TestEngine, token: string, check: () => Promise<void>, limit: Limit = tokenLimit(e, token)): Promise<void> {
  let failure: unknown = new Error("the limiter's window turned during every attempt");
  for (let attempt = 0; attempt < 3; attempt++) {
    await limit.exhaust();
    let failed = false;
    try {
      await check();
    } catch (x) {
      failed = true;
      failure = x;
    }
    if ((await limit.probe()).status === 429) {
      if (failed) throw failure;
      return;
    }
  }
  throw failure;
}
