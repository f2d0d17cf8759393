/**
 * The stalls /status reports are of the queue as the next /batch packs it: a queued group larger
 * than the batch is set aside by that cut, so it is reported as such at once, and it does not
 * size the packs of the others. Sized by it, env a's minimum read as unmet ("no batch is cut until
 * it sends groups") while the very next /batch cut a batch from what was queued
 * (docs/atropos.md, "No silent stalls": each stall is a proof, not a guess).
 */
import { describe, expect, it } from "vitest";
import { atropos, ENV, group, REGISTRATION, running, tags } from "./support/atropos";
import { createEngine } from "./support/harness";

describe("stalls with a group larger than the batch queued", () => {
  it("says the group is set aside, and no minimum unmet, when the next /batch cuts a batch without the env sending anything", async () => {
    const e = await createEngine("atr");
    const [a, b] = await running(e, [{ ...ENV, min_batch_allocation: 0.5 }, { ...ENV, desired_name: "b", group_size: 8 }], { ...REGISTRATION, batch_size: 4 });
    await atropos(e, "client", "POST", "/scored_data", group(1, 2, a!));
    await atropos(e, "client", "POST", "/scored_data", group(2, 2, a!));
    // Env b's group of 8 is larger than the batch: the next cut sets it aside.
    expect((await atropos(e, "client", "POST", "/scored_data", group(3, 8, b!))).json).toEqual({ status: "received" });
    const status = (await atropos(e, "viewer", "GET", "/status")).json;
    // What /batch does next, with nothing more sent: env a's two groups are a batch.
    const batch = (await atropos(e, "trainer", "GET", "/batch")).json;
    expect(tags(batch.batch)).toEqual([1, 2]);
    // So no stall said env a's minimum holds every batch back; the group of 8 is said to be set aside.
    expect(status.stalls.map((s: { kind: string; groups: number }) => [s.kind, s.groups])).toEqual([["larger_than_batch", 1]]);
  });
});
