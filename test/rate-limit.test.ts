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
import { admin, ADMIN_TOKEN, createEngine, ORIGIN, workerFetch } from "./support/harness";
import { exhaust, inOneWindow, send } from "./support/rate-limit";

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

  it("hold back an address that makes up a token per request, before the engine is asked, and not the tokens its engine accepted", async () => {
    const e = await createEngine("made-up-tokens");
    const other = await createEngine("made-up-tokens-other");
    const from = "203.0.113.7";
    const status = `/e/${e.name}/get_engine_status`;
    const madeUp = (): string => `rx_client_${crypto.randomUUID()}`;
    // Accepted by the engine from this address before the flood.
    expect((await send(status, e.tokens.client, undefined, undefined, from)).status).toBe(200);
    const flood = () => send(status, madeUp(), undefined, undefined, from);
    await inOneWindow(
      e,
      e.tokens.client,
      async () => {
        const refused = await flood();
        expect(refused).toMatchObject({ status: 429, retryAfter: String(RATE_LIMIT_PERIOD_SECONDS), json: { error: "rate_limited", detail: expect.stringContaining("not accepted yet") } });
        // The accepted token is not held back, in the token or in the path.
        expect((await send(status, e.tokens.client, undefined, undefined, from)).status).toBe(200);
        expect((await send(`/e/${e.name}/t/${e.tokens.client}/get_engine_status`, undefined, undefined, undefined, from)).status).toBe(200);
        // Accepted for one engine is not accepted for another: the other engine's token is new here.
        expect((await send(`/e/${other.name}/get_engine_status`, e.tokens.client, undefined, undefined, from)).status).toBe(429);
        // A token the engine has not answered yet waits with the rest of its address...
        expect((await send(`/e/${e.name}/get_engine_status`, e.tokens.viewer, undefined, undefined, from)).status).toBe(429);
        // ...and other addresses are not held back: a made-up token there reaches the engine's 401.
        expect((await send(status, madeUp(), undefined, undefined, "198.51.100.9")).json).toMatchObject({ error: "invalid_token" });
        expect((await send(status, e.tokens.viewer, undefined, undefined, "198.51.100.9")).status).toBe(200);
      },
      { exhaust: () => exhaust(flood, 401), probe: flood },
    );
  }, 90_000);

  it("forget an accepted token once its engine answers it 401: a revoked token counts against its address again", async () => {
    const e = await createEngine("revoked-token");
    const from = "203.0.113.8";
    const status = `/e/${e.name}/get_engine_status`;
    const kept = await admin.issueToken(e.name, "client", "kept");
    const revoked = await admin.issueToken(e.name, "client", "revoked");
    for (const token of [kept.token, revoked.token]) expect((await send(status, token, undefined, undefined, from)).status).toBe(200);
    await admin.revokeToken(e.name, revoked.id);
    expect((await send(status, revoked.token, undefined, undefined, from)).json).toMatchObject({ error: "invalid_token" });
    const flood = () => send(status, `rx_client_${crypto.randomUUID()}`, undefined, undefined, from);
    await inOneWindow(
      e,
      kept.token,
      async () => {
        expect((await send(status, revoked.token, undefined, undefined, from)).status).toBe(429);
        expect((await send(status, kept.token, undefined, undefined, from)).status).toBe(200);
      },
      { exhaust: () => exhaust(flood, 401), probe: flood },
    );
  }, 90_000);
});
