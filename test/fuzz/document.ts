/**
 * The OpenAPI document as the fuzzer reads it: its operations, their parameters and bodies, and
 * the answer each documented status promises (a JSON body, JSON lines, plain text, or none), as a validator (zod's JSON Schema reader, so no
 * schema code is generated at run time: workerd does not allow it).
 */
import { z } from "zod";

export type Schema = { [key: string]: unknown };
export type Parameter = { name: string; in: "path" | "query"; required?: boolean; schema: Schema };
/** A media type; JSON lines give the schema of each line as `x-itemSchema` (OpenAPI 3.2's `itemSchema`). */
export type Media = { schema: Schema; "x-itemSchema"?: Schema };
export type Answer = {
  $ref?: string;
  description?: string;
  content?: Record<string, Media>;
  /** A 5xx that refuses by design (the error codes it answers with), not a failure of the exchange. */
  "x-refusal-codes"?: string[];
};
export type Operation = {
  operationId: string;
  parameters?: (Parameter | { $ref: string })[];
  requestBody?: { required?: boolean; content: Record<string, { schema: Schema }> };
  responses: Record<string, Answer>;
  "x-roles": string[];
  /** A GET that changes the engine's state (Atropos's /batch): no snapshot reads it. */
  "x-changes-state"?: true;
};
export type Doc = {
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, Schema>; parameters: Record<string, Parameter>; responses: Record<string, Answer> };
};

export const METHODS = ["get", "post", "put", "delete", "patch", "head", "options"] as const;
export type Method = (typeof METHODS)[number];

/** `#/components/<kind>/<name>` -> the component. */
export function component<T>(doc: Doc, ref: string): T {
  const m = /^#\/components\/(schemas|parameters|responses)\/(.+)$/.exec(ref);
  const found = m ? (doc.components[m[1] as keyof Doc["components"]] as Record<string, unknown>)[m[2] as string] : undefined;
  if (found === undefined) throw new Error(`the document has no ${ref}`);
  return found as T;
}

export const parametersOf = (doc: Doc, op: Operation): Parameter[] =>
  (op.parameters ?? []).map((p) => ("$ref" in p ? component<Parameter>(doc, p.$ref) : p));

export const bodySchemaOf = (op: Operation): Schema | undefined => op.requestBody?.content["application/json"]?.schema;

/** Keys whose value is a schema, or a list or map of schemas: where a schema walk goes on. */
const SCHEMA_KEYS = new Set(["items", "additionalProperties", "propertyNames", "not", "contains"]);
const SCHEMA_LIST_KEYS = new Set(["anyOf", "oneOf", "allOf", "prefixItems"]);
const SCHEMA_MAP_KEYS = new Set(["properties", "$defs", "patternProperties"]);

/**
 * A schema ready for zod's reader: component refs pointed at `$defs`, and `default` dropped. A
 * default is only an annotation in JSON Schema, but zod's reader fills it in, which would let an
 * answer that lacks a documented (required) field pass.
 */
function forValidation(schema: unknown): unknown {
  if (typeof schema !== "object" || schema === null || Array.isArray(schema)) return schema;
  const out: Schema = {};
  for (const [k, v] of Object.entries(schema)) {
    if (k === "default") continue;
    if (k === "$ref" && typeof v === "string") out[k] = v.replace("#/components/schemas/", "#/$defs/");
    else if (SCHEMA_KEYS.has(k)) out[k] = forValidation(v);
    else if (SCHEMA_LIST_KEYS.has(k) && Array.isArray(v)) out[k] = v.map(forValidation);
    else if (SCHEMA_MAP_KEYS.has(k) && typeof v === "object" && v !== null) out[k] = Object.fromEntries(Object.entries(v).map(([n, s]) => [n, forValidation(s)]));
    else out[k] = v;
  }
  return out;
}

/** The media type of JSON lines (the ledger's export). */
export const JSON_LINES = "application/x-ndjson";

/** What a documented status promises: a JSON body of a schema, JSON lines each of a schema, plain text (Atropos's), or no body at all. */
export type Promised = ({ kind: "json"; schema: z.ZodType } | { kind: "lines"; item: z.ZodType } | { kind: "text"; schema: z.ZodType } | { kind: "empty" }) & {
  refusalCodes?: string[];
};

/** A validator of `schema`, its refs resolved against the document's components. */
const validatorOf = (doc: Doc, schema: Schema): z.ZodType =>
  z.fromJSONSchema({ ...(forValidation(schema) as Schema), $defs: Object.fromEntries(Object.entries(doc.components.schemas).map(([n, s]) => [n, forValidation(s)])) } as Parameters<typeof z.fromJSONSchema>[0]);

const validators = new WeakMap<Operation, Map<string, Promised>>();

/** The promise of `op` for `status`, or undefined when the document does not list the status. */
export function promiseOf(doc: Doc, op: Operation, status: number): Promised | undefined {
  const cache = validators.get(op) ?? new Map<string, Promised>();
  validators.set(op, cache);
  const key = String(status);
  const cached = cache.get(key);
  if (cached) return cached;
  let answer = op.responses[key];
  if (answer === undefined) return undefined;
  if (answer.$ref) answer = component<Answer>(doc, answer.$ref);
  const schema = answer.content?.["application/json"]?.schema;
  const item = answer.content?.[JSON_LINES]?.["x-itemSchema"];
  // By its media type's essence: the metrics' is `text/plain; version=0.0.4; charset=utf-8`.
  const text = Object.entries(answer.content ?? {}).find(([type]) => type.split(";")[0]?.trim() === "text/plain")?.[1]?.schema;
  if (answer.content !== undefined && schema === undefined && item === undefined && text === undefined) {
    throw new Error(`${op.operationId} ${status}: a body the fuzzer cannot check (${Object.keys(answer.content).join(", ")})`);
  }
  const body: Promised =
    schema !== undefined
      ? { kind: "json", schema: validatorOf(doc, schema) }
      : item !== undefined
        ? { kind: "lines", item: validatorOf(doc, item) }
        : text !== undefined
          ? { kind: "text", schema: validatorOf(doc, text) }
          : { kind: "empty" };
  const refusals = answer["x-refusal-codes"];
  const promise: Promised = refusals === undefined ? body : { ...body, refusalCodes: refusals };
  cache.set(key, promise);
  return promise;
}
