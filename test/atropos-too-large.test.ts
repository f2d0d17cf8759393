/**
 * Scored groups more than max_stored_bytes alone are a 413 (docs/atropos.md, "Bounded": no batch
 * taken would make room), also when the request would pass max_groups too. Checked after the
 * count, they were a 503 queue_full, which BaseEnv retries for ever.
 */
import { describe, expect, it } from "vitest";
import { atropos, group, gzipped, running } from "./support/atropos";
import { createEngine } from "./support/harness";

const MIB = 1024 * 1024;
/** A group of one sequence (no env_id: queued as it is) of about 1.5 MB of JSON. */
const big = (tag: number) => group(tag, 1, null, { messages: [[{ role: "user", content: "x".repeat(1_500_000) }]] });

describe("groups alone over max_stored_bytes", () => {
  it("are a 413 (no retry could store them) even when the request would also pass max_groups", async () => {
    const e = await createEngine("atr");
    await running(e);
    expect((await atropos(e, "trainer", "POST", "/config", { max_groups: 10, max_stored_bytes: 4 * MIB })).status).toBe(200);
    // Three groups of 1.5 MB: 4.5 MB, more than max_stored_bytes (4 MiB) alone; gzipped, well within 4 MiB as sent.
    const list = [big(1), big(2), big(3)];
    const body = await gzipped(list);
    const send = () => atropos(e, "client", "POST", "/scored_data_list", undefined, { rawBody: body, headers: { "content-type": "application/json", "content-encoding": "gzip" } });

    // With room for groups by count, the answer is the 413 the doc names.
    await atropos(e, "trainer", "POST", "/config", { max_groups: 10 });
    const alone = await send();
    expect([alone.status, alone.json.error]).toEqual([413, "payload_too_large"]);

    // One group held and max_groups 3: the same three groups would pass the count too (the list
    // alone is not more groups than the bound, a 413 of its own), and are still more than max_stored_bytes alone.
    await atropos(e, "trainer", "POST", "/config", { max_groups: 3 });
    expect((await atropos(e, "client", "POST", "/scored_data", group(9, 2))).json).toEqual({ status: "received" });
    const atCount = await send();
    expect([atCount.status, atCount.json.error]).toEqual([413, "payload_too_large"]);
  }, 60_000);
});
