/**
 * What a claim leaves behind when it ends, with a result or without: its trajectory row on its
 * way to D1, its failed_rollouts row when it failed for a reason not the policy's, and, for an
 * AgentJet train claim while the buffer is in use, a session in its task's buffer group.
 */
import type { EndEpisodeRequest } from "../protocol/swarm";
import { CLAIM_ROW_SOURCE, type StepRow } from "../protocol/buffer";
import { noteUnended } from "./episode-queue";
import type { ClaimRow, EpisodeState } from "./episode-state";
import { scalarReward } from "./rules";
import { taskGroup } from "./task-groups";

/** Why a claim failed for reasons that are not the policy's (failed_rollouts.reason). */
type FailureReason = "failed_infra" | "aborted" | "reaped";

/**
 * A claim that ended without a result still is a trajectory (its LLM calls are in the ledger):
 * its row says how it ended, with no reward and nothing counted. It is also the episode's latest
 * claim, for the ends sent again without a fence (noteUnended). `taskId` is the claim's task,
 * or where its claim named none, the one its abort names (as an end's is).
 */
export function recordUnfinished(e: EpisodeState, ep: ClaimRow, outcome: "aborted" | "reaped", workflowOutput: string, taskId = ep.task_id): void {
  recordTrajectory(e, ep, taskId, { outcome, reward: null, isSuccess: null, workflowOutput, endedAt: e.host.now() });
  noteUnended(e, ep.episode_uuid, ep.fence, ep.client_uuid);
  if (ep.episode_type !== "train") return;
  recordFailure(e, ep, taskId, outcome);
  // In its task's group, the lost rollout is a failed session: counted, never waited for.
  if (taskId !== "" && e.buffer.active()) joinBuffer(e, ep, taskId, { reward: null, is_success: null, metadata: {}, log_metrics: {} }, true, false);
}

/** A train claim that failed for a reason not the policy's, for the pool's per-task view (failedTasks). */
export function recordFailure(e: EpisodeState, ep: ClaimRow, taskId: string, reason: FailureReason): void {
  const meta = e.store.meta;
  e.store.sql.exec(
    `INSERT INTO failed_rollouts (episode_uuid, fence, client_uuid, task_id, reason, global_step, run, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
     ON CONFLICT (episode_uuid, fence) DO NOTHING`,
    ep.episode_uuid,
    ep.fence,
    ep.client_uuid,
    taskId,
    reason,
    meta.globalStep,
    meta.run,
    e.host.now(),
  );
}

/** The claim's trajectory row, on its way to D1 through the outbox, in the current step and run. */
export function recordTrajectory(
  e: EpisodeState,
  ep: ClaimRow,
  taskId: string,
  end: { outcome: "ended" | "aborted" | "reaped"; reward: number | null; isSuccess: boolean | null | undefined; workflowOutput: string; endedAt: number },
): void {
  const meta = e.store.meta;
  e.host.claimEnded(ep.episode_uuid, ep.fence);
  e.host.addOutbox({
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

/**
 * An AgentJet trajectory joins the buffer's current group for its task (task-groups.ts: a new
 * one once the last was decided), as one single-step session: completed when it ended, failed
 * when it ended failed_infra or was lost. Its weight version is the one it was claimed at (its
 * oldest segment), and the one it ended at rides along.
 */
export function joinBuffer(e: EpisodeState, ep: ClaimRow, taskId: string, output: EndEpisodeRequest["workflow_output"], failed: boolean, completed = true): void {
  const row: StepRow = {
    session_id: `${ep.episode_uuid}#${ep.fence}`,
    group_id: taskGroup(e.store.sql, taskId),
    step_index: 0,
    messages: [],
    response: "",
    reward: scalarReward(output.reward) ?? 0,
    truncated: false,
    is_session_completed: completed,
    // A claim made before any version was reported ran on the first weights; a claim from before
    // claims kept their version (migration 8) is counted as such too, never as fresh.
    weight_version: ep.claim_weight_version ?? 0,
    failed_infra: failed,
    end_weight_version: e.store.meta.weightVersion,
    source: CLAIM_ROW_SOURCE,
    // The group's id is the task's from its second generation on (`<task_id>#2`): the task's own rides along.
    task_id: taskId,
    client_uuid: ep.client_uuid,
    is_success: output.is_success,
    metadata: output.metadata,
  };
  const checked = e.buffer.check([row], "claim");
  if (checked.ok) e.buffer.ingest(checked.body);
  // The trajectory itself is recorded either way; only its place in a group is lost.
  else console.error(`engine: episode ${ep.episode_uuid} could not join task ${taskId}'s group in the rollout buffer: ${checked.detail}`);
}

/**
 * The agreed field (docs/agentjet.md): `workflow_output.metadata.failed_infra: true` says the
 * rollout failed for a reason not the policy's (its sandbox died, its judge timed out).
 */
export function isFailedInfra(output: EndEpisodeRequest["workflow_output"]): boolean {
  return output.metadata["failed_infra"] === true;
}
