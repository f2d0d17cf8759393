/**
 * Episodes and their leases: the trainer registers episodes into a FIFO queue, a client claims
 * the head (a lease with a fence, the claim's attempt number), and the claim ends with a result,
 * is aborted, or is reaped when its lease expires. Every method runs inside the engine's
 * transaction (or shared turn) that its caller opens; nothing here commits on its own.
 */
import type {
  AbortEpisodeRequest,
  BoolResponse,
  ClaimEpisodeRequest,
  ClaimEpisodeResponse,
  EndEpisodeRequest,
  RegisterEpisodeRequest,
} from "../protocol/swarm";
import type { CommandBody } from "../protocol/commands";
import type { StepRow } from "../protocol/buffer";
import { storedStringTooLarge } from "../protocol/limits";
import { signClaimKey } from "../auth/claim-key";
import type { EngineStore } from "./engine-store";
import type { EpisodeRow } from "./episode-views";
import type { OutboxItem } from "./outbox";
import type { RolloutBuffer } from "./rollout-buffer";
import { fail, ok, type Reply } from "./reply";
import { claimsLive, NO_EPISODES_CAUSE, notReadyCause, PACED_CAUSE, rewardValues, scalarReward } from "./rules";
import { paceAdmits } from "./pacing";

/** What ending or releasing a claim needs of its episode. */
type ClaimRow = Pick<EpisodeRow, "episode_uuid" | "fence" | "client_uuid" | "task_id" | "episode_type" | "zmq_addr" | "claim_weight_version">;
const CLAIM_ROW_COLUMNS = "episode_uuid, fence, client_uuid, task_id, episode_type, zmq_addr, claim_weight_version";

/** Why a claim failed for reasons that are not the policy's (failed_rollouts.reason). */
type FailureReason = "failed_infra" | "aborted" | "reaped";

/** A claim's identity as its client names it; the fence is ours, AgentJet's clients omit it. */
type ClaimRef = { client_uuid: string; episode_uuid: string; fence?: number | undefined };

/** A reaping alarm handles at most this many leases per run, then re-arms at once. */
const REAP_BATCH = 500;

export type EpisodesHost = {
  now(): number;
  armBy(t: number | null): void;
  addOutbox(item: OutboxItem): void;
  enqueue(body: CommandBody): void;
};

export class Episodes {
  /**
   * The next FIFO position. Kept in memory, not written on every registration: only registered
   * episodes hold a position, so on start-up one probe of their index gives a safe next value.
   */
  private nextQueueSeq: number;
  /** The highest fence this engine has issued: where a newly registered episode's fences start. */
  private fenceHigh: number;

  constructor(
    private readonly store: EngineStore,
    private readonly buffer: RolloutBuffer,
    private readonly host: EpisodesHost,
  ) {
    const sql = store.sql;
    this.nextQueueSeq = (sql.exec<{ m: number | null }>("SELECT MAX(queue_seq) AS m FROM episodes WHERE state = 'registered'").one().m ?? 0) + 1;
    const maxFence = (table: string): number => sql.exec<{ m: number | null }>(`SELECT MAX(fence) AS m FROM ${table}`).one().m ?? 0;
    this.fenceHigh = Math.max(store.meta.fenceFloor, maxFence("episodes"), maxFence("finished"));
  }

  /** Where the queue's positions stand, to be put back if the transaction rolls back (restoreQueue). */
  queueMark(): number {
    return this.nextQueueSeq;
  }

  restoreQueue(mark: number): void {
    this.nextQueueSeq = mark;
  }

  // ---------------------------------------------------------------- the trainer's side

  register(req: RegisterEpisodeRequest): BoolResponse {
    if (this.store.meta.status !== "ENGINE.ROLLING") {
      return { success: false, failure_reason: "Engine is not in rolling state. Cannot register episode." };
    }
    // One statement. A retried registration (the trainer retries after 2 s) keeps its place in
    // the queue and takes the new URL and key; a claimed or resetting episode is left alone. A
    // new row's fences start above every fence this engine has issued, so a uuid registered
    // again (after it ended, was unregistered, or was cleared with its rolling phase) never
    // has a claim that shares a fence, and so a per-claim key, with a claim of its old life.
    this.store.sql.exec(
      `INSERT INTO episodes (episode_uuid, state, queue_seq, openai_base_url, openai_api_key, zmq_addr, last_activity, fence)
       VALUES (?, 'registered', ?, ?, ?, ?, ?, ?)
       ON CONFLICT (episode_uuid) DO UPDATE SET openai_base_url = excluded.openai_base_url, openai_api_key = excluded.openai_api_key,
         zmq_addr = excluded.zmq_addr
       WHERE episodes.state = 'registered'`,
      req.episode_uuid,
      this.nextQueueSeq++,
      req.openai_base_url,
      req.openai_api_key,
      req.zmq_listen_result_addr,
      this.host.now(),
      this.fenceHigh,
    );
    return { success: true, failure_reason: "" };
  }

  claimedCheck(episodeUuid: string, unregister: boolean): BoolResponse {
    if (!this.live()) return { success: false, failure_reason: "" };
    const ep = this.episode(episodeUuid);
    if (ep === null) return { success: false, failure_reason: "" };
    // An episode waiting for its runner's reset still belongs to the claim being undone.
    if (ep.state !== "registered") return { success: true, failure_reason: "" };
    if (unregister) this.drop(episodeUuid);
    return { success: false, failure_reason: "" };
  }

  // ---------------------------------------------------------------- the client's side

  async claim(req: ClaimEpisodeRequest, origin: string, keySecret: string): Promise<Reply<ClaimEpisodeResponse>> {
    const meta = this.store.meta;
    const refuse = (fail_cause: string): Reply<ClaimEpisodeResponse> =>
      ok({ success: false, client_uuid: req.client_uuid, episode_uuid: "", openai_base_url: "", openai_api_key: "", fail_cause });
    if (meta.status !== "ENGINE.ROLLING") return refuse(notReadyCause(meta.status));
    // Checked before anything is claimed, so a misconfigured deployment leaks no claims.
    if (!keySecret) return fail(500, "misconfigured", "CLAIM_KEY_SECRET is not configured: per-claim keys cannot be signed.");
    if (req.episode_type === "train" && this.paced(req)) return refuse(PACED_CAUSE);
    const now = this.host.now();
    const expiresAt = now + Math.ceil(req.discard_episode_timeout * 1000);
    // The FIFO head, claimed in one statement: atomic by itself, so it needs no explicit
    // transaction (transactionSync costs about as much as the statement here).
    const claimed =
      this.store.sql
        .exec<{ episode_uuid: string; fence: number }>(
          `UPDATE episodes SET state = 'claimed', queue_seq = NULL, episode_type = ?, client_uuid = ?, fence = fence + 1,
             last_activity = ?, discard_timeout = ?, expires_at = ?, llm_call_count = 0, task_id = ?, claim_weight_version = ?
           WHERE episode_uuid = (SELECT episode_uuid FROM episodes WHERE state = 'registered' ORDER BY queue_seq LIMIT 1)
           RETURNING episode_uuid, fence`,
          req.episode_type,
          req.client_uuid,
          now,
          req.discard_episode_timeout,
          expiresAt,
          req.throttle_policy?.current_task_id ?? "",
          meta.weightVersion,
        )
        .toArray()[0] ?? null;
    if (claimed === null) return refuse(NO_EPISODES_CAUSE);
    if (claimed.fence > this.fenceHigh) this.fenceHigh = claimed.fence;
    this.host.armBy(expiresAt);
    const key = await signClaimKey(keySecret, { engine: meta.name ?? "", incarnation: meta.incarnation, ...claimed });
    return ok({
      success: true,
      client_uuid: req.client_uuid,
      episode_uuid: claimed.episode_uuid,
      openai_base_url: `${origin}/v1`,
      openai_api_key: key,
      fail_cause: "",
      fence: claimed.fence,
    });
  }

  /**
   * Whether pace holds this train claim back: the claims under way (an O(claimed) read, made
   * only under pace) and the buffer's groups not yet consumed could be consumed too late.
   */
  private paced(req: ClaimEpisodeRequest): boolean {
    if (this.buffer.config().staleness_policy !== "pace") return false;
    const claims = this.store.sql
      .exec<{ count: number; oldest: number | null }>(
        "SELECT COUNT(*) AS count, MIN(claim_weight_version) AS oldest FROM episodes WHERE state = 'claimed' AND episode_type = 'train'",
      )
      .one();
    const t = req.throttle_policy;
    const batch = t?.expected_batch_size !== undefined && t.expected_num_repeat !== undefined ? t.expected_batch_size * t.expected_num_repeat : null;
    if (paceAdmits(this.buffer.paceState(claims, false, batch))) return false;
    this.buffer.notePaced();
    return true;
  }

  /** Checks an end before anything is written; answers the workflow output as it will be stored and delivered. */
  endPayload(req: EndEpisodeRequest): Reply<string> {
    const status = this.store.meta.status;
    if (!this.live()) {
      return fail(400, "engine_not_rolling", `Engine is not in rolling state. Current status: [${status}]. Cannot end episode.`);
    }
    const metaTask = req.workflow_output.metadata["task_id"];
    if (metaTask === undefined) return fail(422, "invalid_request", "workflow_output.metadata must contain task_id");
    if (metaTask !== req.task_id) {
      return fail(422, "invalid_request", `workflow_output.metadata.task_id (${JSON.stringify(metaTask)}) must equal task_id (${JSON.stringify(req.task_id)})`);
    }
    const payload = JSON.stringify(req.workflow_output);
    // The trajectory's outbox record and the runner's deliver command hold it escaped inside their JSON.
    const tooLarge = storedStringTooLarge("workflow_output", payload);
    if (tooLarge !== null) return fail(413, "payload_too_large", tooLarge);
    return ok(payload);
  }

  /** Ends a claim with its result (checked by endPayload): kept, sent to D1, and delivered to the runner. */
  end(req: EndEpisodeRequest, payload: string): Reply<{ success: boolean }> {
    const meta = this.store.meta;
    const now = this.host.now();
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
    const failedInfra = isFailedInfra(req.workflow_output);
    // A rollout that failed for a reason not the policy's says nothing of it: its reward is not counted.
    const counted = ep.episode_type === "train" && rewardValues(reward).length > 0 && !failedInfra;
    this.store.sql.exec(
      `INSERT INTO finished (episode_uuid, fence, client_uuid, task_id, episode_type, ended_at, delivery, global_step, reward, acc_epoch, reward_values, run, failed)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      ep.episode_uuid,
      ep.fence,
      ep.client_uuid,
      taskId,
      ep.episode_type,
      now,
      deliver ? "pending" : "none",
      meta.globalStep,
      scalarReward(reward),
      counted ? meta.accEpoch : null,
      Array.isArray(reward) ? JSON.stringify(reward) : null,
      meta.run,
      failedInfra ? 1 : 0,
    );
    if (failedInfra) this.recordFailure(ep, taskId, "failed_infra");
    this.recordTrajectory(ep, taskId, { outcome: "ended", reward: scalarReward(req.workflow_output.reward), isSuccess: req.workflow_output.is_success, workflowOutput: payload, endedAt: now });
    if (ep.episode_type === "train") {
      if (taskId !== "" && this.buffer.active()) this.joinBuffer(ep, taskId, req.workflow_output, failedInfra);
      if (deliver) {
        this.host.enqueue({ kind: "deliver", episode_uuid: ep.episode_uuid, fence: ep.fence, zmq_listen_result_addr: ep.zmq_addr, payload });
      }
    } else {
      // Evaluation results go to D1 only; the runner is reset and the episode serves again (as the seed does).
      this.release(ep, this.requeues() ? "requeue" : "delete");
    }
    return ok({ success: true });
  }

  abort(req: AbortEpisodeRequest): Reply<{ success: boolean }> {
    if (!this.live()) return ok({ success: true });
    if (this.episode(req.episode_uuid) === null) return ok({ success: true });
    const owned = this.ownedClaim(req);
    if (!owned.ok) return owned;
    if (owned.body !== "already_ended") {
      // workflow_output is optional here, and JSON.stringify(undefined) is no JSON: the row's NOT NULL column refused it forever.
      this.recordUnfinished(owned.body, "aborted", JSON.stringify(req.workflow_output ?? {}));
      this.release(owned.body, this.requeues() ? "requeue" : "delete");
    }
    return ok({ success: true });
  }

  canContinue(clientUuid: string, episodeUuid: string): { can_continue: boolean } {
    if (!this.live()) return { can_continue: false };
    const ep = this.episode(episodeUuid);
    return { can_continue: ep !== null && ep.state === "claimed" && ep.client_uuid === clientUuid };
  }

  // ---------------------------------------------------------------- leases, the agent's acks, clearing

  /** Returns the claims whose lease ran out by `now` to the queue (at most REAP_BATCH a run). */
  reapExpired(now: number): void {
    // Claims kept through a weight sync are not reaped during it: their clients cannot go on until it ends (extendLeases).
    if (this.store.meta.status === "ENGINE.WEIGHT_SYNCING") return;
    const expired = this.store.sql
      .exec<EpisodeRow>("SELECT * FROM episodes WHERE state = 'claimed' AND expires_at <= ? ORDER BY expires_at LIMIT ?", now, REAP_BATCH)
      .toArray();
    for (const ep of expired) {
      this.recordUnfinished(ep, "reaped", "{}");
      this.release(ep, "requeue");
    }
  }

  /**
   * A claim that ended without a result still is a trajectory (its LLM calls are in the ledger):
   * its row says how it ended, with no reward and nothing counted.
   */
  private recordUnfinished(ep: ClaimRow, outcome: "aborted" | "reaped", workflowOutput: string): void {
    this.recordTrajectory(ep, ep.task_id, { outcome, reward: null, isSuccess: null, workflowOutput, endedAt: this.host.now() });
    if (ep.episode_type !== "train") return;
    this.recordFailure(ep, ep.task_id, outcome);
    // In its task's group, the lost rollout is a failed session: counted, never waited for.
    if (ep.task_id !== "" && this.buffer.active()) this.joinBuffer(ep, ep.task_id, { reward: null, is_success: null, metadata: {}, log_metrics: {} }, true, false);
  }

  /** A train claim that failed for a reason not the policy's, for the pool's per-task view (failedTasks). */
  private recordFailure(ep: ClaimRow, taskId: string, reason: FailureReason): void {
    const meta = this.store.meta;
    this.store.sql.exec(
      `INSERT INTO failed_rollouts (episode_uuid, fence, client_uuid, task_id, reason, global_step, run, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (episode_uuid, fence) DO NOTHING`,
      ep.episode_uuid,
      ep.fence,
      ep.client_uuid,
      taskId,
      reason,
      meta.globalStep,
      meta.run,
      this.host.now(),
    );
  }

  /** The claim's trajectory row, on its way to D1 through the outbox, in the current step and run. */
  private recordTrajectory(
    ep: ClaimRow,
    taskId: string,
    end: { outcome: "ended" | "aborted" | "reaped"; reward: number | null; isSuccess: boolean | null | undefined; workflowOutput: string; endedAt: number },
  ): void {
    const meta = this.store.meta;
    this.host.addOutbox({
      kind: "trajectory",
      row: {
        engine: meta.name ?? "",
        episodeUuid: ep.episode_uuid,
        fence: ep.fence,
        clientUuid: ep.client_uuid,
        taskId,
        episodeType: ep.episode_type,
        globalStep: meta.globalStep,
        run: meta.run,
        reward: end.reward,
        isSuccess: end.isSuccess,
        workflowOutput: end.workflowOutput,
        endedAt: end.endedAt,
        outcome: end.outcome,
      },
    });
  }

  earliestLeaseExpiry(): number | null {
    if (this.store.meta.status === "ENGINE.WEIGHT_SYNCING") return null;
    return this.store.sql.exec<{ t: number | null }>("SELECT MIN(expires_at) AS t FROM episodes WHERE state = 'claimed'").one().t;
  }

  /**
   * Gives the claims kept through a weight sync the time it took back: a lease does not run
   * out while its client could not call the model. One write per sync, O(claimed).
   */
  extendLeases(ms: number): void {
    if (ms > 0) this.store.sql.exec("UPDATE episodes SET expires_at = expires_at + ? WHERE state = 'claimed'", ms);
    this.host.armBy(this.earliestLeaseExpiry());
  }

  /** Whether claims live now (rules.ts claimsLive). */
  private live(): boolean {
    return claimsLive(this.store.meta.status, this.store.meta.sync);
  }

  /** Whether an episode given back goes back to the queue: while rolling, and through a sync that keeps the pool. */
  private requeues(): boolean {
    const status = this.store.meta.status;
    return status === "ENGINE.ROLLING" || (status === "ENGINE.WEIGHT_SYNCING" && this.live());
  }

  /** The runner got the result (or could not be reached). */
  delivered(body: Extract<CommandBody, { kind: "deliver" }>, succeeded: boolean, detail: string): void {
    this.store.sql.exec(
      "UPDATE finished SET delivery = ?, delivery_detail = ? WHERE episode_uuid = ? AND fence = ?",
      succeeded ? "delivered" : "undeliverable",
      detail,
      body.episode_uuid,
      body.fence,
    );
  }

  /** The runner's context was reset for the claim being undone: the episode serves again. */
  wasReset(body: Extract<CommandBody, { kind: "reset" }>, succeeded: boolean): void {
    const ep = this.episode(body.episode_uuid);
    if (ep === null || ep.state !== "resetting" || ep.fence !== body.fence) return;
    // A runner that cannot be reset cannot serve the episode again.
    if (succeeded) this.requeue(body.episode_uuid);
    else this.drop(body.episode_uuid);
  }

  /** Deletes every episode and finished row, as a rolling phase ends; the fences they held go into the floor. */
  clearAll(): void {
    this.store.sql.exec("DELETE FROM episodes");
    this.store.sql.exec("DELETE FROM finished");
    this.store.sql.exec("DELETE FROM failed_rollouts");
    this.retireFences();
  }

  /** Counted over the partial index of each state, never by scanning the table. */
  counts(): { registered: number; claimed: number; resetting: number } {
    // Literal states, not parameters: SQLite uses a partial index only when the WHERE matches its own.
    const count = (sql: string) => this.store.sql.exec<{ n: number }>(sql).one().n;
    return {
      registered: count("SELECT COUNT(*) AS n FROM episodes WHERE state = 'registered'"),
      claimed: count("SELECT COUNT(*) AS n FROM episodes WHERE state = 'claimed'"),
      resetting: count("SELECT COUNT(*) AS n FROM episodes WHERE state = 'resetting'"),
    };
  }

  episode(uuid: string): EpisodeRow | null {
    return this.store.sql.exec<EpisodeRow>("SELECT * FROM episodes WHERE episode_uuid = ?", uuid).toArray()[0] ?? null;
  }

  // ---------------------------------------------------------------- internals

  /**
   * Deletes and returns the episode if `req` is the live claim of a train episode; else changes
   * nothing. Only the columns an end reads come back: workerd builds each returned row property
   * by property, and `RETURNING *` (14 columns) cost several percent of an end's instructions
   * (counted with valgrind's callgrind; BENCHMARKS.md).
   */
  private takeTrainClaim(req: ClaimRef): ClaimRow | null {
    const fence = req.fence ?? null;
    return (
      this.store.sql
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
  private ownedClaim(req: ClaimRef): Reply<EpisodeRow | "already_ended"> {
    const ep = this.episode(req.episode_uuid);
    if (ep !== null && ep.state === "claimed" && ep.client_uuid === req.client_uuid && (req.fence === undefined || req.fence === ep.fence)) {
      return ok(ep);
    }
    const ended = this.store.sql
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
  private release(ep: ClaimRow, how: "requeue" | "delete"): void {
    if (how === "delete") {
      this.drop(ep.episode_uuid);
    } else if (ep.zmq_addr !== "") {
      this.store.sql.exec("UPDATE episodes SET state = 'resetting', expires_at = NULL WHERE episode_uuid = ?", ep.episode_uuid);
      this.host.enqueue({ kind: "reset", episode_uuid: ep.episode_uuid, fence: ep.fence, zmq_listen_result_addr: ep.zmq_addr });
    } else {
      this.requeue(ep.episode_uuid);
    }
  }

  private requeue(episodeUuid: string): void {
    this.store.sql.exec(
      `UPDATE episodes SET state = 'registered', queue_seq = ?, client_uuid = '', discard_timeout = -1, expires_at = NULL,
         llm_call_count = 0, last_activity = ? WHERE episode_uuid = ?`,
      this.nextQueueSeq++,
      this.host.now(),
      episodeUuid,
    );
  }

  /** Deletes an episode that leaves no finished row behind: its fence goes into the floor. */
  private drop(uuid: string): void {
    this.store.sql.exec("DELETE FROM episodes WHERE episode_uuid = ?", uuid);
    this.retireFences();
  }

  /**
   * Keeps the highest fence issued in meta once rows that held fences are deleted (rarely: a
   * status change, an unregistered or dropped episode), so that a restarted object still starts
   * new episodes above every fence it issued before.
   */
  private retireFences(): void {
    const meta = this.store.meta;
    if (this.fenceHigh > meta.fenceFloor) this.store.saveMeta({ ...meta, fenceFloor: this.fenceHigh });
  }

  /**
   * An AgentJet trajectory joins the buffer's group for its task, as one single-step session:
   * completed when it ended, failed when it ended failed_infra or was lost. Its weight version is
   * the one it was claimed at (its oldest segment), and the one it ended at rides along.
   */
  private joinBuffer(ep: ClaimRow, taskId: string, output: EndEpisodeRequest["workflow_output"], failed: boolean, completed = true): void {
    const row: StepRow = {
      session_id: `${ep.episode_uuid}#${ep.fence}`,
      group_id: taskId,
      step_index: 0,
      messages: [],
      response: "",
      reward: scalarReward(output.reward) ?? 0,
      truncated: false,
      is_session_completed: completed,
      weight_version: ep.claim_weight_version ?? this.store.meta.weightVersion ?? 0,
      failed_infra: failed,
      end_weight_version: this.store.meta.weightVersion,
      source: "agentjet",
      client_uuid: ep.client_uuid,
      is_success: output.is_success,
      metadata: output.metadata,
    };
    const checked = this.buffer.check([row]);
    if (checked.ok) this.buffer.ingest(checked.body);
  }
}

/**
 * The agreed field (docs/agentjet.md): `workflow_output.metadata.failed_infra: true` says the
 * rollout failed for a reason not the policy's (its sandbox died, its judge timed out).
 */
export function isFailedInfra(output: EndEpisodeRequest["workflow_output"]): boolean {
  return output.metadata["failed_infra"] === true;
}
