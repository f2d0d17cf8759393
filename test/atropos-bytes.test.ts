/**
 * The bound on the bytes of Atropos groups an engine holds (max_stored_bytes): one group may be
 * megabytes of JSON, so max_groups alone (200,000 by default) would let the store pass the 10 GB a
 * Durable Object holds long before it refused a group. Bounds here are the smallest the config
 * takes (4 MiB), filled by groups of about 1.2 MB.
 */
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { DEFAULT_ATROPOS_CONFIG, MAX_ATROPOS_STORED_BYTES, MIN_ATROPOS_STORED_BYTES } from "../src/protocol/atropos";
import { ENV, REGISTRATION, atropos, group, gzipped, payloadBytes, running, tags } from "./support/atropos";
import { createEngine, type TestEngine } from "./support/harness";

const MIB = 1024 * 1024;
/** A group of two sequences whose first message makes it about 1.2 MB of JSON. */
const big = (tag: number) => group(tag, 2, 0, { messages: [[{ role: "user", content: "x".repeat(1_200_000) }], [{ role: "user", content: "y" }]] });

/** A group of `n` sequences for env 0 whose first message makes it about `chars` bytes of JSON. */
const sized = (tag: number, n: number, chars: number) =>
  group(tag, n, 0, { messages: Array.from({ length: n }, (_, i) => [{ role: "user", content: (i === 0 ? "x" : "y").repeat(i === 0 ? chars : 1) }]) });

const rows = (e: TestEngine) => runInDurableObject(e.stub, (_i, state) => state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM atropos_groups").one().n);
const held = async (e: TestEngine) => (await e.as("viewer").overview()).atropos;

describe("Atropos's API: the bytes an engine holds", () => {
  it("refuses a group that would pass max_stored_bytes with a 503 that names it and stores nothing; taken batches and /reset_data free the bytes", async () => {
    const e = await createEngine("atr");
    await running(e);
    expect((await atropos(e, "trainer", "POST", "/config", { max_stored_bytes: 4 * MIB })).json).toEqual({ max_groups: 200_000, max_stored_bytes: 4 * MIB });
    for (const tag of [1, 2, 3]) expect((await atropos(e, "client", "POST", "/scored_data", big(tag))).json).toEqual({ status: "received" });
    const three = await held(e);
    expect(three).toMatchObject({ stored_groups: 3, max_groups: 200_000, max_stored_bytes: 4 * MIB });
    expect(three.stored_bytes).toBe(await payloadBytes(e));
    expect(three.stored_bytes).toBeGreaterThan(3 * 1_200_000);

    // Three groups of 200,000: the count is far from its bound, the bytes are not.
    const full = await atropos(e, "client", "POST", "/scored_data", big(4));
    expect(full.status).toBe(503);
    expect(full.headers.get("retry-after")).toBe("5");
    expect(full.json).toMatchObject({ error: "queue_full" });
    expect(full.json.detail).toContain("max_stored_bytes");
    expect(full.json.detail).toContain("4,194,304 bytes");
    // A list is refused whole: its small group is not stored either.
    const list = await atropos(e, "client", "POST", "/scored_data_list", [group(5, 2), big(4)]);
    expect([list.status, list.json.error]).toEqual([503, "queue_full"]);
    expect(await held(e)).toEqual(three);
    expect(await rows(e)).toBe(3);
    expect((await atropos(e, "viewer", "GET", "/status")).json.queue_size).toBe(3);
    expect((await atropos(e, "viewer", "GET", "/latest_example")).json.tokens[0][0]).toBe(3);

    // A small group still fits.
    expect((await atropos(e, "client", "POST", "/scored_data", group(5, 2))).json).toEqual({ status: "received" });
    // Two batches are cut ([1, 2] and [3, 5]) and the newest handed out: its rows go, but the
    // latest example's (group 5's), and their bytes with them.
    expect(tags((await atropos(e, "trainer", "GET", "/batch")).json.batch)).toEqual([3, 5]);
    const taken = await held(e);
    expect(taken.stored_groups).toBe(2);
    expect(taken.stored_bytes).toBe(await payloadBytes(e));
    expect(taken.stored_bytes).toBeLessThan(three.stored_bytes - 1_200_000);
    expect(await rows(e)).toBe(3);
    expect((await atropos(e, "client", "POST", "/scored_data", big(4))).json).toEqual({ status: "received" });
    expect((await held(e)).stored_bytes).toBe(await payloadBytes(e));

    // /reset_data drops every group but the latest example's (group 4's): its bytes alone stay.
    expect((await atropos(e, "trainer", "GET", "/reset_data")).text).toBe("Reset successful");
    const reset = await held(e);
    expect(await rows(e)).toBe(1);
    expect(reset.stored_groups).toBe(0);
    expect(reset.stored_bytes).toBe(await payloadBytes(e));
    expect(reset.stored_bytes).toBeGreaterThan(1_200_000);
    expect(reset.stored_bytes).toBeLessThan(1_300_000);
    expect((await atropos(e, "viewer", "GET", "/latest_example")).json.tokens[0][0]).toBe(4);
    // A new run takes groups up to the bound again.
    await running(e);
    for (const tag of [6, 7]) expect((await atropos(e, "client", "POST", "/scored_data", big(tag))).json).toEqual({ status: "received" });
    expect((await held(e)).stored_bytes).toBe(await payloadBytes(e));
  }, 60_000);

  it("refuses with a 413 groups that alone are more than max_stored_bytes, which no retry could store", async () => {
    const e = await createEngine("atr");
    await running(e);
    await atropos(e, "trainer", "POST", "/config", { max_stored_bytes: 4 * MIB });
    // Four groups of about 1.2 MB: more than 4 MiB inflated, though under the body's 4 MiB gzipped.
    const body = await gzipped([1, 2, 3, 4].map(big));
    const r = await atropos(e, "client", "POST", "/scored_data_list", undefined, { rawBody: body, headers: { "content-encoding": "gzip", "content-type": "application/json" } });
    expect(r.status).toBe(413);
    expect(r.json).toMatchObject({ error: "payload_too_large" });
    expect(r.json.detail).toContain("max_stored_bytes");
    expect(await rows(e)).toBe(0);
    expect((await held(e)).stored_bytes).toBe(0);
  }, 60_000);

  it("stores a list that fits max_stored_bytes once every batch is taken: the latest example's row, which storing it frees, is not counted against it", async () => {
    const e = await createEngine("atr");
    await running(e, [ENV], { ...REGISTRATION, batch_size: 2 });
    await atropos(e, "trainer", "POST", "/config", { max_stored_bytes: 4 * MIB });
    expect((await atropos(e, "client", "POST", "/scored_data", big(1))).json).toEqual({ status: "received" });
    expect(tags((await atropos(e, "trainer", "GET", "/batch")).json.batch)).toEqual([1]);
    // Nothing is queued, buffered or cut: only the latest example's row is left.
    const left = await held(e);
    expect([left.stored_groups, await rows(e)]).toEqual([0, 1]);
    expect(left.stored_bytes).toBe(await payloadBytes(e));

    // About 3.6 MB: under the 4 MiB bound alone, over it beside the latest example's 1.2 MB, which
    // nothing but a newer group queued frees; the groups queue at once, and free it.
    const list = await atropos(e, "client", "POST", "/scored_data_list", [big(2), big(3), big(4)]);
    expect([list.status, list.json]).toEqual([200, { status: "received", groups_processed: 3 }]);
    const after = await held(e);
    expect([after.stored_groups, await rows(e)]).toEqual([3, 3]);
    expect(after.stored_bytes).toBe(await payloadBytes(e));
    expect(after.stored_bytes).toBeLessThanOrEqual(4 * MIB);
    expect((await atropos(e, "viewer", "GET", "/latest_example")).json.tokens[0][0]).toBe(4);
  }, 60_000);

  it("counts the latest example's row against a request whose groups all wait in a buffer, which frees nothing, but not against one that makes up the env's group size", async () => {
    const e = await createEngine("atr");
    await running(e, [{ ...ENV, group_size: 4 }]);
    await atropos(e, "trainer", "POST", "/config", { max_stored_bytes: 4 * MIB });
    expect((await atropos(e, "client", "POST", "/scored_data", sized(1, 4, 1_200_000))).json).toEqual({ status: "received" });
    expect(tags((await atropos(e, "trainer", "GET", "/batch")).json.batch)).toEqual([1]);
    const latest = await held(e);
    expect([latest.stored_groups, await rows(e)]).toEqual([0, 1]);

    // Two groups of one sequence, 3.2 MB: they fit the bound alone but not beside the latest
    // example, and make no group of 4 with the buffer, so nothing is queued and nothing freed.
    const waiting = await atropos(e, "client", "POST", "/scored_data_list", [sized(2, 1, 1_600_000), sized(3, 1, 1_600_000)]);
    expect([waiting.status, waiting.json.error]).toEqual([503, "queue_full"]);
    expect(await held(e)).toEqual(latest);
    expect(await rows(e)).toBe(1);
    // With a group of two they make 4 sequences: queued, so the latest example's row goes.
    const making = await atropos(e, "client", "POST", "/scored_data_list", [sized(2, 1, 1_600_000), sized(3, 1, 1_600_000), sized(4, 2, 100)]);
    expect([making.status, making.json]).toEqual([200, { status: "received", groups_processed: 3, buffered: 3, last_buffer_size: 0 }]);
    const after = await held(e);
    expect([after.stored_groups, after.queued_groups, await rows(e)]).toEqual([3, 3, 3]);
    expect(after.stored_bytes).toBe(await payloadBytes(e));
    expect(after.stored_bytes).toBeLessThanOrEqual(4 * MIB);
    expect((await atropos(e, "viewer", "GET", "/latest_example")).json.tokens[0][0]).toBe(4);
  }, 60_000);

  it("takes max_stored_bytes from the trainer between 4 MiB and 6 GiB, and refuses anything else with a 4xx that changes nothing", async () => {
    const e = await createEngine("atr");
    await running(e);
    expect((await atropos(e, "viewer", "GET", "/config")).json).toEqual({ max_groups: 200_000, max_stored_bytes: 4 * 1024 * MIB });
    expect(DEFAULT_ATROPOS_CONFIG.max_stored_bytes).toBe(4 * 1024 * MIB);
    expect(MAX_ATROPOS_STORED_BYTES).toBe(6 * 1024 * MIB);
    // Below this the engine could refuse a group at the row bound for ever, beside the latest example kept.
    expect(MIN_ATROPOS_STORED_BYTES).toBeGreaterThanOrEqual(2 * 1_900_000);
    expect((await atropos(e, "client", "POST", "/config", { max_stored_bytes: 8 * MIB })).status).toBe(403);
    for (const bad of [MIN_ATROPOS_STORED_BYTES - 1, MAX_ATROPOS_STORED_BYTES + 1, 0, -5, 5 * MIB + 0.5, "5242880", null, true, 1e308, [5 * MIB]]) {
      const r = await atropos(e, "trainer", "POST", "/config", { max_stored_bytes: bad });
      expect(r.status, JSON.stringify(bad)).toBe(422);
    }
    expect((await atropos(e, "trainer", "POST", "/config", { max_stored_bytes: 8 * MIB, max_bytes: 1 })).status).toBe(422);
    // Each 422 names the field and what was wrong with it, as pydantic's would.
    const detail = async (body: unknown) => ((await atropos(e, "trainer", "POST", "/config", body)).json as { detail: unknown[] }).detail;
    expect(await detail({ max_stored_bytes: MIN_ATROPOS_STORED_BYTES - 1 })).toEqual([
      { type: "greater_than_equal", loc: ["body", "max_stored_bytes"], msg: `Input should be greater than or equal to ${MIN_ATROPOS_STORED_BYTES}`, input: MIN_ATROPOS_STORED_BYTES - 1, ctx: { ge: MIN_ATROPOS_STORED_BYTES } },
    ]);
    expect(await detail({ max_groups: 10_000_001 })).toEqual([
      { type: "less_than_equal", loc: ["body", "max_groups"], msg: "Input should be less than or equal to 10000000", input: 10_000_001, ctx: { le: 10_000_000 } },
    ]);
    expect(await detail({ max_groups: 0 })).toMatchObject([{ type: "greater_than_equal", loc: ["body", "max_groups"] }]);
    expect(await detail({ max_groups: 2.5 })).toMatchObject([{ type: "int_type", loc: ["body", "max_groups"], input: 2.5 }]);
    expect(await detail({ max_bytes: 1 })).toEqual([{ type: "extra_forbidden", loc: ["body", "max_bytes"], msg: "Extra inputs are not permitted", input: 1 }]);
    expect((await atropos(e, "viewer", "GET", "/config")).json).toEqual(DEFAULT_ATROPOS_CONFIG);
    expect((await atropos(e, "trainer", "POST", "/config", { max_stored_bytes: MIN_ATROPOS_STORED_BYTES })).status).toBe(200);
    expect((await atropos(e, "trainer", "POST", "/config", { max_stored_bytes: MAX_ATROPOS_STORED_BYTES })).json).toEqual({ max_groups: 200_000, max_stored_bytes: MAX_ATROPOS_STORED_BYTES });
    // Setting one bound keeps the other.
    expect((await atropos(e, "trainer", "POST", "/config", { max_groups: 7 })).json).toEqual({ max_groups: 7, max_stored_bytes: MAX_ATROPOS_STORED_BYTES });
    expect((await held(e)).max_stored_bytes).toBe(MAX_ATROPOS_STORED_BYTES);
  });

  it("counts the bytes from the table once for an engine whose state was saved before they were counted, and bounds by them", async () => {
    const e = await createEngine("atr");
    // Env 1's groups of one sequence wait in its buffer until four make its group size.
    await running(e, [ENV, { ...ENV, desired_name: "b", group_size: 4 }]);
    await atropos(e, "trainer", "POST", "/config", { max_stored_bytes: 4 * MIB });
    for (const tag of [1, 2]) await atropos(e, "client", "POST", "/scored_data", big(tag));
    // The batch taken leaves the latest example's row (group 2's), which the count includes.
    expect(tags((await atropos(e, "trainer", "GET", "/batch")).json.batch)).toEqual([1, 2]);
    const one = (tag: number) => group(tag, 1, 1, { messages: [[{ role: "user", content: "x".repeat(1_200_000) }]] });
    expect((await atropos(e, "client", "POST", "/scored_data", one(3))).json).toEqual({ status: "buffered", buffer_size: 1 });
    expect((await atropos(e, "client", "POST", "/scored_data", one(4))).json).toEqual({ status: "buffered", buffer_size: 2 });
    expect(await rows(e)).toBe(3);
    const expected = await payloadBytes(e);
    expect(expected).toBeGreaterThan(3 * 1_200_000);
    // The state as an engine from before the field saved it, and a config from before the bound.
    await runInDurableObject(e.stub, (_i, state) => {
      const sql = state.storage.sql;
      const saved = JSON.parse(sql.exec<{ v: string }>("SELECT v FROM kv WHERE k = 'atropos'").one().v) as Record<string, unknown>;
      delete saved["stored_bytes"];
      sql.exec("UPDATE kv SET v = ? WHERE k = 'atropos'", JSON.stringify(saved));
      sql.exec("UPDATE kv SET v = ? WHERE k = 'atropos_config'", JSON.stringify({ max_groups: 200_000 }));
    });
    expect((await atropos(e, "viewer", "GET", "/config")).json).toEqual({ max_groups: 200_000, max_stored_bytes: DEFAULT_ATROPOS_CONFIG.max_stored_bytes });
    await atropos(e, "trainer", "POST", "/config", { max_stored_bytes: 4 * MIB });
    expect((await held(e)).stored_bytes).toBe(expected);
    // Kept in the state from then on.
    const kept = await runInDurableObject(e.stub, (_i, state) => JSON.parse(state.storage.sql.exec<{ v: string }>("SELECT v FROM kv WHERE k = 'atropos'").one().v) as { stored_bytes?: number });
    expect(kept.stored_bytes).toBe(expected);
    // The recounted figure bounds: another group of 1.2 MB buffered (which frees no latest
    // example's row, as a queued one would) would pass 4 MiB.
    const full = await atropos(e, "client", "POST", "/scored_data", one(5));
    expect([full.status, full.json.error]).toEqual([503, "queue_full"]);
    expect(await payloadBytes(e)).toBe(expected);
    // And it is kept up to date from there: /reset_data frees the buffered groups, the latest example stays.
    expect((await atropos(e, "trainer", "GET", "/reset_data")).text).toBe("Reset successful");
    expect(await rows(e)).toBe(1);
    expect((await held(e)).stored_bytes).toBe(await payloadBytes(e));
    expect((await atropos(e, "viewer", "GET", "/latest_example")).json.tokens[0][0]).toBe(2);
  }, 60_000);
});
