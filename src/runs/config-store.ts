/**
 * D1 access for what a run is made from: the environment catalog, the locked fields, the
 * selected environment and its edits. JSON columns are parsed back through the protocol's
 * schemas, so a row written by an older version cannot smuggle a wrong shape into an answer.
 */
import { and, eq } from "drizzle-orm";
import type { DrizzleD1Database } from "drizzle-orm/d1";
import { z } from "zod";
import { runCatalogs, runConfigEdits, runEnvironments, runLockedFields, runSelections } from "../db/schema";
import { ConfigField, JsonValue, ScanProblem, type CatalogReport, type EnvironmentInfo, type LockedField, type SetLockedFieldsRequest } from "../protocol/runs";

export type Db = DrizzleD1Database<Record<string, never>>;
export type Statement = Parameters<Db["batch"]>[0][number];

const Fields = z.array(ConfigField);
const Problems = z.array(ScanProblem);
const Dirs = z.array(z.string());

export const parseJson = <S extends z.ZodType>(schema: S, text: string): z.output<S> => schema.parse(JSON.parse(text));

type EnvRow = typeof runEnvironments.$inferSelect;

function toEnvironment(r: EnvRow): EnvironmentInfo {
  return {
    name: r.name,
    class_name: r.className,
    file_path: r.filePath,
    description: r.description,
    config_class: r.configClass,
    fields: r.fields === null ? null : parseJson(Fields, r.fields),
    fields_source: r.fieldsSource,
    fields_error: r.fieldsError,
  };
}

/**
 * The writes below that add rows of the engine's begin their batch with `live` (runs/context.ts
 * liveGuard): written only while the engine is the one the caller was checked with.
 */

/** Replaces the engine's catalog with the agent's latest scan, in one transaction. */
export async function replaceCatalog(db: Db, live: Statement, engine: string, report: CatalogReport, now: number): Promise<void> {
  const statements: Statement[] = [live, db.delete(runEnvironments).where(eq(runEnvironments.engine, engine))];
  // One statement per environment: D1 binds at most 100 parameters per statement.
  for (const e of report.environments) {
    statements.push(
      db.insert(runEnvironments).values({
        engine,
        name: e.name,
        className: e.class_name,
        filePath: e.file_path,
        description: e.description,
        configClass: e.config_class,
        fields: e.fields === null ? null : JSON.stringify(e.fields),
        fieldsSource: e.fields_source,
        fieldsError: e.fields_error,
      }),
    );
  }
  const catalog = { agentId: report.agent_id, directories: JSON.stringify(report.directories), problems: JSON.stringify(report.problems), scannedAt: now };
  statements.push(db.insert(runCatalogs).values({ engine, ...catalog }).onConflictDoUpdate({ target: runCatalogs.engine, set: catalog }));
  await db.batch(statements as [Statement, ...Statement[]]);
}

export async function loadCatalog(db: Db, engine: string) {
  const [envs, meta] = await db.batch([
    db.select().from(runEnvironments).where(eq(runEnvironments.engine, engine)).orderBy(runEnvironments.name),
    db.select().from(runCatalogs).where(eq(runCatalogs.engine, engine)),
  ]);
  const m = meta[0];
  return {
    environments: envs.map(toEnvironment),
    problems: m ? parseJson(Problems, m.problems) : [],
    directories: m ? parseJson(Dirs, m.directories) : [],
    scannedAt: m ? m.scannedAt : null,
  };
}

export async function findEnvironment(db: Db, engine: string, name: string): Promise<EnvironmentInfo | null> {
  const rows = await db.select().from(runEnvironments).where(and(eq(runEnvironments.engine, engine), eq(runEnvironments.name, name)));
  return rows[0] ? toEnvironment(rows[0]) : null;
}

export async function environmentNames(db: Db, engine: string): Promise<string[]> {
  const rows = await db.select({ name: runEnvironments.name }).from(runEnvironments).where(eq(runEnvironments.engine, engine)).orderBy(runEnvironments.name);
  return rows.map((r) => r.name);
}

export async function lockedFields(db: Db, engine: string): Promise<LockedField[]> {
  const rows = await db.select().from(runLockedFields).where(eq(runLockedFields.engine, engine)).orderBy(runLockedFields.section, runLockedFields.name);
  return rows.map((r) => ({ section: r.section, name: r.name, value: parseJson(JsonValue, r.value) }));
}

export async function changeLockedFields(db: Db, live: Statement, engine: string, req: SetLockedFieldsRequest, now: number): Promise<void> {
  const statements: Statement[] = [live];
  for (const r of req.remove) {
    statements.push(db.delete(runLockedFields).where(and(eq(runLockedFields.engine, engine), eq(runLockedFields.section, r.section), eq(runLockedFields.name, r.name))));
  }
  for (const s of req.set) {
    const value = JSON.stringify(s.value);
    statements.push(
      db
        .insert(runLockedFields)
        .values({ engine, section: s.section, name: s.name, value, updatedAt: now })
        .onConflictDoUpdate({ target: [runLockedFields.engine, runLockedFields.section, runLockedFields.name], set: { value, updatedAt: now } }),
    );
  }
  await db.batch(statements as [Statement, ...Statement[]]);
}

export async function selectedEnvironment(db: Db, engine: string): Promise<string | null> {
  const rows = await db.select().from(runSelections).where(eq(runSelections.engine, engine));
  return rows[0]?.environment ?? null;
}

export async function selectEnvironment(db: Db, live: Statement, engine: string, environment: string, resetEdits: boolean, now: number): Promise<void> {
  const select = db
    .insert(runSelections)
    .values({ engine, environment, selectedAt: now })
    .onConflictDoUpdate({ target: runSelections.engine, set: { environment, selectedAt: now } });
  if (!resetEdits) {
    await db.batch([live, select]);
    return;
  }
  await db.batch([live, select, db.delete(runConfigEdits).where(and(eq(runConfigEdits.engine, engine), eq(runConfigEdits.environment, environment)))]);
}

export async function editsOf(db: Db, engine: string, environment: string): Promise<Record<string, JsonValue>> {
  const rows = await db
    .select()
    .from(runConfigEdits)
    .where(and(eq(runConfigEdits.engine, engine), eq(runConfigEdits.environment, environment)))
    .orderBy(runConfigEdits.field);
  return Object.fromEntries(rows.map((r) => [r.field, parseJson(JsonValue, r.value)]));
}

export async function putEdit(db: Db, live: Statement, engine: string, environment: string, field: string, value: JsonValue, now: number): Promise<void> {
  const text = JSON.stringify(value);
  await db.batch([
    live,
    db
      .insert(runConfigEdits)
      .values({ engine, environment, field, value: text, editedAt: now })
      .onConflictDoUpdate({ target: [runConfigEdits.engine, runConfigEdits.environment, runConfigEdits.field], set: { value: text, editedAt: now } }),
  ]);
}
