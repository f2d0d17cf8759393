/**
 * What every part of the rollout buffer shares: its tables, the engine it serves, its config and
 * its counters. The counters live in one KV entry, so each change is a read-modify-write
 * (bump) that nested changes cannot overwrite.
 */
import type { BufferConfig } from "../protocol/buffer";
import { DEFAULT_BUFFER_CONFIG } from "../protocol/buffer";
import type { CommandBody } from "../protocol/commands";
import { MAX_STORED_BYTES } from "../protocol/limits";
import type { ReportedGroup } from "./buffer-items";
import type { OutboxItem } from "./outbox";

/** Train rollouts begun by claims and not consumed: how many, and the oldest weight version they began at. */
export type ClaimsOutstanding = { count: number; oldest: number | null };

export type BufferHost = {
  engine(): string;
  /** The trainer's weight version now (update_engine_status). */
  weightVersion(): number | null;
  /** The current run of the engine's history: a group belongs to the run it began in. */
  run(): number;
  /** The train rollouts claims began that the trainer has not consumed, and the oldest version among them (episode-claims.ts claimsOutstanding). */
  claimsOutstanding(): ClaimsOutstanding;
  now(): number;
  getKv<T>(k: string): T | null;
  setKv(k: string, v: unknown): void;
  outbox(item: OutboxItem): void;
  enqueue(body: CommandBody): void;
};

export type GroupRow = ReportedGroup & { state: "pending" | "ready" | "delivered" | "dropped"; stale: number };
export const GROUP_COLUMNS = "group_id, state, completed_sessions, failed_sessions, partial, min_weight_version, first_row_at, ready_at, last_row_at, stale";

/** The group's row, or null: also for task-groups.ts, which has the engine's tables but no buffer. */
export function groupRow(sql: SqlStorage, id: string): GroupRow | null {
  return sql.exec<GroupRow>(`SELECT ${GROUP_COLUMNS} FROM buf_groups WHERE group_id = ?`, id).toArray()[0] ?? null;
}

export type Counters = {
  delivered: number;
  dropped: number;
  stale: number;
  late: number;
  duplicates: number;
  failed: number;
  partialDelivered: number;
  partialDropped: number;
  paced: number;
  /** Batches refused for max_stored_bytes. */
  fullRefusals: number;
  /** Bytes of the rows held (buffer-bytes.ts). */
  storedBytes: number;
  /**
   * Bytes of those rows that belong to delivered groups, kept for re-reading the last pulls:
   * max_stored_bytes bounds the others only, since these go only as later pulls deliver something.
   */
  keptBytes: number;
  /** The consumer's version at its last pull, the sessions it pulled at that version, and the last full version's count. */
  pullVersion: number | null;
  pulledAtVersion: number;
  /**
   * The run of the history that pull was in: a trainer restarted from a checkpoint at the version
   * its predecessor consumed a batch at has consumed none of it (null: counters from before runs
   * were kept here, taken as another run's).
   */
  pullRun: number | null;
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
  fullRefusals: 0,
  storedBytes: 0,
  keptBytes: 0,
  pullVersion: null,
  pulledAtVersion: 0,
  pullRun: null,
  perVersion: null,
  nextReadySeq: 1,
  nextOutcomeSeq: 1,
};

/**
 * The last start_rollout the engine carried out, and when it last came: the same start again
 * soon after is that start repeated (its answer lost), not a new one. In KV beside the config.
 */
export type LastStart = {
  job_session: string;
  group_size: number;
  restart_training: boolean;
  /** The engine's latest start_engine (meta.startSeq) then: a trainer started since sends its own starts. */
  trainer_start: number | null;
  at: number;
};

export class BufferState {
  activeMemo: boolean | null = null;
  /** Read on every claim under pace: remembered, and dropped with a rolled-back transaction. */
  configMemo: BufferConfig | null = null;

  /** `sql` has the buffer's tables (schema.ts). */
  constructor(
    readonly sql: SqlStorage,
    readonly host: BufferHost,
  ) {}

  config(): BufferConfig {
    return (this.configMemo ??= this.storedConfig());
  }

  private storedConfig(): BufferConfig {
    const stored = { ...DEFAULT_BUFFER_CONFIG, ...(this.host.getKv<Partial<BufferConfig>>("buffer_config") ?? {}) };
    // Set before max_message_bytes had its ceiling, a config may hold more than the stores do.
    return { ...stored, max_message_bytes: Math.min(stored.max_message_bytes, MAX_STORED_BYTES) };
  }

  group(id: string): GroupRow | null {
    return groupRow(this.sql, id);
  }

  markReady(groupId: string, partial = false): void {
    const seq = this.bump((c) => ({ ...c, nextReadySeq: c.nextReadySeq + 1 })).nextReadySeq - 1;
    this.sql.exec("UPDATE buf_groups SET state = 'ready', ready_seq = ?, ready_at = ?, partial = ? WHERE group_id = ?", seq, this.host.now(), partial ? 1 : 0, groupId);
  }

  /**
   * Sends ready groups back to waiting when they are short of what made them ready: a complete
   * group of group_size usable sessions, a partial one (made ready at its TTL) of a usable
   * session. One rule, whatever made them short: a session marked failed (`groupId`, its group),
   * or a larger group_size (null: every ready group). Their TTL counts from their last row, as
   * any pending group's does.
   */
  unreadyShort(groupSize: number, groupId: string | null): void {
    const back = "UPDATE buf_groups SET state = 'pending', ready_seq = NULL, ready_at = NULL WHERE state = 'ready' AND (CASE partial WHEN 1 THEN completed_sessions < 1 ELSE completed_sessions < ? END)";
    if (groupId === null) this.sql.exec(back, groupSize);
    else this.sql.exec(`${back} AND group_id = ?`, groupSize, groupId);
  }

  /**
   * The group a row belongs to: its session's, once the session is known (a session stays in one
   * group; a restart keeps the sessions it discards under a name of its own: buffer-outcomes.ts
   * discardForRestart), else the group the row names. Null for a group not begun.
   */
  groupOfRow(sessionId: string, groupId: string): GroupRow | null {
    return (
      this.sql
        .exec<GroupRow>(`SELECT ${GROUP_COLUMNS} FROM buf_groups WHERE group_id = COALESCE((SELECT group_id FROM buf_sessions WHERE session_id = ?), ?)`, sessionId, groupId)
        .toArray()[0] ?? null
    );
  }

  lastStart(): LastStart | null {
    return this.host.getKv<LastStart>("buffer_last_start");
  }

  setLastStart(start: LastStart): void {
    this.host.setKv("buffer_last_start", start);
  }

  counters(): Counters {
    return { ...NO_COUNTERS, ...(this.host.getKv<Partial<Counters>>("buffer_counters") ?? {}) };
  }

  /** Read-modify-write of the counters, so nested updates never overwrite each other. */
  bump(change: (c: Counters) => Counters): Counters {
    const next = change(this.counters());
    this.host.setKv("buffer_counters", next);
    return next;
  }
}
