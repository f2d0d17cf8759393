/**
 * FastAPI's answers to a request body it cannot take, as Atropos's clients see them: a 422 with
 * `{"detail": [{type, loc, msg, input}]}` (pydantic's errors, `loc` starting at "body"), and a
 * 400 plain-text "Invalid gzip payload" from Atropos's gzip middleware.
 */
import { z } from "zod";
import type { PydanticIssue } from "../protocol/atropos";
import { jsonResponse } from "../http/errors";

/** FastAPI's 422 body: one entry per pydantic error, `loc` its place from "body" down. */
export const FastApiValidationError = z.object({
  detail: z.array(
    z.object({
      type: z.string(),
      loc: z.array(z.union([z.string(), z.number().int()])),
      msg: z.string(),
      input: z.unknown(),
      ctx: z.record(z.string(), z.unknown()).optional(),
    }),
  ),
});
type Detail = z.output<typeof FastApiValidationError>["detail"][number];

/** Atropos's gzip middleware's answer to a body that says it is gzip and is not. */
export const INVALID_GZIP_TEXT = "Invalid gzip payload";

export const unprocessable = (detail: Detail[]): Response => jsonResponse({ detail }, 422);

/** The value at `path` in `body`, or undefined. */
function at(body: unknown, path: readonly PropertyKey[]): unknown {
  let v = body;
  for (const k of path) v = typeof v === "object" && v !== null ? (v as Record<PropertyKey, unknown>)[k] : undefined;
  return v;
}

/** pydantic's errors for a zod failure of an Atropos schema (protocol/atropos.ts puts pydantic's type and message in each issue). */
export function pydanticErrors(error: z.ZodError, body: unknown, model: "object" | "list"): Detail[] {
  const out: Detail[] = [];
  for (const issue of error.issues) {
    const path = issue.path.filter((p): p is string | number => typeof p !== "symbol");
    const params = issue.code === "custom" ? (issue.params as PydanticIssue | undefined) : undefined;
    if (params !== undefined) {
      // A missing field's input is the object it is missing from, as pydantic reports it.
      const input = params.type === "missing" ? at(body, path.slice(0, -1)) : params.input;
      out.push({ type: params.type, loc: ["body", ...path], msg: params.msg, input: input ?? null });
    } else if (issue.code === "invalid_type" && issue.expected === "array") {
      out.push({ type: "list_type", loc: ["body", ...path], msg: "Input should be a valid list", input: at(body, path) ?? null });
    } else if (issue.code === "unrecognized_keys") {
      for (const key of issue.keys) out.push({ type: "extra_forbidden", loc: ["body", ...path, key], msg: "Extra inputs are not permitted", input: at(body, [...path, key]) ?? null });
    } else if (path.length > 0 && ownSchemaIssue(issue, body, path, out)) {
      // The exchange's own schemas (/config) carry no pydantic params: named as pydantic would.
    } else {
      const where = path.slice(0, model === "list" ? 1 : 0);
      out.push({ type: "model_attributes_type", loc: ["body", ...where], msg: "Input should be a valid dictionary or object to extract fields from", input: at(body, where) ?? null });
    }
  }
  return out;
}

/**
 * pydantic's error for an issue of the exchange's own schemas (its /config), pushed to `out`;
 * false for an issue it has no wording for. A range names its bound, as pydantic's `ge`/`le` do.
 */
function ownSchemaIssue(issue: z.core.$ZodIssue, body: unknown, path: (string | number)[], out: Detail[]): boolean {
  const loc = ["body", ...path];
  const input = at(body, path) ?? null;
  if (issue.code === "too_small" && issue.origin === "number") {
    const type = issue.inclusive === false ? "greater_than" : "greater_than_equal";
    out.push({ type, loc, msg: `Input should be greater than${type === "greater_than" ? "" : " or equal to"} ${issue.minimum}`, input, ctx: { [type === "greater_than" ? "gt" : "ge"]: issue.minimum } });
    return true;
  }
  if (issue.code === "too_big" && issue.origin === "number") {
    const type = issue.inclusive === false ? "less_than" : "less_than_equal";
    out.push({ type, loc, msg: `Input should be less than${type === "less_than" ? "" : " or equal to"} ${issue.maximum}`, input, ctx: { [type === "less_than" ? "lt" : "le"]: issue.maximum } });
    return true;
  }
  if (issue.code === "invalid_type" && (issue.expected === "int" || issue.expected === "number")) {
    out.push({ type: "int_type", loc, msg: "Input should be a valid integer", input });
    return true;
  }
  return false;
}

/** FastAPI's 422 for a body that is not JSON: where the decoder stopped, and why. */
export function jsonInvalid(text: string, error: unknown): Response {
  const message = error instanceof Error ? error.message : String(error);
  const pos = /position (\d+)/.exec(message)?.[1];
  return unprocessable([{ type: "json_invalid", loc: ["body", pos === undefined ? text.length : Number(pos)], msg: "JSON decode error", input: {}, ctx: { error: "Expecting value" } }]);
}

/** FastAPI's 422 for a request that needs a body and has none. */
export const bodyMissing = (): Response => unprocessable([{ type: "missing", loc: ["body"], msg: "Field required", input: null }]);

export const invalidGzip = (): Response => new Response(INVALID_GZIP_TEXT, { status: 400, headers: { "content-type": "text/plain; charset=utf-8" } });
