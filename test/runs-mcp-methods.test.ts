/**
 * GET and DELETE of an engine's `/mcp` (the MCP endpoint answers POST only: 405) check the token
 * and the engine first, as every path under /e/<engine>/ does (docs/security.md, "Roles"): no
 * token or an unknown one is a 401 and an unknown engine a 404 before the 405.
 */
import { describe, expect, it } from "vitest";
import { createEngine, raw } from "./support/harness";

describe("GET and DELETE of an engine's /mcp check the token and the engine as every path under it does", () => {
  it("answers 401 without a token or with one the engine does not know, and 404 for an unknown engine", async () => {
    const e = await createEngine("mcp-gate");
    const got = {
      noToken: (await raw(`/e/${e.name}/mcp`)).status,
      madeUpToken: (await raw(`/e/${e.name}/mcp`, { token: "rx_viewer_madeup" })).status,
      deleteNoToken: (await raw(`/e/${e.name}/mcp`, { method: "DELETE" })).status,
      unknownEngine: (await raw(`/e/no-such-engine-mcp/mcp`, { token: e.tokens.viewer })).status,
    };
    // Baseline, which holds: POST to the same path checks them.
    expect((await raw(`/e/${e.name}/mcp`, { body: "{}" })).status).toBe(401);
    expect(got).toEqual({ noToken: 401, madeUpToken: 401, deleteNoToken: 401, unknownEngine: 404 });
  });
});
