/**
 * get_rollout_data's items with the tokens to train on: an AgentJet claim that joined a buffer
 * group carries its trajectory's sequence from the ledger, in slime's Sample field names.
 */
import { describe, expect, it } from "vitest";
import { callRecord, postCalls, batchOf } from "./support/ledger";
import { threeTurns } from "./support/ledger-calls";
import { claimKeyFields, createEngine, endBody, raw, rollingWith } from "./support/harness";

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

  it("gives a claim whose training sequence stops before its end no tokens, and says where it stopped", async () => {
    const e = await createEngine("rtok-drift");
    await e.as("trainer").startRollout({ num_repeat_per_sample: 1, job_session: "job-1" });
    await rollingWith(e, 1);
    const client = e.as("client");
    const claim = await client.claimEpisode({ client_uuid: "c1", discard_episode_timeout: 60 });
    const k = await claimKeyFields(claim.openai_api_key);
    // The third prompt was re-tokenized: the sequence stops at call 2, before the turn the reward was for.
    const calls = threeTurns({ episode: k.episode_uuid, fence: k.fence, client: "c1" }, callRecord, [1, 2, 3, 4, 10, 99, 20, 21, 30, 31, 32]);
    expect((await postCalls(e, batchOf(calls))).status).toBe(200);
    await client.endEpisode(endBody("c1", k.episode_uuid, 1, "task-7"));

    const [item] = (await e.as("trainer").getRolloutData()).data.data;
    expect(item?.extra_info).toMatchObject({ client_uuid: "c1", drift_at_call: 2 });
    for (const field of ["tokens", "response_length", "loss_mask", "rollout_log_probs"]) expect(item).not.toHaveProperty(field);
  });

  it("never gives a worker's posted rows a claim's tokens: naming the claim's session and source 'agentjet' is refused, the session's name alone matches nothing", async () => {
    const e = await createEngine("rtok-forged");
    await e.as("trainer").startRollout({ num_repeat_per_sample: 2, job_session: "job-1" });
    await rollingWith(e, 1);
    const victim = await e.as("client").claimEpisode({ client_uuid: "victim", discard_episode_timeout: 60 });
    const k = await claimKeyFields(victim.openai_api_key);
    expect((await postCalls(e, batchOf(threeTurns({ episode: k.episode_uuid, fence: k.fence, client: "victim" }, callRecord)))).status).toBe(200);

    // Another client token, posting a group of its own whose first session names the victim's claim.
    const claimSession = `${k.episode_uuid}#${k.fence}`;
    const row = (session_id: string, extra: Record<string, unknown>) => ({ session_id, group_id: "forged", step_index: 0, messages: [{ role: "user", content: "q" }], response: "a", reward: 1, is_session_completed: true, ...extra });
    const forged = await raw(`/e/${e.name}/steps`, { token: e.tokens.client, body: JSON.stringify({ steps: [row(claimSession, { source: "agentjet" }), row("mine", {})] }) });
    expect(forged).toMatchObject({ status: 422, json: { error: "invalid_request", detail: expect.stringContaining("steps.0.source") } });

    const named = await raw(`/e/${e.name}/steps`, { token: e.tokens.client, body: JSON.stringify({ steps: [row(claimSession, { source: "worker" }), row("mine", {})] }) });
    expect(named.status).toBe(200);
    const items = (await e.as("trainer").getRolloutData()).data.data;
    expect(items.map((i) => [i.extra_info["session_id"], i.instance_id])).toEqual([
      [claimSession, "forged"],
      ["mine", "forged"],
    ]);
    for (const item of items) expect(item).not.toHaveProperty("tokens");
  });
});
