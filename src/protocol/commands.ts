/**
 * The engine -> local-agent command channel. Commands are durable and ordered by `seq`;
 * the agent acks each by seq, and an unacked command is handed out again after its deadline.
 */
import { z } from "zod";
import { textOfAtMost } from "./limits";
import { openEnum } from "./open-enum";
import { queryNumber } from "./query-numbers";
import { RunId, TestId } from "./runs";

export const StartCommand = z.object({ kind: z.literal("start"), yaml_as_string: z.string() });
export const StopCommand = z.object({ kind: z.literal("stop"), reason: z.string() });
export const DeliverCommand = z.object({
  kind: z.literal("deliver"),
  episode_uuid: z.string(),
  fence: z.number().int(),
  zmq_listen_result_addr: z.string(),
  /** The workflow output JSON, sent to the runner as one string. */
  payload: z.string(),
});
export const ResetCommand = z.object({
  kind: z.literal("reset"),
  episode_uuid: z.string(),
  fence: z.number().int(),
  zmq_listen_result_addr: z.string(),
});

/** Launch the configured rollout workers (the slime / AIEvoBox path). */
export const StartRolloutCommand = z.object({
  kind: z.literal("start_rollout"),
  group_size: z.number().int(),
  job_session: z.string(),
  restart_training: z.boolean(),
});
/** Ask the inference upstream to forget sessions whose group was dropped. */
export const ClearSessionsCommand = z.object({
  kind: z.literal("clear_sessions"),
  session_ids: z.array(z.string()),
  group_ids: z.array(z.string()),
  // Only passed on to the inference upstream: an agent older than its Worker still clears for a reason it does not know.
  reason: openEnum(["incomplete_group_ttl", "late_rows_from_dropped_groups", "stale_group", "incomplete_sessions_of_delivered_group", "restart_training"]),
});

/** Training runs (src/runs): scan the host's environment directories and report the catalog. */
export const ScanEnvironmentsCommand = z.object({ kind: z.literal("scan_environments") });
/**
 * Start a run's processes in order; `config_yaml` is the rendered run config (locked fields plus
 * edits). The agent names files on the GPU host after `run_id` (and an inference test's
 * `test_id`), so they are ids of the exchange's own shape, never a path.
 */
export const StartRunCommand = z.object({
  kind: z.literal("start_run"),
  run_id: RunId,
  environment: z.object({ name: z.string(), class_name: z.string(), file_path: z.string() }),
  config_yaml: z.string(),
});
export const StopRunCommand = z.object({ kind: z.literal("stop_run"), run_id: RunId, reason: z.string() });
/** Run an environment's `process` mode against each model and report accuracy from its JSONL output. */
export const TestInferenceCommand = z.object({
  kind: z.literal("test_inference"),
  test_id: TestId,
  environment: z.object({ name: z.string(), class_name: z.string(), file_path: z.string() }),
  num_steps: z.number().int(),
  group_size: z.number().int(),
  models: z.array(z.object({ model: z.string(), base_url: z.string(), api_key_env: z.string().nullable() })),
  timeout_seconds: z.number(),
});

export const CommandBody = z.discriminatedUnion("kind", [
  StartCommand,
  StopCommand,
  DeliverCommand,
  ResetCommand,
  StartRolloutCommand,
  ClearSessionsCommand,
  ScanEnvironmentsCommand,
  StartRunCommand,
  StopRunCommand,
  TestInferenceCommand,
]);
export type CommandBody = z.infer<typeof CommandBody>;
export type CommandKind = CommandBody["kind"];

export const Command = z.object({
  seq: z.number().int().positive(),
  /** How many times this command has been handed out, this one included. */
  attempt: z.number().int().positive(),
  created_at: z.number(),
  body: CommandBody,
});
export type Command = z.infer<typeof Command>;

export const PollCommandsQuery = z.object({
  /** Seconds to hold the request open when nothing is due (long poll). */
  wait: queryNumber(z.number().min(0).max(25, "wait is at most 25 seconds")).default(0),
  limit: z.coerce.number().int().min(1).max(100).default(32),
  /**
   * Identifies one running agent process. A poll from a newer session takes over: polls of older
   * sessions still held open (an agent that was killed mid-poll) stop leasing commands, and
   * commands they leased are handed out again at once instead of after their lease.
   */
  session: z.string().min(1).max(128).optional(),
});
export type PollCommandsQuery = z.infer<typeof PollCommandsQuery>;

/**
 * Which engine of its name answers: an engine deleted and made again under the same name gets a
 * new one, and counts its seqs from 1 again, so a seq names a command only together with it.
 * "" for an engine made before incarnations existed (it keeps that one).
 */
export const EngineIncarnation = z.string().max(64);

export const PollCommandsResponse = z.object({
  /**
   * The incarnation of the engine that handed these commands out; the agent journals each
   * outcome with it and sends it back with the ack. Absent from a Worker older than the field:
   * an agent then keeps the old seq-only behaviour.
   */
  incarnation: EngineIncarnation.optional(),
  commands: z.array(Command),
});
export type PollCommandsResponse = z.infer<typeof PollCommandsResponse>;

export const AckCommandRequest = z.object({
  seq: z.number().int().positive(),
  /**
   * The incarnation the poll answer that handed the command out named. An ack naming another
   * one is refused as a command the engine does not have (404 `unknown_command`): it answers a
   * command of an engine of the same name deleted since, whose seq this engine may use again.
   * Absent: not checked (an agent older than the field, or an outcome journaled before it).
   */
  incarnation: EngineIncarnation.optional(),
  ok: z.boolean(),
  /**
   * Plain words for the operator: what happened. Kept in the command's and the episode's rows as
   * is, and in the meta row when a start failed (at most 393,216 bytes escaped): under what a row holds.
   */
  detail: textOfAtMost(65_536).default(""),
});
export type AckCommandRequest = z.infer<typeof AckCommandRequest>;

export const AckCommandResponse = z.object({
  success: z.boolean(),
  /**
   * False when the seq was already acked (also once its command was deleted, ten minutes after
   * its ack): a redelivered command's second ack is harmless.
   */
  first_ack: z.boolean(),
});
export type AckCommandResponse = z.infer<typeof AckCommandResponse>;
