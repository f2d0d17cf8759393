/**
 * The ledger's media on the Worker's side, in workerd with real D1 and R2: a medium uploaded by
 * its digest (PUT <engine>/agent/media/<sha256>), refused with nothing stored when it is not
 * that medium, too large, or sent by a role that may not; a batch naming a medium not stored
 * refused 409; records read back by reference, the medium served exactly; trajectories sent a
 * call at a time; media deleted with their engine.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { LedgerClient } from "../src/client";
import { namePrefix } from "../src/ledger/keys";
import { MAX_MEDIA_BYTES, isMediaCandidate, mediaRef } from "../src/ledger/media-refs";
import { MAX_MEDIA_UPLOAD_BODY_BYTES, MAX_REQUEST_BODY_BYTES } from "../src/protocol/limits";
import { trajectoryJsonPieces } from "../src/ledger/trajectory-json";
import { ADMIN_TOKEN, advance, claimKeyFields, createEngine, endBody, ORIGIN, raw, rollingWith, workerFetch, type TestEngine } from "./support/harness";
import { batchOf, callRecord, postCalls } from "./support/ledger";
import { AdminClient } from "../src/client";

type Role = "viewer" | "operator" | "trainer" | "client";

const ledgerOf = (e: TestEngine, role: Role) => new LedgerClient({ baseUrl: `${ORIGIN}/e/${e.name}`, token: e.tokens[role], fetch: workerFetch });

async function sha256(s: string): Promise<string> {
  const d = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(s)));
  return [...d].map((b) => b.toString(16).padStart(2, "0")).join("");
}

const screenshot = (n: number, seed = 0): string => `data:image/png;base64,${"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".repeat(Math.ceil(n / 64) + seed).slice(seed, n + seed)}`;

const put = (e: TestEngine, sha: string, data: string, role: Role = "trainer") => raw(`/e/${e.name}/agent/media/${sha}`, { method: "PUT", token: e.tokens[role], body: JSON.stringify({ data }) });
const get = (e: TestEngine, sha: string, role: Role = "viewer") => raw(`/e/${e.name}/trajectories/media/${sha}`, { token: e.tokens[role] });

/** Every object R2 holds for engines named `name`. */
const objects = async (name: string): Promise<string[]> => (await env.LEDGER.list({ prefix: `ledger/${encodeURIComponent(name)}/` })).objects.map((o) => o.key);

describe("ledger media", () => {
  it("takes out of a record only a medium whose upload the Worker stores, its JSON escapes counted", async () => {
    const e = await createEngine("media");
    const sha256 = async (t: string) => [...new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(t)))].map((b) => b.toString(16).padStart(2, "0")).join("");
    // 9 MB of UTF-8 each (a 4K screenshot's base64 is 8 to 11 MB): JSON text (quotes, newlines) grows by half in an upload's JSON body, past the media route's 12 MiB; base64-like text does not.
    const escaped = `data:application/json,${'{"k":"v"}\n'.repeat(900_000)}`;
    const plain = `data:application/json,${"kvkvkvkvkv".repeat(900_000)}`;
    expect(isMediaCandidate(escaped, "image_url.url", new TextEncoder().encode(escaped).length)).toBe(false);
    expect(isMediaCandidate(plain, "image_url.url", new TextEncoder().encode(plain).length)).toBe(true);
    const put = await raw(`/e/${e.name}/agent/media/${await sha256(plain)}`, { method: "PUT", token: e.tokens.trainer, body: JSON.stringify({ data: plain }) });
    expect(put.status, put.text.slice(0, 200)).toBe(200);
  });

  it("stores a medium by its digest once (idempotent) and serves it exactly to viewers, operators and trainers, beside an episode named \"media\"", async () => {
    const e = await createEngine("lmedia");
    const data = screenshot(20_000);
    const sha = await sha256(data);
    const first = await put(e, sha, data);
    expect(first.status, first.text).toBe(200);
    expect(first.json).toEqual({ sha256: sha, bytes: data.length });
    expect((await put(e, sha, data)).status).toBe(200);
    const keys = (await objects(e.name)).filter((k) => k.includes("/media/"));
    expect(keys).toHaveLength(1);
    expect(keys[0]!.startsWith(namePrefix(e.name))).toBe(true);
    expect(keys[0]).toMatch(new RegExp(`/\\d{4}-\\d{2}-\\d{2}/media/${sha}$`));
    for (const role of ["viewer", "operator", "trainer"] as const) {
      const r = await get(e, sha, role);
      expect(r.status).toBe(200);
      expect(r.text === data).toBe(true);
    }
    expect((await ledgerOf(e, "viewer").media(sha)) === data).toBe(true);
    // A path that is no digest is still an episode's: one named "media", read by its fence.
    const claim = { episode: "media", fence: 5, client: "c1" };
    expect((await postCalls(e, batchOf([callRecord(claim, { capture: "messages", body: { messages: [{ role: "user", content: "hi" }] } })]))).status).toBe(200);
    const t = await ledgerOf(e, "viewer").trajectory("media", 5);
    expect(t.calls.map((c) => c.messages)).toEqual([[{ role: "user", content: "hi" }]]);
    expect(await get(e, "nothex")).toMatchObject({ status: 404, json: { error: "unknown_trajectory" } });
  });

  it("refuses a medium whose data is not the path's digest (422), one too large (413), a bad digest (404) and a client (403), storing nothing", async () => {
    const e = await createEngine("lmedia");
    const data = screenshot(20_000);
    const sha = await sha256(data);
    const wrong = await sha256("another");
    expect(await put(e, wrong, data)).toMatchObject({ status: 422, json: { error: "media_hash_mismatch" } });
    const big = screenshot(MAX_MEDIA_BYTES + 1);
    expect(await put(e, await sha256(big), big)).toMatchObject({ status: 413, json: { error: "media_too_large" } });
    // A body past the route's own limit is not read whole.
    const huge = screenshot(MAX_MEDIA_UPLOAD_BODY_BYTES);
    expect(await put(e, await sha256(huge), huge)).toMatchObject({ status: 413, json: { error: "payload_too_large", detail: expect.stringContaining(String(MAX_MEDIA_UPLOAD_BODY_BYTES)) } });
    // Another route keeps the exchange's 4 MiB.
    expect(await raw(`/e/${e.name}/agent/calls`, { token: e.tokens.trainer, body: JSON.stringify({ pad: "x".repeat(MAX_REQUEST_BODY_BYTES) }) })).toMatchObject({ status: 413, json: { error: "payload_too_large" } });
    expect(await put(e, "ABC", data)).toMatchObject({ status: 404, json: { error: "unknown_media" } });
    expect(await put(e, sha.toUpperCase(), data)).toMatchObject({ status: 404, json: { error: "unknown_media" } });
    expect((await put(e, sha, data, "client")).status).toBe(403);
    expect((await put(e, sha, data, "viewer")).status).toBe(403);
    expect(await raw(`/e/${e.name}/agent/media/${sha}`, { method: "PUT", token: e.tokens.trainer, body: JSON.stringify({ data, more: 1 }) })).toMatchObject({ status: 422 });
    expect((await raw(`/e/${e.name}/agent/media/${sha}`, { method: "PUT", token: e.tokens.trainer, body: "{" })).status).toBe(400);
    expect(await objects(e.name)).toEqual([]);
    expect(await get(e, sha)).toMatchObject({ status: 404, json: { error: "unknown_media" } });
    expect((await get(e, sha, "client")).status).toBe(403);
  });

  it("refuses a batch naming a medium not stored (409 media_missing, nothing kept), then reads its calls back by reference, each screenshot stored once", async () => {
    const e = await createEngine("lmedia");
    const shot = screenshot(1_500_000);
    const sha = await sha256(shot);
    const claim = { episode: "ep-vision", fence: 1, client: "c1" };
    const withRef = [{ role: "system", content: "desk" }, { role: "user", content: [{ type: "text", text: "look" }, { type: "image_url", image_url: { url: mediaRef(sha), detail: "high" } }] }];
    const answer = { role: "assistant", content: "click(1, 2)" };
    const c1 = callRecord(claim, { capture: "messages", body: { messages: withRef, answer } });
    const c2 = callRecord(claim, { capture: "messages", body: { prefix: { call_id: c1.call_id, count: 3 }, messages: [{ role: "user", content: "next" }], answer } });
    const batch = batchOf([c1, c2]);
    const refused = await postCalls(e, batch);
    expect(refused).toMatchObject({ status: 409, json: { error: "media_missing", detail: expect.stringContaining(sha) } });
    expect(await objects(e.name)).toEqual([]);
    expect((await env.DB.prepare("SELECT COUNT(*) AS n FROM llm_calls WHERE engine = ?").bind(e.name).first<{ n: number }>())?.n).toBe(0);

    expect((await put(e, sha, shot)).status).toBe(200);
    expect(await postCalls(e, batch)).toMatchObject({ status: 200, json: { recorded: 2, duplicates: 0 } });
    const t = await ledgerOf(e, "viewer").trajectory(claim.episode);
    expect(t.calls.map((c) => [c.truncated, c.messages_splice, c.prefix_missing])).toEqual([
      [false, "first", false],
      [false, "extends", false],
    ]);
    expect(t.calls[1]!.messages).toEqual([...withRef, answer, { role: "user", content: "next" }]);
    const inlined = await ledgerOf(e, "viewer").inlineMedia(t.calls[1]!.messages);
    expect(JSON.stringify(inlined) === JSON.stringify([withRef[0], { role: "user", content: [{ type: "text", text: "look" }, { type: "image_url", image_url: { url: shot, detail: "high" } }] }, answer, { role: "user", content: "next" }])).toBe(true);
    // Stored: the screenshot once, and a body object that names it.
    const sizes = await Promise.all((await objects(e.name)).map(async (k) => [k.includes("/media/"), (await env.LEDGER.head(k))!.size] as const));
    expect(sizes.filter(([m]) => m).map(([, n]) => n)).toEqual([shot.length]);
    expect(sizes.filter(([m]) => !m).reduce((n, [, s]) => n + s, 0)).toBeLessThan(2000);
  });

  it("sends a trajectory a call at a time, in the read and the export: its pieces joined are its JSON, one piece per call", async () => {
    const e = await createEngine("lmedia");
    await rollingWith(e, 1);
    const claimed = await e.as("client").claimEpisode({ client_uuid: "c1", discard_episode_timeout: 600 });
    const key = await claimKeyFields(claimed.openai_api_key);
    const claim = { episode: key.episode_uuid, fence: key.fence, client: "c1" };
    const calls = [callRecord(claim, { capture: "messages", body: { messages: [{ role: "user", content: "a" }], answer: { role: "assistant", content: "b" } } })];
    for (let i = 0; i < 30; i++) {
      const prev = calls.at(-1)!;
      calls.push(callRecord(claim, { capture: "messages", body: { prefix: { call_id: prev.call_id, count: 2 + 2 * i }, messages: [{ role: "user", content: `turn ${i}` }], answer: { role: "assistant", content: "ok" } } }));
    }
    expect((await postCalls(e, batchOf(calls))).status).toBe(200);
    expect((await e.as("client").endEpisode(endBody("c1", claim.episode, 1))).success).toBe(true);
    await advance(e, 2000);
    const t = await ledgerOf(e, "viewer").trajectory(claim.episode);
    expect(t.calls).toHaveLength(31);
    const pieces = [...trajectoryJsonPieces(t)];
    expect(pieces).toHaveLength(33);
    const joined = pieces.join(""), whole = JSON.stringify(t);
    let at = 0;
    while (at < whole.length && joined[at] === whole[at]) at++;
    expect(joined === whole, `differ at ${at}: ${joined.slice(at - 60, at + 60)} vs ${whole.slice(at - 60, at + 60)}`).toBe(true);
    // The read and the export answer the same JSON, sent in those pieces: never the trajectory as one string.
    for (const path of [`/trajectories/${claim.episode}`, "/trajectories/export?format=jsonl"]) {
      const res = await workerFetch(`${ORIGIN}/e/${e.name}${path}`, { headers: { authorization: `Bearer ${e.tokens.viewer}` } });
      const chunks: string[] = [];
      const dec = new TextDecoder();
      for await (const c of res.body as unknown as AsyncIterable<Uint8Array>) chunks.push(dec.decode(c, { stream: true }));
      const line = chunks.join("");
      expect(JSON.parse(line)).toEqual(t);
      expect(line.trimEnd() === pieces.join("")).toBe(true);
      // A piece a chunk (the export's line ends with one more, its newline).
      expect(chunks.length, path).toBeGreaterThanOrEqual(pieces.length);
    }
  });

  it("deletes an engine's media with it, and keeps them with keep_history", async () => {
    const admin = new AdminClient({ origin: ORIGIN, adminToken: ADMIN_TOKEN, fetch: workerFetch });
    for (const keep of [false, true]) {
      const e = await createEngine("lmedia");
      const data = screenshot(10_000, keep ? 1 : 2);
      expect((await put(e, await sha256(data), data)).status).toBe(200);
      expect(await objects(e.name)).toHaveLength(1);
      expect((await admin.deleteEngine(e.name, keep ? { keep_history: true } : {})).done).toBe(true);
      expect(await objects(e.name)).toHaveLength(keep ? 1 : 0);
    }
  });
});
