/**
 * A run's configuration as plain functions: which fields may be edited, whether an edit is
 * allowed and well typed, and the YAML a run gets. Locked fields (the operator's
 * infrastructure settings) always win over the environment's defaults and over edits.
 *
 * The YAML has the sections Atropos-style trainers read: `env` (the environment's config
 * class: its defaults, then the edits, then the locked env fields), `openai` (a list of one
 * inference server, from the locked openai fields) and `trainer` (the locked trainer fields).
 */
import type { ConfigField, CurrentConfigResponse, JsonValue, LockedField } from "../protocol/runs";
import { parsePyType, typeProblem } from "./field-types";
import { toYaml } from "./yaml";

export type Refusal = { status: 409 | 422; error: string; detail: string; hints: Record<string, JsonValue> };

const lockedEnv = (locked: readonly LockedField[]): Map<string, JsonValue> =>
  new Map(locked.filter((l) => l.section === "env").map((l) => [l.name, l.value]));

/** The env field Atropos environments find their rollout server in. */
export const ROLLOUT_SERVER_FIELD = "rollout_server_url";

/**
 * The locked fields a run gets: the operator's, and `rollout_server_url` locked to the engine's
 * own Atropos API unless the operator locked it to something else, so a run needs no run-api of
 * its own. The URL carries no token (the views show it); the agent adds its own on the host.
 */
export function withAtroposServer(locked: readonly LockedField[], atroposUrl: string): LockedField[] {
  if (locked.some((l) => l.section === "env" && l.name === ROLLOUT_SERVER_FIELD)) return [...locked];
  return [...locked, { section: "env", name: ROLLOUT_SERVER_FIELD, value: atroposUrl }];
}

/** Why `field = value` may not be applied, or null when it may. */
export function checkEdit(fields: readonly ConfigField[], locked: readonly LockedField[], field: string, value: JsonValue): Refusal | null {
  const lock = lockedEnv(locked);
  if (lock.has(field)) {
    const v = lock.get(field) as JsonValue;
    return {
      status: 409,
      error: "field_locked",
      detail: `Field '${field}' is locked at ${JSON.stringify(v)} by the engine's operator (an infrastructure setting) and cannot be changed.`,
      hints: { field, locked_value: v },
    };
  }
  const def = fields.find((f) => f.name === field);
  if (def === undefined) {
    const available = fields.filter((f) => !lock.has(f.name)).map((f) => f.name);
    return {
      status: 422,
      error: "unknown_field",
      detail: `Unknown field '${field}'. Configurable fields: ${available.join(", ") || "(none)"}.`,
      hints: { field, available_fields: available },
    };
  }
  const problem = typeProblem(parsePyType(def.type), value);
  if (problem !== null) {
    return {
      status: 422,
      error: "wrong_type",
      detail: `Field '${field}' is ${def.type}: ${problem}.`,
      hints: { field, expected_type: def.type, current_default: def.default },
    };
  }
  return null;
}

/** The run's config document: defaults, then edits, then locked values. */
export function configDocument(fields: readonly ConfigField[], locked: readonly LockedField[], edits: Readonly<Record<string, JsonValue>>): { [k: string]: JsonValue } {
  const env: { [k: string]: JsonValue } = {};
  for (const f of fields) if (f.default !== null) env[f.name] = f.default;
  for (const [k, v] of Object.entries(edits)) env[k] = v;
  const openai: { [k: string]: JsonValue } = {};
  const trainer: { [k: string]: JsonValue } = {};
  for (const l of locked) {
    if (l.section === "env") env[l.name] = l.value;
    else if (l.section === "openai") openai[l.name] = l.value;
    else trainer[l.name] = l.value;
  }
  const doc: { [k: string]: JsonValue } = { env };
  if (Object.keys(openai).length > 0) doc["openai"] = [openai];
  if (Object.keys(trainer).length > 0) doc["trainer"] = trainer;
  return doc;
}

export const renderYaml = (fields: readonly ConfigField[], locked: readonly LockedField[], edits: Readonly<Record<string, JsonValue>>): string =>
  toYaml(configDocument(fields, locked, edits));

/** Edits that no longer apply (the field was locked, dropped by a rescan, or changed type). */
export function staleEdits(
  fields: readonly ConfigField[],
  locked: readonly LockedField[],
  edits: Readonly<Record<string, JsonValue>>,
): Array<{ field: string; error: string; detail: string }> {
  return Object.entries(edits).flatMap(([field, value]) => {
    const r = checkEdit(fields, locked, field, value);
    return r === null ? [] : [{ field, error: r.error, detail: r.detail }];
  });
}

/** The field views of the current-config answer. */
export function fieldViews(
  fields: readonly ConfigField[],
  locked: readonly LockedField[],
  edits: Readonly<Record<string, JsonValue>>,
): Pick<CurrentConfigResponse, "configurable_fields" | "locked_fields"> {
  const lock = lockedEnv(locked);
  const configurable = fields
    .filter((f) => !lock.has(f.name))
    .map((f) => ({
      name: f.name,
      type: f.type,
      default: f.default,
      description: f.description,
      current_value: f.name in edits ? (edits[f.name] as JsonValue) : f.default,
      edited: f.name in edits,
    }));
  const lockedViews = locked.map((l) => {
    const f = l.section === "env" ? fields.find((x) => x.name === l.name) : undefined;
    return { section: l.section, name: l.name, locked_value: l.value, type: f?.type ?? null, default: f?.default ?? null, description: f?.description ?? "" };
  });
  return { configurable_fields: configurable, locked_fields: lockedViews };
}
