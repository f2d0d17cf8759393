/**
 * /status's `stalls` (docs/atropos.md's "No silent stalls"): queued groups that Atropos's batch
 * cutting will never take are named, where Atropos's /batch answers None for ever and says nothing.
 */
import { describe, expect, it } from "vitest";
import { atropos, ENV, group, REGISTRATION, running, tags } from "./support/atropos";
import { createEngine } from "./support/harness";

const queuedInStalls = (stalls: { groups: number }[]) => stalls.reduce((a, s) => a + s.groups, 0);

describe("Atropos's API: /status's stalls", () => {
  it("reports queued groups whose packs can never make exactly batch_size sequences", async () => {
    const e = await createEngine("atr");
    await running(e, [{ ...ENV, group_size: 4 }], { ...REGISTRATION, batch_size: 6 });
    for (let tag = 1; tag <= 5; tag++) expect((await atropos(e, "client", "POST", "/scored_data", group(tag, 4, 0))).json).toEqual({ status: "received" });
    // 20 sequences queued, a batch of 6 wanted: 4, then 8, overshoots in
    // grab_exact_from_heterogeneous_queue; Atropos returns None every time.
    for (let i = 0; i < 3; i++) expect((await atropos(e, "trainer", "GET", "/batch")).json).toEqual({ batch: null });
    const status = (await atropos(e, "viewer", "GET", "/status")).json;
    expect(status).toMatchObject({ current_step: 0, queue_size: 5 });
    // Every queued group waits for ever: that is a stall, and /status names it.
    expect(queuedInStalls(status.stalls)).toBe(5);
  });

  it("reports groups with no env_id, which never go into a batch while an env has a min_batch_allocation", async () => {
    const e = await createEngine("atr");
    const [a] = await running(e, [{ ...ENV, min_batch_allocation: 0.5 }], { ...REGISTRATION, batch_size: 4 });
    // A client that sends no env_id (BaseEnv's env_id is None until it registers; custom clients send none).
    for (let tag = 1; tag <= 4; tag++) await atropos(e, "client", "POST", "/scored_data", group(tag, 2, null));
    for (let tag = 11; tag <= 12; tag++) await atropos(e, "client", "POST", "/scored_data", group(tag, 2, a!));
    // grab_batch_with_minimum_allocations packs only groups with an env_id: env a's two make the batch.
    expect(tags((await atropos(e, "trainer", "GET", "/batch")).json.batch)).toEqual([11, 12]);
    // Env a sends on (a full pack of its own queued, so its minimum is not what holds batches back).
    await atropos(e, "client", "POST", "/scored_data", group(13, 2, a!));
    expect((await atropos(e, "trainer", "GET", "/batch")).json).toEqual({ batch: null });
    const status = (await atropos(e, "viewer", "GET", "/status")).json;
    expect(status).toMatchObject({ current_step: 1, queue_size: 5 });
    // The four groups of no env wait for ever, whatever env a sends: /status names them.
    expect(queuedInStalls(status.stalls)).toBeGreaterThanOrEqual(4);
  });

  it("names packs that can never make batch_size as batch_size_unreachable, and reports none while another env's group size can make it", async () => {
    const e = await createEngine("atr");
    const [a, b] = await running(e, [{ ...ENV, group_size: 4 }, { ...ENV, desired_name: "b", group_size: 2 }], { ...REGISTRATION, batch_size: 6 });
    await atropos(e, "client", "POST", "/scored_data", group(1, 4, a!));
    // Only a group of 4 queued, but env b's groups of 2 make 4 + 2: no stall to report.
    expect((await atropos(e, "viewer", "GET", "/status")).json.stalls).toEqual([]);
    await atropos(e, "client", "POST", "/scored_data", group(2, 2, b!));
    await atropos(e, "client", "POST", "/scored_data", group(3, 2, b!));
    expect(tags((await atropos(e, "trainer", "GET", "/batch")).json.batch)).toEqual([1, 2]);
    // Env b leaves; its group of 2 left and env a's 4s still make 6.
    await atropos(e, "client", "POST", "/disconnect-env", { env_id: b });
    expect((await atropos(e, "viewer", "GET", "/status")).json.stalls).toEqual([]);

    const f = await createEngine("atr");
    const [c] = await running(f, [{ ...ENV, group_size: 4 }], { ...REGISTRATION, batch_size: 6 });
    await atropos(f, "client", "POST", "/scored_data", group(1, 4, c!));
    expect((await atropos(f, "viewer", "GET", "/status")).json.stalls).toEqual([{ kind: "batch_size_unreachable", groups: 1, detail: expect.stringContaining("multiple of 4, and the batch (6) is not") }]);
  });

  it("names groups with no env_id held back by a min_batch_allocation as no_env_id, and reports none once no env has one", async () => {
    const e = await createEngine("atr");
    const [a] = await running(e, [{ ...ENV, min_batch_allocation: 0.5 }], { ...REGISTRATION, batch_size: 4 });
    for (let tag = 1; tag <= 3; tag++) await atropos(e, "client", "POST", "/scored_data", group(tag, 2, null));
    await atropos(e, "client", "POST", "/scored_data", group(4, 2, a!));
    expect((await atropos(e, "viewer", "GET", "/status")).json.stalls).toEqual([{ kind: "no_env_id", groups: 3, detail: expect.stringContaining("3 queued group(s) have no env_id") }]);
    // Once no env has a minimum, grab_exact_from_heterogeneous_queue packs them: no stall.
    await atropos(e, "client", "POST", "/disconnect-env", { env_id: a });
    expect((await atropos(e, "viewer", "GET", "/status")).json.stalls).toEqual([]);
  });
});
