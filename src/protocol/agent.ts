/**
 * What the local-agent tells its engine besides command acks: that it is alive, how its
 * trainer is doing, and batched forms of the trainer's chatty calls (its local facade
 * coalesces many runner threads' requests into one).
 */
import { z } from "zod";
import { MAX_LOG_TAIL_BYTES, textOfAtMost } from "./limits";
import { openEnum } from "./open-enum";
import { CheckWhetherEpisodeClaimedRequest, RegisterEpisodeRequest } from "./swarm";
import { EngineIncarnation } from "./commands";
import { AtroposOverview } from "./atropos";
import { StorageOverview } from "./storage";

export const TRAINER_STATES = ["idle", "starting", "running", "stopping", "exited"] as const;
export const TrainerState = z.enum(TRAINER_STATES);
export type TrainerState = z.infer<typeof TrainerState>;
/**
 * A trainer's state as the Worker reads and shows it: agents are upgraded after their Worker,
 * and one newer than it may report a state it does not know (stored and shown as given).
 */
const TrainerStateView = openEnum(TRAINER_STATES);

/**
 * The rollout workers a start_rollout command launched on the host: running, or ended on their
 * own (how, in the agent's words: "exited with code 1"). Workers the agent was told to stop are
 * not reported as ended.
 */
export const RolloutWorkersStatus = z.object({
  // Open like the trainer's state: the Worker only stores and shows it.
  state: openEnum(["running", "exited"]),
  pid: z.number().int().nonnegative().nullable(),
  job_session: z.string().max(256).nullable(),
  detail: z.string().max(1000),
});
export type RolloutWorkersStatus = z.infer<typeof RolloutWorkersStatus>;

const Count = z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER);

/**
 * The agent's queue of recorded calls on their way to the ledger, and what became of the calls
 * it recorded, counted since the agent started. Only the agent sees the calls it could not
 * ship: without this a ledger short of calls would say so nowhere but in the agent's log.
 */
export const AgentLedgerReport = z.object({
  queued_calls: Count,
  queued_bytes: Count,
  /** How long the oldest queued call has waited, as of the heartbeat (ms; a duration, so the hosts' clocks need not agree); null when none waits. */
  oldest_queued_ms: Count.nullable(),
  /** Stored by the exchange; `duplicate_calls` it had already (a batch sent again after its answer was lost). */
  sent_calls: Count,
  duplicate_calls: Count,
  /** Lost: the oldest, dropped while the queue was over its bytes (the exchange did not take them fast enough). */
  dropped_calls: Count,
  /** Lost: in batches the exchange refused (a 4xx no retry changes). */
  refused_calls: Count,
  /** Lost: calls the gateway answered but could not make a record of (the agent's log says why). */
  unrecorded_calls: Count,
});
export type AgentLedgerReport = z.infer<typeof AgentLedgerReport>;

/**
 * Kept whole in the engine's kv as JSON: its strings are at most 3,776 UTF-16 units, 22,656
 * bytes escaped (6 per unit), far under what a row holds (protocol/limits.ts).
 */
export const AgentHeartbeatRequest = z.object({
  agent_id: z.string().min(1).max(128),
  host: z.string().max(256),
  pid: z.number().int().nonnegative(),
  version: z.string().max(64).default(""),
  /** Where the Worker reaches this agent's inference gateway (e.g. a tunnel URL); null if it runs none. */
  gateway_url: z.url().max(2048).nullable().default(null),
  trainer: z.object({
    state: TrainerStateView,
    pid: z.number().int().nonnegative().nullable().default(null),
    started_at: z.number().nullable().default(null),
  }),
  /** Null when no rollout workers were started (or the agent predates them). */
  rollout_workers: RolloutWorkersStatus.nullable().default(null),
  /** Why training runs are off on this host (no runs config, or one that does not load); null when they are on. */
  runs_off_reason: z.string().max(2000).nullable().default(null),
  /** Null when the agent runs no gateway (or predates this report). */
  ledger: AgentLedgerReport.nullable().default(null),
});
export type AgentHeartbeatRequest = z.infer<typeof AgentHeartbeatRequest>;

/** An agent is shown as connected while its last heartbeat is younger than this. */
export const AGENT_STALE_AFTER_SECONDS = 45;

export const AgentStatus = z.object({
  connected: z.boolean(),
  agent_id: z.string().nullable(),
  host: z.string().nullable(),
  pid: z.number().nullable(),
  version: z.string().nullable(),
  trainer_state: TrainerStateView.nullable(),
  trainer_pid: z.number().nullable(),
  gateway_url: z.string().nullable(),
  rollout_workers: RolloutWorkersStatus.nullable(),
  /** Why training runs are off on the agent's host, in its words; null when they are on (or unknown). */
  runs_off_reason: z.string().nullable(),
  /** The agent's recorded calls, as of its last heartbeat; null when it reported none. */
  ledger: AgentLedgerReport.nullable(),
  /** Unix seconds of the last heartbeat; null if the agent never called in. */
  last_seen: z.number().nullable(),
});
export type AgentStatus = z.infer<typeof AgentStatus>;

export const HeartbeatResponse = z.object({ success: z.literal(true), server_time: z.number() });

/** The agent saw its trainer exit without being asked to stop. */
export const TrainerExitRequest = z.object({
  exit_code: z.number().int().nullable(),
  signal: z.string().max(32).nullable().default(null),
  /** The last lines of the trainer's output, for the operator; kept in the engine's meta row, at most 98,304 bytes escaped. */
  log_tail: textOfAtMost(MAX_LOG_TAIL_BYTES).default(""),
  /** The seq of the start command that launched the trainer; null when the agent does not know it (a trainer it did not start). */
  start_seq: z.number().int().nonnegative().nullable().default(null),
  /**
   * The incarnation of the engine whose start command that was: a report naming another one is
   * of a trainer an engine of the same name, deleted since, started, and is ignored. Absent: not
   * checked (an agent older than the field, or a trainer it did not start).
   */
  start_incarnation: EngineIncarnation.optional(),
});
export type TrainerExitRequest = z.infer<typeof TrainerExitRequest>;

export const BatchIsEpisodeClaimedRequest = z.object({ checks: z.array(CheckWhetherEpisodeClaimedRequest).min(1).max(1000) });
export type BatchIsEpisodeClaimedRequest = z.infer<typeof BatchIsEpisodeClaimedRequest>;
export const BatchRegisterEpisodeRequest = z.object({ episodes: z.array(RegisterEpisodeRequest).min(1).max(1000) });
export type BatchRegisterEpisodeRequest = z.infer<typeof BatchRegisterEpisodeRequest>;

/** One BoolResponse per item, in request order. */
export const BatchBoolResponse = z.object({ results: z.array(z.object({ success: z.boolean(), failure_reason: z.string() })) });
export type BatchBoolResponse = z.infer<typeof BatchBoolResponse>;

export const DeliveryProblem = z.object({
  episode_uuid: z.string(),
  fence: z.number(),
  detail: z.string(),
  /** Unix seconds of the end, as the refusals' `at` (the outbox's times are ms). */
  ended_at: z.number(),
});

/** A command the agent refused or could not carry out (acked with ok=false), in its words. */
export const CommandRefusal = z.object({
  seq: z.number().int(),
  kind: z.string(),
  detail: z.string(),
  /** Unix seconds of the ack. */
  at: z.number(),
});
export type CommandRefusal = z.infer<typeof CommandRefusal>;
/** How many refusals an engine keeps (the newest). */
export const MAX_REFUSALS = 20;

/**
 * The engine's records waiting for D1 (the trajectory, reward and buffer tables): a few rows for
 * about a second is normal; old rows and an error mean D1 does not take them.
 */
export const OutboxOverview = z.object({
  rows: z.number(),
  /** When the oldest row was written (ms); null when there is none, or it predates this field. */
  oldest_at: z.number().nullable(),
  /** What D1 answered the latest failed flush of a row still waiting; null when none failed. */
  last_error: z.string().nullable(),
  /** When that flush failed (ms). */
  last_error_at: z.number().nullable(),
});
export type OutboxOverview = z.infer<typeof OutboxOverview>;

/** A viewer's summary of an engine: counts, never the whole episode table. */
export const EngineOverview = z.object({
  engine: z.string(),
  engine_status: z.string(),
  engine_status_detail: z.string().nullable(),
  /** When the engine entered engine_status (ms); null for an engine that has held it since before this was recorded. */
  engine_status_since: z.number().nullable(),
  global_step: z.number().nullable(),
  episodes: z.object({ registered: z.number(), claimed: z.number(), resetting: z.number() }),
  deliveries: z.object({ pending: z.number(), delivered: z.number(), undeliverable: z.number() }),
  /** The most recent undeliverable results, newest first (at most 20). */
  undeliverable: z.array(DeliveryProblem),
  /** The agent's most recent refusals, newest first (at most MAX_REFUSALS); results it could not deliver are under `undeliverable` instead. */
  refusals: z.array(CommandRefusal),
  pending_commands: z.number(),
  outbox: OutboxOverview,
  agent: AgentStatus,
  /**
   * Relayed LLM calls admitted, and the relay's requests to this engine that carried them (the
   * Worker admits calls from its cache and sends them in batches), since the engine's object
   * last started; and the calls that failed as their clients got them, by kind ("<status>
   * <code>": refused at admission, the gateway not reached or refusing, the model failing),
   * with the latest. An admitted call may still fail: calls minus failures is not calls served.
   */
  relay: z.object({
    calls: z.number(),
    engine_requests: z.number(),
    failures: z.record(z.string(), z.number()),
    last_failure: z.object({ kind: z.string(), message: z.string(), at: z.number() }).nullable(),
  }),
  /**
   * The ledger's claims whose recorded calls wait to be gathered into one object each, live ones
   * included (docs/ledger.md, "Gathered by claim"); and its requests to this engine since the
   * engine's object last started, one per batch of calls recorded, naming the batch's claims.
   */
  ledger: z.object({ claims_to_gather: z.number(), engine_requests: z.number() }),
  /** Atropos's trajectory API on this engine, what keeps its batches from being cut included. */
  atropos: AtroposOverview,
  /** How full the engine's store is, and the bound above which writes that add data are refused. */
  storage: StorageOverview,
});
export type EngineOverview = z.infer<typeof EngineOverview>;

export const RunningEpisodesQuery = z.object({
  limit: z.coerce.number().int().min(1).max(500).default(50),
  /** Opaque; from the previous page's next_cursor. */
  cursor: z.string().max(512).optional(),
});
export type RunningEpisodesQuery = z.infer<typeof RunningEpisodesQuery>;

export const RunningEpisode = z.object({
  episode_uuid: z.string(),
  client_uuid: z.string(),
  episode_type: z.string(),
  task_id: z.string(),
  idle_seconds: z.number(),
  discard_episode_timeout: z.number(),
  /** Seconds until the lease is reaped unless the client shows activity. */
  expires_in: z.number(),
  llm_call_count: z.number(),
  fence: z.number(),
});

/** Claimed episodes, soonest to expire first, a page at a time. */
export const RunningEpisodesResponse = z.object({
  episodes: z.array(RunningEpisode),
  next_cursor: z.string().nullable(),
  total: z.number(),
});
export type RunningEpisodesResponse = z.infer<typeof RunningEpisodesResponse>;

/** Train episodes ended during the current global step, per task (at most 500 tasks, most episodes first). */
export const CompletedTasksResponse = z.object({
  global_step: z.number().nullable(),
  /** episodes count usable ends; failed counts the task's claims that failed_infra, were aborted or reaped. */
  tasks: z.array(z.object({ task_id: z.string(), episodes: z.number(), clients: z.number(), mean_reward: z.number().nullable(), failed: z.number() })),
});
export type CompletedTasksResponse = z.infer<typeof CompletedTasksResponse>;
