/**
 * Per-claim OpenAI keys. A client gets its own key for the LLM relay instead of the trainer's
 * secret one; the key names its engine (so `/v1/...` at the origin can route it) and is bound
 * to one claim by its fence, so it dies when that claim ends, is aborted, reaped or superseded.
 * It also names the engine's incarnation: an engine deleted and created again under the same
 * name starts its fences again, and a key of the old engine must not fit a claim of the new one.
 *
 * Format: `sk-rx.<engine>.<incarnation>.<fence>.<b64url(episode_uuid)>.<b64url(hmac)>`, or
 * `sk-rx.<engine>.<fence>.<b64url(episode_uuid)>.<b64url(hmac)>` for engines made before
 * incarnations (theirs is ""), so keys out when they were are still good.
 */
import { ENGINE_NAME_PATTERN } from "../protocol/admin";
import { settledCache } from "./settled-cache";
import { b64url } from "./tokens";

export type ClaimKeyFields = { engine: string; incarnation: string; episode_uuid: string; fence: number };

const utf8 = new TextEncoder();

/** Imported keys by secret (each claim signs, and a new key verifies, with one). */
const keys = settledCache<CryptoKey>();
const importKey = (secret: string): Promise<CryptoKey> => crypto.subtle.importKey("raw", utf8.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign", "verify"]);
const hmacKey = (secret: string): CryptoKey | Promise<CryptoKey> => keys(secret, importKey);

/** A new engine's incarnation: random, short, and made of characters a key's parts may hold. */
export function newIncarnation(): string {
  return b64url(crypto.getRandomValues(new Uint8Array(6)));
}

// "@" cannot occur in an engine name, so no text with an incarnation equals one without.
const signedText = (f: ClaimKeyFields): string =>
  `${f.engine}${f.incarnation === "" ? "" : `@${f.incarnation}`}\n${f.episode_uuid}\n${f.fence}`;

export async function signClaimKey(secret: string, f: ClaimKeyFields): Promise<string> {
  const sig = await crypto.subtle.sign("HMAC", await hmacKey(secret), utf8.encode(signedText(f)));
  const ep = b64url(utf8.encode(f.episode_uuid));
  const incarnation = f.incarnation === "" ? "" : `${f.incarnation}.`;
  return `sk-rx.${f.engine}.${incarnation}${f.fence}.${ep}.${b64url(new Uint8Array(sig))}`;
}

/**
 * Decodes base64url only in the spelling b64url writes: no padding, and no set bits beyond the
 * last byte. atob alone accepts a last character with a changed padding bit as the same bytes,
 * which would give one key several spellings.
 */
function fromB64url(s: string): Uint8Array | null {
  let bytes: Uint8Array;
  try {
    const bin = atob(s.replace(/-/g, "+").replace(/_/g, "/"));
    bytes = Uint8Array.from(bin, (ch) => ch.charCodeAt(0));
  } catch {
    return null;
  }
  return b64url(bytes) === s ? bytes : null;
}

/** A fence as signClaimKey writes it: decimal digits, no sign, no leading zero, no exponent. */
const FENCE_TEXT = /^(0|[1-9][0-9]{0,15})$/;
/** An incarnation as newIncarnation writes it. */
const INCARNATION_TEXT = /^[A-Za-z0-9_-]{8}$/;
/**
 * Strict UTF-8: a sequence that is not UTF-8 is refused, not replaced by U+FFFD (which many
 * spellings share), and a leading BOM is kept as a character, not dropped (which would let
 * "\uFEFFx" stand for "x").
 */
const strictUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/**
 * Keys this isolate has verified, by secret: a client makes many calls with its claim's key,
 * and decoding and checking it again cost more workerd CPU than the rest of a relayed call's
 * checks. Only keys that verified are kept (a forged key is checked every time), at most
 * VERIFIED_MAX per secret, the oldest dropped first.
 */
const verified = new Map<string, Map<string, ClaimKeyFields>>();
const VERIFIED_MAX = 20_000;

/**
 * Returns the fields when the key is one signClaimKey wrote, spelled exactly as it spells it and
 * signed by us; else null. Liveness of the claim is the engine's call.
 */
export async function verifyClaimKey(secret: string, key: string): Promise<ClaimKeyFields | null> {
  let bySecret = verified.get(secret);
  const known = bySecret?.get(key);
  if (known !== undefined) return { ...known };
  const fields = await checkClaimKey(secret, key);
  if (fields === null) return null;
  if (bySecret === undefined) {
    if (verified.size >= 4) verified.clear();
    verified.set(secret, (bySecret = new Map()));
  }
  if (bySecret.size >= VERIFIED_MAX) bySecret.delete(bySecret.keys().next().value as string);
  bySecret.set(key, fields);
  return { ...fields };
}

async function checkClaimKey(secret: string, key: string): Promise<ClaimKeyFields | null> {
  const parts = key.split(".");
  if ((parts.length !== 5 && parts.length !== 6) || parts[0] !== "sk-rx") return null;
  const [engine, incarnation, fenceText, epText, sigText] = (parts.length === 6 ? parts.slice(1) : [parts[1], "", ...parts.slice(2)]) as [
    string,
    string,
    string,
    string,
    string,
  ];
  // An engine name has no "@": without this, sk-rx.<e>@<inc>.<fence>... would sign as the key of <e>, incarnation <inc>.
  if (!ENGINE_NAME_PATTERN.test(engine)) return null;
  if (parts.length === 6 && !INCARNATION_TEXT.test(incarnation)) return null;
  if (!FENCE_TEXT.test(fenceText)) return null;
  const fence = Number(fenceText);
  const epBytes = fromB64url(epText);
  const sig = fromB64url(sigText);
  if (!Number.isSafeInteger(fence) || !epBytes || !sig) return null;
  let episodeUuid: string;
  try {
    episodeUuid = strictUtf8.decode(epBytes);
  } catch {
    return null;
  }
  const fields = { engine, incarnation, episode_uuid: episodeUuid, fence };
  const good = await crypto.subtle.verify("HMAC", await hmacKey(secret), sig, utf8.encode(signedText(fields)));
  return good ? fields : null;
}
