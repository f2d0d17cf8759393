/**
 * How a group's fate is decided and told: delivered or dropped, its outcome on its way to D1,
 * and the sessions the agent may forget. Shared by pulls (delivery, stale drops) and the TTL.
 */
import type { GroupReport } from "../protocol/buffer";
import { clearSessionsCommands, type ClearSessionsReason, type SessionOf } from "./buffer-clear-sessions";
import { deleteSteps } from "./buffer-bytes";
import type { BufferState } from "./buffer-state";

/**
 * How long a session is remembered once its group's steps are gone (the group dropped, or
 * delivered and its pull no longer kept): while it is, the session joins no other group and
 * its rows sent again count as duplicates, not late. Far beyond any retry window (a client
 * retries a batch for minutes), and a bound on the memory: the sessions of groups whose steps
 * went in the last 7 days, besides those of live groups. The group's own row goes with its
 * sessions: after that its id is free, like its session ids, and a row naming it starts a new
 * group. The alarm forgets them in batches (buffer-expiry.ts).
 */
export const SESSION_MEMORY_MS = 7 * 24 * 3600 * 1000;

/**
 * The start of the name a restart keeps a discarded group under (discardForRestart), before
 * `<uuid>:<group id>`: the UUID is random, new at each restart, so no row names such a group
 * by chance, and the group's own id is free for the new job.
 */
const DISCARDED_PREFIX = "restart_training:";
const DISCARDED_NAME = new RegExp(`^${DISCARDED_PREFIX}[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}:`);
/**
 * DISCARDED_NAME in SQL (a GLOB of it is "too complex" for SQLite): the prefix, a uuid of hex
 * digits with its four dashes in their places, and a colon.
 */
const P = DISCARDED_PREFIX.length;
const UUID = `substr(group_id, ${P + 1}, 36)`;
const DISCARDED_SQL =
  `(substr(group_id, 1, ${P}) = '${DISCARDED_PREFIX}' AND substr(group_id, ${P + 37}, 1) = ':' AND length(trim(${UUID}, '0123456789abcdef-')) = 0` +
  [9, 14, 19, 24].map((d) => ` AND substr(${UUID}, ${d}, 1) = '-'`).join("") +
  ` AND length(replace(${UUID}, '-', '')) = 32)`;

export function drop(s: BufferState, groups: string[], reason: "incomplete_group_ttl" | "stale_group" | "restart_training", now: number): void {
  const sessions: SessionOf[] = [];
  for (const id of groups) {
    for (const x of s.sql.exec<{ session_id: string }>("SELECT session_id FROM buf_sessions WHERE group_id = ?", id)) sessions.push({ session: x.session_id, group: id });
    const steps = s.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM buf_steps WHERE group_id = ?", id).one().n;
    recordOutcome(s, id, "dropped", reason, reason === "stale_group", steps, null, now);
    deleteSteps(s, "group_id = ?", id);
    s.sql.exec(
      "UPDATE buf_groups SET state = 'dropped', ready_seq = NULL, stale = ?, sessions_expire_at = ? WHERE group_id = ?",
      reason === "stale_group" ? 1 : 0,
      now + SESSION_MEMORY_MS,
      id,
    );
  }
  s.bump((c) => ({ ...c, dropped: c.dropped + groups.length }));
  clearSessions(s, sessions, reason);
}

export function clearSessions(s: BufferState, sessions: SessionOf[], reason: ClearSessionsReason): void {
  for (const body of clearSessionsCommands(sessions, reason)) s.host.enqueue(body);
}

/** The group's outcome on its way to D1; `consumed`: a delivered group's report and the consumer's version. */
export function recordOutcome(
  s: BufferState,
  groupId: string,
  outcome: "delivered" | "dropped",
  reason: string,
  stale: boolean,
  steps: number,
  cursor: number | null,
  now: number,
  consumed: { consumer: number | null; report: GroupReport } | null = null,
): void {
  const seq = s.bump((c) => ({ ...c, nextOutcomeSeq: c.nextOutcomeSeq + 1 })).nextOutcomeSeq - 1;
  const agg = s.sql
    .exec<{ sessions: number; avg: number | null; minwv: number | null; run: number | null; failed: number; partial: number }>(
      `SELECT (SELECT COUNT(*) FROM buf_sessions WHERE group_id = ?1) AS sessions, (SELECT AVG(reward) FROM buf_steps WHERE group_id = ?1) AS avg,
           g.min_weight_version AS minwv, g.run AS run, g.failed_sessions AS failed, g.partial AS partial FROM buf_groups g WHERE g.group_id = ?1`,
      groupId,
    )
    .one();
  s.host.outbox({
    kind: "buffer_group",
    row: {
      engine: s.host.engine(),
      seq,
      groupId,
      run: agg.run,
      outcome,
      reason,
      stale,
      sessions: agg.sessions,
      steps,
      avgReward: agg.avg,
      // A delivered group's oldest is that of what it handed out (its report's, as its lag is):
      // an abandoned session's rows were cleared, never trained on. A dropped one's is all it held.
      minWeightVersion: consumed !== null ? consumed.report.oldest_weight_version : agg.minwv,
      pullCursor: cursor,
      decidedAt: now,
      failedSessions: agg.failed,
      partial: agg.partial === 1,
      consumerWeightVersion: consumed?.consumer ?? null,
      lagVersions: consumed?.report.lag_versions ?? null,
      queuedSeconds: consumed?.report.queued_seconds ?? null,
    },
  });
}

/**
 * restart_training: the groups not yet handed out (pending and ready) are dropped as any drop is
 * (their outcome to D1, counted, their sessions cleared on the upstream), and the ids of every
 * dropped group are freed for the new job, as the seed frees them. Their sessions stay
 * remembered as long as a dropped group's are (SESSION_MEMORY_MS from when its steps went): each
 * group is kept under a name of its own, so that a row a worker of the old job sends late is
 * ignored and counted late, not taken as the start of a new trajectory, while a row naming the
 * group id starts a new group. Groups a restart renamed before stay as they are.
 */
export function discardForRestart(s: BufferState, now: number): void {
  const live = s.sql.exec<{ group_id: string }>("SELECT group_id FROM buf_groups WHERE state IN ('pending', 'ready') ORDER BY group_id").toArray();
  drop(
    s,
    live.map((g) => g.group_id),
    "restart_training",
    now,
  );
  // Chosen in SQL, not bound as a list: the groups dropped since the last restart (kept a week)
  // may be tens of thousands, past what one value may hold.
  const freed = `state = 'dropped' AND NOT ${DISCARDED_SQL}`;
  const prefix = `${DISCARDED_PREFIX}${crypto.randomUUID()}:`;
  s.sql.exec(`UPDATE buf_sessions SET group_id = ?1 || group_id WHERE group_id IN (SELECT group_id FROM buf_groups WHERE ${freed})`, prefix);
  // A task's next rollout starts its group afresh: forgetDecided, which looks for the new name, would never find these.
  s.sql.exec(`DELETE FROM buf_task_groups WHERE group_id IN (SELECT group_id FROM buf_groups WHERE ${freed})`);
  s.sql.exec(`UPDATE buf_groups SET group_id = ?1 || group_id WHERE ${freed}`, prefix);
  // The trainer restarted from a checkpoint has consumed nothing yet, even at the version its
  // predecessor pulled at (buffer-pace.ts): pace would otherwise wait for it to consume for ever.
  s.bump((c) => ({ ...c, pulledAtVersion: 0 }));
}

/** Whether a session's group is one restart_training discarded (discardForRestart): its rows are late, whatever group they name. */
export function discardedByRestart(s: BufferState, groupId: string): boolean {
  return DISCARDED_NAME.test(groupId) && s.group(groupId)?.state === "dropped";
}
