/**
 * AgentJet swarm-mode wire models (AgentJet's swarm server, field for field: docs/agentjet.md).
 * Field names and defaults follow the Python models exactly so unmodified clients work.
 * Objects strip unknown keys: newer clients send extra fields, which we accept and ignore.
 */
import { z } from "zod";
import { idText, isWellFormed, textOfAtMost } from "./limits";
import { EngineStatus } from "./status";

const uuidLike = idText(256);
/**
 * A new episode's id: also not `.` or `..`, which URLs take for dot-segments (escaped too), so
 * no URL could name its trajectory (`/trajectories/<episode_uuid>`): `.` with a fence read the
 * episode named as the fence instead.
 */
export const DOT_SEGMENT_EPISODE = "is '.' or '..', which URLs read as a dot-segment: no URL could name its trajectory";
const episodeId = uuidLike.refine((s) => s !== "." && s !== "..", DOT_SEGMENT_EPISODE);
const optionalText = (max: number) => z.string().max(max, `is longer than ${max} characters`).default("");

export const SyncTrainConfigRequest = z.object({
  yaml_as_string: textOfAtMost(1_000_000),
});

/** Pace's per-version fallback is the product of the two counts (episode-claims.ts); 0 is as good as not given. */
const throttleCount = z.number().int().nonnegative("must not be negative");
export const SwarmThrottlePolicy = z.object({
  ratio: z.number().nonnegative("must not be negative").default(1.5),
  expected_batch_size: throttleCount.optional(),
  expected_num_repeat: throttleCount.optional(),
  current_task_id: z.string().max(256).refine(isWellFormed, "holds a lone surrogate, which has no UTF-8 form").default(""),
});

export const EpisodeType = z.enum(["train", "eval"], {
  error: (issue) => `unknown episode_type ${JSON.stringify(issue.input)}; expected "train" or "eval"`,
});
export type EpisodeType = z.infer<typeof EpisodeType>;

/** The longest lease a claim gets: a week of silence. */
export const MAX_LEASE_SECONDS = 7 * 24 * 3600;

export const ClaimEpisodeRequest = z.object({
  client_uuid: uuidLike,
  episode_type: EpisodeType.default("train"),
  /**
   * Seconds of client silence after which the claim is reaped, at most a week: a longer one (a
   * client that means never to be reaped) is held to that, as the seed took any. Refused, it was
   * a 422 the SwarmClient answers by claiming again in 15 s, for ever.
   */
  discard_episode_timeout: z
    .number()
    .positive("must be a positive number of seconds")
    .transform((s) => Math.min(s, MAX_LEASE_SECONDS)),
  throttle_policy: SwarmThrottlePolicy.nullable().optional(),
});
export type ClaimEpisodeRequest = z.infer<typeof ClaimEpisodeRequest>;

export const ClaimEpisodeResponse = z.object({
  success: z.boolean(),
  client_uuid: z.string(),
  episode_uuid: z.string(),
  openai_base_url: z.string(),
  openai_api_key: z.string(),
  fail_cause: z.string(),
  /** Our addition: the claim's attempt number. Old clients ignore it; new ones send it back. */
  fence: z.number().int().optional(),
});
export type ClaimEpisodeResponse = z.infer<typeof ClaimEpisodeResponse>;

/**
 * A reward, of an episode or of a buffer step: within a bound far beyond any reward, and small
 * enough that the averages over them (a step's Welford mean and variance, engine/rules.ts; a
 * pull's avg_reward) cannot overflow: rewards of 1e308 made the step's std NaN, and every later
 * step change a 500.
 */
const MAX_REWARD = 1e15;
export const Reward = z.number().min(-MAX_REWARD, `must be within ±${MAX_REWARD}`).max(MAX_REWARD, `must be within ±${MAX_REWARD}`);

export const WorkflowOutput = z.object({
  // zod names a union that fits no branch only "Invalid input": say what a reward may be.
  reward: z
    .union([Reward, z.array(Reward)], { error: (issue) => (issue.code === "invalid_union" ? "must be a finite number or a list of finite numbers" : undefined) })
    .nullable()
    .default(null),
  is_success: z.boolean().nullable().default(null),
  metadata: z.record(z.string(), z.unknown()).default({}),
  log_metrics: z.record(z.string(), z.unknown()).default({}),
}).loose();
export type WorkflowOutput = z.infer<typeof WorkflowOutput>;

export const EndEpisodeRequest = z.object({
  client_uuid: uuidLike,
  episode_uuid: uuidLike,
  workflow_output: WorkflowOutput,
  task_id: z.string().max(256).refine(isWellFormed, "holds a lone surrogate, which has no UTF-8 form").default(""),
  /** Optional fence from our claim response; AgentJet clients omit it and are fenced by client_uuid. */
  fence: z.number().int().nonnegative().optional(),
});
export type EndEpisodeRequest = z.infer<typeof EndEpisodeRequest>;
/**
 * An end as the Worker gives it to the engine: `workflow_output_text` is the output written with
 * the client's numbers as it sent them (http/python-json.ts exactNumbers), when JSON.stringify
 * would change one as Python reads it; never a client's field (the request's schema strips it).
 */
export type EndEpisodeCall = EndEpisodeRequest & { workflow_output_text?: string | undefined };

/** abort_episode shares end_episode's body; AgentJet sends task_id "" and reward 0. A task_id counts only where the claim named none (as an end's). */
export const AbortEpisodeRequest = EndEpisodeRequest.extend({
  workflow_output: WorkflowOutput.optional(),
});
export type AbortEpisodeRequest = z.infer<typeof AbortEpisodeRequest>;

export const EndEpisodeResponse = z.object({ success: z.boolean() });

export const CanContinueEpisodeRequest = z.object({ client_uuid: uuidLike, episode_uuid: uuidLike });
export const CanContinueEpisodeResponse = z.object({ can_continue: z.boolean() });

export const CheckWhetherEpisodeClaimedRequest = z.object({
  episode_uuid: uuidLike,
  unregister_if_not_claimed: z.boolean().default(false),
});

export const BoolResponse = z.object({ success: z.boolean(), failure_reason: z.string().default("") });
export type BoolResponse = z.infer<typeof BoolResponse>;

/**
 * An episode's row holds these with the claim's client_uuid and task_id: at most 12,032 UTF-16
 * units, 36,096 bytes of UTF-8; its reset command holds the uuid and address escaped, at most
 * 7,680 bytes. Far under what a row holds (protocol/limits.ts), so no size is checked here.
 */
export const RegisterEpisodeRequest = z.object({
  episode_uuid: episodeId,
  openai_base_url: optionalText(2048),
  openai_api_key: optionalText(8192),
  zmq_listen_result_addr: optionalText(1024),
});
export type RegisterEpisodeRequest = z.infer<typeof RegisterEpisodeRequest>;

export const UpdateEngineStatusRequest = z.object({
  engine_status: EngineStatus,
  /** Kept in the engine's meta row as JSON: at most 393,216 bytes escaped (6 per byte), under what a row holds. */
  engine_status_detail: textOfAtMost(65_536).nullable().optional(),
  global_step: z.number().int().nonnegative().nullable().optional(),
  /** Our addition (rollout buffer): the trainer's current weight version. */
  weight_version: z.number().int().nonnegative().nullable().optional(),
});
export type UpdateEngineStatusRequest = z.infer<typeof UpdateEngineStatusRequest>;

export const EngineStatusResponse = z.object({
  engine_status: EngineStatus,
  engine_status_detail: z.string().nullable(),
  global_step: z.number().int().nullable(),
});
export type EngineStatusResponse = z.infer<typeof EngineStatusResponse>;

export const EpisodeStatus = z.object({
  episode_uuid: z.string(),
  episode_status: z.enum(["registered", "claimed"]),
  episode_type: EpisodeType,
  openai_base_url: z.string(),
  openai_api_key: z.string(),
  client_uuid: z.string(),
  zmq_listen_result_addr: z.string(),
  latest_activity_timestamp: z.number(),
  discard_episode_timeout: z.number(),
  llm_call_count: z.number().int(),
  debug_log: z.array(z.string()),
  optional_task_id: z.string(),
});
export type EpisodeStatus = z.infer<typeof EpisodeStatus>;

export const EpisodeBufferResponse = z.object({ buffer: z.array(EpisodeStatus) });
export type EpisodeBufferResponse = z.infer<typeof EpisodeBufferResponse>;

const count = z.number().int().default(0);

/** Our addition: a task's train claims that failed for reasons not the policy's, by reason, and their episodes. */
export const FailedTask = z.object({
  failed_infra: z.number().int(),
  aborted: z.number().int(),
  reaped: z.number().int(),
  episode_uuids: z.array(z.string()),
});
export type FailedTask = z.infer<typeof FailedTask>;

/** What the trainer posts; fields the engine computes itself are accepted and then ignored. */
export const CurrentBatchRolloutPoolInformation = z.object({
  sample_collection_method: z.string().default(""),
  completed_episodes: count,
  completed_episode_target: count,
  completed_tasks: count,
  completed_task_target: count,
  completed_non_dummy_tasks: count,
  completed_non_dummy_task_target: count,
  task_expected_num_repeat: count,
  completed_tasks_details: z.record(z.string(), z.array(z.string())).default({}),
  completed_tasks_rewards: z.record(z.string(), z.array(z.number())).default({}),
  completed_tasks_client_uuids: z.record(z.string(), z.array(z.string())).default({}),
  running_episode_details: z.record(z.string(), z.record(z.string(), z.string())).nullable().default(null),
  engine_status: z.string().nullable().default(null),
  global_step: z.number().int().nullable().default(null),
  booting_start_time: z.number().nullable().default(null),
  /** Our addition, computed by the engine: failed rollouts per task, apart from completed_tasks_rewards. */
  failed_tasks: z.record(z.string(), FailedTask).default({}),
});
export type CurrentBatchRolloutPoolInformation = z.infer<typeof CurrentBatchRolloutPoolInformation>;

export const RewardHistoryEntry = z.object({
  global_step: z.number().int(),
  mean_reward: z.number(),
  std_reward: z.number(),
  timestamp: z.number(),
  /** Our additions; AgentJet ignores them. `count`: the reward values (a list reward holds several). */
  count: z.number().int(),
  min_reward: z.number(),
  max_reward: z.number(),
});
export type RewardHistoryEntry = z.infer<typeof RewardHistoryEntry>;
export const RewardHistoryResponse = z.object({
  history: z.array(RewardHistoryEntry),
  /** Our addition: the run this history is of (protocol/history.ts); null before the engine's first run. */
  run: z.number().int().nullable(),
});
export type RewardHistoryResponse = z.infer<typeof RewardHistoryResponse>;
