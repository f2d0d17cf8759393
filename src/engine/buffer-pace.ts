/**
 * What the pace staleness policy weighs from the buffer, and its refusal of batches that open
 * new groups. The rule itself is pure (pacing.ts); this reads the tables it needs.
 */
import { DEFAULT_BUFFER_CONFIG, type StepRow } from "../protocol/buffer";
import type { BufferState } from "./buffer-state";
import { paceAdmits, paceAdmitsAlone, type PaceState } from "./pacing";
import { fail, type Reply } from "./reply";

/**
 * Under pace, a batch that opens new groups while the work under way could be consumed too
 * late is refused whole (503 paced, changing nothing; the worker sends it again). Sessions of
 * groups already begun are always taken: holding them back would stop those groups from
 * completing and so hold the oldest work back for good. A batch too big for the bound on its own
 * is taken once nothing else is outstanding (paceAdmitsAlone); a pending group gone silent no
 * longer is (paceSilenceMs).
 */
export function paceRefusal(s: BufferState, rows: StepRow[]): Reply<never> | null {
  const cfg = s.config();
  if (cfg.staleness_policy !== "pace") return null;
  const opening = new Set<string>();
  for (const r of rows) {
    // A row of a session restart_training discarded opens nothing: it is late.
    if (opening.has(r.session_id) || s.groupOfRow(r.session_id, r.group_id) !== null) continue;
    opening.add(r.session_id);
  }
  if (opening.size === 0) return null;
  const state = paceState(s, null, true);
  if (paceAdmits(state, opening.size) || paceAdmitsAlone(state, opening.size)) return null;
  notePaced(s);
  return fail(
    503,
    "paced",
    `Pacing (staleness_policy pace): the rollouts under way could be consumed up to ${state.maxStaleness} weight versions late already; new groups are taken again once the trainer consumes what is waiting. Send this batch again shortly; nothing of it was stored.`,
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
 * (paceSilenceMs). `withPending`: pending groups count for the oldest version; not for claims,
 * whose refusal would stop a pending group from completing.
 */
export function paceState(s: BufferState, claims: { count: number; oldest: number | null } | null, withPending: boolean, fallbackPerVersion: number | null = null): PaceState {
  const cfg = s.config();
  const c = s.counters();
  const version = s.host.weightVersion();
  const heardSince = s.host.now() - paceSilenceMs(cfg);
  const sessions = s.sql
    .exec<{ n: number }>(
      `SELECT COUNT(*) AS n FROM buf_sessions WHERE failed = 0 AND group_id IN
         (SELECT group_id FROM buf_groups WHERE state = 'ready' OR (state = 'pending' AND last_row_at > ?))`,
      heardSince,
    )
    .one().n;
  const oldest = s.sql
    .exec<{ v: number | null }>(
      `SELECT MIN(min_weight_version) AS v FROM buf_groups WHERE state = 'ready'${withPending ? " OR (state = 'pending' AND last_row_at > ?)" : ""}`,
      ...(withPending ? [heardSince] : []),
    )
    .one().v;
  return {
    consumerVersion: version,
    maxStaleness: cfg.max_staleness,
    oldestVersion: claims === null || claims.oldest === null ? oldest : oldest === null ? claims.oldest : Math.min(oldest, claims.oldest),
    outstanding: sessions + (claims?.count ?? 0),
    consumedAtVersion: c.pullVersion === version ? c.pulledAtVersion : 0,
    perVersion: cfg.rollouts_per_version ?? c.perVersion ?? fallbackPerVersion,
  };
}

/** Counts a claim (or batch) that pace held back. */
export function notePaced(s: BufferState): void {
  s.bump((c) => ({ ...c, paced: c.paced + 1 }));
}
