/**
 * OpenAPI path items for the engine API, generated from ENGINE_API (the same table the router
 * is built from). Every route is listed twice: at /e/{engine}/... with a bearer header, and at
 * /e/{engine}/t/{token}/... for clients that can only be given a base URL (AgentJet's
 * SwarmClient). Both forms are real routes, so a generated client or a validator sees both.
 */
import { ENGINE_API, type RouteSpec } from "../http/engine-api";
import { mayRun, type EngineOp } from "../auth/roles";
import { ROLES } from "../protocol/admin";
import { errorRef, refusalResponse, type ErrorStatus } from "./error-responses";
import { queryParameters, toJsonSchema, type JsonSchema } from "./json-schema";

export const ENGINE_TAG = "engine";
export const TOKEN_PATH_TAG = "engine, token in URL";

/** The roles that may call a route; the deployment admin may call every route. */
export function rolesFor(spec: { op: EngineOp }): string[] {
  return [...ROLES.filter((r) => mayRun(r, spec.op)), "admin"];
}

/** The prefix of an engine route in either form. */
export const enginePrefix = (tokenInPath: boolean): string => (tokenInPath ? "/e/{engine}/t/{token}" : "/e/{engine}");

/** What an engine route in either form says of its credential: its security, its prefix's parameters, a sentence. */
export function engineAuth(tokenInPath: boolean): { security: JsonSchema[]; parameters: JsonSchema[]; note: string } {
  return {
    // The token-in-URL form needs no header: its path parameter is the credential.
    security: tokenInPath ? [] : [{ engineToken: [] }],
    parameters: [{ $ref: "#/components/parameters/engine" }, ...(tokenInPath ? [{ $ref: "#/components/parameters/token" }] : [])],
    note: tokenInPath ? "The token is carried in the URL path, for clients that cannot send headers." : "Send the token as `Authorization: Bearer <token>`.",
  };
}

/**
 * `/batch/register_episode` -> `batch_register_episode`: unique, unlike `op` (batch routes share
 * theirs). A path with two methods (`/ledger/config`) is named by each one's op instead, which
 * differ there, as the path alone would name both the same.
 */
export const operationIdOf = (spec: RouteSpec): string =>
  ENGINE_API.some((o) => o.path === spec.path && o.method !== spec.method) ? spec.op : spec.path.replace(/^\//, "").replace(/\//g, "_");

function errorStatuses(spec: RouteSpec): ErrorStatus[] {
  // 429: every engine route counts against its token's request limit (http/rate-limit.ts).
  const statuses: ErrorStatus[] = [401, 403, 404, 429];
  if (spec.input.from === "body") statuses.push(400, 413, 422);
  if (spec.input.from === "query") statuses.push(422);
  // Only writes can conflict with the engine's state (a lost claim, an engine already started).
  if (spec.method === "post") statuses.push(409);
  return statuses.sort();
}

function operation(spec: RouteSpec, tokenInPath: boolean): JsonSchema {
  const roles = rolesFor(spec);
  const responses: JsonSchema = {
    "200": { description: "Success.", content: { [spec.text ?? "application/json"]: { schema: toJsonSchema(spec.response, "output") } } },
  };
  for (const s of errorStatuses(spec)) responses[String(s)] = errorRef(s);
  // A 5xx that is an answer, not a failure (docs/dashboard.md).
  if (spec.unavailable !== undefined) responses["503"] = refusalResponse(spec.unavailable);
  const auth = engineAuth(tokenInPath);
  return {
    operationId: tokenInPath ? `${operationIdOf(spec)}__token_in_url` : operationIdOf(spec),
    summary: spec.summary,
    description: `${spec.summary}\n\nRoles: ${roles.join(", ")}. ${auth.note}`,
    tags: [tokenInPath ? TOKEN_PATH_TAG : ENGINE_TAG],
    "x-roles": roles,
    ...(spec.changesState ? { "x-changes-state": true } : {}),
    security: auth.security,
    parameters: [...auth.parameters, ...(spec.input.from === "query" ? queryParameters(spec.input.schema) : [])],
    ...(spec.input.from === "body"
      ? {
          requestBody: {
            // Routes with an `emptyAs` default also accept an empty body, as AgentJet sends.
            required: spec.input.emptyAs === undefined,
            content: { "application/json": { schema: toJsonSchema(spec.input.schema, "input") } },
          },
        }
      : {}),
    responses,
  };
}

export function enginePaths(): Record<string, JsonSchema> {
  const paths: Record<string, JsonSchema> = {};
  for (const tokenInPath of [false, true]) {
    const prefix = enginePrefix(tokenInPath);
    for (const spec of ENGINE_API) {
      const item = (paths[prefix + spec.path] ??= {});
      item[spec.method] = operation(spec, tokenInPath);
    }
  }
  return paths;
}

export const ENGINE_PARAMETERS: Record<string, JsonSchema> = {
  engine: { name: "engine", in: "path", required: true, description: "The engine's name.", schema: { type: "string", pattern: "^[a-z0-9][a-z0-9_-]{0,62}$" } },
  token: { name: "token", in: "path", required: true, description: "An engine token of a role allowed to call the route.", schema: { type: "string" } },
};
