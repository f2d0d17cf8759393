/**
 * Relayed calls that failed, in the engine's overview beside the calls it admitted
 * (src/relay/relay-failures.ts, src/engine/relay-failure-counts.ts): without them, calls whose
 * gateway could not be reached read as calls served. The gateway here is a network binding.
 */
import { createExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { openaiErrorBody } from "../src/relay/openai-errors";
import { beforeEngineRead } from "../src/relay/claim-gates";
import { FailureTally, SEND_MS } from "../src/relay/relay-failures";
import { serveRelay } from "../src/relay/relay-routes";
import type { RelayFailureReport } from "../src/protocol/relay";
import { HIDDEN_WORDS } from "../src/engine/relay-failure-counts";
import { createEngine, ORIGIN, rollingWith, withGateway } from "./support/harness";

/** A gateway that cannot be reached (a refused connection). */
const unreachable: Fetcher = {
  fetch: async (): Promise<Response> => {
    throw new Error("connect ECONNREFUSED 10.0.0.7:10087");
  },
  connect: () => {
    throw new Error("the relay opens no sockets");
  },
} as unknown as Fetcher;

const chat = (stream: boolean): string => JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }], stream });

describe("failed relayed calls in the engine's overview", () => {
  it("counts each call's failure by status and code, whole or streamed, with the latest, beside the calls admitted", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    await withGateway(e);
    const c = await e.as("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 60 });
    const call = async (body: string | null): Promise<string> => {
      const init: RequestInit = body === null ? {} : { method: "POST", body, headers: { "content-type": "application/json" } };
      const req = new Request(`${ORIGIN}/v1/${body === null ? "models" : "chat/completions"}`, { ...init, headers: { ...init.headers, authorization: `Bearer ${c.openai_api_key}` } });
      const res = await serveRelay(req, { ...env, RELAY_NETWORK: unreachable }, createExecutionContext())!;
      return `${res.status} ${await res.text()}`;
    };
    for (let i = 0; i < 3; i++) expect(await call(chat(false))).toMatch(/^502 .*gateway_unreachable/);
    expect(await call(chat(true))).toMatch(/^502 .*gateway_unreachable/);
    expect(await call("{not json")).toMatch(/^400 .*invalid_json/);
    await beforeEngineRead(env, e.name);
    const relay = (await e.as("viewer").overview()).relay;
    expect(relay).toMatchObject({
      calls: 4,
      failures: { "502 gateway_unreachable": 4, "400 invalid_json": 1 },
      last_failure: { kind: "400 invalid_json", message: "The request body is not valid JSON." },
    });
    expect(relay.last_failure?.at).toBeGreaterThan(Date.now() - 60_000);
  });

  it("shows the latest failure's words to the roles that read trajectories, not to a client: an upstream's error may quote another client's prompt", async () => {
    const prompt = "client A's private prompt";
    // A gateway passing on the upstream's 400, which quotes the request as vLLM's validation errors do.
    const quoting: Fetcher = {
      fetch: async (_input: RequestInfo, init?: RequestInit): Promise<Response> => {
        const sent = JSON.parse(String(init?.body)) as { request?: { messages?: unknown } };
        return Response.json(openaiErrorBody(400, `Extra inputs are not permitted, input: ${JSON.stringify(sent.request?.messages)}`, "bad_request"), { status: 400 });
      },
      connect: () => {
        throw new Error("the relay opens no sockets");
      },
    } as unknown as Fetcher;
    const e = await createEngine();
    await rollingWith(e, 1);
    await withGateway(e);
    const a = await e.as("client").claimEpisode({ client_uuid: "client-a", discard_episode_timeout: 60 });
    const req = new Request(`${ORIGIN}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${a.openai_api_key}` }, body: JSON.stringify({ model: "m", messages: [{ role: "user", content: prompt }] }) });
    expect((await serveRelay(req, { ...env, RELAY_NETWORK: quoting }, createExecutionContext())!).status).toBe(400);
    await beforeEngineRead(env, e.name);
    for (const role of ["viewer", "operator", "trainer", "admin"] as const) {
      expect((await e.as(role).overview()).relay.last_failure).toMatchObject({ kind: "400 bad_request", message: expect.stringContaining(prompt) });
    }
    // A client token reads no trajectory (they hold every client's prompts), so not these words either.
    expect((await e.as("client").overview()).relay).toMatchObject({ failures: { "400 bad_request": 1 }, last_failure: { kind: "400 bad_request", message: HIDDEN_WORDS } });
  });

  it("shows no failures while calls succeed", async () => {
    const e = await createEngine();
    expect((await e.as("viewer").overview()).relay).toEqual({ calls: 0, engine_requests: 0, failures: {}, last_failure: null });
  });
});

describe("an isolate's tally of failed calls", () => {
  const refused = openaiErrorBody(502, "the connection to the inference gateway failed", "gateway_unreachable");

  it("sends once per SEND_MS, only when some failed, and keeps the counts of a send that failed for the next", async () => {
    const sent: RelayFailureReport[] = [];
    let down = false;
    const waits: (() => void)[] = [];
    const tally = new FailureTally(
      async (r) => {
        if (down) throw new Error("engine unreachable");
        sent.push(r);
      },
      (ms) => {
        expect(ms).toBe(SEND_MS);
        return new Promise((wake) => waits.push(wake));
      },
    );
    const background: Promise<unknown>[] = [];
    for (let i = 0; i < 5; i++) tally.note(502, refused, 1000 + i, (w) => void background.push(w));
    expect(background).toHaveLength(1);
    down = true;
    waits.shift()!();
    await Promise.all(background.splice(0));
    expect(sent).toEqual([]);
    down = false;
    tally.note(504, openaiErrorBody(504, "the inference upstream did not answer within 600 s", "upstream_timeout"), 2000, (w) => void background.push(w));
    waits.shift()!();
    await Promise.all(background.splice(0));
    expect(sent).toEqual([{ counts: { "502 gateway_unreachable": 5, "504 upstream_timeout": 1 }, last: { kind: "504 upstream_timeout", message: "the inference upstream did not answer within 600 s", at: 2000 } }]);
    // Nothing failed since: a flush sends nothing.
    await tally.flush();
    expect(sent).toHaveLength(1);
  });
});
