/**
 * The engine API as data: every route's method, path, operation (and so the roles allowed),
 * request and response schemas, and the engine call it makes. The router and the OpenAPI
 * document are both generated from this one table, so they cannot drift apart.
 */
import { z } from "zod";
import type { EngineObject } from "../engine/engine-object";
import type { Caller } from "../engine/caller";
import { ok, type Reply } from "../engine/reply";
import type { Env } from "../env";
import { withTrainingTokens } from "../ledger/rollout-tokens";
import type { EngineOp } from "../auth/roles";
import { exactNumbers } from "./python-json";
import {
  AbortEpisodeRequest,
  BoolResponse,
  CanContinueEpisodeRequest,
  CanContinueEpisodeResponse,
  CheckWhetherEpisodeClaimedRequest,
  ClaimEpisodeRequest,
  ClaimEpisodeResponse,
  CurrentBatchRolloutPoolInformation,
  EndEpisodeCall,
  EndEpisodeRequest,
  EndEpisodeResponse,
  EngineStatusResponse,
  EpisodeBufferResponse,
  RegisterEpisodeRequest,
  RewardHistoryResponse,
  SyncTrainConfigRequest,
  UpdateEngineStatusRequest,
} from "../protocol/swarm";
import { AckCommandRequest, AckCommandResponse, PollCommandsQuery, PollCommandsResponse } from "../protocol/commands";
import {
  AgentHeartbeatRequest,
  BatchBoolResponse,
  BatchIsEpisodeClaimedRequest,
  BatchRegisterEpisodeRequest,
  EngineOverview,
  HeartbeatResponse,
  RunningEpisodesQuery,
  RunningEpisodesResponse,
  CompletedTasksResponse,
  TrainerExitRequest,
} from "../protocol/agent";

import { formatBytes, MAX_STORED_BYTES } from "../protocol/limits";
import { engineMetrics, EXPOSITION_TYPE } from "../metrics/prometheus";
import { STORAGE_FULL, type Refusal } from "../openapi/error-responses";
import { BUFFER_FULL_RETRY_SECONDS } from "../engine/buffer-bytes";
import { GatewaySecretResponse } from "../protocol/relay";
import { LedgerConfig, UpdateLedgerConfigRequest } from "../protocol/ledger";
import { SyncConfig, UpdateSyncConfigRequest } from "../protocol/sync";
import { BeginRunRequest, BeginRunResponse, HistoryRunsQuery, HistoryRunsResponse, RewardHistoryQuery } from "../protocol/history";
import {
  BufferConfig,
  GetRolloutDataRequest,
  GetRolloutDataResponse,
  HealthResponse,
  PostStepsRequest,
  PostStepsResponse,
  StartRolloutRequest,
  StartRolloutResponse,
  UpdateBufferConfigRequest,
} from "../protocol/buffer";

export type Stub = DurableObjectStub<EngineObject>;

export type RouteSpec = {
  method: "get" | "post";
  /** Below the engine's base URL, e.g. `/claim_episode`. */
  path: string;
  op: EngineOp;
  summary: string;
  /** Where the input comes from: a JSON body, the query string, or nothing. */
  /** `emptyAs`: what an empty body counts as; `unparsableAs`: what a body that is no JSON counts as (parseJsonText). */
  input: { from: "body"; schema: z.ZodType; emptyAs?: unknown; unparsableAs?: unknown } | { from: "query"; schema: z.ZodType } | { from: "none" };
  response: z.ZodType;
  /** `url` is the request's, for answers that name the exchange's origin. */
  call: (stub: Stub, caller: Caller, input: unknown, url: string) => Promise<Reply<unknown>>;
  /** What the engine is given of a body route's input, validated, and its text: the input itself unless said. */
  prepare?: (input: unknown, text: string) => unknown;
  /**
   * What the Worker adds to the engine's answer from D1 and R2, for the few routes that need it
   * (`input` the request's, validated): an answer, or the response itself when it is written as a stream.
   */
  after?: (env: Env, engine: string, reply: Reply<unknown>, input: unknown) => Promise<Reply<unknown> | Response>;
  /** A GET that changes the engine's state (the agent's poll leases what it returns): `x-changes-state` in the document. */
  changesState?: true;
  /** The 503s the route answers by design (their error codes, and when), not failures: documented with `x-refusal-codes`. */
  unavailable?: Refusal[];
  /** The answer is text of this content type (the call's body, a string), not JSON. */
  text?: string;
};

const Success = z.object({ success: z.boolean() });
/** Routes that take no body accept `{}` or nothing, as AgentJet's client sends `json={}`. */
const NoBody = z.object({}).loose();

function post<S extends z.ZodType>(
  path: string,
  op: EngineOp,
  summary: string,
  schema: S,
  response: z.ZodType,
  call: (stub: Stub, caller: Caller, input: z.output<S>, url: string) => Promise<Reply<unknown>>,
  emptyAs?: unknown,
  unparsableAs?: unknown,
): RouteSpec {
  return {
    method: "post",
    path,
    op,
    summary,
    input: { from: "body", schema, ...(emptyAs !== undefined ? { emptyAs } : {}), ...(unparsableAs !== undefined ? { unparsableAs } : {}) },
    response,
    call: (stub, caller, input, url) => call(stub, caller, input as z.output<S>, url),
  };
}

function get(path: string, op: EngineOp, summary: string, response: z.ZodType, call: (stub: Stub, caller: Caller) => Promise<Reply<unknown>>): RouteSpec {
  return { method: "get", path, op, summary, input: { from: "none" }, response, call: (stub, caller) => call(stub, caller) };
}

/** A GET whose input is its query string, validated by `schema`. */
function getQuery<S extends z.ZodType>(
  path: string,
  op: EngineOp,
  summary: string,
  schema: S,
  response: z.ZodType,
  call: (stub: Stub, caller: Caller, input: z.output<S>) => Promise<Reply<unknown>>,
): RouteSpec {
  return { method: "get", path, op, summary, input: { from: "query", schema }, response, call: (stub, caller, input) => call(stub, caller, input as z.output<S>) };
}

/** An abort is refused for the store only when it carries outputs: one without frees its claim and records little. */
const STORAGE_FULL_ABORT: Refusal = { ...STORAGE_FULL, when: `Only an abort that carries a \`workflow_output\`. ${STORAGE_FULL.when}` };

export const ENGINE_API: RouteSpec[] = [
  // Engine status and configuration
  get("/get_engine_status", "get_engine_status", "The engine's status, its detail and the global step.", EngineStatusResponse, (s, who) =>
    s.getEngineStatus(who),
  ),
  post("/sync_train_config", "sync_train_config", "Store the training YAML; only while ENGINE.OFFLINE.", SyncTrainConfigRequest, Success, (s, who, b) =>
    s.syncTrainConfig(who, b.yaml_as_string),
  ),
  post("/start_engine", "start_engine", "Move to ENGINE.BOOTING and queue a start command for the GPU host's agent.", NoBody, Success, (s, who) => s.startEngine(who), {}),
  post("/stop_engine", "stop_engine", "Queue a stop command, move to ENGINE.OFFLINE and clear live episodes.", NoBody, Success, (s, who) => s.stopEngine(who), {}),
  post("/update_engine_status", "update_engine_status", "The trainer reports its status, detail, global step and weight version.", UpdateEngineStatusRequest, BoolResponse, (s, who, b) =>
    s.updateEngineStatus(who, b),
  ),

  // Episodes
  {
    ...post("/register_episode", "register_episode", "The trainer offers an episode (ENGINE.ROLLING only).", RegisterEpisodeRequest, BoolResponse, (s, who, b) =>
      s.registerEpisode(who, b),
    ),
    unavailable: [STORAGE_FULL],
  },
  post("/claim_episode", "claim_episode", "Claim the oldest registered episode; answers success false with a fail_cause when none can be had.", ClaimEpisodeRequest, ClaimEpisodeResponse, (s, who, b, url) =>
    s.claimEpisode(who, b, new URL(url).origin),
  ),
  {
    ...post("/end_episode", "end_episode", "Submit the workflow output of a claimed episode; success only once it is durably stored.", EndEpisodeRequest, EndEpisodeResponse, (s, who, b) =>
      s.endEpisode(who, b),
    ),
    // The output as the runner gets it, with the client's numbers as it wrote them (exactNumbers).
    prepare: (input, text): EndEpisodeCall => ({ ...(input as EndEpisodeRequest), workflow_output_text: exactNumbers(text, "workflow_output") ?? undefined }),
    unavailable: [STORAGE_FULL],
  },
  {
    ...post("/abort_episode", "abort_episode", "Give a claimed episode back (requeued in ROLLING, deleted in ROLLING_POST).", AbortEpisodeRequest, EndEpisodeResponse, (s, who, b) =>
      s.abortEpisode(who, b),
    ),
    unavailable: [STORAGE_FULL_ABORT],
  },
  post("/can_continue_episode", "can_continue_episode", "Whether this client still holds the claim.", CanContinueEpisodeRequest, CanContinueEpisodeResponse, (s, who, b) =>
    s.canContinueEpisode(who, b.client_uuid, b.episode_uuid),
  ),
  post("/is_episode_claimed", "is_episode_claimed", "Whether an episode is claimed; optionally unregister it if not.", CheckWhetherEpisodeClaimedRequest, BoolResponse, (s, who, b) =>
    s.isEpisodeClaimed(who, b.episode_uuid, b.unregister_if_not_claimed),
  ),
  post("/get_episode_buffer", "get_episode_buffer", "All live episodes; the trainer's secrets only for the trainer.", NoBody, EpisodeBufferResponse, (s, who) => s.getEpisodeBuffer(who), {}),

  // Pool information and reward history
  post(
    "/update_current_batch_rollout_pool_information",
    "update_current_batch_rollout_pool_information",
    "The trainer's view of the current batch; fields the engine computes are ignored.",
    CurrentBatchRolloutPoolInformation,
    BoolResponse,
    (s, who, b) => s.updatePoolInfo(who, b),
  ),
  get(
    "/get_current_batch_rollout_pool_information",
    "get_current_batch_rollout_pool_information",
    "The current batch, with running episodes and completed tasks computed by the engine (O(claimed)).",
    CurrentBatchRolloutPoolInformation,
    (s, who) => s.getPoolInfo(who),
  ),
  getQuery(
    "/get_reward_history",
    "get_reward_history",
    "Reward mean, std, count, min and max per finished global step, of the current run (or ?run=N).",
    RewardHistoryQuery,
    RewardHistoryResponse,
    (s, who, q) => s.getRewardHistory(who, q),
  ),
  getQuery("/history/runs", "get_reward_history", "The runs the engine's history is divided into, newest first, with their steps and last reward.", HistoryRunsQuery, HistoryRunsResponse, (s, who, q) =>
    s.historyRuns(who, q),
  ),
  post("/history/begin_run", "begin_history_run", "Begin a new run of the history (a run with nothing in it yet is kept, with the note).", BeginRunRequest, BeginRunResponse, (s, who, b) =>
    s.beginHistoryRun(who, b),
    {},
  ),
  get("/overview", "get_overview", "Counts of episodes, deliveries and commands, and the agent's presence.", EngineOverview, (s, who) => s.overview(who)),

  {
    ...get(
      "/metrics",
      "get_overview",
      "The overview's and the buffer's figures in Prometheus's text format (0.0.4), for a scraper; docs/operations.md, \"Monitoring\".",
      z.string(),
      async (s, who) => {
        const [o, h] = await Promise.all([s.overview(who), s.health(who)]);
        if (!o.ok) return o;
        if (!h.ok) return h;
        return ok(engineMetrics(o.body, h.body));
      },
    ),
    text: EXPOSITION_TYPE,
  },

  getQuery(
    "/running_episodes",
    "get_overview",
    "Claimed episodes a page at a time, soonest to expire first (O(log n + limit) per page).",
    RunningEpisodesQuery,
    RunningEpisodesResponse,
    (s, who, q) => s.runningEpisodes(who, q),
  ),

  get("/completed_tasks", "get_overview", "Train episodes ended in the current global step, per task: episodes, distinct clients, mean reward.", CompletedTasksResponse, (s, who) =>
    s.completedTasks(who),
  ),

  // The rollout buffer (slime / AIEvoBox contract)
  {
    ...post("/steps", "post_steps", "Rollout workers post step rows in batches; idempotent by (session_id, step_index).", PostStepsRequest, PostStepsResponse, (s, who, b) =>
      s.postSteps(who, b.steps),
    ),
    unavailable: [
      {
        code: "paced",
        when: "Under `staleness_policy: pace`, the batch would open new groups while the work under way could already be consumed too late (docs/buffer.md, \"Pacing instead of discarding\"); none of its rows that open a new group was stored, its rows of groups already begun were (`detail` says how many). Send it again shortly.",
      },
      {
        code: "buffer_full",
        when: "The rows the batch adds would bring the bytes of rows the buffer holds past its `max_stored_bytes` (docs/buffer.md, \"Bounded\"; rows larger than the bound alone are a 413); none of its rows that open a new group was stored, its rows of groups already open were (`detail` says how many). Send it again once the trainer has pulled.",
        retryAfter: BUFFER_FULL_RETRY_SECONDS,
      },
      STORAGE_FULL,
    ],
  },
  {
    ...post(
      "/get_rollout_data",
      "get_rollout_data",
      "Pull ready groups (each handed out once), or re-read an earlier pull by its cursor; AgentJet claims' items carry their trajectory's tokens when the engine captures them.",
      GetRolloutDataRequest,
      GetRolloutDataResponse,
      (s, who, b) => s.getRolloutData(who, b),
      {},
      // As the seed: a body it could not read as JSON was `{}`, a pull with no limit (buffer_server.py.txt:427-430).
      {},
    ),
    after: async (env, engine, reply, input) => {
      if (!reply.ok) return reply;
      const answer = await withTrainingTokens(env.DB, env.LEDGER, engine, reply.body as GetRolloutDataResponse, (input as GetRolloutDataRequest).training);
      return answer instanceof ReadableStream ? new Response(answer, { headers: { "content-type": "application/json" } }) : ok(answer);
    },
  },
  post("/start_rollout", "start_rollout", "Set the group size, optionally reset pending groups, and queue the agent's start_rollout command.", StartRolloutRequest, StartRolloutResponse, (s, who, b) =>
    s.startRollout(who, b),
  ),
  post("/buffer/config", "configure_buffer", `Change the buffer's group size, TTL, staleness limit and policy, partial-group policy, row size limit, bound on the bytes of rows it holds (max_stored_bytes) or the days step rows are kept in D1 (d1_retention_days, 1 to 3650). A row size limit above what the stores hold (${formatBytes(MAX_STORED_BYTES)}) is refused 413, naming that limit.`, UpdateBufferConfigRequest, BufferConfig, (s, who, b) =>
    s.configureBuffer(who, b),
  ),
  get("/health", "get_overview", "Buffer counts, its config and the agent's presence.", HealthResponse, (s, who) => s.health(who)),

  // The trajectory ledger's settings (its records are read through src/ledger's routes)
  get("/sync/config", "get_sync_config", "Whether claims survive ENGINE.WEIGHT_SYNCING (keep_claims_across_sync; off by default, as AgentJet expects) and how long relayed calls wait for a sync.", SyncConfig, (s, who) =>
    s.syncConfig(who),
  ),
  post("/sync/config", "configure_sync", "Set keep_claims_across_sync, sync_hold_seconds and max_sync_seconds; turning keep_claims_across_sync over is refused 409 while a weight sync is under way.", UpdateSyncConfigRequest, SyncConfig, (s, who, b) =>
    s.configureSync(who, b),
  ),
  get("/ledger/config", "get_ledger_config", "What the gateway records of each relayed call (capture) and for how many days.", LedgerConfig, (s, who) => s.ledgerConfig(who)),
  post("/ledger/config", "configure_ledger", "Set capture (off, messages, tokens) and retention_days.", UpdateLedgerConfigRequest, LedgerConfig, (s, who, b) => s.configureLedger(who, b)),

  // The local-agent's channel
  {
    ...getQuery(
      "/agent/commands",
      "agent_poll",
      "Long-poll for due commands (wait up to 25 s); each is leased until acked or its deadline passes.",
      PollCommandsQuery,
      PollCommandsResponse,
      (s, who, q) => s.agentPoll(who, q),
    ),
    changesState: true,
  },
  post("/agent/ack", "agent_ack", "Acknowledge a command by its sequence number, with its outcome.", AckCommandRequest, AckCommandResponse, (s, who, b) => s.agentAck(who, b)),
  post("/agent/heartbeat", "agent_heartbeat", "The agent is alive: its host and its trainer's state.", AgentHeartbeatRequest, HeartbeatResponse, (s, who, b) =>
    s.agentHeartbeat(who, b),
  ),
  get("/agent/gateway_secret", "agent_gateway_secret", "The secret the agent's inference gateway checks the Worker's relay signatures with.", GatewaySecretResponse, (s, who) =>
    s.gatewaySecret(who),
  ),
  post("/agent/trainer_exit", "agent_trainer_exit", "The trainer exited on its own: the engine goes OFFLINE with the reason.", TrainerExitRequest, Success, (s, who, b) =>
    s.trainerExit(who, b),
  ),
  post("/batch/is_episode_claimed", "is_episode_claimed", "Many is_episode_claimed checks in one request, answered in order.", BatchIsEpisodeClaimedRequest, BatchBoolResponse, (s, who, b) =>
    s.batchIsEpisodeClaimed(who, b.checks),
  ),
  {
    ...post("/batch/register_episode", "register_episode", "Many registrations in one request, answered in order.", BatchRegisterEpisodeRequest, BatchBoolResponse, (s, who, b) =>
      s.batchRegisterEpisodes(who, b.episodes),
    ),
    unavailable: [STORAGE_FULL],
  },
];
