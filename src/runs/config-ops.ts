/**
 * The environment catalog and the run configuration: what the REST routes and the MCP tools
 * both call. Every refusal is decided before anything is written.
 */
import type {
  CatalogReport,
  CatalogResponse,
  CurrentConfigResponse,
  EditConfigRequest,
  EnvironmentInfo,
  JsonValue,
  LockedField,
  SelectEnvironmentRequest,
  SetLockedFieldsRequest,
} from "../protocol/runs";
import { catalogStatus } from "./catalog-status";
import * as store from "./config-store";
import type { RunsCtx } from "./context";
import { storedJsonTooLarge } from "../protocol/limits";
import { done, refuse, tooLarge, type RunsReply } from "./reply";
import { checkEdit, fieldViews, renderYaml, withAtroposServer } from "./run-config";

export async function listEnvironments(ctx: RunsCtx): Promise<RunsReply<CatalogResponse>> {
  const [cat, selected, engine] = await Promise.all([store.loadCatalog(ctx.db, ctx.engine), store.selectedEnvironment(ctx.db, ctx.engine), ctx.catalogState()]);
  if (!engine.ok) return engine;
  const scannedAt = cat.scannedAt === null ? null : cat.scannedAt / 1000;
  return done({
    environments: cat.environments,
    count: cat.environments.length,
    problems: cat.problems,
    directories: cat.directories,
    scanned_at: scannedAt,
    selected,
    catalog_status: catalogStatus({ agent: engine.agent, scan: engine.scan, scannedAt, count: cat.environments.length, now: engine.now }),
  });
}

export async function scanEnvironments(ctx: RunsCtx): Promise<RunsReply<{ queued: true; command_seq: number; message: string }>> {
  const q = await ctx.enqueue("scan_environments", { kind: "scan_environments" });
  if (!q.ok) return q;
  return done({ queued: true as const, command_seq: q.seq, message: "The agent will scan its environment directories and report the catalog." });
}

export async function reportCatalog(ctx: RunsCtx, report: CatalogReport): Promise<RunsReply<{ success: true; count: number }>> {
  const seen = new Set<string>();
  for (const e of report.environments) {
    if (seen.has(e.name)) {
      return refuse(422, "duplicate_environment", `Two environments are named '${e.name}'; report the second as a problem instead.`, { name: e.name });
    }
    seen.add(e.name);
  }
  // Each environment is a D1 row holding its fields' JSON; its own JSON is at least as large.
  for (const [i, e] of report.environments.entries()) {
    const over = storedJsonTooLarge(`environments.${i} (${e.name})`, e);
    if (over !== null) return tooLarge(over);
  }
  const over = storedJsonTooLarge("the directories and problems", { agent_id: report.agent_id, directories: report.directories, problems: report.problems });
  if (over !== null) return tooLarge(over);
  await store.replaceCatalog(ctx.db, ctx.live, ctx.engine, report, ctx.now());
  await ctx.catalogReported();
  return done({ success: true as const, count: report.environments.length });
}

/** The locked fields runs get: the operator's, and the engine's Atropos API as their rollout server unless locked otherwise. */
async function runLockedFields(ctx: RunsCtx): Promise<LockedField[]> {
  return withAtroposServer(await store.lockedFields(ctx.db, ctx.engine), ctx.atroposUrl);
}

/** The selected environment, its catalog entry (null if a rescan dropped it), edits and locked fields. */
export async function loadDraft(ctx: RunsCtx) {
  const selected = await store.selectedEnvironment(ctx.db, ctx.engine);
  const [env, edits, locked] = await Promise.all([
    selected === null ? Promise.resolve(null) : store.findEnvironment(ctx.db, ctx.engine, selected),
    selected === null ? Promise.resolve({}) : store.editsOf(ctx.db, ctx.engine, selected),
    runLockedFields(ctx),
  ]);
  return { selected, env, edits: edits as Record<string, JsonValue>, locked };
}

function configView(selected: string | null, env: EnvironmentInfo | null, edits: Record<string, JsonValue>, locked: LockedField[]): CurrentConfigResponse {
  const fields = env?.fields ?? [];
  return {
    environment: selected,
    environment_available: env !== null,
    file_path: env?.file_path ?? null,
    fields_source: env?.fields_source ?? null,
    fields_error: env?.fields_error ?? null,
    ...fieldViews(fields, locked, edits),
    edits,
    yaml: selected === null ? null : renderYaml(fields, locked, edits),
  };
}

export async function getCurrentConfig(ctx: RunsCtx): Promise<RunsReply<CurrentConfigResponse>> {
  const d = await loadDraft(ctx);
  return done(configView(d.selected, d.env, d.edits, d.locked));
}

export async function unknownEnvironment(ctx: RunsCtx, name: string) {
  const available = await store.environmentNames(ctx.db, ctx.engine);
  const hint = available.length === 0 ? " The catalog is empty: is the agent running, and did it scan (POST /runs/environments/scan)?" : ` Available: ${available.join(", ")}.`;
  return refuse(404, "unknown_environment", `No environment named '${name}' on this engine.${hint}`, { name, available });
}

export async function selectEnvironment(ctx: RunsCtx, req: SelectEnvironmentRequest): Promise<RunsReply<CurrentConfigResponse & { message: string }>> {
  const env = await store.findEnvironment(ctx.db, ctx.engine, req.name);
  if (env === null) return unknownEnvironment(ctx, req.name);
  await store.selectEnvironment(ctx.db, ctx.live, ctx.engine, req.name, req.reset_edits, ctx.now());
  const [edits, locked] = await Promise.all([store.editsOf(ctx.db, ctx.engine, req.name), runLockedFields(ctx)]);
  const view = configView(req.name, env, edits, locked);
  const kept = Object.keys(edits).length;
  return done({
    message: `Selected environment '${req.name}' (${view.configurable_fields.length} configurable fields, ${view.locked_fields.length} locked${kept ? `, ${kept} earlier edits kept` : ""}).`,
    ...view,
  });
}

export async function editConfig(ctx: RunsCtx, req: EditConfigRequest): Promise<RunsReply<{ message: string; field: string; value: JsonValue; edits: Record<string, JsonValue> }>> {
  const over = storedJsonTooLarge("value", req.value);
  if (over !== null) return tooLarge(over);
  const d = await loadDraft(ctx);
  if (d.selected === null) return refuse(409, "no_environment_selected", "No environment is selected: select one first (POST /runs/config/environment or rl_select_environment).");
  if (d.env === null) return unknownEnvironment(ctx, d.selected);
  if (d.env.fields === null) {
    return refuse(409, "fields_unknown", `The agent could not read the config fields of '${d.selected}' (${d.env.fields_error ?? "no reason given"}), so edits cannot be checked; fix the environment and rescan.`);
  }
  const refusal = checkEdit(d.env.fields, d.locked, req.field, req.value);
  if (refusal !== null) return refuse(refusal.status, refusal.error, refusal.detail, refusal.hints);
  await store.putEdit(ctx.db, ctx.live, ctx.engine, d.selected, req.field, req.value, ctx.now());
  const edits = { ...d.edits, [req.field]: req.value };
  return done({ message: `Updated ${req.field} = ${JSON.stringify(req.value)}`, field: req.field, value: req.value, edits });
}

export async function setLockedFields(ctx: RunsCtx, req: SetLockedFieldsRequest): Promise<RunsReply<{ locked_fields: LockedField[] }>> {
  const keys = [...req.set, ...req.remove].map((f) => `${f.section}.${f.name}`);
  const twice = keys.find((k, i) => keys.indexOf(k) !== i);
  if (twice !== undefined) return refuse(422, "invalid_request", `${twice} is named twice; set or remove each field once per request.`, { field: twice });
  for (const [i, f] of req.set.entries()) {
    const over = storedJsonTooLarge(`set.${i}.value (${f.section}.${f.name})`, f.value);
    if (over !== null) return tooLarge(over);
  }
  // Every run's config carries all the locked fields: a set larger than one stored value could
  // start no run, and its rows would grow in D1 request after request.
  const after = new Map((await store.lockedFields(ctx.db, ctx.engine)).map((f) => [`${f.section}.${f.name}`, f.value]));
  for (const f of req.remove) after.delete(`${f.section}.${f.name}`);
  for (const f of req.set) after.set(`${f.section}.${f.name}`, f.value);
  const total = storedJsonTooLarge(`the locked fields after this change (${after.size})`, Object.fromEntries(after));
  if (total !== null) return tooLarge(`${total}: every run's config carries them all; remove some first`);
  await store.changeLockedFields(ctx.db, ctx.live, ctx.engine, req, ctx.now());
  return done({ locked_fields: await store.lockedFields(ctx.db, ctx.engine) });
}
