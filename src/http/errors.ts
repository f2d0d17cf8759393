import type { Context } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import type { z } from "zod";
import type { ErrorResponse } from "../protocol/admin";
import type { Reply } from "../engine/reply";

/** Every error body: a stable code for programs and a sentence for people (FastAPI's `detail`). */
export function errorJson(c: Context, status: ContentfulStatusCode, error: string, detail: string): Response {
  const body: ErrorResponse = { error, detail };
  return c.json(body, status);
}

export function replyJson<T>(c: Context, reply: Reply<T>, okStatus: ContentfulStatusCode = 200): Response {
  return reply.ok ? c.json(reply.body as object, okStatus) : errorJson(c, reply.status, reply.error, reply.detail);
}

/** "episode_uuid: must not be empty; workflow_output.reward: expected number" */
export function describeIssues(error: z.ZodError): string {
  return error.issues
    .map((i) => `${i.path.length > 0 ? i.path.join(".") : "body"}: ${i.message}`)
    .join("; ");
}
