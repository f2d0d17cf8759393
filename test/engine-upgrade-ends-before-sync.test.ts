/**
 * Results a weight sync took out of the batch before engine migration 27 had no ended_at; 27
 * gave them 0, and the overview listed such a result, once undeliverable, as ending in 1970 (and
 * last). Migration 29 gives them the time the sync cleared them.
 */
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { EngineObject } from "../src/engine/engine-object";
import { createEngine, endBody, reconnect, rollingWith } from "./support/harness";
import { rewindSchema } from "./support/schema-rewind";

describe("ends_before_sync rows upgraded by engine migrations 27 and 29", () => {
  it("lists a result the weight sync took out of the batch before the upgrade, then undeliverable, with when it ended (not 1970)", async () => {
    const e = await createEngine();
    await rollingWith(e, 1, { zmq: true });
    const trainer = e.as("trainer");
    const endedAt = e.clock.t;
    const a = await e.as("client").claimEpisode({ client_uuid: "a", discard_episode_timeout: 60 });
    await e.as("client").endEpisode(endBody("a", a.episode_uuid, 1));
    // The trainer leaves ROLLING as the last end is stored: the end moves to ends_before_sync, its delivery pending.
    await trainer.updateEngineStatus({ engine_status: "ENGINE.WEIGHT_SYNCING" });
    // That engine ran the code from before migration 27 (its ends_before_sync had no ended_at), and is upgraded now.
    await runInDurableObject(e.stub, (_i: EngineObject, state) => rewindSchema(state.storage.sql, 27));
    await expect(runInDurableObject(e.stub, (_i, state) => state.abort("deploy"))).rejects.toThrow();
    await reconnect(e);
    e.clock.t += 5_000;
    const { commands } = await trainer.pollCommands();
    const deliver = commands.find((c) => c.body.kind === "deliver")!;
    await trainer.ackCommand({ seq: deliver.seq, ok: false, detail: "runner gone: no ack in 30 s" });
    const o = await e.as("viewer").overview();
    expect(o.deliveries).toEqual({ pending: 0, delivered: 0, undeliverable: 1 });
    expect(o.undeliverable).toHaveLength(1);
    // The end happened at endedAt, and was moved out of the batch then (cleared_at).
    expect(o.undeliverable[0]!.ended_at).toBe(endedAt / 1000);
  });
});
