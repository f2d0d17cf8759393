/** OpenAPI path items for the deployment admin's routes and the health check. */
import { ADMIN_API, type AdminRouteSpec } from "./admin-api";
import { errorRef, refusalResponse, type ErrorStatus } from "./error-responses";
import { queryParameters, toJsonSchema, type JsonSchema } from "./json-schema";

export const ADMIN_TAG = "admin";

/** What a path parameter is: `{name}` names an archive under /admin/archives, an engine elsewhere. */
function paramDescription(path: string, param: string | undefined): string {
  if (param !== "name") return "The token's id (from the token list), not its secret.";
  return path.startsWith("/admin/archives/")
    ? "The archive's name, `<engine>@<ms>` (from the archive list, or the `history_kept_as` of the delete that kept it)."
    : "The engine's name.";
}

const pathParams = (path: string): JsonSchema[] =>
  [...path.matchAll(/\{(\w+)\}/g)].map((m) => ({
    name: m[1],
    in: "path",
    required: true,
    description: paramDescription(path, m[1]),
    schema: { type: "string" },
  }));

function operation(spec: AdminRouteSpec): JsonSchema {
  const content = { "application/json": { schema: toJsonSchema(spec.response, "output") } };
  const responses: JsonSchema = {
    [String(spec.successStatus)]: { description: spec.successStatus === 201 ? "Created." : "Success.", content },
    ...(spec.partialStatus ? { [String(spec.partialStatus)]: { description: "Done in part: repeat the request to carry on.", content } } : {}),
  };
  const statuses: ErrorStatus[] = [401, 403, ...spec.errors];
  for (const s of statuses.sort()) responses[String(s)] = s === 503 && spec.refusals !== undefined ? refusalResponse(spec.refusals) : errorRef(s);
  return {
    operationId: spec.operationId,
    summary: spec.summary,
    description: `${spec.summary}\n\nRoles: admin (the deployment's ADMIN_TOKEN as a bearer token).`,
    tags: [ADMIN_TAG],
    "x-roles": ["admin"],
    security: [{ adminToken: [] }],
    parameters: [...pathParams(spec.path), ...(spec.query ? queryParameters(spec.query) : [])],
    ...(spec.body ? { requestBody: { required: true, content: { "application/json": { schema: toJsonSchema(spec.body, "input") } } } } : {}),
    responses,
  };
}

export function adminPaths(): Record<string, JsonSchema> {
  const paths: Record<string, JsonSchema> = {
    "/health": {
      get: {
        operationId: "service_health",
        summary: "Liveness check; needs no token.",
        tags: ["service"],
        "x-roles": ["anyone"],
        security: [],
        responses: {
          "200": {
            description: "The Worker is up.",
            content: { "application/json": { schema: { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"] } } },
          },
        },
      },
    },
  };
  for (const spec of ADMIN_API) (paths[spec.path] ??= {})[spec.method] = operation(spec);
  return paths;
}
