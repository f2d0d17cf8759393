/**
 * Per-token request limits (http/rate-limit.ts) on workerd's own rate limiting binding, with the
 * limits wrangler.toml gives a deployment: a client's thousand requests take a while here, so the
 * rest of the behaviour (ends counted apart, AgentJet's client slowed down rather than failed) is
 * shown with small limits on the local server (test-e2e/rate-limit.test.ts). The binding's windows
 * run on the wall clock, which a test cannot move: a check that must happen inside one window is
 * repeated when the window turned meanwhile.
 */
import { describe, expect, it } from "vitest";
import { EngineClient, ExchangeError, RunsClient } from "../src/client";
import { RATE_LIMIT_PERIOD_SECONDS } from "../src/http/rate-limit";
import { admin, ADMIN_TOKEN, createEngine, ORIGIN, workerFetch, type TestEngine } from "./support/harness";

type Answer = { status: number; retryAfter: string | null; json: Record<string, unknown> };

async function send(path: string, token?: string, body?: unknown): Promise<Answer> {
  const res = await workerFetch(`${ORIGIN}${path}`, {
    method: body === undefined ? "GET" : "POST",
    headers: { ...(token === undefined ? {} : { authorization: `Bearer ${token}` }), ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? null : JSON.stringify(body),
  });
  return { status: res.status, retryAfter: res.headers.get("retry-after"), json: (await res.json()) as Record<string, unknown> };
}

/**
 * Sends `path` with `token`, 50 at a time, until one is refused. A fixed window lets at most a
 * limit's worth through, so the refusal comes within two windows' worth even when one turns.
 */
async function exhaust(path: string, token: string): Promise<Answer> {
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
async function inOneWindow(e: TestEngine, token: string, check: () => Promise<void>): Promise<void> {
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

describe("per-token request limits", () => {
  it("answer a client over its limit 429 with Retry-After and the error body, and leave the engine's other tokens alone", async () => {
    const e = await createEngine("limited");
    const other = await admin.issueToken(e.name, "client", "second host");
    await inOneWindow(e, e.tokens.client, async () => {
      const refused = await send(`/e/${e.name}/get_engine_status`, e.tokens.client);
      expect(refused).toMatchObject({ status: 429, retryAfter: String(RATE_LIMIT_PERIOD_SECONDS), json: { error: "rate_limited", detail: expect.stringContaining("retry after") } });
      expect(Object.keys(refused.json).sort()).toEqual(["detail", "error"]);
      // The same token carried in the URL is the same counter.
      expect((await send(`/e/${e.name}/t/${e.tokens.client}/get_engine_status`)).status).toBe(429);
      for (const token of [other.token, e.tokens.operator, e.tokens.viewer, e.tokens.trainer, ADMIN_TOKEN]) {
        expect((await send(`/e/${e.name}/get_engine_status`, token)).status).toBe(200);
      }
      expect((await send(`/e/${e.name}/agent/commands?wait=0`, e.tokens.trainer)).status).toBe(200);
    });
  }, 90_000);

  it("reach a program through every client with the seconds of Retry-After", async () => {
    const e = await createEngine("limited-clients");
    await inOneWindow(e, e.tokens.viewer, async () => {
      const base = { baseUrl: `${ORIGIN}/e/${e.name}`, token: e.tokens.viewer, fetch: workerFetch };
      for (const refused of [await new EngineClient(base).getEngineStatus().catch((x: unknown) => x), await new RunsClient(base).listRuns().catch((x: unknown) => x)]) {
        expect(refused).toBeInstanceOf(ExchangeError);
        expect(refused).toMatchObject({ status: 429, code: "rate_limited", retryAfterSeconds: RATE_LIMIT_PERIOD_SECONDS });
      }
    });
  }, 90_000);
});
