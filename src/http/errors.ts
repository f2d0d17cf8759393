import type { ContentfulStatusCode } from "hono/utils/http-status";
import type { z } from "zod";
import type { ErrorResponse } from "../protocol/admin";
import type { Reply } from "../engine/reply";

/** A JSON answer, with the headers hono's `c.json` gives it. */
export function jsonResponse(body: unknown, status: number): Response {
  return new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });
}

/** Every error body: a stable code for programs and a sentence for people (FastAPI's `detail`). */
export function errorResponse(status: ContentfulStatusCode, error: string, detail: string): Response {
  const body: ErrorResponse = { error, detail };
  return jsonResponse(body, status);
}

export function replyResponse<T>(reply: Reply<T>, okStatus: ContentfulStatusCode = 200): Response {
  return reply.ok ? jsonResponse(reply.body, okStatus) : errorResponse(reply.status, reply.error, reply.detail);
}

/** What an exception escaping a handler becomes; logged, since it is a bug. */
export function internalError(err: unknown): Response {
  console.error("unhandled error", err);
  return errorResponse(500, "internal_error", err instanceof Error ? err.message : String(err));
}

/** "episode_uuid: must not be empty; workflow_output.reward: expected number" */
export function describeIssues(error: z.ZodError): string {
  return error.issues
    .map((i) => `${i.path.length > 0 ? i.path.join(".") : "body"}: ${i.message}`)
    .join("; ");
}
