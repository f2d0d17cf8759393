/**
 * The exact request sequence of AgentJet's SwarmClient (and its trainer) through the URL-token
 * form, with bodies as pydantic's model_dump() writes them: no auth header, unknown fields
 * present, nulls where Python has None. The client only swaps scheme and host of
 * openai_base_url for its base URL, so that must land on this engine's /v1.
 */
import { describe, expect, it } from "vitest";
import { ORIGIN, createEngine, workerFetch } from "./support/harness";

type Json = Record<string, unknown>;

function swarmClient(serverUrl: string) {
  const call = async (method: "GET" | "POST", path: string, body?: Json) => {
    const res = await workerFetch(`${serverUrl}${path}`, {
      method,
      headers: body ? { "content-type": "application/json" } : {},
      body: body ? JSON.stringify(body) : null,
    });
    expect(res.status, `${method} ${path}`).toBe(200);
    return (await res.json()) as Json;
  };
  return { serverUrl, call };
}

describe("AgentJet SwarmClient sequence, token in the base URL", () => {
  it("syncs, starts, claims, ends, aborts, checks and stops as the unmodified client does", async () => {
    const e = await createEngine("swarm");
    const serverUrl = `${ORIGIN}/e/${e.name}/t/${e.tokens.operator}`;
    const trainerUrl = `${ORIGIN}/e/${e.name}/t/${e.tokens.trainer}`;
    const client = swarmClient(serverUrl);
    const trainer = swarmClient(trainerUrl);
    const clientUuid = "0b8e5a1c-5f0a-4d55-9a57-2a3d7a8f6d11";

    // auto_sync_train_config_and_start_engine
    expect(await client.call("GET", "/get_engine_status")).toEqual({ engine_status: "ENGINE.OFFLINE", engine_status_detail: null, global_step: null });
    expect(await client.call("POST", "/sync_train_config", { yaml_as_string: "ajet:\n  backbone: verl\n" })).toEqual({ success: true });
    expect(await client.call("POST", "/start_engine", {})).toEqual({ success: true });
    expect((await client.call("GET", "/get_engine_status"))["engine_status"]).toBe("ENGINE.BOOTING");

    // The trainer boots (through the agent's command), then rolls and registers episodes.
    const { commands } = (await trainer.call("GET", "/agent/commands")) as { commands: { seq: number; body: Json }[] };
    expect(commands[0]?.body).toEqual({ kind: "start", yaml_as_string: "ajet:\n  backbone: verl\n" });
    await trainer.call("POST", "/agent/ack", { seq: commands[0]!.seq, ok: true, detail: "trainer pid 4242" });
    expect(await trainer.call("POST", "/update_engine_status", { engine_status: "ENGINE.ROLLING", engine_status_detail: null, global_step: 0 })).toEqual({
      success: true,
      failure_reason: "",
    });
    for (const i of [0, 1]) {
      const apiKey = "sk-ajet-" + btoa(JSON.stringify({ agent_name: "a", target_tag: "t", episode_uuid: `ep${i}`, episode_address: `ipc:///tmp/ep${i}.sock` }));
      expect(
        await trainer.call("POST", "/register_episode", {
          episode_uuid: `ep${i}`,
          openai_base_url: "http://10.1.2.3:8000/v1",
          openai_api_key: apiKey,
          zmq_listen_result_addr: `ipc:///tmp/result-ep${i}.sock`,
        }),
      ).toEqual({ success: true, failure_reason: "" });
    }
    await trainer.call("POST", "/update_current_batch_rollout_pool_information", {
      sample_collection_method: "rollout_until_finish_enough_tasks",
      completed_episodes: 0,
      completed_episode_target: 4,
      completed_tasks: 0,
      completed_task_target: 2,
      completed_non_dummy_tasks: 0,
      completed_non_dummy_task_target: 2,
      task_expected_num_repeat: 2,
      completed_tasks_details: {},
      completed_tasks_rewards: {},
      completed_tasks_client_uuids: {},
      running_episode_details: null,
      engine_status: null,
      global_step: null,
      booting_start_time: null,
    });

    // begin_episode with a throttle policy: status, pool info, claim.
    expect((await client.call("GET", "/get_engine_status"))["engine_status"]).toBe("ENGINE.ROLLING");
    const pool = await client.call("GET", "/get_current_batch_rollout_pool_information");
    expect(pool).toMatchObject({ running_episode_details: null, completed_tasks_client_uuids: {}, completed_task_target: 2 });
    const claim = await client.call("POST", "/claim_episode", {
      client_uuid: clientUuid,
      episode_type: "train",
      discard_episode_timeout: 240,
      throttle_policy: { ratio: 1.5, expected_batch_size: 2, expected_num_repeat: 2, current_task_id: "task-a" },
      declare_client_active: true,
    });
    expect(claim).toMatchObject({ success: true, client_uuid: clientUuid, episode_uuid: "ep0", fail_cause: "" });
    // SwarmClient: re.sub(r'^https?://[^/]+', server_url, openai_base_url)
    const rewritten = String(claim["openai_base_url"]).replace(/^https?:\/\/[^/]+/, serverUrl);
    expect(rewritten).toBe(`${serverUrl}/v1`);
    expect(String(claim["openai_api_key"])).not.toContain("sk-ajet-");

    expect(await client.call("POST", "/can_continue_episode", { client_uuid: clientUuid, episode_uuid: "ep0" })).toEqual({ can_continue: true });
    const buffer = (await client.call("POST", "/get_episode_buffer", {})) as { buffer: Json[] };
    expect(buffer.buffer.map((b) => [b["episode_uuid"], b["episode_status"]])).toEqual([
      ["ep0", "claimed"],
      ["ep1", "registered"],
    ]);
    expect(JSON.stringify(buffer)).not.toContain("ipc://");

    // end_episode as the client posts it.
    const ended = await client.call("POST", "/end_episode", {
      client_uuid: clientUuid,
      episode_uuid: "ep0",
      workflow_output: { reward: 0.8, is_success: true, metadata: { task_id: "task-a", turns: 3 }, log_metrics: { tokens: 812 } },
      task_id: "task-a",
    });
    expect(ended).toEqual({ success: true });
    const delivered = (await trainer.call("GET", "/agent/commands")) as { commands: { seq: number; body: Json }[] };
    expect(delivered.commands[0]?.body).toMatchObject({ kind: "deliver", episode_uuid: "ep0", zmq_listen_result_addr: "ipc:///tmp/result-ep0.sock" });
    expect(JSON.parse(String(delivered.commands[0]?.body["payload"]))).toEqual({
      reward: 0.8,
      is_success: true,
      metadata: { task_id: "task-a", turns: 3 },
      log_metrics: { tokens: 812 },
    });

    // A second episode, given up: abort_episode as the client posts it.
    const claim2 = await client.call("POST", "/claim_episode", { client_uuid: clientUuid, episode_type: "train", discard_episode_timeout: 240, throttle_policy: null });
    expect(claim2["episode_uuid"]).toBe("ep1");
    const aborted = await client.call("POST", "/abort_episode", {
      client_uuid: clientUuid,
      episode_uuid: "ep1",
      workflow_output: { reward: 0.0, is_success: null, metadata: {}, log_metrics: {} },
      task_id: "",
    });
    expect(aborted).toEqual({ success: true });
    expect(await trainer.call("POST", "/is_episode_claimed", { episode_uuid: "ep1", unregister_if_not_claimed: false })).toEqual({ success: true, failure_reason: "" });

    // The trainer moves on a step; the overwatch reads the reward history.
    await trainer.call("POST", "/update_engine_status", { engine_status: "ENGINE.WEIGHT_SYNCING", engine_status_detail: null, global_step: 1 });
    const history = (await client.call("GET", "/get_reward_history")) as { history: Json[] };
    expect(history.history).toEqual([expect.objectContaining({ global_step: 0, mean_reward: 0.8, std_reward: 0 })]);

    // stop_engine, then poll status until OFFLINE.
    expect(await client.call("POST", "/stop_engine", {})).toEqual({ success: true });
    expect((await client.call("GET", "/get_engine_status"))["engine_status"]).toBe("ENGINE.OFFLINE");
  });
});
