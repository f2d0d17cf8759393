/**
 * A reaped claim's late end is refused 409 claim_lost and counted nowhere (docs/agentjet.md), also
 * once the episode's row is gone (the trainer unregistered it): the same client's earlier end of
 * the episode (an eval episode serves again) does not stand in for it. With the row gone, it was
 * answered success: true, and the result was stored nowhere. The episode's latest claim that did
 * not end is kept (unended_claims) for as long as the engine knows its ends.
 */
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { advance, createEngine, endBody, rollingWith } from "./support/harness";

describe("a fenceless late end of a reaped claim whose episode was then taken back", () => {
  it("is refused claim_lost, not answered as a repeat of the same client's earlier end", async () => {
    const e = await createEngine();
    const [id] = await rollingWith(e, 1);
    const client = e.as("client");
    // An eval episode serves again after its end: C ends a first claim of it...
    const first = await client.claimEpisode({ client_uuid: "C", episode_type: "eval", discard_episode_timeout: 60 });
    expect(first).toMatchObject({ success: true, episode_uuid: id, fence: 1 });
    expect(await client.endEpisode(endBody("C", id!, 1))).toEqual({ success: true });
    // ...claims it again, and goes quiet: the claim is reaped.
    const second = await client.claimEpisode({ client_uuid: "C", episode_type: "eval", discard_episode_timeout: 10 });
    expect(second).toMatchObject({ success: true, episode_uuid: id, fence: 2 });
    await advance(e, 10_000);
    expect(await client.canContinueEpisode({ client_uuid: "C", episode_uuid: id! })).toEqual({ can_continue: false });
    // The trainer takes the unclaimed episode back, as AgentJet's trainer does at a batch's end.
    expect(await e.as("trainer").isEpisodeClaimed({ episode_uuid: id!, unregister_if_not_claimed: true })).toMatchObject({ success: false });
    // C's late end of the reaped claim (no fence, as AgentJet sends): its result is stored nowhere,
    // so answering it `success: true` tells the client a lost result was taken.
    const late = await client.endEpisode(endBody("C", id!, 0.25)).then(
      (r) => r,
      (err: unknown) => err,
    );
    expect(late).toMatchObject({ status: 409, code: "claim_lost" });
    // What is kept of the reaped claim goes with the ends it is compared with.
    const kept = () => runInDurableObject(e.stub, (_i, state) => state.storage.sql.exec("SELECT 1 FROM unended_claims").toArray().length);
    expect(await kept()).toBe(1);
    await e.as("operator").stopEngine();
    expect(await kept()).toBe(0);
  });
});
