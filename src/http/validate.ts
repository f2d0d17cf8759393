import type { Context } from "hono";
import type { z } from "zod";
import { isTooLargeIssue, MAX_MEDIA_UPLOAD_BODY_BYTES } from "../protocol/limits";
import { routedBodyChecked, tooLarge } from "./body";
import { describeIssues, errorResponse } from "./errors";
import { parseRequestJson } from "./python-json";

export type Parsed<T> = { ok: true; value: T } | { ok: false; response: Response };

/**
 * How deep a request body may nest arrays and objects: far beyond any real body, and far short
 * of where recursive code after the parse (the RPC to the engine, zod's JSON values,
 * JSON.stringify) runs out of stack, which made a deeply nested body a 500.
 */
export const MAX_JSON_DEPTH = 128;

/** Whether JSON text nests arrays and objects deeper than `max`, by one pass over it (brackets in strings do not count). */
export function nestsDeeperThan(text: string, max: number): boolean {
  // Every level costs at least two characters.
  if (text.length <= 2 * max) return false;
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > max) return true;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return false;
}

export const tooDeep = `body: nests arrays and objects deeper than ${MAX_JSON_DEPTH} levels`;

/**
 * Validates a JSON body's text. Malformed JSON is a 400, a body of the wrong shape a 422 (as
 * FastAPI answers), each with a message that says what was wrong. An empty body counts as
 * `emptyAs` when one is given; a body that is no JSON (or nests too deep to be read) as
 * `unparsableAs` when one is given, for the routes whose seed read such a body as a default.
 * Python's NaN and ±Infinity are read (parseRequestJson).
 */
export function parseJsonText<S extends z.ZodType>(text: string, schema: S, emptyAs?: unknown, unparsableAs?: unknown): Parsed<z.output<S>> {
  let raw: unknown;
  if (text.trim() === "" && emptyAs !== undefined) {
    raw = emptyAs;
  } else if (nestsDeeperThan(text, MAX_JSON_DEPTH)) {
    if (unparsableAs === undefined) return { ok: false, response: errorResponse(422, "invalid_request", tooDeep) };
    raw = unparsableAs;
  } else {
    try {
      raw = parseRequestJson(text);
    } catch (e) {
      if (unparsableAs === undefined) {
        const why = e instanceof Error ? e.message : String(e);
        return { ok: false, response: errorResponse(400, "malformed_json", `The request body is not valid JSON: ${why}`) };
      }
      raw = unparsableAs;
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
  const text = await routedBodyChecked(c);
  // Only a media upload's body is read here (limitBody read the others): past its own limit.
  if (text === null) return { ok: false, response: tooLarge(MAX_MEDIA_UPLOAD_BODY_BYTES) };
  return parseJsonText(text, schema, emptyAs);
}

/** A query's parameters, each once: `?run=1&run=2` is refused (422) rather than read as one of its values, which the caller could not tell. */
export function checkQuery<S extends z.ZodType>(schema: S, url: string): Parsed<z.output<S>> {
  // No prototype: a parameter named `constructor` is a parameter like any other.
  const values: Record<string, string> = Object.create(null) as Record<string, string>;
  for (const [name, value] of new URL(url).searchParams) {
    if (name === "") continue; // `?=x`: no name to read it by
    if (name in values) return { ok: false, response: errorResponse(422, "invalid_request", `${name}: given more than once; give it once`) };
    values[name] = value;
  }
  return checkInput(schema, values);
}

export function readQuery<S extends z.ZodType>(c: Context, schema: S): Parsed<z.output<S>> {
  return checkQuery(schema, c.req.url);
}
