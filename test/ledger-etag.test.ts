/**
 * A trajectory's ETag, in workerd with real D1 and R2: it changes whenever the answer would (a
 * call recorded, the claim ended, calls removed by retention), an If-None-Match that names the
 * current one is answered 304 without a body, any other (stale, malformed) the whole answer, and
 * the caller is checked before any of it: a token that may not read gets 401 or 403, never a 304
 * that would tell it the trajectory is there.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { LedgerClient } from "../src/client";
import type { Trajectory } from "../src/protocol/ledger";
import { batchOf, callRecord as call, postCalls as post } from "./support/ledger";
import { user } from "./support/ledger-calls";
import { admin, advance, claimKeyFields, createEngine, endBody, ORIGIN, rollingWith, withGateway, workerFetch, type TestEngine } from "./support/harness";

type Claim = { episode: string; fence: number; client: string; key: Awaited<ReturnType<typeof claimKeyFields>> };

async function claimOne(e: TestEngine): Promise<Claim> {
  const c = await e.as("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 600 });
  expect(c.success).toBe(true);
  const key = await claimKeyFields(c.openai_api_key);
  return { episode: key.episode_uuid, fence: key.fence, client: "c1", key };
}

/** A live claim of a new engine with one call recorded. */
async function liveClaim(): Promise<{ e: TestEngine; c: Claim }> {
  const e = await createEngine();
  await rollingWith(e, 1);
  const c = await claimOne(e);
  await post(e, batchOf([call(c, { body: { messages: [user] } })]));
  return { e, c };
}

/** GET of a trajectory route: its status, ETag, Cache-Control and body as text. */
async function read(e: TestEngine, path: string, headers: Record<string, string> = {}, token: string | null = e.tokens.viewer) {
  const res = await workerFetch(`${ORIGIN}/e/${e.name}${path}`, { headers: { ...(token === null ? {} : { authorization: `Bearer ${token}` }), ...headers } });
  return { status: res.status, etag: res.headers.get("etag"), cacheControl: res.headers.get("cache-control"), text: await res.text() };
}

const callsOf = (text: string): number => (JSON.parse(text) as Trajectory).calls.length;

describe("a trajectory's ETag", () => {
  it("is answered 304 without a body while nothing changed, and changes when a call is added and when the claim ends", async () => {
    const { e, c } = await liveClaim();
    const paths = [`/trajectories/${c.episode}`, `/trajectories/${c.episode}/${c.fence}`];

    const first = await read(e, paths[0] as string);
    expect(first).toMatchObject({ status: 200, cacheControl: "private, no-cache" });
    expect(first.etag).toMatch(/^"[0-9a-f]{32}"$/);
    expect(callsOf(first.text)).toBe(1);
    const byFence = await read(e, paths[1] as string);
    expect(byFence.status).toBe(200);
    expect(byFence.etag).toMatch(/^"[0-9a-f]{32}"$/);
    for (const [path, tag] of [
      [paths[0], first.etag],
      [paths[1], byFence.etag],
    ] as const) {
      // The same tag again, alone, weak, among others, or `*`: the reader holds the current answer.
      for (const held of [tag, `W/${tag}`, `"other", ${tag}`, "*"]) {
        expect(await read(e, path as string, { "if-none-match": held as string }), held as string).toEqual({ status: 304, etag: tag, cacheControl: "private, no-cache", text: "" });
      }
    }

    // A call recorded: every tag held is stale, and is sent the new answer.
    await post(e, batchOf([call(c, { body: { messages: [user, { role: "assistant", content: "4" }, user] } })]));
    for (const [path, tag] of [
      [paths[0], first.etag],
      [paths[1], byFence.etag],
    ] as const) {
      const again = await read(e, path as string, { "if-none-match": tag as string });
      expect(again.status).toBe(200);
      expect(again.etag).not.toBe(tag);
      expect(callsOf(again.text)).toBe(2);
    }
    const live = await read(e, paths[0] as string);
    expect((await read(e, paths[0] as string, { "if-none-match": live.etag as string })).status).toBe(304);

    // Ended: the same calls, with an outcome and reward now.
    expect((await e.as("client").endEpisode(endBody(c.client, c.episode, 0.5))).success).toBe(true);
    await advance(e, 2000);
    const ended = await read(e, paths[0] as string, { "if-none-match": live.etag as string });
    expect(ended.status).toBe(200);
    expect(ended.etag).not.toBe(live.etag);
    expect(JSON.parse(ended.text)).toMatchObject({ outcome: "ended", reward: 0.5 });
    expect((await read(e, paths[0] as string, { "if-none-match": ended.etag as string })).status).toBe(304);
  });

  it("changes when the episode's latest claim is another one", async () => {
    const { e, c } = await liveClaim();
    const latest = await read(e, `/trajectories/${c.episode}`);
    // A later claim of the same episode (its fence after this one's): the path without a fence names it now.
    await post(e, batchOf([call({ ...c, fence: c.fence + 1 }, { body: { messages: [user] } })]));
    const next = await read(e, `/trajectories/${c.episode}`, { "if-none-match": latest.etag as string });
    expect(next.status).toBe(200);
    expect((JSON.parse(next.text) as Trajectory).fence).toBe(c.fence + 1);
    // The first claim's own path still holds the same answer.
    const own = await read(e, `/trajectories/${c.episode}/${c.fence}`);
    expect((await read(e, `/trajectories/${c.episode}/${c.fence}`, { "if-none-match": own.etag as string })).status).toBe(304);
  });

  it("changes when retention removes calls of the claim", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    await new LedgerClient({ baseUrl: `${ORIGIN}/e/${e.name}`, token: e.tokens.operator, fetch: workerFetch }).configure({ retention_days: 2 });
    await withGateway(e);
    const c = await claimOne(e);
    expect((await e.stub.relayBegin(c.key)).ok).toBe(true);
    const day = 86_400_000;
    await post(e, batchOf([call(c, { admitted_at: e.clock.t - 3 * day, body: { messages: [user] } }), call(c, { admitted_at: e.clock.t - day, body: { messages: [user] } })]));
    const before = await read(e, `/trajectories/${c.episode}`);
    expect(callsOf(before.text)).toBe(2);
    await advance(e, 1000);
    await advance(e, 3_600_000);
    const after = await read(e, `/trajectories/${c.episode}`, { "if-none-match": before.etag as string });
    expect(after.status).toBe(200);
    expect(after.etag).not.toBe(before.etag);
    expect(callsOf(after.text)).toBe(1);
  });

  // Retention deletes in chunks of rows, not in the answer's order: a middle call can go while a
  // late batch brings an earlier one. Count, first and last call then stay as they were.
  it("changes when one call is removed and another recorded between the same first and last", async () => {
    const e = await createEngine();
    await rollingWith(e, 1);
    const c = await claimOne(e);
    const at = (t: number) => call(c, { admitted_at: Date.UTC(2098, 11, 1) + t, body: { messages: [user] } });
    const [first, middle, last] = [at(1000), at(2000), at(4000)];
    await post(e, batchOf([first, middle, last]));
    const before = await read(e, `/trajectories/${c.episode}`);
    await env.DB.prepare("DELETE FROM llm_calls WHERE engine = ? AND call_id = ?").bind(e.name, middle.call_id).run();
    await post(e, batchOf([at(3000)]));
    const after = await read(e, `/trajectories/${c.episode}`, { "if-none-match": before.etag as string });
    expect(after.status).toBe(200);
    expect(callsOf(after.text)).toBe(3);
    expect(after.etag).not.toBe(before.etag);
  });

  it("lets LedgerClient watch a live claim: read once, then unchanged until a call is added", async () => {
    const { e, c } = await liveClaim();
    const ledger = (role: "viewer" | "client") => new LedgerClient({ baseUrl: `${ORIGIN}/e/${e.name}`, token: e.tokens[role], fetch: workerFetch });
    const first = await ledger("viewer").trajectoryIfChanged(c.episode, null);
    if (first === "unchanged") throw new Error("a first read with no tag cannot be unchanged");
    expect(first.trajectory.calls).toHaveLength(1);
    expect(first.etag).toMatch(/^"[0-9a-f]{32}"$/);
    expect(await ledger("viewer").trajectoryIfChanged(c.episode, first.etag)).toBe("unchanged");
    expect(await ledger("viewer").trajectoryIfChanged(c.episode, first.etag, c.fence)).not.toBe("unchanged");
    await post(e, batchOf([call(c, { body: { messages: [user] } })]));
    const second = await ledger("viewer").trajectoryIfChanged(c.episode, first.etag);
    expect(second === "unchanged" ? 0 : second.trajectory.calls.length).toBe(2);
    // A client token may not read trajectories: refused, with or without a tag.
    await expect(ledger("client").trajectoryIfChanged(c.episode, first.etag)).rejects.toMatchObject({ status: 403 });
  });

  it("tags each form of the answer apart: a tag of the whole form is no tag of the delta form", async () => {
    const { e, c } = await liveClaim();
    const whole = await read(e, `/trajectories/${c.episode}`);
    const delta = await read(e, `/trajectories/${c.episode}?form=delta`);
    expect(delta.status).toBe(200);
    expect((JSON.parse(delta.text) as Trajectory).form).toBe("delta");
    expect(delta.etag).toMatch(/^"[0-9a-f]{32}"$/);
    expect(delta.etag).not.toBe(whole.etag);
    expect((await read(e, `/trajectories/${c.episode}?form=whole`)).etag).toBe(whole.etag);
    expect((await read(e, `/trajectories/${c.episode}?form=delta`, { "if-none-match": delta.etag as string })).status).toBe(304);
    const crossed = await read(e, `/trajectories/${c.episode}?form=delta`, { "if-none-match": whole.etag as string });
    expect(crossed.status).toBe(200);
    expect(crossed.text).toBe(delta.text);
    // A form of no name is refused before any tag is told.
    expect((await read(e, `/trajectories/${c.episode}?form=diff`, { "if-none-match": "*" })).status).toBe(422);
  });

  it("sends the whole answer for an If-None-Match of no valid form", async () => {
    const { e, c } = await liveClaim();
    const { etag } = await read(e, `/trajectories/${c.episode}`);
    const bare = (etag as string).slice(1, -1);
    for (const held of [bare, `${etag} junk`, `"${bare}`, "W/", ",", "**", `${etag}, *x`]) {
      const r = await read(e, `/trajectories/${c.episode}`, { "if-none-match": held });
      expect({ held, status: r.status }).toEqual({ held, status: 200 });
      expect(callsOf(r.text)).toBe(1);
    }
  });

  it("checks the caller first: a token that may not read is refused, never told 304", async () => {
    const { e, c } = await liveClaim();
    const path = `/trajectories/${c.episode}`;
    const { etag } = await read(e, path);
    for (const held of [etag as string, "*"]) {
      expect((await read(e, path, { "if-none-match": held }, e.tokens.client)).status).toBe(403);
      expect((await read(e, path, { "if-none-match": held }, null)).status).toBe(401);
      expect((await read(e, path, { "if-none-match": held }, "not-a-token")).status).toBe(401);
      const other = await createEngine();
      expect((await read(e, path, { "if-none-match": held }, other.tokens.viewer)).status).toBe(401);
    }
    await admin.revokeToken(e.name, e.tokenIds.viewer);
    const revoked = await read(e, path, { "if-none-match": etag as string });
    expect(revoked.status).toBe(401);
    expect(revoked.etag).toBeNull();
    // Nothing of an episode the engine does not hold, whatever is held.
    expect((await read(e, "/trajectories/no-such-episode", { "if-none-match": "*" }, e.tokens.operator)).status).toBe(404);
  });
});
