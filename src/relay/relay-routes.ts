/**
 * OpenAI-compatible routes for claimed episodes: /v1/... at the origin (the per-claim key names
 * its engine), at /e/<engine>/v1/... and at /e/<engine>/t/<token>/v1/... (where AgentJet's
 * SwarmClient sends them after swapping the host of openai_base_url for its base URL).
 * The key is checked here, the claim by the engine through this isolate's gate (claim-gate.ts:
 * the engine's answers are kept for a second, the calls sent to it in batches); the call then
 * goes, signed, to the engine's inference gateway on the GPU host.
 *
 * Served before hono sees the request, as the engine API is (http/engine-routes.ts): every
 * relayed call passes here, and the router, its body limit and its context cost more workerd
 * CPU per call than the relay's own checks (`npm run bench:relay-profile`).
 */
import { tryDecodeURIComponent } from "hono/utils/url";
import type { Env } from "../env";
import { verifyClaimKey, type ClaimKeyFields } from "../auth/claim-key";
import { cachedGatewaySecret, signEnvelope } from "../auth/gateway-signature";
import { ChatRequestShape, envelopeText, isChatRequest, GATEWAY_RELAY_PATH, type OpenAIError, SIGNATURE_HEADER, TIMESTAMP_HEADER, type RelayEndpoint, type RelayEnvelope } from "../protocol/relay";
import { describeIssues, internalError } from "../http/errors";
import { loggedErrorId } from "../error-id";
import { readBodyText } from "../http/body";
import { DEFAULT_RELAY_MAX_BODY_BYTES } from "../protocol/relay-endpoint";
import { routingPath } from "../http/path-token";
import { claimGate, relayFailures } from "./claim-gates";
import { CLAIM_KEY_SECRET_MISSING } from "../engine/episode-claims";
import { gatewayErrorResponse, openaiErrorBody, openaiErrorIn, openaiErrorResponse } from "./openai-errors";
import { relayStream } from "./sse";
import { asksStreamUsage } from "./completion-chunk";
import { DeadlineWatch } from "./deadline-watch";

/** How long a relayed call may take end to end unless RELAY_DEADLINE_SECONDS says otherwise. */
const DEFAULT_DEADLINE_SECONDS = 600;
const DEFAULT_KEEP_ALIVE_MS = 10_000;

function numberVar(v: string | undefined, fallback: number): number {
  const n = Number(v);
  return v !== undefined && Number.isFinite(n) && n > 0 ? n : fallback;
}

function describeFailure(e: unknown, deadline: number): { status: number; message: string; code: string } {
  const name = e instanceof Error ? e.name : "";
  if (name === "TimeoutError" || name === "AbortError") {
    return { status: 504, message: `the inference upstream did not answer within ${deadline} s`, code: "upstream_timeout" };
  }
  // The error may name the gateway's address, which clients are never shown. The same words
  // serve a call that could not be sent and a stream that broke off while it was read.
  return { status: 502, message: `the connection to the inference gateway failed (error id ${loggedErrorId("relay: the connection to the gateway failed, error", e)})`, code: "gateway_unreachable" };
}

/** The isolate's deadlines of relayed calls that are not streamed. */
const deadlines = new DeadlineWatch();

/** The gateway's answer, read unless it is passed on as it came (`text` null). */
type Answer = { res: Response; text: string | null };

/**
 * The gateway answers 200 only with a JSON object it has checked, and sends it whole (the agent's
 * http-upstream.ts and agentjet.ts): that answer goes to the client as it came, unread and not
 * rebuilt (its headers are the gateway's: the type and length, and Node's date). Anything else
 * is read, under the deadline, and judged.
 */
async function readUnlessPassed(res: Response): Promise<Answer> {
  if (res.status === 200 && (res.headers.get("content-type") ?? "").startsWith("application/json")) return { res, text: null };
  return { res, text: await res.text() };
}

async function relay(req: Request, env: Env, ctx: ExecutionContext, endpoint: RelayEndpoint, pathEngine: string | undefined): Promise<Response> {
  // The size first, as the router's body limit did, before the key or the body is looked at.
  const max = numberVar(env.RELAY_MAX_BODY_BYTES, DEFAULT_RELAY_MAX_BODY_BYTES);
  const requestText = endpoint === "/v1/models" ? null : await readBodyText(req, max);
  if (requestText === null && endpoint !== "/v1/models") return openaiErrorResponse(413, `The request body exceeds ${max} bytes, the most a relayed call may send (RELAY_MAX_BODY_BYTES).`, "payload_too_large");
  const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.get("authorization") ?? "");
  if (!m?.[1]) return openaiErrorResponse(401, "Missing API key: send the openai_api_key from claim_episode as a bearer token.", "missing_api_key");
  // Checked before the key is: without the secret no key verifies, and the client would be told
  // its key is bad (or WebCrypto would throw on an HMAC key of length 0).
  if (!env.CLAIM_KEY_SECRET) return openaiErrorResponse(CLAIM_KEY_SECRET_MISSING.status, CLAIM_KEY_SECRET_MISSING.detail, CLAIM_KEY_SECRET_MISSING.error);
  const key = await verifyClaimKey(env.CLAIM_KEY_SECRET, m[1]);
  if (key === null) return openaiErrorResponse(401, "Invalid API key: it was not issued by this exchange for a claim.", "invalid_api_key");
  if (pathEngine !== undefined && pathEngine !== key.engine) {
    return openaiErrorResponse(401, `This key belongs to engine '${key.engine}', not '${pathEngine}'.`, "invalid_api_key");
  }
  // From here on a failure is the engine's to know of: counted, and sent to it in the background.
  const background = (work: Promise<unknown>): void => ctx.waitUntil(work);
  const failures = relayFailures(env, key.engine);
  const failed = (status: number, error: OpenAIError): void => failures.note(status, error, Date.now(), background);
  const res = await relayClaim(env, endpoint, key, requestText, background, failed);
  // A whole answer's error is read from a copy (small, and in memory), only when there is one;
  // a stream's were noted as it wrote them.
  if (res.status >= 400) {
    const text = await res.clone().text();
    failed(res.status, openaiErrorIn(text) ?? openaiErrorBody(res.status, text.slice(0, 300)));
  }
  return res;
}

/** A call of a claim whose key is good: its request checked, admitted, signed and sent to the gateway. */
async function relayClaim(
  env: Env,
  endpoint: RelayEndpoint,
  key: ClaimKeyFields,
  requestText: string | null,
  background: (work: Promise<unknown>) => void,
  failed: (status: number, error: OpenAIError) => void,
): Promise<Response> {

  let request: Record<string, unknown> | null = null;
  if (requestText !== null) {
    let raw: unknown;
    try {
      raw = JSON.parse(requestText);
    } catch {
      return openaiErrorResponse(400, "The request body is not valid JSON.", "invalid_json");
    }
    if (isChatRequest(raw)) request = raw;
    else {
      const shape = ChatRequestShape.safeParse(raw);
      if (!shape.success) return openaiErrorResponse(400, describeIssues(shape.error), "invalid_request");
      request = shape.data;
    }
  }

  // Admitted by this isolate's gate: one engine request per batch of calls, not one per call;
  // held there through a weight sync that keeps the claims (keep_claims_across_sync).
  const gate = claimGate(env, key.engine);
  const admitted = gate.admitCached(key, background) ?? (await gate.admitThroughSync(key, background));
  if (!admitted.ok) return openaiErrorResponse(admitted.status, admitted.detail, admitted.error);

  const deadline = numberVar(env.RELAY_DEADLINE_SECONDS, DEFAULT_DEADLINE_SECONDS);
  const envelope: RelayEnvelope & { request: null } = {
    endpoint,
    engine: key.engine,
    episode_uuid: key.episode_uuid,
    fence: key.fence,
    trainer_api_key: admitted.body.trainer_api_key,
    trainer_base_url: admitted.body.trainer_base_url,
    deadline_seconds: deadline,
    call: {
      call_id: crypto.randomUUID(),
      capture: admitted.body.capture,
      client_uuid: admitted.body.client_uuid,
      task_id: admitted.body.task_id,
      episode_type: admitted.body.episode_type,
      weight_version: admitted.body.weight_version,
      run: admitted.body.run,
      admitted_at: Date.now(),
    },
    request: null,
  };
  const body = envelopeText(envelope, requestText);
  const ts = Math.floor(Date.now() / 1000);
  // The engine's current secret: the key's incarnation is the engine's (admission checked it), and
  // the generation its last answer named, so a revocation moves the signing on within FRESH_MS.
  const secret = cachedGatewaySecret(env.CLAIM_KEY_SECRET, key.engine, key.incarnation, admitted.body.gateway_generation);
  const signature = await signEnvelope(typeof secret === "string" ? secret : await secret, ts, body);
  const network = env.RELAY_NETWORK;
  const send = (signal?: AbortSignal): Promise<Response> =>
    (network ? network.fetch.bind(network) : fetch)(admitted.body.gateway_url.replace(/\/+$/, "") + GATEWAY_RELAY_PATH, {
      method: "POST",
      headers: { "content-type": "application/json", [SIGNATURE_HEADER]: signature, [TIMESTAMP_HEADER]: String(ts) },
      body,
      signal,
    });

  if (request?.["stream"] === true) {
    // A stream already keeps a timer of its own (the keep-alives), and its deadline covers every
    // token. Its status waits for the gateway until the first keep-alive is due (sse.ts).
    return relayStream(send(AbortSignal.timeout(deadline * 1000)), numberVar(env.RELAY_KEEPALIVE_MS, DEFAULT_KEEP_ALIVE_MS), (e) => describeFailure(e, deadline), asksStreamUsage(request), failed);
  }
  // A whole answer waits under the isolate's deadline watch, not a timer of its own (deadline-watch.ts).
  let answer: Answer;
  try {
    answer = await deadlines.race(send().then(readUnlessPassed), deadline * 1000, background);
  } catch (e) {
    const f = describeFailure(e, deadline);
    return openaiErrorResponse(f.status, f.message, f.code);
  }
  const { res, text } = answer;
  if (text === null) return res;
  if (!res.ok) return gatewayErrorResponse(res, text);
  try {
    JSON.parse(text);
  } catch {
    return openaiErrorResponse(502, `The inference upstream answered something that is not JSON: ${text.slice(0, 200)}`, "upstream_garbage");
  }
  return new Response(text, { status: 200, headers: { "content-type": "application/json" } });
}

/** The relay's routes, as the router sees a path (a token in the path already taken out): the engine, and what is called. */
const RELAY_ROUTE = /^(?:\/e\/([^/]+))?\/v1\/(chat\/completions|completions|models)$/;
const ENDPOINTS: Record<string, { method: string; endpoint: RelayEndpoint }> = {
  "chat/completions": { method: "POST", endpoint: "/v1/chat/completions" },
  completions: { method: "POST", endpoint: "/v1/completions" },
  models: { method: "GET", endpoint: "/v1/models" },
};

/**
 * The relay's endpoint a request calls, by its method and its path as routed (routingPath), with
 * the engine the path names as written; null for any other request, a relay path's other methods
 * included (hono's).
 */
export function relayRoute(requestMethod: string, path: string): { endpoint: RelayEndpoint; engine: string | undefined } | null {
  const method = requestMethod === "HEAD" ? "GET" : requestMethod;
  if (method !== "POST" && method !== "GET") return null;
  const m = RELAY_ROUTE.exec(path);
  const route = m ? ENDPOINTS[m[2] ?? ""] : undefined;
  if (m === null || route === undefined || route.method !== method) return null;
  return { endpoint: route.endpoint, engine: m[1] };
}

/**
 * The answer to a relayed call, or null for any other request (hono serves those, and a relay
 * path's other methods). A HEAD is answered as its GET without the body, as hono does.
 */
export function serveRelay(request: Request, env: Env, ctx: ExecutionContext): Promise<Response> | null {
  const r = relayRoute(request.method, routingPath(request));
  if (r === null) return null;
  const answer = relay(request, env, ctx, r.endpoint, r.engine === undefined ? undefined : tryDecodeURIComponent(r.engine)).catch(internalError);
  return request.method === "HEAD" ? answer.then((r) => new Response(null, r)) : answer;
}
