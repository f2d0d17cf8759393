/**
 * What the pace staleness policy weighs from the buffer, and its refusal of batches that open
 * new groups. The rule itself is pure (pacing.ts); this reads the tables it needs.
 */
import { DEFAULT_BUFFER_CONFIG, type StepRow } from "../protocol/buffer";
import type { BufferState, ClaimsOutstanding } from "./buffer-state";
import { olderVersion, paceAdmits, paceAdmitsAlone, type PaceState } from "./pacing";
import { fail, type Failure } from "./reply";

/**
 * Under pace, the rows of a batch that open new groups (`opening`: each a session of no group
 * begun yet) are refused while the work under way could be consumed too late (503 paced; the
 * worker sends the batch again). A new group weighs as the group_size sessions it will bring, or
 * as many as it opens with: its later sessions join a group begun, which is always taken. A
 * batch too big for the bound on its own is taken once nothing else is outstanding
 * (paceAdmitsAlone); a pending group gone silent no longer is (paceSilenceMs).
 */
export function paceRefusal(s: BufferState, opening: readonly StepRow[]): Failure | null {
  const cfg = s.config();
  if (cfg.staleness_policy !== "pace" || opening.length === 0) return null;
  const sessions = new Map<string, Set<string>>();
  for (const r of opening) {
    const group = sessions.get(r.group_id) ?? new Set<string>();
    sessions.set(r.group_id, group.add(r.session_id));
  }
  const adding = [...sessions.values()].reduce((n, group) => n + Math.max(group.size, cfg.group_size), 0);
  // The claims under way count as for a claim: one bound for the rollouts of both.
  const state = paceState(s, s.host.claimsOutstanding(), true);
  if (paceAdmits(state, adding) || paceAdmitsAlone(state, adding)) return null;
  notePaced(s);
  return fail(
    503,
    "paced",
    `Pacing (staleness_policy pace): the rollouts under way could be consumed up to ${state.maxStaleness} weight versions late already; new groups are taken again once the trainer consumes what is waiting. Send this batch again shortly; none of its rows that open a new group was stored.`,
  );
}

/**
 * How long a pending group may go without a row and still be weighed by pace: its TTL, or the
 * default TTL when the TTL is off. Pace waits for work under way; a group whose worker died
 * never becomes ready, and were it weighed for ever, the trainer (having consumed all it could)
 * would wait for a batch pace never lets begin. With the TTL on, the alarm decides the group at
 * that moment anyway; with it off, the group stays pending, only no longer weighed. Should it
 * come back to life, its rows are taken (its group was begun) and it is delivered flagged if stale.
 */
function paceSilenceMs(cfg: { ttl_seconds: number }): number {
  return (cfg.ttl_seconds > 0 ? cfg.ttl_seconds : DEFAULT_BUFFER_CONFIG.ttl_seconds) * 1000;
}

/**
 * What pace weighs from the buffer: the sessions not yet consumed (failed ones never are)
 * and the oldest version among groups not yet consumed, with the claims under way that the
 * caller counts (`claims`). Ready groups always count; pending ones only while they get rows
 * (paceSilenceMs). `withPending` (a worker's batch): pending groups count for the oldest version,
 * and as at least group_size sessions; not for claims, whose refusal would stop a pending group
 * from completing.
 */
export function paceState(s: BufferState, claims: ClaimsOutstanding, withPending: boolean, fallbackPerVersion: number | null = null): PaceState {
  const cfg = s.config();
  const c = s.counters();
  const version = s.host.weightVersion();
  const heardSince = s.host.now() - paceSilenceMs(cfg);
  // A group weighs as the sessions a pull would hand out: a ready group's usable ones (those that
  // never completed are cleared at its pull), a pending group's all but the failed. A pending
  // group weighs, for a worker's batch, as the group_size sessions it will bring: those not come
  // yet join a group begun, and are taken whatever pace says. For a claim, the rest of its group
  // are claims, counted as they are claimed. Its oldest version is those sessions' oldest, as a
  // pull reports it; a pending group's only for a worker's batch.
  const weighed = s.sql
    .exec<{ n: number | null; v: number | null }>(
      `SELECT SUM(CASE WHEN state = 'pending' THEN MAX(n, ?2) ELSE n END) AS n, MIN(CASE WHEN state = 'ready' OR ?3 THEN v END) AS v FROM (
         SELECT g.state AS state, COUNT(x.session_id) AS n, MIN(x.min_weight_version) AS v
         FROM buf_groups g LEFT JOIN buf_sessions x ON x.group_id = g.group_id AND x.failed = 0 AND (g.state = 'pending' OR x.completed = 1)
         WHERE g.state = 'ready' OR (g.state = 'pending' AND g.last_row_at > ?1)
         GROUP BY g.group_id)`,
      heardSince,
      withPending ? cfg.group_size : 0,
      withPending ? 1 : 0,
    )
    .one();
  return {
    consumerVersion: version,
    maxStaleness: cfg.max_staleness,
    oldestVersion: olderVersion(weighed.v, claims.oldest),
    outstanding: (weighed.n ?? 0) + claims.count,
    // Only this run's trainer has consumed anything at this version.
    consumedAtVersion: c.pullVersion === version && c.pullRun === s.host.run() ? c.pulledAtVersion : 0,
    perVersion: cfg.rollouts_per_version ?? c.perVersion ?? fallbackPerVersion,
  };
}

/** Counts a claim (or batch) that pace held back. */
export function notePaced(s: BufferState): void {
  s.bump((c) => ({ ...c, paced: c.paced + 1 }));
}
