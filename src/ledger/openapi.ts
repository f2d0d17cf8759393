/**
 * OpenAPI path items for the trajectory ledger, generated from LEDGER_API (the table the router is
 * built from) in both path forms, like the engine routes. The export answers JSON lines: OpenAPI
 * 3.1 has no way to give the schema of each line (3.2's `itemSchema` does), so its body is
 * documented as a string and the line's schema as the extension `x-itemSchema`.
 */
import { errorRef, refusalResponse, type ErrorStatus } from "../openapi/error-responses";
import { engineAuth, enginePrefix, rolesFor } from "../openapi/engine-paths";
import { queryParameters, toJsonSchema, type JsonSchema } from "../openapi/json-schema";
import { LEDGER_API, type LedgerAnswer, type LedgerRouteSpec } from "./api";

export const LEDGER_TAG = "trajectory ledger";
export const LEDGER_TAG_DESCRIPTION =
  "Every relayed LLM call of a claim, recorded by the engine's gateway, and the trajectories read back: summaries, one claim's calls in order (whole messages, token ids, the training sequence), and an export of them all as JSON lines. Large media in messages (screenshots as data: URLs, audio) are stored once and given back by reference, `rx-media:sha256:<hex>`, fetched from /trajectories/media/{sha256}. The same routes also take the token in the path (/e/{engine}/t/{token}/...).";

export const JSON_LINES = "application/x-ndjson";

const openApiPath = (path: string): string => path.replace(/:(\w+)/g, "{$1}");
/** `get /trajectories/:episode_uuid` -> `ledger_get_trajectories_episode_uuid`. */
const operationIdOf = (spec: LedgerRouteSpec): string => `ledger_${spec.method}_${spec.path.replace(/^\//, "").replace(/[/:]+/g, "_")}`;

const ETAG_HEADERS: JsonSchema = {
  ETag: { description: "A strong entity tag of this answer: it changes whenever the answer would (a call recorded, the claim ended, calls removed by retention, the engine made again). Send it back as If-None-Match.", schema: { type: "string" } },
  "Cache-Control": { description: "`private, no-cache`: a cache may keep the answer but must ask again each time (a live claim's answer changes).", schema: { type: "string" } },
};

/** Asking again with the ETag held: unchanged costs one D1 query on the exchange and no body on the wire. */
const IF_NONE_MATCH: JsonSchema = {
  name: "If-None-Match",
  in: "header",
  required: false,
  description: "The ETag of the answer held (or several, or `*`): when it is still the current one, the answer is 304 without a body. A value of no valid form is ignored.",
  schema: { type: "string" },
};

/** Whether the route's answer carries an ETag (and so takes If-None-Match, and may be a 304). */
const tagged = (answer: LedgerAnswer): boolean => answer.kind === "json" && answer.etag === true;

function success(answer: LedgerAnswer): JsonSchema {
  if (answer.kind === "json") {
    return { description: "Success.", ...(tagged(answer) ? { headers: ETAG_HEADERS } : {}), content: { "application/json": { schema: toJsonSchema(answer.schema, "output") } } };
  }
  if (answer.kind === "text") return { description: answer.description, content: { "text/plain": { schema: { type: "string", description: answer.description } } } };
  const headers = Object.entries(answer.headers ?? {}).map(([name, h]) => [name, { description: h.description, schema: { type: h.type } }]);
  return {
    description: answer.description,
    ...(headers.length > 0 ? { headers: Object.fromEntries(headers) } : {}),
    content: { [JSON_LINES]: { schema: { type: "string", description: answer.description }, "x-itemSchema": toJsonSchema(answer.item, "output") } },
  };
}

function responses(spec: LedgerRouteSpec): JsonSchema {
  const out: JsonSchema = { "200": success(spec.answer) };
  if (tagged(spec.answer)) {
    out["304"] = { description: "Not Modified: If-None-Match named the current answer's ETag; no body. The caller was checked first (401, 403 as for a 200).", headers: ETAG_HEADERS };
  }
  // 429: these routes count against the token's request limit as the engine's do (http/rate-limit.ts).
  const statuses = new Set<ErrorStatus>([401, 403, 404, 429, ...(Object.keys(spec.refusals).map(Number) as ErrorStatus[])]);
  for (const s of [...statuses].sort()) {
    if (s === 503) {
      const refusal = spec.refusals[503];
      out["503"] = refusal === undefined ? errorRef(503) : refusalResponse([refusal]);
      continue;
    }
    const when = spec.refusals[s];
    // A reference may carry its own description (OpenAPI 3.1): what this route means by the status.
    out[String(s)] = when === undefined ? errorRef(s) : { ...errorRef(s), description: when };
  }
  return out;
}

function operation(spec: LedgerRouteSpec, tokenInPath: boolean): JsonSchema {
  const roles = rolesFor(spec);
  const auth = engineAuth(tokenInPath);
  const params = Object.entries(spec.params).map(([name, p]) => ({ name, in: "path", required: true, description: p.description, schema: toJsonSchema(p.schema, "input") }));
  return {
    operationId: `${operationIdOf(spec)}${tokenInPath ? "__token_in_url" : ""}`,
    summary: spec.summary,
    description: `${spec.summary}\n\nRoles: ${roles.join(", ")}. ${auth.note}`,
    tags: [LEDGER_TAG],
    "x-roles": roles,
    security: auth.security,
    parameters: [...auth.parameters, ...params, ...(spec.input.from === "query" ? queryParameters(spec.input.schema) : []), ...(tagged(spec.answer) ? [IF_NONE_MATCH] : [])],
    ...(spec.input.from === "body" ? { requestBody: { required: true, content: { "application/json": { schema: toJsonSchema(spec.input.schema, "input") } } } } : {}),
    responses: responses(spec),
  };
}

export function ledgerPaths(): Record<string, JsonSchema> {
  const paths: Record<string, JsonSchema> = {};
  for (const tokenInPath of [false, true]) {
    for (const spec of LEDGER_API) (paths[enginePrefix(tokenInPath) + openApiPath(spec.path)] ??= {})[spec.method] = operation(spec, tokenInPath);
  }
  return paths;
}
