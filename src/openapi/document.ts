/**
 * The OpenAPI 3.1 document of the whole exchange, built from the zod schemas the routes
 * validate with: engine routes from ENGINE_API, admin routes from ADMIN_API, the training runs'
 * from RUNS_API, the trajectory ledger's from LEDGER_API, Atropos's trajectory API from ATROPOS_API, and
 * the LLM relay's OpenAI routes.
 */
import { adminPaths, ADMIN_TAG } from "./admin-paths";
import { enginePaths, ENGINE_PARAMETERS, ENGINE_TAG, TOKEN_PATH_TAG } from "./engine-paths";
import { errorComponents, errorRef } from "./error-responses";
import { hoistedDefs, type JsonSchema } from "./json-schema";
import { runPaths, RUNS_TAG, RUNS_TAG_DESCRIPTION } from "../runs/openapi";
import { ledgerPaths, LEDGER_TAG, LEDGER_TAG_DESCRIPTION } from "../ledger/openapi";
import { atroposPaths, ATROPOS_TAG, ATROPOS_TAG_DESCRIPTION } from "../atropos/openapi";
import { CLAIM_KEY_SCHEME, relayPaths, relaySchemas, RELAY_TAG, RELAY_TAG_DESCRIPTION } from "../relay/openapi";

export type OpenApiDocument = JsonSchema & { openapi: "3.1.0"; paths: Record<string, JsonSchema> };

export function buildOpenApiDocument(): OpenApiDocument {
  const errors = errorComponents();
  // Paths first: building them hoists the shared schemas that components/schemas must hold.
  const routed = bodyLimited({ ...adminPaths(), ...runPaths(), ...ledgerPaths(), ...atroposPaths() });
  const paths = { ...routed, ...enginePaths(), ...relayPaths() };
  return {
    openapi: "3.1.0",
    jsonSchemaDialect: "https://json-schema.org/draft/2020-12/schema",
    info: {
      title: "Rollout Exchange",
      version: "1",
      description:
        "Hands rollouts between RL trainers and remote agents. Engine routes speak AgentJet's swarm protocol " +
        "under /e/{engine}; each route lists the roles whose tokens may call it (`x-roles`). Every error " +
        "answer is {error, detail}.",
    },
    // Relative: the document describes the deployment that serves it.
    servers: [{ url: "/" }],
    tags: [
      { name: ENGINE_TAG, description: "An engine's API, token as a bearer header." },
      { name: TOKEN_PATH_TAG, description: "The same routes with the token in the URL path, for clients that cannot send headers." },
      { name: RUNS_TAG, description: RUNS_TAG_DESCRIPTION },
      { name: LEDGER_TAG, description: LEDGER_TAG_DESCRIPTION },
      { name: ATROPOS_TAG, description: ATROPOS_TAG_DESCRIPTION },
      { name: RELAY_TAG, description: RELAY_TAG_DESCRIPTION },
      { name: ADMIN_TAG, description: "The deployment admin: engines and tokens." },
      { name: "service", description: "The service itself." },
    ],
    paths,
    components: {
      securitySchemes: {
        engineToken: { type: "http", scheme: "bearer", description: "A token of one engine, issued per role (operator, trainer, client, viewer)." },
        adminToken: { type: "http", scheme: "bearer", description: "The deployment's ADMIN_TOKEN." },
        claimKey: CLAIM_KEY_SCHEME,
      },
      parameters: ENGINE_PARAMETERS,
      schemas: { ...errors.schemas, ...relaySchemas(), ...hoistedDefs() },
      responses: errors.responses,
    },
  };
}

/**
 * The router reads every body against the size limit before its route (http/body.ts limitBody),
 * a GET's or a DELETE's too (curl -X GET -d sends one): each of its operations may answer 413.
 */
function bodyLimited(paths: Record<string, JsonSchema>): Record<string, JsonSchema> {
  for (const item of Object.values(paths)) {
    for (const [method, op] of Object.entries(item)) {
      if (method === "parameters") continue;
      const responses = (op as { responses: Record<string, unknown> }).responses;
      if ("413" in responses) continue;
      // In status order, as the builders list them.
      const sorted = Object.entries({ ...responses, "413": errorRef(413) }).sort(([a], [b]) => a.localeCompare(b));
      (op as { responses: Record<string, unknown> }).responses = Object.fromEntries(sorted);
    }
  }
  return paths;
}
