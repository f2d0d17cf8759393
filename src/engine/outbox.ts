/**
 * The outbox from an engine to D1. A row is written in the same transaction as the state change
 * it records, then flushed to D1 in batches by the alarm; a failed flush is retried with backoff,
 * so a D1 hiccup neither loses a record nor fails the request that produced it.
 */
import { getTableColumns, getTableName } from "drizzle-orm";
import { jsonArrays } from "../db/json-arrays";
import { bufferGroups, bufferSteps, rewardHistory, trajectories } from "../db/schema";
import type { OutboxOverview } from "../protocol/agent";
import { D1_MAX_QUERIES_PER_INVOCATION } from "../protocol/limits";
import { backoffMs } from "./rules";

/** Each kind of record and the D1 table it goes to. */
const TABLES = { trajectory: trajectories, reward: rewardHistory, buffer_step: bufferSteps, buffer_group: bufferGroups } as const;
type Tables = typeof TABLES;
export type OutboxItem = { [K in keyof Tables]: { kind: K; row: Tables[K]["$inferInsert"] } }[keyof Tables];

type OutboxRow = { id: number; kind: string; payload: string; attempts: number };

/** Rows written in one D1 batch: bounded so a long outage does not make one giant request. */
const FLUSH_BATCH = 100;
/**
 * SQLite's codes for a statement refused for its data, as D1 reports them ("string or blob too
 * big: SQLITE_TOOBIG"); an unreachable or overloaded D1 says something else.
 */
const REFUSED_CODES = ["TOOBIG", "CONSTRAINT", "MISMATCH", "RANGE"];
const REFUSED_DATA = new RegExp(`SQLITE_(${REFUSED_CODES.join("|")})`);
/** The same test of a row's last_error, in SQL. */
const REFUSED_DATA_SQL = REFUSED_CODES.map((c) => `instr(last_error, 'SQLITE_${c}') > 0`).join(" OR ");
/** Batches written per flush before yielding back to the alarm, so a backlog drains steadily. */
const FLUSH_ROUNDS = 20;
/**
 * D1 statements one request's drain may send. D1 takes at most 1,000 queries per invocation
 * (each statement of a batch counts); a flush starts no batch past half of them (`start`), and
 * sends nothing past `most`, which bounds the batch under way and the halving of a refused one
 * (write) too. The alarm's flush takes the same shares of the statements its invocation has
 * (AlarmSchedule.flushOutbox), and leaves the rest to the alarm's other work. The rows left are
 * due, so the alarm comes back for them at once.
 */
export const FLUSH_STATEMENTS = D1_MAX_QUERIES_PER_INVOCATION / 2;
export const FLUSH_STATEMENTS_MOST = (D1_MAX_QUERIES_PER_INVOCATION * 3) / 4;

/** A flush's statements: how many it may start batches under, and how many it may send at most. */
export type StatementBudget = { start: number; most: number };

/** What a flush sent so far, against its budget; `full` once a batch was left for lack of room. */
type Sent = { statements: number; most: number; full: boolean };

/** D1's errors that say it could not be reached, rather than that it refused the statement. */
const UNREACHABLE = /network connection lost|timed? ?out|unavailable|overloaded|fetch failed|internal error|reset|econn/i;

/**
 * What the overview (any token of the engine may read it) says of a failed flush: D1's own words
 * may name tables, SQL or storage internals (docs/security.md), so they stay in the Worker's
 * log, where alarm-schedule.ts writes them, and the overview says which kind of failure it was.
 */
function shownError(error: string): string {
  const kind = UNREACHABLE.test(error) ? "D1 could not be reached" : "D1 refused the write";
  return `${kind} (its words are in the Worker's log: "writing the outbox to D1 failed")`;
}

export class Outbox {
  constructor(private readonly sql: SqlStorage) {}

  add(item: OutboxItem, dueAt: number, now: number): void {
    this.sql.exec("INSERT INTO outbox (kind, payload, next_attempt_at, created_at) VALUES (?, ?, ?, ?)", item.kind, JSON.stringify(item.row), dueAt, now);
  }

  nextDue(): number | null {
    return this.sql.exec<{ t: number | null }>("SELECT MIN(next_attempt_at) AS t FROM outbox").one().t;
  }

  size(): number {
    return this.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM outbox").one().n;
  }

  /** The backlog as the overview shows it. */
  view(): OutboxOverview {
    const rows = this.size();
    if (rows === 0) return { rows, oldest_at: null, last_error: null, last_error_at: null };
    // Ids only grow, so the lowest is the oldest row: one probe of the key.
    const oldest = this.sql.exec<{ t: number | null }>("SELECT created_at AS t FROM outbox ORDER BY id LIMIT 1").one().t;
    const failed = this.sql
      .exec<{ error: string; at: number }>("SELECT last_error AS error, failed_at AS at FROM outbox WHERE failed_at IS NOT NULL ORDER BY failed_at DESC LIMIT 1")
      .toArray()[0];
    return { rows, oldest_at: oldest, last_error: failed === undefined ? null : shownError(failed.error), last_error_at: failed?.at ?? null };
  }

  /**
   * Writes due rows to D1 in batches; returns how many were written, or the error that stopped it.
   * Rows never tried yet go along if they fall due before `horizon`: each new row is due a batch
   * window after it was written, so without this a flush would take only the few rows whose
   * window had just closed and the alarm would fire again milliseconds later, one D1 call per
   * handful of rows. Rows waiting out a retry backoff still wait for `now`.
   */
  async flush(db: D1Database, now: number, horizon: number, budget: StatementBudget): Promise<{ written: number; error: string | null; statements: number }> {
    const sent: Sent = { statements: 0, most: budget.most, full: false };
    let written = 0;
    for (let round = 0; round < FLUSH_ROUNDS && sent.statements < budget.start; round++) {
      const r = await this.flushBatch(db, now, Math.max(now, horizon), sent);
      written += r.written;
      if (r.error !== null) return { written, error: r.error, statements: sent.statements };
      if (r.written < FLUSH_BATCH || sent.full) break;
    }
    if (written > 0) this.reachableAgain(now);
    return { written, error: null, statements: sent.statements };
  }

  /**
   * D1 took a write: the rows an outage held back are due now, not at the end of a backoff that
   * doubled while D1 was away (up to minutes after newer rows reached it, so D1 held a run's later
   * results and not its earlier ones, and an `until` a minute in the past was no complete set).
   * Rows D1 refused for their data keep their backoff: they would be refused again.
   */
  private reachableAgain(now: number): void {
    this.sql.exec(`UPDATE outbox SET next_attempt_at = ? WHERE next_attempt_at > ? AND attempts > 0 AND NOT (${REFUSED_DATA_SQL})`, now, now);
  }

  /**
   * Writes every row to D1 now, backoffs or not (an engine deleted with its history keeps all of
   * it); stops at the first failure, whose rows back off again from `now`. Rows D1 refused for
   * their data, alone (a record over its size, a constraint), are set aside and counted as
   * `refused`: no retry changes D1's answer, and they would keep the rest of the history from
   * being kept, on every DELETE, for ever.
   */
  async drain(db: D1Database, now: number): Promise<{ written: number; refused: number; error: string | null }> {
    const setAside = (): number => {
      this.sql.exec(`UPDATE outbox SET next_attempt_at = ? WHERE attempts > 0 AND (${REFUSED_DATA_SQL})`, now + 1);
      return this.sql.exec<{ n: number }>(`SELECT COUNT(*) AS n FROM outbox WHERE attempts > 0 AND (${REFUSED_DATA_SQL})`).one().n;
    };
    this.sql.exec("UPDATE outbox SET next_attempt_at = ? WHERE next_attempt_at > ?", now, now);
    let refused = setAside();
    const due = (): number => this.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM outbox WHERE next_attempt_at <= ?", now).one().n;
    let written = 0;
    let statements = 0;
    while (due() > 0) {
      if (statements >= FLUSH_STATEMENTS) return { written, refused, error: `${due()} records are left, more than one request may write to D1: repeat it` };
      const r = await this.flush(db, now, now, { start: FLUSH_STATEMENTS - statements, most: FLUSH_STATEMENTS_MOST - statements });
      written += r.written;
      statements += r.statements;
      // A refusal for its data leaves the refused rows alone with their error (write halves a
      // batch to find them), and the others written: set those aside too, and go on.
      if (r.error !== null && REFUSED_DATA.test(r.error)) {
        refused = setAside();
        continue;
      }
      if (r.error !== null || r.written === 0) return { written, refused, error: r.error ?? "rows were left that no flush took" };
    }
    return { written, refused, error: null };
  }

  private async flushBatch(db: D1Database, now: number, horizon: number, sent: Sent): Promise<{ written: number; error: string | null }> {
    const rows = this.sql
      .exec<OutboxRow>(
        "SELECT id, kind, payload, attempts FROM outbox WHERE next_attempt_at <= ? AND (attempts = 0 OR next_attempt_at <= ?) ORDER BY id LIMIT ?",
        horizon,
        now,
        FLUSH_BATCH,
      )
      .toArray();
    if (rows.length === 0) return { written: 0, error: null };
    return this.write(db, rows, now, sent);
  }

  /**
   * Writes `rows` in one D1 batch. When D1 refuses the data of a statement (a row over its size
   * cap, a constraint), the batch is halved until the refused rows stand alone: they alone wait
   * out a backoff, and the rows that shared their batch are written now instead of failing with
   * them on every retry, forever. Any other failure (D1 unreachable, overloaded) is not the
   * rows' fault: the whole batch backs off, one call spent. Rows whose statements would go past
   * the flush's most are left due, untried, for the next alarm.
   */
  private async write(db: D1Database, rows: OutboxRow[], now: number, sent: Sent): Promise<{ written: number; error: string | null }> {
    const byKind = new Map<keyof Tables, string[]>();
    for (const r of rows) {
      const kind = r.kind as keyof Tables;
      let list = byKind.get(kind);
      if (list === undefined) byKind.set(kind, (list = []));
      list.push(r.payload);
    }
    const statements = [...byKind].flatMap(([kind, payloads]) => insertStatements(db, kind, payloads));
    if (sent.full || sent.statements + statements.length > sent.most) {
      sent.full = true;
      return { written: 0, error: null };
    }
    sent.statements += statements.length;
    try {
      await db.batch(statements);
    } catch (e) {
      const error = e instanceof Error ? e.message : String(e);
      if (rows.length > 1 && REFUSED_DATA.test(error)) {
        const mid = Math.ceil(rows.length / 2);
        const first = await this.write(db, rows.slice(0, mid), now, sent);
        const second = await this.write(db, rows.slice(mid), now, sent);
        return { written: first.written + second.written, error: first.error ?? second.error };
      }
      for (const r of rows) {
        this.sql.exec(
          "UPDATE outbox SET attempts = attempts + 1, next_attempt_at = ?, last_error = ?, failed_at = ? WHERE id = ?",
          now + backoffMs(r.attempts + 1),
          error,
          now,
          r.id,
        );
      }
      return { written: 0, error };
    }
    // Ids are integers from our own table, so they can stand in the statement: FLUSH_BATCH of
    // them are under 2 KB of SQL, far from the 100 KB a statement may hold.
    this.sql.exec(`DELETE FROM outbox WHERE id IN (${rows.map((r) => r.id).join(",")})`);
    return { written: rows.length, error: null };
  }
}

/**
 * UTF-16 units of row JSON per statement. A statement binds one value, the JSON array of its
 * rows (D1 takes 100 bound parameters; the SQL text is under 1 KB of its 100,000 bytes), and
 * D1 holds at most 2,000,000 bytes in one value (protocol/limits.ts): this many units are at
 * most 1,572,864 bytes of UTF-8. A longer record goes alone, and none is longer than
 * MAX_STORED_BYTES: what a client sizes is refused before it is written if it would be. (A
 * row D1 still refuses waits alone: see write.)
 */
export const STATEMENT_CHARS = 512 * 1024;

const insertSql = new Map<keyof Tables, string>();

/**
 * Rows go to D1 as one JSON array per statement (db/json-arrays.ts). The payloads are the
 * outbox's own JSON, so nothing is parsed or serialized again. Each row's object is taken out
 * of the array once (the MATERIALIZED step): read straight from json_each, `value` is rebuilt
 * as text for every column that reads it, which made the statement cost about twice as much
 * per row.
 */
function insertStatements(db: D1Database, kind: keyof Tables, payloads: string[]): D1PreparedStatement[] {
  let sql = insertSql.get(kind);
  if (sql === undefined) {
    const columns = Object.entries(getTableColumns(TABLES[kind])).filter(([, c]) => !(c.primary && c.autoIncrement));
    const names = columns.map(([, c]) => `"${c.name}"`).join(", ");
    const values = columns.map(([key]) => `json_extract(r.v, '$.${key}')`).join(", ");
    sql = `WITH r(v) AS MATERIALIZED (SELECT value FROM json_each(?)) INSERT INTO "${getTableName(TABLES[kind])}" (${names}) SELECT ${values} FROM r WHERE true ON CONFLICT DO NOTHING`;
    insertSql.set(kind, sql);
  }
  return jsonArrays(payloads, STATEMENT_CHARS, (p) => p.length).map((rows) => db.prepare(sql).bind(rows));
}
