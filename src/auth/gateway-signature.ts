/**
 * Signing of relay envelopes between the Worker and an engine's inference gateway. The secret
 * is derived per engine from the deployment's CLAIM_KEY_SECRET, so no extra secret has to be
 * configured: the agent fetches it with its trainer token (GET /agent/gateway_secret).
 * WebCrypto only, so the Worker and the Node agent share this file.
 */
import { SIGNATURE_MAX_SKEW_SECONDS } from "../protocol/relay";

const enc = new TextEncoder();
const hex = (buf: ArrayBuffer): string => [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, "0")).join("");

/** Imported keys by secret: importing costs more than signing, and every relayed call signs. */
const imported = new Map<string, ReturnType<typeof crypto.subtle.importKey>>();

async function hmacHex(key: string, text: string): Promise<string> {
  let k = imported.get(key);
  if (k === undefined) {
    if (imported.size > 1000) imported.clear();
    k = crypto.subtle.importKey("raw", enc.encode(key), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
    imported.set(key, k);
  }
  return hex(await crypto.subtle.sign("HMAC", await k, enc.encode(text)));
}

export function gatewaySecret(claimKeySecret: string, engine: string): Promise<string> {
  return hmacHex(claimKeySecret, `gateway\n${engine}`);
}

export function signEnvelope(secret: string, timestamp: number, body: string): Promise<string> {
  return hmacHex(secret, `${timestamp}\n${body}`);
}

/** Null when the signature is good and fresh; otherwise why not. */
export async function checkEnvelope(secret: string, timestamp: string | undefined, signature: string | undefined, body: string, nowSeconds: number): Promise<string | null> {
  if (!timestamp || !signature) return "unsigned request: the gateway only accepts envelopes signed by the exchange";
  const ts = Number(timestamp);
  if (!Number.isFinite(ts) || Math.abs(nowSeconds - ts) > SIGNATURE_MAX_SKEW_SECONDS) return "stale or malformed signature timestamp";
  const expected = await signEnvelope(secret, ts, body);
  if (expected.length !== signature.length) return "bad signature";
  let diff = 0;
  for (let i = 0; i < expected.length; i++) diff |= expected.charCodeAt(i) ^ signature.charCodeAt(i);
  return diff === 0 ? null : "bad signature";
}
