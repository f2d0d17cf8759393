/**
 * Per-token request limits cover every path under `/e/<engine>` that an engine token reaches the
 * engine on (docs/operations.md, "Request limits": 429 before the engine is asked), not only the
 * API's routes: an unknown path, one under `/v1/` that is no LLM route, and `/e/<engine>` itself
 * each cost the engine its token check before their 404. Only the relay's own routes, whose
 * calls carry a per-claim key, go uncounted: by method and path, as the relay serves them. And
 * only a client's ends and aborts, POSTs, count apart.
 */
import { describe, expect, it } from "vitest";
import { createEngine } from "./support/harness";
import { inOneWindow, send } from "./support/rate-limit";

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

  it("refuses a client over its limit on a relay path's other methods, which go to the router and its token check", async () => {
    const e = await createEngine("rl-relay-method");
    // Not the relay's: an unknown token gets the engine's 401, so the engine was asked.
    expect((await send(`/e/${e.name}/v1/chat/completions`, "rx_client_not-a-real-token")).status).toBe(401);
    await inOneWindow(e, e.tokens.client, async () => {
      for (const [method, path] of [
        ["GET", `/e/${e.name}/v1/chat/completions`],
        ["GET", `/e/${e.name}/v1/completions`],
        ["POST", `/e/${e.name}/v1/models`],
        ["DELETE", `/e/${e.name}/v1/chat/completions`],
      ] as const) {
        const a = await send(path, e.tokens.client, undefined, method);
        expect({ method, path, status: a.status, error: a.json["error"] }).toEqual({ method, path, status: 429, error: "rate_limited" });
      }
    });
  }, 90_000);

  it("counts apart only a client's POSTs of an end or an abort: other methods, and other roles' POSTs, are refused over the limit", async () => {
    const e = await createEngine("rl-end-apart");
    await inOneWindow(e, e.tokens.client, async () => {
      for (const [method, path] of [
        ["GET", `/e/${e.name}/end_episode`],
        ["GET", `/e/${e.name}/abort_episode`],
        ["PUT", `/e/${e.name}/end_episode`],
      ] as const) {
        expect({ method, path, status: (await send(path, e.tokens.client, undefined, method)).status }).toEqual({ method, path, status: 429 });
      }
      // A client's own end still goes through (its 422: an empty body; not a 429).
      expect((await send(`/e/${e.name}/end_episode`, e.tokens.client, {})).status).toBe(422);
    });
    await inOneWindow(e, e.tokens.viewer, async () => {
      // A viewer may end nothing (the engine's 403): no second budget of engine calls.
      expect((await send(`/e/${e.name}/end_episode`, e.tokens.viewer, {})).status).toBe(429);
    });
  }, 180_000);
});
