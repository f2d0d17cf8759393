/**
 * Step rows coming in: the checks a batch passes before anything is written, and storing it,
 * which is where sessions complete or fail and groups become ready.
 */
import { CLAIM_ROW_SOURCE, type PostStepsResponse, type StepRow } from "../protocol/buffer";
import type { SessionOf } from "./buffer-clear-sessions";
import { addHeld, bytesRefusal, rowBytes, storedResponse } from "./buffer-bytes";
import { clearSessions, discardedByRestart } from "./buffer-outcomes";
import type { BufferState } from "./buffer-state";
import { checkedStep, sizeRefusal, type CheckedStep } from "./buffer-step-size";
import { noteGroupIn } from "./history-runs";
import { fail, ok, type Reply } from "./reply";

/**
 * Where a row comes from: a worker's POST /steps, or the engine itself, joining an AgentJet
 * claim that ended to its task's group (episode-records.ts).
 */
export type RowSource = "worker" | "claim";

/**
 * Checks a batch before anything is written: sizes, that no session changes group, and that a
 * worker's row does not pass for a claim's. Returns the rows with their JSON texts, made once
 * for the engine's row, its outbox record and D1, or the failure when any row may not be
 * stored. Pace and the bound on bytes are not asked here for a worker's batch: admitSteps is,
 * before it is stored. An AgentJet rollout's end is not paced (its claim was, and what it
 * finished is kept).
 */
export function check(s: BufferState, rows: StepRow[], from: RowSource = "worker"): Reply<CheckedStep[]> {
  const { max_message_bytes } = s.config();
  const version = s.host.weightVersion() ?? 0;
  const groupOf = new Map<string, string>();
  const checked: CheckedStep[] = [];
  for (const [i, r] of rows.entries()) {
    // A trainer's pull gives a claim's row that claim's recorded tokens (ledger/rollout-tokens.ts):
    // a worker's row passing for one would have another claim's tokens trained on under its reward.
    if (from === "worker" && r["source"] === CLAIM_ROW_SOURCE) {
      return fail(422, "invalid_request", `steps.${i}.source: "${CLAIM_ROW_SOURCE}" marks the rows the exchange makes from AgentJet claims; a posted row may not carry it`);
    }
    const step = checkedStep(r, version);
    const refused = sizeRefusal(`steps.${i}`, step, max_message_bytes);
    if (refused !== null) return fail(413, "payload_too_large", refused);
    const known =
      groupOf.get(r.session_id) ??
      s.sql.exec<{ group_id: string }>("SELECT group_id FROM buf_sessions WHERE session_id = ?", r.session_id).toArray()[0]?.group_id;
    // A session restart_training discarded is late whatever group its row names (its own may be the new job's now).
    const discarded = known !== undefined && known !== r.group_id && discardedByRestart(s, known);
    if (known !== undefined && known !== r.group_id && !discarded) {
      return fail(422, "invalid_request", `steps.${i}: session ${r.session_id} belongs to group ${known}, not ${r.group_id}`);
    }
    groupOf.set(r.session_id, discarded ? known : r.group_id);
    checked.push(step);
  }
  // A claim's row refused for its bytes: its end logs it and keeps its trajectory (episode-records.ts
  // joinBuffer). A worker's batch is weighed by admitSteps (buffer-admission.ts), which takes its rows of groups begun.
  return (from === "claim" ? bytesRefusal(s, checked) : null) ?? ok(checked);
}

/** Stores a checked batch. Idempotent by (session_id, step_index). */
export function ingest(s: BufferState, rows: CheckedStep[]): PostStepsResponse {
  const now = s.host.now();
  const run = s.host.run();
  const { group_size } = s.config();
  let accepted = 0;
  let duplicates = 0;
  const groupRuns = new Set<number>();
  let late = 0;
  let added = 0;
  const lateSessions: SessionOf[] = [];
  const ready: string[] = [];
  for (const step of rows) {
    const { row: r, messages, extra } = step;
    // The session's group, also for a session restart_training discarded: the row is late.
    const group = s.groupOfRow(r.session_id, r.group_id);
    if (group !== null && (group.state === "dropped" || group.state === "delivered")) {
      if (storedBefore(s, r.session_id, r.step_index)) {
        duplicates++;
        continue;
      }
      late++;
      if (group.state === "dropped") {
        lateSessions.push({ session: r.session_id, group: r.group_id });
      }
      continue;
    }
    const { session_id, group_id, step_index, response, reward, truncated, is_session_completed, weight_version, failed_infra } = r;
    const uid = crypto.randomUUID();
    const stored = s.sql
      .exec<{ pk: number }>(
        `INSERT INTO buf_steps (uid, session_id, step_index, group_id, messages, response, response_escaped, reward, truncated, is_session_completed, weight_version, extra, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (session_id, step_index) DO NOTHING RETURNING pk`,
        uid,
        session_id,
        step_index,
        group_id,
        messages,
        ...storedResponse(response),
        reward,
        truncated ? 1 : 0,
        is_session_completed ? 1 : 0,
        weight_version,
        extra,
        now,
      )
      .toArray();
    if (stored.length === 0) {
      duplicates++;
      continue;
    }
    accepted++;
    added += rowBytes(step);
    // A row carries its group's run, which a row arriving after a new run began did not begin.
    const groupRun = s.sql
      .exec<{ run: number }>(
        `INSERT INTO buf_groups (group_id, state, min_weight_version, last_row_at, first_row_at, run) VALUES (?, 'pending', ?, ?, ?3, ?)
         ON CONFLICT (group_id) DO UPDATE SET last_row_at = excluded.last_row_at,
           min_weight_version = MIN(COALESCE(min_weight_version, excluded.min_weight_version), excluded.min_weight_version)
         RETURNING run`,
        group_id,
        weight_version,
        now,
        run,
      )
      .one().run;
    groupRuns.add(groupRun);
    s.sql.exec(
      `INSERT INTO buf_sessions (session_id, group_id, max_step, min_weight_version) VALUES (?, ?, ?, ?)
       ON CONFLICT (session_id) DO UPDATE SET max_step = MAX(COALESCE(buf_sessions.max_step, excluded.max_step), excluded.max_step),
         min_weight_version = MIN(COALESCE(buf_sessions.min_weight_version, excluded.min_weight_version), excluded.min_weight_version)`,
      session_id,
      group_id,
      step_index,
      weight_version,
    );
    if (failed_infra) markFailed(s, session_id, group_id, group_size);
    if (is_session_completed) {
      const first = s.sql
        .exec<{ failed: number }>("UPDATE buf_sessions SET completed = 1, terminal_reward = ? WHERE session_id = ? AND completed = 0 RETURNING failed", reward, session_id)
        .toArray();
      // Completed before: the session's reward is that of its last completed step by step, in
      // whatever order they came (the seed gives every step its last completed one's).
      if (first.length === 0) {
        s.sql.exec(
          `UPDATE buf_sessions SET terminal_reward = ?1 WHERE session_id = ?2
             AND NOT EXISTS (SELECT 1 FROM buf_steps WHERE session_id = ?2 AND is_session_completed = 1 AND step_index > ?3)`,
          reward,
          session_id,
          step_index,
        );
      }
      // A failed session is kept, but it does not count toward group_size.
      if (first.length > 0 && first[0]!.failed === 0) {
        const g = s.sql
          .exec<{ completed_sessions: number; state: string }>(
            "UPDATE buf_groups SET completed_sessions = completed_sessions + 1 WHERE group_id = ? RETURNING completed_sessions, state",
            group_id,
          )
          .one();
        if (g.state === "pending" && g.completed_sessions >= group_size) {
          s.markReady(group_id);
          ready.push(group_id);
        }
        // Made ready partial at its TTL, then filled before a pull: handed out as complete, in its place in the queue.
        if (g.state === "ready" && g.completed_sessions >= group_size) s.sql.exec("UPDATE buf_groups SET partial = 0 WHERE group_id = ? AND partial = 1", group_id);
      }
    }
    s.host.outbox({
      kind: "buffer_step",
      row: {
        engine: s.host.engine(),
        uid,
        sessionId: session_id,
        stepIndex: step_index,
        groupId: group_id,
        run: groupRun,
        reward,
        truncated,
        isSessionCompleted: is_session_completed,
        weightVersion: weight_version,
        messages,
        response,
        extra,
        createdAt: now,
      },
    });
  }
  addHeld(s, added);
  for (const r of groupRuns) noteGroupIn(s.sql, r);
  clearSessions(s, lateSessions, "late_rows_from_dropped_groups");
  s.bump((c) => ({ ...c, late: c.late + late, duplicates: c.duplicates + duplicates }));
  return { success: true, accepted, duplicates, late, groups_ready: ready };
}

/** Whether this row of a session was stored before: its step is at most the highest the session stored. */
function storedBefore(s: BufferState, sessionId: string, stepIndex: number): boolean {
  const max = s.sql.exec<{ max_step: number | null }>("SELECT max_step FROM buf_sessions WHERE session_id = ?", sessionId).toArray()[0]?.max_step ?? null;
  return max !== null && stepIndex <= max;
}

/**
 * Marks a session failed_infra, once: its group counts it as failed, and no longer as usable
 * if it had completed, so that a ready group short of group_size usable sessions waits again.
 */
function markFailed(s: BufferState, sessionId: string, groupId: string, groupSize: number): void {
  const newly = s.sql.exec<{ completed: number }>("UPDATE buf_sessions SET failed = 1 WHERE session_id = ? AND failed = 0 RETURNING completed", sessionId).toArray()[0];
  if (newly === undefined) return;
  s.sql.exec("UPDATE buf_groups SET failed_sessions = failed_sessions + 1, completed_sessions = completed_sessions - ? WHERE group_id = ?", newly.completed, groupId);
  // A ready group waits again only when it lost a usable session it needed: a complete group
  // one of its group_size, a partial one (made ready at its TTL) its last.
  if (newly.completed === 1) s.unreadyShort(groupSize, groupId);
  s.bump((c) => ({ ...c, failed: c.failed + 1 }));
}

