/**
 * The rollout buffer inside an engine: step rows grouped by group_id until group_size sessions
 * have completed, then handed to the trainer whole, once. Runs inside the engine's transactions;
 * every query is an index probe or walks only the rows it returns, so the cost of a pull does
 * not grow with the number of pending groups.
 *
 * This class is the buffer's face to the engine; the work is in a module per concern:
 * buffer-ingest.ts (step rows in), buffer-pace.ts (the pace policy's view), buffer-pulls.ts
 * (pulls and their staleness report), buffer-expiry.ts (TTL and session memory),
 * buffer-outcomes.ts (groups delivered or dropped), over buffer-state.ts (config, counters).
 */
import type { BufferConfig, BufferStats, GetRolloutDataResponse, LastPull, PostStepsResponse, StepRow } from "../protocol/buffer";
import { dropExpired, forgetDecided, nextExpiry } from "./buffer-expiry";
import { check, ingest, type RowSource } from "./buffer-ingest";
import { discardForRestart } from "./buffer-outcomes";
import { admitSteps, type Admitted } from "./buffer-admission";
import { notePaced, paceState } from "./buffer-pace";
import { lastPull, pull, reread } from "./buffer-pulls";
import { BufferState, type BufferHost, type ClaimsOutstanding, type LastStart } from "./buffer-state";
import type { CheckedStep } from "./buffer-step-size";
import type { PaceState } from "./pacing";
import { fail, ok, type Reply } from "./reply";


/**
 * How long after a start the same start is taken for its repeat: longer than a client's timeout
 * and retries, shorter than a trainer's restart (docs/buffer.md, "A start sent again").
 */
export const START_REPEAT_MS = 60_000;

export class RolloutBuffer {
  private readonly state: BufferState;

  /** `sql` has the buffer's tables (schema.ts). */
  constructor(sql: SqlStorage, host: BufferHost) {
    this.state = new BufferState(sql, host);
  }

  config(): BufferConfig {
    return this.state.config();
  }

  /** Whether the buffer is in use: AgentJet trajectories join groups only then. */
  active(): boolean {
    // Read on every end_episode, and it only ever turns on: remembered once read.
    return (this.state.activeMemo ??= this.state.host.getKv<boolean>("buffer_active") === true);
  }

  /** Drops what is remembered from storage: the transaction that wrote it rolled back. */
  forget(): void {
    this.state.activeMemo = null;
    this.state.configMemo = null;
  }

  /**
   * Changes the config. A smaller group_size makes groups that now have enough usable sessions
   * ready, and partial groups complete; a larger one sends ready groups now short of it back to
   * waiting, as a failed session does.
   */
  configure(patch: Partial<BufferConfig>): Reply<BufferConfig> {
    const s = this.state;
    const next = { ...s.config(), ...patch };
    // A row the buffer takes must fit in it, or it would be refused 413 however empty the buffer.
    if (next.max_stored_bytes < next.max_message_bytes) {
      return fail(422, "invalid_request", `max_stored_bytes (${next.max_stored_bytes}) must be at least max_message_bytes (${next.max_message_bytes}): a row the buffer takes must fit in it`);
    }
    s.host.setKv("buffer_config", next);
    s.configMemo = next;
    if (patch.group_size !== undefined) {
      const enough = s.sql
        .exec<{ group_id: string }>("SELECT group_id FROM buf_groups WHERE state = 'pending' AND completed_sessions >= ? ORDER BY last_row_at", next.group_size)
        .toArray();
      for (const g of enough) s.markReady(g.group_id);
      // Made ready partial at its TTL, and as many usable sessions as groups have now: complete, as one filled before its pull.
      s.sql.exec("UPDATE buf_groups SET partial = 0 WHERE state = 'ready' AND partial = 1 AND completed_sessions >= ?", next.group_size);
      s.unreadyShort(next.group_size, null);
    }
    return ok(next);
  }

  /**
   * Carries out a start, or finds it a repeat (`repeat`: nothing changes, and the agent gets no
   * second command): the same start as the last one (job_session, group size, restart_training)
   * within START_REPEAT_MS of it is that start sent again, its answer lost. A second
   * restart_training would discard the groups the job made since, and restart its workers. The
   * same start later is carried out, and so is one after a start_engine: a trainer restarted on
   * purpose under its job_session, with restart_training to drop what was made before (as the
   * seed's DataManager resumes a job), takes minutes to boot, or was started by the engine since.
   * A start that names no job gets a fresh job_session, so it is never a repeat.
   */
  startRollout(start: Omit<LastStart, "at">): { repeat: boolean } {
    const s = this.state;
    const now = s.host.now();
    const last = s.lastStart();
    const repeat =
      last !== null &&
      now - last.at < START_REPEAT_MS &&
      last.job_session === start.job_session &&
      last.group_size === start.group_size &&
      last.restart_training === start.restart_training &&
      (last.trainer_start ?? null) === start.trainer_start;
    // From the last time it came, so that retries of a retry stay repeats.
    s.setLastStart({ ...start, at: now });
    if (repeat) return { repeat };
    // Groups not handed out are dropped and recorded; their ids are free for the new job, their sessions' late rows ignored.
    if (start.restart_training) discardForRestart(s, now);
    s.host.setKv("buffer_active", true);
    s.activeMemo = true;
    // group_size alone cannot make the config inconsistent.
    this.configure({ group_size: start.group_size });
    return { repeat };
  }

  check(rows: StepRow[], from: RowSource = "worker"): Reply<CheckedStep[]> {
    return check(this.state, rows, from);
  }

  /** What of a worker's checked batch is stored now, and the 503 that refuses the rest (admitSteps). */
  admit(rows: CheckedStep[]): Admitted {
    return admitSteps(this.state, rows);
  }

  paceState(claims: ClaimsOutstanding, withPending: boolean, fallbackPerVersion: number | null = null): PaceState {
    return paceState(this.state, claims, withPending, fallbackPerVersion);
  }

  notePaced(): void {
    notePaced(this.state);
  }

  ingest(rows: CheckedStep[]): PostStepsResponse {
    return ingest(this.state, rows);
  }

  pull(maxGroups: number | null, weightVersion: number | null): GetRolloutDataResponse {
    return pull(this.state, maxGroups, weightVersion);
  }

  reread(cursor: number): Reply<GetRolloutDataResponse> {
    return reread(this.state, cursor);
  }

  dropExpired(now: number): number {
    return dropExpired(this.state, now);
  }

  forgetDecided(now: number): number {
    return forgetDecided(this.state, now);
  }

  nextExpiry(): number | null {
    return nextExpiry(this.state);
  }

  lastPull(): LastPull | null {
    return lastPull(this.state);
  }

  stats(): BufferStats {
    const s = this.state;
    const count = (sql: string) => s.sql.exec<{ n: number }>(sql).one().n;
    const c = s.counters();
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
      stored_bytes: c.storedBytes,
      full_refusals: c.fullRefusals,
    };
  }
}
