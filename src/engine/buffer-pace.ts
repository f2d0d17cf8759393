/**
 * What the pace staleness policy weighs from the buffer, and its refusal of batches that open
 * new groups. The rule itself is pure (pacing.ts); this reads the tables it needs.
 */
import type { StepRow } from "../protocol/buffer";
import type { BufferState } from "./buffer-state";
import { paceAdmits, paceAdmitsAlone, type PaceState } from "./pacing";
import { fail, type Reply } from "./reply";

/**
 * Under pace, a batch that opens new groups while the work under way could be consumed too
 * late is refused whole (503 paced, changing nothing; the worker sends it again). Sessions of
 * groups already begun are always taken: holding them back would stop those groups from
 * completing and so hold the oldest work back for good. A batch too big for the bound on its own
 * is taken once nothing else is outstanding (paceAdmitsAlone).
 */
export function paceRefusal(s: BufferState, rows: StepRow[]): Reply<never> | null {
  const cfg = s.config();
  if (cfg.staleness_policy !== "pace") return null;
  const opening = new Set<string>();
  for (const r of rows) {
    if (opening.has(r.session_id) || s.group(r.group_id) !== null) continue;
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
 * What pace weighs from the buffer: the sessions not yet consumed (failed ones never are)
 * and the oldest version among groups not yet consumed, with the claims under way that the
 * caller counts (`claims`). `withPending`: pending groups count for the oldest version; not
 * for claims, whose refusal would stop a pending group from completing.
 */
export function paceState(s: BufferState, claims: { count: number; oldest: number | null } | null, withPending: boolean, fallbackPerVersion: number | null = null): PaceState {
  const cfg = s.config();
  const c = s.counters();
  const version = s.host.weightVersion();
  const sessions = s.sql
    .exec<{ n: number }>(
      "SELECT COUNT(*) AS n FROM buf_sessions WHERE failed = 0 AND group_id IN (SELECT group_id FROM buf_groups WHERE state IN ('pending', 'ready'))",
    )
    .one().n;
  const oldest = s.sql
    .exec<{ v: number | null }>(`SELECT MIN(min_weight_version) AS v FROM buf_groups WHERE state IN ('ready'${withPending ? ", 'pending'" : ""})`)
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
