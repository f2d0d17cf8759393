/**
 * zod -> JSON Schema for the OpenAPI document. OpenAPI 3.1 schemas are JSON Schema 2020-12,
 * so zod's own converter is used as is; only the `$schema` key is dropped, because inside an
 * OpenAPI document the dialect is set once for the whole document (`jsonSchemaDialect`).
 */
import { z } from "zod";

export type JsonSchema = { [key: string]: unknown };

/**
 * `io` matters: a request is described as the wire accepts it (fields with defaults may be
 * omitted), a response as the exchange sends it (defaults filled in, so those fields are required).
 */
export function toJsonSchema(schema: z.ZodType, io: "input" | "output"): JsonSchema {
  const { $schema: _dialect, ...rest } = z.toJSONSchema(schema, { target: "draft-2020-12", io }) as JsonSchema;
  return rest;
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
