/**
 * Signing of relay envelopes between the Worker and an engine's inference gateway. The secret
 * is derived per engine from the deployment's CLAIM_KEY_SECRET, so no extra secret has to be
 * configured: the agent fetches it with its trainer token (GET /agent/gateway_secret). It is
 * derived from the engine's name, its incarnation (an engine made again under a deleted one's
 * name has another) and its gateway generation (up by one at each revocation of a token that
 * may read the secret), so what a retired engine's or a revoked token's holder fetched signs
 * nothing the gateway takes once it has the new secret.
 * WebCrypto by default, so the Worker and the Node agent share this file.
 */
import { SIGNATURE_MAX_SKEW_SECONDS } from "../protocol/relay";
import { settledCache } from "./settled-cache";
import { constantTimeEqual, hex } from "./tokens";

const enc = new TextEncoder();

/** Imported keys by secret: importing costs more than signing, and every relayed call signs. */
type HmacKey = Awaited<ReturnType<typeof crypto.subtle.importKey>>;
const hmacKey = settledCache<HmacKey>();
const importHmacKey = (key: string): Promise<HmacKey> => crypto.subtle.importKey("raw", enc.encode(key), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);

async function hmacHex(key: string, text: string): Promise<string> {
  const k = hmacKey(key, importHmacKey);
  return hex(new Uint8Array(await crypto.subtle.sign("HMAC", k instanceof Promise ? await k : k, enc.encode(text))));
}

/**
 * What a gateway secret is the MAC of. Per-claim keys are MACs of the same CLAIM_KEY_SECRET over
 * text that starts with an engine name (claim-key.ts), which never starts with "@": so no claim's
 * key can carry an engine's gateway secret, whatever its engine and episode are named. (Without
 * the "@", the key of an engine named "gateway" for an episode named "<engine>\n<incarnation>"
 * was one.)
 */
const secretText = (engine: string, incarnation: string, generation: number): string => `@gateway\n${engine}\n${incarnation}\n${generation}`;

/** The gateway secret of the engine `engine` of incarnation `incarnation`, at gateway generation `generation`. */
export function gatewaySecret(claimKeySecret: string, engine: string, incarnation: string, generation: number): Promise<string> {
  return hmacHex(claimKeySecret, secretText(engine, incarnation, generation));
}

const derivedSecrets = settledCache<string>();

/** gatewaySecret, kept per engine, incarnation and generation once derived: the relay signs with it on every call. */
export function cachedGatewaySecret(claimKeySecret: string, engine: string, incarnation: string, generation: number): string | Promise<string> {
  return derivedSecrets(`${engine}\n${incarnation}\n${generation}\n${claimKeySecret}`, () => gatewaySecret(claimKeySecret, engine, incarnation, generation));
}

/** What an envelope's signature covers. */
const signedText = (timestamp: number, body: string): string => `${timestamp}\n${body}`;

export function signEnvelope(secret: string, timestamp: number, body: string): Promise<string> {
  return hmacHex(secret, signedText(timestamp, body));
}

/** HMAC-SHA-256 of `text` with `key`, as lowercase hex. */
export type HmacHex = (key: string, text: string) => string | Promise<string>;

/**
 * Null when the signature is good and fresh; otherwise why not. `hmac` is WebCrypto's unless
 * the caller has a faster one: Node's WebCrypto runs each MAC on its thread pool, so the agent's
 * gateway passes node:crypto's synchronous `createHmac` (the same MAC).
 */
export async function checkEnvelope(
  secret: string,
  timestamp: string | undefined,
  signature: string | undefined,
  body: string,
  nowSeconds: number,
  hmac: HmacHex = hmacHex,
): Promise<string | null> {
  if (!timestamp || !signature) return "unsigned request: the gateway only accepts envelopes signed by the exchange";
  const fault = timestampFault(timestamp, nowSeconds);
  if (fault !== null) return fault;
  return constantTimeEqual(await hmac(secret, signedText(Number(timestamp), body)), signature) ? null : "bad signature";
}

/** Whole seconds since the epoch, as the exchange signs them. */
const TIMESTAMP_SHAPE = /^\d{1,12}$/;

/**
 * Why an envelope's timestamp is refused (null: taken). One further than
 * SIGNATURE_MAX_SKEW_SECONDS from this host's clock is most often no replay but a clock that
 * is off, the GPU host's or (rarely) the exchange's: the answer says by how much, since every
 * relayed call fails until the clocks agree.
 */
export function timestampFault(timestamp: string, nowSeconds: number): string | null {
  if (!TIMESTAMP_SHAPE.test(timestamp)) return "malformed signature timestamp";
  const off = Number(timestamp) - nowSeconds;
  if (Math.abs(off) <= SIGNATURE_MAX_SKEW_SECONDS) return null;
  // Rounded up: a refused offset is never said to be within the bound (300.4 s is "301 s").
  const by = Math.abs(off) >= 3600 ? `${(Math.abs(off) / 3600).toFixed(1)} h` : `${Math.ceil(Math.abs(off))} s`;
  return `stale signature timestamp: the exchange signed it ${by} ${off < 0 ? "before" : "after"} this host's clock (at most ${SIGNATURE_MAX_SKEW_SECONDS} s is taken); if the clocks differ, set this host's right (NTP: timedatectl, chrony)`;
}
