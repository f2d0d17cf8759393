/**
 * D1 access for runs: the run rows, their processes, their history (events) and the metrics
 * their processes wrote. Times are stored in milliseconds and shown in Unix seconds.
 */
import { and, desc, eq, inArray, lt } from "drizzle-orm";
import { z } from "zod";
import { runEvents, runMetrics, runProcesses, runs } from "../db/schema";
import { ACTIVE_RUN_STATUSES, JsonValue, type MetricsPoint, type ProcessReport, type RunView } from "../protocol/runs";
import { parseJson, type Db } from "./config-store";

type Statement = Parameters<Db["batch"]>[0][number];
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
export async function insertRun(db: Db, row: typeof runs.$inferInsert, event: string): Promise<void> {
  await db.batch([db.insert(runs).values(row), db.insert(runEvents).values(eventRow(row.id, row.createdAt, "created", event))]);
}

export async function activeRun(db: Db, engine: string): Promise<RunRow | null> {
  const rows = await db
    .select()
    .from(runs)
    .where(and(eq(runs.engine, engine), inArray(runs.status, [...ACTIVE_RUN_STATUSES])));
  return rows[0] ?? null;
}

export async function getRun(db: Db, engine: string, id: string): Promise<RunRow | null> {
  const rows = await db.select().from(runs).where(and(eq(runs.engine, engine), eq(runs.id, id)));
  return rows[0] ?? null;
}

export async function latestRun(db: Db, engine: string): Promise<RunRow | null> {
  const rows = await db.select().from(runs).where(eq(runs.engine, engine)).orderBy(desc(runs.createdAt), desc(runs.id)).limit(1);
  return rows[0] ?? null;
}

/** Newest first; `before` pages by the creation time of a run. */
export async function listRuns(db: Db, engine: string, limit: number, before: RunRow | null): Promise<RunRow[]> {
  const where = before === null ? eq(runs.engine, engine) : and(eq(runs.engine, engine), lt(runs.createdAt, before.createdAt));
  return db.select().from(runs).where(where).orderBy(desc(runs.createdAt), desc(runs.id)).limit(limit);
}

export async function activeRuns(db: Db, engine: string): Promise<RunRow[]> {
  return db
    .select()
    .from(runs)
    .where(and(eq(runs.engine, engine), inArray(runs.status, [...ACTIVE_RUN_STATUSES])));
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

export async function latestMetrics(db: Db, runId: string): Promise<MetricsPoint | null> {
  const rows = await db.select().from(runMetrics).where(eq(runMetrics.runId, runId)).orderBy(desc(runMetrics.idx)).limit(1);
  return rows[0] ? toPoint(rows[0]) : null;
}

/** The last `limit` points, oldest first. */
export async function metricsHistory(db: Db, runId: string, limit = 500): Promise<MetricsPoint[]> {
  const rows = await db.select().from(runMetrics).where(eq(runMetrics.runId, runId)).orderBy(desc(runMetrics.idx)).limit(limit);
  return rows.reverse().map(toPoint);
}

/** Changes a run's status (and anything else in `set`) and records why, in one transaction. */
export function statusStatements(db: Db, runId: string, set: Partial<typeof runs.$inferInsert>, event: { at: number; kind: string; detail: string } | null): Statement[] {
  const out: Statement[] = [db.update(runs).set(set).where(eq(runs.id, runId))];
  if (event !== null) out.push(db.insert(runEvents).values(eventRow(runId, event.at, event.kind, event.detail)));
  return out;
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
    return db.insert(runProcesses).values(row).onConflictDoUpdate({ target: [runProcesses.runId, runProcesses.name], set });
  });
}

export function metricStatements(db: Db, runId: string, points: readonly MetricsPoint[]): Statement[] {
  return points.map((m) =>
    db.insert(runMetrics).values({ runId, idx: m.index, step: m.step, at: m.at, metricValues: JSON.stringify(m.values) }).onConflictDoNothing(),
  );
}

export async function runBatch(db: Db, statements: Statement[]): Promise<void> {
  if (statements.length > 0) await db.batch(statements as [Statement, ...Statement[]]);
}

/** True when `err` is the one-active-run-per-engine index refusing a second active run. */
export function isActiveRunConflict(err: unknown): boolean {
  const text = err instanceof Error ? `${err.message} ${err.cause instanceof Error ? err.cause.message : ""}` : String(err);
  return /UNIQUE constraint failed: runs\.engine/.test(text);
}

