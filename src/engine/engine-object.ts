/**
 * One Durable Object per engine: the single writer for its episodes, leases, commands and
 * reward accumulator. This class is the shell: its RPC entry points check the caller, open the
 * transaction each change runs in, and keep the alarm's schedule; what each change does lives
 * in a module per concern:
 *
 * - episodes.ts: episodes and their leases (register, claim, end, abort, reap);
 * - status-and-rewards.ts: the status machine and the reward history of each step;
 * - history-runs.ts: the runs that history is divided into;
 * - agent-channel.ts: the local-agent's commands, polls, acks and heartbeat;
 * - relay-admission.ts: admitting relayed LLM calls of live claims;
 * - provisioning.ts: the engine's name and the token hashes it lets in;
 * - rollout-buffer.ts: step rows grouped for the trainer (the slime contract);
 * - atropos-hub.ts: Atropos's trajectory API (environments, scored groups, batches);
 * - alarm-schedule.ts and outbox.ts: the one alarm, and the copy of results in D1.
 *
 * Every change is synchronous and atomic (one SQLite transaction, or one turn of workerd's
 * implicit transaction: see inTurn), so concurrent requests cannot race; the hot writes
 * (register, claim, end) that arrive together share that turn and its commit (shared-turn.ts).
 */
import { DurableObject } from "cloudflare:workers";
import type {
  AbortEpisodeRequest,
  BoolResponse,
  ClaimEpisodeRequest,
  ClaimEpisodeResponse,
  CurrentBatchRolloutPoolInformation,
  EndEpisodeCall,
  EngineStatusResponse,
  EpisodeBufferResponse,
  RegisterEpisodeRequest,
  RewardHistoryResponse,
  UpdateEngineStatusRequest,
} from "../protocol/swarm";
import { CurrentBatchRolloutPoolInformation as PoolInfoSchema } from "../protocol/swarm";
import type { AckCommandRequest, AckCommandResponse, CommandBody, PollCommandsQuery, PollCommandsResponse } from "../protocol/commands";
import type {
  AgentHeartbeatRequest,
  AgentStatus,
  BatchBoolResponse,
  CompletedTasksResponse,
  EngineOverview,
  RunningEpisodesQuery,
  RunningEpisodesResponse,
  TrainerExitRequest,
} from "../protocol/agent";
import type { BeginRunRequest, HistoryRunsQuery, HistoryRunsResponse, RewardHistoryQuery } from "../protocol/history";
import type { BufferConfig, GetRolloutDataRequest, GetRolloutDataResponse, PostStepsResponse, StartRolloutRequest, StepRow } from "../protocol/buffer";
import { D1_MAX_QUERIES_PER_INVOCATION, storedJsonTooLarge } from "../protocol/limits";
import { SWEEP_STEPS, type Budget } from "../ledger/retention";
import { mayRun, seesTrainerSecrets, type EngineOp } from "../auth/roles";
import type { ClaimKeyFields } from "../auth/claim-key";
import { gatewaySecret } from "../auth/gateway-signature";
import type { EngineEnv } from "./engine-env";
import { callerToken, type Caller, type CallerRole } from "./caller";
import { fail, ok, type Failure, type Reply } from "./reply";
import { migrateEngine, storedSchemaVersion } from "./schema";
import { EngineStore } from "./engine-store";
import { AlarmSchedule } from "./alarm-schedule";
import { Outbox, type OutboxItem } from "./outbox";
import { CommandQueue } from "./command-queue";
import { CommandOutcomes, type ScanRecord } from "./command-outcomes";
import { AgentChannel, HIDDEN_GATEWAY } from "./agent-channel";
import { Episodes } from "./episodes";
import { CLAIM_KEY_SECRET_MISSING } from "./episode-claims";
import { StatusAndRewards } from "./status-and-rewards";
import { HistoryRuns } from "./history-runs";
import { RelayAdmission, type Admission, type RelaySyncAnswer, type RelaySyncItem, type SyncHold } from "./relay-admission";
import { RelayFailureCounts } from "./relay-failure-counts";
import type { RelayFailureReport } from "../protocol/relay";
import { LedgerSettings } from "./ledger-settings";
import { RetentionSchedule } from "./retention-schedule";
import { LedgerCompactions } from "./ledger-compactions";
import type { ClaimName } from "../ledger/compaction";
import type { LedgerConfig, UpdateLedgerConfigRequest } from "../protocol/ledger";
import type { SyncConfig, UpdateSyncConfigRequest } from "../protocol/sync";
import { Provisioning, type TokenGrant } from "./provisioning";
import { RolloutBuffer } from "./rollout-buffer";
import { AtroposHub, atroposOp, type AtroposCall, type AtroposSent } from "./atropos-hub";
import { atroposBatchStream } from "./atropos-batch-stream";
import { SharedTurn } from "./shared-turn";
import { highWaterFrom, StorageGuard } from "./storage-guard";
import { bodyPrefix } from "../ledger/keys";
import { loggedErrorId } from "../error-id";
import { completedTaskClients, completedTasks, decodeCursor, deliveryCounts, episodeBuffer, failedTasks, runningDetails, runningPage, undeliverable, withoutRunnerAddresses } from "./episode-views";

function commandLeaseMs(env: EngineEnv): number {
  const s = Number(env.COMMAND_LEASE_SECONDS ?? "60");
  return (Number.isFinite(s) && s > 0 ? s : 60) * 1000;
}

/** The Atropos calls that add data: a scored group, an environment. A trainer's /register replaces its state, and may clear the queue. */
function addsAtroposData(call: AtroposCall): boolean {
  return call.route === "register_env" || (call.route === "scored_data" && call.groups.length > 0);
}

/** How long a delete waits for one already under way before it answers 503 delete_in_progress. */
export const DELETE_QUEUE_WAIT_MS = 3000;

/** A delete's answer: its last results written to D1, and the R2 prefix of the engine's call bodies (null when it was deleted already). */
export type Destroyed = { outbox_written: number; bodies: string | null };

export class EngineObject extends DurableObject<EngineEnv> {
  /** The engine's clock in ms. Tests replace it to move time without sleeping. */
  now: () => number = () => Date.now();
  /** D1 statements one alarm may send: D1's bound on one invocation (a test lowers it to see it kept). */
  d1QueriesPerAlarm = D1_MAX_QUERIES_PER_INVOCATION;
  /** Bytes of the store above which writes that add data are refused (storage-guard.ts). Tests set a small one, as they set the clock. */
  storageHighWater: number;

  private readonly store: EngineStore;
  private readonly outbox: Outbox;
  private readonly schedule: AlarmSchedule;
  private readonly buffer: RolloutBuffer;
  private readonly atroposHub: AtroposHub;
  private readonly channel: AgentChannel;
  private readonly episodes: Episodes;
  private readonly status: StatusAndRewards;
  private readonly runs: HistoryRuns;
  private readonly relay: RelayAdmission;
  private readonly relayFailed = new RelayFailureCounts();
  private readonly ledger: LedgerSettings;
  private readonly retention: RetentionSchedule;
  private readonly compactions: LedgerCompactions;
  private readonly provisioning: Provisioning;
  private readonly storage: StorageGuard;
  /** Where the hot writes wait to share a commit (shared-turn.ts). */
  private readonly sharedTurn = new SharedTurn();
  /** Set by destroy(): the engine is deleted, and everything answers 404 until this instance is gone. */
  private closed = false;
  /** Set once destroy() wiped the storage: this instance's memory is of a deleted engine for good, and it never reopens. */
  private wiped = false;
  /** The delete under way, settled once it is over: the next one waits for it (destroy). */
  private deleting: Promise<void> = Promise.resolve();

  constructor(ctx: DurableObjectState, env: EngineEnv) {
    super(ctx, env);
    const sql = ctx.storage.sql;
    this.storageHighWater = highWaterFrom(env.STORAGE_HIGH_WATER_BYTES);
    this.storage = new StorageGuard(sql, () => this.storageHighWater);
    // One transaction: a migration that fails half-way (one rebuilds tables) leaves nothing behind.
    const upgraded = storedSchemaVersion(sql) < ctx.storage.transactionSync(() => migrateEngine(sql));
    const now = () => this.now();
    const closed = () => this.closed;
    const gone = () => this.gone();
    const tx = <T>(fn: () => T): T => this.tx(fn);
    this.store = new EngineStore(sql, now);
    this.outbox = new Outbox(sql);
    this.schedule = new AlarmSchedule(ctx.storage, this.outbox, now, () => this.store.meta.name ?? "");
    const store = this.store;
    const schedule = this.schedule;
    const kv = { get: <T>(k: string) => store.getKv<T>(k), set: (k: string, v: unknown) => store.setKv(k, v) };
    this.channel = new AgentChannel(store, new CommandQueue(sql, kv), new CommandOutcomes(kv), commandLeaseMs(env), {
      now,
      tx,
      armBy: (t) => schedule.armBy(t),
      closed,
      gone,
    });
    const enqueue = (body: CommandBody): number => this.channel.enqueue(body);
    const addOutbox = (item: OutboxItem): void => schedule.addOutbox(item);
    const retention = (this.retention = new RetentionSchedule(store, (t) => schedule.armBy(t)));
    this.buffer = new RolloutBuffer(sql, {
      engine: () => store.meta.name ?? "",
      weightVersion: () => store.meta.weightVersion,
      run: () => store.meta.run,
      // Read only under pace, by a worker's batch; episodes is made below, with this buffer.
      claimsOutstanding: () => this.episodes.claimsOutstanding(),
      now,
      getKv: (k) => store.getKv(k),
      setKv: (k, v) => store.setKv(k, v),
      outbox: (item) => {
        // Its first step is when D1's copies of the buffer's steps start to need sweeping.
        if (item.kind === "buffer_step") retention.noteUse("buffer", now());
        addOutbox(item);
      },
      enqueue,
    });
    this.atroposHub = new AtroposHub(sql, { get: (k) => store.getKv(k), set: (k, v) => store.setKv(k, v) }, {
      engine: () => store.meta.name ?? "",
      incarnation: () => store.meta.incarnation,
      run: () => store.meta.run,
      now,
      outbox: addOutbox,
    });
    const compactions = (this.compactions = new LedgerCompactions(sql, {
      now,
      armBy: (t) => schedule.armBy(t),
      live: (episode, fence) => {
        const ep = this.episodes.episode(episode);
        return ep !== null && ep.state === "claimed" && ep.fence === fence;
      },
      engine: () => store.meta,
      closed,
    }));
    this.episodes = new Episodes(store, this.buffer, { now, armBy: (t) => schedule.armBy(t), addOutbox, enqueue, claimEnded: (episode, fence) => compactions.ended(episode, fence) });
    this.runs = new HistoryRuns(store);
    this.status = new StatusAndRewards(store, this.episodes, this.runs, { now, addOutbox, enqueue });
    this.tx(() => this.status.ensureRun());
    this.ledger = new LedgerSettings(store);
    this.relay = new RelayAdmission(store, this.episodes, this.channel, this.ledger, this.retention, { now, tx, closed, gone });
    this.provisioning = new Provisioning(store);
    void ctx.blockConcurrencyWhile(async () => {
      await schedule.load();
      // An upgrade's migrations may give rows deadlines (a queued command's expiry): on an idle
      // engine nothing else would set the alarm for them.
      if (upgraded) this.rearm(this.now());
    });
  }

  // ---------------------------------------------------------------- provisioning (admin only)

  /** Makes this object the engine `name` and adds token hashes (`created`: only these, Provisioning.provision). Idempotent. */
  provision(name: string, grants: TokenGrant[], created = false): void {
    // A deleted engine's instance still remembers it in memory (destroy): it is reset instead,
    // which fails this call, and the admin route provisions the fresh instance.
    if (this.closed) {
      this.ctx.abort("the engine was deleted; its name is being used again");
      throw new Error("engine instance reset");
    }
    this.tx(() => this.provisioning.provision(name, grants, created));
    this.provisioning.granted(grants, created);
  }

  /**
   * Revokes a token: its hash, and in the same transaction the live claims it made (released as
   * reaped, their keys dead: Episodes.releaseClaimsOf) and, for a token that may read the
   * gateway secret, the secret (Provisioning.revoke). Repeatable: a token already revoked
   * changes nothing. The Worker forgets its gates' answers after this (admin-routes.ts).
   */
  revokeToken(hash: string): { released: number } {
    // Calls admitted before the revocation are written first; none of the claims' is after it.
    this.relay.settle();
    const released = this.tx(() => {
      this.provisioning.revoke(hash);
      return this.episodes.releaseClaimsOf(hash);
    });
    this.provisioning.revoked(hash);
    // An AgentJet episode released goes back through its runner's reset: the agent's polls hear of it.
    if (released > 0) this.channel.wake();
    return { released };
  }

  /**
   * Deletes all the engine holds, for DELETE /admin/engines/<name>: refused while its agent is
   * connected, unless forced. From then on every request answers 404, open agent polls
   * included. A flush under way is waited for, so that no D1 row of the engine is written
   * after this returns; with `keepHistory` the whole outbox is written to D1 first. This instance
   * then stays closed, since its memory still holds the deleted engine: the next provision()
   * resets it. Repeatable: deleting a deleted (or never made) engine changes nothing.
   *
   * One at a time: a delete sent while another is under way (an operator's forced one, after a
   * keep_history one slow on D1) waits for its outcome, then runs as if alone: it finishes the
   * work if the first failed, and finds it done (nothing left to wipe: 200) if the first
   * succeeded. Side by side, the second would wipe the object while the first's drain still
   * writes to D1 under the engine's name, and the first's failure would then reopen this
   * instance over the wiped storage with the deleted engine's memory (its name and incarnation,
   * hence its gateway secret, its tokens, fences and agent record), for a re-created engine to
   * keep. Waiting also keeps each answer true when it is given: the first's 503 "nothing was
   * deleted" is said before the second deletes anything. A delete waits DELETE_QUEUE_WAIT_MS at
   * most, then answers 503 delete_in_progress, so that one stuck on D1 holds no other unanswered.
   * (Not waited for: the alarm's retention
   * sweep. It only deletes rows past retention, which the delete removes or archives anyway, stops
   * before any of their bodies go once a delete began (an archive keeps them), and writes nothing
   * here then: RetentionSchedule.sweepIfDue.)
   */
  async destroy(opts: { force: boolean; keepHistory: boolean }): Promise<Reply<Destroyed>> {
    const before = this.deleting;
    const run = this.afterDeletes(before).then((over) =>
      over
        ? this.deleteNow(opts)
        : fail(503, "delete_in_progress", `Another delete of this engine is under way (writing its last results to D1 has taken over ${DELETE_QUEUE_WAIT_MS / 1000} s); nothing was done. Send this one again once it has ended.`),
    );
    // The next delete waits for this one and those before it however they end, a throw (deleteAll failing) included.
    this.deleting = Promise.allSettled([before, run]).then(() => undefined);
    return run;
  }

  /**
   * Whether the deletes sent before have ended, waiting DELETE_QUEUE_WAIT_MS at most: one stuck on
   * D1 (a drain that never returns) would otherwise hold every later delete, the operator's forced
   * one too, unanswered until the instance went.
   */
  private async afterDeletes(before: Promise<void>): Promise<boolean> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), DELETE_QUEUE_WAIT_MS)));
    try {
      return await Promise.race([before.then(() => true as const), late]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** destroy(), once those sent before it are over. */
  private async deleteNow(opts: { force: boolean; keepHistory: boolean }): Promise<Reply<Destroyed>> {
    if (!this.closed && !opts.force) {
      const agent = this.channel.status();
      if (agent.connected) {
        const ago = Math.round(this.now() / 1000 - (agent.last_seen ?? 0));
        return fail(409, "agent_connected", `The engine's agent (${agent.host ?? "unknown host"}) sent a heartbeat ${ago} s ago: stop it first, or delete with ?force=true.`);
      }
    }
    const wasClosed = this.closed;
    this.closed = true;
    this.channel.wakeAll();
    await this.schedule.flushed();
    let written = 0;
    if (opts.keepHistory) {
      const r = await this.outbox.drain(this.env.DB, this.now());
      written = r.written;
      if (r.refused > 0 && r.error === null) {
        console.error(`engine ${this.store.meta.name}: ${r.refused} records D1 refused for their data (each alone, logged when refused) are not kept with the history of the delete`);
      }
      if (r.error !== null) {
        // Reopened only over the storage its memory describes: never once it was wiped (deletes
        // run one at a time, so none did meanwhile; this holds should that ever change).
        this.closed = wasClosed || this.wiped;
        // An alarm that fired during the drain found the engine closed and set none again.
        if (!this.closed) this.rearm(this.now());
        // D1's error may name its tables and SQL: it goes to the log, the answer carries its id.
        const id = loggedErrorId("engine: writing the last results to D1 before a delete failed, error", r.error);
        return fail(503, "history_not_written", `The engine's last results could not be written to D1 (error id ${id}); nothing was deleted. Try again, or delete without keep_history.`);
      }
    }
    // Where its call bodies are: an archive of its history keeps them, found by it (http/engine-rows.ts).
    const bodies = this.wiped || this.store.meta.name === null ? null : bodyPrefix(this.store.meta.name, this.store.meta.incarnation);
    await this.ctx.storage.deleteAlarm();
    await this.ctx.storage.deleteAll();
    this.wiped = true;
    this.schedule.cleared();
    // Timers and requests of this instance still under way find empty tables, not missing ones.
    this.ctx.storage.transactionSync(() => migrateEngine(this.ctx.storage.sql));
    this.forgetDeleted();
    return ok({ outbox_written: written, bodies });
  }

  /**
   * Drops what memory holds of the deleted engine, read again from the wiped storage. The
   * instance stays closed and provision() replaces it; this is for should it ever serve again:
   * a null name makes provision() draw a new incarnation (so a new gateway secret), and no
   * token, agent record, poll session or retention time of the deleted engine lingers. A
   * request still under way that writes meta writes the null name, not the deleted one's.
   * (The episode queue's memory, its fences among it, is not reread: only a new instance is
   * rid of it, which is why this one never reopens.)
   */
  private forgetDeleted(): void {
    this.store.reload();
    this.provisioning.reload();
    this.retention.reload();
    this.buffer.forget();
    this.channel.forget();
  }

  // ---------------------------------------------------------------- engine status

  async getEngineStatus(caller: Caller): Promise<Reply<EngineStatusResponse>> {
    return this.guarded(caller, "get_engine_status", () => ok(this.status.view()));
  }

  async syncTrainConfig(caller: Caller, yaml: string): Promise<Reply<{ success: true }>> {
    return this.guarded(caller, "sync_train_config", () => this.status.syncConfig(yaml));
  }

  async startEngine(caller: Caller): Promise<Reply<{ success: true }>> {
    return this.guarded(caller, "start_engine", () => this.afterCommands(this.tx(() => this.status.start())));
  }

  async stopEngine(caller: Caller): Promise<Reply<{ success: true }>> {
    return this.guarded(caller, "stop_engine", () => {
      this.tx(() => this.status.stop());
      return this.afterCommands(ok({ success: true as const }));
    });
  }

  async updateEngineStatus(caller: Caller, req: UpdateEngineStatusRequest): Promise<Reply<BoolResponse>> {
    return this.guarded(caller, "update_engine_status", () => ok(this.tx(() => this.status.update(req))));
  }

  // ---------------------------------------------------------------- episodes: trainer side

  async registerEpisode(caller: Caller, req: RegisterEpisodeRequest): Promise<Reply<BoolResponse>> {
    // One statement: atomic without an explicit transaction.
    return this.guardedInSharedTurn(caller, "register_episode", () => this.storage.refusal("registering an episode") ?? ok(this.episodes.register(req)));
  }

  async batchRegisterEpisodes(caller: Caller, episodes: RegisterEpisodeRequest[]): Promise<Reply<BatchBoolResponse>> {
    return this.guarded(caller, "register_episode", () => this.storage.refusal("registering episodes") ?? ok({ results: this.tx(() => episodes.map((e) => this.episodes.register(e))) }));
  }

  async isEpisodeClaimed(caller: Caller, episodeUuid: string, unregister: boolean): Promise<Reply<BoolResponse>> {
    return this.guarded(caller, "is_episode_claimed", () => ok(this.tx(() => this.episodes.claimedCheck(episodeUuid, unregister))));
  }

  async batchIsEpisodeClaimed(caller: Caller, checks: { episode_uuid: string; unregister_if_not_claimed: boolean }[]): Promise<Reply<BatchBoolResponse>> {
    return this.guarded(caller, "is_episode_claimed", () =>
      ok({ results: this.tx(() => checks.map((c) => this.episodes.claimedCheck(c.episode_uuid, c.unregister_if_not_claimed))) }),
    );
  }

  async updatePoolInfo(caller: Caller, info: CurrentBatchRolloutPoolInformation): Promise<Reply<BoolResponse>> {
    return this.guarded(caller, "update_current_batch_rollout_pool_information", () => {
      // The engine computes these itself; what the trainer sends for them is ignored.
      const stored = { ...info, running_episode_details: null, engine_status: null, global_step: null, completed_tasks_client_uuids: {}, failed_tasks: {} };
      const tooLarge = storedJsonTooLarge("the pool information", stored);
      if (tooLarge !== null) return fail(413, "payload_too_large", tooLarge);
      this.store.setKv("pool_info", stored);
      return ok({ success: true, failure_reason: "" });
    });
  }

  // ---------------------------------------------------------------- episodes: client side

  async claimEpisode(caller: Caller, req: ClaimEpisodeRequest, origin: string): Promise<Reply<ClaimEpisodeResponse>> {
    return this.guardedInSharedTurn(caller, "claim_episode", () =>
      this.episodes.claim(req, origin, this.env.CLAIM_KEY_SECRET, {
        tokenHash: callerToken(caller),
        refusal: () => {
          const role = this.provisioning.authorize(caller, "claim_episode");
          return typeof role === "string" ? null : role;
        },
      }),
    );
  }

  async endEpisode(caller: Caller, req: EndEpisodeCall): Promise<Reply<{ success: boolean }>> {
    return this.guardedInSharedTurn(caller, "end_episode", () => {
      // An end adds its trajectory (outbox), its result for the agent (commands) and its buffer row.
      const full = this.storage.refusal("ending an episode");
      if (full !== null) return full;
      const payload = this.episodes.endPayload(req);
      if (!payload.ok) return payload;
      const done = this.inTurn(() => this.episodes.end(req, payload.body, callerToken(caller)));
      return done.ok ? this.afterCommands(done) : done;
    });
  }

  async abortEpisode(caller: Caller, req: AbortEpisodeRequest): Promise<Reply<{ success: boolean }>> {
    return this.guarded(caller, "abort_episode", () => {
      // An abort without outputs frees its claim and records little: only one that carries them is refused.
      const full = req.workflow_output !== undefined ? this.storage.refusal("aborting an episode with its outputs") : null;
      return full ?? this.afterCommands(this.tx(() => this.episodes.abort(req, callerToken(caller))));
    });
  }

  async canContinueEpisode(caller: Caller, clientUuid: string, episodeUuid: string): Promise<Reply<{ can_continue: boolean }>> {
    return this.guarded(caller, "can_continue_episode", () => ok(this.episodes.canContinue(clientUuid, episodeUuid, callerToken(caller))));
  }

  // ---------------------------------------------------------------- views

  async getEpisodeBuffer(caller: Caller): Promise<Reply<EpisodeBufferResponse>> {
    return this.guarded(caller, "get_episode_buffer", (role) => {
      this.relay.settle();
      return ok({ buffer: episodeBuffer(this.store.sql, seesTrainerSecrets(role)) });
    });
  }

  async getPoolInfo(caller: Caller): Promise<Reply<CurrentBatchRolloutPoolInformation>> {
    return this.guarded(caller, "get_current_batch_rollout_pool_information", () => {
      this.relay.settle();
      const stored = PoolInfoSchema.parse(this.store.getKv<unknown>("pool_info") ?? {});
      const meta = this.store.meta;
      return ok({
        ...stored,
        running_episode_details: runningDetails(this.store.sql, this.now()),
        completed_tasks_client_uuids: completedTaskClients(this.store.sql, meta.run),
        engine_status: meta.status,
        global_step: meta.globalStep,
        booting_start_time: meta.bootingStartTime,
        failed_tasks: failedTasks(this.store.sql, meta.run),
      });
    });
  }

  async runningEpisodes(caller: Caller, q: RunningEpisodesQuery): Promise<Reply<RunningEpisodesResponse>> {
    return this.guarded<RunningEpisodesResponse>(caller, "get_overview", () => {
      this.relay.settle();
      const after = q.cursor === undefined ? null : decodeCursor(q.cursor);
      if (q.cursor !== undefined && after === null) return fail(422, "invalid_request", "cursor: not a cursor this engine handed out");
      return ok({ ...runningPage(this.store.sql, this.now(), after, q.limit), total: this.episodes.counts().claimed });
    });
  }

  async completedTasks(caller: Caller): Promise<Reply<CompletedTasksResponse>> {
    return this.guarded<CompletedTasksResponse>(caller, "get_overview", () => {
      const step = this.store.meta.globalStep;
      return ok({ global_step: step, tasks: completedTasks(this.store.sql, step, this.store.meta.run) });
    });
  }

  async getRewardHistory(caller: Caller, q: RewardHistoryQuery = {}): Promise<Reply<RewardHistoryResponse>> {
    return this.guarded(caller, "get_reward_history", () => {
      const h = this.status.history(q);
      return h === null ? fail(404, "unknown_run", `This engine has no run ${q.run}; GET /history/runs lists its runs.`) : ok(h);
    });
  }

  /** The runs the engine's history is divided into, newest first. */
  async historyRuns(caller: Caller, q: HistoryRunsQuery): Promise<Reply<HistoryRunsResponse>> {
    return this.guarded(caller, "get_reward_history", () => ok(this.runs.list(q, () => this.status.currentStepEpisodes())));
  }

  /** An operator begins a new run: the history from here on is kept apart from what came before. */
  async beginHistoryRun(caller: Caller, req: BeginRunRequest): Promise<Reply<{ success: true; run: number; new_run: boolean }>> {
    return this.guarded(caller, "begin_history_run", () => {
      const r = this.tx(() => this.status.beginRun("operator", null, req.note));
      return ok({ success: true as const, run: r.run, new_run: r.newRun });
    });
  }

  async overview(caller: Caller): Promise<Reply<EngineOverview>> {
    return this.guarded(caller, "get_overview", (role) => {
      this.relay.settle();
      const sql = this.store.sql;
      const secrets = seesTrainerSecrets(role);
      const agent = this.channel.status();
      return ok({
        engine: this.store.meta.name ?? "",
        ...this.status.overview(),
        episodes: this.episodes.counts(),
        deliveries: deliveryCounts(sql),
        undeliverable: undeliverable(sql, secrets),
        refusals: this.channel.outcomes.refusals().map((r) => (secrets ? r : { ...r, detail: withoutRunnerAddresses(r.detail) })),
        pending_commands: this.channel.commands.pendingCount(),
        outbox: this.outbox.view(),
        agent: secrets ? agent : { ...agent, gateway_url: agent.gateway_url === null ? null : HIDDEN_GATEWAY },
        relay: { ...this.relay.counts(), ...this.relayFailed.view(mayRun(role, "read_trajectories")) },
        ledger: { claims_to_gather: this.compactions.size(), engine_requests: this.compactions.requests },
        atropos: this.atroposHub.overview(),
        storage: this.storage.view(),
      });
    });
  }

  async health(caller: Caller) {
    return this.guarded(caller, "get_overview", () => {
      const agent = this.channel.status();
      return ok({
        status: "healthy" as const,
        aievobox_running: agent.connected && agent.rollout_workers?.state === "running",
        llm_proxy_running: agent.connected && agent.gateway_url !== null,
        data_manager_initialized: true as const,
        engine_status: this.store.meta.status,
        buffer: { ...this.buffer.stats(), config: this.buffer.config(), last_pull: this.buffer.lastPull() },
        agent: { connected: agent.connected, host: agent.host, last_seen: agent.last_seen },
      });
    });
  }

  // ---------------------------------------------------------------- agent command channel

  async agentPoll(caller: Caller, q: PollCommandsQuery): Promise<Reply<PollCommandsResponse>> {
    return this.guarded(caller, "agent_poll", () =>
      this.channel.poll(q, () => {
        const role = this.provisioning.authorize(caller, "agent_poll");
        return typeof role === "string" ? null : role;
      }),
    );
  }

  async agentAck(caller: Caller, req: AckCommandRequest): Promise<Reply<AckCommandResponse>> {
    return this.guarded<AckCommandResponse>(caller, "agent_ack", () => this.channel.ack(req, (body, succeeded, detail) => this.applyAck(body, succeeded, detail)));
  }

  async agentHeartbeat(caller: Caller, req: AgentHeartbeatRequest): Promise<Reply<{ success: true; server_time: number }>> {
    return this.guarded(caller, "agent_heartbeat", () => ok(this.channel.heartbeat(req)));
  }

  async trainerExit(caller: Caller, req: TrainerExitRequest): Promise<Reply<{ success: true }>> {
    return this.guarded(caller, "agent_trainer_exit", () => {
      this.tx(() => this.status.trainerExited(req));
      return ok({ success: true as const });
    });
  }

  async gatewaySecret(caller: Caller): Promise<Reply<{ secret: string }>> {
    return this.guarded(caller, "agent_gateway_secret", async () => {
      // An empty secret would fail deep in WebCrypto as a bare 500 (an HMAC key of length 0).
      if (!this.env.CLAIM_KEY_SECRET) return CLAIM_KEY_SECRET_MISSING;
      const meta = this.store.meta;
      return ok({ secret: await gatewaySecret(this.env.CLAIM_KEY_SECRET, meta.name ?? "", meta.incarnation, meta.gatewayGeneration) });
    });
  }

  // ---------------------------------------------------------------- rollout buffer

  async postSteps(caller: Caller, steps: StepRow[]): Promise<Reply<PostStepsResponse>> {
    return this.guarded<PostStepsResponse>(caller, "post_steps", () => {
      const full = this.storage.refusal("this batch of steps");
      if (full !== null) return full;
      const checked = this.buffer.check(steps);
      if (!checked.ok) return checked;
      // The rows of groups begun are stored also when the rest is refused (buffer-admission.ts).
      const { take, refusal } = this.buffer.admit(checked.body);
      if (refusal === null) return this.afterBufferChange(ok(this.tx(() => this.buffer.ingest(take))));
      if (take.length > 0) this.afterBufferChange(ok(this.tx(() => this.buffer.ingest(take))));
      return refusal;
    });
  }

  async getRolloutData(caller: Caller, req: GetRolloutDataRequest): Promise<Reply<GetRolloutDataResponse>> {
    return this.guarded<GetRolloutDataResponse>(caller, "get_rollout_data", () => {
      if (req.cursor !== undefined) return this.buffer.reread(req.cursor);
      return this.afterBufferChange(ok(this.tx(() => this.buffer.pull(req.max_groups ? req.max_groups : null, this.store.meta.weightVersion))));
    });
  }

  async startRollout(caller: Caller, req: StartRolloutRequest): Promise<Reply<{ success: true; message: string; job_session: string; group_size: number }>> {
    return this.guarded(caller, "start_rollout", () => {
      const jobSession = req.job_session ?? crypto.randomUUID().replace(/-/g, "");
      this.tx(() => {
        const r = this.buffer.startRollout({ job_session: jobSession, group_size: req.num_repeat_per_sample, restart_training: req.restart_training, trainer_start: this.store.meta.startSeq });
        // A repeat queues nothing: a second command with restart_training would restart the job's workers.
        if (!r.repeat) this.channel.enqueue({ kind: "start_rollout", group_size: req.num_repeat_per_sample, job_session: jobSession, restart_training: req.restart_training });
        else {
          // Unless the agent said the job's workers ended on their own since: the repeat wants them
          // back, once (a start already on its way brings them). Without restart_training, which running workers ignore.
          const workers = this.channel.status().rollout_workers;
          if (workers?.state === "exited" && workers.job_session === jobSession && !this.channel.commands.hasPendingStartRollout(jobSession)) {
            this.channel.enqueue({ kind: "start_rollout", group_size: req.num_repeat_per_sample, job_session: jobSession, restart_training: false });
          }
        }
      });
      // A repeat is answered as the first start was.
      return this.afterBufferChange(ok({ success: true as const, message: "Rollout started", job_session: jobSession, group_size: req.num_repeat_per_sample }));
    });
  }

  async configureBuffer(caller: Caller, patch: Partial<BufferConfig>): Promise<Reply<BufferConfig>> {
    return this.guarded(caller, "configure_buffer", () => this.afterBufferChange(this.tx(() => this.buffer.configure(patch))));
  }

  // ---------------------------------------------------------------- weight syncs

  async syncConfig(caller: Caller): Promise<Reply<SyncConfig>> {
    return this.guarded(caller, "get_sync_config", () => ok(this.store.meta.sync));
  }

  async configureSync(caller: Caller, patch: UpdateSyncConfigRequest): Promise<Reply<SyncConfig>> {
    return this.guarded(caller, "configure_sync", () => this.tx(() => this.status.configureSync(patch)));
  }

  // ---------------------------------------------------------------- Atropos's trajectory API

  /** One call of Atropos's API (src/atropos), checked for its operation and run in one transaction. */
  async atropos(caller: Caller, call: AtroposCall): Promise<Reply<AtroposSent>> {
    return this.guarded(caller, atroposOp(call.route), () => {
      const full = addsAtroposData(call) ? this.storage.refusal(call.route === "register_env" ? "registering an environment" : "storing scored data") : null;
      if (full !== null) return full;
      const r = this.tx(() => this.atroposHub.handle(call));
      if (!r.ok || !("taken" in r.body)) return r as Reply<AtroposSent>;
      return ok({ stream: atroposBatchStream(this.atroposHub, r.body.taken, (fn) => this.tx(fn)) });
    });
  }

  // ---------------------------------------------------------------- the trajectory ledger's settings

  async ledgerConfig(caller: Caller): Promise<Reply<LedgerConfig>> {
    return this.guarded(caller, "get_ledger_config", () => ok(this.ledger.get()));
  }

  async configureLedger(caller: Caller, patch: UpdateLedgerConfigRequest): Promise<Reply<LedgerConfig>> {
    return this.guarded(caller, "configure_ledger", () => {
      try {
        const next = this.tx(() => this.ledger.configure(patch));
        this.ledger.committed(next);
        return ok(next);
      } catch (e) {
        this.ledger.committed(null);
        throw e;
      }
    });
  }

  // ---------------------------------------------------------------- for Worker-side features

  /**
   * Checks a caller for an operation without doing it, for features whose state lives in D1
   * rather than here (training runs): one hop to the engine, which holds the token hashes.
   */
  async authorizeOp(caller: Caller, op: EngineOp): Promise<Reply<{ role: CallerRole; engine: string; incarnation: string }>> {
    return this.guarded(caller, op, (role) => ok({ role, engine: this.store.meta.name ?? "", incarnation: this.store.meta.incarnation }));
  }

  /**
   * The claims of a batch of calls the Worker just recorded (ledger/api.ts), for their bodies to be
   * gathered into one object each once they are over (ledger-compactions.ts). `incarnation` is the
   * one the batch was recorded under: an engine made again under the name meanwhile is not told.
   */
  async ledgerRecorded(caller: Caller, incarnation: string, claims: ClaimName[]): Promise<Reply<null>> {
    return this.guarded(caller, "agent_record_calls", () => {
      this.compactions.requests++;
      if (this.store.meta.incarnation === incarnation) this.tx(() => this.compactions.recorded(claims));
      return ok(null);
    });
  }

  /** Queues a command for the agent on behalf of a Worker-side feature, after checking the caller. */
  async enqueueFor(caller: Caller, op: EngineOp, body: CommandBody): Promise<Reply<{ seq: number }>> {
    return this.guarded(caller, op, () => {
      const seq = this.tx(() => {
        // A training run of the runs API starts a trainer: it begins a run of the history.
        if (body.kind === "start_run") this.status.beginRun("training_run", body.run_id);
        return this.channel.enqueueFor(body);
      });
      return this.afterCommands(ok({ seq }));
    });
  }

  /** What the training-run catalog says about itself: is an agent there, can it run them, and the last scan. */
  async catalogState(caller: Caller): Promise<Reply<{ agent: AgentStatus; scan: ScanRecord | null; now: number }>> {
    return this.guarded(caller, "list_environments", () => ok(this.channel.catalogState()));
  }

  /** The agent reported a catalog (to D1, through the Worker): an earlier failed scan is no longer the news. */
  async catalogReported(caller: Caller): Promise<Reply<{ success: true }>> {
    return this.guarded(caller, "agent_report_catalog", () => {
      this.channel.outcomes.catalogReported();
      return ok({ success: true as const });
    });
  }

  // ---------------------------------------------------------------- LLM relay

  /**
   * Admits one LLM call of a claim whose key the Worker has verified: the claim must still be
   * live. Counts the call and refreshes the lease, since a client talking to the model is not idle.
   */
  async relayBegin(key: ClaimKeyFields): Promise<Reply<Admission>> {
    return this.relay.admit(key);
  }

  /**
   * relayBegin for a Worker that holds calls through a weight sync (keep_claims_across_sync):
   * during one, a live claim's call is answered SyncHold, to be asked again; see relay-admission.ts.
   */
  async relayBeginOrHold(key: ClaimKeyFields): Promise<Reply<Admission | SyncHold>> {
    return this.relay.admitOrHold(key);
  }

  /** Relayed calls that failed as their clients got them, as an isolate of the Worker counted them since its last report. */
  async relayFailures(report: RelayFailureReport): Promise<void> {
    this.relayFailed.add(report);
  }

  /**
   * The Worker's batch for the claims it relays calls of: the calls it admitted from its cache
   * (counted, and their leases refreshed), and whether each claim is still live.
   */
  async relaySync(items: RelaySyncItem[]): Promise<Reply<RelaySyncAnswer>> {
    return this.relay.sync(items);
  }

  // ---------------------------------------------------------------- alarm

  override async alarm(): Promise<void> {
    // It fired: nothing is set any more, also for an engine closed meanwhile (a delete may still fail and reopen it).
    this.schedule.cleared();
    if (this.closed) return;
    const now = this.now();
    // Leases that LLM calls extended are written before any is judged expired.
    this.relay.settle();
    this.tx(() => {
      this.episodes.reapExpired(now);
      this.buffer.dropExpired(now);
      this.buffer.forgetDecided(now);
      this.channel.commands.sweepAcked(now);
      this.channel.commands.expireAdvisory(now);
    });
    this.channel.wake();
    // One budget of D1 statements for the invocation: the outbox first, a due sweep's share kept from the gathering.
    const queries: Budget = { left: this.d1QueriesPerAlarm };
    await this.schedule.flushOutbox(this.env.DB, now, queries);
    if (this.closed) return;
    const sweep = this.retention.due(now) ? Math.min(SWEEP_STEPS, queries.left) : 0;
    const gathering: Budget = { left: queries.left - sweep };
    await this.compactions.runDue(this.env.DB, this.env.LEDGER, gathering);
    queries.left = gathering.left + sweep;
    if (this.closed) return;
    // The sweep waits on D1 and R2: a delete may begin meanwhile, and it writes nothing after one did.
    await this.retention.sweepIfDue(this.env.DB, this.env.LEDGER, { ledger: this.ledger.get().retention_days, buffer: this.buffer.config().d1_retention_days }, now, () => this.closed, queries);
    if (this.closed) return;
    this.rearm(now);
  }

  /** Sets the alarm to the earliest pending deadline: lease expiry, command redelivery, acked commands' deletion, outbox retry, group TTL, the sweep of old ledger calls and buffer steps, the claims' calls to gather. */
  private rearm(now: number): void {
    const commands = this.channel.commands;
    this.schedule.rearm([this.episodes.earliestLeaseExpiry(), commands.nextRedelivery(now), commands.nextSweep(), this.outbox.nextDue(), this.buffer.nextExpiry(), this.retention.next(), this.compactions.next()]);
  }

  /** Diagnostics for tests: sizes of the engine's queues and when its alarm is set. */
  async stats(): Promise<{ registered: number; claimed: number; resetting: number; pending_commands: number; outbox: number; alarm_at: number | null }> {
    this.relay.settle();
    return { ...this.episodes.counts(), pending_commands: this.channel.commands.pendingCount(), outbox: this.outbox.size(), alarm_at: await this.ctx.storage.getAlarm() };
  }

  // ---------------------------------------------------------------- internals

  private async guarded<T>(caller: Caller, op: EngineOp, run: (role: CallerRole) => Reply<T> | Promise<Reply<T>>): Promise<Reply<T>> {
    if (this.store.meta.name === null || this.closed) return this.gone();
    const role = this.provisioning.authorize(caller, op);
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

  private gone(): Failure {
    return fail(404, "unknown_engine", "No such engine.");
  }

  /** What an agent's answer to a command means for the engine's own state. */
  private applyAck(body: CommandBody, succeeded: boolean, detail: string): void {
    switch (body.kind) {
      case "deliver":
        return this.episodes.delivered(body, succeeded, detail);
      case "reset":
        return this.episodes.wasReset(body, succeeded);
      case "start":
        return this.status.started(succeeded, detail);
    }
  }

  /** Passes `reply` on, once the open polls have been woken for the commands its writes queued. */
  private afterCommands<T>(reply: Reply<T>): Reply<T> {
    this.channel.wake();
    return reply;
  }

  /** afterCommands, and the alarm armed for the buffer's next group TTL. */
  private afterBufferChange<T>(reply: Reply<T>): Reply<T> {
    this.schedule.armBy(this.buffer.nextExpiry());
    return this.afterCommands(reply);
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
    this.schedule.armDeferred();
    return result;
  }

  private tx<T>(fn: () => T): T {
    const queue = this.episodes.queueMark();
    let result: T;
    try {
      result = this.ctx.storage.transactionSync(fn);
    } catch (e) {
      // The transaction rolled back; so must the in-memory copies.
      this.store.reload();
      this.buffer.forget();
      this.retention.reload();
      this.episodes.restoreQueue(queue);
      this.schedule.discardDeferred();
      throw e;
    }
    this.schedule.armDeferred();
    return result;
  }
}
