/**
 * SGLang (and vLLM before it nested its errors) answers its 4xx errors in the flat form
 * `{"object": "error", "message", "type", "param", "code"}`. The gateway made that form an OpenAI
 * error only when it came with a 200; with its own 404 or 400 the client got a wrapper whose
 * message was the JSON ("the inference upstream answered 404: {...}") and whose type was the
 * gateway's. Now it keeps its status and its own message and type either way (docs/relay.md).
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { ownGateway } from "./own-gateway";
import { envelope, post } from "./envelope";
import { OpenAIError } from "../../../src/protocol/relay";
import { gatewayErrorResponse } from "../../../src/relay/openai-errors";

const SECRET = "flat-error-secret";
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function upstreamAnswering(status: number, body: string): Promise<string> {
  const server = createServer((req, res) => {
    req.resume();
    res.writeHead(status, { "content-type": "application/json" }).end(body);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  cleanups.push(() => new Promise((r) => server.close(() => r(undefined))));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe("gateway: an HTTP upstream's flat error (SGLang, older vLLM) with its own error status", () => {
  it.each([
    [404, { object: "error", message: "The model `policy-x` does not exist.", type: "NotFoundError", param: null, code: 404 }],
    [400, { object: "error", message: "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.", type: "BadRequestError", param: null, code: 400 }],
  ])("keeps its status and gives the client its own message and type (%i), as it does when the same error comes with a 200", async (status, answer) => {
    const gw = await ownGateway(SECRET, cleanups);
    const withStatus = await post(gw, envelope({ trainer_base_url: `${await upstreamAnswering(status, JSON.stringify(answer))}/v1` }), SECRET);
    const with200 = await post(gw, envelope({ trainer_base_url: `${await upstreamAnswering(200, JSON.stringify(answer))}/v1` }), SECRET);
    // The 200 case, as documented: an OpenAI error with the status the error names.
    expect(with200.status).toBe(status);
    expect(JSON.parse(with200.text).error).toMatchObject({ message: answer.message, type: answer.type });
    // The same error with its own status: status kept, and its body's words, not a wrapper around its JSON.
    expect(withStatus.status).toBe(status);
    const body = JSON.parse(withStatus.text) as { error?: { message?: unknown; type?: unknown }; message?: unknown; type?: unknown };
    const told = body.error ?? body;
    expect(told).toMatchObject({ message: answer.message, type: answer.type });
  });
});

describe("an upstream's error with a numeric code (vLLM's is the HTTP status), on to the client", () => {
  it.each([
    ["flat, with its own 404", 404, { object: "error", message: "The model `policy-x` does not exist.", type: "NotFoundError", param: null, code: 404 }],
    ["flat, with a 200", 200, { object: "error", message: "The model `policy-x` does not exist.", type: "NotFoundError", param: null, code: 404 }],
    ["nested, as current vLLM", 400, { error: { message: "maximum context length is 4096 tokens", type: "BadRequestError", param: null, code: 400 } }],
  ])("is an OpenAI error (code a string), which the Worker passes on in its own words (%s)", async (_what, status, answer) => {
    // OpenAI types code as a string or null: the gateway's flat error made with the number, and
    // vLLM's nested one, failed the Worker's check, and the client got the exchange's wrapper
    // ("The inference upstream answered 404: {...}") instead of the model server's words.
    const r = await post(await ownGateway(SECRET, cleanups), envelope({ trainer_base_url: `${await upstreamAnswering(status, JSON.stringify(answer))}/v1` }), SECRET);
    const words = "error" in answer ? answer.error : answer;
    if (!("error" in answer)) expect(OpenAIError.parse(JSON.parse(r.text)).error).toMatchObject({ message: words.message, code: "404" });
    // What the Worker answers its client for this gateway answer (src/relay/openai-errors.ts).
    const client = gatewayErrorResponse(new Response(r.text, { status: r.status, headers: { "content-type": r.type } }), r.text);
    expect({ status: client.status, body: await client.json() }).toEqual({ status: words.code, body: { error: { message: words.message, type: words.type, param: null, code: String(words.code) } } });
  });
});
