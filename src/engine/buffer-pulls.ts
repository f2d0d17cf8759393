/**
 * The trainer's side of the buffer: pulls of ready groups under the staleness policy, reading a
 * kept pull again by cursor, and the per-group staleness report of the newest pull.
 */
import type { GetRolloutDataResponse, GroupReport, LastPull } from "../protocol/buffer";
import { LAST_PULL_GROUPS } from "../protocol/buffer";
import type { SessionOf } from "./buffer-clear-sessions";
import { groupReport, isStale, metaInfo, toItem, type StoredStep } from "./buffer-items";
import { deletePulled, deleteSteps, keepDelivered } from "./buffer-bytes";
import { clearSessions, drop, recordOutcome, SESSION_MEMORY_MS } from "./buffer-outcomes";
import { GROUP_COLUMNS, type BufferState, type Counters, type GroupRow } from "./buffer-state";
import { fail, ok, type Reply } from "./reply";
import { jsonStringBytes, MAX_STORED_BYTES, utf8Bytes } from "../protocol/limits";

/** Pulls that can be read again by cursor; older ones are forgotten (their rows are in D1). */
export const KEPT_PULLS = 4;
/**
 * A pull hands out at most this many groups, whatever max_groups asks; and no more than its kept
 * row holds. 1000 ids of at most 256 characters, each at most 6 bytes escaped, are
 * up to 1,538,000 bytes as JSON, and the row keeps them twice (the ids, and each group's report),
 * so clients naming their groups long and escaped make a pull of fewer.
 */
export const MAX_GROUPS_PER_PULL = 1000;


/**
 * Ready groups one pull looks at, delivered or dropped as stale: a backlog of stale groups is
 * dropped over several pulls rather than in one request.
 */
const MAX_EXAMINED_PER_PULL = 5 * MAX_GROUPS_PER_PULL;

/**
 * The oldest weight version among what a group hands out to train on: its usable sessions'
 * steps. A session that never completed is cleared at delivery and a failed one is not trained
 * on, so a step of an abandoned session begun long ago says nothing of how off-policy the group
 * is. A group with no usable session falls back to all its rows.
 */
function deliveredOldest(s: BufferState, g: GroupRow): number | null {
  const v = s.sql
    .exec<{ v: number | null }>(
      `SELECT MIN(st.weight_version) AS v FROM buf_steps st JOIN buf_sessions x ON x.session_id = st.session_id
       WHERE st.group_id = ? AND x.completed = 1 AND x.failed = 0`,
      g.group_id,
    )
    .one().v;
  return v ?? g.min_weight_version;
}

/**
 * The consumption measure after a pull of `sessions` at version `version` in run `run`: a pull
 * at a new version closes the count of the last one, spread over the versions it moved on by.
 * A pull in a new run (a restarted trainer) begins the count again, keeping the measure.
 */
function measured(c: Counters, version: number | null, sessions: number, run: number): Pick<Counters, "pullVersion" | "pulledAtVersion" | "perVersion" | "pullRun"> {
  if (run !== c.pullRun) return { pullVersion: version, pulledAtVersion: sessions, perVersion: c.perVersion, pullRun: run };
  if (version === c.pullVersion) return { pullVersion: version, pulledAtVersion: c.pulledAtVersion + sessions, perVersion: c.perVersion, pullRun: run };
  const moved = version !== null && c.pullVersion !== null ? version - c.pullVersion : 0;
  const perVersion = moved > 0 && c.pulledAtVersion > 0 ? c.pulledAtVersion / moved : c.perVersion;
  return { pullVersion: version, pulledAtVersion: sessions, perVersion, pullRun: run };
}

/** Hands out ready groups, oldest first, applying the staleness policy. */
export function pull(s: BufferState, maxGroups: number | null, weightVersion: number | null): GetRolloutDataResponse {
  const now = s.host.now();
  const cfg = s.config();
  const limit = Math.min(maxGroups ?? MAX_GROUPS_PER_PULL, MAX_GROUPS_PER_PULL);
  const deliver: string[] = [];
  const staleGroups: string[] = [];
  const reports: GroupReport[] = [];
  /** Each report's JSON, as the pull's row keeps it: measured for the row's bound, then written as they are. */
  const reportTexts: string[] = [];
  // Groups dropped as stale do not count toward max_groups: the trainer asked for that many to train on.
  let after = -1;
  // The row's JSON beside the groups: its brackets and the consumer's version.
  let rowBytes = 64;
  let rowFull = false;
  for (let examined = 0; deliver.length < limit && examined < MAX_EXAMINED_PER_PULL && !rowFull; ) {
    const page = s.sql
      .exec<GroupRow & { ready_seq: number }>(
        `SELECT ${GROUP_COLUMNS}, ready_seq FROM buf_groups WHERE state = 'ready' AND ready_seq > ? ORDER BY ready_seq LIMIT ?`,
        after,
        Math.min(limit - deliver.length, MAX_EXAMINED_PER_PULL - examined),
      )
      .toArray();
    if (page.length === 0) break;
    examined += page.length;
    after = page[page.length - 1]!.ready_seq;
    for (const candidate of page) {
      const g = { ...candidate, min_weight_version: deliveredOldest(s, candidate) };
      const stale = isStale(g.min_weight_version, weightVersion, cfg.max_staleness);
      const dropped = stale && cfg.staleness_policy === "drop";
      const report = dropped ? null : groupReport(g, weightVersion, now);
      if (report !== null) {
        const text = JSON.stringify(report);
        // Its id in `group_ids` and its report in `report`, with their commas.
        const bytes = jsonStringBytes(g.group_id) + utf8Bytes(text) + 2;
        if (rowBytes + bytes > MAX_STORED_BYTES) {
          // Left ready for the next pull, counted nowhere yet.
          rowFull = true;
          break;
        }
        rowBytes += bytes;
        reportTexts.push(text);
      }
      if (stale) s.bump((c) => ({ ...c, stale: c.stale + 1 }));
      if (report === null) {
        drop(s, [g.group_id], "stale_group", now);
        continue;
      }
      if (stale) staleGroups.push(g.group_id);
      deliver.push(g.group_id);
      reports.push(report);
    }
  }
  if (deliver.length === 0) {
    // A first pull at a new version closes the last one's count; polls at the same version write nothing.
    const c = s.counters();
    if (weightVersion !== c.pullVersion || s.host.run() !== c.pullRun) s.bump((c) => ({ ...c, ...measured(c, weightVersion, 0, s.host.run()) }));
    return { success: false, message: "No data available to read", data: { data: [], meta_info: metaInfo([], [], null, [], weightVersion, []) } };
  }
  const cursor = s.sql
    .exec<{ cursor: number }>(
      "INSERT INTO buf_pulls (created_at, group_ids, report) VALUES (?, ?, ?) RETURNING cursor",
      now,
      JSON.stringify(deliver),
      `{"consumer":${JSON.stringify(weightVersion)},"groups":[${reportTexts.join(",")}]}`,
    )
    .one().cursor;
  const staleSet = new Set(staleGroups);
  for (const id of deliver) {
    s.sql.exec("UPDATE buf_groups SET state = 'delivered', pull_cursor = ?, stale = ?, ready_seq = NULL WHERE group_id = ?", cursor, staleSet.has(id) ? 1 : 0, id);
  }
  // Before keepDelivered: the rows it deletes leave the bytes held only, not those kept for re-reads.
  clearIncompleteSessions(s, deliver);
  keepDelivered(s, deliver);
  const items = groupItems(s, deliver, staleSet);
  const partial = new Set(reports.filter((r) => r.partial).map((r) => r.group_id));
  for (const [i, id] of deliver.entries()) {
    const own = items.filter((item) => item.instance_id === id);
    const reason = staleSet.has(id) ? "stale_flagged" : partial.has(id) ? "partial" : "complete";
    recordOutcome(s, id, "delivered", reason, staleSet.has(id), own.length, cursor, now, { consumer: weightVersion, report: reports[i]! });
  }
  const usable = reports.reduce((n, r) => n + r.usable_sessions, 0);
  s.bump((c) => ({ ...c, delivered: c.delivered + deliver.length, partialDelivered: c.partialDelivered + partial.size, ...measured(c, weightVersion, usable, s.host.run()) }));
  forgetOldPulls(s, cursor, now);
  return {
    success: true,
    message: `Successfully read ${items.length} items`,
    data: { data: items, meta_info: metaInfo(items, deliver, cursor, staleGroups, weightVersion, reports) },
  };
}

/** The pull with this cursor again, exactly as it was handed out. */
export function reread(s: BufferState, cursor: number): Reply<GetRolloutDataResponse> {
  const pull = s.sql.exec<{ group_ids: string; report: string | null }>("SELECT group_ids, report FROM buf_pulls WHERE cursor = ?", cursor).toArray()[0];
  if (!pull) return fail(404, "unknown_cursor", `Pull ${cursor} is not kept: the engine keeps the last ${KEPT_PULLS} pulls.`);
  const groups = JSON.parse(pull.group_ids) as string[];
  const stale = new Set(
    groups.filter((id) => s.sql.exec<{ stale: number }>("SELECT stale FROM buf_groups WHERE group_id = ?", id).toArray()[0]?.stale === 1),
  );
  const items = groupItems(s, groups, stale);
  // A pull made before reports were kept has none.
  const report = pull.report === null ? { consumer: null, groups: [] } : (JSON.parse(pull.report) as { consumer: number | null; groups: GroupReport[] });
  return ok({
    success: true,
    message: `Successfully read ${items.length} items`,
    data: { data: items, meta_info: metaInfo(items, groups, cursor, [...stale], report.consumer, report.groups) },
  });
}

/** The newest pull's per-group report, most lagging groups first: one row, whatever the buffer holds. */
export function lastPull(s: BufferState): LastPull | null {
  const p = s.sql.exec<{ cursor: number; created_at: number; report: string | null }>("SELECT cursor, created_at, report FROM buf_pulls ORDER BY cursor DESC LIMIT 1").toArray()[0];
  if (p === undefined || p.report === null) return null;
  const report = JSON.parse(p.report) as { consumer: number | null; groups: GroupReport[] };
  const worst = [...report.groups].sort((a, b) => (b.lag_versions ?? -1) - (a.lag_versions ?? -1) || b.queued_seconds - a.queued_seconds);
  return { cursor: p.cursor, pulled_at: p.created_at / 1000, consumer_weight_version: report.consumer, group_count: report.groups.length, groups: worst.slice(0, LAST_PULL_GROUPS) };
}

/**
 * Steps of the groups' completed sessions, ordered by session and step, terminal rewards
 * propagated. A complete group's failed sessions are left out; a partial group's are in, with
 * usable false, so that the trainer sees the whole group and its mask.
 */
function groupItems(s: BufferState, groups: string[], stale: Set<string>) {
  return groups.flatMap((id) => {
    const steps = s.sql
      .exec<StoredStep & { terminal_reward: number | null; failed: number }>(
        `SELECT s.*, x.terminal_reward, x.failed FROM buf_steps s JOIN buf_sessions x ON x.session_id = s.session_id
         WHERE s.group_id = ?1 AND x.completed = 1 AND (x.failed = 0 OR (SELECT partial FROM buf_groups WHERE group_id = ?1) = 1)
         ORDER BY s.session_id, s.step_index, s.pk`,
        id,
      )
      .toArray();
    return steps.map((step) => toItem(step, step.terminal_reward, stale.has(id), step.failed === 1));
  });
}

/** Sessions that never completed are not part of a delivered group: the upstream may forget them. */
function clearIncompleteSessions(s: BufferState, groups: string[]): void {
  const sessions = s.sql
    .exec<{ session_id: string; group_id: string }>("SELECT session_id, group_id FROM buf_sessions WHERE group_id IN (SELECT value FROM json_each(?)) AND completed = 0", JSON.stringify(groups))
    .toArray()
    .map((o): SessionOf => ({ session: o.session_id, group: o.group_id }));
  // By the groups, not the sessions' ids: a group may have any number of sessions that never completed.
  deleteSteps(s, "group_id IN (SELECT value FROM json_each(?)) AND session_id IN (SELECT session_id FROM buf_sessions WHERE group_id = buf_steps.group_id AND completed = 0)", JSON.stringify(groups));
  clearSessions(s, sessions, "incomplete_sessions_of_delivered_group");
}

/** Forgets the steps of pulls no longer kept; their sessions are remembered for SESSION_MEMORY_MS more. */
function forgetOldPulls(s: BufferState, latest: number, now: number): void {
  const last = latest - KEPT_PULLS;
  deletePulled(s, last);
  s.sql.exec("UPDATE buf_groups SET pull_cursor = NULL, sessions_expire_at = ? WHERE pull_cursor <= ?", now + SESSION_MEMORY_MS, last);
  s.sql.exec("DELETE FROM buf_pulls WHERE cursor <= ?", last);
}

