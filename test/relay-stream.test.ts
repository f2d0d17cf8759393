/**
 * Streamed relayed calls whose gateway answers a whole completion (as an AgentJet runner does):
 * the Worker streams it as OpenAI would, and when the answer breaks off while the Worker reads
 * it (the stream's status line has gone out) the failure arrives as the stream's last event. A
 * refusal that comes before the first keep-alive is due keeps its status; a later one is an event.
 * The gateway here is a network binding, whose answers can break after their first bytes (a
 * connection reset), which a real gateway cannot be made to do on cue.
 */
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { Env } from "../src/env";
import { serveRelay } from "../src/relay/relay-routes";
import { createEngine, ORIGIN, rollingWith, withGateway } from "./support/harness";

/** A gateway that answers `status` with a JSON body broken off after its first bytes. */
const breaksOff = (status: number): Fetcher => ({
  fetch: async (): Promise<Response> => {
    let n = 0;
    const body = new ReadableStream<Uint8Array>({
      pull(c) {
        if (n++ === 0) c.enqueue(new TextEncoder().encode('{"id":"x","object":"chat.completion","choi'));
        else c.error(new Error("connection reset by peer"));
      },
    });
    return new Response(body, { status, headers: { "content-type": "application/json" } });
  },
  connect: () => {
    throw new Error("the relay opens no sockets");
  },
});

describe("a streamed call whose gateway's whole answer breaks off", () => {
  it("ends the stream with an upstream_stream_broken event, for a 200 and for an error answer alike", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    await withGateway(e);
    const c = await e.as("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 60 });
    for (const status of [200, 500]) {
      const ctx = createExecutionContext();
      const req = new Request(`${ORIGIN}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${c.openai_api_key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }], stream: true }),
      });
      const res = await serveRelay(req, { ...env, RELAY_NETWORK: breaksOff(status) }, ctx)!;
      const events = (await res.text()).split("\n\n").filter((x) => x.startsWith("data: "));
      await waitOnExecutionContext(ctx);
      expect(res.status).toBe(200);
      expect(events).toHaveLength(1);
      expect(JSON.parse(events[0]!.slice(6))).toMatchObject({ error: { code: "upstream_stream_broken", type: "api_error", message: expect.stringMatching(/^the inference upstream broke off mid-stream: the connection to the inference gateway failed \(error id [0-9a-f-]{36}\)$/) } });
    }
  });

  it("streams a whole completion as OpenAI would: logprobs kept, tool calls indexed, usage only when asked and then on its own", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    await withGateway(e);
    const c = await e.as("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 60 });
    const completion = {
      id: "x",
      object: "chat.completion",
      created: 1,
      model: "m",
      choices: [{ index: 0, message: { role: "assistant", content: null, tool_calls: [{ id: "t1", type: "function", function: { name: "f", arguments: "{}" } }] }, logprobs: { content: [] }, finish_reason: "tool_calls" }],
      usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
    };
    const gateway: Fetcher = { fetch: async () => Response.json(completion), connect: () => { throw new Error("the relay opens no sockets"); } };
    const events = async (extra: Record<string, unknown>): Promise<unknown[]> => {
      const ctx = createExecutionContext();
      const req = new Request(`${ORIGIN}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${c.openai_api_key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }], stream: true, ...extra }),
      });
      const text = await (await serveRelay(req, { ...env, RELAY_NETWORK: gateway }, ctx)!).text();
      await waitOnExecutionContext(ctx);
      return text.split("\n\n").filter((x) => x.startsWith("data: ")).map((x) => (x === "data: [DONE]" ? "[DONE]" : JSON.parse(x.slice(6))));
    };
    const chunk = { object: "chat.completion.chunk", choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: "t1" }] }, logprobs: { content: [] }, finish_reason: "tool_calls" }] };
    const plain = await events({});
    expect(plain).toHaveLength(2);
    expect(plain[0]).toMatchObject(chunk);
    expect(plain[0]).not.toHaveProperty("usage");
    expect(plain[1]).toBe("[DONE]");
    const asked = await events({ stream_options: { include_usage: true } });
    expect(asked).toHaveLength(3);
    expect(asked[0]).toMatchObject(chunk);
    expect(asked[1]).toMatchObject({ object: "chat.completion.chunk", choices: [], usage: completion.usage });
  });
});

/** A gateway that answers `status` with the OpenAI `error`, after `afterMs`. */
const refusingGateway = (status: number, error: Record<string, unknown>, afterMs = 0): Fetcher =>
  ({
    fetch: async (): Promise<Response> => {
      if (afterMs > 0) await new Promise((r) => setTimeout(r, afterMs));
      return new Response(JSON.stringify({ error }), { status, headers: { "content-type": "application/json" } });
    },
    connect: () => {
      throw new Error("the relay opens no sockets");
    },
  }) as unknown as Fetcher;

const CONTEXT = { message: "This model's maximum context length is 32768 tokens. However, you requested 40961 tokens in the messages. Please reduce the length of the messages.", type: "BadRequestError", param: null, code: 400 };
const LIMIT = { message: "Rate limit reached, try again in 7s", type: "rate_limit_error", param: null, code: "rate_limit_exceeded" };

describe("a streamed call the model refuses", () => {
  const streamedCall = async (gateway: Fetcher, vars: Partial<Env> = {}): Promise<{ status: number; type: string | null; text: string }> => {
    const e = await createEngine();
    await rollingWith(e, 1);
    await withGateway(e);
    const c = await e.as("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 60 });
    const req = new Request(`${ORIGIN}/v1/chat/completions`, {
      method: "POST",
      body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "a very long history" }], stream: true }),
      headers: { "content-type": "application/json", authorization: `Bearer ${c.openai_api_key}` },
    });
    const ctx = createExecutionContext();
    const res = await serveRelay(req, { ...env, ...vars, RELAY_NETWORK: gateway }, ctx)!;
    const text = await res.text();
    await waitOnExecutionContext(ctx);
    return { status: res.status, type: res.headers.get("content-type"), text };
  };

  // What the user sees: an agent streams its calls (most frameworks do) and its history grows past
  // the model's context; vLLM refuses with 400 before generating anything (or a proxy with 429).
  // Through the exchange the client gets HTTP 200 and a stream holding one error event. The OpenAI
  // SDKs raise a bare APIError without a status for that (not BadRequestError / RateLimitError),
  // so the frameworks' handling of a context overflow (trim the history and go on: LangChain,
  // LiteLLM's ContextWindowExceededError, OpenHands) does not fire and the episode dies, and a 429
  // is not retried at all (the SDK retries by status, and this one is 200). The Worker commits to
  // 200 before it has the gateway's answer (relayStream returns its Response at once), though its
  // first keep-alive is only due after RELAY_KEEPALIVE_MS (10 s): an answer that comes before then
  // can keep its status.
  it.each([
    [400, CONTEXT],
    [429, LIMIT],
  ])("answers a streamed call the gateway refused at once %i with that status, not 200", async (status, error) => {
    const r = await streamedCall(refusingGateway(status, error));
    expect(r.text).toContain(error.message);
    expect(r.status).toBe(status);
    expect(r.type).toContain("application/json");
  });

  // A gateway that cannot be reached (the agent down, its tunnel gone) or a deadline shorter than
  // the first keep-alive used to be HTTP 200 and one error event: not retried by the SDKs.
  it("answers a streamed call whose gateway cannot be reached with 502 gateway_unreachable, not 200", async () => {
    const unreachable = { fetch: () => Promise.reject(new Error("connect ECONNREFUSED 10.0.0.7:8000")), connect: () => { throw new Error("the relay opens no sockets"); } } as unknown as Fetcher;
    const r = await streamedCall(unreachable);
    expect(r.status).toBe(502);
    expect(r.type).toContain("application/json");
    expect(JSON.parse(r.text)).toMatchObject({ error: { code: "gateway_unreachable", type: "api_error" } });
    expect(r.text).not.toContain("10.0.0.7");
  });

  it("answers a streamed call that meets its deadline before the first keep-alive with 504 upstream_timeout", async () => {
    // Answers only when the Worker's deadline (50 ms) aborts the request.
    const silent = {
      fetch: (_url: string, init?: RequestInit) => new Promise<Response>((_, reject) => init?.signal?.addEventListener("abort", () => reject(init.signal?.reason))),
      connect: () => { throw new Error("the relay opens no sockets"); },
    } as unknown as Fetcher;
    const r = await streamedCall(silent, { RELAY_DEADLINE_SECONDS: "0.05" });
    expect(r.status).toBe(504);
    expect(JSON.parse(r.text)).toMatchObject({ error: { code: "upstream_timeout", message: "the inference upstream did not answer within 0.05 s" } });
  });

  it("streams a refusal that comes after the first keep-alive was due as before: 200, the keep-alive, then the error event", async () => {
    const r = await streamedCall(refusingGateway(429, LIMIT, 300), { RELAY_KEEPALIVE_MS: "50" });
    expect(r.status).toBe(200);
    expect(r.type).toContain("text/event-stream");
    expect(r.text.startsWith(": keep-alive\n\n")).toBe(true);
    const events = r.text.split("\n\n").filter((x) => x.startsWith("data: "));
    expect(events).toHaveLength(1);
    expect(JSON.parse(events[0]!.slice(6))).toMatchObject({ error: { code: "rate_limit_exceeded" } });
  });
});
