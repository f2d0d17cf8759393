/**
 * An engine's rows in D1, deleted (or, for its history, re-filed) when the engine is deleted.
 * An engine can have millions of rows, and D1 is one SQLite writer with limits per statement and
 * per Worker invocation, so the work goes in bounded chunks: each statement touches at most
 * CHUNK_ROWS rows (through their rowids: D1 has no DELETE ... LIMIT) with at most four bound
 * parameters (D1 takes 100), and one call runs at most MAX_STATEMENTS of them, then says whether
 * it is done.
 * Every chunk stands alone, so a call cut off anywhere leaves a state the next call finishes:
 * the engine's own row goes last, and until then the name stays taken and the engine answers 404.
 */

/** Rows one statement deletes or re-files: short enough not to hold D1's writer for long. */
const CHUNK_ROWS = 1000;
/** Statements one call runs: well inside D1's 50 queries per invocation on the Free plan (1000 on Paid). */
const MAX_STATEMENTS = 40;

/** Training runs that had not ended. */
const ACTIVE_RUN_STATES = "('pending', 'starting', 'running', 'stopping')";

/** The chunk of `table`'s rows that belong to the engine (?1), at most ?2 of them. */
const own = (table: string) => `SELECT rowid FROM ${table} WHERE engine = ?1 LIMIT ?2`;
/** The same for a table keyed by run: its rows of the engine's runs. */
const ofRuns = (table: string) => `SELECT c.rowid FROM runs r JOIN ${table} c ON c.run_id = r.id WHERE r.engine = ?1 LIMIT ?2`;

/** A statement run chunk after chunk until it changes fewer than CHUNK_ROWS rows; ?1 is the engine. */
type Step = { table: string; sql: string; args: (archive: Archive | null) => unknown[] };
type Archive = { name: string; at: number };

const chunk = () => [CHUNK_ROWS];

const deleteOwn = (table: string): Step => ({ table, sql: `DELETE FROM ${table} WHERE rowid IN (${own(table)})`, args: chunk });
const deleteOfRuns = (table: string): Step => ({ table, sql: `DELETE FROM ${table} WHERE rowid IN (${ofRuns(table)})`, args: chunk });
/** Moves the chunk under the archive name (?3): kept, but no longer the engine's. */
const refile = (table: string): Step => ({
  table,
  sql: `UPDATE ${table} SET engine = ?3 WHERE rowid IN (${own(table)})`,
  args: (archive) => [CHUNK_ROWS, archive?.name],
});

/** What is the engine's but not its history: gone either way. */
const STATE: Step[] = [
  deleteOwn("tokens"),
  deleteOwn("buffer_steps"),
  deleteOwn("buffer_groups"),
  deleteOwn("run_environments"),
  deleteOwn("run_catalogs"),
  deleteOwn("run_locked_fields"),
  deleteOwn("run_selections"),
  deleteOwn("run_config_edits"),
];

/** The history: trajectories and their LLM calls, reward history, training runs (their processes, events and metrics follow the run's id) and inference tests. */
const DELETE_HISTORY: Step[] = [
  deleteOwn("trajectories"),
  deleteOwn("llm_calls"),
  deleteOwn("reward_history"),
  deleteOfRuns("run_metrics"),
  deleteOfRuns("run_events"),
  deleteOfRuns("run_processes"),
  deleteOwn("runs"),
  deleteOwn("inference_tests"),
];

/**
 * Runs are re-filed like the rest, and one that had not ended is marked stopped as it goes (?4:
 * when): a deleted engine's agent cannot report its end any more. SET reads the row as it was.
 */
const ifActive = (column: string, value: string) => `${column} = CASE WHEN status IN ${ACTIVE_RUN_STATES} THEN ${value} ELSE ${column} END`;
const REFILE_RUNS: Step = {
  table: "runs",
  sql: `UPDATE runs SET engine = ?3, ${ifActive("status", "'stopped'")}, ${ifActive("detail", "'the engine was deleted'")},
      ${ifActive("ended_at", "?4")}, ${ifActive("updated_at", "?4")}
    WHERE rowid IN (${own("runs")})`,
  args: (archive) => [CHUNK_ROWS, archive?.name, archive?.at],
};

// The ledger's calls keep their bodies' R2 keys, which name the engine's incarnation, not its name.
const KEEP_HISTORY: Step[] = [refile("trajectories"), refile("llm_calls"), refile("reward_history"), REFILE_RUNS, refile("inference_tests")];

const ENGINE_ROW: Step = { table: "engines", sql: "DELETE FROM engines WHERE name = ?1", args: () => [] };

/** Where an engine deleted with its history keeps it: a name no engine can have ("@" is not allowed in one). */
export const archiveName = (engine: string, deletingSince: number): string => `${engine}@${deletingSince}`;

export type RowsDeleted = { done: boolean; rows: Record<string, number> };

/**
 * Deletes the engine's rows, chunk by chunk, for at most MAX_STATEMENTS statements; `archive`
 * keeps its history under that name instead. `done` once the engine's own row is gone.
 */
export async function deleteEngineRows(db: D1Database, engine: string, archive: Archive | null, bodies: R2Bucket | null = null): Promise<RowsDeleted> {
  const steps = [...STATE, ...(archive === null ? DELETE_HISTORY : KEEP_HISTORY), ENGINE_ROW];
  const rows: Record<string, number> = {};
  let statements = 0;
  if (archive === null && bodies !== null) {
    // The ledger's call bodies go with their rows: the objects first, then the rows that name them.
    for (;;) {
      if ((statements += 3) > MAX_STATEMENTS) return { done: false, rows };
      const keys = (await db.prepare("SELECT DISTINCT body_key AS k FROM llm_calls WHERE engine = ? LIMIT 100").bind(engine).all<{ k: string }>()).results.map((r) => r.k);
      if (keys.length === 0) break;
      await bodies.delete(keys);
      const changed = (await db.prepare("DELETE FROM llm_calls WHERE engine = ? AND body_key IN (SELECT value FROM json_each(?))").bind(engine, JSON.stringify(keys)).run()).meta.changes;
      rows["llm_calls"] = (rows["llm_calls"] ?? 0) + changed;
    }
  }
  for (const step of steps) {
    for (;;) {
      if (statements++ >= MAX_STATEMENTS) return { done: false, rows };
      const changed = (await db.prepare(step.sql).bind(engine, ...step.args(archive)).run()).meta.changes;
      if (changed > 0) rows[step.table] = (rows[step.table] ?? 0) + changed;
      if (changed < CHUNK_ROWS) break;
    }
  }
  return { done: true, rows };
}
