/**
 * clear_sessions against a real HTTP server standing in for the inference upstream's admin
 * endpoint (a peer of the agent, not the thing under test).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { clearSessions, clearSessionsBase, type ClearSessionsBody } from "../../src/rollout/clear-sessions";
import { freePort } from "../runs/support";

type Seen = { method: string; url: string; body: unknown };
const servers: Server[] = [];

async function upstream(answer: (req: IncomingMessage, res: ServerResponse) => void): Promise<{ url: string; seen: Seen[] }> {
  const seen: Seen[] = [];
  const srv = createServer((req, res) => {
    let text = "";
    req.on("data", (d: Buffer) => (text += d.toString()));
    req.on("end", () => {
      seen.push({ method: req.method ?? "", url: req.url ?? "", body: text === "" ? null : (JSON.parse(text) as unknown) });
      answer(req, res);
    });
  });
  servers.push(srv);
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}`, seen };
}

afterEach(() => {
  for (const s of servers.splice(0)) s.closeAllConnections(), s.close();
});

const body: ClearSessionsBody = { kind: "clear_sessions", session_ids: ["s1", "s2"], group_ids: ["g1"], reason: "incomplete_group_ttl" };
const opts = { timeoutMs: 500, stop: new AbortController().signal };

describe("clearSessions", () => {
  it("POSTs {session_ids, reason, group_ids} to <upstream>/admin/clear_sessions", async () => {
    const up = await upstream((_q, res) => res.writeHead(200, { "content-type": "application/json" }).end('{"cleared":2}'));
    const out = await clearSessions(up.url, body, opts);
    expect(out).toEqual({ ok: true, detail: 'the inference upstream cleared 2 sessions of 1 group (incomplete_group_ttl): {"cleared":2}' });
    expect(up.seen).toEqual([{ method: "POST", url: "/admin/clear_sessions", body: { session_ids: ["s1", "s2"], reason: "incomplete_group_ttl", group_ids: ["g1"] } }]);
  });

  it("reports an error status in a failed ack", async () => {
    const up = await upstream((_q, res) => res.writeHead(503).end("busy"));
    expect(await clearSessions(up.url, body, opts)).toEqual({ ok: false, detail: "the inference upstream answered 503 to clearing 2 sessions of 1 group (incomplete_group_ttl): busy" });
  });

  it("acks a redirect as failed, without following it: a page it leads to cleared nothing", async () => {
    // A login page or a moved admin API in front of the proxy: fetch followed the 302 as a GET of
    // the page, without the sessions, and acked its 200 as "cleared".
    const up = await upstream((q, res) => (q.url === "/admin/clear_sessions" ? res.writeHead(302, { location: "/login" }).end() : res.writeHead(200).end("sign in")));
    expect(await clearSessions(up.url, body, opts)).toEqual({ ok: false, detail: "the inference upstream answered 302 to clearing 2 sessions of 1 group (incomplete_group_ttl): " });
    expect(up.seen.map((s) => `${s.method} ${s.url}`)).toEqual(["POST /admin/clear_sessions"]);
  });

  it("gives up on an unreachable upstream at once and on a silent one at the deadline", async () => {
    const closed = `http://127.0.0.1:${await freePort()}`;
    const refused = await clearSessions(closed, body, opts);
    expect(refused).toMatchObject({ ok: false, detail: expect.stringContaining("could not clear 2 sessions of 1 group (incomplete_group_ttl): ") });
    // Every role of the engine reads the detail: the upstream's address is in the agent's log alone.
    expect(refused?.detail).not.toContain(new URL(closed).host);

    const silent = await upstream(() => {}); // never answers
    const t0 = Date.now();
    const out = await clearSessions(silent.url, body, opts);
    expect(out).toMatchObject({ ok: false, detail: expect.stringContaining("no answer within 0.5 s") });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(450);
    expect(Date.now() - t0).toBeLessThan(5000);
  });

  it("sends a URL's user:password as Basic authorization, and puts neither them nor the address in what it acks", async () => {
    const password = "p4ss:w0rd/x";
    let authorization: string | undefined;
    const up = await upstream((q, res) => {
      authorization = q.headers.authorization;
      // An upstream that names what it was sent, and where it is.
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ cleared: 2, auth: q.headers.authorization, at: q.headers.host }));
    });
    const withCredentials = up.url.replace("http://", `http://trainer:${encodeURIComponent(password)}@`);
    const out = await clearSessions(clearSessionsBase(null, `${withCredentials}/v1`), body, opts);
    expect(out).toMatchObject({ ok: true });
    expect(authorization).toBe(`Basic ${Buffer.from(`trainer:${password}`).toString("base64")}`);
    expect(up.seen).toHaveLength(1);
    for (const secret of [password, encodeURIComponent(password), authorization ?? "?", new URL(up.url).host]) expect(out?.detail).not.toContain(secret);

    const closed = `http://trainer:${encodeURIComponent(password)}@127.0.0.1:${await freePort()}`;
    const refused = await clearSessions(closed, body, opts);
    expect(refused).toMatchObject({ ok: false });
    for (const secret of [password, encodeURIComponent(password), "127.0.0.1"]) expect(refused?.detail).not.toContain(secret);
  });

  it("has nothing to do without sessions, fails clearly without an upstream, and is not acked when the agent stops", async () => {
    expect(await clearSessions(null, { ...body, session_ids: [] }, opts)).toMatchObject({ ok: true });
    expect(await clearSessions(null, body, opts)).toMatchObject({ ok: false, detail: expect.stringContaining("set inferenceAdminUrl or inferenceUpstream") });
    const silent = await upstream(() => {});
    const stopper = new AbortController();
    const pending = clearSessions(silent.url, body, { timeoutMs: 5000, stop: stopper.signal });
    await new Promise((r) => setTimeout(r, 100));
    stopper.abort();
    expect(await pending).toBeNull();
  });

  it("goes to inferenceAdminUrl, or else to the gateway's inference upstream without /v1", () => {
    expect(clearSessionsBase("http://admin:1", "http://proxy:2/v1")).toBe("http://admin:1");
    expect(clearSessionsBase(null, "http://proxy:2/v1")).toBe("http://proxy:2");
    expect(clearSessionsBase(undefined, "http://proxy:2")).toBe("http://proxy:2");
    expect(clearSessionsBase(null, null)).toBeNull();
  });
});
