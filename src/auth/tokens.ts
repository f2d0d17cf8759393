/** Engine tokens: random secrets shown once; only their SHA-256 is stored anywhere. */
import type { Role } from "../protocol/admin";

const B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/**
 * Base64url without padding. By table, not btoa and three regex replaces: every claim encodes
 * its key with it, and that was the engine's costliest function of its own under load (perf).
 */
function b64url(bytes: Uint8Array): string {
  let out = "";
  let i = 0;
  for (; i + 2 < bytes.length; i += 3) {
    const n = (bytes[i]! << 16) | (bytes[i + 1]! << 8) | bytes[i + 2]!;
    out += B64URL[n >>> 18]! + B64URL[(n >>> 12) & 63]! + B64URL[(n >>> 6) & 63]! + B64URL[n & 63]!;
  }
  if (i < bytes.length) {
    const n = (bytes[i]! << 16) | ((bytes[i + 1] ?? 0) << 8);
    out += B64URL[n >>> 18]! + B64URL[(n >>> 12) & 63]!;
    if (i + 1 < bytes.length) out += B64URL[(n >>> 6) & 63]!;
  }
  return out;
}

const HEX = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, "0"));

/** Lowercase hex, by table: every relayed call's envelope signature is hex, and a map over toString cost more than the MAC. */
function hex(bytes: Uint8Array): string {
  let out = "";
  for (const b of bytes) out += HEX[b];
  return out;
}

export function newTokenSecret(role: Role): string {
  return `rx_${role}_${b64url(crypto.getRandomValues(new Uint8Array(24)))}`;
}

export function newTokenId(): string {
  return `tok_${b64url(crypto.getRandomValues(new Uint8Array(9)))}`;
}

export async function hashToken(token: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(token));
  return hex(new Uint8Array(digest));
}

/** Compares two secrets without leaking where they differ through timing. */
export function constantTimeEqual(a: string, b: string): boolean {
  // UTF-16 code units, not encoded bytes: equal strings have equal units, so nothing is encoded.
  let diff = a.length ^ b.length;
  const n = Math.max(a.length, b.length);
  for (let i = 0; i < n; i++) diff |= (a.charCodeAt(i) | 0) ^ (b.charCodeAt(i) | 0);
  return diff === 0;
}

export { b64url, hex };
