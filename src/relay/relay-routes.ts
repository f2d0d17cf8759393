/**
 * OpenAI-compatible routes for claimed episodes: /v1/... at the origin (the per-claim key names
 * its engine), at /e/<engine>/v1/... and at /e/<engine>/t/<token>/v1/... (where AgentJet's
 * SwarmClient sends them after swapping the host of openai_base_url for its base URL).
 * The key is checked here, the claim by the engine through this isolate's gate (claim-gate.ts:
 * the engine's answers are kept for a second, the calls sent to it in batches); the call then
 * goes, signed, to the engine's inference gateway on the GPU host.
 */
import type { Context, Hono } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import type { Env } from "../env";
import { verifyClaimKey } from "../auth/claim-key";
import { gatewaySecret, signEnvelope } from "../auth/gateway-signature";
import { ChatRequestShape, envelopeText, GATEWAY_RELAY_PATH, OpenAIError, SIGNATURE_HEADER, TIMESTAMP_HEADER, type RelayEndpoint, type RelayEnvelope } from "../protocol/relay";
import { describeIssues } from "../http/errors";
import { claimGate } from "./claim-gates";
import { openaiError } from "./openai-errors";
import { relayStream } from "./sse";

/** How long a relayed call may take end to end unless RELAY_DEADLINE_SECONDS says otherwise. */
const DEFAULT_DEADLINE_SECONDS = 600;
const DEFAULT_KEEP_ALIVE_MS = 10_000;

/** Derived secrets by engine: the derivation is an HMAC per call otherwise. */
const derived = new Map<string, Promise<string>>();

function engineGatewaySecret(claimKeySecret: string, engine: string): Promise<string> {
  const k = `${engine}\n${claimKeySecret}`;
  let s = derived.get(k);
  if (s === undefined) {
    if (derived.size > 1000) derived.clear();
    s = gatewaySecret(claimKeySecret, engine);
    derived.set(k, s);
  }
  return s;
}

function numberVar(v: string | undefined, fallback: number): number {
  const n = Number(v);
  return v !== undefined && Number.isFinite(n) && n > 0 ? n : fallback;
}

function describeFailure(e: unknown, deadline: number): { status: number; message: string; code: string } {
  const name = e instanceof Error ? e.name : "";
  if (name === "TimeoutError" || name === "AbortError") {
    return { status: 504, message: `the inference upstream did not answer within ${deadline} s`, code: "upstream_timeout" };
  }
  return { status: 502, message: `the inference gateway could not be reached: ${e instanceof Error ? e.message : String(e)}`, code: "gateway_unreachable" };
}

async function relay(c: Context<{ Bindings: Env }>, endpoint: RelayEndpoint): Promise<Response> {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(c.req.header("authorization") ?? "");
  if (!m?.[1]) return openaiError(c, 401, "Missing API key: send the openai_api_key from claim_episode as a bearer token.", "missing_api_key");
  const key = await verifyClaimKey(c.env.CLAIM_KEY_SECRET, m[1]);
  if (key === null) return openaiError(c, 401, "Invalid API key: it was not issued by this exchange for a claim.", "invalid_api_key");
  const pathEngine = c.req.param("engine");
  if (pathEngine !== undefined && pathEngine !== key.engine) {
    return openaiError(c, 401, `This key belongs to engine '${key.engine}', not '${pathEngine}'.`, "invalid_api_key");
  }

  let request: Record<string, unknown> | null = null;
  let requestText: string | null = null;
  if (endpoint !== "/v1/models") {
    requestText = await c.req.text();
    let raw: unknown;
    try {
      raw = JSON.parse(requestText);
    } catch {
      return openaiError(c, 400, "The request body is not valid JSON.", "invalid_json");
    }
    const shape = ChatRequestShape.safeParse(raw);
    if (!shape.success) return openaiError(c, 400, describeIssues(shape.error), "invalid_request");
    request = shape.data;
  }

  // Admitted by this isolate's gate: one engine request per batch of calls, not one per call;
  // held there through a weight sync that keeps the claims (keep_claims_across_sync).
  const admitted = await claimGate(c.env, key.engine).admitThroughSync(key, (work) => c.executionCtx.waitUntil(work));
  if (!admitted.ok) return openaiError(c, admitted.status as ContentfulStatusCode, admitted.detail, admitted.error);

  const deadline = numberVar(c.env.RELAY_DEADLINE_SECONDS, DEFAULT_DEADLINE_SECONDS);
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
      weight_version: admitted.body.weight_version,
      run: admitted.body.run,
      admitted_at: Date.now(),
    },
    request: null,
  };
  const body = envelopeText(envelope, requestText);
  const ts = Math.floor(Date.now() / 1000);
  const signature = await signEnvelope(await engineGatewaySecret(c.env.CLAIM_KEY_SECRET, key.engine), ts, body);
  const network = c.env.RELAY_NETWORK;
  const upstream = (network ? network.fetch.bind(network) : fetch)(admitted.body.gateway_url.replace(/\/+$/, "") + GATEWAY_RELAY_PATH, {
    method: "POST",
    headers: { "content-type": "application/json", [SIGNATURE_HEADER]: signature, [TIMESTAMP_HEADER]: String(ts) },
    body,
    signal: AbortSignal.timeout(deadline * 1000),
  });

  if (request?.["stream"] === true) {
    return relayStream(upstream, numberVar(c.env.RELAY_KEEPALIVE_MS, DEFAULT_KEEP_ALIVE_MS), (e) => describeFailure(e, deadline));
  }
  let res: Response;
  let text: string;
  try {
    res = await upstream;
    text = await res.text();
  } catch (e) {
    const f = describeFailure(e, deadline);
    return openaiError(c, f.status as ContentfulStatusCode, f.message, f.code);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return openaiError(c, 502, `The inference upstream answered something that is not JSON: ${text.slice(0, 200)}`, "upstream_garbage");
  }
  if (!res.ok) {
    const err = OpenAIError.safeParse(json);
    const status = (res.status >= 400 && res.status < 600 ? res.status : 502) as ContentfulStatusCode;
    return err.success ? c.json(err.data, status) : openaiError(c, status, `The inference upstream answered ${res.status}: ${text.slice(0, 300)}`, "upstream_error");
  }
  // Parsed only to refuse garbage: the upstream's own text goes back, not a re-serialization.
  return c.body(text, 200, { "content-type": "application/json" });
}

/** The relay's paths, as the router sees them (a token in the path already taken out). */
export const RELAY_PATH = /^(\/e\/[^/]+)?\/v1\//;

export function relayRoutes(app: Hono<{ Bindings: Env }>): void {
  for (const prefix of ["", "/e/:engine"]) {
    app.post(`${prefix}/v1/chat/completions`, (c) => relay(c, "/v1/chat/completions"));
    app.post(`${prefix}/v1/completions`, (c) => relay(c, "/v1/completions"));
    app.get(`${prefix}/v1/models`, (c) => relay(c, "/v1/models"));
  }
}
