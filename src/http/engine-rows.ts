/**
 * An engine's rows in D1, deleted (or, for its history, re-filed) when the engine is deleted.
 * An engine can have millions of rows, and D1 is one SQLite writer with limits per statement and
 * per Worker invocation, so the work goes in bounded chunks: each statement touches at most
 * CHUNK_ROWS rows (through their rowids: D1 has no DELETE ... LIMIT) with at most four bound
 * parameters (D1 takes 100), and one call runs at most MAX_STATEMENTS of them, then says whether
 * it is done.
 * Every chunk stands alone, so a call cut off anywhere leaves a state the next call finishes:
 * the engine's own row goes last, and until then the name stays taken and the engine answers 404.
 * The ledger's call bodies in R2 go first, a page of keys per list and per delete, in the same budget.
 */
import { deleteUnder, spend, type Budget } from "../ledger/retention";
import { namePrefix } from "../ledger/keys";

/** Rows one statement deletes or re-files: short enough not to hold D1's writer for long. */
const CHUNK_ROWS = 1000;
/**
 * Statements and R2 calls one call makes: well inside the 50 subrequests and D1 queries per
 * invocation on the Free plan (1000 on Paid), with room for the route's own.
 */
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
 * The incarnations (their R2 prefixes) whose bodies the engine's histories kept under an archive
 * name still point to. Archives are few, and each has calls of one incarnation, so one row each
 * says which: found by stepping through the engine index from archive name to archive name,
 * never by scanning calls, of which an archive may have millions. Null when the budget ran out.
 */
async function archivedIncarnations(db: D1Database, engine: string, budget: Budget): Promise<Set<string> | null> {
  const root = namePrefix(engine);
  const kept = new Set<string>();
  // Every archive name, and nothing else, begins with "<engine>@" ("@" is in no engine's name): they sort before "<engine>A".
  let after = `${engine}@`;
  for (;;) {
    if (!spend(budget)) return null;
    const row = await db
      .prepare("SELECT engine, body_key FROM llm_calls WHERE engine > ?1 AND engine < ?2 ORDER BY engine LIMIT 1")
      .bind(after, `${engine}A`)
      .first<{ engine: string; body_key: string }>();
    if (row === null) return kept;
    const end = row.body_key.indexOf("/", root.length);
    if (row.body_key.startsWith(root) && end > 0) kept.add(row.body_key.slice(0, end + 1));
    after = row.engine;
  }
}

/**
 * Deletes every R2 body of the engine, by its incarnation's prefix rather than by the rows that
 * name them: retention deletes rows before their day's object, and a batch whose rows were never
 * stored leaves an object no row names; once the engine's row is gone nothing would find them.
 * An archive's bodies stay. Whether it got through within the budget.
 */
async function deleteBodies(db: D1Database, bucket: R2Bucket, engine: string, budget: Budget): Promise<boolean> {
  const kept = await archivedIncarnations(db, engine, budget);
  if (kept === null) return false;
  const root = namePrefix(engine);
  let cursor: string | undefined;
  do {
    if (!spend(budget)) return false;
    const listed = await bucket.list({ prefix: root, delimiter: "/", ...(cursor === undefined ? {} : { cursor }) });
    for (const incarnation of listed.delimitedPrefixes) {
      if (kept.has(incarnation)) continue;
      if (!(await deleteUnder(bucket, incarnation, budget)).done) return false;
    }
    cursor = listed.truncated ? listed.cursor : undefined;
  } while (cursor !== undefined);
  return true;
}

/**
 * Deletes the engine's rows, chunk by chunk, for at most MAX_STATEMENTS statements; `archive`
 * keeps its history under that name instead. `done` once the engine's own row is gone.
 */
export async function deleteEngineRows(db: D1Database, engine: string, archive: Archive | null, bodies: R2Bucket | null = null): Promise<RowsDeleted> {
  const steps = [...STATE, ...(archive === null ? DELETE_HISTORY : KEEP_HISTORY), ENGINE_ROW];
  const rows: Record<string, number> = {};
  const budget: Budget = { left: MAX_STATEMENTS };
  if (archive === null && bodies !== null && !(await deleteBodies(db, bodies, engine, budget))) return { done: false, rows };
  for (const step of steps) {
    for (;;) {
      if (!spend(budget)) return { done: false, rows };
      const changed = (await db.prepare(step.sql).bind(engine, ...step.args(archive)).run()).meta.changes;
      if (changed > 0) rows[step.table] = (rows[step.table] ?? 0) + changed;
      if (changed < CHUNK_ROWS) break;
    }
  }
  return { done: true, rows };
}
