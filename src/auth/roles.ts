/**
 * Which role may run which engine operation (docs/security.md, "Roles").
 * An operator may also act as a client, because AgentJet's SwarmClient both drives the
 * engine (sync, start, stop) and claims episodes through one base URL.
 */
import type { Role } from "../protocol/admin";

export const VIEWER_OPS = [
  "get_engine_status",
  "get_episode_buffer",
  "get_current_batch_rollout_pool_information",
  "get_reward_history",
  "get_overview",
  "get_sync_config",
] as const;
export const CLIENT_OPS = ["claim_episode", "end_episode", "abort_episode", "can_continue_episode", "post_steps"] as const;
export const OPERATOR_OPS = ["sync_train_config", "start_engine", "stop_engine", "configure_buffer", "begin_history_run", "configure_sync"] as const;
export const TRAINER_OPS = [
  "register_episode",
  "update_engine_status",
  "is_episode_claimed",
  "update_current_batch_rollout_pool_information",
  "agent_poll",
  "agent_ack",
  "agent_heartbeat",
  "agent_trainer_exit",
  "agent_gateway_secret",
  "post_steps",
  "get_rollout_data",
  "start_rollout",
] as const;

/** Training runs (src/runs): reading the catalog, config, runs and tests; changing them; the agent's reports. */
export const RUN_VIEWER_OPS = ["list_environments", "get_run_config", "list_runs", "get_run"] as const;
export const RUN_OPERATOR_OPS = ["scan_environments", "select_environment", "edit_run_config", "set_locked_fields", "start_run", "stop_run", "test_inference"] as const;
export const RUN_TRAINER_OPS = ["agent_report_catalog", "agent_report_run", "agent_report_inference_test"] as const;

/**
 * The trajectory ledger (src/ledger): its settings are for everyone to read and the operator to
 * change; its trajectories hold every client's prompts and answers, so viewers, operators and
 * trainers read them and clients do not (a client has its own calls' answers already).
 */
export const LEDGER_VIEWER_OPS = ["get_ledger_config"] as const;
export const LEDGER_READER_OPS = ["read_trajectories"] as const;
export const LEDGER_OPERATOR_OPS = ["configure_ledger"] as const;
export const LEDGER_TRAINER_OPS = ["agent_record_calls"] as const;

/**
 * The Atropos trajectory API (src/atropos): everyone may read its status; an environment (a
 * client token) registers itself and posts scored groups; the trainer does all of it, and is
 * alone in registering a run, taking batches, resetting and setting the queue's bound.
 */
export const ATROPOS_READ_OPS = ["atropos_read"] as const;
export const ATROPOS_ENV_OPS = ["atropos_env"] as const;
export const ATROPOS_TRAINER_OPS = ["atropos_trainer"] as const;

export type EngineOp =
  | (typeof VIEWER_OPS)[number]
  | (typeof CLIENT_OPS)[number]
  | (typeof OPERATOR_OPS)[number]
  | (typeof TRAINER_OPS)[number]
  | (typeof RUN_VIEWER_OPS)[number]
  | (typeof RUN_OPERATOR_OPS)[number]
  | (typeof RUN_TRAINER_OPS)[number]
  | (typeof LEDGER_VIEWER_OPS)[number]
  | (typeof LEDGER_READER_OPS)[number]
  | (typeof LEDGER_OPERATOR_OPS)[number]
  | (typeof LEDGER_TRAINER_OPS)[number]
  | (typeof ATROPOS_READ_OPS)[number]
  | (typeof ATROPOS_ENV_OPS)[number]
  | (typeof ATROPOS_TRAINER_OPS)[number];

// Every role may read the training runs: the run views hold no secret (API keys stay on the GPU host).
const GRANTS: Record<Role, ReadonlySet<EngineOp>> = {
  viewer: new Set([...VIEWER_OPS, ...RUN_VIEWER_OPS, ...LEDGER_VIEWER_OPS, ...LEDGER_READER_OPS, ...ATROPOS_READ_OPS]),
  client: new Set([...VIEWER_OPS, ...CLIENT_OPS, ...RUN_VIEWER_OPS, ...LEDGER_VIEWER_OPS, ...ATROPOS_READ_OPS, ...ATROPOS_ENV_OPS]),
  operator: new Set([
    ...VIEWER_OPS,
    ...CLIENT_OPS,
    ...OPERATOR_OPS,
    ...RUN_VIEWER_OPS,
    ...RUN_OPERATOR_OPS,
    ...LEDGER_VIEWER_OPS,
    ...LEDGER_READER_OPS,
    ...LEDGER_OPERATOR_OPS,
    ...ATROPOS_READ_OPS,
  ]),
  trainer: new Set([
    ...VIEWER_OPS,
    ...TRAINER_OPS,
    ...RUN_VIEWER_OPS,
    ...RUN_TRAINER_OPS,
    ...LEDGER_VIEWER_OPS,
    ...LEDGER_READER_OPS,
    ...LEDGER_TRAINER_OPS,
    ...ATROPOS_READ_OPS,
    ...ATROPOS_ENV_OPS,
    ...ATROPOS_TRAINER_OPS,
  ]),
};

/** The admin may do anything; a role may do what it is granted. */
export function mayRun(role: Role | "admin", op: EngineOp): boolean {
  return role === "admin" || GRANTS[role].has(op);
}

/** Roles that see the trainer's secrets (per-episode keys, ZeroMQ addresses). */
export function seesTrainerSecrets(role: Role | "admin"): boolean {
  return role === "admin" || role === "trainer";
}
