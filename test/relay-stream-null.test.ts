/**
 * OpenAI types a request's `stream` as `boolean | null` (null: not streamed), and clients that dump
 * their request model with its None fields (pydantic's model_dump, dataclasses' asdict) send
 * `"stream": null`; vLLM and SGLang take it. The relay refused it 400 (protocol/relay.ts
 * ChatRequestShape); it is now a whole call.
 */
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { serveRelay } from "../src/relay/relay-routes";
import { createEngine, ORIGIN, rollingWith, withGateway } from "./support/harness";

const completion = { id: "x", object: "chat.completion", created: 1, model: "m", choices: [{ index: 0, message: { role: "assistant", content: "hello" }, finish_reason: "stop" }] };
const gateway: Fetcher = {
  fetch: async (): Promise<Response> => Response.json(completion),
  connect: () => {
    throw new Error("the relay opens no sockets");
  },
} as unknown as Fetcher;

describe("an OpenAI request with stream: null", () => {
  it("is relayed as a whole (non-streamed) call, not refused 400", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    await withGateway(e);
    const c = await e.as("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 60 });
    const ctx = createExecutionContext();
    const req = new Request(`${ORIGIN}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${c.openai_api_key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }], stream: null }),
    });
    const res = await serveRelay(req, { ...env, RELAY_NETWORK: gateway }, ctx)!;
    const text = await res.text();
    await waitOnExecutionContext(ctx);
    expect(res.status, text).toBe(200);
    expect(JSON.parse(text)).toMatchObject({ object: "chat.completion", choices: [{ message: { content: "hello" } }] });
  });
});
