/**
 * OpenAPI path items for Atropos's trajectory API, generated from ATROPOS_API (the table its
 * routes are registered from) in both path forms. Its answers are Atropos's, not the exchange's:
 * FastAPI's 422 body, plain-text answers where Atropos sends text, and its 500 where its handler
 * raises. The exchange's own refusals (the token, the engine, the size, a full queue or store, too
 * many environments) keep the exchange's error body.
 */
import { atroposOp } from "../engine/atropos-hub";
import { enginePrefix, engineAuth, rolesFor } from "../openapi/engine-paths";
import { errorRef, refusalResponse, STORAGE_FULL, type ErrorStatus } from "../openapi/error-responses";
import { toJsonSchema, type JsonSchema } from "../openapi/json-schema";
import { ATROPOS_SERVER_ERROR_TEXT } from "../protocol/atropos-answers";
import { ATROPOS_RETRY_AFTER_SECONDS, MAX_ATROPOS_ENVS } from "../protocol/atropos";
import { FastApiValidationError, INVALID_GZIP_TEXT } from "./fastapi";
import { ATROPOS_API, type AtroposAnswerSpec, type AtroposRouteSpec } from "./routes";

export const ATROPOS_TAG = "atropos";
export const ATROPOS_TAG_DESCRIPTION =
  "Atropos's trajectory API (atroposlib/api/server.py, v0.4.0), served durably per engine: point an environment's or trainer's `rollout_server_url` at /e/{engine}/t/{token}/atropos. " +
  "Bodies are validated as Atropos's pydantic models are (lax: a numeric string is taken as a number) and may be gzip (`Content-Encoding: gzip`); answers of 1,000 bytes or more are gzip for clients that accept it.";

const plainText = (description: string, text: string): JsonSchema => ({ description, content: { "text/plain": { schema: { type: "string", const: text } } } });

function success(answer: AtroposAnswerSpec): JsonSchema {
  if ("text" in answer) return plainText("Success, as Atropos answers it: plain text.", answer.text);
  return { description: "Success.", content: { "application/json": { schema: toJsonSchema(answer.json, "output") } } };
}

/** `/status-env` -> `status_env`; a path with a GET and a POST names the POST `set_...`. */
function operationName(spec: AtroposRouteSpec): string {
  const name = spec.path === "" ? "root" : spec.path === "/" ? "root_slash" : spec.path.slice(1).replace(/-/g, "_");
  const setter = spec.method === "POST" && ATROPOS_API.some((o) => o.path === spec.path && o.method === "GET");
  return `atropos_${setter ? "set_" : ""}${name}`;
}

function responses(spec: AtroposRouteSpec): JsonSchema {
  const out: JsonSchema = { "200": success(spec.answer) };
  const statuses: ErrorStatus[] = [401, 403, 404, 429];
  if (spec.body !== undefined) {
    statuses.push(413);
    out["400"] = plainText("The body says it is gzip (`Content-Encoding: gzip`) and does not inflate, as Atropos's middleware answers it.", INVALID_GZIP_TEXT);
    const fastApi = toJsonSchema(FastApiValidationError, "output");
    out["422"] =
      spec.route === "register_env"
        ? {
            description:
              "The body is not JSON or does not match the model: FastAPI's body, one entry per pydantic error. " +
              `Or the engine has as many environments registered as it takes (${MAX_ATROPOS_ENVS}, until the trainer's \`/reset_data\` clears them with the run's queue): the exchange's body, error \`too_many_environments\`; nothing was registered.`,
            content: { "application/json": { schema: { anyOf: [fastApi, { $ref: "#/components/schemas/ErrorResponse" }] } } },
          }
        : {
            description: "The body is not JSON or does not match the model: FastAPI's body, one entry per pydantic error.",
            content: { "application/json": { schema: fastApi } },
          };
  }
  for (const s of statuses) out[String(s)] = errorRef(s);
  // A 5xx that is an answer, not a failure (docs/dashboard.md).
  if (spec.route === "scored_data") {
    out["503"] = refusalResponse([
      {
        code: "queue_full",
        when:
          "The engine holds as many groups as its `max_groups` allows, or the request's groups would bring the bytes of JSON it holds past its `max_stored_bytes` (`detail` names the bound); nothing was stored. Retry once the trainer has taken batches. " +
          "Groups whose JSON alone is more than `max_stored_bytes`, or more groups than `max_groups`, are a 413 instead: no batch taken would make room for them.",
        retryAfter: ATROPOS_RETRY_AFTER_SECONDS,
      },
      STORAGE_FULL,
    ]);
  }
  if (spec.route === "register_env") out["503"] = refusalResponse([STORAGE_FULL]);
  if (spec.raises) out["500"] = plainText("Where Atropos's handler raises (an unknown env_id, a batch after /reset_data), Atropos's own 500, kept for its clients' retries.", ATROPOS_SERVER_ERROR_TEXT);
  return out;
}

function operation(spec: AtroposRouteSpec, tokenInPath: boolean): JsonSchema {
  const roles = rolesFor({ op: atroposOp(spec.route) });
  const auth = engineAuth(tokenInPath);
  const query = spec.body?.query;
  return {
    operationId: `${operationName(spec)}${tokenInPath ? "__token_in_url" : ""}`,
    summary: spec.summary,
    description: `${spec.summary}\n\nRoles: ${roles.join(", ")}. ${auth.note}${spec.changesState ? " This GET changes the engine's state." : ""}`,
    tags: [ATROPOS_TAG],
    "x-roles": roles,
    ...(spec.changesState ? { "x-changes-state": true } : {}),
    security: auth.security,
    parameters: [
      ...auth.parameters,
      ...(query !== undefined ? [{ name: query, in: "query", required: false, description: "In place of the JSON body, for a client that cannot send a body with a GET.", schema: { type: "integer" } }] : []),
    ],
    ...(spec.body !== undefined
      ? { requestBody: { required: query === undefined, content: { "application/json": { schema: toJsonSchema(spec.body.schema, "input") } } } }
      : {}),
    responses: responses(spec),
  };
}

export function atroposPaths(): Record<string, JsonSchema> {
  const paths: Record<string, JsonSchema> = {};
  for (const tokenInPath of [false, true]) {
    for (const spec of ATROPOS_API) {
      const item = (paths[`${enginePrefix(tokenInPath)}/atropos${spec.path}`] ??= {});
      item[spec.method.toLowerCase()] = operation(spec, tokenInPath);
    }
  }
  return paths;
}
