/**
 * Streamed relayed calls whose gateway answers a whole completion (as an AgentJet runner does):
 * the Worker streams it as OpenAI would, and when the answer breaks off while the Worker reads
 * it (the stream's status line has gone out) the failure arrives as the stream's last event.
 * The gateway here is a network binding, whose answers can break after their first bytes (a
 * connection reset), which a real gateway cannot be made to do on cue.
 */
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
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
