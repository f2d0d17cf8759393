/**
 * JSON.stringify writes NaN and ±Infinity as null, and the clients sent request bodies so: a
 * locked learning rate of Infinity (a computed value, 0/0) was locked as null and the exchange
 * answered 200, as it would for a null asked for. The exchange's schemas take finite numbers only,
 * so only the client can tell: it refuses such a body before any request. A real HTTP server
 * records what arrives.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { EngineClient, RunsClient } from "../../src/client";
import { bodyText, serveHttp, type TestServer } from "./support/http-server";

let server: TestServer;
const bodies: string[] = [];

beforeAll(async () => {
  server = await serveHttp(async (req, res) => {
    bodies.push(await bodyText(req));
    res.writeHead(500, { "content-type": "application/json" }).end(JSON.stringify({ error: "unexpected", detail: "no request should arrive" }));
  });
});
afterAll(async () => server?.close());
beforeEach(() => {
  bodies.length = 0;
});

const runs = () => new RunsClient({ baseUrl: `${server.origin}/e/eng`, token: "op" });

describe("a request body holding a number JSON cannot carry", () => {
  const cases: Array<[string, () => Promise<unknown>, RegExp]> = [
    ["a locked field of Infinity", () => runs().setLockedFields({ set: [{ section: "trainer", name: "learning_rate", value: Infinity }] }), /"value" is Infinity/],
    ["an edit of NaN", () => runs().editConfig("temperature", NaN), /"value" is NaN/],
    ["a nested -Infinity", () => runs().editConfig("schedule", { warmup: [1, -Infinity] }), /"1" is -Infinity/],
    ["a reward of NaN", () => new EngineClient({ baseUrl: `${server.origin}/e/eng`, token: "c" }).endEpisode({ client_uuid: "c", episode_uuid: "ep", workflow_output: { reward: NaN } }), /"reward" is NaN/],
  ];
  for (const [what, send, says] of cases) {
    it(`is refused before any request: ${what}`, async () => {
      await expect(send()).rejects.toThrow(says);
      expect(bodies).toEqual([]);
    });
  }
});
