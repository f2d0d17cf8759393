/**
 * Which buffer group an AgentJet task's rollouts join. A task comes back: in the next batch, the
 * next epoch, registered again. Once its group was decided (delivered or dropped), rows naming
 * that group are late and ignored for SESSION_MEMORY_MS, so a task keyed by its id alone would
 * lose every later rollout while its ends are answered success. Each task therefore remembers
 * the group it joins now (buf_task_groups): its own id first, then `<task_id>#2`, `#3`, ...,
 * each begun once the one before was decided. The task's id stays on every item
 * (extra_info.task_id), and instance_id stays the group's, which slime-style trainers group by.
 */
import { CLAIM_ROW_SOURCE } from "../protocol/buffer";
import { groupRow } from "./buffer-state";

/** The group a rollout of `taskId` ending now joins; records a new generation when the last group was decided. */
export function taskGroup(sql: SqlStorage, taskId: string): string {
  const current = sql.exec<{ group_id: string; generation: number }>("SELECT group_id, generation FROM buf_task_groups WHERE task_id = ?", taskId).toArray()[0];
  if (current !== undefined) {
    // A group forgotten (or taken back by a restart of the rollout) is free again: reused by name.
    return open(sql, current.group_id) && !holdsWorkersRows(sql, current.group_id) ? current.group_id : next(sql, taskId, current.generation + 1);
  }
  // As before generations: a task starts at its own id, joining a group begun under it, unless
  // another task's later generation or a worker's group holds that name, or the group was decided.
  if (!heldByOther(sql, taskId, taskId) && open(sql, taskId) && !holdsWorkersRows(sql, taskId)) {
    sql.exec("INSERT INTO buf_task_groups (task_id, group_id, generation) VALUES (?, ?, 1)", taskId, taskId);
    return taskId;
  }
  return next(sql, taskId, 2);
}

/** Whether the group is pending, ready or unknown: a rollout may join it. */
function open(sql: SqlStorage, groupId: string): boolean {
  const state = groupRow(sql, groupId)?.state;
  return state === undefined || state === "pending" || state === "ready";
}

/**
 * Whether a worker's rows are in the group: a worker named its group like the task (docs/buffer.md:
 * such a name is skipped). Rows made from claims carry extra_info.source CLAIM_ROW_SOURCE.
 */
function holdsWorkersRows(sql: SqlStorage, groupId: string): boolean {
  return sql.exec("SELECT 1 FROM buf_steps WHERE group_id = ? AND json_extract(extra, '$.source') IS NOT ? LIMIT 1", groupId, CLAIM_ROW_SOURCE).toArray().length > 0;
}

function heldByOther(sql: SqlStorage, groupId: string, taskId: string): boolean {
  return sql.exec("SELECT 1 FROM buf_task_groups WHERE group_id = ? AND task_id != ?", groupId, taskId).toArray().length > 0;
}

/**
 * The task's next generation from `generation` on, under a name no group and no other task has
 * (a worker's group, or a task whose own id looks like `<task_id>#<n>`, may hold one already).
 */
function next(sql: SqlStorage, taskId: string, generation: number): string {
  for (let n = generation; ; n++) {
    const name = `${taskId}#${n}`;
    if (heldByOther(sql, name, taskId) || groupRow(sql, name) !== null) continue;
    sql.exec(
      `INSERT INTO buf_task_groups (task_id, group_id, generation) VALUES (?, ?, ?)
       ON CONFLICT (task_id) DO UPDATE SET group_id = excluded.group_id, generation = excluded.generation`,
      taskId,
      name,
      n,
    );
    return name;
  }
}

/** Forgets which tasks joined this group, with the group itself (buffer-expiry.ts forgetDecided). */
export function forgetTaskGroup(sql: SqlStorage, groupId: string): void {
  sql.exec("DELETE FROM buf_task_groups WHERE group_id = ?", groupId);
}
