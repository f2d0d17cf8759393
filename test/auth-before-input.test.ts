/**
 * docs/security.md, "Roles": no token, or one the engine does not know (revoked, another
 * engine's), is a 401, and a role that may not call the route a 403, on every path under
 * /e/<engine>/, whatever the request's body. The engine API and Atropos's routes judge the
 * input in the Worker before the engine sees the caller: a body that does not fit asks the
 * engine about the caller before it is answered 422 (http/engine-routes.ts, refusedCaller).
 */
import { describe, expect, it } from "vitest";
import { admin, createEngine, raw } from "./support/harness";

describe("an unknown token, or a role that may not call a route, is refused before the body is judged", () => {
  it("engine API and Atropos routes answer 401/403, not 422, to such tokens with a body that does not fit", async () => {
    const e = await createEngine("tok-first");
    const other = await createEngine("tok-first-other");
    const spare = await admin.issueToken(e.name, "client", "revoked");
    await admin.revokeToken(e.name, spare.id);

    // Baseline, which holds: the runs API checks the token first.
    expect((await raw(`/e/${e.name}/runs/config/edit`, { token: spare.token, body: "{}" })).status).toBe(401);

    const cases = [
      { who: "revoked client token", token: spare.token, path: "claim_episode", want: 401 },
      { who: "another engine's client token", token: other.tokens.client, path: "claim_episode", want: 401 },
      { who: "a made-up token", token: "rx_client_madeup", path: "end_episode", want: 401 },
      { who: "viewer token", token: e.tokens.viewer, path: "claim_episode", want: 403 },
      { who: "client token", token: e.tokens.client, path: "register_episode", want: 403 },
      { who: "revoked client token", token: spare.token, path: "atropos/register-env", want: 401 },
      { who: "viewer token", token: e.tokens.viewer, path: "atropos/scored_data", want: 403 },
    ];
    const got = [];
    for (const c of cases) {
      const r = await raw(`/e/${e.name}/${c.path}`, { token: c.token, body: "{}" });
      got.push({ who: c.who, path: c.path, status: r.status, error: r.json?.["error"] });
    }
    expect(got).toEqual(cases.map((c) => ({ who: c.who, path: c.path, status: c.want, error: c.want === 401 ? "invalid_token" : "forbidden" })));
  });
});
