/**
 * What a client gets when something behind the exchange refuses its call: the gateway the
 * exchange's signature (its host's clock off by minutes), or the inference upstream the
 * trainer's key. The client's own key was good, so it gets a 502 (OpenAI clients retry one;
 * a 401 would tell them their key is bad, and they do not retry it), saying what refused.
 * The gateway here is a network binding that judges envelopes with the gateway's own
 * checkEnvelope on a clock set apart from the Worker's.
 */
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { checkEnvelope, timestampFault } from "../src/auth/gateway-signature";
import { SIGNATURE_HEADER, TIMESTAMP_HEADER } from "../src/protocol/relay";
import { openaiErrorBody } from "../src/relay/openai-errors";
import { serveRelay } from "../src/relay/relay-routes";
import { createEngine, ORIGIN, rollingWith, withGateway } from "./support/harness";

/** A gateway whose clock is `skewSeconds` off the Worker's, answering as the agent's gateway does; past the signature, `upstream` answers. */
function gateway(secret: string, skewSeconds: number, upstream: () => Response): Fetcher {
  return {
    fetch: async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
      const req = new Request(input, init);
      const why = await checkEnvelope(secret, req.headers.get(TIMESTAMP_HEADER) ?? undefined, req.headers.get(SIGNATURE_HEADER) ?? undefined, await req.text(), Date.now() / 1000 + skewSeconds);
      return why === null ? upstream() : Response.json(openaiErrorBody(401, why, "invalid_signature"), { status: 401 });
    },
    connect: () => {
      throw new Error("the relay opens no sockets");
    },
  } as unknown as Fetcher;
}

const models = (): Response => Response.json({ object: "list", data: [] });
const chat = (stream: boolean): RequestInit => ({
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }], stream }),
});

async function call(skewSeconds: number, upstream: () => Response, init: RequestInit = {}): Promise<{ status: number; text: string; headers: Headers }> {
  const e = await createEngine();
  await rollingWith(e, 1);
  await withGateway(e);
  const c = await e.as("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 60 });
  const secret = (await e.as("trainer").gatewaySecret()).secret;
  const ctx = createExecutionContext();
  const headers = new Headers(init.headers);
  headers.set("authorization", `Bearer ${c.openai_api_key}`);
  const path = init.method === "POST" ? "/v1/chat/completions" : "/v1/models";
  const res = await serveRelay(new Request(`${ORIGIN}/e/${e.name}${path}`, { ...init, headers }), { ...env, RELAY_NETWORK: gateway(secret, skewSeconds, upstream) }, ctx)!;
  const text = await res.text();
  await waitOnExecutionContext(ctx);
  return { status: res.status, text, headers: res.headers };
}

const error = (text: string): unknown => JSON.parse(text.startsWith("data: ") ? text.slice(6).split("\n\n")[0]! : text);

describe("a call refused behind the exchange", () => {
  it("goes through with the gateway's clock 280 s off the Worker's, either way", async () => {
    for (const skew of [-280, 280]) expect((await call(skew, models)).status).toBe(200);
  });

  it("gets 502 gateway_refused, saying the clocks differ and by how much, when the gateway's clock is an hour off", async () => {
    const r = await call(3600, models);
    expect(r.status).toBe(502);
    expect(error(r.text)).toMatchObject({
      error: { code: "gateway_refused", type: "api_error", message: expect.stringMatching(/^The inference gateway refused the exchange's signature \(401\): stale signature timestamp: the exchange signed it 1\.0 h before this host's clock/) },
    });
    // Refused before the stream's first keep-alive was due: the status is the client's to see, streamed or not.
    const streamed = await call(3600, models, chat(true));
    expect(streamed.status).toBe(502);
    expect(error(streamed.text)).toMatchObject({ error: { code: "gateway_refused", type: "api_error" } });
  });

  it("gets 502 upstream_refused, with the upstream's words, when the upstream refuses the trainer's key, whole or streamed", async () => {
    const refusing = (): Response => Response.json({ error: { message: "Incorrect API key provided", type: "invalid_request_error", param: null, code: "invalid_api_key" } }, { status: 401 });
    for (const stream of [false, true]) {
      const r = await call(0, refusing, chat(stream));
      expect(r.status).toBe(502);
      expect(error(r.text)).toEqual({
        error: { code: "upstream_refused", type: "api_error", param: null, message: "The inference upstream refused the trainer's credentials (401): Incorrect API key provided" },
      });
    }
    const forbidden = await call(0, () => new Response("no", { status: 403 }), chat(false));
    expect(forbidden.status).toBe(502);
    expect(error(forbidden.text)).toMatchObject({ error: { code: "upstream_refused", message: "The inference upstream refused the trainer's credentials (403): no" } });
  });

  it("never says a refused timestamp is off by no more than the bound it takes", () => {
    expect(timestampFault("1000000000", 1000000000 + 300)).toBeNull();
    expect(timestampFault("1000000000", 1000000000 + 300.4)).toMatch(/^stale signature timestamp: the exchange signed it 301 s before this host's clock \(at most 300 s is taken\)/);
  });
});

describe("a call the model behind the exchange rate-limits", () => {
  const limited = (status: number, headers: Record<string, string>, body: unknown = { error: { message: "Rate limit reached, try again in 7s", type: "rate_limit_error", param: null, code: "rate_limit_exceeded" } }) => (): Response =>
    Response.json(body, { status, headers });

  // What the user sees: the model (or the proxy in front of it) says 429 with `Retry-After: 7`;
  // the client of the exchange gets the 429 and its error, but no Retry-After. The OpenAI SDKs
  // honour retry-after when it is there and otherwise back off for well under a second, so every
  // agent of the engine retries at once, again and again, against a limit that told them to wait
  // 7 s. The Worker rebuilds the error answer (Response.json(err.data, { status })) and keeps only
  // the status and the body.
  it("passes the gateway's Retry-After on a 429 to the client, whole or streamed", async () => {
    for (const stream of [false, true]) {
      const r = await call(0, limited(429, { "retry-after": "7", "retry-after-ms": "7000" }), chat(stream));
      expect(r.status).toBe(429);
      expect(error(r.text)).toMatchObject({ error: { code: "rate_limit_exceeded" } });
      expect([r.headers.get("retry-after"), r.headers.get("retry-after-ms")]).toEqual(["7", "7000"]);
    }
  });

  it("passes an HTTP-date Retry-After with an error that is no OpenAI error, and nothing that is not well-formed", async () => {
    const when = "Wed, 21 Oct 2037 07:28:00 GMT";
    const dated = await call(0, limited(503, { "retry-after": when }, { detail: "overloaded" }), chat(false));
    expect(dated.status).toBe(503);
    expect(error(dated.text)).toMatchObject({ error: { code: "upstream_error" } });
    expect(dated.headers.get("retry-after")).toBe(when);
    const bad = await call(0, limited(429, { "retry-after": "soon", "retry-after-ms": "-1", "x-ratelimit-remaining-requests": "0" }), chat(false));
    expect(bad.status).toBe(429);
    expect([bad.headers.get("retry-after"), bad.headers.get("retry-after-ms"), bad.headers.get("x-ratelimit-remaining-requests")]).toEqual([null, null, null]);
  });
});
