/**
 * The buffer's deadlines, run by the engine's alarm: incomplete groups past the TTL (delivered
 * partial or dropped, per partial_groups), and decided groups whose sessions' memory ran out.
 * Each run does a bounded batch and the alarm re-arms at once, so no run grows with the backlog.
 */
import { drop } from "./buffer-outcomes";
import type { BufferState } from "./buffer-state";
import { forgetTaskGroup } from "./task-groups";

/** The TTL alarm drops at most this many groups per run, then re-arms at once. */
const DROP_BATCH = 500;
/** The alarm forgets at most this many groups' sessions per run (SESSION_MEMORY_MS), then re-arms at once. */
const FORGET_BATCH = 500;

/**
 * Decides the incomplete groups that saw no row for the TTL: under partial_groups deliver, a
 * group with a usable session becomes ready, partial (its items carry the usable mask); the
 * others are dropped. Returns how many were decided.
 */
export function dropExpired(s: BufferState, now: number): number {
  const { ttl_seconds, partial_groups } = s.config();
  if (ttl_seconds <= 0) return 0;
  const expired = s.sql
    .exec<{ group_id: string; completed_sessions: number }>(
      "SELECT group_id, completed_sessions FROM buf_groups WHERE state = 'pending' AND last_row_at <= ? ORDER BY last_row_at LIMIT ?",
      now - ttl_seconds * 1000,
      DROP_BATCH,
    )
    .toArray();
  if (expired.length === 0) return 0;
  const dropped: string[] = [];
  for (const g of expired) {
    if (partial_groups === "deliver" && g.completed_sessions > 0) s.markReady(g.group_id, true);
    else dropped.push(g.group_id);
  }
  if (dropped.length > 0) {
    drop(s, dropped, "incomplete_group_ttl", now);
    s.bump((c) => ({ ...c, partialDropped: c.partialDropped + dropped.length }));
  }
  return expired.length;
}

/**
 * Forgets the groups whose memory ran out (SESSION_MEMORY_MS): their sessions, their own rows,
 * whose steps went before, and the AgentJet task whose group it was (it starts afresh at its own
 * id). Only decided groups have a deadline. Returns how many went.
 */
export function forgetDecided(s: BufferState, now: number): number {
  const due = s.sql
    .exec<{ group_id: string }>(
      "SELECT group_id FROM buf_groups WHERE sessions_expire_at IS NOT NULL AND sessions_expire_at <= ? ORDER BY sessions_expire_at LIMIT ?",
      now,
      FORGET_BATCH,
    )
    .toArray();
  for (const g of due) {
    s.sql.exec("DELETE FROM buf_sessions WHERE group_id = ?", g.group_id);
    s.sql.exec("DELETE FROM buf_groups WHERE group_id = ? AND state IN ('delivered', 'dropped')", g.group_id);
    forgetTaskGroup(s.sql, g.group_id);
  }
  return due.length;
}

/** The buffer's next deadline: when the oldest pending group expires (if the TTL is on), or sessions are to be forgotten. */
export function nextExpiry(s: BufferState): number | null {
  const { ttl_seconds } = s.config();
  const oldest = ttl_seconds <= 0 ? null : s.sql.exec<{ t: number | null }>("SELECT MIN(last_row_at) AS t FROM buf_groups WHERE state = 'pending'").one().t;
  const forget = s.sql.exec<{ t: number | null }>("SELECT MIN(sessions_expire_at) AS t FROM buf_groups WHERE sessions_expire_at IS NOT NULL").one().t;
  const ttlAt = oldest === null ? null : oldest + ttl_seconds * 1000;
  if (ttlAt === null || forget === null) return ttlAt ?? forget;
  return Math.min(ttlAt, forget);
}
