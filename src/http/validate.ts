import type { Context } from "hono";
import type { z } from "zod";
import { describeIssues, errorJson } from "./errors";

export type Parsed<T> = { ok: true; value: T } | { ok: false; response: Response };

/**
 * Reads and validates a JSON body. Malformed JSON is a 400, a body of the wrong shape a 422
 * (as FastAPI answers), each with a message that says what was wrong.
 */
export async function readJson<S extends z.ZodType>(c: Context, schema: S, emptyAs?: unknown): Promise<Parsed<z.output<S>>> {
  const text = await c.req.text();
  let raw: unknown;
  if (text.trim() === "" && emptyAs !== undefined) {
    raw = emptyAs;
  } else {
    try {
      raw = JSON.parse(text);
    } catch (e) {
      const why = e instanceof Error ? e.message : String(e);
      return { ok: false, response: errorJson(c, 400, "malformed_json", `The request body is not valid JSON: ${why}`) };
    }
  }
  return check(c, schema, raw);
}

export function readQuery<S extends z.ZodType>(c: Context, schema: S): Parsed<z.output<S>> {
  return check(c, schema, c.req.query());
}

function check<S extends z.ZodType>(c: Context, schema: S, raw: unknown): Parsed<z.output<S>> {
  const parsed = schema.safeParse(raw);
  if (!parsed.success) return { ok: false, response: errorJson(c, 422, "invalid_request", describeIssues(parsed.error)) };
  return { ok: true, value: parsed.data };
}
