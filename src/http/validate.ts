import type { Context } from "hono";
import type { z } from "zod";
import { isTooLargeIssue } from "../protocol/limits";
import { describeIssues, errorResponse } from "./errors";

export type Parsed<T> = { ok: true; value: T } | { ok: false; response: Response };

/**
 * Validates a JSON body's text. Malformed JSON is a 400, a body of the wrong shape a 422 (as
 * FastAPI answers), each with a message that says what was wrong. An empty body counts as
 * `emptyAs` when one is given.
 */
export function parseJsonText<S extends z.ZodType>(text: string, schema: S, emptyAs?: unknown): Parsed<z.output<S>> {
  let raw: unknown;
  if (text.trim() === "" && emptyAs !== undefined) {
    raw = emptyAs;
  } else {
    try {
      raw = JSON.parse(text);
    } catch (e) {
      const why = e instanceof Error ? e.message : String(e);
      return { ok: false, response: errorResponse(400, "malformed_json", `The request body is not valid JSON: ${why}`) };
    }
  }
  return checkInput(schema, raw);
}

/**
 * Validates an already decoded input (a query string's parameters, say): a 422 if it has the
 * wrong shape, a 413 if a value in it is over its size (as a body over its size is).
 */
export function checkInput<S extends z.ZodType>(schema: S, raw: unknown): Parsed<z.output<S>> {
  const parsed = schema.safeParse(raw);
  if (!parsed.success) {
    const [status, code] = parsed.error.issues.some(isTooLargeIssue) ? ([413, "payload_too_large"] as const) : ([422, "invalid_request"] as const);
    return { ok: false, response: errorResponse(status, code, describeIssues(parsed.error)) };
  }
  return { ok: true, value: parsed.data };
}

export async function readJson<S extends z.ZodType>(c: Context, schema: S, emptyAs?: unknown): Promise<Parsed<z.output<S>>> {
  return parseJsonText(await c.req.text(), schema, emptyAs);
}

export function readQuery<S extends z.ZodType>(c: Context, schema: S): Parsed<z.output<S>> {
  return checkInput(schema, c.req.query());
}
