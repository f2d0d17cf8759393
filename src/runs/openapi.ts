/**
 * OpenAPI path items for the training-runs API, generated from RUNS_API (the table the router
 * is built from) in both path forms, like the engine routes, plus the MCP endpoint.
 */
import { mayRun } from "../auth/roles";
import { ROLES } from "../protocol/admin";
import { errorRef, type ErrorStatus } from "../openapi/error-responses";
import { PROTOCOL_VERSIONS } from "./mcp/jsonrpc";
import { queryParameters, toJsonSchema, type JsonSchema } from "../openapi/json-schema";
import { RUNS_API, type RunRouteSpec } from "./api";

export const RUNS_TAG = "training runs";
export const RUNS_TAG_DESCRIPTION =
  "Training runs on the engine's GPU host: environments, configuration with locked fields, run lifecycle, inference tests, and the MCP endpoint for LLM agents. The same routes also take the token in the path (/e/{engine}/t/{token}/...).";

const rolesOf = (op: RunRouteSpec["op"]): string[] => [...ROLES.filter((r) => mayRun(r, op)), "admin"];
const openApiPath = (path: string): string => path.replace(/:(\w+)/g, "{$1}");
const operationIdOf = (spec: RunRouteSpec): string => `${spec.method}_${spec.path.replace(/^\//, "").replace(/[/:]+/g, "_")}`;

function errorStatuses(spec: RunRouteSpec): ErrorStatus[] {
  // 429: these routes count against the token's request limit as the engine's do (http/rate-limit.ts).
  const statuses = new Set<ErrorStatus>([401, 403, 404, 429]);
  if (spec.input.from === "body") for (const s of [400, 413, 422] as const) statuses.add(s);
  if (spec.input.from === "query") statuses.add(422);
  if (spec.method === "post") statuses.add(409);
  return [...statuses].sort();
}

function operation(spec: RunRouteSpec, tokenInPath: boolean): JsonSchema {
  const roles = rolesOf(spec.op);
  const responses: JsonSchema = { "200": { description: "Success.", content: { "application/json": { schema: toJsonSchema(spec.response, "output") } } } };
  for (const s of errorStatuses(spec)) responses[String(s)] = errorRef(s);
  const params = Object.keys(spec.params).map((name) => ({ name, in: "path", required: true, description: name === "run_id" ? "A run's id (run_...)." : "An inference test's id (itest_...).", schema: { type: "string" } }));
  return {
    operationId: `runs_${operationIdOf(spec)}${tokenInPath ? "__token_in_url" : ""}`,
    summary: spec.summary,
    description: `${spec.summary}\n\nRoles: ${roles.join(", ")}.${tokenInPath ? " The token is carried in the URL path." : " Send the token as `Authorization: Bearer <token>`."}`,
    tags: [RUNS_TAG],
    "x-roles": roles,
    security: tokenInPath ? [] : [{ engineToken: [] }],
    parameters: [
      { $ref: "#/components/parameters/engine" },
      ...(tokenInPath ? [{ $ref: "#/components/parameters/token" }] : []),
      ...params,
      ...(spec.input.from === "query" ? queryParameters(spec.input.schema) : []),
    ],
    ...(spec.input.from === "body"
      ? { requestBody: { required: spec.input.emptyAs === undefined, content: { "application/json": { schema: toJsonSchema(spec.input.schema, "input") } } } }
      : {}),
    responses,
  };
}

function mcpOperation(tokenInPath: boolean): JsonSchema {
  return {
    operationId: `runs_mcp${tokenInPath ? "__token_in_url" : ""}`,
    summary: "MCP endpoint (streamable HTTP, JSON answers, stateless) with the rl_* tools for LLM agents.",
    description:
      "JSON-RPC 2.0: initialize, ping, tools/list, tools/call. Any engine token may connect; tools/list shows the tools the token's role may call. Notifications are answered 202 with no body.",
    tags: [RUNS_TAG],
    "x-roles": [...ROLES, "admin"],
    security: tokenInPath ? [] : [{ engineToken: [] }],
    parameters: [
      { $ref: "#/components/parameters/engine" },
      ...(tokenInPath ? [{ $ref: "#/components/parameters/token" }] : []),
      {
        name: "MCP-Protocol-Version",
        in: "header",
        required: false,
        description: "The MCP version the client speaks after initialize (the streamable HTTP transport sends it); any other value is a 400.",
        schema: { type: "string", enum: [...PROTOCOL_VERSIONS] },
      },
    ],
    requestBody: { required: true, content: { "application/json": { schema: { type: "object", description: "A JSON-RPC 2.0 message, or a batch (array) of them." } } } },
    responses: {
      "200": { description: "The JSON-RPC answer, or for a batch the list of them.", content: { "application/json": { schema: { type: ["object", "array"] } } } },
      "202": { description: "Accepted: the message was a notification or a response." },
      "400": { description: "Not JSON, or no JSON-RPC message (a JSON-RPC error, for a batch a list of them); or an unsupported MCP-Protocol-Version (an error body).", content: { "application/json": { schema: { type: ["object", "array"] } } } },
      ...Object.fromEntries(([401, 403, 404, 413, 429] as const).map((s) => [String(s), errorRef(s)])),
    },
  };
}

export function runPaths(): Record<string, JsonSchema> {
  const paths: Record<string, JsonSchema> = {};
  for (const tokenInPath of [false, true]) {
    const prefix = tokenInPath ? "/e/{engine}/t/{token}" : "/e/{engine}";
    for (const spec of RUNS_API) (paths[prefix + openApiPath(spec.path)] ??= {})[spec.method] = operation(spec, tokenInPath);
    paths[`${prefix}/mcp`] = { post: mcpOperation(tokenInPath) };
  }
  return paths;
}
