/**
 * Atropos groups larger than one row holds: 16 sequences of 8,192 tokens with their inference
 * logprobs are 3 to 5 MB of JSON, which BaseEnv sends gzipped. A group was one row, so one past
 * 1,900,000 bytes was a 413, which BaseEnv does not retry: the group was dropped. Its JSON now
 * goes on in atropos_parts (src/engine/atropos-store.ts), and comes back whole and exact.
 */
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { MAX_SCORED_REQUEST_BYTES, groupsTooLarge, toGroup } from "../src/atropos/scored-json";
import { PIECE_UNITS, payloadPieces } from "../src/engine/atropos-store";
import { AtroposScoredData } from "../src/protocol/atropos";
import { isWellFormed } from "../src/protocol/limits";
import { ENV, atropos, gzipped, payloadBytes, running } from "./support/atropos";
import { createEngine, reconnect, type TestEngine } from "./support/harness";
import { rewindSchema } from "./support/schema-rewind";

/** A group of `n` sequences of `len` tokens with logprobs, tagged by its first token: about 25 bytes of JSON a token. */
const long = (tag: number, n: number, len: number) => ({
  tokens: Array.from({ length: n }, (_, i) => Array.from({ length: len }, (_, j) => (j === 0 ? tag : 1000 + ((i * 7919 + j * 104729) % 150_000)))),
  masks: Array.from({ length: n }, () => Array.from({ length: len }, (_, j) => (j < 16 ? -100 : 1))),
  scores: Array.from({ length: n }, (_, i) => (i % 2 === 0 ? 1 : -1)),
  inference_logprobs: Array.from({ length: n }, (_, i) => Array.from({ length: len }, (_, j) => -((i + 1) * (j + 1) * 0.000123456789) % 7)),
  messages: [[{ role: "user", content: "solve: \u{1F600} ".repeat(3) }]],
  env_id: 0,
});

const parts = (e: TestEngine) => runInDurableObject(e.stub, (_i, state) => state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM atropos_parts").one().n);
const held = async (e: TestEngine) => (await e.as("viewer").overview()).atropos;
const asStored = (g: ReturnType<typeof long>) => toGroup(AtroposScoredData.parse(g)).payload;

describe("Atropos groups larger than a row", () => {
  it("stores a 3 MB group sent gzipped, answers it whole from /latest_example and /batch, and frees its parts and bytes once taken", { timeout: 60_000 }, async () => {
    const e = await createEngine("atr-large");
    await running(e, [{ ...ENV, group_size: 16 }], { wandb_group: "g", wandb_project: "p", batch_size: 32, max_token_len: 8192, checkpoint_dir: "/c", save_checkpoint_interval: 0, starting_step: 0, num_steps: 10 });
    const groups = [long(1, 16, 8192), long(2, 16, 8192)];
    const text = asStored(groups[0]!);
    expect(text.length).toBeGreaterThan(3 * PIECE_UNITS);
    for (const g of groups) {
      const sent = await atropos(e, "client", "POST", "/scored_data", undefined, { rawBody: await gzipped(g), headers: { "content-type": "application/json", "content-encoding": "gzip" } });
      expect(sent.json).toEqual({ status: "received" });
    }
    expect(await parts(e)).toBeGreaterThanOrEqual(6);
    const stored = await held(e);
    expect(stored.stored_groups).toBe(2);
    expect(stored.stored_bytes).toBe(await payloadBytes(e));
    expect(stored.stored_bytes).toBeGreaterThan(2 * text.length);

    // Exactly the JSON Atropos would answer, its surrogate pairs whole.
    const latest = await atropos(e, "viewer", "GET", "/latest_example");
    expect(latest.text).toBe(asStored(groups[1]!));
    const batch = await atropos(e, "trainer", "GET", "/batch");
    expect(batch.text).toBe(`{"batch":[${text},${asStored(groups[1]!)}]}`);
    // The batch's rows go once it is read, but the latest example's, which keeps its parts.
    const after = await held(e);
    expect(after.stored_groups).toBe(0);
    expect(after.stored_bytes).toBe(await payloadBytes(e));
    expect(after.stored_bytes).toBe(latest.text.length + 3 * (4 - 2)); // three emoji of 4 bytes, 2 UTF-16 units each
    expect((await atropos(e, "viewer", "GET", "/latest_example")).text).toBe(latest.text);
    await atropos(e, "trainer", "GET", "/reset_data");
    expect((await atropos(e, "client", "POST", "/scored_data", long(3, 2, 4))).json).toEqual({ status: "received" });
    // The old latest example went with its parts.
    expect(await parts(e)).toBe(0);
    expect((await held(e)).stored_bytes).toBe(await payloadBytes(e));
  });

  it("keeps a buffered large group's parts when it joins the queue", { timeout: 60_000 }, async () => {
    const e = await createEngine("atr-large");
    // Groups of 8 for an env of 16 are buffered until two make one of its size.
    await running(e, [{ ...ENV, group_size: 16 }], { wandb_group: "g", wandb_project: "p", batch_size: 16, max_token_len: 8192, checkpoint_dir: "/c", save_checkpoint_interval: 0, starting_step: 0, num_steps: 10 });
    const halves = [long(4, 8, 8192), long(5, 8, 8192)];
    for (const g of halves) expect((await atropos(e, "client", "POST", "/scored_data", undefined, { rawBody: await gzipped(g), headers: { "content-type": "application/json", "content-encoding": "gzip" } })).status).toBe(200);
    expect(await parts(e)).toBeGreaterThanOrEqual(2);
    const batch = await atropos(e, "trainer", "GET", "/batch");
    expect(batch.text).toBe(`{"batch":[${asStored(halves[0]!)},${asStored(halves[1]!)}]}`);
    expect((await held(e)).stored_bytes).toBe(await payloadBytes(e));
  });

  it("cuts a group's JSON into pieces of at most PIECE_UNITS, never inside a surrogate pair", () => {
    const pair = "\u{1F600}";
    const text = "a".repeat(PIECE_UNITS - 1) + pair + "b".repeat(PIECE_UNITS);
    const pieces = payloadPieces(text);
    expect(pieces.join("")).toBe(text);
    expect(pieces.map((p) => p.length)).toEqual([PIECE_UNITS - 1, PIECE_UNITS, 2]);
    for (const p of pieces) expect(isWellFormed(p)).toBe(true);
    expect(payloadPieces("")).toEqual([""]);
  });

  it("refuses with a 413 a request whose groups are more than one RPC to the engine may carry", () => {
    const at = (bytes: number) => ({ env_id: 0, size: 1, payload: "", bytes, reward: null, summary: "{}" });
    expect(groupsTooLarge([at(MAX_SCORED_REQUEST_BYTES / 2 - 2), at(MAX_SCORED_REQUEST_BYTES / 2 - 2)])).toBeNull();
    expect(groupsTooLarge([at(MAX_SCORED_REQUEST_BYTES / 2), at(MAX_SCORED_REQUEST_BYTES / 2)])).toMatch(/one request may carry at most 25165824: send fewer groups per request$/);
  });

  it("counts the bytes of groups stored before their parts were, from their rows", async () => {
    const e = await createEngine("atr-large");
    await running(e);
    expect((await atropos(e, "client", "POST", "/scored_data", long(6, 2, 64))).json).toEqual({ status: "received" });
    const before = await payloadBytes(e);
    await runInDurableObject(e.stub, (_i, state) => rewindSchema(state.storage.sql, 26));
    await expect(runInDurableObject(e.stub, (_i, state) => state.abort("restart"))).rejects.toThrow();
    await reconnect(e);
    expect(await runInDurableObject(e.stub, (_i, state) => state.storage.sql.exec<{ b: number }>("SELECT SUM(bytes) AS b FROM atropos_groups").one().b)).toBe(before);
    expect((await held(e)).stored_bytes).toBe(before);
  });
});
