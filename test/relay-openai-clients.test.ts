/**
 * What OpenAI clients do that the relay must take as a model server does:
 *
 * - OpenAI types a request's `stream` as `boolean | null` (null: not streamed), and clients that
 *   dump their request model with its None fields (pydantic's model_dump, dataclasses' asdict)
 *   send `"stream": null`; vLLM and SGLang take it. The relay refused it 400 (protocol/relay.ts
 *   ChatRequestShape); it is now a whole call.
 * - A streaming client that stops reading (openai-python's `break` out of a stream, a client's
 *   own timeout or stop string) cancels its side of the stream. The relay took the pipe's failing
 *   write for the upstream breaking off: it counted a 502 upstream_stream_broken that no client
 *   saw (the overview's relay.failures, the RelayFailing alert) and logged a gateway failure. A
 *   cancel by the client is no failure (src/relay/sse.ts).
 *
 * The gateway is a stand-in Fetcher (RELAY_NETWORK): what is tested is the Worker's relay.
 */
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { beforeEngineRead } from "../src/relay/claim-gates";
import { serveRelay } from "../src/relay/relay-routes";
import { createEngine, ORIGIN, rollingWith, withGateway, type TestEngine } from "./support/harness";

const enc = new TextEncoder();
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A gateway that answers every call with `answer()`. */
const gatewayOf = (answer: () => Response): Fetcher =>
  ({
    fetch: async (): Promise<Response> => answer(),
    connect: () => {
      throw new Error("the relay opens no sockets");
    },
  }) as unknown as Fetcher;

/** A live claim's chat call with `body` through the relay to `gateway`, with the call's execution context. */
async function relayed(gateway: Fetcher, body: Record<string, unknown>): Promise<{ e: TestEngine; res: Response; ctx: ExecutionContext }> {
  const e = await createEngine();
  await rollingWith(e, 1);
  await withGateway(e);
  const c = await e.as("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 60 });
  const ctx = createExecutionContext();
  const req = new Request(`${ORIGIN}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${c.openai_api_key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }], ...body }),
  });
  return { e, res: await serveRelay(req, { ...env, RELAY_NETWORK: gateway }, ctx)!, ctx };
}

describe("an OpenAI request with stream: null", () => {
  it("is relayed as a whole (non-streamed) call, not refused 400", async () => {
    const completion = { id: "x", object: "chat.completion", created: 1, model: "m", choices: [{ index: 0, message: { role: "assistant", content: "hello" }, finish_reason: "stop" }] };
    const { res, ctx } = await relayed(gatewayOf(() => Response.json(completion)), { stream: null });
    const text = await res.text();
    await waitOnExecutionContext(ctx);
    expect(res.status, text).toBe(200);
    expect(JSON.parse(text)).toMatchObject({ object: "chat.completion", choices: [{ message: { content: "hello" } }] });
  });
});

describe("a streaming client that leaves mid-stream", () => {
  it("is not counted as a failed call (502 upstream_stream_broken) in the engine's overview", async () => {
    const token = `data: ${JSON.stringify({ id: "x", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: { content: "a" }, finish_reason: null }] })}\n\n`;
    // A healthy upstream streaming a token every 20 ms (a long generation).
    const dripping = gatewayOf(() => {
      const body = new ReadableStream<Uint8Array>({
        async pull(c) {
          await sleep(20);
          c.enqueue(enc.encode(token));
        },
      });
      return new Response(body, { headers: { "content-type": "text/event-stream" } });
    });
    const { e, res, ctx } = await relayed(dripping, { stream: true });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const first = await reader.read();
    expect(new TextDecoder().decode(first.value)).toContain("chat.completion.chunk");
    await reader.cancel(); // the client got what it wanted and closed the connection
    // The upstream's next token meets the cancelled stream (20 ms on); then the relay's work on
    // the call is done, and what the isolate counted goes to the engine.
    await sleep(100);
    await waitOnExecutionContext(ctx);
    await beforeEngineRead(env, e.name);
    const relay = (await e.as("viewer").overview()).relay;
    expect(relay.calls).toBe(1);
    expect(relay.failures).toEqual({});
    expect(relay.last_failure).toBeNull();
  });
});
