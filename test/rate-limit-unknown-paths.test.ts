/**
 * Per-token request limits cover every path under `/e/<engine>` that an engine token reaches the
 * engine on (docs/operations.md, "Request limits": 429 before the engine is asked), not only the
 * API's routes: an unknown path, one under `/v1/` that is no LLM route, and `/e/<engine>` itself
 * each cost the engine its token check before their 404. Only the relay's own routes, whose
 * calls carry a per-claim key, go uncounted.
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
});
