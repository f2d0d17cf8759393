/**
 * The SDK's clients put names into URL paths. `.` and `..` cannot be one: a URL parser takes
 * them, escaped too, for dot-segments and drops them, so `revokeToken(engine, "..")` sent DELETE
 * to the engine's own URL and `runResults(".")` read the run named "results". Each is refused
 * before any request; a real HTTP server records what arrives.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { AdminClient, LedgerClient, RunsClient } from "../../src/client";
import { serveHttp, type TestServer } from "./support/http-server";

let server: TestServer;
const seen: string[] = [];

beforeAll(async () => {
  server = await serveHttp(async (req, res) => {
    seen.push(`${req.method} ${req.url}`);
    res.writeHead(404, { "content-type": "application/json" }).end(JSON.stringify({ error: "not_found", detail: "no route" }));
  });
});
afterAll(async () => server?.close());
beforeEach(() => {
  seen.length = 0;
});

describe("a name that is a dot-segment", () => {
  const admin = () => new AdminClient({ origin: server.origin, adminToken: "adm" });
  const runs = () => new RunsClient({ baseUrl: `${server.origin}/e/eng`, token: "t" });
  const cases: Array<[string, () => Promise<unknown>]> = [
    ["AdminClient.revokeToken(engine, '..')", () => admin().revokeToken("eng", "..")],
    ["AdminClient.listTokens('.')", () => admin().listTokens(".")],
    ["AdminClient.deleteArchiveOnce('..')", () => admin().deleteArchiveOnce("..")],
    ["RunsClient.stopRun('..')", () => runs().stopRun("..", { force: true })],
    ["RunsClient.runResults('.')", () => runs().runResults(".")],
    ["RunsClient.reportRun('..')", () => runs().reportRun("..", { status: "running" })],
    ["LedgerClient.media('..')", () => new LedgerClient({ baseUrl: `${server.origin}/e/eng`, token: "t" }).media("..")],
  ];
  for (const [call, send] of cases) {
    it(`${call} is refused, and nothing is sent`, async () => {
      await expect(send()).rejects.toThrow(/is '\.' or '\.\.', which URLs read as a dot-segment/);
      expect(seen).toEqual([]);
    });
  }

  it("goes on sending names that only hold dots among other characters", async () => {
    await expect(runs().runResults("..run")).rejects.toMatchObject({ status: 404 });
    expect(seen).toEqual(["GET /e/eng/runs/..run/results"]);
  });
});
