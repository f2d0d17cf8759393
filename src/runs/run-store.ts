/**
 * D1 access for runs: the run rows, their processes, their history (events) and the metrics
 * their processes wrote. Times are stored in milliseconds and shown in Unix seconds.
 */
import { and, desc, eq, sql } from "drizzle-orm";
import { isUniqueConflict } from "../db/unique-conflict";
import { z } from "zod";
import { runEvents, runMetrics, runProcesses, runs } from "../db/schema";
import { ACTIVE_RUN_STATUSES, JsonValue, type MetricsPoint, type ProcessReport, type RunStatus, type RunView } from "../protocol/runs";
import { parseJson, type Db, type Statement } from "./config-store";

export type RunRow = typeof runs.$inferSelect;
type ProcessRow = typeof runProcesses.$inferSelect;

const Edits = z.record(z.string(), JsonValue);
const Values = z.record(z.string(), JsonValue);

const secs = (ms: number | null): number | null => (ms === null ? null : ms / 1000);
const ms = (s: number | null): number | null => (s === null ? null : Math.round(s * 1000));

export function runView(r: RunRow, now: number): RunView {
  const end = r.endedAt ?? now;
  return {
    run_id: r.id,
    environment: r.environment,
    status: r.status,
    detail: r.detail,
    created_at: r.createdAt / 1000,
    started_at: secs(r.startedAt),
    ended_at: secs(r.endedAt),
    running_time_seconds: r.startedAt === null ? null : Math.max(0, end - r.startedAt) / 1000,
    stop_requested: r.stopRequestedAt !== null,
    command_seq: r.commandSeq,
  };
}

export const editsOfRun = (r: RunRow): Record<string, JsonValue> => parseJson(Edits, r.edits);

export function processView(p: ProcessRow): ProcessReport {
  return {
    name: p.name,
    order: p.ord,
    state: p.state,
    pid: p.pid,
    command: p.command,
    log_path: p.logPath,
    log_tail: p.logTail,
    exit_code: p.exitCode,
    signal: p.signal,
    started_at: secs(p.startedAt),
    ready_at: secs(p.readyAt),
    ended_at: secs(p.endedAt),
    detail: p.detail,
  };
}

export const eventRow = (runId: string, at: number, kind: string, detail: string) => ({ runId, at, kind, detail });

/** Inserts a run and its first event. Throws when the engine already has an active run (the unique index). */
export async function insertRun(db: Db, live: Statement, row: typeof runs.$inferInsert, event: string): Promise<void> {
  await db.batch([live, db.insert(runs).values(row), db.insert(runEvents).values(eventRow(row.id, row.createdAt, "created", event))]);
}

/**
 * An active run, in the words of runs_one_active_idx's condition: the statuses as literals, so
 * that SQLite sees the partial index applies (a list of bound values, inArray's, is not seen to
 * imply it, and every run of the engine, its config included, was read).
 */
const isActive = sql`${runs.status} IN (${sql.raw(ACTIVE_RUN_STATUSES.map((s) => `'${s}'`).join(", "))})`;

export async function activeRun(db: Db, engine: string): Promise<RunRow | null> {
  const rows = await db
    .select()
    .from(runs)
    .where(and(eq(runs.engine, engine), isActive));
  return rows[0] ?? null;
}

export async function getRun(db: Db, engine: string, id: string): Promise<RunRow | null> {
  const rows = await db.select().from(runs).where(and(eq(runs.engine, engine), eq(runs.id, id)));
  return rows[0] ?? null;
}

/**
 * Runs created in the same millisecond (the clock is coarse, and run ids are random) come in
 * the order they were inserted: SQLite gives a new row a rowid above every row in the table
 * (the runs table has no INTEGER PRIMARY KEY of its own, so this is that implicit key, which
 * VACUUM and dumps renumber but keep in order), and every index entry ends with it, so
 * runs_engine_created_idx already holds the runs in this order.
 */
const rowid = sql<number>`${runs}.rowid`;
const newestFirst = [desc(runs.createdAt), desc(rowid)] as const;
/** Runs after `runId` in that order. */
const olderThan = (runId: string) => sql`(${runs.createdAt}, ${rowid}) < (SELECT c.created_at, c.rowid FROM ${runs} AS c WHERE c.id = ${runId})`;

export async function latestRun(db: Db, engine: string): Promise<RunRow | null> {
  const rows = await db.select().from(runs).where(eq(runs.engine, engine)).orderBy(...newestFirst).limit(1);
  return rows[0] ?? null;
}

/** Newest first; `before` pages after a run, on the whole sort key: runs sharing its creation time are not skipped. */
export async function listRuns(db: Db, engine: string, limit: number, before: RunRow | null): Promise<RunRow[]> {
  const where = before === null ? eq(runs.engine, engine) : and(eq(runs.engine, engine), olderThan(before.id));
  return db.select().from(runs).where(where).orderBy(...newestFirst).limit(limit);
}

export async function activeRuns(db: Db, engine: string): Promise<RunRow[]> {
  return db
    .select()
    .from(runs)
    .where(and(eq(runs.engine, engine), isActive));
}

export async function processesOf(db: Db, runId: string): Promise<ProcessReport[]> {
  const rows = await db.select().from(runProcesses).where(eq(runProcesses.runId, runId)).orderBy(runProcesses.ord);
  return rows.map(processView);
}

export async function eventsOf(db: Db, runId: string, limit = 200) {
  const rows = await db.select().from(runEvents).where(eq(runEvents.runId, runId)).orderBy(desc(runEvents.id)).limit(limit);
  return rows.reverse().map((e) => ({ at: e.at / 1000, kind: e.kind, detail: e.detail }));
}

const toPoint = (m: typeof runMetrics.$inferSelect): MetricsPoint => ({ index: m.idx, step: m.step, at: m.at, values: parseJson(Values, m.metricValues) });

/**
 * The run's last point, its values each key's latest among the last METRICS_FOLDED points: a
 * run writes some keys at every step and others less often (an eval every few steps), and a
 * status read from the last line alone lost those (the seed reads wandb's summary: the latest
 * value of each key).
 */
export async function latestMetrics(db: Db, runId: string): Promise<MetricsPoint | null> {
  const points = await metricsHistory(db, runId, METRICS_FOLDED);
  const last = points.at(-1);
  if (last === undefined) return null;
  return { ...last, values: Object.assign({}, ...points.map((p) => p.values)) as MetricsPoint["values"] };
}
const METRICS_FOLDED = 500;

/** The last `limit` points, oldest first. */
export async function metricsHistory(db: Db, runId: string, limit = 500): Promise<MetricsPoint[]> {
  const rows = await db.select().from(runMetrics).where(eq(runMetrics.runId, runId)).orderBy(desc(runMetrics.idx)).limit(limit);
  return rows.reverse().map(toPoint);
}

export type RunChange = Partial<typeof runs.$inferInsert>;
export type RunEvent = { at: number; kind: string; detail: string };

/**
 * Changes a run (its status, and anything else in `set`) only if its status is still
 * `expected`, the one the change was decided from, and records why, in one transaction with
 * `more` (statements that stand whatever the status). False when another request changed the
 * status first: the caller decides again from the run as it is now. Without the check a stop
 * crossing the agent's "completed" would make a finished run "stopping" again, for good.
 */
export async function changeRun(db: Db, runId: string, expected: RunStatus, set: RunChange, event: RunEvent | null, more: Statement[] = []): Promise<boolean> {
  const still = and(eq(runs.id, runId), eq(runs.status, expected));
  const update = db.update(runs).set(set).where(still);
  if (event === null) {
    const [updated] = await db.batch([update, ...more]);
    return updated.meta.changes > 0;
  }
  // The event is inserted first, under the update's own condition: nothing runs between the
  // statements of a batch, so the event is recorded exactly when the update applies.
  const [, updated] = await db.batch([eventIf(db, still, runId, event), update, ...more]);
  return updated.meta.changes > 0;
}

/** The event's row, inserted only if `condition` holds of the run (its id: NULL, so SQLite numbers it). */
function eventIf(db: Db, condition: ReturnType<typeof and>, runId: string, e: RunEvent) {
  const value = <T>(v: T, name: string) => sql<T>`${v}`.as(name);
  const row = db
    .select({ id: sql<number>`NULL`.as("id"), runId: value(runId, "run_id"), at: value(e.at, "at"), kind: value(e.kind, "kind"), detail: value(e.detail, "detail") })
    .from(runs)
    .where(condition);
  return db.insert(runEvents).select(row);
}

/** The command that starts the run, whatever its status by now (a stop may already have ended it). */
export async function setCommandSeq(db: Db, runId: string, seq: number): Promise<void> {
  await db.update(runs).set({ commandSeq: seq }).where(eq(runs.id, runId));
}

export function processStatements(db: Db, runId: string, processes: readonly ProcessReport[]): Statement[] {
  return processes.map((p) => {
    const row = {
      runId,
      name: p.name,
      ord: p.order,
      state: p.state,
      pid: p.pid,
      command: p.command,
      logPath: p.log_path,
      logTail: p.log_tail,
      exitCode: p.exit_code,
      signal: p.signal,
      startedAt: ms(p.started_at),
      readyAt: ms(p.ready_at),
      endedAt: ms(p.ended_at),
      detail: p.detail,
    };
    const { runId: _r, name: _n, ...set } = row;
    // A process that ended stays ended, with its exit code and last lines: a report the agent
    // sent earlier and retried (it saw the process running) may land after the one that ended it.
    const ended = sql.raw(ENDED_PROCESS_STATES.map((st) => `'${st}'`).join(", "));
    return db
      .insert(runProcesses)
      .values(row)
      .onConflictDoUpdate({ target: [runProcesses.runId, runProcesses.name], set, setWhere: sql`${runProcesses.state} NOT IN (${ended}) OR excluded.state IN (${ended})` });
  });
}

/** The states a process does not leave (run-supervisor.ts). */
const ENDED_PROCESS_STATES = ["exited", "stopped", "failed"] as const satisfies readonly ProcessReport["state"][];

export function metricStatements(db: Db, runId: string, points: readonly MetricsPoint[]): Statement[] {
  return points.map((m) =>
    db.insert(runMetrics).values({ runId, idx: m.index, step: m.step, at: m.at, metricValues: JSON.stringify(m.values) }).onConflictDoNothing(),
  );
}

/** True when `err` is the one-active-run-per-engine index refusing a second active run. */
export const isActiveRunConflict = (err: unknown): boolean => isUniqueConflict(err, "runs.engine");

