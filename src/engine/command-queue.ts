/**
 * The durable, ordered command queue between an engine and its local-agent.
 * A polled command is leased (hidden) until its deadline; without an ack it becomes due again.
 * An acked command is kept ACKED_KEEP_MS, then the alarm deletes it: a deliver command holds a
 * whole workflow output, and the table would otherwise grow with every result ever delivered.
 * A command that only advises (clear_sessions) and is not acked within ADVISORY_KEEP_MS is
 * deleted too: the buffer queues one per dropped group whether or not any agent polls.
 */
import type { Command, CommandBody } from "../protocol/commands";

type CommandRow = { seq: number; body: string; created_at: number; attempts: number; acked_at: number | null; ok: number | null; detail: string };

type Kv = { get<T>(k: string): T | null; set(k: string, v: unknown): void };

/** How long an acked command stays after its ack before the alarm deletes it. */
export const ACKED_KEEP_MS = 600_000;
/**
 * How long a clear_sessions command waits for an agent. It only lets the inference upstream
 * forget sessions that will not go on, which a day later it has most likely done by itself;
 * an engine with no agent (a buffer-only one) would otherwise keep every one.
 */
export const ADVISORY_KEEP_MS = 24 * 3600 * 1000;
/** Kinds of command that expire unacked (the schema's migration 18 names them too). */
const ADVISORY: ReadonlySet<CommandBody["kind"]> = new Set(["clear_sessions"]);
/** The alarm deletes at most this many acked (or expired) commands per run, then re-arms at once. */
const SWEEP_BATCH = 500;
/** The highest seq the alarm deleted: every command at or below it that is gone was acked. */
const SWEPT_THROUGH = "commands_swept_through";

export class CommandQueue {
  constructor(
    private readonly sql: SqlStorage,
    private readonly kv: Kv,
  ) {}

  enqueue(body: CommandBody, now: number): number {
    const expires = ADVISORY.has(body.kind) ? now + ADVISORY_KEEP_MS : null;
    return this.sql
      .exec<{ seq: number }>("INSERT INTO commands (body, created_at, visible_at, expires_at) VALUES (?, ?, ?, ?) RETURNING seq", JSON.stringify(body), now, now, expires)
      .one().seq;
  }

  /** Makes commands leased by any other session due again now. */
  releaseOthers(session: string, now: number): number {
    return this.sql.exec(
      "UPDATE commands SET visible_at = ? WHERE acked_at IS NULL AND visible_at > ? AND leased_by IS NOT NULL AND leased_by != ?",
      now,
      now,
      session,
    ).rowsWritten;
  }

  /** Hands out due commands in order and leases them to `session` until `now + leaseMs`. */
  lease(now: number, leaseMs: number, limit: number, session: string | null = null): Command[] {
    const rows = this.sql
      .exec<CommandRow>(
        "SELECT seq, body, created_at, attempts, acked_at, ok, detail FROM commands WHERE acked_at IS NULL AND visible_at <= ? ORDER BY seq LIMIT ?",
        now,
        limit,
      )
      .toArray();
    for (const r of rows) this.sql.exec("UPDATE commands SET visible_at = ?, attempts = attempts + 1, leased_by = ? WHERE seq = ?", now + leaseMs, session, r.seq);
    return rows.map((r) => ({ seq: r.seq, attempt: r.attempts + 1, created_at: r.created_at / 1000, body: JSON.parse(r.body) as CommandBody }));
  }

  hasDue(now: number): boolean {
    return this.sql.exec("SELECT 1 FROM commands WHERE acked_at IS NULL AND visible_at <= ? LIMIT 1", now).toArray().length > 0;
  }

  get(seq: number): { body: CommandBody; acked: boolean } | null {
    const r = this.sql.exec<CommandRow>("SELECT seq, body, created_at, attempts, acked_at, ok, detail FROM commands WHERE seq = ?", seq).toArray()[0];
    return r ? { body: JSON.parse(r.body) as CommandBody, acked: r.acked_at !== null } : null;
  }

  ack(seq: number, ok: boolean, detail: string, now: number): void {
    this.sql.exec("UPDATE commands SET acked_at = ?, ok = ?, detail = ? WHERE seq = ?", now, ok ? 1 : 0, detail, seq);
  }

  /** Deletes a batch of the commands acked more than ACKED_KEEP_MS ago; returns how many went. */
  sweepAcked(now: number): number {
    const gone = this.sql
      .exec<{ seq: number }>(
        "DELETE FROM commands WHERE seq IN (SELECT seq FROM commands WHERE acked_at IS NOT NULL AND acked_at <= ? ORDER BY acked_at LIMIT ?) RETURNING seq",
        now - ACKED_KEEP_MS,
        SWEEP_BATCH,
      )
      .toArray();
    if (gone.length === 0) return 0;
    const top = gone.reduce((m, r) => Math.max(m, r.seq), 0);
    if (top > this.sweptThrough()) this.kv.set(SWEPT_THROUGH, top);
    return gone.length;
  }

  /** Deletes a batch of the advisory commands no agent acked in time; returns how many went. */
  expireAdvisory(now: number): number {
    return this.sql.exec(
      "DELETE FROM commands WHERE seq IN (SELECT seq FROM commands WHERE acked_at IS NULL AND expires_at IS NOT NULL AND expires_at <= ? ORDER BY expires_at LIMIT ?)",
      now,
      SWEEP_BATCH,
    ).rowsWritten;
  }

  /** Whether a command that is not stored was acked and deleted since (seqs are never reused). */
  swept(seq: number): boolean {
    return seq <= this.sweptThrough();
  }

  /** When the oldest acked command is to be deleted, or the first advisory one expires, if any. */
  nextSweep(): number | null {
    const acked = this.sql.exec<{ t: number | null }>("SELECT MIN(acked_at) AS t FROM commands WHERE acked_at IS NOT NULL").one().t;
    const expiring = this.sql.exec<{ t: number | null }>("SELECT MIN(expires_at) AS t FROM commands WHERE acked_at IS NULL AND expires_at IS NOT NULL").one().t;
    const times = [acked === null ? null : acked + ACKED_KEEP_MS, expiring].filter((t): t is number => t !== null);
    return times.length === 0 ? null : Math.min(...times);
  }

  /** When the earliest leased command falls due again, if any is leased. */
  nextRedelivery(now: number): number | null {
    return this.sql.exec<{ t: number | null }>("SELECT MIN(visible_at) AS t FROM commands WHERE acked_at IS NULL AND visible_at > ?", now).one().t;
  }

  /** Whether a start_rollout for `jobSession` waits for the agent still (not acked). */
  hasPendingStartRollout(jobSession: string): boolean {
    return (
      this.sql
        .exec("SELECT 1 FROM commands WHERE acked_at IS NULL AND json_extract(body, '$.kind') = 'start_rollout' AND json_extract(body, '$.job_session') = ? LIMIT 1", jobSession)
        .toArray().length > 0
    );
  }

  pendingCount(): number {
    return this.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM commands WHERE acked_at IS NULL").one().n;
  }

  private sweptThrough(): number {
    return this.kv.get<number>(SWEPT_THROUGH) ?? 0;
  }
}
