/**
 * The rollout buffer inside an engine: step rows grouped by group_id until group_size sessions
 * have completed, then handed to the trainer whole, once. Runs inside the engine's transactions;
 * every query is an index probe or walks only the rows it returns, so the cost of a pull does
 * not grow with the number of pending groups.
 */
import type { BufferConfig, BufferStats, GetRolloutDataResponse, GroupReport, LastPull, PostStepsResponse, StepRow } from "../protocol/buffer";
import { DEFAULT_BUFFER_CONFIG, LAST_PULL_GROUPS } from "../protocol/buffer";
import type { CommandBody } from "../protocol/commands";
import { formatBytes, jsonStringBytes, MAX_JSON_BYTES_PER_UNIT, MAX_STORED_BYTES, storedTooLarge, utf8Bytes } from "../protocol/limits";
import { groupReport, isStale, metaInfo, toItem, type ReportedGroup, type StoredStep } from "./buffer-items";
import type { OutboxItem } from "./outbox";
import { paceAdmits, type PaceState } from "./pacing";
import { fail, ok, type Reply } from "./reply";

/** Pulls that can be read again by cursor; older ones are forgotten (their rows are in D1). */
export const KEPT_PULLS = 4;
/**
 * A pull hands out at most this many groups, whatever max_groups asks. The pull's row keeps their
 * ids as JSON: 1000 ids of at most 256 characters, each at most 6 bytes escaped, are at most
 * 1,538,000 bytes with quotes and commas, under MAX_STORED_BYTES.
 */
export const MAX_GROUPS_PER_PULL = 1000;
/** The TTL alarm drops at most this many groups per run, then re-arms at once. */
const DROP_BATCH = 500;
/**
 * How long a session is remembered once its group's steps are gone (the group dropped, or
 * delivered and its pull no longer kept): while it is, the session joins no other group and
 * its rows sent again count as duplicates, not late. Far beyond any retry window (a client
 * retries a batch for minutes), and a bound on the memory: the sessions of groups whose steps
 * went in the last 7 days, besides those of live groups. The group's own row goes with its
 * sessions: after that its id is free, like its session ids, and a row naming it starts a new
 * group. The alarm forgets at most FORGET_BATCH groups per run, then re-arms at once.
 */
export const SESSION_MEMORY_MS = 7 * 24 * 3600 * 1000;
const FORGET_BATCH = 500;

/** A row that may be stored, with the JSON of its messages and of its free-form fields. */
export type CheckedStep = { row: StepRow; messages: string; extra: string };

/** The row with its JSON texts: the messages, and the free-form fields (every one the buffer has no column for). */
function checkedStep(row: StepRow): CheckedStep {
  const { session_id: _s, group_id: _g, step_index: _i, messages, response: _r, reward: _w, truncated: _t, is_session_completed: _c, weight_version: _v, failed_infra: _f, ...extra } = row;
  return { row, messages: JSON.stringify(messages), extra: JSON.stringify(extra) };
}

/**
 * Why a row is too large, or null. Its messages and response count against max_message_bytes
 * in bytes of UTF-8. Its outbox record holds the messages', response's and extra fields' texts
 * escaped once more inside its JSON, and that record is the largest thing the row becomes (the
 * engine's row and D1's hold them unescaped): it must fit MAX_STORED_BYTES. Short rows are not
 * counted: each UTF-16 unit is at most 3 bytes of UTF-8 and at most 6 escaped.
 */
function sizeRefusal(at: string, step: CheckedStep, maxMessageBytes: number): string | null {
  const { messages, extra } = step;
  const { response } = step.row;
  if ((messages.length + response.length) * 3 > maxMessageBytes) {
    const bytes = utf8Bytes(messages) + utf8Bytes(response);
    if (bytes > maxMessageBytes) {
      return `${at}: messages and response are ${formatBytes(bytes)} of UTF-8; this engine takes at most ${formatBytes(maxMessageBytes)} per row (max_message_bytes)`;
    }
  }
  if ((messages.length + response.length + extra.length) * MAX_JSON_BYTES_PER_UNIT + 6 <= MAX_STORED_BYTES) return null;
  return storedTooLarge(`${at} (its messages, response and extra fields)`, jsonStringBytes(messages) + jsonStringBytes(response) + jsonStringBytes(extra));
}

/**
 * The consumption measure after a pull of `sessions` at version `version`: a pull at a new
 * version closes the count of the last one, spread over the versions it moved on by.
 */
function measured(c: Counters, version: number | null, sessions: number): Pick<Counters, "pullVersion" | "pulledAtVersion" | "perVersion"> {
  if (version === c.pullVersion) return { pullVersion: version, pulledAtVersion: c.pulledAtVersion + sessions, perVersion: c.perVersion };
  const moved = version !== null && c.pullVersion !== null ? version - c.pullVersion : 0;
  const perVersion = moved > 0 && c.pulledAtVersion > 0 ? c.pulledAtVersion / moved : c.perVersion;
  return { pullVersion: version, pulledAtVersion: sessions, perVersion };
}

/** The order Array.prototype.sort gives strings by default. */
const byCodeUnits = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

type SessionOf = { session: string; group: string };
type ClearSessions = Extract<CommandBody, { kind: "clear_sessions" }>;
type ClearSessionsReason = ClearSessions["reason"];

/**
 * Bytes of ids per clear_sessions command. A group's sessions are unbounded in number, and so
 * are a drop's (up to DROP_BATCH groups); each command is a row of the engine's command queue,
 * which must fit MAX_STORED_BYTES, and a request the agent posts to the inference upstream.
 */
const CLEAR_SESSIONS_BYTES = 256 * 1024;

/** The commands that ask to clear `sessions`: their ids sorted, with their groups', in chunks of at most CLEAR_SESSIONS_BYTES. */
export function clearSessionsCommands(sessions: readonly SessionOf[], reason: ClearSessionsReason): ClearSessions[] {
  const out: ClearSessions[] = [];
  let ids: string[] = [];
  let groups = new Set<string>();
  let bytes = 0;
  const flush = () => {
    if (ids.length > 0) out.push({ kind: "clear_sessions", session_ids: ids.sort(), group_ids: [...groups].sort(), reason });
    ids = [];
    groups = new Set();
    bytes = 0;
  };
  // By group, so that a chunk names as few groups as it can.
  const ordered = [...sessions].sort((a, b) => byCodeUnits(a.group, b.group) || byCodeUnits(a.session, b.session));
  for (const { session, group } of ordered) {
    // Each id as a JSON string and its comma.
    const sessionBytes = jsonStringBytes(session) + 1;
    const groupBytes = jsonStringBytes(group) + 1;
    if (ids.length > 0 && bytes + sessionBytes + (groups.has(group) ? 0 : groupBytes) > CLEAR_SESSIONS_BYTES) flush();
    bytes += sessionBytes + (groups.has(group) ? 0 : groupBytes);
    ids.push(session);
    groups.add(group);
  }
  flush();
  return out;
}

type GroupRow = ReportedGroup & { state: "pending" | "ready" | "delivered" | "dropped"; stale: number };
const GROUP_COLUMNS = "group_id, state, completed_sessions, failed_sessions, partial, min_weight_version, first_row_at, ready_at, last_row_at, stale";
type Counters = {
  delivered: number;
  dropped: number;
  stale: number;
  late: number;
  duplicates: number;
  failed: number;
  partialDelivered: number;
  partialDropped: number;
  paced: number;
  /** The consumer's version at its last pull, the sessions it pulled at that version, and the last full version's count. */
  pullVersion: number | null;
  pulledAtVersion: number;
  perVersion: number | null;
  nextReadySeq: number;
  nextOutcomeSeq: number;
};
const NO_COUNTERS: Counters = {
  delivered: 0,
  dropped: 0,
  stale: 0,
  late: 0,
  duplicates: 0,
  failed: 0,
  partialDelivered: 0,
  partialDropped: 0,
  paced: 0,
  pullVersion: null,
  pulledAtVersion: 0,
  perVersion: null,
  nextReadySeq: 1,
  nextOutcomeSeq: 1,
};

export type BufferHost = {
  engine(): string;
  /** The trainer's weight version now (update_engine_status). */
  weightVersion(): number | null;
  /** The current run of the engine's history: a group belongs to the run it began in. */
  run(): number;
  now(): number;
  getKv<T>(k: string): T | null;
  setKv(k: string, v: unknown): void;
  outbox(item: OutboxItem): void;
  enqueue(body: CommandBody): void;
};

export class RolloutBuffer {
  private activeMemo: boolean | null = null;
  /** Read on every claim under pace: remembered, and dropped with a rolled-back transaction. */
  private configMemo: BufferConfig | null = null;

  /** `sql` has the buffer's tables (schema.ts). */
  constructor(
    private readonly sql: SqlStorage,
    private readonly host: BufferHost,
  ) {}

  config(): BufferConfig {
    return (this.configMemo ??= this.storedConfig());
  }

  private storedConfig(): BufferConfig {
    const stored = { ...DEFAULT_BUFFER_CONFIG, ...(this.host.getKv<Partial<BufferConfig>>("buffer_config") ?? {}) };
    // Set before max_message_bytes had its ceiling, a config may hold more than the stores do.
    return { ...stored, max_message_bytes: Math.min(stored.max_message_bytes, MAX_STORED_BYTES) };
  }

  /** Whether the buffer is in use: AgentJet trajectories join groups only then. */
  active(): boolean {
    // Read on every end_episode, and it only ever turns on: remembered once read.
    return (this.activeMemo ??= this.host.getKv<boolean>("buffer_active") === true);
  }

  /** Drops what is remembered from storage: the transaction that wrote it rolled back. */
  forget(): void {
    this.activeMemo = null;
    this.configMemo = null;
  }

  /** Changes the config; a smaller group_size makes groups that now have enough sessions ready. */
  configure(patch: Partial<BufferConfig>): BufferConfig {
    const next = { ...this.config(), ...patch };
    this.host.setKv("buffer_config", next);
    this.configMemo = next;
    if (patch.group_size !== undefined) {
      const enough = this.sql
        .exec<{ group_id: string }>("SELECT group_id FROM buf_groups WHERE state = 'pending' AND completed_sessions >= ? ORDER BY last_row_at", next.group_size)
        .toArray();
      for (const g of enough) this.markReady(g.group_id);
    }
    return next;
  }

  startRollout(groupSize: number, restart: boolean): void {
    if (restart) {
      // As the seed does, a restart also forgets which groups were dropped, and so their sessions.
      const gone = "SELECT group_id FROM buf_groups WHERE state IN ('pending', 'ready', 'dropped')";
      this.sql.exec(`DELETE FROM buf_steps WHERE group_id IN (${gone})`);
      this.sql.exec(`DELETE FROM buf_sessions WHERE group_id IN (${gone})`);
      this.sql.exec("DELETE FROM buf_groups WHERE state IN ('pending', 'ready', 'dropped')");
    }
    this.host.setKv("buffer_active", true);
    this.activeMemo = true;
    this.configure({ group_size: groupSize });
  }

  /**
   * Checks a batch before anything is written: sizes, and that no session changes group.
   * Returns the rows with their JSON texts, made once for the engine's row, its outbox record
   * and D1, or the failure when any row may not be stored.
   */
  check(rows: StepRow[]): Reply<CheckedStep[]> {
    const { max_message_bytes } = this.config();
    const groupOf = new Map<string, string>();
    const checked: CheckedStep[] = [];
    for (const [i, r] of rows.entries()) {
      const step = checkedStep(r);
      const refused = sizeRefusal(`steps.${i}`, step, max_message_bytes);
      if (refused !== null) return fail(413, "payload_too_large", refused);
      const known =
        groupOf.get(r.session_id) ??
        this.sql.exec<{ group_id: string }>("SELECT group_id FROM buf_sessions WHERE session_id = ?", r.session_id).toArray()[0]?.group_id;
      if (known !== undefined && known !== r.group_id) {
        return fail(422, "invalid_request", `steps.${i}: session ${r.session_id} belongs to group ${known}, not ${r.group_id}`);
      }
      groupOf.set(r.session_id, r.group_id);
      checked.push(step);
    }
    const paced = this.paceRefusal(rows);
    if (paced !== null) return paced;
    return ok(checked);
  }

  /**
   * Under pace, a batch that opens new groups while the work under way could be consumed too
   * late is refused whole (503 paced, changing nothing; the worker sends it again). Sessions of
   * groups already begun are always taken: holding them back would stop those groups from
   * completing and so hold the oldest work back for good.
   */
  private paceRefusal(rows: StepRow[]): Reply<never> | null {
    const cfg = this.config();
    if (cfg.staleness_policy !== "pace") return null;
    const opening = new Set<string>();
    for (const r of rows) {
      if (opening.has(r.session_id) || this.group(r.group_id) !== null) continue;
      opening.add(r.session_id);
    }
    if (opening.size === 0) return null;
    const state = this.paceState(null, true);
    if (paceAdmits(state, opening.size)) return null;
    this.bump((c) => ({ ...c, paced: c.paced + 1 }));
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
  paceState(claims: { count: number; oldest: number | null } | null, withPending: boolean, fallbackPerVersion: number | null = null): PaceState {
    const cfg = this.config();
    const c = this.counters();
    const version = this.host.weightVersion();
    const sessions = this.sql
      .exec<{ n: number }>(
        "SELECT COUNT(*) AS n FROM buf_sessions WHERE failed = 0 AND group_id IN (SELECT group_id FROM buf_groups WHERE state IN ('pending', 'ready'))",
      )
      .one().n;
    const oldest = this.sql
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

  /** Counts a claim that pace held back. */
  notePaced(): void {
    this.bump((c) => ({ ...c, paced: c.paced + 1 }));
  }

  /** Stores a checked batch. Idempotent by (session_id, step_index). */
  ingest(rows: CheckedStep[]): PostStepsResponse {
    const now = this.host.now();
    const run = this.host.run();
    const { group_size } = this.config();
    let accepted = 0;
    let duplicates = 0;
    let late = 0;
    const lateSessions: SessionOf[] = [];
    const ready: string[] = [];
    for (const { row: r, messages, extra } of rows) {
      const group = this.group(r.group_id);
      if (group !== null && (group.state === "dropped" || group.state === "delivered")) {
        if (this.storedBefore(r.session_id, r.step_index)) {
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
      const stored = this.sql
        .exec<{ pk: number }>(
          `INSERT INTO buf_steps (uid, session_id, step_index, group_id, messages, response, reward, truncated, is_session_completed, weight_version, extra, created_at)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (session_id, step_index) DO NOTHING RETURNING pk`,
          uid,
          session_id,
          step_index,
          group_id,
          messages,
          response,
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
      // A row carries its group's run, which a row arriving after a new run began did not begin.
      const groupRun = this.sql
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
      this.sql.exec(
        `INSERT INTO buf_sessions (session_id, group_id, max_step) VALUES (?, ?, ?)
         ON CONFLICT (session_id) DO UPDATE SET max_step = excluded.max_step WHERE buf_sessions.max_step IS NULL OR buf_sessions.max_step < excluded.max_step`,
        session_id,
        group_id,
        step_index,
      );
      if (failed_infra) this.markFailed(session_id, group_id, group_size);
      if (is_session_completed) {
        const first = this.sql
          .exec<{ failed: number }>("UPDATE buf_sessions SET completed = 1, terminal_reward = ? WHERE session_id = ? AND completed = 0 RETURNING failed", reward, session_id)
          .toArray();
        // A failed session is kept, but it does not count toward group_size.
        if (first.length > 0 && first[0]!.failed === 0) {
          const g = this.sql
            .exec<{ completed_sessions: number; state: string }>(
              "UPDATE buf_groups SET completed_sessions = completed_sessions + 1 WHERE group_id = ? RETURNING completed_sessions, state",
              group_id,
            )
            .one();
          if (g.state === "pending" && g.completed_sessions >= group_size) {
            this.markReady(group_id);
            ready.push(group_id);
          }
        }
      }
      this.host.outbox({
        kind: "buffer_step",
        row: {
          engine: this.host.engine(),
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
    this.clearSessions(lateSessions, "late_rows_from_dropped_groups");
    this.bump((c) => ({ ...c, late: c.late + late, duplicates: c.duplicates + duplicates }));
    return { success: true, accepted, duplicates, late, groups_ready: ready };
  }

  /** Hands out ready groups, oldest first, applying the staleness policy. */
  pull(maxGroups: number | null, weightVersion: number | null): GetRolloutDataResponse {
    const now = this.host.now();
    const cfg = this.config();
    const candidates = this.sql
      .exec<GroupRow>(
        `SELECT ${GROUP_COLUMNS} FROM buf_groups WHERE state = 'ready' ORDER BY ready_seq LIMIT ?`,
        Math.min(maxGroups ?? MAX_GROUPS_PER_PULL, MAX_GROUPS_PER_PULL),
      )
      .toArray();
    const deliver: string[] = [];
    const staleGroups: string[] = [];
    const reports: GroupReport[] = [];
    for (const g of candidates) {
      const stale = isStale(g.min_weight_version, weightVersion, cfg.max_staleness);
      if (stale) this.bump((c) => ({ ...c, stale: c.stale + 1 }));
      if (stale && cfg.staleness_policy === "drop") {
        this.drop([g.group_id], "stale_group", now);
        continue;
      }
      if (stale) staleGroups.push(g.group_id);
      deliver.push(g.group_id);
      reports.push(groupReport(g, weightVersion, now));
    }
    if (deliver.length === 0) {
      // A first pull at a new version closes the last one's count; polls at the same version write nothing.
      if (weightVersion !== this.counters().pullVersion) this.bump((c) => ({ ...c, ...measured(c, weightVersion, 0) }));
      return { success: false, message: "No data available to read", data: { data: [], meta_info: metaInfo([], [], null, [], weightVersion, []) } };
    }
    const cursor = this.sql
      .exec<{ cursor: number }>(
        "INSERT INTO buf_pulls (created_at, group_ids, report) VALUES (?, ?, ?) RETURNING cursor",
        now,
        JSON.stringify(deliver),
        JSON.stringify({ consumer: weightVersion, groups: reports }),
      )
      .one().cursor;
    const staleSet = new Set(staleGroups);
    for (const id of deliver) {
      this.sql.exec("UPDATE buf_groups SET state = 'delivered', pull_cursor = ?, stale = ?, ready_seq = NULL WHERE group_id = ?", cursor, staleSet.has(id) ? 1 : 0, id);
    }
    this.clearIncompleteSessions(deliver);
    const items = this.items(deliver, staleSet);
    const partial = new Set(reports.filter((r) => r.partial).map((r) => r.group_id));
    for (const [i, id] of deliver.entries()) {
      const own = items.filter((item) => item.instance_id === id);
      const reason = staleSet.has(id) ? "stale_flagged" : partial.has(id) ? "partial" : "complete";
      this.recordOutcome(id, "delivered", reason, staleSet.has(id), own.length, cursor, now, { consumer: weightVersion, report: reports[i]! });
    }
    const usable = reports.reduce((n, r) => n + r.usable_sessions, 0);
    this.bump((c) => ({ ...c, delivered: c.delivered + deliver.length, partialDelivered: c.partialDelivered + partial.size, ...measured(c, weightVersion, usable) }));
    this.forgetOldPulls(cursor, now);
    return {
      success: true,
      message: `Successfully read ${items.length} items`,
      data: { data: items, meta_info: metaInfo(items, deliver, cursor, staleGroups, weightVersion, reports) },
    };
  }

  /** The pull with this cursor again, exactly as it was handed out. */
  reread(cursor: number): Reply<GetRolloutDataResponse> {
    const pull = this.sql.exec<{ group_ids: string; report: string | null }>("SELECT group_ids, report FROM buf_pulls WHERE cursor = ?", cursor).toArray()[0];
    if (!pull) return fail(404, "unknown_cursor", `Pull ${cursor} is not kept: the engine keeps the last ${KEPT_PULLS} pulls.`);
    const groups = JSON.parse(pull.group_ids) as string[];
    const stale = new Set(
      groups.filter((id) => this.sql.exec<{ stale: number }>("SELECT stale FROM buf_groups WHERE group_id = ?", id).toArray()[0]?.stale === 1),
    );
    const items = this.items(groups, stale);
    // A pull made before reports were kept has none.
    const report = pull.report === null ? { consumer: null, groups: [] } : (JSON.parse(pull.report) as { consumer: number | null; groups: GroupReport[] });
    return ok({
      success: true,
      message: `Successfully read ${items.length} items`,
      data: { data: items, meta_info: metaInfo(items, groups, cursor, [...stale], report.consumer, report.groups) },
    });
  }

  /**
   * Decides the incomplete groups that saw no row for the TTL: under partial_groups deliver, a
   * group with a usable session becomes ready, partial (its items carry the usable mask); the
   * others are dropped. Returns how many were decided.
   */
  dropExpired(now: number): number {
    const { ttl_seconds, partial_groups } = this.config();
    if (ttl_seconds <= 0) return 0;
    const expired = this.sql
      .exec<{ group_id: string; completed_sessions: number }>(
        "SELECT group_id, completed_sessions FROM buf_groups WHERE state = 'pending' AND last_row_at <= ? ORDER BY last_row_at LIMIT ?",
        now - ttl_seconds * 1000,
        DROP_BATCH,
      )
      .toArray();
    if (expired.length === 0) return 0;
    const dropped: string[] = [];
    for (const g of expired) {
      if (partial_groups === "deliver" && g.completed_sessions > 0) this.markReady(g.group_id, true);
      else dropped.push(g.group_id);
    }
    if (dropped.length > 0) {
      this.drop(dropped, "incomplete_group_ttl", now);
      this.bump((c) => ({ ...c, partialDropped: c.partialDropped + dropped.length }));
    }
    return expired.length;
  }

  /**
   * Forgets the groups whose memory ran out (SESSION_MEMORY_MS): their sessions and their own
   * rows, whose steps went before. Only decided groups have a deadline. Returns how many went.
   */
  forgetDecided(now: number): number {
    const due = this.sql
      .exec<{ group_id: string }>(
        "SELECT group_id FROM buf_groups WHERE sessions_expire_at IS NOT NULL AND sessions_expire_at <= ? ORDER BY sessions_expire_at LIMIT ?",
        now,
        FORGET_BATCH,
      )
      .toArray();
    for (const g of due) {
      this.sql.exec("DELETE FROM buf_sessions WHERE group_id = ?", g.group_id);
      this.sql.exec("DELETE FROM buf_groups WHERE group_id = ? AND state IN ('delivered', 'dropped')", g.group_id);
    }
    return due.length;
  }

  /** The buffer's next deadline: when the oldest pending group expires (if the TTL is on), or sessions are to be forgotten. */
  nextExpiry(): number | null {
    const { ttl_seconds } = this.config();
    const oldest = ttl_seconds <= 0 ? null : this.sql.exec<{ t: number | null }>("SELECT MIN(last_row_at) AS t FROM buf_groups WHERE state = 'pending'").one().t;
    const forget = this.sql.exec<{ t: number | null }>("SELECT MIN(sessions_expire_at) AS t FROM buf_groups WHERE sessions_expire_at IS NOT NULL").one().t;
    const ttlAt = oldest === null ? null : oldest + ttl_seconds * 1000;
    if (ttlAt === null || forget === null) return ttlAt ?? forget;
    return Math.min(ttlAt, forget);
  }

  stats(): BufferStats {
    const count = (sql: string) => this.sql.exec<{ n: number }>(sql).one().n;
    const c = this.counters();
    return {
      pending_groups: count("SELECT COUNT(*) AS n FROM buf_groups WHERE state = 'pending'"),
      ready_groups: count("SELECT COUNT(*) AS n FROM buf_groups WHERE state = 'ready'"),
      delivered_groups: c.delivered,
      dropped_groups: c.dropped,
      stale_groups: c.stale,
      pending_steps: count("SELECT COUNT(*) AS n FROM buf_steps WHERE group_id IN (SELECT group_id FROM buf_groups WHERE state = 'pending')"),
      late_rows_ignored: c.late,
      duplicate_rows: c.duplicates,
      failed_sessions: c.failed,
      partial_groups_delivered: c.partialDelivered,
      partial_groups_dropped: c.partialDropped,
      measured_rollouts_per_version: c.perVersion,
      paced_refusals: c.paced,
    };
  }

  /** The newest pull's per-group report, most lagging groups first: one row, whatever the buffer holds. */
  lastPull(): LastPull | null {
    const p = this.sql.exec<{ cursor: number; created_at: number; report: string | null }>("SELECT cursor, created_at, report FROM buf_pulls ORDER BY cursor DESC LIMIT 1").toArray()[0];
    if (p === undefined || p.report === null) return null;
    const report = JSON.parse(p.report) as { consumer: number | null; groups: GroupReport[] };
    const worst = [...report.groups].sort((a, b) => (b.lag_versions ?? -1) - (a.lag_versions ?? -1) || b.queued_seconds - a.queued_seconds);
    return { cursor: p.cursor, pulled_at: p.created_at / 1000, consumer_weight_version: report.consumer, group_count: report.groups.length, groups: worst.slice(0, LAST_PULL_GROUPS) };
  }

  // ---------------------------------------------------------------- internals

  /** Whether this row of a session was stored before: its step is at most the highest the session stored. */
  private storedBefore(sessionId: string, stepIndex: number): boolean {
    const max = this.sql.exec<{ max_step: number | null }>("SELECT max_step FROM buf_sessions WHERE session_id = ?", sessionId).toArray()[0]?.max_step ?? null;
    return max !== null && stepIndex <= max;
  }

  private group(id: string): GroupRow | null {
    return this.sql.exec<GroupRow>(`SELECT ${GROUP_COLUMNS} FROM buf_groups WHERE group_id = ?`, id).toArray()[0] ?? null;
  }

  private markReady(groupId: string, partial = false): void {
    const seq = this.bump((c) => ({ ...c, nextReadySeq: c.nextReadySeq + 1 })).nextReadySeq - 1;
    this.sql.exec("UPDATE buf_groups SET state = 'ready', ready_seq = ?, ready_at = ?, partial = ? WHERE group_id = ?", seq, this.host.now(), partial ? 1 : 0, groupId);
  }

  /**
   * Marks a session failed_infra, once: its group counts it as failed, and no longer as usable
   * if it had completed, so that a ready group short of group_size usable sessions waits again.
   */
  private markFailed(sessionId: string, groupId: string, groupSize: number): void {
    const newly = this.sql.exec<{ completed: number }>("UPDATE buf_sessions SET failed = 1 WHERE session_id = ? AND failed = 0 RETURNING completed", sessionId).toArray()[0];
    if (newly === undefined) return;
    const g = this.sql
      .exec<{ completed_sessions: number; state: string }>(
        "UPDATE buf_groups SET failed_sessions = failed_sessions + 1, completed_sessions = completed_sessions - ? WHERE group_id = ? RETURNING completed_sessions, state",
        newly.completed,
        groupId,
      )
      .one();
    if (g.state === "ready" && g.completed_sessions < groupSize) {
      this.sql.exec("UPDATE buf_groups SET state = 'pending', ready_seq = NULL, ready_at = NULL WHERE group_id = ?", groupId);
    }
    this.bump((c) => ({ ...c, failed: c.failed + 1 }));
  }

  /**
   * Steps of the groups' completed sessions, ordered by session and step, terminal rewards
   * propagated. A complete group's failed sessions are left out; a partial group's are in, with
   * usable false, so that the trainer sees the whole group and its mask.
   */
  private items(groups: string[], stale: Set<string>) {
    return groups.flatMap((id) => {
      const steps = this.sql
        .exec<StoredStep & { terminal_reward: number | null; failed: number }>(
          `SELECT s.*, x.terminal_reward, x.failed FROM buf_steps s JOIN buf_sessions x ON x.session_id = s.session_id
           WHERE s.group_id = ?1 AND x.completed = 1 AND (x.failed = 0 OR (SELECT partial FROM buf_groups WHERE group_id = ?1) = 1)
           ORDER BY s.session_id, s.step_index, s.pk`,
          id,
        )
        .toArray();
      return steps.map((s) => toItem(s, s.terminal_reward, stale.has(id), s.failed === 1));
    });
  }

  /** Sessions that never completed are not part of a delivered group: the upstream may forget them. */
  private clearIncompleteSessions(groups: string[]): void {
    const sessions: SessionOf[] = [];
    for (const id of groups) {
      const open = this.sql.exec<{ session_id: string }>("SELECT session_id FROM buf_sessions WHERE group_id = ? AND completed = 0", id).toArray();
      for (const s of open) {
        sessions.push({ session: s.session_id, group: id });
        this.sql.exec("DELETE FROM buf_steps WHERE session_id = ?", s.session_id);
      }
    }
    this.clearSessions(sessions, "incomplete_sessions_of_delivered_group");
  }

  private drop(groups: string[], reason: "incomplete_group_ttl" | "stale_group", now: number): void {
    const sessions: SessionOf[] = [];
    for (const id of groups) {
      for (const s of this.sql.exec<{ session_id: string }>("SELECT session_id FROM buf_sessions WHERE group_id = ?", id)) sessions.push({ session: s.session_id, group: id });
      const steps = this.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM buf_steps WHERE group_id = ?", id).one().n;
      this.recordOutcome(id, "dropped", reason, reason === "stale_group", steps, null, now);
      this.sql.exec("DELETE FROM buf_steps WHERE group_id = ?", id);
      this.sql.exec(
        "UPDATE buf_groups SET state = 'dropped', ready_seq = NULL, stale = ?, sessions_expire_at = ? WHERE group_id = ?",
        reason === "stale_group" ? 1 : 0,
        now + SESSION_MEMORY_MS,
        id,
      );
    }
    this.bump((c) => ({ ...c, dropped: c.dropped + groups.length }));
    this.clearSessions(sessions, reason);
  }

  private clearSessions(sessions: SessionOf[], reason: ClearSessionsReason): void {
    for (const body of clearSessionsCommands(sessions, reason)) this.host.enqueue(body);
  }

  /** The group's outcome on its way to D1; `consumed`: a delivered group's report and the consumer's version. */
  private recordOutcome(
    groupId: string,
    outcome: "delivered" | "dropped",
    reason: string,
    stale: boolean,
    steps: number,
    cursor: number | null,
    now: number,
    consumed: { consumer: number | null; report: GroupReport } | null = null,
  ): void {
    const seq = this.bump((c) => ({ ...c, nextOutcomeSeq: c.nextOutcomeSeq + 1 })).nextOutcomeSeq - 1;
    const agg = this.sql
      .exec<{ sessions: number; avg: number | null; minwv: number | null; run: number | null; failed: number; partial: number }>(
        `SELECT (SELECT COUNT(*) FROM buf_sessions WHERE group_id = ?1) AS sessions, (SELECT AVG(reward) FROM buf_steps WHERE group_id = ?1) AS avg,
           g.min_weight_version AS minwv, g.run AS run, g.failed_sessions AS failed, g.partial AS partial FROM buf_groups g WHERE g.group_id = ?1`,
        groupId,
      )
      .one();
    this.host.outbox({
      kind: "buffer_group",
      row: {
        engine: this.host.engine(),
        seq,
        groupId,
        run: agg.run,
        outcome,
        reason,
        stale,
        sessions: agg.sessions,
        steps,
        avgReward: agg.avg,
        minWeightVersion: agg.minwv,
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

  /** Forgets the steps of pulls no longer kept; their sessions are remembered for SESSION_MEMORY_MS more. */
  private forgetOldPulls(latest: number, now: number): void {
    const old = this.sql.exec<{ cursor: number }>("SELECT cursor FROM buf_pulls WHERE cursor <= ?", latest - KEPT_PULLS).toArray();
    for (const p of old) {
      const groups = "SELECT group_id FROM buf_groups WHERE pull_cursor = ?";
      this.sql.exec(`DELETE FROM buf_steps WHERE group_id IN (${groups})`, p.cursor);
      this.sql.exec("UPDATE buf_groups SET pull_cursor = NULL, sessions_expire_at = ? WHERE pull_cursor = ?", now + SESSION_MEMORY_MS, p.cursor);
      this.sql.exec("DELETE FROM buf_pulls WHERE cursor = ?", p.cursor);
    }
  }

  private counters(): Counters {
    return { ...NO_COUNTERS, ...(this.host.getKv<Partial<Counters>>("buffer_counters") ?? {}) };
  }

  /** Read-modify-write of the counters, so nested updates never overwrite each other. */
  private bump(change: (c: Counters) => Counters): Counters {
    const next = change(this.counters());
    this.host.setKv("buffer_counters", next);
    return next;
  }
}
