/**
 * get_rollout_data's items with the tokens to train on: an AgentJet claim that joined a buffer
 * group carries its trajectory's sequence from the ledger, in slime's Sample field names.
 */
import { describe, expect, it } from "vitest";
import { callRecord, postCalls, batchOf } from "./support/ledger";
import { threeTurns } from "./support/ledger-calls";
import { claimKeyFields, createEngine, endBody, rollingWith } from "./support/harness";

describe("rollout data with the ledger's tokens", () => {
  it("gives an AgentJet claim's item its tokens, loss mask and logprobs; leaves one without recorded calls as it was", async () => {
    const e = await createEngine("rtok");
    await e.as("trainer").startRollout({ num_repeat_per_sample: 2, job_session: "job-1" });
    await rollingWith(e, 2);
    const client = e.as("client");
    const recorded = await client.claimEpisode({ client_uuid: "c1", discard_episode_timeout: 60 });
    const k = await claimKeyFields(recorded.openai_api_key);
    expect((await postCalls(e, batchOf(threeTurns({ episode: k.episode_uuid, fence: k.fence, client: "c1" }, callRecord)))).status).toBe(200);
    await client.endEpisode(endBody("c1", k.episode_uuid, 1, "task-7"));
    const silent = await client.claimEpisode({ client_uuid: "c2", discard_episode_timeout: 60 });
    await client.endEpisode(endBody("c2", silent.episode_uuid, 0, "task-7"));

    const pulled = await e.as("trainer").getRolloutData();
    const items = pulled.data.data;
    expect(items.map((i) => i.extra_info["client_uuid"])).toEqual(["c1", "c2"]);
    expect(items[0]).toMatchObject({
      tokens: [1, 2, 3, 4, 10, 11, 20, 21, 30, 31, 32, 40],
      response_length: 8,
      loss_mask: [1, 1, 0, 1, 0, 0, 0, 1],
      rollout_log_probs: [-0.5, -0.25, 0, -1.5, 0, 0, 0, -2],
    });
    expect(items[1]).not.toHaveProperty("tokens");
    // Re-reading the pull by its cursor gives the same.
    const again = await e.as("trainer").getRolloutData({ cursor: pulled.data.meta_info.cursor ?? 0 });
    expect(again.data.data[0]?.tokens).toEqual(items[0]?.tokens);
  });
});
