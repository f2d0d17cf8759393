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
 * A history kept under an archive name (keep_history) is deleted later the same way, by that name.
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

/** A statement run chunk after chunk until it changes fewer than CHUNK_ROWS rows; ?1 is the engine (or the archive whose rows go). */
type Step = { table: string; sql: string; args: (archive: Archive | null, engine: string) => unknown[] };
/** `bodies`: the engine's call bodies' R2 prefix when the delete's first request learnt it from the engine's object. */
type Archive = { name: string; at: number; bodies?: string | null };

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

/** An incarnation's R2 prefix, `ledger/<engine>/<incarnation>/`, from a body key (or a prefix) under `root`; null for one elsewhere. */
function incarnationOf(key: string | null, root: string): string | null {
  if (key === null || !key.startsWith(root)) return null;
  const end = key.indexOf("/", root.length);
  return end > root.length ? key.slice(0, end + 1) : null;
}

/** namesOfIncarnations's statement (?1 the engine, ?2 "<engine>@", ?3 "<engine>A"); exported for the test of its query plan. */
export const INCARNATION_NAMES_SQL = `WITH RECURSIVE names(name) AS (
    SELECT (SELECT engine FROM llm_calls WHERE engine > ?2 AND engine < ?3 ORDER BY engine LIMIT 1)
    UNION ALL
    SELECT (SELECT engine FROM llm_calls WHERE engine > names.name AND engine < ?3 ORDER BY engine LIMIT 1) FROM names WHERE names.name IS NOT NULL
  )
  SELECT name, (SELECT body_key FROM llm_calls WHERE engine = names.name LIMIT 1) AS key FROM names WHERE name IS NOT NULL
  UNION ALL SELECT ?1, (SELECT body_key FROM llm_calls WHERE engine = ?1 LIMIT 1)
  UNION ALL SELECT name, body_prefix FROM archives WHERE from_engine = ?1`;

/**
 * Every archive name of `engine` that has calls, and the engine's own name if it has any, each
 * with one call's body key: its calls are all of one incarnation (the name can only be made again
 * once the old one's rows are gone or re-filed), so one says which. Also the archives on record
 * (the archives table) with their prefixes, for an archive whose calls are gone already.
 * One statement, however many archives: it steps through llm_calls' engine index from one
 * archive name to the next (every one, and nothing else, sorts between "<engine>@" and
 * "<engine>A": "@" is in no engine's name), a seek each, never scanning an archive's calls, of
 * which it may have millions. A statement per archive ran a name with ~40 of them out of the
 * delete's budget before it deleted anything, every time.
 */
async function namesOfIncarnations(db: D1Database, engine: string): Promise<{ name: string; prefix: string }[]> {
  const { results } = await db
    .prepare(INCARNATION_NAMES_SQL)
    .bind(engine, `${engine}@`, `${engine}A`)
    .all<{ name: string; key: string | null }>();
  const root = namePrefix(engine);
  return results.flatMap((r) => {
    const prefix = incarnationOf(r.key, root);
    return prefix === null ? [] : [{ name: r.name, prefix }];
  });
}

/**
 * Deletes every R2 body under `root` (one engine name's, `ledger/<engine>/`) of an incarnation
 * `doomed` says goes, a page of keys per list and per delete, while the budget lasts.
 */
async function deleteIncarnations(bucket: R2Bucket, root: string, doomed: (prefix: string) => boolean, budget: Budget): Promise<boolean> {
  let cursor: string | undefined;
  do {
    if (!spend(budget)) return false;
    const listed = await bucket.list({ prefix: root, delimiter: "/", ...(cursor === undefined ? {} : { cursor }) });
    for (const incarnation of listed.delimitedPrefixes) {
      if (!doomed(incarnation)) continue;
      if (!(await deleteUnder(bucket, incarnation, budget)).done) return false;
    }
    cursor = listed.truncated ? listed.cursor : undefined;
  } while (cursor !== undefined);
  return true;
}

/**
 * Deletes every R2 body of the engine, by its incarnation's prefix rather than by the rows that
 * name them: retention deletes rows before their day's object, and a batch whose rows were never
 * stored leaves an object no row names; once the engine's row is gone nothing would find them.
 * An archive's bodies stay. Whether it got through within the budget.
 */
async function deleteBodies(db: D1Database, bucket: R2Bucket, engine: string, budget: Budget): Promise<boolean> {
  if (!spend(budget)) return false;
  const kept = new Set((await namesOfIncarnations(db, engine)).filter((n) => n.name !== engine).map((n) => n.prefix));
  return deleteIncarnations(bucket, namePrefix(engine), (prefix) => !kept.has(prefix), budget);
}

/**
 * Records the archive as the delete that keeps the history begins, before it re-files a row: the
 * name, the engine, and its calls' incarnation (read from the engine's calls, or the archive's
 * if an earlier request of the same delete re-filed them, else the prefix the engine's object
 * gave: an idle engine whose calls' rows retention took may still have bodies of the cutoff's
 * day, which the archive's delete must find). Repeating it adds nothing; it only fills in the
 * prefix of an archive whose calls were not there before.
 */
const ARCHIVE_ROW: Step = {
  table: "archives",
  sql: `INSERT INTO archives (name, from_engine, body_prefix, created_at)
    SELECT ?2, ?1, CASE WHEN substr(key, 1, length(?4)) = ?4 AND instr(substr(key, length(?4) + 1), '/') > 1
      THEN substr(key, 1, length(?4) + instr(substr(key, length(?4) + 1), '/')) ELSE ?5 END, ?3
    FROM (SELECT (SELECT body_key FROM llm_calls WHERE engine IN (?1, ?2) LIMIT 1) AS key)
    WHERE true
    ON CONFLICT (name) DO UPDATE SET body_prefix = excluded.body_prefix WHERE archives.body_prefix IS NULL`,
  args: (archive, engine) => [archive?.name, archive?.at, namePrefix(engine), archive?.bodies ?? null],
};

/** Runs `steps` with ?1 = `name`, each chunk after chunk, while the budget lasts; false when it ran out. */
async function runSteps(db: D1Database, name: string, steps: Step[], archive: Archive | null, budget: Budget, rows: Record<string, number>): Promise<boolean> {
  for (const step of steps) {
    for (;;) {
      if (!spend(budget)) return false;
      const changed = (await db.prepare(step.sql).bind(name, ...step.args(archive, name)).run()).meta.changes;
      if (changed > 0) rows[step.table] = (rows[step.table] ?? 0) + changed;
      if (changed < CHUNK_ROWS) break;
    }
  }
  return true;
}

/**
 * Deletes the engine's rows, chunk by chunk, for at most MAX_STATEMENTS statements; `archive`
 * keeps its history under that name instead (recorded in archives first). `done` once the
 * engine's own row is gone.
 */
export async function deleteEngineRows(db: D1Database, engine: string, archive: Archive | null, bodies: R2Bucket | null = null): Promise<RowsDeleted> {
  const rows: Record<string, number> = {};
  const budget: Budget = { left: MAX_STATEMENTS };
  if (archive === null && bodies !== null && !(await deleteBodies(db, bodies, engine, budget))) return { done: false, rows };
  // The record is neither a row deleted nor one re-filed: not counted in `rows`.
  if (archive !== null && !(await runSteps(db, engine, [ARCHIVE_ROW], archive, budget, {}))) return { done: false, rows };
  const steps = [...STATE, ...(archive === null ? DELETE_HISTORY : KEEP_HISTORY), ENGINE_ROW];
  return { done: await runSteps(db, engine, steps, archive, budget, rows), rows };
}

/** An archive by its name, `<engine>@<ms>`, and the engine it came from (the name's part before "@"). */
export type ArchiveName = { name: string; engine: string };

/** Whether the archive exists: a record, or (for one a Worker older than the archives table made) rows in its history. */
async function archiveKnown(db: D1Database, archive: string): Promise<boolean> {
  const row = await db
    .prepare(
      `SELECT EXISTS (SELECT 1 FROM archives WHERE name = ?1) OR EXISTS (SELECT 1 FROM trajectories WHERE engine = ?1)
         OR EXISTS (SELECT 1 FROM llm_calls WHERE engine = ?1) OR EXISTS (SELECT 1 FROM reward_history WHERE engine = ?1)
         OR EXISTS (SELECT 1 FROM runs WHERE engine = ?1) OR EXISTS (SELECT 1 FROM inference_tests WHERE engine = ?1) AS known`,
    )
    .bind(archive)
    .first<{ known: number }>();
  return row?.known === 1;
}

const ARCHIVE_RECORD: Step = { table: "archives", sql: "DELETE FROM archives WHERE name = ?1", args: () => [] };

/**
 * Deletes a history kept under an archive name, in the engine delete's bounded chunks and budget:
 * its call bodies first (its incarnation's prefix in R2, unless another archive or the live
 * engine of the name has calls there), then its rows (DELETE_HISTORY, by the archive's name),
 * then its record, last, so that a delete cut off anywhere is found and finished by repeating it.
 * Null when there is no such archive.
 */
export async function deleteArchiveRows(db: D1Database, archive: ArchiveName, bodies: R2Bucket | null): Promise<RowsDeleted | null> {
  const rows: Record<string, number> = {};
  const budget: Budget = { left: MAX_STATEMENTS };
  spend(budget);
  if (!(await archiveKnown(db, archive.name))) return null;
  if (bodies !== null) {
    spend(budget);
    const names = await namesOfIncarnations(db, archive.engine);
    const own = names.find((n) => n.name === archive.name)?.prefix;
    const shared = own !== undefined && names.some((n) => n.name !== archive.name && n.prefix === own);
    if (own !== undefined && !shared && !(await deleteUnder(bodies, own, budget)).done) return { done: false, rows };
  }
  return { done: await runSteps(db, archive.name, [...DELETE_HISTORY, ARCHIVE_RECORD], null, budget, rows), rows };
}
