/**
 * A claim's end: checking its result, keeping it (the finished row, the runner's deliver
 * command), aborting, and the runner's answer to a delivery. An end is judged against the live
 * claim by its fence, so a result from a superseded claim is refused and one sent again is not
 * counted twice.
 */
import type { AbortEpisodeRequest, EndEpisodeCall, EndEpisodeRequest } from "../protocol/swarm";
import type { CommandBody } from "../protocol/commands";
import { storedStringTooLarge } from "../protocol/limits";
import type { EpisodeRow } from "./episode-views";
import { CLEARED_CLAIM, KNOWN_ENDS, latestEnd, latestUnended, release } from "./episode-queue";
import { isFailedInfra, joinBuffer, recordFailure, recordTrajectory, recordUnfinished } from "./episode-records";
import { CLAIM_ROW_COLUMNS, mayActOn, type ClaimRef, type ClaimRow, type EpisodeState } from "./episode-state";
import { fail, ok, type Reply } from "./reply";
import { rewardValues, scalarReward } from "./rules";

/** Checks an end before anything is written; answers the workflow output as it will be stored and delivered. */
export function endPayload(e: EpisodeState, req: EndEpisodeCall): Reply<string> {
  const status = e.store.meta.status;
  // The repeat of an end the rolling phase ended with (the trainer left it as the batch's last
  // end was stored, before its client had the answer) is answered as the first, by end().
  if (!e.live() && !endedBefore(e, req, e.episode(req.episode_uuid))) {
    return fail(400, "engine_not_rolling", `Engine is not in rolling state. Current status: [${status}]. Cannot end episode.`);
  }
  const metaTask = req.workflow_output.metadata["task_id"];
  if (metaTask === undefined) return fail(422, "invalid_request", "workflow_output.metadata must contain task_id");
  if (metaTask !== req.task_id) {
    return fail(422, "invalid_request", `workflow_output.metadata.task_id (${JSON.stringify(metaTask)}) must equal task_id (${JSON.stringify(req.task_id)})`);
  }
  const payload = req.workflow_output_text ?? JSON.stringify(req.workflow_output);
  // The trajectory's outbox record and the runner's deliver command hold it escaped inside their JSON.
  const tooLarge = storedStringTooLarge("workflow_output", payload);
  if (tooLarge !== null) return fail(413, "payload_too_large", tooLarge);
  return ok(payload);
}

/**
 * Ends a claim with its result (checked by endPayload): kept, sent to D1, and delivered to the
 * runner. `actor` is the caller's token hash (null: the admin): only the claim's own token may end it.
 */
export function end(e: EpisodeState, req: EndEpisodeRequest, payload: string, actor: string | null): Reply<{ success: boolean }> {
  const meta = e.store.meta;
  const now = e.host.now();
  // A train episode ended by its live claim is taken (deleted) in one statement. Anything
  // else is judged by ownedClaim, which says what went wrong; the only claim it accepts
  // that was not taken is an eval one, which is released below, not deleted.
  let ep = takeTrainClaim(e, req, actor);
  if (ep === null) {
    const owned = ownedClaim(e, req, actor);
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
  e.store.sql.exec(
    `INSERT INTO finished (episode_uuid, fence, client_uuid, task_id, episode_type, ended_at, delivery, global_step, reward, acc_epoch, reward_values, run, failed, claim_weight_version)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
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
    ep.claim_weight_version,
  );
  if (failedInfra) recordFailure(e, ep, taskId, "failed_infra");
  recordTrajectory(e, ep, taskId, { outcome: "ended", reward: scalarReward(req.workflow_output.reward), isSuccess: req.workflow_output.is_success, workflowOutput: payload, endedAt: now });
  if (ep.episode_type === "train") {
    if (taskId !== "" && e.buffer.active()) joinBuffer(e, ep, taskId, req.workflow_output, failedInfra);
    if (deliver) {
      e.host.enqueue({ kind: "deliver", episode_uuid: ep.episode_uuid, fence: ep.fence, zmq_listen_result_addr: ep.zmq_addr, payload });
    }
  } else {
    // Evaluation results go to D1 only; the runner is reset and the episode serves again (as the seed does).
    release(e, ep, e.requeues() ? "requeue" : "delete");
  }
  return ok({ success: true });
}

/** Gives a claim back unended; `actor` as for end. */
export function abort(e: EpisodeState, req: AbortEpisodeRequest, actor: string | null): Reply<{ success: boolean }> {
  if (!e.live()) return ok({ success: true });
  // workflow_output is optional here, and JSON.stringify(undefined) is no JSON: the row's NOT NULL column refused it forever.
  const payload = JSON.stringify(req.workflow_output ?? {});
  // Kept in the trajectory's outbox record as an end's is, so it is held to the same limit.
  const tooLarge = storedStringTooLarge("workflow_output", payload);
  if (tooLarge !== null) return fail(413, "payload_too_large", tooLarge);
  const ep = e.episode(req.episode_uuid);
  if (ep === null) return ok({ success: true });
  const owned = ownedClaim(e, req, actor);
  if (!owned.ok) return abortedBefore(e, req, ep) ? ok({ success: true }) : owned;
  if (owned.body !== "already_ended") {
    e.store.sql.exec("INSERT OR REPLACE INTO aborts (episode_uuid, fence, client_uuid) VALUES (?, ?, ?)", req.episode_uuid, owned.body.fence, req.client_uuid);
    recordUnfinished(e, owned.body, "aborted", payload, owned.body.task_id || req.task_id);
    release(e, owned.body, e.requeues() ? "requeue" : "delete");
  }
  return ok({ success: true });
}

/** The runner got the result (or could not be reached). */
export function delivered(e: EpisodeState, body: Extract<CommandBody, { kind: "deliver" }>, succeeded: boolean, detail: string): void {
  const delivery = succeeded ? "delivered" : "undeliverable";
  e.store.sql.exec("UPDATE finished SET delivery = ?, delivery_detail = ? WHERE episode_uuid = ? AND fence = ?", delivery, detail, body.episode_uuid, body.fence);
  // A sync that keeps claims may have ended the batch since: until this the episode counted as claimed.
  e.store.sql.exec("UPDATE ends_before_sync SET delivery = ?, delivery_detail = ? WHERE episode_uuid = ? AND fence = ?", delivery, detail, body.episode_uuid, body.fence);
}

/**
 * Deletes and returns the episode if `req` is the live claim of a train episode and `actor` may
 * act on it (mayActOn); else changes nothing. Only the columns an end reads come back: workerd
 * builds each returned row property by property, and `RETURNING *` (14 columns) cost several
 * percent of an end's instructions (counted with valgrind's callgrind; BENCHMARKS.md).
 */
function takeTrainClaim(e: EpisodeState, req: ClaimRef, actor: string | null): ClaimRow | null {
  const fence = req.fence ?? null;
  // mayActOn, in SQL: a condition on the row the statement reads anyway, no extra probe.
  return (
    e.store.sql
      .exec<ClaimRow>(
        `DELETE FROM episodes WHERE episode_uuid = ? AND state = 'claimed' AND client_uuid = ? AND episode_type = 'train' AND (?3 IS NULL OR fence = ?3)
           AND (claimed_by IS NULL OR ?4 IS NULL OR claimed_by = ?4)
         RETURNING ${CLAIM_ROW_COLUMNS}`,
        req.episode_uuid,
        req.client_uuid,
        fence,
        actor,
      )
      .toArray()[0] ?? null
  );
}

/**
 * Whether `req` repeats this client's abort of the episode's claim: by its fence, or without one
 * when no claim of the episode came since (the rule endedBefore keeps for ends, for the same reasons).
 */
function abortedBefore(e: EpisodeState, req: ClaimRef, ep: EpisodeRow): boolean {
  const last = e.store.sql.exec<{ fence: number; client_uuid: string }>("SELECT fence, client_uuid FROM aborts WHERE episode_uuid = ?", req.episode_uuid).toArray()[0];
  if (last === undefined || last.client_uuid !== req.client_uuid) return false;
  return req.fence !== undefined ? req.fence === last.fence : last.fence >= ep.fence;
}

/**
 * Checks that `req` comes from the live claim of its episode, sent with a token that may act on
 * it (`actor`, mayActOn), or repeats a claim that already ended. Another token's request for a
 * claim it did not make gets the answer of another client's (409 claim_lost), which tells it
 * nothing running_episodes does not. A repeat of an ended claim's end or abort is not checked
 * for its token: the ends keep none (no schema change for it), and such a repeat changes nothing
 * and answers only that the claim ended, which the pool's views show every token.
 */
function ownedClaim(e: EpisodeState, req: ClaimRef, actor: string | null): Reply<EpisodeRow | "already_ended"> {
  const ep = e.episode(req.episode_uuid);
  const held = ep !== null && ep.state === "claimed" && ep.client_uuid === req.client_uuid && mayActOn(ep.claimed_by, actor);
  if (held && (req.fence === undefined || req.fence === ep.fence)) return ok(ep);
  if (endedBefore(e, req, ep)) return ok("already_ended");
  // Its row gone (unregistered, its runner not reset, a phase cleared) after this client's claim
  // of it was over: that claim is lost, not the episode unknown.
  if (ep === null && latestEnd(e, req.episode_uuid)?.client_uuid !== req.client_uuid && latestUnended(e, req.episode_uuid)?.client_uuid !== req.client_uuid) {
    return fail(404, "unknown_episode", `Episode ${req.episode_uuid} not found.`);
  }
  if (ep === null || ep.state !== "claimed") {
    return fail(
      409,
      "claim_lost",
      `Episode ${req.episode_uuid} is not in claimed status, maybe you take **too long** to submit the workflow output, try increase \`discard_episode_timeout\` when \`begin_episode\`. Its claim was reaped or aborted; this result is not counted.`,
    );
  }
  if (!held) {
    return fail(409, "claim_lost", `Episode ${req.episode_uuid} is claimed by a different client; this result is not counted.`);
  }
  return fail(409, "claim_lost", `Episode ${req.episode_uuid}: fence ${req.fence} belongs to a superseded claim (current fence ${ep.fence}); this result is not counted.`);
}

/**
 * Whether `req` repeats the end of a claim that ended, in this batch or before a sync that kept
 * the claims (its client may send it again during the sync, which ended the batch). Without a
 * fence, only the episode's latest claim can be repeated: the same client may have ended an
 * earlier claim of it (an eval episode serves again after its end), and a late end of a later
 * claim, reaped since, must not be taken for a repeat of that one and answered as stored.
 * What no rule here can tell: a fenceless repeat that arrives while the same client holds a
 * later claim of the episode never gets here, it is taken as that claim's end (ownedClaim). Ends
 * cannot be told apart by their bodies (a deterministic eval ends claims identically), so a
 * client that may repeat an end must send its fence (docs/agentjet.md, "Claims").
 */
function endedBefore(e: EpisodeState, req: ClaimRef, ep: EpisodeRow | null): boolean {
  if (req.fence !== undefined) {
    return (
      e.store.sql.exec(`SELECT 1 FROM ${KNOWN_ENDS} WHERE episode_uuid = ? AND fence = ? AND client_uuid = ? AND delivery != '${CLEARED_CLAIM}'`, req.episode_uuid, req.fence, req.client_uuid).toArray()
        .length > 0
    );
  }
  const last = latestEnd(e, req.episode_uuid);
  if (last === null || last.client_uuid !== req.client_uuid || last.delivery === CLEARED_CLAIM) return false;
  // The ended claim must be the episode's latest: no later one live, nor aborted or reaped. Not
  // the row's fence: a row deleted (unregistered, its runner not reset, a phase cleared) or
  // registered again (at the engine's next fence, with no claim) no longer holds it.
  if (ep !== null && ep.state === "claimed" && ep.fence > last.fence) return false;
  const unended = latestUnended(e, req.episode_uuid);
  return unended === null || unended.fence < last.fence;
}
