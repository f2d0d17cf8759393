/**
 * The deployment admin's routes (src/http/admin-routes.ts) described as data for the OpenAPI
 * document. The admin router is written route by route rather than from a table, so this list
 * is its mirror; test-browser/openapi.test.ts calls every route listed here on a live exchange
 * and checks each answer against the schema and status written here, so the two cannot drift
 * apart unnoticed.
 */
import { z } from "zod";
import {
  ArchiveListQuery,
  ArchiveListResponse,
  CreateEngineRequest,
  DeleteArchiveResponse,
  CreateEngineResponse,
  DeleteEngineQuery,
  DeleteEngineResponse,
  EngineListResponse,
  IssueTokenRequest,
  IssuedToken,
  TokenListResponse,
} from "../protocol/admin";
import type { Refusal } from "./error-responses";

export type AdminRouteSpec = {
  method: "get" | "post" | "delete";
  /** OpenAPI path template, e.g. `/admin/engines/{name}/tokens`. */
  path: string;
  operationId: string;
  summary: string;
  body?: z.ZodType;
  /** The query string's parameters, if it takes any. */
  query?: z.ZodType;
  response: z.ZodType;
  successStatus: 200 | 201;
  /** Another success status with the same body: 202 for work left that a repeated request carries on. */
  partialStatus?: 202;
  /** Error statuses this route answers besides 401/403 (which every admin route may answer). */
  errors: readonly (400 | 404 | 409 | 413 | 422 | 503)[];
  /** The 503s it answers by design, marked in the document (x-refusal-codes): send the same request again. */
  refusals?: readonly Refusal[];
};

const BODY_ERRORS = [400, 413, 422] as const;

export const ADMIN_API: readonly AdminRouteSpec[] = [
  {
    method: "post",
    path: "/admin/engines",
    operationId: "admin_create_engine",
    summary: "Create an engine; answers one token per role (shown only this once).",
    body: CreateEngineRequest,
    response: CreateEngineResponse,
    successStatus: 201,
    errors: [...BODY_ERRORS, 409],
  },
  {
    method: "get",
    path: "/admin/engines",
    operationId: "admin_list_engines",
    summary: "All engines of this deployment.",
    response: EngineListResponse,
    successStatus: 200,
    errors: [],
  },
  {
    method: "get",
    path: "/admin/engines/{name}/tokens",
    operationId: "admin_list_tokens",
    summary: "An engine's tokens, without their secrets.",
    response: TokenListResponse,
    successStatus: 200,
    errors: [404],
  },
  {
    method: "post",
    path: "/admin/engines/{name}/tokens",
    operationId: "admin_issue_token",
    summary: "Issue a new token for a role of an engine (the secret is shown only this once).",
    body: IssueTokenRequest,
    response: IssuedToken,
    successStatus: 201,
    errors: [...BODY_ERRORS, 404],
  },
  {
    method: "delete",
    path: "/admin/engines/{name}/tokens/{id}",
    operationId: "admin_revoke_token",
    summary:
      "Revoke a token; the engine refuses it from the next request on, releases the live claims made with it (recorded as reaped, their per-claim keys dead) and, for a trainer's token, changes the gateway secret. Repeating it changes nothing.",
    response: z.object({ success: z.boolean() }),
    successStatus: 200,
    // No body is read, but one sent past the size limit is refused before the route runs.
    errors: [404, 413],
  },
  {
    method: "delete",
    path: "/admin/engines/{name}",
    operationId: "admin_delete_engine",
    summary:
      "Delete an engine: its Durable Object's state, its tokens and its D1 rows (or, with keep_history, all but its history). 409 while its agent is connected, unless forced. Answers 202 when work is left: repeat the request, with the keep_history it began with (409 otherwise).",
    query: DeleteEngineQuery,
    response: DeleteEngineResponse,
    successStatus: 200,
    partialStatus: 202,
    // As revoking a token: no body is read, but one past the size limit is refused first.
    errors: [404, 409, 413, 422, 503],
    refusals: [
      {
        code: "history_not_written",
        when: "With keep_history, the engine's last results could not be written to D1 now: nothing was deleted. Send the same request again, or delete without keep_history.",
      },
      {
        code: "delete_in_progress",
        when: "Another delete of the engine is under way and has not ended within seconds (its last results still being written to D1): nothing was done. Send the same request again.",
      },
    ],
  },
  {
    method: "get",
    path: "/admin/archives",
    operationId: "admin_list_archives",
    summary:
      "The histories kept under an archive name by deletes with keep_history (kept until deleted), a page at a time in name order; `next` is the `after` of the next page.",
    query: ArchiveListQuery,
    response: ArchiveListResponse,
    successStatus: 200,
    errors: [422],
  },
  {
    method: "delete",
    path: "/admin/archives/{name}",
    operationId: "admin_delete_archive",
    summary:
      "Delete a history kept under an archive name: its trajectories, calls (and their bodies in R2), reward history, training runs and inference tests. 409 while the engine's delete that keeps it is unfinished. Answers 202 when work is left: repeat the request.",
    response: DeleteArchiveResponse,
    successStatus: 200,
    partialStatus: 202,
    // As an engine's delete: no body is read, but one past the size limit is refused first.
    errors: [404, 409, 413, 422],
  },
];
