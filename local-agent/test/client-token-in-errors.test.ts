/**
 * A client whose base URL carries its token (`.../e/<engine>/t/<token>`, the form for clients
 * that take only a URL) quoted that URL, token and all, in the errors it threw: for an answer
 * that is no JSON (a proxy's 502 page) and for one of a shape it cannot read. Callers log these
 * errors (the agent does), and the exchange itself never repeats a path's token. A real HTTP
 * server answers as a proxy or a newer exchange might.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ExchangeError, RunsClient } from "../../src/client";
import { serveHttp, type TestServer } from "./support/http-server";

const SECRET = "op_SECRETSECRETSECRET1234567890";
let server: TestServer;

beforeAll(async () => {
  server = await serveHttp(async (req, res) => {
    if ((req.url ?? "").endsWith("/runs/config")) {
      // A 502 page from a proxy in front of the exchange.
      res.writeHead(502, { "content-type": "text/html" });
      res.end("<html><body>Bad gateway</body></html>");
      return;
    }
    // A 2xx this client cannot read (a newer exchange's shape).
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ something: "else" }));
  });
});
afterAll(async () => server?.close());

async function errorOf(p: Promise<unknown>): Promise<ExchangeError> {
  const e = await p.then(
    () => null,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(ExchangeError);
  return e as ExchangeError;
}

describe("the errors of a client whose base URL carries its token", () => {
  const client = () => new RunsClient({ baseUrl: `${server.origin}/e/eng/t/${SECRET}` });

  it("an unreadable 2xx answer's error does not quote the token", async () => {
    const e = await errorOf(client().listRuns());
    expect(e.code).toBe("unreadable_answer");
    expect(e.message).not.toContain(SECRET);
    expect(e.detail).not.toContain(SECRET);
    expect(e.detail).toContain("/e/eng/t/[hidden]/runs");
  });

  it("a non-JSON answer's error (a proxy's 502 page) does not quote the token", async () => {
    const e = await errorOf(client().getConfig());
    expect(e.status).toBe(502);
    expect(e.message).not.toContain(SECRET);
    expect(e.detail).not.toContain(SECRET);
  });
});
