import type { ContentfulStatusCode } from "hono/utils/http-status";
import type { z } from "zod";
import type { ErrorResponse } from "../protocol/admin";
import type { Reply } from "../engine/reply";
import { loggedErrorId } from "../error-id";

/** A JSON answer, with the headers hono's `c.json` gives it. */
export function jsonResponse(body: unknown, status: number): Response {
  return new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });
}

/** Every error body: a stable code for programs and a sentence for people (FastAPI's `detail`). */
export function errorResponse(status: ContentfulStatusCode, error: string, detail: string): Response {
  const body: ErrorResponse = { error, detail };
  const res = jsonResponse(body, status);
  if (status === 401) res.headers.set("www-authenticate", bearerChallenge(error));
  return res;
}

/**
 * A 401's challenge (RFC 6750 s.3, which MCP's clients read to tell "needs a token" from other
 * failures): the token is a bearer token, and `invalid_token` when one was sent and refused.
 */
export function bearerChallenge(error: string): string {
  return `Bearer realm="rollout-exchange"${error === "invalid_token" ? ', error="invalid_token"' : ""}`;
}

export function replyResponse<T>(reply: Reply<T>, okStatus: ContentfulStatusCode = 200): Response {
  if (reply.ok) return jsonResponse(reply.body, okStatus);
  const res = errorResponse(reply.status, reply.error, reply.detail);
  if (reply.retry_after !== undefined) res.headers.set("retry-after", String(reply.retry_after));
  return res;
}

/**
 * What an exception escaping a handler becomes. Its message stays in the log: it may name D1's
 * tables and SQL, a Durable Object's or R2's internals, which are nobody's business but the
 * operator's. The caller gets an id to quote, and the operator finds the error by it.
 */
export function internalError(err: unknown): Response {
  const id = loggedErrorId("internal error", err);
  return errorResponse(500, "internal_error", `The exchange failed to answer this request (error id ${id}); its operator can look that id up in the Worker's log.`);
}

/** "episode_uuid: must not be empty; workflow_output.reward: expected number" */
export function describeIssues(error: z.ZodError): string {
  return error.issues
    .map((i) => `${i.path.length > 0 ? i.path.join(".") : "body"}: ${i.message}`)
    .join("; ");
}
