/**
 * Bodies the fuzz world would accept, by route (below the engine's base URL, or the admin's
 * path). Bodies made from the schema alone seldom get past the engine's own rules (an episode
 * that exists, a claim's own client, metadata.task_id equal to task_id, a field the selected
 * environment has): these are the other starting points of the mutations in arbitraries.ts,
 * naming what world.ts builds.
 */
import { sampleCatalog } from "../support/sample-catalog";

/** The live claim's fence in a new world: each episode's fence starts at 0 and its first claim takes 1. */
const LIVE_FENCE = 1;

/** A call of the live claim (ep-2, c-2) as the gateway records it, after the world's two turns (world.ts). */
const ledgerCall = (call_id: string, prefix: { prefix: { call_id: string; count: number } | null }) => ({
  call_id,
  capture: "messages",
  client_uuid: "c-2",
  task_id: "t-2",
  weight_version: 1,
  run: 1,
  admitted_at: 4_070_908_799_500,
  episode_uuid: "ep-2",
  fence: LIVE_FENCE,
  endpoint: "/v1/chat/completions",
  model: "m-1",
  stream: false,
  started_at: 4_070_908_799_501,
  first_byte_at: null,
  done_at: 4_070_908_799_509,
  status: 200,
  error: null,
  finish_reason: "stop",
  usage: { prompt_tokens: 9, completion_tokens: 1 },
  truncated: false,
  body: { params: {}, tools: null, tools_from_prefix: true, ...prefix, messages: [{ role: "user", content: "And 6 times 9?" }], answer: { role: "assistant", content: "54" }, tokens: null },
});

/** Atropos: the world's trainer registration, and a scored group of `n` sequences for env `env_id`. */
export const ATROPOS_REGISTRATION = { wandb_group: "g", wandb_project: "p", batch_size: 4, max_token_len: 2048, checkpoint_dir: "/ckpt", save_checkpoint_interval: 10, starting_step: 0, num_steps: 100 };
export const atroposGroup = (n: number, env_id: number | null, extra: Record<string, unknown> = {}) => ({
  tokens: Array.from({ length: n }, (_, i) => [1, 2, i]),
  masks: Array.from({ length: n }, () => [-100, 1, 1]),
  scores: Array.from({ length: n }, (_, i) => i % 2),
  env_id,
  ...extra,
});

const workflowOutput = (reward: unknown, task: string) => ({ reward, is_success: true, metadata: { task_id: task }, log_metrics: { turns: 3 } });

export const SEEDS: Record<string, unknown[]> = {
  "/sync_train_config": [{ yaml_as_string: "trainer:\n  lr: 2e-5\n" }],
  "/start_engine": [{}],
  "/stop_engine": [{}],
  "/update_engine_status": [
    { engine_status: "ENGINE.ROLLING", global_step: 2, weight_version: 2, engine_status_detail: "step 2" },
    { engine_status: "ENGINE.ROLLING_POST" },
    { engine_status: "ENGINE.WEIGHT_SYNCING", global_step: 1 },
  ],
  "/register_episode": [{ episode_uuid: "ep-4", openai_base_url: "http://127.0.0.1:9/v1", openai_api_key: "sk-ajet-e30=", zmq_listen_result_addr: "" }],
  "/claim_episode": [{ client_uuid: "c-3", episode_type: "train", discard_episode_timeout: 60 }, { client_uuid: "c-3", episode_type: "eval", discard_episode_timeout: 1, throttle_policy: null }],
  "/end_episode": [
    { client_uuid: "c-2", episode_uuid: "ep-2", task_id: "t-2", workflow_output: workflowOutput(1, "t-2") },
    { client_uuid: "c-😀", episode_uuid: "ep-😀", task_id: "t-1", fence: 1, workflow_output: workflowOutput([0.5, 1], "t-1") },
    { client_uuid: "c-1", episode_uuid: "ep-1", task_id: "t-1", fence: 1, workflow_output: workflowOutput(0, "t-1") },
  ],
  "/abort_episode": [{ client_uuid: "c-2", episode_uuid: "ep-2", task_id: "", workflow_output: workflowOutput(0, "") }],
  "/can_continue_episode": [{ client_uuid: "c-2", episode_uuid: "ep-2" }],
  "/is_episode_claimed": [{ episode_uuid: "ep-3", unregister_if_not_claimed: true }, { episode_uuid: "ep-2" }],
  "/get_episode_buffer": [{}],
  "/update_current_batch_rollout_pool_information": [{ sample_collection_method: "fuzz", completed_episodes: 2, completed_tasks_rewards: { "t-1": [0.5] }, completed_tasks_details: { "t-1": ["ep-0"] } }],
  "/steps": [
    {
      steps: [
        { session_id: "s-4", group_id: "g-2", step_index: 0, messages: [{ role: "user", content: "q" }], response: "a", reward: 1, is_session_completed: true, weight_version: 1, env_id: "e-1" },
        { session_id: "s-3", group_id: "g-2", step_index: 1, messages: [{ role: "user", content: "q" }], response: "b", reward: 0, is_session_completed: true, weight_version: 0 },
      ],
    },
  ],
  "/get_rollout_data": [{ max_groups: 1 }, {}, { cursor: 1 }],
  "/start_rollout": [{ num_repeat_per_sample: 2, restart_training: true, job_session: "job-2" }],
  "/buffer/config": [
    { group_size: 1, ttl_seconds: 60, max_staleness: 0, staleness_policy: "drop", max_message_bytes: 4096 },
    { staleness_policy: "pace", max_staleness: 2, rollouts_per_version: 2, partial_groups: "deliver" },
  ],
  "/sync/config": [{ keep_claims_across_sync: true, sync_hold_seconds: 30, max_sync_seconds: 600 }],
  "/agent/ack": [{ seq: 1, ok: true, detail: "done" }, { seq: 2, ok: false, detail: "runner gone" }],
  "/agent/heartbeat": [{ agent_id: "agent-1", host: "gpu-1", pid: 10, version: "2", trainer: { state: "running", pid: 11, started_at: 1 }, rollout_workers: { state: "running", pid: 12, job_session: "fuzz-job", detail: "" } }],
  "/agent/trainer_exit": [{ exit_code: 1, signal: null, log_tail: "Traceback: boom" }],
  "/batch/is_episode_claimed": [{ checks: [{ episode_uuid: "ep-2" }, { episode_uuid: "ep-3", unregister_if_not_claimed: true }] }],
  "/batch/register_episode": [{ episodes: [{ episode_uuid: "ep-5" }, { episode_uuid: "ep-0", zmq_listen_result_addr: "tcp://127.0.0.1:20002" }] }],
  // The world's batch again (a resend), and under its id calls it did not have; a third turn of the live claim.
  "/agent/calls": [
    { batch_id: "world-batch-1", calls: [ledgerCall("call-w-2c", { prefix: { call_id: "call-w-2b", count: 4 } })] },
    { batch_id: "fuzz-batch-1", calls: [ledgerCall("call-w-2c", { prefix: { call_id: "call-w-2b", count: 4 } }), ledgerCall("call-w-0", { prefix: null })] },
  ],
  "/runs/environments/scan": [{}],
  "/runs/config/environment": [{ name: "countdown", reset_edits: true }, { name: "gsm8k" }],
  "/runs/config/edit": [{ field: "temperature", value: 0.7 }, { field: "stop_words", value: ["</s>"] }],
  "/runs/config/locked": [{ set: [{ section: "trainer", name: "lr", value: 0.1 }], remove: [{ section: "env", name: "max_token_length" }] }],
  "/runs/start": [{ environment: "gsm8k" }, {}],
  "/runs/inference_tests": [{ models: [{ model: "m-2", base_url: "http://127.0.0.1:9/v1", api_key_env: "FUZZ_KEY" }], num_steps: 1, group_size: 1, timeout_seconds: 5 }],
  "/runs/agent/catalog": [sampleCatalog()],
  "/runs/agent/runs/{run_id}": [
    { status: "running", processes: [{ name: "api", order: 0, state: "ready", pid: 100, command: "run-api", started_at: 1, ready_at: 2 }], metrics: [{ index: 0, step: 1, at: 3, values: { loss: 0.5 } }] },
    { status: "failed", detail: "api exited", processes: [{ name: "api", order: 0, state: "failed", exit_code: 1 }] },
  ],
  "/runs/agent/inference_tests/{test_id}": [{ status: "running", detail: "model 1 of 1" }, { status: "failed", detail: "no such model" }],
  "/runs/{run_id}/stop": [{ reason: "fuzz", force: true }, {}],
  "/atropos/register": [ATROPOS_REGISTRATION, { ...ATROPOS_REGISTRATION, batch_size: 2, starting_step: "3" }],
  "/atropos/register-env": [{ max_token_length: 512, desired_name: "gsm8k", weight: 0.5, group_size: 2, min_batch_allocation: 0.25 }],
  "/atropos/disconnect-env": [{ env_id: 1 }, { env_id: -1 }, { env_id: 7 }],
  "/atropos/scored_data": [
    atroposGroup(2, 0, { messages: [[{ role: "user", content: "q" }], [{ role: "user", content: "q" }]], advantages: [[0.5, 1], [0, 1]], generation_params: { temperature: 1 } }),
    atroposGroup(1, 1),
    atroposGroup(3, null),
    atroposGroup(2, -9),
  ],
  "/atropos/scored_data_list": [[atroposGroup(2, 0), atroposGroup(1, 1), atroposGroup(5, null)], []],
  "/atropos/config": [{ max_groups: 1 }, { max_groups: 100 }],
  "/admin/engines": [{ name: "fuzz-made" }],
  "/admin/engines/{name}/tokens": [{ role: "viewer", label: "made by the fuzzer" }],
};

/** The seeds of a documented path (either form of an engine route). */
export const seedsFor = (path: string): unknown[] => SEEDS[path.replace(/^\/e\/\{engine\}(\/t\/\{token\})?/, "")] ?? [];
