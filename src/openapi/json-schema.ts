/**
 * zod -> JSON Schema for the OpenAPI document (and, standalone, for MCP tools). OpenAPI 3.1
 * schemas are JSON Schema 2020-12, so zod's own converter is used as is; only the `$schema` key
 * is dropped, because inside an OpenAPI document the dialect is set once for the whole document
 * (`jsonSchemaDialect`).
 */
import { z } from "zod";

export type JsonSchema = { [key: string]: unknown };

/**
 * `io` matters: a request is described as the wire accepts it (fields with defaults may be
 * omitted), a response as the exchange sends it (defaults filled in, so those fields are required).
 */
export function toJsonSchema(schema: z.ZodType, io: "input" | "output"): JsonSchema {
  const { $defs, ...rest } = standaloneJsonSchema(schema, io);
  if ($defs === undefined) return rest;
  return hoistDefs(rest, $defs as Record<string, JsonSchema>);
}

/**
 * The same schema for use outside the OpenAPI document (an MCP tool's inputSchema): there `#`
 * is the schema itself, so its `$defs` and their `#/$defs/<name>` refs stay where they are.
 * Without `$schema` all the same: 2020-12 is the default dialect of both OpenAPI 3.1 and MCP.
 */
export function standaloneJsonSchema(schema: z.ZodType, io: "input" | "output"): JsonSchema {
  const { $schema: _dialect, ...rest } = z.toJSONSchema(schema, { target: "draft-2020-12", io }) as JsonSchema;
  return rest;
}

/**
 * Schemas zod cannot inline (recursive ones, e.g. a JSON value) come back with local `$defs`
 * and `#/$defs/<name>` refs. Inside an OpenAPI document `#` is the document's root, so those
 * refs would dangle: each def moves to components/schemas under a name made from its content
 * (so the same def from many routes is stored once) and every ref is rewritten to it.
 */
const sharedDefs = new Map<string, JsonSchema>();

/** The defs hoisted so far, for the document's components/schemas. */
export const hoistedDefs = (): Record<string, JsonSchema> => Object.fromEntries(sharedDefs);

function contentName(def: JsonSchema): string {
  // FNV-1a: short, stable across runs, and collisions are irrelevant at this scale.
  let h = 0x811c9dc5;
  for (const ch of JSON.stringify(def)) h = Math.imul(h ^ ch.charCodeAt(0), 0x01000193) >>> 0;
  return `Shared_${h.toString(36)}`;
}

function hoistDefs(root: JsonSchema, defs: Record<string, JsonSchema>): JsonSchema {
  const names = new Map(Object.entries(defs).map(([local, def]) => [`#/$defs/${local}`, contentName(def)]));
  const rewrite = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(rewrite);
    if (typeof v !== "object" || v === null) return v;
    const out: JsonSchema = {};
    for (const [k, x] of Object.entries(v)) {
      const target = k === "$ref" && typeof x === "string" ? names.get(x) : undefined;
      out[k] = target !== undefined ? `#/components/schemas/${target}` : rewrite(x);
    }
    return out;
  };
  for (const [local, def] of Object.entries(defs)) sharedDefs.set(names.get(`#/$defs/${local}`) ?? local, rewrite(def) as JsonSchema);
  return rewrite(root) as JsonSchema;
}

/** Query parameters: one OpenAPI parameter per property of an object schema. */
export function queryParameters(schema: z.ZodType): JsonSchema[] {
  const json = toJsonSchema(schema, "input");
  const props = (json["properties"] ?? {}) as Record<string, JsonSchema>;
  const required = new Set((json["required"] ?? []) as string[]);
  return Object.entries(props).map(([name, s]) => ({
    name,
    in: "query",
    required: required.has(name),
    ...(typeof s["description"] === "string" ? { description: s["description"] } : {}),
    schema: s,
  }));
}
