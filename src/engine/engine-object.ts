/**
 * One Durable Object per engine: the single writer for its episodes, leases, commands and
 * reward accumulator. Every state change is synchronous and atomic (one SQLite transaction, or
 * one turn of workerd's implicit transaction: see inTurn), so concurrent requests cannot race;
 * the hot writes (register, claim, end) that arrive together share that turn and its commit
 * (shared-turn.ts); one alarm, always set no later than the earliest deadline, reaps.
 */
import { DurableObject } from "cloudflare:workers";
import type { Env } from "../env";
import type { Role } from "../protocol/admin";
import type {
  AbortEpisodeRequest,
  ClaimEpisodeRequest,
  ClaimEpisodeResponse,
  CurrentBatchRolloutPoolInformation,
  EndEpisodeRequest,
  EngineStatusResponse,
  EpisodeBufferResponse,
  BoolResponse,
  RegisterEpisodeRequest,
  RewardHistoryResponse,
  UpdateEngineStatusRequest,
} from "../protocol/swarm";
import { CurrentBatchRolloutPoolInformation as PoolInfoSchema } from "../protocol/swarm";
import type { AckCommandRequest, AckCommandResponse, CommandBody, PollCommandsQuery, PollCommandsResponse } from "../protocol/commands";
import {
  AGENT_STALE_AFTER_SECONDS,
  type AgentHeartbeatRequest,
  type AgentStatus,
  type BatchBoolResponse,
  type EngineOverview,
  type RunningEpisodesQuery,
  type RunningEpisodesResponse,
  type CompletedTasksResponse,
  type TrainerExitRequest,
} from "../protocol/agent";
import { isRolling, type EngineStatus } from "../protocol/status";
import { mayRun, seesTrainerSecrets, type EngineOp } from "../auth/roles";
import { newIncarnation, signClaimKey, type ClaimKeyFields } from "../auth/claim-key";
import { gatewaySecret } from "../auth/gateway-signature";
import type { Caller, CallerRole } from "./caller";
import { fail, ok, type Failure, type Reply } from "./reply";
import { migrateEngine } from "./schema";
import { storedJsonTooLarge, storedStringTooLarge } from "../protocol/limits";
import { CommandQueue } from "./command-queue";
import { CommandOutcomes, type ScanRecord } from "./command-outcomes";
import { Outbox, type OutboxItem } from "./outbox";
import { RolloutBuffer } from "./rollout-buffer";
import { SharedTurn } from "./shared-turn";
import { ACTIVITY_FLUSH_MS, RelayActivity } from "./relay-activity";
import { completedTaskClients, completedTasks, decodeCursor, episodeBuffer, rewardHistory, runningDetails, runningPage, type EpisodeRow } from "./episode-views";
import type { BufferConfig, GetRolloutDataRequest, GetRolloutDataResponse, PostStepsResponse, StartRolloutRequest, StepRow } from "../protocol/buffer";
import {
  EMPTY_ACCUMULATOR,
  NO_EPISODES_CAUSE,
  accumulate,
  notReadyCause,
  rewardValues,
  scalarReward,
  summarize,
  type RewardAccumulator,
} from "./rules";

/** Small, hot engine state, kept in memory and written through to the kv table. */
type Meta = {
  name: string | null;
  status: EngineStatus;
  detail: string | null;
  globalStep: number | null;
  weightVersion: number | null;
  bootingStartTime: number | null;
  /**
   * The current step's rewards that are no longer in finished rows (cleared with their rolling
   * phase, or written before rows kept them); the rest are the rows of epoch accEpoch (liveAcc).
   */
  acc: RewardAccumulator;
  /** Which finished rows count toward the current step: those written with this epoch. */
  accEpoch: number;
  /** At least every fence this engine has issued; kept for when the rows that held them are gone. */
  fenceFloor: number;
  /** Told apart from an engine of the same name deleted before it ("" for engines made before this field): claim keys name it. */
  incarnation: string;
};

const INITIAL_META: Meta = {
  name: null,
  status: "ENGINE.OFFLINE",
  detail: null,
  globalStep: null,
  weightVersion: null,
  bootingStartTime: null,
  acc: EMPTY_ACCUMULATOR,
  accEpoch: 0,
  fenceFloor: 0,
  incarnation: "",
};

type AgentRecord = AgentHeartbeatRequest & { last_seen: number };

/** What ending or releasing a claim needs of its episode. */
type ClaimRow = Pick<EpisodeRow, "episode_uuid" | "fence" | "client_uuid" | "task_id" | "episode_type" | "zmq_addr">;
const CLAIM_ROW_COLUMNS = "episode_uuid, fence, client_uuid, task_id, episode_type, zmq_addr";

/**
 * How long outbox rows wait so that one D1 flush carries many of them. Results are durable in
 * the engine before anyone is answered; only their copy in D1 waits this long.
 */
const OUTBOX_BATCH_MS = 1000;
/** A reaping alarm handles at most this many leases per run, then re-arms at once. */
const REAP_BATCH = 500;

export class EngineObject extends DurableObject<Env> {
  /** The engine's clock in ms. Tests replace it to move time without sleeping. */
  now: () => number = () => Date.now();

  private readonly sql: SqlStorage;
  private readonly commands: CommandQueue;
  /** The agent's refusals and the last scan's state (command-outcomes.ts). */
  private readonly outcomes: CommandOutcomes;
  private readonly outbox: Outbox;
  private readonly buffer: RolloutBuffer;
  private meta: Meta;
  private tokens = new Map<string, Role>();
  /** When the alarm is set for, as far as this instance knows; undefined until read. */
  private armedAt: number | null = null;
  private pollWaiters = new Set<() => void>();
  /**
   * The next FIFO position. Kept in memory, not written on every registration: only registered
   * episodes hold a position, so on start-up one probe of their index gives a safe next value.
   */
  private nextQueueSeq: number;
  /** The highest fence this engine has issued: where a newly registered episode's fences start. */
  private fenceHigh: number;
  /** The agent session whose polls are served; older sessions' open polls give up (in memory only). */
  private pollSession: string | null = null;
  /** The earliest outbox deadline added inside the running transaction; armed once it commits. */
  private armAfterCommit: number | null = null;
  /** The outbox flush under way, if any. */
  private flushRun: Promise<unknown> | null = null;
  /** Set by destroy(): the engine is deleted, and everything answers 404 until this instance is gone. */
  private closed = false;
  /** LLM calls admitted but not yet written (relay-activity.ts), and the timer that writes them. */
  private readonly activity = new RelayActivity();
  /** Where the hot writes wait to share a commit (shared-turn.ts). */
  private readonly sharedTurn = new SharedTurn();
  private activityTimer: ReturnType<typeof setTimeout> | null = null;
  /** The agent's heartbeat record; undefined until read. */
  private agentMemo: AgentRecord | null | undefined = undefined;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    // One transaction: a migration that fails half-way (one rebuilds tables) leaves nothing behind.
    ctx.storage.transactionSync(() => migrateEngine(this.sql));
    this.commands = new CommandQueue(this.sql);
    this.outcomes = new CommandOutcomes({ get: (k) => this.getKv(k), set: (k, v) => this.setKv(k, v) });
    this.outbox = new Outbox(this.sql);
    this.buffer = new RolloutBuffer(this.sql, {
      engine: () => this.meta.name ?? "",
      now: () => this.now(),
      getKv: (k) => this.getKv(k),
      setKv: (k, v) => this.setKv(k, v),
      outbox: (item) => this.addOutbox(item),
      enqueue: (body) => this.enqueue(body),
    });
    this.meta = this.loadMeta();
    this.nextQueueSeq =
      (this.sql.exec<{ m: number | null }>("SELECT MAX(queue_seq) AS m FROM episodes WHERE state = 'registered'").one().m ?? 0) + 1;
    const maxFence = (table: string): number => this.sql.exec<{ m: number | null }>(`SELECT MAX(fence) AS m FROM ${table}`).one().m ?? 0;
    this.fenceHigh = Math.max(this.meta.fenceFloor, maxFence("episodes"), maxFence("finished"));
    for (const r of this.sql.exec<{ hash: string; role: Role }>("SELECT hash, role FROM tokens")) this.tokens.set(r.hash, r.role);
    void ctx.blockConcurrencyWhile(async () => {
      this.armedAt = await ctx.storage.getAlarm();
    });
  }

  // ---------------------------------------------------------------- provisioning (admin only)

  /** Makes this object the engine `name` and adds token hashes. Idempotent. */
  provision(name: string, tokens: { id: string; hash: string; role: Role }[]): void {
    // A deleted engine's instance still remembers it in memory (destroy): it is reset instead,
    // which fails this call, and the admin route provisions the fresh instance.
    if (this.closed) {
      this.ctx.abort("the engine was deleted; its name is being used again");
      throw new Error("engine instance reset");
    }
    this.tx(() => {
      if (this.meta.name === null) this.saveMeta({ ...this.meta, name, incarnation: newIncarnation() });
      for (const t of tokens) this.sql.exec("INSERT OR REPLACE INTO tokens (hash, id, role) VALUES (?, ?, ?)", t.hash, t.id, t.role);
    });
    for (const t of tokens) this.tokens.set(t.hash, t.role);
  }

  revokeToken(hash: string): void {
    this.sql.exec("DELETE FROM tokens WHERE hash = ?", hash);
    this.tokens.delete(hash);
  }

  /**
   * Deletes all the engine holds, for DELETE /admin/engines/<name>: refused while its agent is
   * connected, unless forced. From then on every request answers 404, open agent polls
   * included. A flush under way is waited for, so that no D1 row of the engine is written
   * after this returns; with `keepHistory` the whole outbox is written to D1 first. This instance
   * then stays closed, since its memory still holds the deleted engine: the next provision()
   * resets it. Repeatable: deleting a deleted (or never made) engine changes nothing.
   */
  async destroy(opts: { force: boolean; keepHistory: boolean }): Promise<Reply<{ outbox_written: number }>> {
    if (!this.closed && !opts.force) {
      const agent = this.agentStatus();
      if (agent.connected) {
        const ago = Math.round(this.now() / 1000 - (agent.last_seen ?? 0));
        return fail(409, "agent_connected", `The engine's agent (${agent.host ?? "unknown host"}) sent a heartbeat ${ago} s ago: stop it first, or delete with ?force=true.`);
      }
    }
    const wasClosed = this.closed;
    this.closed = true;
    this.wakeAllPollers();
    await this.flushRun;
    let written = 0;
    if (opts.keepHistory) {
      const r = await this.outbox.drain(this.env.DB, this.now());
      written = r.written;
      if (r.error !== null) {
        this.closed = wasClosed;
        return fail(503, "history_not_written", `The engine's last results could not be written to D1 (${r.error}); nothing was deleted. Try again, or delete without keep_history.`);
      }
    }
    await this.ctx.storage.deleteAlarm();
    await this.ctx.storage.deleteAll();
    this.armedAt = null;
    // Timers and requests of this instance still under way find empty tables, not missing ones.
    this.ctx.storage.transactionSync(() => migrateEngine(this.sql));
    return ok({ outbox_written: written });
  }

  // ---------------------------------------------------------------- engine status

  async getEngineStatus(caller: Caller): Promise<Reply<EngineStatusResponse>> {
    return this.guarded(caller, "get_engine_status", () => ok(this.statusView()));
  }

  async syncTrainConfig(caller: Caller, yaml: string): Promise<Reply<{ success: true }>> {
    return this.guarded(caller, "sync_train_config", () => {
      if (this.meta.status !== "ENGINE.OFFLINE") {
        return fail(400, "engine_started", "Engine is already started. Call `stop_engine` first before syncing new training configuration.");
      }
      // Kept as a JSON string in kv, and so in the start command it goes out in.
      const tooLarge = storedStringTooLarge("yaml_as_string", yaml);
      if (tooLarge !== null) return fail(413, "payload_too_large", tooLarge);
      this.setKv("train_config_yaml", yaml);
      return ok({ success: true as const });
    });
  }

  async startEngine(caller: Caller): Promise<Reply<{ success: true }>> {
    return this.guarded(caller, "start_engine", () => {
      const yaml = this.getKv<string>("train_config_yaml");
      if (yaml === null) return fail(400, "no_config", "No training config found. Call /sync_train_config first.");
      if (this.meta.status !== "ENGINE.OFFLINE") {
        return fail(409, "engine_started", `Engine is already started (status ${this.meta.status}). Call /stop_engine first.`);
      }
      this.tx(() => {
        this.clearEpisodes();
        this.saveMeta({ ...this.meta, status: "ENGINE.BOOTING", bootingStartTime: this.now() / 1000, detail: null });
        this.enqueue({ kind: "start", yaml_as_string: yaml });
      });
      this.afterEnqueue();
      return ok({ success: true as const });
    });
  }

  async stopEngine(caller: Caller): Promise<Reply<{ success: true }>> {
    return this.guarded(caller, "stop_engine", () => {
      this.tx(() => {
        this.clearEpisodes();
        this.saveMeta({ ...this.meta, status: "ENGINE.OFFLINE", bootingStartTime: null });
        this.enqueue({ kind: "stop", reason: "stop_engine requested" });
      });
      this.afterEnqueue();
      return ok({ success: true as const });
    });
  }

  async updateEngineStatus(caller: Caller, req: UpdateEngineStatusRequest): Promise<Reply<BoolResponse>> {
    return this.guarded(caller, "update_engine_status", () => {
      this.tx(() => {
        const prev = this.meta;
        if (isRolling(prev.status) && !isRolling(req.engine_status)) this.clearEpisodes();
        // From this.meta, not prev: clearing may have moved the fence floor.
        const next: Meta = { ...this.meta, status: req.engine_status };
        if (req.engine_status === "ENGINE.BOOTING" && prev.status !== "ENGINE.BOOTING") next.bootingStartTime = this.now() / 1000;
        if (prev.status === "ENGINE.BOOTING" && req.engine_status !== "ENGINE.BOOTING") next.bootingStartTime = null;
        if (req.global_step !== undefined && req.global_step !== null) {
          if (prev.globalStep !== null && prev.globalStep !== req.global_step) {
            this.finalizeStep(prev.globalStep);
            next.acc = EMPTY_ACCUMULATOR;
            next.accEpoch = this.meta.accEpoch + 1;
          }
          next.globalStep = req.global_step;
        }
        if (req.engine_status_detail !== undefined && req.engine_status_detail !== null) next.detail = req.engine_status_detail;
        if (req.weight_version !== undefined && req.weight_version !== null) next.weightVersion = req.weight_version;
        this.saveMeta(next);
      });
      return ok({ success: true, failure_reason: "" });
    });
  }

  // ---------------------------------------------------------------- episodes: trainer side

  async registerEpisode(caller: Caller, req: RegisterEpisodeRequest): Promise<Reply<BoolResponse>> {
    // One statement: atomic without an explicit transaction.
    return this.guardedInSharedTurn(caller, "register_episode", () => ok(this.registerOne(req)));
  }

  async batchRegisterEpisodes(caller: Caller, episodes: RegisterEpisodeRequest[]): Promise<Reply<BatchBoolResponse>> {
    return this.guarded(caller, "register_episode", () => ok({ results: this.tx(() => episodes.map((e) => this.registerOne(e))) }));
  }

  async isEpisodeClaimed(caller: Caller, episodeUuid: string, unregister: boolean): Promise<Reply<BoolResponse>> {
    return this.guarded(caller, "is_episode_claimed", () => ok(this.tx(() => this.claimedCheck(episodeUuid, unregister))));
  }

  async batchIsEpisodeClaimed(caller: Caller, checks: { episode_uuid: string; unregister_if_not_claimed: boolean }[]): Promise<Reply<BatchBoolResponse>> {
    return this.guarded(caller, "is_episode_claimed", () =>
      ok({ results: this.tx(() => checks.map((c) => this.claimedCheck(c.episode_uuid, c.unregister_if_not_claimed))) }),
    );
  }

  async updatePoolInfo(caller: Caller, info: CurrentBatchRolloutPoolInformation): Promise<Reply<BoolResponse>> {
    return this.guarded(caller, "update_current_batch_rollout_pool_information", () => {
      // The engine computes these itself; what the trainer sends for them is ignored.
      const stored = { ...info, running_episode_details: null, engine_status: null, global_step: null, completed_tasks_client_uuids: {} };
      const tooLarge = storedJsonTooLarge("the pool information", stored);
      if (tooLarge !== null) return fail(413, "payload_too_large", tooLarge);
      this.setKv("pool_info", stored);
      return ok({ success: true, failure_reason: "" });
    });
  }

  // ---------------------------------------------------------------- episodes: client side

  async claimEpisode(caller: Caller, req: ClaimEpisodeRequest, origin: string): Promise<Reply<ClaimEpisodeResponse>> {
    return this.guardedInSharedTurn(caller, "claim_episode", async () => {
      const refuse = (fail_cause: string): Reply<ClaimEpisodeResponse> =>
        ok({ success: false, client_uuid: req.client_uuid, episode_uuid: "", openai_base_url: "", openai_api_key: "", fail_cause });
      if (this.meta.status !== "ENGINE.ROLLING") return refuse(notReadyCause(this.meta.status));
      // Checked before anything is claimed, so a misconfigured deployment leaks no claims.
      if (!this.env.CLAIM_KEY_SECRET) return fail(500, "misconfigured", "CLAIM_KEY_SECRET is not configured: per-claim keys cannot be signed.");
      const now = this.now();
      const expiresAt = now + Math.ceil(req.discard_episode_timeout * 1000);
      // The FIFO head, claimed in one statement: atomic by itself, so it needs no explicit
      // transaction (transactionSync costs about as much as the statement here).
      const claimed =
        this.sql
          .exec<{ episode_uuid: string; fence: number }>(
            `UPDATE episodes SET state = 'claimed', queue_seq = NULL, episode_type = ?, client_uuid = ?, fence = fence + 1,
               last_activity = ?, discard_timeout = ?, expires_at = ?, llm_call_count = 0, task_id = ?
             WHERE episode_uuid = (SELECT episode_uuid FROM episodes WHERE state = 'registered' ORDER BY queue_seq LIMIT 1)
             RETURNING episode_uuid, fence`,
            req.episode_type,
            req.client_uuid,
            now,
            req.discard_episode_timeout,
            expiresAt,
            req.throttle_policy?.current_task_id ?? "",
          )
          .toArray()[0] ?? null;
      if (claimed === null) return refuse(NO_EPISODES_CAUSE);
      if (claimed.fence > this.fenceHigh) this.fenceHigh = claimed.fence;
      this.armBy(expiresAt);
      const key = await signClaimKey(this.env.CLAIM_KEY_SECRET, { engine: this.meta.name ?? "", incarnation: this.meta.incarnation, ...claimed });
      return ok({
        success: true,
        client_uuid: req.client_uuid,
        episode_uuid: claimed.episode_uuid,
        openai_base_url: `${origin}/v1`,
        openai_api_key: key,
        fail_cause: "",
        fence: claimed.fence,
      });
    });
  }

  async endEpisode(caller: Caller, req: EndEpisodeRequest): Promise<Reply<{ success: boolean }>> {
    return this.guardedInSharedTurn(caller, "end_episode", () => {
      const status = this.meta.status;
      if (!isRolling(status)) {
        return fail(400, "engine_not_rolling", `Engine is not in rolling state. Current status: [${status}]. Cannot end episode.`);
      }
      const metaTask = req.workflow_output.metadata["task_id"];
      if (metaTask === undefined) return fail(422, "invalid_request", "workflow_output.metadata must contain task_id");
      if (metaTask !== req.task_id) {
        return fail(422, "invalid_request", `workflow_output.metadata.task_id (${JSON.stringify(metaTask)}) must equal task_id (${JSON.stringify(req.task_id)})`);
      }
      const now = this.now();
      const payload = JSON.stringify(req.workflow_output);
      // The trajectory's outbox record and the runner's deliver command hold it escaped inside their JSON.
      const tooLarge = storedStringTooLarge("workflow_output", payload);
      if (tooLarge !== null) return fail(413, "payload_too_large", tooLarge);
      const done = this.inTurn((): Reply<{ success: boolean }> => {
        // A train episode ended by its live claim is taken (deleted) in one statement. Anything
        // else is judged by ownedClaim, which says what went wrong; the only claim it accepts
        // that was not taken is an eval one, which is released below, not deleted.
        let ep = this.takeTrainClaim(req);
        if (ep === null) {
          const owned = this.ownedClaim(req);
          if (!owned.ok) return owned;
          if (owned.body === "already_ended") return ok({ success: true });
          ep = owned.body;
        }
        const taskId = ep.task_id || req.task_id;
        const deliver = ep.episode_type === "train" && ep.zmq_addr !== "";
        const reward = req.workflow_output.reward;
        const counted = ep.episode_type === "train" && rewardValues(reward).length > 0;
        this.sql.exec(
          `INSERT INTO finished (episode_uuid, fence, client_uuid, task_id, episode_type, ended_at, delivery, global_step, reward, acc_epoch, reward_values)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
          ep.episode_uuid,
          ep.fence,
          ep.client_uuid,
          taskId,
          ep.episode_type,
          now,
          deliver ? "pending" : "none",
          this.meta.globalStep,
          scalarReward(reward),
          counted ? this.meta.accEpoch : null,
          Array.isArray(reward) ? JSON.stringify(reward) : null,
        );
        this.addOutbox({
          kind: "trajectory",
          row: {
            engine: this.meta.name ?? "",
            episodeUuid: ep.episode_uuid,
            fence: ep.fence,
            clientUuid: ep.client_uuid,
            taskId,
            episodeType: ep.episode_type,
            globalStep: this.meta.globalStep,
            reward: scalarReward(req.workflow_output.reward),
            isSuccess: req.workflow_output.is_success,
            workflowOutput: payload,
            endedAt: now,
          },
        });
        if (ep.episode_type === "train") {
          if (taskId !== "" && this.buffer.active()) this.joinBuffer(ep, taskId, req.workflow_output);
          if (deliver) {
            this.enqueue({ kind: "deliver", episode_uuid: ep.episode_uuid, fence: ep.fence, zmq_listen_result_addr: ep.zmq_addr, payload });
          }
        } else {
          // Evaluation results go to D1 only; the runner is reset and the episode serves again (as the seed does).
          this.releaseClaim(ep, status === "ENGINE.ROLLING" ? "requeue" : "delete");
        }
        return ok({ success: true });
      });
      if (done.ok) this.afterEnqueue();
      return done;
    });
  }

  async abortEpisode(caller: Caller, req: AbortEpisodeRequest): Promise<Reply<{ success: boolean }>> {
    return this.guarded(caller, "abort_episode", () => {
      const status = this.meta.status;
      if (!isRolling(status)) return ok({ success: true });
      if (this.episode(req.episode_uuid) === null) return ok({ success: true });
      const owned = this.ownedClaim(req);
      if (!owned.ok) return owned;
      if (owned.body === "already_ended") return ok({ success: true });
      const ep = owned.body;
      this.tx(() => this.releaseClaim(ep, status === "ENGINE.ROLLING" ? "requeue" : "delete"));
      this.afterEnqueue();
      return ok({ success: true });
    });
  }

  async canContinueEpisode(caller: Caller, clientUuid: string, episodeUuid: string): Promise<Reply<{ can_continue: boolean }>> {
    return this.guarded(caller, "can_continue_episode", () => {
      if (!isRolling(this.meta.status)) return ok({ can_continue: false });
      const ep = this.episode(episodeUuid);
      return ok({ can_continue: ep !== null && ep.state === "claimed" && ep.client_uuid === clientUuid });
    });
  }

  // ---------------------------------------------------------------- views

  async getEpisodeBuffer(caller: Caller): Promise<Reply<EpisodeBufferResponse>> {
    return this.guarded(caller, "get_episode_buffer", (role) => {
      this.settleActivity();
      return ok({ buffer: episodeBuffer(this.sql, seesTrainerSecrets(role)) });
    });
  }

  async getPoolInfo(caller: Caller): Promise<Reply<CurrentBatchRolloutPoolInformation>> {
    return this.guarded(caller, "get_current_batch_rollout_pool_information", () => {
      this.settleActivity();
      const stored = PoolInfoSchema.parse(this.getKv<unknown>("pool_info") ?? {});
      return ok({
        ...stored,
        running_episode_details: runningDetails(this.sql, this.now()),
        completed_tasks_client_uuids: completedTaskClients(this.sql),
        engine_status: this.meta.status,
        global_step: this.meta.globalStep,
        booting_start_time: this.meta.bootingStartTime,
      });
    });
  }

  async runningEpisodes(caller: Caller, q: RunningEpisodesQuery): Promise<Reply<RunningEpisodesResponse>> {
    return this.guarded<RunningEpisodesResponse>(caller, "get_overview", () => {
      this.settleActivity();
      const after = q.cursor === undefined ? null : decodeCursor(q.cursor);
      if (q.cursor !== undefined && after === null) return fail(422, "invalid_request", "cursor: not a cursor this engine handed out");
      return ok({ ...runningPage(this.sql, this.now(), after, q.limit), total: this.episodeCounts().claimed });
    });
  }

  async completedTasks(caller: Caller): Promise<Reply<CompletedTasksResponse>> {
    return this.guarded<CompletedTasksResponse>(caller, "get_overview", () =>
      ok({ global_step: this.meta.globalStep, tasks: completedTasks(this.sql, this.meta.globalStep) }),
    );
  }

  async getRewardHistory(caller: Caller): Promise<Reply<RewardHistoryResponse>> {
    return this.guarded(caller, "get_reward_history", () => ok({ history: rewardHistory(this.sql) }));
  }

  // ---------------------------------------------------------------- agent command channel

  async agentPoll(caller: Caller, q: PollCommandsQuery): Promise<Reply<PollCommandsResponse>> {
    return this.guarded(caller, "agent_poll", async () => {
      const session = q.session ?? null;
      if (session !== null && session !== this.pollSession) {
        this.pollSession = session;
        this.tx(() => this.commands.releaseOthers(session, this.now()));
        // Polls of the session this one replaces return empty: their agent is gone.
        this.wakeAllPollers();
      }
      const superseded = () => session !== null && session !== this.pollSession;
      const deadline = Date.now() + q.wait * 1000;
      for (;;) {
        if (this.closed) return this.gone();
        if (superseded()) return ok({ commands: [] });
        if (this.commands.hasDue(this.now()) || Date.now() >= deadline) break;
        await new Promise<void>((resolve) => {
          const timer = setTimeout(done, Math.max(0, deadline - Date.now()));
          function done(): void {
            clearTimeout(timer);
            resolve();
          }
          this.pollWaiters.add(done);
        });
      }
      if (this.closed) return this.gone();
      if (superseded()) return ok({ commands: [] });
      const now = this.now();
      const commands = this.tx(() => this.commands.lease(now, this.commandLeaseMs(), q.limit, session));
      if (commands.length > 0) this.armBy(now + this.commandLeaseMs());
      return ok({ commands });
    });
  }

  async agentAck(caller: Caller, req: AckCommandRequest): Promise<Reply<AckCommandResponse>> {
    return this.guarded<AckCommandResponse>(caller, "agent_ack", () => {
      const cmd = this.commands.get(req.seq);
      if (cmd === null) return fail(404, "unknown_command", `No command with seq ${req.seq} on this engine.`);
      if (cmd.acked) return ok({ success: true, first_ack: false });
      this.tx(() => {
        this.commands.ack(req.seq, req.ok, req.detail, this.now());
        this.applyAck(cmd.body, req.ok, req.detail);
        this.outcomes.acked(req.seq, cmd.body, req.ok, req.detail, this.now());
      });
      this.afterEnqueue();
      return ok({ success: true, first_ack: true });
    });
  }

  async agentHeartbeat(caller: Caller, req: AgentHeartbeatRequest): Promise<Reply<{ success: true; server_time: number }>> {
    return this.guarded(caller, "agent_heartbeat", () => {
      const now = this.now();
      const record = { ...req, last_seen: now / 1000 };
      this.setKv("agent", record);
      this.agentMemo = record;
      return ok({ success: true as const, server_time: now / 1000 });
    });
  }

  async trainerExit(caller: Caller, req: TrainerExitRequest): Promise<Reply<{ success: true }>> {
    return this.guarded(caller, "agent_trainer_exit", () => {
      const how = req.signal !== null ? `was killed by ${req.signal}` : `exited with code ${req.exit_code ?? "unknown"}`;
      const detail = `trainer ${how}` + (req.log_tail ? `; last output:\n${req.log_tail}` : "");
      this.tx(() => {
        this.clearEpisodes();
        this.saveMeta({ ...this.meta, status: "ENGINE.OFFLINE", bootingStartTime: null, detail });
      });
      return ok({ success: true as const });
    });
  }

  async overview(caller: Caller): Promise<Reply<EngineOverview>> {
    return this.guarded(caller, "get_overview", () => {
      this.settleActivity();
      const deliveries = Object.fromEntries(
        this.sql.exec<{ delivery: string; n: number }>("SELECT delivery, COUNT(*) AS n FROM finished GROUP BY delivery").toArray().map((r) => [r.delivery, r.n]),
      );
      const undeliverable = this.sql
        .exec<{ episode_uuid: string; fence: number; delivery_detail: string; ended_at: number }>(
          "SELECT episode_uuid, fence, delivery_detail, ended_at FROM finished WHERE delivery = 'undeliverable' ORDER BY ended_at DESC LIMIT 20",
        )
        .toArray()
        .map((r) => ({ episode_uuid: r.episode_uuid, fence: r.fence, detail: r.delivery_detail, ended_at: r.ended_at / 1000 }));
      return ok({
        engine: this.meta.name ?? "",
        ...this.statusView(),
        episodes: this.episodeCounts(),
        deliveries: { pending: deliveries["pending"] ?? 0, delivered: deliveries["delivered"] ?? 0, undeliverable: deliveries["undeliverable"] ?? 0 },
        undeliverable,
        refusals: this.outcomes.refusals(),
        pending_commands: this.commands.pendingCount(),
        outbox: this.outbox.size(),
        agent: this.agentStatus(),
      });
    });
  }

  // ---------------------------------------------------------------- rollout buffer

  async postSteps(caller: Caller, steps: StepRow[]): Promise<Reply<PostStepsResponse>> {
    return this.guarded<PostStepsResponse>(caller, "post_steps", () => {
      const checked = this.buffer.check(steps);
      if (!checked.ok) return checked;
      const result = this.tx(() => this.buffer.ingest(checked.body));
      this.afterBufferChange();
      return ok(result);
    });
  }

  async getRolloutData(caller: Caller, req: GetRolloutDataRequest): Promise<Reply<GetRolloutDataResponse>> {
    return this.guarded<GetRolloutDataResponse>(caller, "get_rollout_data", () => {
      if (req.cursor !== undefined) return this.buffer.reread(req.cursor);
      const result = this.tx(() => this.buffer.pull(req.max_groups ? req.max_groups : null, this.meta.weightVersion));
      this.afterBufferChange();
      return ok(result);
    });
  }

  async startRollout(caller: Caller, req: StartRolloutRequest): Promise<Reply<{ success: true; message: string; job_session: string; group_size: number }>> {
    return this.guarded(caller, "start_rollout", () => {
      const jobSession = req.job_session ?? crypto.randomUUID().replace(/-/g, "");
      this.tx(() => {
        this.buffer.startRollout(req.num_repeat_per_sample, req.restart_training);
        this.enqueue({ kind: "start_rollout", group_size: req.num_repeat_per_sample, job_session: jobSession, restart_training: req.restart_training });
      });
      this.afterBufferChange();
      return ok({ success: true as const, message: "Rollout started", job_session: jobSession, group_size: req.num_repeat_per_sample });
    });
  }

  async configureBuffer(caller: Caller, patch: Partial<BufferConfig>): Promise<Reply<BufferConfig>> {
    return this.guarded(caller, "configure_buffer", () => {
      const config = this.tx(() => this.buffer.configure(patch));
      this.afterBufferChange();
      return ok(config);
    });
  }

  async health(caller: Caller) {
    return this.guarded(caller, "get_overview", () => {
      const agent = this.agentStatus();
      return ok({
        status: "healthy" as const,
        engine_status: this.meta.status,
        buffer: { ...this.buffer.stats(), config: this.buffer.config() },
        agent: { connected: agent.connected, host: agent.host, last_seen: agent.last_seen },
      });
    });
  }

  // ---------------------------------------------------------------- for Worker-side features

  /**
   * Checks a caller for an operation without doing it, for features whose state lives in D1
   * rather than here (training runs): one hop to the engine, which holds the token hashes.
   */
  async authorizeOp(caller: Caller, op: EngineOp): Promise<Reply<{ role: CallerRole; engine: string }>> {
    return this.guarded(caller, op, (role) => ok({ role, engine: this.meta.name ?? "" }));
  }

  /** Queues a command for the agent on behalf of a Worker-side feature, after checking the caller. */
  async enqueueFor(caller: Caller, op: EngineOp, body: CommandBody): Promise<Reply<{ seq: number }>> {
    return this.guarded(caller, op, () => {
      const seq = this.tx(() => {
        const seq = this.commands.enqueue(body, this.now());
        this.outcomes.queued(seq, body);
        return seq;
      });
      this.afterEnqueue();
      return ok({ seq });
    });
  }

  /** What the training-run catalog says about itself: is an agent there, can it run them, and the last scan. */
  async catalogState(caller: Caller): Promise<Reply<{ agent: AgentStatus; scan: ScanRecord | null; now: number }>> {
    return this.guarded(caller, "list_environments", () => ok({ agent: this.agentStatus(), scan: this.outcomes.lastScan(), now: this.now() / 1000 }));
  }

  /** The agent reported a catalog (to D1, through the Worker): an earlier failed scan is no longer the news. */
  async catalogReported(caller: Caller): Promise<Reply<{ success: true }>> {
    return this.guarded(caller, "agent_report_catalog", () => {
      this.outcomes.catalogReported();
      return ok({ success: true as const });
    });
  }

  // ---------------------------------------------------------------- LLM relay

  /**
   * Admits one LLM call of a claim whose key the Worker has verified: the claim must still be
   * live. Counts the call and refreshes the lease, since a client talking to the model is not idle.
   */
  async relayBegin(key: ClaimKeyFields): Promise<Reply<{ gateway_url: string; trainer_api_key: string; trainer_base_url: string }>> {
    if (this.closed || this.meta.name === null || this.meta.name !== key.engine) return this.gone();
    if (this.meta.incarnation !== key.incarnation) {
      return fail(401, "claim_not_live", "This key's claim is no longer live: it was made by an engine of this name that has been deleted.");
    }
    if (!isRolling(this.meta.status)) {
      return fail(503, "engine_not_rolling", `The engine is ${this.meta.status}: LLM calls are served only while ENGINE.ROLLING or ENGINE.ROLLING_POST.`);
    }
    const ep = this.episode(key.episode_uuid);
    if (ep === null || ep.state !== "claimed" || ep.fence !== key.fence) {
      return fail(401, "claim_not_live", "This key's claim is no longer live: its episode was ended, aborted, reaped or claimed again.");
    }
    const gateway = this.agentRecord()?.gateway_url ?? null;
    if (gateway === null) {
      return fail(503, "no_gateway", "No inference gateway is registered for this engine: is the local-agent running with its gateway on?");
    }
    const now = this.now();
    this.activity.note(ep.episode_uuid, ep.fence, now, now + Math.ceil(ep.discard_timeout * 1000));
    this.activityTimer ??= setTimeout(() => {
      this.activityTimer = null;
      try {
        this.settleActivity();
      } catch (e) {
        // Kept in the tally (settleActivity puts it back); the next read or alarm writes it.
        console.error("engine: writing LLM call activity failed", e);
      }
    }, ACTIVITY_FLUSH_MS);
    return ok({ gateway_url: gateway, trainer_api_key: ep.openai_api_key, trainer_base_url: ep.openai_base_url });
  }

  /** Writes the LLM calls admitted since the last write: counts, activity and lease, per live claim. */
  private settleActivity(): void {
    if (this.activity.size === 0) return;
    const items = this.activity.take();
    try {
      this.tx(() => {
        for (const a of items) {
          // A claim that ended or was superseded meanwhile keeps nothing of it.
          this.sql.exec(
            `UPDATE episodes SET llm_call_count = llm_call_count + ?, last_activity = MAX(last_activity, ?), expires_at = MAX(expires_at, ?)
             WHERE episode_uuid = ? AND fence = ? AND state = 'claimed'`,
            a.calls,
            a.at,
            a.expiresAt,
            a.episodeUuid,
            a.fence,
          );
        }
      });
    } catch (e) {
      this.activity.restore(items);
      throw e;
    }
  }

  async gatewaySecret(caller: Caller): Promise<Reply<{ secret: string }>> {
    return this.guarded(caller, "agent_gateway_secret", async () => ok({ secret: await gatewaySecret(this.env.CLAIM_KEY_SECRET, this.meta.name ?? "") }));
  }

  // ---------------------------------------------------------------- alarm

  override async alarm(): Promise<void> {
    if (this.closed) return;
    this.armedAt = null;
    const now = this.now();
    // Leases that LLM calls extended are written before any is judged expired.
    this.settleActivity();
    this.tx(() => {
      const expired = this.sql
        .exec<EpisodeRow>("SELECT * FROM episodes WHERE state = 'claimed' AND expires_at <= ? ORDER BY expires_at LIMIT ?", now, REAP_BATCH)
        .toArray();
      for (const ep of expired) this.releaseClaim(ep, "requeue");
      this.buffer.dropExpired(now);
      this.buffer.forgetSessions(now);
    });
    this.wakePollers();
    await this.flushOutbox(now);
    this.rearm(now);
  }

  /** Diagnostics for tests: sizes of the engine's queues and when its alarm is set. */
  async stats(): Promise<{ registered: number; claimed: number; resetting: number; pending_commands: number; outbox: number; alarm_at: number | null }> {
    this.settleActivity();
    return { ...this.episodeCounts(), pending_commands: this.commands.pendingCount(), outbox: this.outbox.size(), alarm_at: await this.ctx.storage.getAlarm() };
  }

  // ---------------------------------------------------------------- internals

  private async guarded<T>(caller: Caller, op: EngineOp, run: (role: CallerRole) => Reply<T> | Promise<Reply<T>>): Promise<Reply<T>> {
    const role = this.authorize(caller, op);
    if (typeof role !== "string") return role;
    return run(role);
  }

  /**
   * guarded, run in the next shared turn (shared-turn.ts): for the hot writes (register, claim,
   * end), so that all of them that arrive together share one commit. Authorized in that turn,
   * as the write is.
   */
  private async guardedInSharedTurn<T>(caller: Caller, op: EngineOp, run: (role: CallerRole) => Reply<T> | Promise<Reply<T>>): Promise<Reply<T>> {
    await this.sharedTurn.next();
    return this.guarded(caller, op, run);
  }

  private authorize(caller: Caller, op: EngineOp): CallerRole | Failure {
    if (this.meta.name === null || this.closed) return this.gone();
    if (caller.admin) return "admin";
    const role = this.tokens.get(caller.tokenHash);
    if (role === undefined) return fail(401, "invalid_token", `The token is not valid for engine '${this.meta.name}' (unknown or revoked).`);
    if (!mayRun(role, op)) return fail(403, "forbidden", `A ${role} token may not call ${op}.`);
    return role;
  }

  private gone(): Failure {
    return fail(404, "unknown_engine", "No such engine.");
  }

  private registerOne(req: RegisterEpisodeRequest): BoolResponse {
    if (this.meta.status !== "ENGINE.ROLLING") {
      return { success: false, failure_reason: "Engine is not in rolling state. Cannot register episode." };
    }
    // One statement. A retried registration (the trainer retries after 2 s) keeps its place in
    // the queue and takes the new URL and key; a claimed or resetting episode is left alone. A
    // new row's fences start above every fence this engine has issued, so a uuid registered
    // again (after it ended, was unregistered, or was cleared with its rolling phase) never
    // has a claim that shares a fence, and so a per-claim key, with a claim of its old life.
    this.sql.exec(
      `INSERT INTO episodes (episode_uuid, state, queue_seq, openai_base_url, openai_api_key, zmq_addr, last_activity, fence)
       VALUES (?, 'registered', ?, ?, ?, ?, ?, ?)
       ON CONFLICT (episode_uuid) DO UPDATE SET openai_base_url = excluded.openai_base_url, openai_api_key = excluded.openai_api_key,
         zmq_addr = excluded.zmq_addr
       WHERE episodes.state = 'registered'`,
      req.episode_uuid,
      this.takeQueueSeq(),
      req.openai_base_url,
      req.openai_api_key,
      req.zmq_listen_result_addr,
      this.now(),
      this.fenceHigh,
    );
    return { success: true, failure_reason: "" };
  }

  private claimedCheck(episodeUuid: string, unregister: boolean): BoolResponse {
    if (!isRolling(this.meta.status)) return { success: false, failure_reason: "" };
    const ep = this.episode(episodeUuid);
    if (ep === null) return { success: false, failure_reason: "" };
    // An episode waiting for its runner's reset still belongs to the claim being undone.
    if (ep.state !== "registered") return { success: true, failure_reason: "" };
    if (unregister) this.dropEpisode(episodeUuid);
    return { success: false, failure_reason: "" };
  }

  /**
   * Deletes and returns the episode if `req` is the live claim of a train episode; else changes
   * nothing. Only the columns an end reads come back: workerd builds each returned row property
   * by property, and `RETURNING *` (14 columns) cost several percent of an end's instructions
   * (`npm run bench:instr`, BENCHMARKS.md).
   */
  private takeTrainClaim(req: { client_uuid: string; episode_uuid: string; fence?: number | undefined }): ClaimRow | null {
    const fence = req.fence ?? null;
    return (
      this.sql
        .exec<ClaimRow>(
          `DELETE FROM episodes WHERE episode_uuid = ? AND state = 'claimed' AND client_uuid = ? AND episode_type = 'train' AND (?3 IS NULL OR fence = ?3)
           RETURNING ${CLAIM_ROW_COLUMNS}`,
          req.episode_uuid,
          req.client_uuid,
          fence,
        )
        .toArray()[0] ?? null
    );
  }

  /** Checks that `req` comes from the live claim of its episode, or repeats a claim that already ended. */
  private ownedClaim(req: { client_uuid: string; episode_uuid: string; fence?: number | undefined }): Reply<EpisodeRow | "already_ended"> {
    const ep = this.episode(req.episode_uuid);
    if (ep !== null && ep.state === "claimed" && ep.client_uuid === req.client_uuid && (req.fence === undefined || req.fence === ep.fence)) {
      return ok(ep);
    }
    const ended = this.sql
      .exec<{ fence: number }>(
        "SELECT fence FROM finished WHERE episode_uuid = ? AND client_uuid = ? AND (?3 IS NULL OR fence = ?3) LIMIT 1",
        req.episode_uuid,
        req.client_uuid,
        req.fence ?? null,
      )
      .toArray()[0];
    if (ended) return ok("already_ended");
    if (ep === null) return fail(404, "unknown_episode", `Episode ${req.episode_uuid} not found.`);
    if (ep.state !== "claimed") {
      return fail(
        409,
        "claim_lost",
        `Episode ${req.episode_uuid} is not in claimed status, maybe you take **too long** to submit the workflow output, try increase \`discard_episode_timeout\` when \`begin_episode\`. Its claim was reaped or aborted; this result is not counted.`,
      );
    }
    if (ep.client_uuid !== req.client_uuid) {
      return fail(409, "claim_lost", `Episode ${req.episode_uuid} is claimed by a different client; this result is not counted.`);
    }
    return fail(409, "claim_lost", `Episode ${req.episode_uuid}: fence ${req.fence} belongs to a superseded claim (current fence ${ep.fence}); this result is not counted.`);
  }

  /** Ends a claim without a result: back to the queue (after the runner's reset, if it has one) or gone. */
  private releaseClaim(ep: ClaimRow, how: "requeue" | "delete"): void {
    if (how === "delete") {
      this.dropEpisode(ep.episode_uuid);
    } else if (ep.zmq_addr !== "") {
      this.sql.exec(
        "UPDATE episodes SET state = 'resetting', expires_at = NULL WHERE episode_uuid = ?",
        ep.episode_uuid,
      );
      this.enqueue({ kind: "reset", episode_uuid: ep.episode_uuid, fence: ep.fence, zmq_listen_result_addr: ep.zmq_addr });
    } else {
      this.requeue(ep.episode_uuid);
    }
  }

  private requeue(episodeUuid: string): void {
    this.sql.exec(
      `UPDATE episodes SET state = 'registered', queue_seq = ?, client_uuid = '', discard_timeout = -1, expires_at = NULL,
         llm_call_count = 0, last_activity = ? WHERE episode_uuid = ?`,
      this.takeQueueSeq(),
      this.now(),
      episodeUuid,
    );
  }

  private applyAck(body: CommandBody, succeeded: boolean, detail: string): void {
    switch (body.kind) {
      case "deliver":
        this.sql.exec(
          "UPDATE finished SET delivery = ?, delivery_detail = ? WHERE episode_uuid = ? AND fence = ?",
          succeeded ? "delivered" : "undeliverable",
          detail,
          body.episode_uuid,
          body.fence,
        );
        return;
      case "reset": {
        const ep = this.episode(body.episode_uuid);
        if (ep === null || ep.state !== "resetting" || ep.fence !== body.fence) return;
        // A runner that cannot be reset cannot serve the episode again.
        if (succeeded) this.requeue(body.episode_uuid);
        else this.dropEpisode(body.episode_uuid);
        return;
      }
      case "start":
        if (!succeeded && this.meta.status === "ENGINE.BOOTING") {
          this.saveMeta({ ...this.meta, status: "ENGINE.OFFLINE", bootingStartTime: null, detail: `trainer failed to start: ${detail}` });
        }
        return;
      case "stop":
        return;
    }
  }

  /** An AgentJet trajectory joins the buffer's group for its task, as one completed single-step session. */
  private joinBuffer(ep: ClaimRow, taskId: string, output: EndEpisodeRequest["workflow_output"]): void {
    const row: StepRow = {
      session_id: `${ep.episode_uuid}#${ep.fence}`,
      group_id: taskId,
      step_index: 0,
      messages: [],
      response: "",
      reward: scalarReward(output.reward) ?? 0,
      truncated: false,
      is_session_completed: true,
      weight_version: this.meta.weightVersion ?? 0,
      source: "agentjet",
      client_uuid: ep.client_uuid,
      is_success: output.is_success,
      metadata: output.metadata,
    };
    const checked = this.buffer.check([row]);
    if (checked.ok) this.buffer.ingest(checked.body);
  }

  private afterBufferChange(): void {
    this.afterEnqueue();
    this.armBy(this.buffer.nextExpiry());
  }

  /**
   * The current step's accumulator: the meta's part and the rewards of this epoch's finished
   * rows. Read when a step ends or its rows are cleared, not on every end, so ends write no
   * meta; it scans the finished rows (those of the current rolling phase), once per step.
   */
  private liveAcc(): RewardAccumulator {
    let acc = this.meta.acc;
    const rows = this.sql.exec<{ reward: number; reward_values: string | null }>(
      "SELECT reward, reward_values FROM finished WHERE acc_epoch = ? ORDER BY ended_at",
      this.meta.accEpoch,
    );
    for (const r of rows) acc = accumulate(acc, r.reward_values === null ? [r.reward] : (JSON.parse(r.reward_values) as number[]));
    return acc;
  }

  /** Writes the step's reward history entry, if it had rewards; the caller starts the next epoch. */
  private finalizeStep(step: number): void {
    const acc = this.liveAcc();
    if (acc.n === 0) return;
    const s = summarize(acc);
    const timestamp = this.now() / 1000;
    const seq = this.sql
      .exec<{ seq: number }>(
        "INSERT INTO reward_history (global_step, mean_reward, std_reward, count, min_reward, max_reward, timestamp) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING seq",
        step,
        s.mean,
        s.std,
        s.count,
        s.min,
        s.max,
        timestamp,
      )
      .one().seq;
    this.addOutbox({
      kind: "reward",
      row: { engine: this.meta.name ?? "", seq, globalStep: step, meanReward: s.mean, stdReward: s.std, count: s.count, minReward: s.min, maxReward: s.max, timestamp },
    });
  }

  /** Counted over the partial index of each state, never by scanning the table. */
  private episodeCounts(): { registered: number; claimed: number; resetting: number } {
    // Literal states, not parameters: SQLite uses a partial index only when the WHERE matches its own.
    const count = (sql: string) => this.sql.exec<{ n: number }>(sql).one().n;
    return {
      registered: count("SELECT COUNT(*) AS n FROM episodes WHERE state = 'registered'"),
      claimed: count("SELECT COUNT(*) AS n FROM episodes WHERE state = 'claimed'"),
      resetting: count("SELECT COUNT(*) AS n FROM episodes WHERE state = 'resetting'"),
    };
  }

  private agentStatus(): AgentStatus {
    const a = this.agentRecord();
    if (a === null) {
      return { connected: false, agent_id: null, host: null, pid: null, version: null, trainer_state: null, trainer_pid: null, gateway_url: null, rollout_workers: null, runs_off_reason: null, last_seen: null };
    }
    return {
      connected: this.now() / 1000 - a.last_seen < AGENT_STALE_AFTER_SECONDS,
      agent_id: a.agent_id,
      host: a.host,
      pid: a.pid,
      version: a.version,
      trainer_state: a.trainer.state,
      trainer_pid: a.trainer.pid,
      gateway_url: a.gateway_url ?? null,
      // Records written before agents reported rollout workers have no such field.
      rollout_workers: a.rollout_workers ?? null,
      runs_off_reason: a.runs_off_reason ?? null,
      last_seen: a.last_seen,
    };
  }

  /** The agent's last heartbeat, read once and then kept in step with each heartbeat (every relayed call reads it). */
  private agentRecord(): AgentRecord | null {
    if (this.agentMemo === undefined) this.agentMemo = this.getKv<AgentRecord>("agent");
    return this.agentMemo;
  }

  private clearEpisodes(): void {
    // The current step's rewards outlive their rows: folded into the meta, under a new epoch.
    this.saveMeta({ ...this.meta, acc: this.liveAcc(), accEpoch: this.meta.accEpoch + 1 });
    this.sql.exec("DELETE FROM episodes");
    this.sql.exec("DELETE FROM finished");
    this.retireFences();
  }

  /** Deletes an episode that leaves no finished row behind: its fence goes into the floor. */
  private dropEpisode(uuid: string): void {
    this.sql.exec("DELETE FROM episodes WHERE episode_uuid = ?", uuid);
    this.retireFences();
  }

  /**
   * Keeps the highest fence issued in meta once rows that held fences are deleted (rarely: a
   * status change, an unregistered or dropped episode), so that a restarted object still starts
   * new episodes above every fence it issued before.
   */
  private retireFences(): void {
    if (this.fenceHigh > this.meta.fenceFloor) this.saveMeta({ ...this.meta, fenceFloor: this.fenceHigh });
  }

  private episode(uuid: string): EpisodeRow | null {
    return this.sql.exec<EpisodeRow>("SELECT * FROM episodes WHERE episode_uuid = ?", uuid).toArray()[0] ?? null;
  }

  private statusView(): EngineStatusResponse {
    return { engine_status: this.meta.status, engine_status_detail: this.meta.detail, global_step: this.meta.globalStep };
  }

  private enqueue(body: CommandBody): void {
    this.commands.enqueue(body, this.now());
  }

  private afterEnqueue(): void {
    this.wakePollers();
  }

  private wakePollers(): void {
    if (this.pollWaiters.size === 0 || !this.commands.hasDue(this.now())) return;
    this.wakeAllPollers();
  }

  private wakeAllPollers(): void {
    const waiters = [...this.pollWaiters];
    this.pollWaiters.clear();
    for (const w of waiters) w();
  }

  private addOutbox(item: OutboxItem): void {
    const due = this.now() + OUTBOX_BATCH_MS;
    this.outbox.add(item, due);
    if (this.armAfterCommit === null || due < this.armAfterCommit) this.armAfterCommit = due;
  }

  private async flushOutbox(now: number): Promise<void> {
    if (this.flushRun !== null) return;
    try {
      await (this.flushRun = this.outbox.flush(this.env.DB, now, now + OUTBOX_BATCH_MS));
    } finally {
      this.flushRun = null;
    }
  }

  private commandLeaseMs(): number {
    const s = Number(this.env.COMMAND_LEASE_SECONDS ?? "60");
    return (Number.isFinite(s) && s > 0 ? s : 60) * 1000;
  }

  /** Makes sure the alarm fires no later than `t`. Cheap: no query, one storage call at most. */
  private armBy(t: number | null): void {
    if (t === null) return;
    if (this.armedAt === null || t < this.armedAt) {
      this.armedAt = t;
      void this.ctx.storage.setAlarm(t);
    }
  }

  /** Sets the alarm to the earliest pending deadline: lease expiry, command redelivery or outbox retry. */
  private rearm(now: number): void {
    if (this.closed) return;
    const lease = this.sql.exec<{ t: number | null }>("SELECT MIN(expires_at) AS t FROM episodes WHERE state = 'claimed'").one().t;
    const candidates = [lease, this.commands.nextRedelivery(now), this.outbox.nextDue(), this.buffer.nextExpiry()].filter(
      (t): t is number => t !== null,
    );
    if (candidates.length === 0) {
      this.armedAt = null;
      void this.ctx.storage.deleteAlarm();
      return;
    }
    this.armedAt = Math.min(...candidates);
    void this.ctx.storage.setAlarm(this.armedAt);
  }

  private takeQueueSeq(): number {
    return this.nextQueueSeq++;
  }

  /**
   * Runs `fn`'s writes in workerd's implicit transaction, which commits everything written in
   * one turn of the event loop together, instead of an explicit one. transactionSync first
   * commits the implicit transaction that the turn's other requests wrote into, then runs
   * SAVEPOINT and RELEASE and commits again itself, which would split a shared turn's group
   * commit (shared-turn.ts) in two. Atomicity is kept by breaking the object if `fn` throws:
   * ctx.abort() resets it before the turn ends, so nothing written in this turn commits (the
   * answers of the calls that shared the turn, held by the output gate, fail with it rather than
   * claim writes that were dropped), and the object restarts from its last commit. Only for
   * writes that fail on a bug or a storage fault, never on a request's data.
   */
  private inTurn<T>(fn: () => T): T {
    let result: T;
    try {
      result = fn();
    } catch (e) {
      const reason = e instanceof Error ? e.message : String(e);
      this.ctx.abort(`a write failed half-way, so the engine restarts from its last commit: ${reason}`);
      throw e;
    }
    this.armDeferred();
    return result;
  }

  private tx<T>(fn: () => T): T {
    const queueSeq = this.nextQueueSeq;
    let result: T;
    try {
      result = this.ctx.storage.transactionSync(fn);
    } catch (e) {
      // The transaction rolled back; so must the in-memory copies.
      this.meta = this.loadMeta();
      this.buffer.forget();
      this.nextQueueSeq = queueSeq;
      this.armAfterCommit = null;
      throw e;
    }
    this.armDeferred();
    return result;
  }

  /** Arms the alarm for the deadlines that writes just made durable added (addOutbox). */
  private armDeferred(): void {
    this.armBy(this.armAfterCommit);
    this.armAfterCommit = null;
  }

  private loadMeta(): Meta {
    return { ...INITIAL_META, ...(this.getKv<Partial<Meta>>("meta") ?? {}) };
  }

  private saveMeta(next: Meta): void {
    this.setKv("meta", next);
    this.meta = next;
  }

  private getKv<T>(k: string): T | null {
    const row = this.sql.exec<{ v: string }>("SELECT v FROM kv WHERE k = ?", k).toArray()[0];
    return row ? (JSON.parse(row.v) as T) : null;
  }

  private setKv(k: string, v: unknown): void {
    this.sql.exec("INSERT INTO kv (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v", k, JSON.stringify(v));
  }
}
