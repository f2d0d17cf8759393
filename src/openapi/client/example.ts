/**
 * A starting request body for the reference page's try-it form, made from a JSON Schema:
 * the required fields (or, if none are required, all of them) with their defaults or a
 * plausible value. Good enough to edit, not meant to be accepted as is.
 */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

export function exampleModule() {
  const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

  function example(schema: unknown, depth = 0): Json {
    if (!isRecord(schema) || depth > 6) return null;
    if ("default" in schema) return schema["default"] as Json;
    if ("const" in schema) return schema["const"] as Json;
    if (Array.isArray(schema["enum"])) return (schema["enum"][0] ?? null) as Json;
    const alternatives = schema["anyOf"] ?? schema["oneOf"];
    if (Array.isArray(alternatives)) {
      const first = alternatives.find((a) => !(isRecord(a) && a["type"] === "null"));
      return example(first, depth + 1);
    }
    switch (schema["type"]) {
      case "object": {
        const props = isRecord(schema["properties"]) ? schema["properties"] : {};
        const required = Array.isArray(schema["required"]) ? (schema["required"] as string[]) : [];
        const keys = required.length > 0 ? required : Object.keys(props);
        const out: { [key: string]: Json } = {};
        for (const k of keys) out[k] = example(props[k], depth + 1);
        return out;
      }
      case "array":
        return [];
      case "string":
        return typeof schema["minLength"] === "number" && schema["minLength"] > 0 ? "example" : "";
      case "integer":
      case "number":
        return typeof schema["minimum"] === "number" ? schema["minimum"] : typeof schema["exclusiveMinimum"] === "number" ? schema["exclusiveMinimum"] + 1 : 0;
      case "boolean":
        return false;
      default:
        return null;
    }
  }

  return { example };
}
export type ExampleModule = ReturnType<typeof exampleModule>;
