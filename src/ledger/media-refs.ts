/**
 * Large media in recorded messages (a vision agent's screenshots, audio), stored once by
 * reference instead of inside every record (docs/ledger.md, "Media"). An agent resends each
 * screenshot in every later call, and one of 2 MB is over the record cap by itself: inline, it
 * made every call of its episode `truncated`. The gateway takes such strings out of a record's
 * messages and stores each once, content-addressed; readers give the reference back and serve
 * the media on its own route.
 *
 * The strings looked at are those of a content part (an element of a message's `content` array)
 * and of an object directly inside one: `image_url.url`, `input_audio.data`, any `data:` URL. A
 * reference is `rx-media:sha256:<64 hex>`; a client string that itself begins with `rx-media:`
 * is stored by reference too, whatever its size, so that in a record such a string is always a
 * reference and never the client's text.
 */
import { utf8Bytes } from "../protocol/limits";
import { isRecord } from "../protocol/record";

export const MEDIA_SCHEME = "rx-media:";
export const MEDIA_REF_PREFIX = `${MEDIA_SCHEME}sha256:`;
/** Smaller media stay inline: a reference and an upload cost more than they save. */
export const MEDIA_MIN_BYTES = 8 * 1024;
/** The most one media upload holds (its JSON body within MAX_MEDIA_UPLOAD_BODY_BYTES); a larger one stays inline. */
export const MAX_MEDIA_BYTES = 12_000_000;

export const SHA256_HEX = /^[0-9a-f]{64}$/;
const REF = /^rx-media:sha256:([0-9a-f]{64})$/;

export const mediaRef = (sha256: string): string => `${MEDIA_REF_PREFIX}${sha256}`;

/**
 * What a record holds in place of a medium the exchange refused to store (one older than the
 * agent, whose uploads are smaller): the medium's digest, in a string that is no reference, so
 * the record needs no medium and keeps everything else.
 */
export const MISSING_MEDIA_PREFIX = "rx-media-missing:sha256:";
export const missingMediaRef = (sha256: string): string => `${MISSING_MEDIA_PREFIX}${sha256}`;

/** The digest a reference names, or null for any other string. */
export function refDigest(s: string): string | null {
  return REF.exec(s)?.[1] ?? null;
}

/** Whether the gateway stores `s`, found under `key` of a content part, by reference (its UTF-8 size `bytes`). */
export function isMediaCandidate(s: string, key: string, bytes: number): boolean {
  if (bytes > MAX_MEDIA_BYTES || uploadBytes(s, bytes) > MAX_MEDIA_BYTES) return false;
  if (s.startsWith(MEDIA_SCHEME)) return true;
  // A text part's text is the conversation, whatever it begins with (pasted server-sent events: "data: ...").
  if (key === "text") return false;
  return bytes >= MEDIA_MIN_BYTES && (s.startsWith("data:") || key === "input_audio.data");
}

/**
 * Bytes of `s` in its upload's JSON body (`{"data": s}`), its escapes counted: a data: URL of
 * JSON text doubles there, past the upload's body bound, and a medium the Worker refuses would
 * cost its records. Base64, the common case, needs no escape and is not stringified.
 */
function uploadBytes(s: string, bytes: number): number {
  return /["\\\u0000-\u001f\ud800-\udfff]/.test(s) ? utf8Bytes(JSON.stringify(s)) - 2 : bytes;
}

/**
 * `messages` with each content part's string mapped by `f` (given the string and its key:
 * `url`, or `image_url.url`), copied only where something changed: the rest are the same objects.
 */
export function mapPartStrings(messages: readonly unknown[], f: (s: string, key: string) => string): unknown[] {
  let changed = false;
  const out = messages.map((m) => {
    if (!isRecord(m) || !Array.isArray(m["content"])) return m;
    let partsChanged = false;
    const parts = m["content"].map((p: unknown) => {
      const q = mapPart(p, f);
      if (q !== p) partsChanged = true;
      return q;
    });
    if (!partsChanged) return m;
    changed = true;
    return { ...m, content: parts };
  });
  return changed ? out : (messages as unknown[]);
}

function mapPart(p: unknown, f: (s: string, key: string) => string): unknown {
  if (!isRecord(p)) return p;
  let out: Record<string, unknown> | null = null;
  for (const [k, v] of Object.entries(p)) {
    if (k === "type") continue;
    let next: unknown = v;
    if (typeof v === "string") next = f(v, k);
    else if (isRecord(v)) {
      let inner: Record<string, unknown> | null = null;
      for (const [k2, v2] of Object.entries(v)) {
        if (typeof v2 !== "string") continue;
        const w = f(v2, `${k}.${k2}`);
        if (w !== v2) (inner ??= { ...v })[k2] = w;
      }
      if (inner !== null) next = inner;
    }
    if (next !== v) (out ??= { ...p })[k] = next;
  }
  return out ?? p;
}

/** The digests of the references in `messages`. */
export function mediaRefsOf(messages: readonly unknown[]): Set<string> {
  const refs = new Set<string>();
  mapPartStrings(messages, (s) => {
    if (s.startsWith(MEDIA_REF_PREFIX)) {
      const d = refDigest(s);
      if (d !== null) refs.add(d);
    }
    return s;
  });
  return refs;
}

/** `messages` with each reference replaced by its media, as `media` gives them (a digest it has not: left as the reference). */
export function inlineMedia(messages: readonly unknown[], media: ReadonlyMap<string, string>): unknown[] {
  return mapPartStrings(messages, (s) => {
    const d = s.startsWith(MEDIA_REF_PREFIX) ? refDigest(s) : null;
    return d === null ? s : (media.get(d) ?? s);
  });
}
