/**
 * The error answers of the exchange as OpenAPI components. Every one has the same body,
 * ErrorResponse {error, detail}: `error` is a stable code for programs, `detail` a sentence
 * for people (FastAPI's field name, which AgentJet logs); some add hints to act on.
 */
import { ErrorResponse } from "../protocol/admin";
import { STORAGE_FULL_RETRY_SECONDS } from "../protocol/storage";
import { toJsonSchema, type JsonSchema } from "./json-schema";

export const ERROR_STATUSES = [400, 401, 403, 404, 409, 413, 422, 429, 503] as const;
export type ErrorStatus = (typeof ERROR_STATUSES)[number];

const WHEN: Record<ErrorStatus, string> = {
  400: "Malformed JSON, or a request the engine's current status does not allow (e.g. registering while not ROLLING).",
  401: "No token, or a token this engine does not know (unknown or revoked).",
  403: "The token's role may not call this route.",
  404: "Unknown engine, episode, token or route.",
  409: "The request conflicts with the current state (e.g. a claim that was reaped or superseded, an engine that exists).",
  413: "The request body is larger than the exchange accepts (4 MiB), a value in it is larger than its limit (in bytes of UTF-8) or than the stores hold, or it sets a size limit (`max_message_bytes`) above what the stores hold; `detail` names the limit.",
  422: "The body, the query or a path parameter does not match the schema; `detail` names each offending field.",
  429: "The token sent more requests than its limit allows, or its caller's address sent too many with tokens the engine has not accepted yet (docs/operations.md, \"Request limits\"). Retry after the seconds in `Retry-After`.",
  503: "A store the request needs could not be written (e.g. the engine's last results to D1); nothing was changed, try again.",
};

/** Component name of the response for a status, e.g. `Error401`. */
export const errorRef = (status: ErrorStatus): { $ref: string } => ({ $ref: `#/components/responses/Error${status}` });

export function errorComponents(): { schemas: Record<string, JsonSchema>; responses: Record<string, JsonSchema> } {
  const responses: Record<string, JsonSchema> = {};
  for (const status of ERROR_STATUSES) {
    responses[`Error${status}`] = {
      description: WHEN[status],
      ...(status === 429 ? { headers: { "Retry-After": { description: "Seconds until the token's count starts afresh.", schema: { type: "integer" } } } } : {}),
      content: { "application/json": { schema: { $ref: "#/components/schemas/ErrorResponse" } } },
    };
  }
  // Open to more fields: the training runs' refusals carry hints beside the two (locked_value,
  // available_fields, active_run_id, ...), which the same body has to describe.
  return { schemas: { ErrorResponse: toJsonSchema(ErrorResponse.loose(), "output") }, responses };
}

/**
 * A 503 a route answers by design, not a failure of the exchange: a bound that is full until
 * something is taken away. Its error code, when it comes and what to do, and the Retry-After
 * it carries (seconds), if any.
 */
export type Refusal = { code: string; when: string; retryAfter?: number };

/** The engine's store is above its high-water bound (src/engine/storage-guard.ts). */
export const STORAGE_FULL: Refusal = {
  code: "storage_full",
  when:
    "The engine's whole store is above its high-water bound (docs/operations.md, \"An engine's store\"): requests that add data are refused and nothing was stored. " +
    "Space comes back as the trainer pulls, the agent acks and D1 takes the outbox; send the same request again after `Retry-After`.",
  retryAfter: STORAGE_FULL_RETRY_SECONDS,
};

/**
 * The 503 of a route that refuses by design: its codes listed in `x-refusal-codes`, so that a
 * client (and the fuzzer's oracle) tells such an answer from a failure (docs/dashboard.md).
 */
export function refusalResponse(refusals: readonly Refusal[]): JsonSchema {
  const waits = refusals.filter((r) => r.retryAfter !== undefined).map((r) => `${r.retryAfter} s for \`${r.code}\``);
  const header = waits.length > 0 ? `Seconds to wait before sending again: ${waits.join(", ")}.` : undefined;
  return {
    description: refusals.map((r) => `\`${r.code}\`: ${r.when}`).join("\n\n"),
    ...(header !== undefined ? { headers: { "Retry-After": { description: header, schema: { type: "integer" } } } } : {}),
    content: { "application/json": { schema: { $ref: "#/components/schemas/ErrorResponse" } } },
    "x-refusal-codes": refusals.map((r) => r.code),
  };
}
