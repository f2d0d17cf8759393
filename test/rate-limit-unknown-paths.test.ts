/**
 * Per-token request limits cover every path under `/e/<engine>` that an engine token reaches the
 * engine on (docs/operations.md, "Request limits": 429 before the engine is asked), not only the
 * API's routes: an unknown path, one under `/v1/` that is no LLM route, and `/e/<engine>` itself
 * each cost the engine its token check before their 404. Only the relay's own routes, whose
 * calls carry a per-claim key, go uncounted.
 */
import { describe, expect, it } from "vitest";
import { createEngine, ORIGIN, workerFetch, type TestEngine } from "./support/harness";

type Answer = { status: number; json: Record<string, unknown> };

async function send(path: string, token: string): Promise<Answer> {
  const res = await workerFetch(`${ORIGIN}${path}`, { headers: { authorization: `Bearer ${token}` } });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

async function exhaust(path: string, token: string): Promise<void> {
  for (let sent = 0; sent < 25_000; sent += 50) {
    const batch = await Promise.all(Array.from({ length: 50 }, () => send(path, token)));
    if (batch.some((a) => a.status === 429)) return;
  }
  throw new Error(`${path} was never refused`);
}

/** `check` right after the token ran out, retried if the limiter's window turned meanwhile. */
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

describe("per-token request limits cover every engine-token request that reaches the engine", () => {
  it("refuses a client over its limit on /e/<engine>/v1/<not an LLM route> and /e/<engine> too, before the engine is asked", async () => {
    const e = await createEngine("rl-bypass");
    await inOneWindow(e, e.tokens.client, async () => {
      // The same token is refused on a route...
      expect((await send(`/e/${e.name}/get_engine_status`, e.tokens.client)).status).toBe(429);
      // ...but these paths, which the engine is asked about (its token check), are not counted.
      for (const path of [`/e/${e.name}/v1/not-a-relay-route`, `/e/${e.name}`]) {
        const a = await send(path, e.tokens.client);
        expect({ path, status: a.status, error: a.json["error"] }).toEqual({ path, status: 429, error: "rate_limited" });
      }
    });
  }, 90_000);
});
