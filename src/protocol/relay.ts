/**
 * The LLM relay: a client's OpenAI-compatible call, checked by the Worker against its per-claim
 * key, travels to the engine's inference gateway (run by the local-agent on the GPU host) as a
 * signed envelope. The gateway answers with the upstream's response, streamed or whole.
 */
import { z } from "zod";
import { CAPTURE_MODES, CallContext, CallContextAsRead } from "./ledger";
import { openEnum } from "./open-enum";
import { isWellFormed } from "./limits";
import { isRecord } from "./record";
import { RELAY_ENDPOINTS, RelayEndpoint } from "./relay-endpoint";

export { RELAY_ENDPOINTS, RelayEndpoint } from "./relay-endpoint";

/** Where the Worker posts envelopes, below the gateway's base URL. */
export const GATEWAY_RELAY_PATH = "/rx/relay";
/** Headers carrying the envelope's signature: HMAC-SHA256 over `${timestamp}\n${body}`. */
export const SIGNATURE_HEADER = "x-rx-signature";
export const TIMESTAMP_HEADER = "x-rx-timestamp";
/** A signed envelope older or newer than this is refused by the gateway. */
export const SIGNATURE_MAX_SKEW_SECONDS = 300;

export const RelayEnvelope = z.object({
  endpoint: RelayEndpoint,
  engine: z.string(),
  episode_uuid: z.string(),
  fence: z.number().int(),
  /** The trainer's own per-episode key and URL, as it registered them: the gateway routes by them. */
  trainer_api_key: z.string(),
  trainer_base_url: z.string(),
  /** Seconds the gateway may spend on the upstream before giving up. */
  deadline_seconds: z.number().positive(),
  /** What the ledger needs to record the call (absent from Workers older than the ledger: record nothing). */
  call: CallContext.optional(),
  /** The client's request body (null for GET /v1/models). */
  request: z.record(z.string(), z.unknown()).nullable(),
});
export type RelayEnvelope = z.infer<typeof RelayEnvelope>;

/**
 * An envelope as a gateway reads one RelayEnvelope refuses: a Worker is upgraded before the
 * agents, and one newer than the gateway may sign in a capture mode or an endpoint the gateway
 * does not know. Read so, the gateway says what it does with them instead of "does not parse".
 */
export const RelayEnvelopeAsRead = RelayEnvelope.extend({ endpoint: openEnum(RELAY_ENDPOINTS), call: CallContextAsRead.optional() });
export type RelayEnvelopeAsRead = z.infer<typeof RelayEnvelopeAsRead>;

const ENVELOPE_KEYS = new Set(["endpoint", "engine", "episode_uuid", "fence", "trainer_api_key", "trainer_base_url", "deadline_seconds", "call", "request"]);
const CALL_KEYS = new Set(["call_id", "capture", "client_uuid", "task_id", "episode_type", "weight_version", "run", "admitted_at"]);
const hasOnly = (v: Record<string, unknown>, keys: Set<string>): boolean => Object.keys(v).every((k) => keys.has(k));
const isCount = (v: unknown): boolean => Number.isSafeInteger(v) && (v as number) >= 0;
const isText = (v: unknown): boolean => typeof v === "string" && isWellFormed(v);

function isCallContext(v: unknown): boolean {
  if (!isRecord(v) || !hasOnly(v, CALL_KEYS)) return false;
  const c = v as Record<keyof CallContext, unknown>;
  return (
    typeof c.call_id === "string" &&
    c.call_id.length >= 1 &&
    c.call_id.length <= 64 &&
    isWellFormed(c.call_id) &&
    (CAPTURE_MODES as readonly unknown[]).includes(c.capture) &&
    isText(c.client_uuid) &&
    isText(c.task_id) &&
    (c.episode_type === undefined || isText(c.episode_type)) &&
    (c.weight_version === null || Number.isSafeInteger(c.weight_version)) &&
    isCount(c.run) &&
    isCount(c.admitted_at)
  );
}

/**
 * Whether `v` is an envelope RelayEnvelope accepts as it is (no unknown keys for zod to strip),
 * without zod's machinery: the gateway checks every relayed call's envelope, and zod's check
 * was a tenth of its CPU per call. Anything this refuses goes to zod, whose answer stands;
 * test/relay-envelope.test.ts holds this to never accepting what zod refuses.
 */
export function isRelayEnvelope(v: unknown): v is RelayEnvelope {
  if (!isRecord(v) || !hasOnly(v, ENVELOPE_KEYS)) return false;
  const e = v as Record<keyof RelayEnvelope, unknown>;
  return (
    (RELAY_ENDPOINTS as readonly unknown[]).includes(e.endpoint) &&
    typeof e.engine === "string" &&
    typeof e.episode_uuid === "string" &&
    Number.isSafeInteger(e.fence) &&
    typeof e.trainer_api_key === "string" &&
    typeof e.trainer_base_url === "string" &&
    typeof e.deadline_seconds === "number" &&
    e.deadline_seconds > 0 &&
    (e.call === undefined || isCallContext(e.call)) &&
    (e.request === null || isRecord(e.request))
  );
}

const REQUEST_KEY = '"request":';
const NULL_REQUEST = `${REQUEST_KEY}null}`;

/**
 * The envelope's text with the client's request as the client sent it, for the Worker: an
 * agent's long history is not serialized a second time (about 1 ms per 200 KB). `requestText`
 * must be one JSON object, already parsed and checked; `envelope` has `request: null`, last.
 */
export function envelopeText(envelope: RelayEnvelope & { request: null }, requestText: string | null): string {
  const text = JSON.stringify(envelope);
  if (requestText === null) return text;
  if (!text.endsWith(NULL_REQUEST)) throw new Error("relay envelope: `request` must be its last field");
  return `${text.slice(0, -NULL_REQUEST.length)}${REQUEST_KEY}${requestText}}`;
}

const flat = (v: unknown): boolean => typeof v !== "object" || v === null;
const callIsFlat = (v: unknown): boolean => isRecord(v) && !("request" in v) && Object.values(v).every(flat);

/**
 * The request's own JSON text inside an envelope's text, for the gateway to send on without
 * serializing it again; null when the envelope is not laid out for that (then serialize
 * `request`). `parsed` is the envelope's JSON.parse. Every other field is a string or a number,
 * whose JSON holds no bare quote, or `call`, an object of such fields none of which is named
 * `request`; so the first `"request":` is the key, and when it is also the last key, the text
 * from there to the closing brace is the request.
 */
export function envelopeRequestText(text: string, parsed: Record<string, unknown>): string | null {
  const keys = Object.keys(parsed);
  if (keys.at(-1) !== "request" || parsed["request"] === null || typeof parsed["request"] !== "object") return null;
  if (!keys.every((k) => k === "request" || flat(parsed[k]) || (k === "call" && callIsFlat(parsed[k])))) return null;
  const at = text.indexOf(REQUEST_KEY);
  const end = text.lastIndexOf("}");
  return at < 0 || end <= at ? null : text.slice(at + REQUEST_KEY.length, end);
}

/** OpenAI's error shape, which OpenAI clients parse. */
export const OpenAIError = z.object({
  error: z.object({ message: z.string(), type: z.string(), param: z.string().nullable(), code: z.string().nullable() }),
});
export type OpenAIError = z.infer<typeof OpenAIError>;

export const ChatRequestShape = z
  .object({
    model: z.string().min(1, "model is required"),
    // OpenAI's `boolean | null` (a client that dumps its model with None fields sends null): not streamed.
    stream: z.boolean().nullish(),
  })
  .loose();
export type ChatRequestShape = z.infer<typeof ChatRequestShape>;

/**
 * Whether ChatRequestShape accepts `v`, without zod's machinery: every relayed call is checked,
 * and the relay asks zod only of a body this refuses, for the refusal's words (and its answer
 * stands if the two ever disagree). test/relay-envelope.test.ts holds them to the same answers.
 */
export function isChatRequest(v: unknown): v is ChatRequestShape {
  if (typeof v !== "object" || v === null || Array.isArray(v)) return false;
  const { model, stream } = v as { model?: unknown; stream?: unknown };
  return typeof model === "string" && model.length > 0 && (stream === undefined || stream === null || typeof stream === "boolean");
}

/** The codes of the relay's 503s (claim-gate.ts, relay-routes.ts): the engine is busy elsewhere, not broken. */
export const RELAY_REFUSAL_CODES = ["engine_not_rolling", "sync_hold_expired", "no_gateway", "engine_unreachable", "admission_unsettled"] as const;

/**
 * The failure kinds ("<status> <code>") the exchange itself answers with a 5xx: its refusals, and
 * the gateway or upstream not reached, refusing its credentials, answering no JSON, too slow. The
 * metrics give each from 0, so that a rate over them sees a kind's first burst.
 */
export const RELAY_OWN_FAILURE_KINDS = [
  ...RELAY_REFUSAL_CODES.map((c) => `503 ${c}`),
  "502 gateway_unreachable",
  "502 gateway_refused",
  "502 upstream_refused",
  "502 upstream_garbage",
  "504 upstream_timeout",
] as const;

/**
 * Relayed calls that failed as their clients got them, counted by one isolate of the Worker
 * since its last report (src/relay/relay-failures.ts): by kind ("<status> <code>"), and the latest.
 */
export type RelayFailureReport = { counts: Record<string, number>; last: { kind: string; message: string; at: number } };

/** Adds `n` failures of `kind` to `counts`, which names at most `maxKinds` kinds: past that, the rest count as "other". */
export function countFailures(counts: Map<string, number>, kind: string, n: number, maxKinds: number): void {
  const counted = counts.has(kind) || counts.size < maxKinds ? kind : "other";
  counts.set(counted, (counts.get(counted) ?? 0) + n);
}

export const GatewaySecretResponse = z.object({ secret: z.string() });
