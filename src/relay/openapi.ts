/**
 * OpenAPI path items for the LLM relay: OpenAI's /v1 routes at the origin, under an engine, and
 * under an engine with a token in the path (where AgentJet's SwarmClient sends them). What
 * authorizes a call is the claim's own key, not an engine token; every answer that is not the
 * model's is OpenAI's error body, and the upstream's own errors are passed on with theirs.
 */
import type { JsonSchema } from "../openapi/json-schema";
import { toJsonSchema } from "../openapi/json-schema";
import { ChatRequestShape, OpenAIError, RELAY_ENDPOINTS, RELAY_REFUSAL_CODES, type RelayEndpoint } from "../protocol/relay";
import { DEFAULT_RELAY_MAX_BODY_BYTES } from "../protocol/relay-endpoint";

export const RELAY_TAG = "LLM relay";
export const RELAY_TAG_DESCRIPTION =
  "OpenAI-compatible calls of a claimed episode's client, with the claim's own key (`openai_api_key` from claim_episode) as the bearer token: " +
  "checked here, admitted by the engine, and relayed, signed, to the engine's inference gateway on the GPU host (docs/relay.md). " +
  "A key stops working within 1 s of its claim's end. Errors are OpenAI's error body.";

export const CLAIM_KEY_SCHEME = { type: "http", scheme: "bearer", description: "A claim's own key (`openai_api_key` from claim_episode): `sk-rx....`." };

const WHAT: Record<RelayEndpoint, string> = {
  "/v1/chat/completions": "A chat completion from the trainer's model, streamed (`stream: true`, server-sent events) or whole.",
  "/v1/completions": "A text completion from the trainer's model, streamed or whole.",
  "/v1/models": "The models the engine's gateway serves.",
};

/** Every refusal of the relay's own, by status. */
const REFUSALS: [status: number, when: string, forBodies: boolean][] = [
  [400, "The body is not JSON, or not a request with a `model` (and a boolean `stream`, if any).", true],
  [401, "No key, a key this exchange did not issue, a key of another engine, or one whose claim is no longer live.", false],
  [404, "No such engine.", false],
  [413, `The body is larger than the relay accepts (\`RELAY_MAX_BODY_BYTES\`, ${DEFAULT_RELAY_MAX_BODY_BYTES / 2 ** 20} MiB unless the deployment sets it: docs/deploy.md).`, true],
  [502, "The engine's gateway could not be reached, or the model answered something that is not JSON.", false],
  [503, "The engine is not rolling, is syncing weights longer than a call waits, or has no gateway; or the engine could not be reached. Try again.", false],
  [504, "The model did not answer within the relay's deadline (RELAY_DEADLINE_SECONDS).", false],
];


const openAiError = (description: string): JsonSchema => ({ description, content: { "application/json": { schema: { $ref: "#/components/schemas/OpenAIError" } } } });

function operation(endpoint: RelayEndpoint, prefix: string): JsonSchema {
  const post = endpoint !== "/v1/models";
  const form = prefix === "" ? "" : prefix.includes("{token}") ? "__token_in_url" : "__engine";
  const responses: JsonSchema = {
    "200": post
      ? {
          description: "The model's answer, as the trainer's model gave it: a JSON object, or server-sent events when `stream` is true.",
          content: { "application/json": { schema: { type: "object" } }, "text/event-stream": { schema: { type: "string" } } },
        }
      : { description: "The model list, in OpenAI's form.", content: { "application/json": { schema: { type: "object" } } } },
  };
  for (const [status, when, forBodies] of REFUSALS) {
    if (!post && forBodies) continue;
    // The 503s are refusals by design, to be sent again (docs/operations.md): their codes, as the OpenAI error body gives them.
    responses[String(status)] = status === 503 ? { ...openAiError(when), "x-refusal-codes": [...RELAY_REFUSAL_CODES] } : openAiError(when);
  }
  responses["4XX"] = openAiError("The model's own refusal, passed on with its status.");
  responses["5XX"] = openAiError("The model's own failure, passed on with its status.");
  return {
    operationId: `relay_${endpoint.slice(4).replace(/\//g, "_")}${form}`,
    summary: WHAT[endpoint],
    description:
      `${WHAT[endpoint]}\n\nSend the claim's key as \`Authorization: Bearer <openai_api_key>\`.` +
      (prefix.includes("{token}") ? " The token in the path is the base URL's, for clients that take only a base URL; the claim's key is what the relay checks." : "") +
      (prefix === "" ? " The key names its engine." : ""),
    tags: [RELAY_TAG],
    security: [{ claimKey: [] }],
    parameters: prefix === "" ? [] : [{ $ref: "#/components/parameters/engine" }, ...(prefix.includes("{token}") ? [{ $ref: "#/components/parameters/token" }] : [])],
    ...(post ? { requestBody: { required: true, content: { "application/json": { schema: toJsonSchema(ChatRequestShape, "input") } } } } : {}),
    responses,
  };
}

export function relayPaths(): Record<string, JsonSchema> {
  const paths: Record<string, JsonSchema> = {};
  for (const prefix of ["", "/e/{engine}", "/e/{engine}/t/{token}"]) {
    for (const endpoint of RELAY_ENDPOINTS) paths[prefix + endpoint] = { [endpoint === "/v1/models" ? "get" : "post"]: operation(endpoint, prefix) };
  }
  return paths;
}

export const relaySchemas = (): Record<string, JsonSchema> => ({ OpenAIError: toJsonSchema(OpenAIError, "output") });
